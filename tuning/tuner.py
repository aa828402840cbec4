"""The autotuner: explore a program's schedules, check them, and time them on a backend or
predict them on a topology at every size (what ``distir-tune`` runs).

    from distir.tuning.tuner import tune
    from distir.tuning.topology import get_topology

    result = tune(module, ranks=256, sizes=[1 << 10, 1 << 20, 1 << 30],
                  model=get_topology("dgx2", nodes=16))
    result.best[1 << 30]                      # 'fuse(RS-Adam-AG) [asSlice(m,v)]'

Planning and executing are separate: ``explore.py`` finds and names the schedules and
checks each with the interpreter; ``search.py`` decides which of them are worth
evaluating; ``cost_model.py`` predicts (``model``), or ``timing.py`` measures
(``backend``), one time per schedule and size; this module only chains them and picks,
per size, the fastest schedule that passed its check. ``exhaustive=True`` evaluates
every schedule ``explore`` finds (``distir-tune --all``).

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

import numpy as np

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import PassFailedException, VerifyException

from distir.dialects.diagnostics import InputRejected
from distir.dialects.dist import TensorType
from distir.tuning import search, units
from distir.passes.support import printed_names
from distir.tuning.explore import Candidate, Checker, Exploration, explore, only_function
from distir.tuning.sizes import at_size, choose_dim, fitting, program_dims
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
    evaluated: int = 0
    """Schedules lowered and predicted (or timed): what the search saved is the rest."""
    checked: int = 0
    """Interpreter checks run."""
    parts: list[tuple[str, int, TuneResult]] = field(default_factory=list)
    """A program of many independent units (``units.py``): per class of units, its
    label, how many units it has and the tuning of its first unit."""

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
    exhaustive: bool = False,
) -> TuneResult:
    """Explore, check and time (``backend``) or predict (``model``) the schedules of
    ``module``'s function at every size (the program's own size when ``sizes`` is None);
    ``jobs`` processes check and predict many schedules (default: one per core).

    By default the search skips what cannot change the answer (``search.py``): programs
    that fit no size on ``ranks`` ranks, a second evaluation of schedules the cost model
    cannot tell apart, the checks of schedules the interpreter cannot tell apart, and
    overlaps whose bound is no better than the best found. ``exhaustive`` checks and
    evaluates every schedule ``explore`` finds, each on its own."""
    if (model is None) == (backend is None):
        raise InputRejected("give either a backend to time on or a topology to predict for")
    if ranks < 1:
        raise InputRejected(f"--ranks must be at least 1, got {ranks}")
    module = only_function(module, func_name)
    d = choose_dim(module, dim)
    sizes = sorted(set(sizes)) if sizes else [d]
    seconds: dict[str, float] = {}
    report = progress or (lambda phase, done, total: None)
    f = next(o for o in module.ops if isinstance(o, func.FuncOp))
    parts = units.classes(module, f)
    if sum(len(c.units) for c in parts) >= units.MANY_UNITS:
        return _tune_units(module, f, parts, ranks, sizes, d, model, backend, as_slice, report, rounds, jobs, exhaustive)

    t0 = time.perf_counter()
    fits = None if exhaustive else (lambda m: any(fitting(m, ranks, d, sizes)))
    ex = explore(module, as_slice=as_slice, progress=lambda n: report("explore", n, 0), fits=fits)
    seconds["explore"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ev = _Evaluator(ex, ranks, d, sizes, model, exhaustive, jobs, report)
    if model is not None:
        if exhaustive:
            ev.evaluate(list(range(len(ex.candidates))))
        else:
            plan = search.plan(ex.candidates, ranks)
            search.search(plan, ev.times_of, ev.evaluate, len(sizes))
            search.share_times(plan, ev.results)
        seconds["check and predict"] = time.perf_counter() - t0
        how = f"model {model.name}" + (f" ({model.levels[0].cardinality} {model.levels[0].name}s)" if len(model.levels) > 1 else "")
    else:
        ev.check(list(range(len(ex.candidates))))
        seconds["check"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        shares = {} if exhaustive else search.plan(ex.candidates, ranks).shares
        _measure(ex, ev, backend, ranks, d, sizes, report, rounds, shares)  # type: ignore[arg-type]
        how = f"backend {backend}"
        seconds["time"] = time.perf_counter() - t0
    evaluated = [i for i in range(len(ex.candidates)) if i in ev.results]
    for i in evaluated:
        ex.candidates[i].check = ev.results[i][0]
    bad = [ex.candidates[i] for i in evaluated if ex.candidates[i].check.startswith("differs")]
    bugs = [f"distir bug: schedule {c.name} ({c.pipeline}) does not compute what the program does: {c.check}" for c in bad]
    bugs += [f"distir bug: a pass crashed during the exploration: {e}" for e in ex.errors]
    notes = []
    if ex.truncated:
        notes.append(f"the exploration stopped after {len(ex.candidates)} schedules")
    if ex.unfit:
        notes.append(f"{ex.unfit} schedule(s) fit none of these sizes on {ranks} ranks (a dim the ranks do not divide): not evaluated")
    skipped = len(ex.candidates) - len(evaluated)
    if skipped:
        notes.append(f"{skipped} of {len(ex.candidates)} schedules were not evaluated: their bound is no better than the best found (--all evaluates every one)")
    unchecked = [ex.candidates[i] for i in evaluated if ex.candidates[i].check.startswith("not run")]
    if unchecked:
        notes.append(
            f"{len(unchecked)} schedule(s) could not run on the reduced shapes of the check (e.g. {unchecked[0].name}: "
            f"{unchecked[0].check.removeprefix('not run: ')}); they are not picked"
        )
    schedules = [
        Schedule(c.name, c.pipeline, ev.results[i][1], model is None, c.check, c.module, c.original)
        for i, c in ((i, ex.candidates[i]) for i in evaluated)
    ]
    best: dict[int, str | None] = {}
    for s in sizes:
        ok = [(sc.times[s], sc.name) for sc in schedules if sc.check == "ok" and sc.times.get(s) is not None]
        best[s] = min(ok)[1] if ok else None
    return TuneResult(sizes, d, schedules, best, ranks, how, seconds, bugs, notes, ev.evaluated, len(ev.checks))


class _Evaluator:
    """Each schedule's interpreter check (once per ``Candidate.check_key`` unless
    ``exhaustive``) and, with a model, its prediction at every size (lowered once at
    the reference size): ``results[i] = (check, {size: seconds or None})``."""

    def __init__(self, ex: Exploration, ranks: int, d: int, sizes: Sequence[int], model: Topology | None, exhaustive: bool, jobs: int | None, report: Progress):
        from distir.tuning.cost_model import Scaling, reference_size

        if model is not None and ranks > model.ranks:
            raise InputRejected(f"--ranks {ranks} is more than the {model.ranks} devices of {model.describe()} (give --nodes)")
        self.ex = ex
        self.checker = Checker.of(ex, ranks)
        self.ranks, self.d, self.sizes, self.model = ranks, d, list(sizes), model
        self.exhaustive, self.jobs, self.report = exhaustive, jobs, report
        if len(self.sizes) == 1:
            # one size: lowered at that size (the combining of collectives into buckets,
            # for one, depends on the size, and so does a square dim's element count)
            self.scaling = Scaling(self.sizes[0], EXACT_Q)
        else:
            d_ref, q = reference_size(list(program_dims(ex.candidates[0].module)), ranks, d)
            self.scaling = Scaling(d_ref, q)
        self.checks: dict[object, str] = {}
        self.results: dict[int, tuple[str, dict[int, float | None]]] = {}
        self.evaluated = 0

    def check(self, idxs: Sequence[int]) -> None:
        """The checks of ``idxs`` (recorded with no times yet)."""
        for i in idxs:
            if i in self.results:
                continue
            c = self.ex.candidates[i]
            key = i if self.exhaustive else c.check_key()
            if key not in self.checks:
                self.checks[key] = self.checker(c)
            self.results[i] = (self.checks[key], {s: None for s in self.sizes})

    def evaluate(self, idxs: list[int]) -> None:
        """Check and predict ``idxs``; predictions run in ``jobs`` processes when many."""
        self.check(idxs)
        ok = [i for i in idxs if self.results[i][0] == "ok"]
        done0 = sum(1 for r in self.results.values() if r[0] != "ok" or any(t is not None for t in r[1].values()))
        times = _each(self.predict, ok, self.jobs, lambda n: self.report("predict", done0 + n, len(self.ex.candidates)))
        self.evaluated += len(ok)
        for i, t in zip(ok, times):
            self.results[i] = ("ok", t)

    def times_of(self, i: int) -> np.ndarray | None:
        """Seconds per size (NaN: not at that size), None unless checked ok."""
        status, times = self.results[i]
        if status != "ok":
            return None
        return np.array([np.nan if times[s] is None else times[s] for s in self.sizes], dtype=float)

    def predict(self, i: int) -> dict[int, float | None]:
        from distir.lowering.pipeline import lower
        from distir.tuning.cost_model import predict, prepare

        c = self.ex.candidates[i]
        times: dict[int, float | None] = {s: None for s in self.sizes}
        assert self.model is not None
        try:
            module = c.module if self.scaling.d_ref == self.d else at_size(c.module, self.d, self.scaling.d_ref)
            lowered = lower(module, self.ranks, verify=False)
            prepared = prepare(lowered, _name(c), self.model, self.ranks, self.scaling)
        except (InputRejected, PassFailedException, VerifyException):
            return times  # not applicable on this rank count (a dim the ranks do not divide)
        for s, t in zip(self.sizes, predict(prepared, self.sizes)):
            times[s] = None if math.isnan(t) else float(t)
        return times


def _tune_units(
    module: ModuleOp,
    f: func.FuncOp,
    parts: list[units.UnitClass],
    ranks: int,
    sizes: list[int],
    d: int,
    model: Topology | None,
    backend: str | None,
    as_slice: Sequence[str] | None,
    report: Progress,
    rounds: int,
    jobs: int | None,
    exhaustive: bool,
) -> TuneResult:
    """A program of independent units, tuned class by class (``units.py``)."""
    from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
    from distir.passes.combine_collectives import CombineCollectivesPass
    from distir.passes.pipeline import parse_pipeline

    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    results: list[tuple[str, int, TuneResult]] = []
    for k, cls in enumerate(parts):
        report("classes", k, len(parts))
        prog = cls.first.program(module, f)
        own = d in program_dims(prog)
        names = {a.name_hint for a in next(o for o in prog.ops if isinstance(o, func.FuncOp)).body.block.args}
        mine = None if as_slice is None else [n for n in as_slice if n in names]
        r = tune(prog, ranks, sizes if own else None, dim=d if own else None, model=model, backend=backend, as_slice=mine, rounds=rounds, jobs=jobs, exhaustive=exhaustive)
        results.append((_label(prog, len(cls.units)), len(cls.units), r))
    report("classes", len(parts), len(parts))
    seconds["classes"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    whole = printed_names(module)
    renames = [units.names(module, f, cls, whole) for cls in parts]
    combos = _combos(parts, results, sizes, module, f)
    cands: list[Candidate] = [Candidate(module.clone(), (), "(as written)", original=True, check="ok")]
    bugs: list[str] = []
    from distir.dialects.context import make_context

    ctx = make_context()
    composed: dict[tuple[str, ...], Candidate] = {}
    for combo in combos:
        cand = _compose(module, combo, results, renames, ctx, bugs)
        if cand is not None:
            composed[combo] = cand
            cands.append(cand)
    seconds["compose"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ex = Exploration(cands)
    ev = _Evaluator(ex, ranks, d, sizes, model, True, jobs, report)
    _evaluate_whole(ex, ev, list(range(len(cands))), model, backend, ranks, d, sizes, report, rounds, jobs)
    # the collectives of each size's winner combined into larger buckets
    winners = {_best_index(ev, cands, s) for s in sizes}
    extra_from = len(cands)
    for i in sorted(winners):
        for bucket in units.BUCKETS:
            more = (FixMeshSizesPass(ranks=ranks), CombineCollectivesPass(bucket_bytes=bucket))
            combined = cands[i].module.clone()
            for p in more:
                p.apply(ctx, combined)
            cands.append(Candidate(combined, (*cands[i].passes, *more), f"{cands[i].name} + buckets of {_bytes(bucket)}", check="ok"))
    _evaluate_whole(ex, ev, list(range(extra_from, len(cands))), model, backend, ranks, d, sizes, report, rounds, jobs)
    if model is not None:
        seconds["predict"] = time.perf_counter() - t0
        how = f"model {model.name}" + (f" ({model.levels[0].cardinality} {model.levels[0].name}s)" if len(model.levels) > 1 else "")
    else:
        seconds["time"] = time.perf_counter() - t0
        how = f"backend {backend}"
    schedules = [Schedule(c.name, c.pipeline, ev.results[i][1], model is None, c.check, c.module, c.original) for i, c in enumerate(cands)]
    best: dict[int, str | None] = {}
    for s in sizes:
        ok = [(sc.times[s], sc.name) for sc in schedules if sc.times.get(s) is not None]
        best[s] = min(ok)[1] if ok else None
    notes = [f"{sum(n for _, n, _ in results)} independent parts in {len(results)} classes, each class tuned on its first part"]
    for label, _, r in results:
        bugs += [f"{label}: {b}" for b in r.bugs]
    checked = sum(r.checked for _, _, r in results)
    evaluated = ev.evaluated + sum(r.evaluated for _, _, r in results)
    return TuneResult(sizes, d, schedules, best, ranks, how, seconds, bugs, notes, evaluated, checked, results)


def _combos(parts: list[units.UnitClass], results: list[tuple[str, int, TuneResult]], sizes: Sequence[int], module: ModuleOp, f: func.FuncOp) -> list[tuple[str, ...]]:
    """The whole-program schedules worth predicting, as one class schedule per class:
    each size's per-class winners; the same with the classes whose units the default
    buckets combine kept at their first schedule (``fuse-maps``: combinable, and one
    collective per bucket beats a better schedule per tensor when the tensors are
    small)."""
    out: list[tuple[str, ...]] = []

    def add(combo) -> None:
        combo = tuple(combo)
        if all(combo) and combo not in out:
            out.append(combo)

    first = [_first_schedule(r) for _, _, r in results]
    small = [units.combinable(cls.first.program(module, f)) for cls in parts]
    for s in sizes:
        best = [r.best[s if s in r.best else r.sizes[0]] for _, _, r in results]
        add(best)
        add([fst if sm else b for b, fst, sm in zip(best, first, small)])
    return out


def _first_schedule(r: TuneResult) -> str | None:
    """The schedule every search starts from (``fuse-maps``), else the program as written."""
    for s in r.schedules:
        if s.pipeline == "fuse-maps" and s.check == "ok":
            return s.name
    return r.baseline.name


def _compose(module: ModuleOp, combo: tuple[str, ...], results, renames, ctx, bugs: list[str]) -> Candidate | None:
    """The whole program under one class schedule per class (``units.compose``),
    checked to do on every unit what its class's schedule does."""
    from distir.passes.pipeline import parse_pipeline

    chosen = [r.by_name(n) for (_, _, r), n in zip(results, combo)]
    passes = units.compose([(parse_pipeline(c.pipeline), rn) for c, rn in zip(chosen, renames)])
    out = module.clone()
    name = _combo_name(combo, results)
    try:
        for p in passes:
            p.apply(ctx, out)
        out.verify()
    except (PassFailedException, VerifyException, InputRejected) as e:
        bugs.append(f"distir bug: the classes' schedules of {name} do not compose into one pipeline: {e}")
        return None
    if not units.realized(out, [c.module for c in chosen]):
        bugs.append(f"distir bug: the composed pipeline of {name} does not do on every unit what its class's schedule does")
        return None
    return Candidate(out, passes, name, check="ok")


def _evaluate_whole(ex, ev, idxs, model, backend, ranks, d, sizes, report, rounds, jobs) -> None:
    """Predict (or time) whole-program candidates ``idxs``."""
    for i in idxs:
        ev.results[i] = ("ok", {s: None for s in sizes})
    if model is not None:
        times = _each(ev.predict, idxs, jobs, lambda n: report("predict", n, len(idxs)))
        for i, t in zip(idxs, times):
            ev.results[i] = ("ok", t)
        ev.evaluated += len(idxs)
    else:
        sub = Exploration([ex.candidates[i] for i in idxs])
        inner = _Evaluator.__new__(_Evaluator)
        inner.results = {k: ev.results[i] for k, i in enumerate(idxs)}
        inner.evaluated = 0
        _measure(sub, inner, backend, ranks, d, sizes, report, rounds, {})
        for k, i in enumerate(idxs):
            ev.results[i] = inner.results[k]
        ev.evaluated += inner.evaluated


def _best_index(ev, cands, size: int) -> int:
    ok = [(ev.results[i][1].get(size), i) for i in range(len(cands)) if ev.results[i][1].get(size) is not None]
    return min(ok)[1] if ok else 0


def _label(prog: ModuleOp, count: int) -> str:
    """``128 x 4096x4096``: how many units a class has and the shape of its first
    tensor argument."""
    fn = next(o for o in prog.ops if isinstance(o, func.FuncOp))
    shape = next((a.type for a in fn.body.block.args if isinstance(a.type, TensorType)), None)
    dims = "x".join(str(x) for x in shape.get_shape()) if shape is not None else "scalar"
    return f"{count} x {dims}"


def _combo_name(combo: Sequence[str], results: Sequence[tuple[str, int, TuneResult]]) -> str:
    """The whole program's schedule: one name when every class picked alike."""
    if len(set(combo)) == 1:
        return f"{combo[0]} (every part)"
    return "; ".join(f"{label}: {n}" for (label, _, _), n in zip(results, combo))


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


EXACT_Q = (1 << 61) - 1
"""A prime no dimension is a multiple of: a lowering at the size itself (``Scaling``)."""

PARALLEL_FROM = 24
"""Schedules from which the checks and predictions run in parallel processes."""

_JOB: Callable[[int], object] | None = None


def _run_job(i: int):
    assert _JOB is not None
    return i, _JOB(i)


def _each(fn: Callable[[int], object], items: Sequence[int], jobs: int | None, progress: Callable[[int], None]) -> list:
    """``[fn(i) for i in items]``, in ``jobs`` forked processes (default: one per core)
    when there are many; results in order."""
    global _JOB
    jobs = jobs or os.cpu_count() or 1
    out: list = [None] * len(items)
    if jobs < 2 or len(items) < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        for k, i in enumerate(items):
            out[k] = fn(i)
            progress(k + 1)
        return out
    _JOB = fn
    position = {i: k for k, i in enumerate(items)}
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, len(items))) as pool:
            for done, (i, r) in enumerate(pool.imap_unordered(_run_job, items), 1):
                out[position[i]] = r
                progress(done)
    finally:
        _JOB = None
    return out


def _name(c: Candidate) -> str:
    f = next(o for o in c.module.ops if isinstance(o, func.FuncOp))
    return f.sym_name.data


def _measure(
    ex: Exploration, ev: _Evaluator, backend: str, ranks: int, d: int, sizes: Sequence[int], report: Progress, rounds: int, shares: dict[int, int]
) -> None:
    """Time every schedule that passed its check at every size (one of each group that
    lowers to the same program: ``shares``) and record the times in ``ev.results``."""
    from distir.tuning.timing import time_programs

    usable = [i for i in range(len(ex.candidates)) if ev.results[i][0] == "ok" and i not in shares]
    total = len(usable) * len(sizes)
    done = 0
    for s in sizes:
        programs = [(ex.candidates[i].name, at_size(ex.candidates[i].module, d, s)) for i in usable]

        def tick(_name: str) -> None:
            nonlocal done
            done += 1
            report("time", min(done, total), total)

        times = time_programs(programs, ranks, backend, rounds=rounds, progress=tick)
        ev.evaluated += len(programs)
        for i in usable:
            ev.results[i][1][s] = times.get(ex.candidates[i].name)
    for i, j in shares.items():
        if ev.results[i][0] == "ok" and ev.results[j][0] == "ok":
            ev.results[i] = (ev.results[i][0], dict(ev.results[j][1]))
