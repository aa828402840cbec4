"""The autotuner: explore a program's schedules, check them, and time them on a backend or
predict them on a topology at every size (what ``distir-tune`` runs).

    from distir.tuning.tuner import tune
    from distir.tuning.topology import get_topology

    result = tune(module, ranks=256, sizes=[1 << 10, 1 << 20, 1 << 30],
                  model=get_topology("dgx2", nodes=16))
    result.best[1 << 30]                      # 'fuse(RS-Adam-AG) [asSlice(m,v)]'

Planning and executing are separate: ``explore.py`` finds and names the schedules and
checks each with the interpreter; ``cost_model.py`` predicts (``model``), or
``timing.py`` measures (``backend``), one time per schedule and size; this module only
chains them and picks, per size, the fastest schedule that passed its check.

Predictions lower each schedule once, at the reference size of ``cost_model``, and
evaluate every size from that lowering. Timing re-instantiates each schedule at every
size (``sizes.at_size``) and runs it.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import PassFailedException, VerifyException

from distir.dialects.diagnostics import InputRejected
from distir.tuning.explore import Candidate, Checker, Exploration, explore, only_function
from distir.tuning.sizes import at_size, choose_dim, program_dims
from distir.tuning.topology import Topology


@dataclass
class Schedule:
    """One schedule's result: its name, the ``-p`` pipeline that produces it, its time per
    size (None: not applicable at that size), whether the times are measured, and its
    interpreter check (``ok``, or why not)."""

    name: str
    pipeline: str
    times: dict[int, float | None]
    measured: bool
    check: str
    module: ModuleOp
    original: bool = False


@dataclass
class TuneResult:
    sizes: list[int]
    dim: int
    schedules: list[Schedule]
    best: dict[int, str | None]
    ranks: int
    how: str
    """``model dgx2 (16 nodes)`` or ``backend local``."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of each phase: explore, check, predict or time."""
    bugs: list[str] = field(default_factory=list)
    """Schedules that disagree with the original (distir bugs) and passes that crashed."""
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> Schedule:
        return next(s for s in self.schedules if s.original)

    def speedup(self, s: Schedule, size: int) -> float | None:
        base, t = self.baseline.times.get(size), s.times.get(size)
        if base is None or t is None or not t > 0:
            return None
        return base / t

    def by_name(self, name: str) -> Schedule:
        return next(s for s in self.schedules if s.name == name)

    def best_module(self, size: int) -> ModuleOp | None:
        """The best schedule at ``size``, instantiated at that size."""
        name = self.best.get(size)
        if name is None:
            return None
        return at_size(self.by_name(name).module, self.dim, size)


Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``."""


def tune(
    module: ModuleOp,
    ranks: int,
    sizes: Sequence[int] | None = None,
    dim: int | None = None,
    model: Topology | None = None,
    backend: str | None = None,
    func_name: str | None = None,
    as_slice: Sequence[str] | None = None,
    progress: Progress | None = None,
    rounds: int = 5,
    jobs: int | None = None,
) -> TuneResult:
    """Explore, check and time (``backend``) or predict (``model``) every schedule of
    ``module``'s function at every size (the program's own size when ``sizes`` is None);
    ``jobs`` processes check and predict many schedules (default: one per core)."""
    if (model is None) == (backend is None):
        raise InputRejected("give either a backend to time on or a topology to predict for")
    if ranks < 1:
        raise InputRejected(f"--ranks must be at least 1, got {ranks}")
    module = only_function(module, func_name)
    d = choose_dim(module, dim)
    sizes = sorted(set(sizes)) if sizes else [d]
    seconds: dict[str, float] = {}
    report = progress or (lambda phase, done, total: None)

    t0 = time.perf_counter()
    ex = explore(module, as_slice=as_slice, progress=lambda n: report("explore", n, 0))
    seconds["explore"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    evaluate = _Evaluation(ex, ranks, d, sizes, model)
    results = _each(evaluate, len(ex.candidates), jobs, lambda i: report("predict" if model else "check", i, len(ex.candidates)))
    for c, (status, _) in zip(ex.candidates, results):
        c.check = status
    seconds["check and predict" if model else "check"] = time.perf_counter() - t0
    bad = [c for c in ex.candidates if c.check.startswith("differs")]
    bugs = [f"distir bug: schedule {c.name} ({c.pipeline}) does not compute what the program does: {c.check}" for c in bad]
    bugs += [f"distir bug: a pass crashed during the exploration: {e}" for e in ex.errors]
    notes = []
    if ex.truncated:
        notes.append(f"the exploration stopped after {len(ex.candidates)} schedules")
    unchecked = [c for c in ex.candidates if c.check.startswith("not run")]
    if unchecked:
        notes.append(
            f"{len(unchecked)} schedule(s) could not run on the reduced shapes of the check (e.g. {unchecked[0].name}: "
            f"{unchecked[0].check.removeprefix('not run: ')}); they are not picked"
        )
    if model is not None:
        times = [t for _, t in results]
        how = f"model {model.name}" + (f" ({model.levels[0].cardinality} {model.levels[0].name}s)" if len(model.levels) > 1 else "")
    else:
        t0 = time.perf_counter()
        times = _measure(ex, backend, ranks, d, sizes, report, rounds)  # type: ignore[arg-type]
        how = f"backend {backend}"
        seconds["time"] = time.perf_counter() - t0
    schedules = [
        Schedule(c.name, c.pipeline, times[i], model is None, c.check, c.module, c.original) for i, c in enumerate(ex.candidates)
    ]
    best: dict[int, str | None] = {}
    for s in sizes:
        ok = [(sc.times[s], sc.name) for sc in schedules if sc.check == "ok" and sc.times.get(s) is not None]
        best[s] = min(ok)[1] if ok else None
    return TuneResult(sizes, d, schedules, best, ranks, how, seconds, bugs, notes)


class _Evaluation:
    """What each schedule needs on its own: its interpreter check and, with a model, its
    prediction at every size (lowered once at the reference size)."""

    def __init__(self, ex: Exploration, ranks: int, d: int, sizes: Sequence[int], model: Topology | None):
        from distir.tuning.cost_model import Scaling, reference_size

        if model is not None and ranks > model.ranks:
            raise InputRejected(f"--ranks {ranks} is more than the {model.ranks} devices of {model.describe()} (give --nodes)")
        self.ex = ex
        self.checker = Checker.of(ex, ranks)
        self.ranks, self.d, self.sizes, self.model = ranks, d, list(sizes), model
        d_ref, q = reference_size(list(program_dims(ex.candidates[0].module)), ranks, d)
        self.scaling = Scaling(d_ref, q)

    def __call__(self, i: int) -> tuple[str, dict[int, float | None]]:
        from distir.lowering.pipeline import lower
        from distir.tuning.cost_model import predict, prepare

        c = self.ex.candidates[i]
        status = self.checker(c)
        times: dict[int, float | None] = {s: None for s in self.sizes}
        if status != "ok" or self.model is None:
            return status, times
        try:
            lowered = lower(at_size(c.module, self.d, self.scaling.d_ref), self.ranks)
            prepared = prepare(lowered, _name(c), self.model, self.ranks, self.scaling)
        except (InputRejected, PassFailedException, VerifyException):
            return status, times  # not applicable on this rank count (a dim the ranks do not divide)
        for s, t in zip(self.sizes, predict(prepared, self.sizes)):
            times[s] = None if math.isnan(t) else float(t)
        return status, times


PARALLEL_FROM = 24
"""Schedules from which the checks and predictions run in parallel processes."""

_JOB: Callable[[int], object] | None = None


def _run_job(i: int):
    assert _JOB is not None
    return i, _JOB(i)


def _each(fn: Callable[[int], object], count: int, jobs: int | None, progress: Callable[[int], None]) -> list:
    """``[fn(i) for i in range(count)]``, in ``jobs`` forked processes (default: one per
    core) when there are many; results in order."""
    global _JOB
    jobs = jobs or os.cpu_count() or 1
    out: list = [None] * count
    if jobs < 2 or count < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        for i in range(count):
            out[i] = fn(i)
            progress(i + 1)
        return out
    _JOB = fn
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, count)) as pool:
            for done, (i, r) in enumerate(pool.imap_unordered(_run_job, range(count)), 1):
                out[i] = r
                progress(done)
    finally:
        _JOB = None
    return out


def _name(c: Candidate) -> str:
    f = next(o for o in c.module.ops if isinstance(o, func.FuncOp))
    return f.sym_name.data


def _measure(ex: Exploration, backend: str, ranks: int, d: int, sizes: Sequence[int], report: Progress, rounds: int) -> list[dict[int, float | None]]:
    from distir.tuning.timing import time_programs

    usable = [(i, c) for i, c in enumerate(ex.candidates) if c.check == "ok"]
    out: list[dict[int, float | None]] = [{s: None for s in sizes} for _ in ex.candidates]
    total = len(usable) * len(sizes)
    done = 0
    for s in sizes:
        programs = [(c.name, at_size(c.module, d, s)) for _, c in usable]

        def tick(_name: str) -> None:
            nonlocal done
            done += 1
            report("time", min(done, total), total)

        times = time_programs(programs, ranks, backend, rounds=rounds, progress=tick)
        for i, c in usable:
            out[i][s] = times.get(c.name)
    return out
