"""Shared pieces of the benchmarks: the Adam programs at a given size, timing loops, the
memory-bandwidth (triad) measurement and table printing."""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# numba's notes for distir's developers (why a generated kernel did not parallelise)
# are not for the reader of a benchmark.
from distir.tools.diagnostics import quiet_developer_warnings  # noqa: E402

quiet_developer_warnings()

ADAM_SCHEDULES = {
    "AR-Adam": "",
    # CoCoNet's RS-Opt-AG reorders the AllGather with the *fused* optimizer computation:
    # one kernel on each rank's slice (bench/rs_ag_ratio.py also times the 3-kernel form)
    "RS-Adam-AG": "fuse-maps,split-allreduce,reorder-allgather",
    "fuse(RS-Adam-AG)": "split-allreduce,reorder-allgather,fuse-maps,slice-state{targets=m,v},fuse-allreduce",
}

BYTES_PER_ELEMENT_FUSED = 40
"""Bytes the fused Adam step must move per element on 2 ranks (write-allocate counted):
each rank reads g from both ranks (8), p, m, v (12); writes p into both ranks' buffers
(4 + 8 with write-allocate for the peer's) and m, v (8)."""

TRIAD_BYTES_PER_ELEMENT = 16
"""a = b + s * c: read b and c, write a with write-allocate."""


def schedule(text: str, pipeline: str) -> str:
    """The program after a pass pipeline (``distir-opt -p``)."""
    if not pipeline:
        return text
    from distir.dialects.context import parse_module
    from distir.passes.pipeline import apply_pipeline

    return str(apply_pipeline(parse_module(text), pipeline))


def adam_text(n: int) -> str:
    return (EXAMPLES / "adam.mlir").read_text().replace("1048576", str(n))


def have_module(name: str) -> bool:
    """Whether an optional baseline's package is installed (without importing it)."""
    import importlib.util

    return importlib.util.find_spec(name) is not None


def median_time(fn: Callable[[], object], reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class LocalStep:
    """One program bound to the local backend's rank threads, stepped repeatedly."""

    def __init__(self, text: str, ranks: int, seed: int = 0):
        from distir.dialects.context import parse_module
        from distir.runtime.executor import LoweredProgram
        from distir.runtime.local import LocalRunner

        self.program = LoweredProgram.build(parse_module(text), None, ranks)
        self.runner = LocalRunner(self.program)
        self.runner.bind(self.program.prepare_inputs({}, seed))

    def __call__(self) -> None:
        self.runner.step()

    def close(self) -> None:
        """Stop the rank threads and drop the buffers (the next program's memory starts
        from here: peaks stay those of the programs alive together)."""
        import gc

        self.runner.close()
        self.runner.join()
        self.runner = self.program = None  # type: ignore[assignment]
        gc.collect()


def samples(fns: dict[str, Callable[[], object]], reps: int, warmup: int = 2) -> dict[str, list[float]]:
    """``reps`` times of each function, the functions run round-robin (so that a change
    in the machine's load hits them all alike)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return times


def interleaved(fns: dict[str, Callable[[], object]], reps: int, warmup: int = 2) -> dict[str, float]:
    """Median time of each function, run round-robin (``samples``)."""
    return {k: statistics.median(v) for k, v in samples(fns, reps, warmup).items()}


def triad_runner(n: int, threads: int = 2) -> Callable[[], None]:
    """``a = b + s*c`` run by ``threads`` threads at once (one per core, as the ranks of
    the local backend run), each on its own n-element arrays (16 bytes per element)."""
    import numba

    @numba.njit(nogil=True, fastmath=True, error_model="numpy")
    def triad(a, b, c, s):
        for i in range(a.shape[0]):
            a[i] = b[i] + s * c[i]

    arrays = [(np.zeros(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32)) for _ in range(threads)]
    for a, b, c in arrays:
        triad(a, b, c, np.float32(3.0))

    def once() -> None:
        ts = [threading.Thread(target=triad, args=(a, b, c, np.float32(3.0))) for a, b, c in arrays]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return once


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]])


def note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
