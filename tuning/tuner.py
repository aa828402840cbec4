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

from distir.dialects.diagnostics import InputRejected, InternalError, check_rank_count
from distir.dialects.dist import TensorType
from distir.dialects.fast import clone
from distir.passes.pipeline import run_passes
from distir.passes.support import printed_names
from distir.tuning import search, units
from distir.tuning.explore import Candidate, Checker, Exploration, explore, only_function
from distir.tuning.sizes import at_size, choose_dim, fitting, format_size, program_dims, unpadded
from distir.tuning.topology import Topology


@dataclass
class Tuned:
    """What the tuner found about one schedule (the program ``tuning.schedule.Schedule``
    builds with ``pipeline``): its name, the ``-p`` pipeline that produces it, its time
    per size (None: not applicable at that size), whether the times are measured, and
    its interpreter check (``ok``, or why not). One entry of ``distir-tune --json``'s
    ``schedules``."""

    name: str
    pipeline: str
    times: dict[int, float | None]
    measured: bool
    check: str
    module: ModuleOp
    original: bool = False
    parts: tuple[str, ...] = ()
    """For a program of many units (``units.py``): the schedule of each class."""
    spread: dict[int, float | None] = field(default_factory=dict)
    """Measured times: how far the rounds at each size scatter above the best
    (``timing.spread``); two schedules closer than that are a tie."""


@dataclass
class TuneResult:
    sizes: list[int]
    dim: int
    schedules: list[Tuned]
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
    cut_short: str | None = None
    """Why the search stopped before it was done (``Limits``), or None."""

    @property
    def baseline(self) -> Tuned:
        return next(s for s in self.schedules if s.original)

    def speedup(self, s: Tuned, size: int) -> float | None:
        base, t = self.baseline.times.get(size), s.times.get(size)
        if base is None or t is None or not t > 0:
            return None
        return base / t

    def ties(self, size: int) -> list[Tuned]:
        """Measured times: the schedules (checked ok) whose best time at ``size`` is within
        the timing noise of the best's: their difference is no more than either one's
        spread (``Tuned.spread``), so a rerun may order them the other way."""
        name = self.best.get(size)
        if name is None:
            return []
        w = self.by_name(name)
        tw, sw = w.times.get(size), w.spread.get(size)
        if tw is None or sw is None:
            return []
        out = []
        for s in self.schedules:
            t, sp = s.times.get(size), s.spread.get(size)
            if s is w or s.check != "ok" or t is None or sp is None:
                continue
            if t - tw <= max(sw * tw, sp * t):
                out.append(s)
        return out

    def by_name(self, name: str) -> Tuned:
        return next(s for s in self.schedules if s.name == name)

    def best_module(self, size: int) -> ModuleOp | None:
        """The best schedule at ``size``, instantiated at that size."""
        name = self.best.get(size)
        if name is None:
            return None
        s = self.by_name(name)
        module = s.module
        if module is None:  # a pipeline the search was cut short before building
            from distir.passes.pipeline import apply_pipeline

            module = apply_pipeline(clone(next(x for x in self.schedules if x.original).module), s.pipeline)
        return at_size(module, self.dim, size)


Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``."""


@dataclass
class Limits:
    """When the search stops early, keeping the best schedule found so far:
    ``max_schedules`` evaluated (lowered and predicted, or timed), ``clock()`` (the
    monotonic clock) past ``deadline``, or ``interrupted()`` (the first Ctrl-C of
    ``distir-tune``). ``max_explored_ops`` bounds the exploration alone: the ops of the
    programs it keeps, over every part of a program tuned part by part (``explored_ops``
    counts them; each part's program as written is always kept, so a part explored once
    the bound is spent keeps only that); the schedules found are then evaluated as
    usual."""

    max_schedules: int | None = None
    deadline: float | None = None
    interrupted: Callable[[], bool] = lambda: False
    evaluated: int = 0
    reason: str | None = None
    """Why the search stopped early (None: it did not)."""
    clock: Callable[[], float] = time.monotonic
    max_explored_ops: int | None = None
    explored_ops: int = 0

    @classmethod
    def of(
        cls,
        max_schedules: int | None = None,
        time_budget: float | None = None,
        interrupted: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_explored_ops: int | None = None,
    ) -> Limits:
        deadline = None if time_budget is None else clock() + time_budget
        return cls(max_schedules, deadline, interrupted or (lambda: False), clock=clock, max_explored_ops=max_explored_ops)

    def ops_left(self) -> int | None:
        """The ops the next exploration may keep (None: no bound)."""
        return None if self.max_explored_ops is None else max(0, self.max_explored_ops - self.explored_ops)

    def stop(self) -> bool:
        if self.reason is None:
            if self.interrupted():
                self.reason = "interrupted"
            elif self.deadline is not None and self.clock() >= self.deadline:
                self.reason = "the time budget ran out"
            elif self.max_schedules is not None and self.evaluated >= self.max_schedules:
                self.reason = f"{self.max_schedules} schedules evaluated"
        return self.reason is not None


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
    limits: Limits | None = None,
    check_all: bool = True,
) -> TuneResult:
    """Explore, check and time (``backend``) or predict (``model``) the schedules of
    ``module``'s function at every size (the program's own size when ``sizes`` is None);
    ``jobs`` processes check and predict many schedules (default: one per core).

    By default the search skips what cannot change the answer (``search.py``): programs
    that fit no size on ``ranks`` ranks, a second evaluation of schedules the cost model
    cannot tell apart, the checks of schedules the interpreter cannot tell apart, and
    overlaps whose bound is no better than the best found. ``exhaustive`` checks and
    evaluates every schedule ``explore`` finds, each on its own. ``limits`` stops the
    search early (``TuneResult.cut_short`` says why) with the best found so far.
    ``check_all=False`` (with a model: a caller that uses only the picks, as the
    planner does) runs the interpreter checks of the schedules it picks, not of every
    schedule evaluated: when a pick fails its check, the evaluation runs again with
    every check (the picks are the same either way; the schedules not picked keep
    ``check`` "unchecked"); a program of independent units so checks each class's picks
    and the ``fuse-maps`` schedule its composed pipelines may keep."""
    if (model is None) == (backend is None):
        raise InputRejected("give either a backend to time on or a topology to predict for")
    check_rank_count(ranks)
    module = only_function(module, func_name)
    d = choose_dim(module, dim)
    sizes = sorted(set(sizes)) if sizes else [d]
    seconds: dict[str, float] = {}
    report = progress or (lambda phase, done, total: None)
    limits = limits or Limits()
    f = next(o for o in module.ops if isinstance(o, func.FuncOp))
    parts = units.classes(module, f)
    if sum(len(c.units) for c in parts) >= units.MANY_UNITS:
        return _tune_units(module, f, parts, ranks, sizes, d, model, backend, as_slice, report, rounds, jobs, exhaustive, limits, check_all)

    t0 = time.perf_counter()
    fits = None if exhaustive else (lambda m: any(fitting(m, ranks, d, sizes)))
    ex = explore(module, as_slice=as_slice, progress=lambda n: report("explore", n, 0), fits=fits, stop=limits.stop, max_ops=limits.ops_left())
    limits.explored_ops += ex.ops
    seconds["explore"] = time.perf_counter() - t0
    before = (limits.evaluated, limits.reason)
    if not check_all and model is not None:
        try:
            return _evaluate(module, ex, ranks, d, sizes, model, backend, rounds, jobs, exhaustive, limits, report, seconds, fits, deferred=True)
        except _FailedPick:  # evaluated again with every check: the search skips what failed
            limits.evaluated, limits.reason = before
            for c in ex.candidates:
                c.check = "unchecked"
    return _evaluate(module, ex, ranks, d, sizes, model, backend, rounds, jobs, exhaustive, limits, report, seconds, fits)


class _FailedPick(Exception):
    """A pick of a search with deferred checks failed its check (``tune``'s ``check_all``)."""


def _evaluate(
    module: ModuleOp,
    ex: Exploration,
    ranks: int,
    d: int,
    sizes: list[int],
    model: Topology | None,
    backend: str | None,
    rounds: int,
    jobs: int | None,
    exhaustive: bool,
    limits: Limits,
    report: Progress,
    seconds: dict[str, float],
    fits: Callable[[ModuleOp], bool] | None,
    deferred: bool = False,
) -> TuneResult:
    """Check and predict (or time) the explored schedules, and pick the fastest per size
    (``tune``); ``deferred``: only the picks are checked (``_FailedPick`` when one fails)."""

    t0 = time.perf_counter()
    ev = _Evaluator(ex, ranks, d, sizes, model, exhaustive, jobs, report, limits)
    ev.deferred = deferred
    if model is not None:
        if exhaustive:
            ev.evaluate(list(range(len(ex.candidates))))
        else:
            plan = search.plan(ex.candidates, ranks, lambda m: all(unpadded(m, ranks, d, sizes)))
            search.search(plan, ev.times_of, ev.evaluate, len(sizes), limits.stop)
            search.share_times(plan, ev.results, ev.done)
        seconds["check and predict"] = time.perf_counter() - t0
        how = f"model {model.name}" + (f" ({model.levels[0].cardinality} {model.levels[0].name}s)" if len(model.levels) > 1 else "")
    else:
        ev.check(list(range(len(ex.candidates))))
        seconds["check"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        shares = {} if exhaustive else search.plan(ex.candidates, ranks).shares
        ev.time(range(len(ex.candidates)), backend, rounds, shares)  # type: ignore[arg-type]
        how = f"backend {backend}"
        seconds["time"] = time.perf_counter() - t0
    if model is not None and 0 not in ev.done:
        # cut short before anything was evaluated: the program as written still is
        ev.limits, stopped = Limits(), ev.limits
        ev.evaluate([0])
        ev.limits = stopped
    evaluated = [i for i in range(len(ex.candidates)) if i in ev.results and (ev.results[i][0] != "ok" or i in ev.done)]
    for i in evaluated:
        ex.candidates[i].check = ev.results[i][0]
    bad = [ex.candidates[i] for i in evaluated if ex.candidates[i].check.startswith("differs")]
    bugs = [f"distir bug: schedule {c.name} ({c.pipeline}) does not compute what the program does: {c.check}" for c in bad]
    bugs += [f"distir bug: a pass crashed during the exploration: {e}" for e in ex.errors]
    notes = []
    if ex.truncated and limits.reason is None:
        notes.append(f"the exploration stopped after {len(ex.candidates)} schedules ({ex.ops} ops)")
    why = "a mesh that does not fit the rank count, or an at<r> outside its axis"
    if fits is not None and not fits(module):
        notes.append(f"the program fits none of these sizes on {ranks} ranks ({why}): no schedule was derived from it")
    if ex.unfit:
        notes.append(f"{ex.unfit} schedule(s) fit none of these sizes on {ranks} ranks ({why}): not evaluated")
    skipped = len(ex.candidates) - len(evaluated)
    if skipped and limits.reason is None:
        notes.append(f"{skipped} of {len(ex.candidates)} schedules were not evaluated: their bound is no better than the best found (--all evaluates every one)")
    unchecked = [ex.candidates[i] for i in evaluated if ex.candidates[i].check.startswith("not run")]
    if unchecked:
        notes.append(
            f"{len(unchecked)} schedule(s) could not run on the reduced shapes of the check (e.g. {unchecked[0].name}: "
            f"{unchecked[0].check.removeprefix('not run: ')}); they are not picked"
        )
    schedules = [
        Tuned(c.name, c.pipeline, ev.results[i][1], model is None, c.check, c.module, c.original, spread=ev.spreads.get(i, {}))
        for i, c in ((i, ex.candidates[i]) for i in evaluated)
    ]
    best: dict[int, str | None] = {}
    for s in sizes:
        ok = sorted((sc.times[s], sc.name, k) for k, sc in enumerate(schedules) if sc.check == "ok" and sc.times.get(s) is not None)
        best[s] = None
        for _, _, k in ok:
            if deferred and ev.check_now(evaluated[k]) != "ok":
                raise _FailedPick
            if ev.lowers_verified(evaluated[k]):
                best[s] = schedules[k].name
                break
            schedules[k].times = {size: None for size in sizes}  # not applicable after all
    if deferred:  # the schedules not picked were not checked
        for k, i in enumerate(evaluated):
            schedules[k].check = ex.candidates[i].check = ev.ran.get(i, "unchecked")
    if limits.reason is not None:
        notes.insert(0, f"the search was cut short ({limits.reason}): the best of the {len(evaluated)} schedules evaluated so far")
    return TuneResult(sizes, d, schedules, best, ranks, how, seconds, bugs, notes, ev.evaluated, len(ev.checks), cut_short=limits.reason)


class _Evaluator:
    """Each schedule's interpreter check (once per ``Candidate.check_key`` unless
    ``exhaustive``) and, with a model, its prediction at every size (lowered once at
    the reference size): ``results[i] = (check, {size: seconds or None})``."""

    def __init__(
        self, ex: Exploration, ranks: int, d: int, sizes: Sequence[int], model: Topology | None, exhaustive: bool, jobs: int | None, report: Progress, limits: Limits
    ):
        from distir.tuning.cost_model import Scaling, reference_size

        if model is not None and ranks > model.ranks:
            raise InputRejected(f"--ranks {ranks} is more than the {model.ranks} devices of {model.describe()} (give --nodes)")
        self.ex = ex
        self._checker: Checker | None = None
        self.ranks, self.d, self.sizes, self.model = ranks, d, list(sizes), model
        self.exhaustive, self.jobs, self.report, self.limits = exhaustive, jobs, report, limits
        self.done: set[int] = set()
        """Schedules whose prediction (or timing) is in ``results``."""
        if len(self.sizes) == 1:
            # one size: lowered at that size (the combining of collectives into buckets,
            # for one, depends on the size, and so does a square dim's element count)
            self.scaling = Scaling(self.sizes[0], EXACT_Q)
        else:
            d_ref, q = reference_size(list(program_dims(ex.candidates[0].module)), ranks, d)
            self.scaling = Scaling(d_ref, q)
        self.checks: dict[object, str] = {}
        self.results: dict[int, tuple[str, dict[int, float | None]]] = {}
        self.spreads: dict[int, dict[int, float | None]] = {}
        """Measured times: each schedule's spread per size (``timing.spread``)."""
        self.evaluated = 0
        self.verified_predictions = False
        """Lower each prediction verified after every pass (``_tune_units``); else the
        predictions lower unverified (they run nothing) and ``lowers_verified`` confirms
        the schedules that are picked."""
        self.confirmed: dict[int, bool] = {}
        self.deferred = False
        """Record every schedule as checked ok, and check only the picks (``check_now``:
        ``tune``'s ``check_all=False``)."""
        self.ran: dict[int, str] = {}
        """The checks of the schedules ``check_now`` was asked for."""

    def check(self, idxs: Sequence[int]) -> None:
        """The checks of ``idxs`` (recorded with no times yet; deferred: recorded ok)."""
        for i in idxs:
            if i in self.results:
                continue
            self.results[i] = ("ok" if self.deferred else self.check_now(i), {s: None for s in self.sizes})

    def check_now(self, i: int) -> str:
        """Schedule ``i``'s interpreter check (run once per ``Candidate.check_key``)."""
        c = self.ex.candidates[i]
        key = i if self.exhaustive else c.check_key()
        if key not in self.checks:
            if self._checker is None:  # built when first needed: a search cut short may need none
                self._checker = Checker.of(self.ex, self.ranks)
            self.checks[key] = self._checker(c)
        self.ran[i] = self.checks[key]
        return self.checks[key]

    def evaluate(self, idxs: list[int]) -> None:
        """Check and predict ``idxs`` (until ``limits`` stop the search); predictions run
        in ``jobs`` processes when many."""
        if self.limits.stop():
            return
        self.check(idxs)
        ok = [i for i in idxs if self.results[i][0] == "ok"]
        done0 = len(self.done)

        def tick(n: int) -> None:
            self.limits.evaluated += 1
            self.report("predict", done0 + n, len(self.ex.candidates))

        times = _each(self.predict, ok, self.jobs, tick, self.limits.stop)
        for i, t in zip(ok, times):
            if t is not None:
                self.results[i] = ("ok", t)
                self.done.add(i)
                self.evaluated += 1

    def time(self, idxs: Sequence[int], backend: str, rounds: int, shares: dict[int, int]) -> None:
        """Time the schedules ``idxs`` that passed their check at every size they fit (one
        of each group that lowers to the same program: ``shares``) on ``backend``; the
        limits are checked between sizes and, on ``local``, between programs
        (``max_schedules`` caps the schedules timed): a schedule cut off at a size is not
        timed (not evaluated), rather than not applicable there."""
        from distir.tuning.timing import spread, time_programs

        cands = self.ex.candidates
        usable = [i for i in idxs if self.results[i][0] == "ok" and i not in shares]
        if self.limits.max_schedules is not None:
            usable = usable[: max(1, self.limits.max_schedules)]
        total = len(usable) * len(self.sizes)
        done = 0
        fit = {i: fitting(cands[i].module, self.ranks, self.d, self.sizes) for i in usable}

        def tick(_name: str) -> None:
            nonlocal done
            done += 1
            self.report("time", min(done, total), total)

        for k, s in enumerate(self.sizes):
            if self.limits.stop():
                break
            # a size the schedule's slicing does not divide is not applicable: not built
            programs = [(cands[i].name, at_size(cands[i].module, self.d, s)) for i in usable if fit[i][k]]
            samples: dict[str, list[float]] = {}
            times = time_programs(programs, self.ranks, backend, rounds=rounds, progress=tick, samples=samples, stop=self.limits.stop)
            self.evaluated += len(times)
            for i in usable:
                if fit[i][k] and cands[i].name not in times:
                    continue  # cut off by the limits before it was timed
                self.results[i][1][s] = times.get(cands[i].name) if fit[i][k] else None
                self.spreads.setdefault(i, {})[s] = spread(samples.get(cands[i].name, [])) if fit[i][k] else None
                self.done.add(i)
        for i, j in shares.items():
            if self.results[i][0] == "ok" and self.results[j][0] == "ok" and j in self.done:
                self.results[i] = (self.results[i][0], dict(self.results[j][1]))
                self.spreads[i] = dict(self.spreads.get(j, {}))
                self.done.add(i)

    def times_of(self, i: int) -> np.ndarray | None:
        """Seconds per size (NaN: not at that size), None unless checked ok and
        evaluated."""
        if i not in self.done:
            return None
        status, times = self.results[i]
        if status != "ok":
            return None
        return np.array([np.nan if times[s] is None else times[s] for s in self.sizes], dtype=float)

    def predict(self, i: int) -> dict[int, float | None]:
        from distir.lowering.pipeline import lower
        from distir.tuning.cost_model import Scaling, predict, prepare, topology_target

        c = self.ex.candidates[i]
        times: dict[int, float | None] = {s: None for s in self.sizes}
        assert self.model is not None
        # lowered and planned in one verified pipeline (``prepare`` would plan a copy and
        # verify it whole again)
        target = topology_target(self.model)
        verify = self.verified_predictions
        try:
            module = c.module if self.scaling.d_ref == self.d else at_size(c.module, self.d, self.scaling.d_ref)
            try:
                lowered = lower(module, self.ranks, target=target, verify=verify)
            except (InputRejected, PassFailedException, VerifyException):
                raise
            except Exception:
                if not verify:  # a pass fed what an earlier one broke: the verified lowering names that one
                    lower(module, self.ranks, target=target)
                raise
            prepared = prepare(lowered, _name(c), self.model, self.ranks, self.scaling)
        except (InputRejected, PassFailedException, VerifyException):
            return times  # not applicable on this rank count (a dim the ranks do not divide)
        for s, t in zip(self.sizes, predict(prepared, self.sizes)):
            times[s] = None if math.isnan(t) else float(t)
        for s in self.sizes:
            if times[s] is None and s != self.scaling.d_ref:
                # a size the reference lowering does not scale to (blocks of different
                # sizes there: padded buffers): lowered at that size, its padding counted
                try:
                    lowered = lower(at_size(c.module, self.d, s), self.ranks, target=target, verify=verify)
                    exact = prepare(lowered, _name(c), self.model, self.ranks, Scaling(s, EXACT_Q))
                except (InputRejected, PassFailedException, VerifyException):
                    continue
                t = float(predict(exact, [s])[0])
                times[s] = None if math.isnan(t) else t
        return times

    def lowers_verified(self, i: int) -> bool:
        """Whether schedule ``i`` lowers with every pass's result verified (at the
        reference size, as predicted): a prediction lowers without verifying, since it
        runs nothing, so a schedule is confirmed before it is picked. False: not
        applicable after all (the rank count or a dim decides); a pass that breaks the
        program raises ``PassProducedInvalidIR`` naming it."""
        from distir.lowering.pipeline import lower
        from distir.tuning.cost_model import topology_target

        if self.verified_predictions or self.model is None:
            return True
        if i not in self.confirmed:
            c = self.ex.candidates[i]
            module = c.module if self.scaling.d_ref == self.d else at_size(c.module, self.d, self.scaling.d_ref)
            try:
                lower(module, self.ranks, target=topology_target(self.model))
                self.confirmed[i] = True
            except (InputRejected, PassFailedException, VerifyException):
                self.confirmed[i] = False
        return self.confirmed[i]


@dataclass
class _Choice:
    """A class's schedule: its name, pipeline and program (the class's first unit)."""

    name: str
    pipeline: str
    module: ModuleOp
    times: dict[int, float | None]


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
    limits: Limits,
    check_all: bool = True,
) -> TuneResult:
    """A program of independent units, tuned class by class (``units.py``): the classes
    (the heaviest first), then the whole program under each size's class schedules
    composed into one pipeline, against the program as written, then with larger
    buckets. Cut short (``limits``), a class not tuned keeps its first schedule
    (``fuse-maps``), a composed pipeline is not applied (or not further: ``limits``
    is checked between its passes) and a whole program not predicted gets the sum of
    its parts' predictions. What every outcome needs (the program as written, its
    values' printed names) is prepared first, inside the budget. ``check_all=False``
    (``tune``'s) checks each class's picks and its ``fuse-maps`` schedule only."""
    from distir.dialects.context import make_context

    seconds: dict[str, float] = {}
    ctx = make_context()
    t0 = time.perf_counter()
    written = clone(module)
    whole = printed_names(module)
    results: list[TuneResult | None] = [None] * len(parts)
    programs = [cls.first.program(module, f) for cls in parts]
    for done, k in enumerate(sorted(range(len(parts)), key=lambda k: -_weight(parts[k], programs[k]))):
        report("classes", done, len(parts))
        if limits.stop():
            break
        prog = programs[k]
        own = d in program_dims(prog)
        names = {a.name_hint for a in _function_of(prog).body.block.args}
        mine = None if as_slice is None else [n for n in as_slice if n in names]
        results[k] = tune(
            prog, ranks, sizes if own else None, dim=d if own else None, model=model, backend=backend, as_slice=mine, rounds=rounds, jobs=jobs, exhaustive=exhaustive, limits=limits,
            check_all=check_all,
        )
        if not check_all:
            _check_first(results[k], prog, ranks)
    report("classes", len(parts), len(parts))
    labels = [_label(prog, len(cls.units)) for prog, cls in zip(programs, parts)]
    seconds["classes"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    renames = [units.names(module, f, cls, whole) for cls in parts]
    firsts = [_first_choice(r, prog, ctx) for r, prog in zip(results, programs)]
    small = [units.combinable(prog) for prog in programs]
    combos: list[tuple[str, tuple[_Choice, ...]]] = []
    for s in sizes:
        best = tuple(_best_choice(r, s) or first for r, first in zip(results, firsts))
        combinable = tuple(fst if sm else b for b, fst, sm in zip(best, firsts, small))
        at = f" at {format_size(s)}" if len(sizes) > 1 else ""
        for what, combo in ((f"each part's best{at}", best), (f"each part's best{at}, small parts combinable", combinable)):
            if not any(_same_combo(combo, c) for _, c in combos):
                names = {c.name for c in combo}
                combos.append((f"{names.pop()} (every part)" if len(names) == 1 else what, combo))
    bugs: list[str] = []
    # the program as written first: every speedup is over it
    cands: list[Candidate] = [Candidate(written, (), "(as written)", original=True, check="ok")]
    estimates: list[dict[int, float | None]] = [
        _by_parts(sizes, [((r.baseline.times if r is not None else {}), len(cls.units)) for r, cls in zip(results, parts)])
    ]
    chosen: list[tuple[str, ...]] = [()]
    for name, combo in combos:
        cand = _compose(module, name, combo, renames, ctx, bugs, limits.stop)
        if cand is not None:
            cands.append(cand)
            chosen.append(tuple(c.name for c in combo))
            estimates.append(_by_parts(sizes, [(c.times, len(cls.units)) for c, cls in zip(combo, parts)]))
    seconds["compose"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ex = Exploration(cands)
    ev = _Evaluator(ex, ranks, d, sizes, model, True, jobs, report, limits)
    ev.verified_predictions = True  # a few whole programs, the ones the result names
    for i in range(len(cands)):
        ev.results[i] = ("ok", {s: None for s in sizes})
    for i in range(len(cands)):
        _evaluate_whole(ev, i, model, backend, rounds, limits)
    # the collectives of each size's winner combined into larger buckets, while that helps
    for i in sorted({_best_index(ev, s) for s in sizes} - {None}):  # type: ignore[type-var]
        before = ev.times_of(i)
        for bucket in units.BUCKETS:
            if limits.stop():
                break
            from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
            from distir.passes.combine_collectives import CombineCollectivesPass

            more = (FixMeshSizesPass(ranks=ranks), CombineCollectivesPass(bucket_bytes=bucket))
            combined = clone(cands[i].module)
            run_passes(combined, more, ctx)
            cands.append(Candidate(combined, (*cands[i].passes, *more), f"{cands[i].name} + buckets of {_bytes(bucket)}", check="ok"))
            estimates.append({s: None for s in sizes})
            chosen.append(chosen[i])
            j = len(cands) - 1
            ev.results[j] = ("ok", {s: None for s in sizes})
            _evaluate_whole(ev, j, model, backend, rounds, limits)
            now = ev.times_of(j)
            if now is None or before is None or not np.any(now < before):
                break
            before = now
    seconds["predict" if model is not None else "time"] = time.perf_counter() - t0
    how = f"backend {backend}" if model is None else f"model {model.name}" + (
        f" ({model.levels[0].cardinality} {model.levels[0].name}s)" if len(model.levels) > 1 else ""
    )
    notes = [f"{sum(len(c.units) for c in parts)} independent parts in {len(parts)} classes, each class tuned on its first part"]
    schedules = []
    by_parts = False
    for i, c in enumerate(cands):
        times = ev.results[i][1]
        if i not in ev.done and any(v is not None for v in estimates[i].values()):
            times, by_parts = estimates[i], True
        elif i not in ev.done and "buckets" in c.name:
            continue
        schedules.append(Tuned(c.name, c.pipeline, times, model is None, c.check, c.module, c.original, chosen[i]))
    if by_parts:
        notes.append("the whole program was not predicted under some schedules: their times are the sum of their parts'")
    untuned = [label for label, r in zip(labels, results) if r is None]
    if untuned:
        notes.append(f"not tuned (they keep fuse-maps): {', '.join(untuned)}")
    best: dict[int, str | None] = {}
    for s in sizes:
        ok = [(sc.times[s], sc.name) for sc in schedules if sc.times.get(s) is not None]
        best[s] = min(ok)[1] if ok else next((sc.name for sc in schedules if not sc.original), None)
    if limits.reason is not None:
        notes.insert(0, f"the search was cut short ({limits.reason}): the best schedule found so far")
    tuned = [(label, len(cls.units), r) for label, cls, r in zip(labels, parts, results) if r is not None]
    for label, _, r in tuned:
        bugs += [f"{label}: {b}" for b in r.bugs]
    checked = sum(r.checked for _, _, r in tuned)
    evaluated = ev.evaluated + sum(r.evaluated for _, _, r in tuned)
    return TuneResult(sizes, d, schedules, best, ranks, how, seconds, bugs, notes, evaluated, checked, tuned, limits.reason)


def _function_of(module: ModuleOp) -> func.FuncOp:
    return next(o for o in module.ops if isinstance(o, func.FuncOp))


def _weight(cls: units.UnitClass, prog: ModuleOp) -> int:
    """Elements a class's units hold in all: the classes that weigh most are tuned first."""
    fn = _function_of(prog)
    return len(cls.units) * sum(math.prod(a.type.get_shape()) for a in fn.body.block.args if isinstance(a.type, TensorType))


def _first_choice(r: TuneResult | None, prog: ModuleOp, ctx) -> _Choice:
    """The schedule every search starts from (``fuse-maps``), else the program as written."""
    if r is not None:
        for s in r.schedules:
            if s.pipeline == "fuse-maps" and s.check == "ok":
                return _Choice(s.name, s.pipeline, s.module, s.times)
        return _Choice(r.baseline.name, "", r.baseline.module, r.baseline.times)
    from distir.passes.fuse_maps import FuseMapsPass
    from distir.tuning.explore import structural_name

    m = clone(prog)
    run_passes(m, [FuseMapsPass()], ctx)
    return _Choice(structural_name(m), "fuse-maps", m, {})


def _check_first(r: TuneResult, prog: ModuleOp, ranks: int) -> None:
    """With only the picks checked (``check_all=False``), a class's ``fuse-maps``
    schedule is checked too: the composed pipelines keep it for the classes not worth a
    schedule of their own (``_first_choice``), as a pick."""
    s = next((s for s in r.schedules if s.pipeline == "fuse-maps"), None)
    if s is None or s.check != "unchecked":
        return
    original = only_function(prog, None)
    s.check = Checker.of(Exploration([Candidate(original, (), "(as written)", original=True, check="ok")]), ranks)(Candidate(s.module, (), s.name))
    r.checked += 1
    if s.check.startswith("differs"):
        r.bugs.append(f"distir bug: schedule {s.name} ({s.pipeline}) does not compute what the program does: {s.check}")


def _best_choice(r: TuneResult | None, size: int) -> _Choice | None:
    """A class's fastest schedule at ``size`` among those that compose: every explored
    schedule starts with ``fuse-maps`` on the whole program, so a class cannot keep its
    maps as written while another fuses them (in the model the two take the same time)."""
    if r is None:
        return None
    at = size if size in r.sizes else r.sizes[0]
    ok = [(s.times[at], s.name) for s in r.schedules if s.check == "ok" and not s.original and s.times.get(at) is not None]
    if not ok:
        return None
    s = r.by_name(min(ok)[1])
    return _Choice(s.name, s.pipeline, s.module, s.times)


def _same_combo(a: Sequence[_Choice], b: Sequence[_Choice]) -> bool:
    return all(x.pipeline == y.pipeline for x, y in zip(a, b))


def _by_parts(sizes: Sequence[int], parts: Sequence[tuple[dict[int, float | None], int]]) -> dict[int, float | None]:
    """The sum of the parts' times (each class's time times its units) at each size; a
    class tuned at its own size only counts that time at every size."""
    out: dict[int, float | None] = {}
    for s in sizes:
        total = 0.0
        for times, count in parts:
            t = times.get(s) if s in times else (next(iter(times.values())) if len(times) == 1 else None)
            if t is None:
                total = math.nan
                break
            total += count * t
        out[s] = None if math.isnan(total) else total
    return out


def _compose(
    module: ModuleOp, name: str, combo: Sequence[_Choice], renames, ctx, bugs: list[str], stop: Callable[[], bool] = lambda: False
) -> Candidate | None:
    """The whole program under one class schedule per class (``units.compose``),
    checked to do on every unit what its class's schedule does; once ``stop()`` (the
    search was cut short; asked before each pass) only the pipeline (``Tuned.module``
    is built when asked for)."""
    from distir.passes.pipeline import parse_pipeline

    try:
        passes = units.compose([(parse_pipeline(c.pipeline), rn) for c, rn in zip(combo, renames)])
    except ValueError as e:
        bugs.append(f"distir bug: the classes' schedules of {name} do not compose into one pipeline: {e}")
        return None
    unbuilt = Candidate(None, passes, name, check="ok")  # type: ignore[arg-type]
    if stop():
        return unbuilt
    out = clone(module)
    try:
        for p in passes:
            if stop():
                return unbuilt
            run_passes(out, [p], ctx)  # verified after each, naming the pass
    except (PassFailedException, VerifyException, InputRejected, InternalError) as e:
        bugs.append(f"distir bug: the classes' schedules of {name} do not compose into one pipeline: {e}")
        return None
    if not units.realized(out, [c.module for c in combo]):
        bugs.append(f"distir bug: the composed pipeline of {name} does not do on every unit what its class's schedule does")
        return None
    return Candidate(out, passes, name, check="ok")


def _evaluate_whole(ev: _Evaluator, i: int, model: Topology | None, backend: str | None, rounds: int, limits: Limits) -> None:
    """Predict (or time) the whole-program candidate ``i`` unless ``limits`` stopped."""
    if limits.stop():
        return
    if model is not None:
        ev.results[i] = ("ok", ev.predict(i))
        ev.evaluated += 1
        ev.done.add(i)
    else:
        ev.time([i], backend, rounds, {})
    limits.evaluated += 1


def _best_index(ev, size: int) -> int | None:
    ok = [(ev.results[i][1].get(size), i) for i in ev.done if ev.results[i][1].get(size) is not None]
    return min(ok)[1] if ok else None


def _label(prog: ModuleOp, count: int) -> str:
    """``128 x 4096x4096``: how many units a class has and the shape of its first
    tensor argument."""
    fn = next(o for o in prog.ops if isinstance(o, func.FuncOp))
    shape = next((a.type for a in fn.body.block.args if isinstance(a.type, TensorType)), None)
    dims = "x".join(str(x) for x in shape.get_shape()) if shape is not None else "scalar"
    return f"{count} x {dims}"


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


def _each(fn: Callable[[int], object], items: Sequence[int], jobs: int | None, progress: Callable[[int], None], stop: Callable[[], bool] = lambda: False) -> list:
    """``[fn(i) for i in items]``, in ``jobs`` forked processes (default: one per core)
    when there are many; results in order, None for the items not run once ``stop()``
    (checked between items) said to stop."""
    global _JOB
    jobs = jobs or os.cpu_count() or 1
    out: list = [None] * len(items)
    if jobs < 2 or len(items) < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        for k, i in enumerate(items):
            if stop():
                break
            out[k] = fn(i)
            progress(k + 1)
        return out
    _JOB = fn
    position = {i: k for k, i in enumerate(items)}
    try:
        # the workers leave Ctrl-C to this process, which stops them (``stop``)
        with multiprocessing.get_context("fork").Pool(min(jobs, len(items)), initializer=_ignore_interrupts) as pool:
            for done, (i, r) in enumerate(pool.imap_unordered(_run_job, items), 1):
                out[position[i]] = r
                progress(done)
                if stop():
                    pool.terminate()
                    break
    finally:
        _JOB = None
    return out


def _ignore_interrupts() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _name(c: Candidate) -> str:
    f = next(o for o in c.module.ops if isinstance(o, func.FuncOp))
    return f.sym_name.data
