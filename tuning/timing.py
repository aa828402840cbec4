"""Timing schedules on a backend: ``distir-tune --backend local|mpi``.

``time_programs(programs, ranks, backend)`` runs every program (a name and a dist-level
module) on ``ranks`` ranks and returns the best time of one step of each, in seconds,
measured as ``bench/`` measures: every program is lowered and bound to random inputs
once, warmed up (which also compiles its kernels), then the programs run round-robin
(``rounds`` times, at least ``min_time`` seconds in all) so that a change of the
machine's load hits them all alike, and each keeps its fastest step. A program that
cannot run at that size or rank count (a dim the ranks do not divide) gets ``None``.
``samples`` (a dict) receives every round's time of each program: the spread that says
whether two schedules' times differ by more than the noise (``spread``).

``local``: the programs' rank threads live in this process; programs are measured in
batches whose buffers fit ``memory_budget`` bytes (one ``LocalRunner`` per program).
``mpi``: one ``mpiexec -n N`` job (``python -m distir.tuning.timing JOB``) builds all
programs on every rank and times them the same way, each step between barriers.
"""

from __future__ import annotations

import gc
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import InputRejected

ROUNDS = 5
WARMUP = 2
MIN_TIME = 0.2
MAX_ROUNDS = 20
MEMORY_BUDGET = 4 << 30


def time_programs(
    programs: Sequence[tuple[str, ModuleOp]],
    ranks: int,
    backend: str = "local",
    rounds: int = ROUNDS,
    warmup: int = WARMUP,
    min_time: float = MIN_TIME,
    memory_budget: int = MEMORY_BUDGET,
    progress: Callable[[str], None] | None = None,
    statistic: str = "best",
    max_rounds: int = MAX_ROUNDS,
    samples: dict[str, list[float]] | None = None,
    stop: Callable[[], bool] | None = None,
) -> dict[str, float | None]:
    """The best (or, with ``statistic="median"``, the median) step time of each program
    over its rounds: at least ``rounds``, more until ``min_time`` seconds have passed, at
    most ``max_rounds`` (module doc). ``stop()`` (``local``: asked before each program is
    built and warmed up) ends the timing early: the programs warmed up by then are timed
    as usual, the others are left out of the result (distir-tune's Ctrl-C)."""
    limits = (rounds, min_time, max(rounds, max_rounds))
    if backend == "local":
        return _time_local(programs, ranks, limits, warmup, memory_budget, progress, statistic, samples, stop or (lambda: False))
    if backend == "mpi":
        return _time_mpi(programs, ranks, limits, warmup, progress, samples)
    raise InputRejected(f"--backend {backend}: the tuner times on 'local' or 'mpi' (use --model for a topology)")


def build(module: ModuleOp, ranks: int):
    """The ``LoweredProgram`` of a dist-level module on ``ranks`` ranks; InputRejected
    when its shapes do not fit that rank count (as ``distir-run`` checks them)."""
    from distir.runtime import npz
    from distir.runtime.executor import LoweredProgram

    f = npz.select_function(module, None)
    npz.check_sizes(f, npz.resolve_grids(module, ranks, npz.used_meshes(module, f)), ranks)
    return LoweredProgram.build(module, None, ranks)


def _footprint(program) -> int:
    """Bytes of one program's buffers on all ranks (arguments and allocations)."""
    from xdsl.dialects.builtin import MemRefType

    from distir.dialects import rt
    from distir.runtime.values import numpy_dtype

    total = 0
    types = list(program.func.function_type.inputs.data)
    types += [op.result.type for op in program.func.walk() if isinstance(op, rt.AllocOp)]
    for t in types:
        if isinstance(t, MemRefType):
            total += math.prod(t.get_shape()) * numpy_dtype(t.element_type).itemsize
    return total * program.ranks


def spread(samples: Sequence[float]) -> float | None:
    """How far a program's rounds scatter above its best: (median - best) / best. Two
    schedules whose best times differ by less than this are a tie: a rerun may order
    them the other way."""
    if len(samples) < 2 or min(samples) <= 0:
        return None
    best = min(samples)
    return (statistics.median(samples) - best) / best


def _time_local(programs, ranks, limits, warmup, memory_budget, progress, statistic, samples, stop) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    built = []
    for name, module in programs:
        if stop():
            break
        try:
            built.append((name, build(module, ranks)))
        except InputRejected:
            out[name] = None
    batch: list = []
    used = 0
    for name, program in built:
        size = _footprint(program)
        if batch and used + size > memory_budget:
            out.update(_run_local_batch(batch, limits, warmup, progress, statistic, samples, stop))
            batch, used = [], 0
            if stop():
                break
        batch.append((name, program))
        used += size
    if batch:
        out.update(_run_local_batch(batch, limits, warmup, progress, statistic, samples, stop))
    return {name: out[name] for name, _ in programs if name in out}


def _run_local_batch(batch, limits, warmup, progress, statistic, samples, stop) -> dict[str, float | None]:
    from distir.runtime.local import LocalRunner

    runners = {}
    out: dict[str, float | None] = {}
    try:
        for name, program in batch:
            if stop():
                break
            if progress is not None:
                progress(name)
            runner = LocalRunner(program)
            runners[name] = runner
            runner.bind(program.prepare_inputs({}, 0))
            for _ in range(warmup):
                runner.step()
        out = _round_robin({n: r.step for n, r in runners.items()}, limits, statistic, samples)
    finally:
        for r in runners.values():
            r.close()
        for r in runners.values():
            r.join()
        # the rank threads, executors and buffers form cycles: free them before the
        # next batch binds its own (batches are sized to fit memory one at a time)
        runners.clear()
        gc.collect()
    return out


def _more(limits: tuple[int, float, int], done: int, start: float) -> bool:
    """Whether to run another round (``time_programs``'s ``rounds``, ``min_time`` and
    ``max_rounds``)."""
    rounds, min_time, max_rounds = limits
    return done < rounds or (time.perf_counter() - start < min_time and done < max_rounds)


def _round_robin(
    steps: dict[str, Callable[[], object]], limits: tuple[int, float, int], statistic: str = "best", samples: dict[str, list[float]] | None = None
) -> dict[str, float | None]:
    """Best (or median) time of each step, run round-robin (``_more``) in the order of
    ``steps``: a program runs after the one listed before it, and that matters for small
    steps (``calibrate.programs``)."""
    times: dict[str, list[float]] = {n: [] for n in steps}
    start = time.perf_counter()
    done = 0
    while _more(limits, done, start):
        for n, step in steps.items():
            t = time.perf_counter()
            step()
            times[n].append(time.perf_counter() - t)
        done += 1
    if samples is not None:
        samples.update(times)
    pick = min if statistic == "best" else statistics.median
    return {n: (pick(v) if v else None) for n, v in times.items()}


# --------------------------------------------------------------------------------------
# mpi
# --------------------------------------------------------------------------------------

RANKS_PER_CORE = 4
"""The most MPI ranks per core of this machine that timing starts when ``mpiexec`` has no
host list: beyond it the processes mostly wait for a core (65 ranks on 2 cores take
minutes to start and their step times measure that contention, not the schedule)."""


def check_mpi_ranks(ranks: int, what: str = "distir-tune") -> None:
    """Refuse to time ``ranks`` MPI processes on this machine alone when they would
    oversubscribe its cores more than ``RANKS_PER_CORE`` times. A Hydra host list
    (``HYDRA_HOST_FILE``) spreads them over other machines: then any count goes."""
    import os

    if os.environ.get("HYDRA_HOST_FILE"):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if ranks > RANKS_PER_CORE * cores:
        raise InputRejected(
            f"{what}: --ranks {ranks} on --backend mpi would start {ranks} processes on the {cores} cores of this machine "
            f"(at most {RANKS_PER_CORE * cores} here: {RANKS_PER_CORE} per core): their times would measure the waiting, not the schedule; "
            "predict with --model TOPOLOGY, or give mpiexec a host list (HYDRA_HOST_FILE)"
        )


def _time_mpi(programs, ranks, limits, warmup, progress, samples=None) -> dict[str, float | None]:
    from distir.runtime.mpi import mpiexec_env, mpiexec_path, run_mpiexec

    with tempfile.TemporaryDirectory(prefix="distir-tune-") as d:
        job = Path(d)
        names = []
        for i, (name, module) in enumerate(programs):
            (job / f"p{i}.mlir").write_text(str(module))
            names.append(name)
        spec = {"names": names, "ranks": ranks, "limits": list(limits), "warmup": warmup}
        (job / "job.json").write_text(json.dumps(spec))
        if progress is not None:
            progress(f"mpiexec -n {ranks} ({len(names)} programs)")
        cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "distir.tuning.timing", str(job)]
        try:
            proc = run_mpiexec(cmd, timeout=3600, env=mpiexec_env(ranks))
        except subprocess.TimeoutExpired:
            raise InputRejected(f"the mpi timing job (mpiexec -n {ranks}) did not finish within an hour: it was stopped") from None
        result = job / "times.json"
        if proc.returncode != 0 or not result.exists():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise InputRejected(f"the mpi timing job failed (exit {proc.returncode}): {tail}")
        times = json.loads(result.read_text())
        if samples is not None and (job / "samples.json").exists():
            samples.update(json.loads((job / "samples.json").read_text()))
    return {n: times.get(n) for n in names}


def mpi_worker(job_dir: str) -> int:
    """One rank of the mpi timing job (see ``_time_mpi``)."""
    from mpi4py import MPI

    from distir.dialects.context import parse_module
    from distir.runtime.mpi import MpiRunner, forget_mpich_segments

    world = MPI.COMM_WORLD
    forget_mpich_segments(world)
    job = Path(job_dir)
    spec = json.loads((job / "job.json").read_text())
    steps: dict[str, Callable[[], object]] = {}
    failed: dict[str, None] = {}
    for i, name in enumerate(spec["names"]):
        try:
            program = build(parse_module((job / f"p{i}.mlir").read_text()), spec["ranks"])
        except InputRejected:
            failed[name] = None
            continue
        runner = MpiRunner(program)
        runner.bind(program.prepare_inputs({}, 0))

        def step(runner=runner) -> None:
            world.Barrier()
            runner.step()
            world.Barrier()

        for _ in range(spec["warmup"]):
            step()
        steps[name] = step
    # every rank runs the same rounds: decide the round count on rank 0
    best = {n: math.inf for n in steps}
    rounds: dict[str, list[float]] = {n: [] for n in steps}
    start = time.perf_counter()
    done = 0
    while True:
        if not world.bcast(_more(tuple(spec["limits"]), done, start), root=0):
            break
        for n, step in steps.items():
            t = time.perf_counter()
            step()
            rounds[n].append(time.perf_counter() - t)
            best[n] = min(best[n], rounds[n][-1])
        done += 1
    if world.Get_rank() == 0:
        times = {n: (b if math.isfinite(b) else None) for n, b in best.items()}
        times.update(failed)
        (job / "samples.json").write_text(json.dumps(rounds))
        (job / "times.json").write_text(json.dumps(times))
    return 0


if __name__ == "__main__":
    sys.exit(mpi_worker(sys.argv[1]))
