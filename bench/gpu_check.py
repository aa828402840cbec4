"""distir on a GPU, checked by one command that writes one Markdown report.

    python bench/gpu_check.py --wheels gpu_wheels -o gpu_check.md     # on the GPU machine
    python bench/gpu_check.py --simulate -o gpu_check.md              # anywhere (CI: a test)

Four checks, each timed, each saying where it ran:

1. the ``gpu``-marked tests (``pytest -m gpu``);
2. every example and schedule (``test/support/lowered.py``) on the ``nccl`` backend's
   device with 1 rank, against the reference interpreter;
3. the generated element-wise kernel (SGD's update) and fused optimizer (the fused
   Adam schedule) at 2^26 elements against the device's copy bandwidth;
4. distir's AdamW step against ``torch.optim.AdamW(fused=True)`` on the same device.

The GPU machine has no network and lacks distir and some of its requirements:
``bench/gpu_prepare.sh`` (run here) writes their wheels into ``gpu_wheels/``, which the
device run carries; ``--wheels gpu_wheels`` installs those its Python lacks into
``/tmp/site`` (``--site``; ``pip install --no-index --no-deps --target``) and runs the
check with them first on its path. docs/runtime.md gives the exact commands.

Without a GPU (``--simulate``, or when none is found) the checks run their simulator
subset: numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) on the CPU for 2 and 3 (a
few schedules, small sizes), torch on the CPU for 4, and the report says that nothing
ran on a GPU. Exit code: 0 when every check that ran passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_SITE = "DISTIR_GPU_CHECK_SITE"


# ======================================================================================
# Installing what the GPU machine lacks (before anything imports distir)
# ======================================================================================


def _distribution(wheel: Path) -> str:
    return wheel.name.split("-")[0].replace("_", "-").lower()


def install_missing(wheels: Path, site: Path) -> list[str]:
    """Install distir and each wheel of ``wheels`` whose distribution this Python lacks
    into ``site``; the names installed."""
    from importlib.metadata import PackageNotFoundError, version

    chosen = []
    for w in sorted(wheels.glob("*.whl")):
        name = _distribution(w)
        try:
            version(name)
            if name != "distir":
                continue  # the machine's own copy stays in use
        except PackageNotFoundError:
            pass
        chosen.append(w)
    if chosen:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--upgrade", "--target", str(site), *map(str, chosen)]
        subprocess.run(cmd, check=True)
    return [_distribution(w) for w in chosen]


def reexec_with_site(site: Path, installed: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")])))
    env[ENV_SITE] = f"{site}:{','.join(installed)}"
    argv = [a for a in sys.argv[1:]]
    os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)


def gpu_present() -> str | None:
    """The GPU's name (``nvidia-smi -L``), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


# ======================================================================================
# The report
# ======================================================================================


class Report:
    def __init__(self, simulate: bool, where: str) -> None:
        self.simulate, self.where = simulate, where
        self.sections: list[tuple[str, str, list[str], bool, float]] = []

    def add(self, title: str, where: str, lines: list[str], ok: bool, seconds: float) -> None:
        self.sections.append((title, where, lines, ok, seconds))
        print(f"gpu_check: {title}: {'ok' if ok else 'FAILED'} ({seconds:.1f} s, {where})", flush=True)

    @property
    def ok(self) -> bool:
        return all(ok for _, _, _, ok, _ in self.sections)

    def markdown(self, env: list[str]) -> str:
        out = ["# distir GPU check", ""]
        if self.simulate:
            out += ["**Nothing ran on a GPU.** This machine has none (or `--simulate` was given): the device code ran in "
                    "numba's CUDA simulator on the CPU and torch on the CPU; the timings below are not a GPU's.", ""]
        else:
            out += [f"Ran on **{self.where}**.", ""]
        out += ["| check | where it ran | result | seconds |", "|---|---|---|---|"]
        for title, where, _, ok, s in self.sections:
            out.append(f"| {title} | {where} | {'passed' if ok else '**FAILED**'} | {s:.1f} |")
        out += ["", "## Environment", ""] + [f"- {e}" for e in env]
        for title, where, lines, ok, s in self.sections:
            out += ["", f"## {title}", "", f"Where: {where}. {'Passed' if ok else '**Failed**'} in {s:.1f} s.", ""] + lines
        return "\n".join(out) + "\n"


def environment(site: str, installed: list[str]) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    lines = [f"Python {platform.python_version()} on {platform.machine()} ({platform.platform()})", f"load average {os.getloadavg()}"]
    lines.append(", ".join(f"{n} {v(n)}" for n in ("distir", "xdsl", "numpy", "numba", "numba-cuda", "torch", "nccl4py", "mpi4py")))
    lines.append(", ".join(f"{n} {v(n)}" for n in ("cuda-core", "cuda-pathfinder", "cuda-bindings", "nvidia-nccl-cu13", "nvidia-nccl-cu12", "cupy-cuda13x")))
    if NCCL_PROBLEM:
        lines.append(f"NCCL could not be used: {NCCL_PROBLEM[0]}")
    import distir

    lines.append(f"distir imported from {Path(distir.__file__).parent}")
    if installed:
        lines.append(f"installed from the carried wheels into {site}: {', '.join(installed)}")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        lines.append("NUMBA_ENABLE_CUDASIM=1: numba's CUDA simulator")
    return lines


# ======================================================================================
# 1. the gpu-marked tests
# ======================================================================================


def check_gpu_tests(report: Report) -> None:
    t0 = time.perf_counter()
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "test").rglob("test_*.py") if "mark.gpu" in p.read_text())
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-o", "addopts=", "-p", "no:cacheprovider", "-rs", *files]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}  # the simulator is no GPU to them
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
    summary = tail[-1] if tail else "(no output)"
    where = report.where if not report.simulate else "this CPU (they skip without a GPU)"
    report.add("gpu-marked tests", where, [f"`{' '.join(['pytest', '-m', 'gpu', *files])}`: {summary}", "", "```", *tail, "```"],
               p.returncode in (0, 5) and "failed" not in summary and "error" not in summary, time.perf_counter() - t0)


# ======================================================================================
# 2. every example and schedule on the device, 1 rank, against the interpreter
# ======================================================================================


NCCL_PROBLEM: list[str] = []
"""Why NCCL's 1-rank communicator could not be made on the GPU (then the kernels run
with a 1-rank host communicator, and the report says so); empty when it could."""


def on_device(report: Report, what: str = "nccl backend, 1 rank") -> str:
    if NCCL_PROBLEM:
        return f"{report.where} (generated kernels on the GPU; NCCL unavailable, 1-rank host communicator)"
    return f"{report.where} ({what})"


class OneRank:
    """A lowered program's one rank on the device: NCCL (GPU) or a thread comm (simulator)."""

    def __init__(self, program, simulate: bool) -> None:
        from distir.runtime.cuda import CudaDevice
        from distir.runtime.executor import RankExecutor

        self.program, self.device = program, CudaDevice()
        if simulate:
            from distir.runtime.local import LocalWorld
            from distir.runtime.recording import HostViewComm

            comm = HostViewComm(LocalWorld(1).comm(0), self.device.host_view)
        elif NCCL_PROBLEM:
            comm = self._without_nccl()
        else:
            try:
                from distir.runtime.nccl import world_comm

                comm, _ = world_comm(1)
                comm.device = self.device
            except Exception as e:  # noqa: BLE001 - the kernels still run on the GPU; the report says so
                NCCL_PROBLEM.append(f"{type(e).__name__}: {str(e)[:300]}")
                comm = self._without_nccl()
        self.ex = RankExecutor(program, 0, comm, self.device)

    def _without_nccl(self):
        from distir.runtime.local import LocalWorld
        from distir.runtime.recording import HostViewComm

        return HostViewComm(LocalWorld(1).comm(0), self.device.host_view)

    def args(self, inputs):
        return self.program.rank_args(inputs, 0, self.device)

    def run(self, args):
        out = self.ex.run(args)
        for s in self.ex.streams.values():
            s.synchronize()
        return out

    def outputs(self, out):
        import numpy as np

        return self.program.collect([out], lambda b: np.array(self.device.to_host(b)))


SIMULATED_SCHEDULES = ("original", "fuse(RS-C-AG)+sliced-state")
"""The simulator subset: these schedules of each example (the CUDA simulator runs each
GPU thread in Python)."""


def check_examples(report: Report, budget: float) -> None:
    sys.path.insert(0, str(ROOT / "test"))
    from support.lowered import EXAMPLE_NAMES, rank_counts, schedules

    from distir.dialects.context import parse_module
    from distir.dialects.diagnostics import InputRejected
    from distir.runtime import npz
    from distir.runtime.equivalence import compare_outputs
    from distir.runtime.executor import LoweredProgram
    from distir.runtime.interpreter import interpret

    t0 = time.perf_counter()
    rows, failed, skipped = [], 0, 0
    for name in EXAMPLE_NAMES:
        if rank_counts(name) != (2, 4):  # a static mesh: not a 1-rank program
            rows.append(f"| {name} | (all) | not run: its mesh has a static size |")
            continue
        for sched, text in schedules(name):
            if report.simulate and sched not in SIMULATED_SCHEDULES:
                continue
            if time.perf_counter() - t0 > budget:
                skipped += 1
                continue
            module = parse_module(text)
            try:
                npz.resolve_grids(module, 1)
            except InputRejected as e:
                rows.append(f"| {name} | {sched} | not run: {e} |")
                continue
            for f in npz.functions(module):
                fn = f.sym_name.data
                try:
                    program = LoweredProgram.build(module, fn, 1)
                    inputs = program.prepare_inputs({}, 4)
                    one = OneRank(program, report.simulate)
                    got = one.outputs(one.run(one.args(inputs)))
                    want = interpret(module, fn, inputs, 1, 4)
                    c = compare_outputs(want, got, "interpret", "nccl")
                    ok, msg = c.ok, "equal" if c.ok else c.message
                except Exception as e:  # noqa: BLE001 - reported per case
                    ok, msg = False, f"{type(e).__name__}: {str(e)[:300]}"
                failed += not ok
                rows.append(f"| {name} | {sched} @{fn} | {'equal to interpret' if ok else '**' + msg + '**'} |")
    lines = ["| example | schedule | nccl, 1 rank |", "|---|---|---|", *rows]
    if skipped:
        lines.append(f"\n{skipped} schedule(s) not run: the section's time budget ({budget:.0f} s) ran out.")
    where = "numba's CUDA simulator (CPU)" if report.simulate else on_device(report)
    report.add("examples and schedules vs interpret", where, lines, failed == 0, time.perf_counter() - t0)


# ======================================================================================
# 3. generated kernels against the copy bandwidth
# ======================================================================================


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up (compiles)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def copy_bandwidth(n: int, simulate: bool, repeats: int) -> float:
    """Bytes per second of a device-to-device copy of ``n`` f32 (read + write)."""
    import numpy as np
    from numba import cuda

    a = cuda.to_device(np.ones(n, np.float32))
    b = cuda.device_array_like(a)

    def copy():
        b.copy_to_device(a)
        cuda.synchronize()

    best = 2 * a.nbytes / _median_time(copy, repeats)
    if not simulate:
        try:  # torch's copy kernel: the faster of the two is the device's copy bandwidth
            import torch

            x = torch.ones(n, device="cuda")
            y = torch.empty_like(x)

            def tcopy():
                y.copy_(x)
                torch.cuda.synchronize()

            best = max(best, 2 * x.nbytes / _median_time(tcopy, repeats))
        except Exception:  # noqa: BLE001 - no torch with CUDA: numba's copy
            pass
    return best


def check_kernels(report: Report, n: int, repeats: int) -> None:
    import numpy as np

    from distir.dialects.context import parse_module
    from distir.passes.pipeline import apply_pipeline
    from distir.runtime.executor import LoweredProgram

    t0 = time.perf_counter()
    lines = []
    ok = True
    try:
        bw = copy_bandwidth(n, report.simulate, repeats)
        lines.append(f"Device-to-device copy of {n:,} f32: {bw / 1e9:.1f} GB/s (read + write; the faster of numba's and torch's copy).")
        lines += ["", "| kernel | program | time | bytes moved | GB/s | of copy |", "|---|---|---|---|---|---|"]
        cases = [
            ("element-wise (SGD update)", "sgd.mlir", ""),
            ("fused optimizer (fuse(RS-Adam-AG), sliced state)", "adam.mlir", "split-allreduce,reorder-allgather,fuse-maps,slice-state{targets=m,v},fuse-allreduce"),
        ]
        for label, file, pipeline in cases:
            module = parse_module((ROOT / "examples" / file).read_text().replace("1048576", str(n)))
            if pipeline:
                apply_pipeline(module, pipeline)
            fn = next(op.sym_name.data for op in module.ops if hasattr(op, "sym_name") and op.name == "func.func")
            program = LoweredProgram.build(module, fn, 1)
            inputs = program.prepare_inputs({}, 4)
            one = OneRank(program, report.simulate)
            args = one.args(inputs)
            t = _median_time(lambda: one.run(args), repeats)
            moved = sum(np.asarray(v).nbytes for v in inputs.values() if np.ndim(v) > 0) + sum(
                np.asarray(v).nbytes for v in one.outputs(one.run(args))
            )
            lines.append(f"| {label} | {file} {pipeline or '(as written)'} | {t * 1e3:.3f} ms | {moved / 1e6:.1f} MB | {moved / t / 1e9:.1f} | {moved / t / bw:.2f} |")
        lines.append("")
        lines.append("Bytes moved: every input read once and every result written once (in-place results count as written).")
    except Exception as e:  # noqa: BLE001
        ok = False
        lines.append(f"**{type(e).__name__}: {e}**")
    where = f"numba's CUDA simulator (CPU), {n:,} elements: not a GPU measurement" if report.simulate else on_device(report, f"{n:,} elements")
    report.add("generated kernels vs copy bandwidth", where, lines, ok, time.perf_counter() - t0)


# ======================================================================================
# 4. distir's AdamW against torch's fused AdamW
# ======================================================================================


def adamw_program(n: int):
    """The program distir's ``AdamW`` runs for one arena of ``n`` f32 on one rank
    (``frameworks/optimizers.py``: its text and its fused schedule), lowered."""
    from distir.dialects.context import parse_module
    from distir.frameworks import optimizers as core
    from distir.passes.pipeline import apply_pipeline
    from distir.runtime.executor import LoweredProgram

    spec, layout = core.Spec("adam"), core.Layout((n,), 1)
    module = parse_module(core.program(spec, layout))
    apply_pipeline(module, core.fused_pipeline(spec, layout))
    return LoweredProgram.build(module, "adam_step", 1)


def check_adamw(report: Report, n: int, repeats: int) -> None:
    """torch's fused AdamW against distir's AdamW step on the same device: the program
    ``distir.frameworks.pytorch.AdamW`` runs, on the device's generated kernels (the
    ``nccl`` backend's rank), from the same parameters and gradients; and, on the CPU, the
    PyTorch bridge itself (its arenas live in host memory)."""
    import numpy as np
    import torch

    from distir.frameworks import optimizers as core

    t0 = time.perf_counter()
    dev = "cpu" if report.simulate else "cuda"
    sync = (lambda: None) if dev == "cpu" else torch.cuda.synchronize
    lines = ["| optimizer | params | step time | note |", "|---|---|---|---|"]
    ok = True
    hyper = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)

    def timed(opt, p) -> float:
        def step():
            opt.step()
            sync()

        p.grad = torch.full_like(p, 1e-3)
        return _median_time(step, repeats)

    torch.manual_seed(0)
    start = torch.randn(n)
    # one step of torch's fused AdamW from `start`: the values every distir row must give
    p_ref = torch.nn.Parameter(start.clone().to(dev))
    t_ref = None
    try:
        ref = torch.optim.AdamW([p_ref], fused=True, **hyper)
        p_ref.grad = torch.full_like(p_ref, 1e-3)
        ref.step()
        sync()
        want = p_ref.detach().cpu().numpy().copy()
        t_ref = timed(ref, p_ref)
        lines.append(f"| torch.optim.AdamW(fused=True) | {n:,} f32 on {dev} | {t_ref * 1e3:.3f} ms | |")
    except Exception as e:  # noqa: BLE001
        ok, want = False, None
        lines.append(f"| torch.optim.AdamW(fused=True) | {n:,} f32 on {dev} | - | **{type(e).__name__}: {e}** |")

    def compare(got) -> tuple[bool, str]:
        if want is None:
            return True, "(no reference)"
        same = np.allclose(got, want, rtol=1e-5, atol=1e-6)
        err = float(np.max(np.abs(got - want)))
        return same, ("same parameters as torch's after one step" if same else "**parameters differ from torch's**") + f" (max |diff| {err:.1e})"

    # the program distir's AdamW runs, on the device (generated kernels)
    label = "distir AdamW step program (fuse(RS-Opt-AG), 1 rank) on the device"
    try:
        program = adamw_program(n)
        scalars = core.scalars("adam", dict(hyper, decoupled=True), 1)
        given = {"g": np.full((1, n), 1e-3, np.float32), "p": start.numpy().astype(np.float32), "m": np.zeros(n, np.float32), "v": np.zeros(n, np.float32)}
        given.update({name: np.float32(x) for name, x in zip(core.SCALARS["adam"], scalars)})
        inputs = program.prepare_inputs(given, 0)
        one = OneRank(program, report.simulate)
        args = one.args(inputs)
        out = one.outputs(one.run(args))  # in place: p, m and v of `args` now hold step 1's
        same, note = compare(np.asarray(out[0]))
        args = one.args(inputs)
        t = _median_time(lambda: one.run(args), repeats)
        if t_ref:
            note += f"; {t_ref / t:.2f}x torch's speed"
        ok = ok and same
        where_ran = "numba's CUDA simulator" if report.simulate else "GPU, generated CUDA kernel"
        lines.append(f"| {label} | {n:,} f32 ({where_ran}) | {t * 1e3:.3f} ms | {note} |")
    except Exception as e:  # noqa: BLE001
        ok = False
        lines.append(f"| {label} | {n:,} f32 | - | **{type(e).__name__}: {str(e)[:300]}** |")

    # the PyTorch bridge: its arenas are host memory, so it runs on CPU tensors only
    from distir.frameworks.pytorch import AdamW

    p = torch.nn.Parameter(start.clone())
    try:
        opt = AdamW([p], **hyper)
        p.grad = torch.full_like(p, 1e-3)
        opt.step()
        same, note = compare(p.detach().numpy())
        if dev == "cpu":
            t = timed(opt, p)
            note += f"; {t_ref / t:.2f}x torch's speed" if t_ref else ""
            step_time = f"{t * 1e3:.3f} ms"
        else:
            step_time, note = "-", note + "; on the CPU (the bridge keeps its arenas in host memory), not timed against the GPU"
        ok = ok and same
        lines.append(f"| distir.frameworks.pytorch.AdamW | {n:,} f32 on cpu | {step_time} | {note} |")
    except Exception as e:  # noqa: BLE001
        ok = False
        lines.append(f"| distir.frameworks.pytorch.AdamW | {n:,} f32 on cpu | - | **{type(e).__name__}: {str(e)[:300]}** |")
    if t_ref and not report.simulate:
        lines += ["", f"Bytes a step must move (p, m, v read and written, g read): {7 * 4 * n / 1e6:.0f} MB; "
                  f"torch's fused step moves them at {7 * 4 * n / t_ref / 1e9:.0f} GB/s."]
    where = "torch on this CPU; the program in numba's CUDA simulator (no GPU)" if report.simulate else f"{report.where} (torch {torch.__version__})"
    report.add("AdamW step vs torch fused AdamW", where, lines, ok, time.perf_counter() - t0)


# ======================================================================================


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check.py", description="Check distir on a GPU (or its simulator subset) and write a Markdown report.")
    ap.add_argument("-o", "--output", default="gpu_check.md", metavar="REPORT.md", help="the report (default gpu_check.md)")
    ap.add_argument("--simulate", action="store_true", help="no GPU: numba's CUDA simulator and torch on the CPU (chosen by itself when no GPU is found)")
    ap.add_argument("--wheels", metavar="DIR", help="install distir and the wheels of DIR this Python lacks into --site first (bench/gpu_prepare.sh writes them)")
    ap.add_argument("--site", default="/tmp/site", metavar="DIR", help="where --wheels installs (default /tmp/site)")
    ap.add_argument("--budget", type=float, default=150.0, metavar="S", help="seconds for the examples-and-schedules check (default 150)")
    ap.add_argument("--skip-tests", action="store_true", help="leave out the gpu-marked tests")
    args = ap.parse_args(argv)

    site, _, names = os.environ.get(ENV_SITE, "").partition(":")
    installed = [n for n in names.split(",") if n]
    if args.wheels and ENV_SITE not in os.environ:
        site = Path(args.site).resolve()
        reexec_with_site(site, install_missing(Path(args.wheels), site))
    gpu = None if args.simulate else gpu_present()
    simulate = gpu is None
    if simulate:
        if not args.simulate:
            print("gpu_check: no GPU found (nvidia-smi -L): running the simulator subset (--simulate)", flush=True)
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba.cuda is imported
        import warnings

        # the simulator runs the kernels' integer hashing (random inputs) on numpy scalars
        warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
    report = Report(simulate, gpu or "this CPU (no GPU)")
    t0 = time.perf_counter()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(done: bool) -> None:  # after each check: a run cut short still leaves its report
        tail = f"whole check: {time.perf_counter() - t0:.0f} s" if done else "**the check did not finish**: the sections below are those that did"
        out.write_text(report.markdown(environment(site, installed) + [tail]))

    checks = [
        lambda: check_examples(report, args.budget),
        lambda: check_kernels(report, 1 << 10 if simulate else 1 << 26, 2 if simulate else 20),
        lambda: check_adamw(report, 1 << 12 if simulate else 1 << 24, 3 if simulate else 20),
    ]
    if not args.skip_tests:
        checks.insert(0, lambda: check_gpu_tests(report))
    for check in checks:
        check()
        save(False)
    save(True)
    print(f"gpu_check: report written to {out.resolve()}", flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
