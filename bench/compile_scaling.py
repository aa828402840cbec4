"""How compile time grows with program size: every rewrite pass, the full CoCoNet
pipelines and the default lowering, on generated programs from ~1k to ~50k ops
(``distir.examples.optimizer_step``: data-parallel SGD / Adam / LAMB steps over K
tensors, a stack of L Megatron MLP blocks, L pipeline-parallel layers).

For each program and size, a fresh process parses the program, then times each case
(a pass or a pipeline, verification after each pass included, as ``distir-opt`` does)
on the output of its prefix, and xDSL's own parse + verify + print of the same text
(what ``xdsl-opt FILE`` does) in the same process; times are CPU seconds of the process
(``time.process_time``, less sensitive to the other jobs on the machine than wall
time). It prints, per case, the time and the ratio to parse+print at each size and
the log-log slope of time against ops over all sizes (1.0 = linear), plus the peak
memory (RSS) of each run, and saves a plot (matplotlib, if installed).

    python bench/compile_scaling.py [--ops 1000,3000,10000,30000,50000] [--programs sgd,adam,lamb,mlp,pipe]
        [--cases TEXT] [--repeat N] [--json out.json] [--plot bench/compile_scaling.png]

Each default-lowering case is also timed as the lowering ran before issue 27 (the same
passes, the program verified only after ``fix-mesh-sizes`` and at the end, nothing in
between): the ratio of the two is what verifying after every pass costs (``lower``
verifies each pass's result incrementally, ``dialects/verifier.py``), printed per case
and size. The input is verified before the clock starts, as the tools do when they read
it.

Targets: (issue 10) the fused pipeline on the 1,000-tensor SGD step <= 1.5x parse+print;
slope <= 1.1 for every pass and for the default lowering; (issue 27) verification after
every pass <= 1.2x the lowering without it at 50k ops.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import note, table  # noqa: E402

FUSED = "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce"
LOWERING = "fix-mesh-sizes{ranks=2},combine-collectives,lower-overlap,lower-buckets,lower-to-kernels,lower-collectives"

# (case, program, prefix pipeline, timed pipeline); "lower" times lowering.pipeline.lower.
CASES: list[tuple[str, str, str, str]] = [
    ("split-allreduce", "sgd", "", "split-allreduce"),
    ("reorder-allgather", "sgd", "split-allreduce", "reorder-allgather"),
    ("fuse-maps", "sgd", "split-allreduce,reorder-allgather", "fuse-maps"),
    ("fuse-allreduce", "sgd", "split-allreduce,reorder-allgather,fuse-maps", "fuse-allreduce"),
    ("fuse-collectives", "sgd", "split-allreduce,reorder-allgather", "fuse-collectives"),
    ("reorder-broadcast", "sgd", "split-allreduce{strategy=reduce-bcast}", "reorder-broadcast"),
    ("canonicalize", "sgd", "split-allreduce", "canonicalize"),
    ("expand-collectives", "sgd", "", "expand-collectives"),
    ("form-collectives", "sgd", "expand-collectives", "form-collectives"),
    ("commute-maps", "sgd", "expand-collectives", "commute-maps"),
    ("cancel-primitives", "sgd", "expand-collectives,commute-maps", "cancel-primitives"),
    ("slice-state", "adam", "fuse-maps,split-allreduce,reorder-allgather", "slice-state"),
    ("combine-collectives", "sgd", "fix-mesh-sizes{ranks=2}", "combine-collectives"),
    ("combine-collectives (fused)", "sgd", f"{FUSED},fix-mesh-sizes{{ranks=2}}", "combine-collectives"),
    ("overlap", "mlp", "", "overlap"),
    ("reorder-send", "pipe", "split-allreduce{dim=1}", "reorder-send"),
    ("fix-mesh-sizes", "sgd", "", "fix-mesh-sizes{ranks=2}"),
    ("lower-buckets", "sgd", "fix-mesh-sizes{ranks=2},combine-collectives", "lower-buckets"),
    ("lower-overlap", "mlp", "overlap,fix-mesh-sizes{ranks=2}", "lower-overlap"),
    ("lower-to-kernels", "sgd", "fix-mesh-sizes{ranks=2},combine-collectives,lower-buckets", "lower-to-kernels"),
    ("lower-to-kernels (per tensor)", "sgd", "fix-mesh-sizes{ranks=2}", "lower-to-kernels"),
    ("lower-collectives", "sgd", "fix-mesh-sizes{ranks=2},combine-collectives,lower-buckets,lower-to-kernels", "lower-collectives"),
    ("lower-collectives (per tensor)", "sgd", "fix-mesh-sizes{ranks=2},lower-to-kernels", "lower-collectives"),
    ("pipeline fuse(RS-SGD-AG)", "sgd", "", FUSED),
    ("pipeline fuse(RS-Adam-AG)", "adam", "", "fuse-maps,split-allreduce,reorder-allgather,slice-state,fuse-allreduce"),
    ("pipeline fuse(RS-LAMB-AG)", "lamb", "", FUSED),
    ("pipeline RS-SGD-AG", "sgd", "", "split-allreduce,reorder-allgather"),
    ("pipeline MM-RS-C-AG", "mlp", "", "split-allreduce,reorder-allgather,fuse-maps"),
    ("default lowering (AR-SGD)", "sgd", "", "lower"),
    ("default lowering (fused SGD)", "sgd", FUSED, "lower"),
    ("default lowering (AR-Adam)", "adam", "", "lower"),
    ("default lowering (MLP stack)", "mlp", "", "lower"),
]


def generate(program: str, n: int) -> str:
    from distir.examples.optimizer_step import megatron_mlp_stack, optimizer_step, pipeline_layers, uniform_parameters

    if program in ("sgd", "adam", "lamb"):
        return optimizer_step(program, uniform_parameters(n, 4096))
    if program == "mlp":
        return megatron_mlp_stack(n)
    if program == "pipe":
        return pipeline_layers(n)
    raise ValueError(program)


def count_ops(text: str) -> int:
    from distir.dialects.context import parse_module

    return sum(1 for _ in parse_module(text).walk())


def units_for(program: str, ops: int) -> int:
    """The size parameter (tensors, blocks, layers) giving about ``ops`` ops."""
    per = (count_ops(generate(program, 20)) - count_ops(generate(program, 10))) / 10
    return max(1, round(ops / per))


def unchecked_lower(module, ranks: int):
    """The default lowering as it ran before issue 27: the passes on a copy, verified
    after ``fix-mesh-sizes`` and at the end only (the reference of the overhead ratio)."""
    from xdsl.context import Context

    from distir.lowering.pipeline import passes_for
    from distir.passes.support import gc_paused

    with gc_paused():
        out = module.clone()
        ctx = Context()
        for p in passes_for(out, ranks):
            p.apply(ctx, out)
            if p.name == "fix-mesh-sizes":
                out.verify()
        out.verify()
        return out


def child(program: str, n: int, repeat: int = 1, only: str = "") -> dict:
    """Time every case of ``program`` (whose name contains ``only``) at size ``n`` (run
    in a fresh process); the default lowering ``repeat`` times (the least time)."""
    import io
    import resource

    from xdsl.parser import Parser
    from xdsl.printer import Printer

    from distir.dialects.context import make_context
    from distir.dialects.verifier import ensure_verified
    from distir.lowering.pipeline import lower
    from distir.passes.pipeline import parse_pipeline

    text = generate(program, n)
    t0 = time.process_time()
    module = Parser(make_context(), text).parse_module()
    module.verify()
    Printer(stream=io.StringIO()).print_op(module)
    xdsl = time.process_time() - t0
    ops = sum(1 for _ in module.walk())
    ctx = make_context()
    states = {"": module}

    def state(spec: str):
        if spec in states:
            return states[spec]
        head, _, last = spec.rpartition(",")
        m = state(head).clone()
        for p in parse_pipeline(last):
            p.apply(ctx, m)
        states[spec] = m
        return m

    times = {}
    unchecked = {}
    for name, prog, prefix, timed in CASES:
        if prog != program or only not in name:
            continue
        m = state(prefix).clone()
        if timed == "lower":
            ensure_verified(m)  # as read by a tool: verified before it is lowered
            best = {"unchecked": math.inf, "checked": math.inf}
            for _ in range(repeat):  # alternated: both see the same load
                for kind, fn in (("unchecked", unchecked_lower), ("checked", lower)):
                    t0 = time.process_time()
                    fn(m, 2)
                    best[kind] = min(best[kind], time.process_time() - t0)
            unchecked[name], times[name] = best["unchecked"], best["checked"]
            continue
        t0 = time.process_time()
        for p in parse_pipeline(timed):
            p.apply(ctx, m)
            m.verify()
        times[name] = time.process_time() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"program": program, "n": n, "ops": ops, "xdsl": xdsl, "times": times, "unchecked": unchecked, "peak_mib": peak}


def slope(points: list[tuple[int, float]]) -> float | None:
    pts = [(math.log(o), math.log(t)) for o, t in points if t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def plot(runs: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        note("matplotlib is not installed (pip install 'distir[bench]'): no plot")
        return
    fig, ax = plt.subplots(figsize=(9, 6))
    names = [c[0] for c in CASES if c[0].startswith(("pipeline", "default")) or c[0] in ("fuse-allreduce", "reorder-allgather", "fuse-maps")]
    for name in names:
        pts = sorted((r["ops"], r["times"][name]) for r in runs if name in r["times"])
        if pts:
            ax.loglog(*zip(*pts), marker="o", label=name)
    pts = sorted((r["ops"], r["xdsl"]) for r in runs if r["program"] == "sgd")
    ax.loglog(*zip(*pts), "k--", marker="s", label="xDSL parse+verify+print (SGD)")
    ax.set_xlabel("ops in the program")
    ax.set_ylabel("CPU seconds")
    ax.set_title("distir compile time vs program size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    note(f"plot: {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="1000,3000,10000,30000,50000", help="program sizes in ops (approximate)")
    ap.add_argument("--programs", default="sgd,adam,lamb,mlp,pipe")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--plot", default=str(HERE / "compile_scaling.png"))
    ap.add_argument("--cases", default="", help="time only the cases whose name contains this text (e.g. 'default lowering')")
    ap.add_argument("--repeat", type=int, default=1, help="time each default lowering this many times, alternating with the unchecked one (the least time)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), int(args.child[2]), args.child[3])))
        return 0
    sizes = [int(x) for x in args.ops.split(",")]
    runs = []
    for program in args.programs.split(","):
        for ops in sizes:
            n = units_for(program, ops)
            note(f"{program}: size {n} (~{ops} ops)")
            out = subprocess.run([sys.executable, __file__, "--child", program, str(n), str(args.repeat), args.cases], capture_output=True, text=True, check=False)
            if out.returncode != 0:
                note(f"  failed: {out.stderr[-3000:]}")
                continue
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    by_program = {r["program"]: r for r in runs}
    header = ["case", "program"] + [f"~{s} ops" for s in sizes] + ["slope"]
    rows = []
    for name, program, _, _ in CASES:
        rs = sorted((r for r in runs if r["program"] == program and name in r["times"]), key=lambda r: r["ops"])
        if not rs:
            continue
        cells = [f"{r['times'][name]:.2f}s {r['times'][name] / r['xdsl']:.2f}x" for r in rs]
        cells += [""] * (len(sizes) - len(cells))
        s = slope([(r["ops"], r["times"][name]) for r in rs])
        rows.append([name, program, *cells, f"{s:.2f}" if s is not None else "-"])
    for program in by_program:
        rs = sorted((r for r in runs if r["program"] == program), key=lambda r: r["ops"])
        cells = [f"{r['xdsl']:.2f}s ({r['ops']} ops)" for r in rs] + [""] * (len(sizes) - len(rs))
        s = slope([(r["ops"], r["xdsl"]) for r in rs])
        rows.append(["xDSL parse+verify+print", program, *cells, f"{s:.2f}" if s is not None else "-"])
        cells = [f"{r['peak_mib']:.0f} MiB" for r in rs] + [""] * (len(sizes) - len(rs))
        rows.append(["peak RSS of the run", program, *cells, ""])
    print("CPU time per case (and its ratio to xDSL's parse+verify+print of the same program), log-log slope over sizes")
    print(table(rows, header))
    rows = []
    for name, program, _, timed in CASES:
        rs = sorted((r for r in runs if r["program"] == program and name in r.get("unchecked", {})), key=lambda r: r["ops"])
        if not rs:
            continue
        cells = [f"{r['times'][name]:.2f}s / {r['unchecked'][name]:.2f}s = {r['times'][name] / r['unchecked'][name]:.2f}x" for r in rs]
        rows.append([name, program, *cells, *[""] * (len(sizes) - len(cells))])
    if rows:
        print()
        print("Verification after every pass: the default lowering / the same passes verified only after fix-mesh-sizes and at the end (target <= 1.2x)")
        print(table(rows, ["case", "program"] + [f"~{s} ops" for s in sizes]))
    plot(runs, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
