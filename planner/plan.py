"""The planner's driver: from a program and a cluster to its best plans.

    from distir.planner.plan import plan
    result = plan(module, ranks=256, topology="dgx2", nodes=16, memory=80 << 30)
    result.best.module          # the winning program, partitioned and scheduled
    result.best.predicted_s     # its step time on the topology (the cost model)

1. **Meshes** (``meshes.py``): every factorization of the ranks into one or two logical
   axes, each placed on the topology's hierarchy by every P² parallelism matrix.
2. **Placements** (``ilp.py``): on each mesh, the integer program over the strategies
   of every op (``strategies.py``: the partitioner's factor rules), priced by the cost
   model (``costs.py``), within the memory per device. Meshes whose program has no
   solution within the memory are out; when no mesh has one, ``NoPlanFits`` gives the
   smallest memory per rank any mesh reaches. The meshes are solved in the order of a
   lower bound of their optimum (``ilp.LowerBound``); once ``top`` have solutions, a
   mesh whose bound exceeds the ``top``-th best estimate cannot lead and is not solved
   (``Searched.bound``): the plans are those of solving every mesh.
3. **Programs** (``materialize.py``): the ``top`` cheapest meshes' solutions become
   programs, partitioned by the partitioner.
4. **Reductions and schedules**: each leading program's AllReduces over several levels
   of the hierarchy become P²'s fastest synthesized reduction programs
   (``synthesize-reductions``); then the tuner (``tuning/tuner.py``) explores its
   CoCoNet schedules and fused operators and keeps the fastest, when the program is
   small enough for its exploration (``TUNE_MAX_COLLECTIVES``).
5. **Prediction**: each leading program, lowered, is predicted by the cost model (the
   same model ``distir-tune --model`` uses): the step time, the time of its compute and
   of each kind of collective (``cost_model.breakdown``), and its memory per rank
   (``memory.py``). A plan over the memory limit is not a plan. The plans are ranked by
   their predicted step time. A candidate is predicted, never run: only the best plan's
   program (the one written and run) is verified (``Plan.verify``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from distir.dialects import coll
from distir.dialects.diagnostics import InputRejected
from distir.dialects.fast import Kinds, walk
from distir.passes.support import collect_garbage, collections_of_new_objects, gc_paused, set_aside
from distir.planner import ilp
from distir.planner.costs import Costs, ShapeCosts
from distir.planner.graph import Graph, PlanError, read_graph
from distir.planner.memory import Memory, format_bytes, memory_per_rank
from distir.planner.meshes import Mesh, meshes
from distir.planner.strategies import Layout, Strategy
from distir.tuning.topology import Topology

TUNE_MAX_COLLECTIVES = 16
"""The tuner explores the schedules of programs whose independent parts (``tuning/
units.py``) have at most this many collectives each (its breadth-first exploration
grows with every place a transformation applies); larger programs keep the schedule
the partitioner and P²'s reductions give them."""

ALTERNATIVES = 2
"""Plans with the largest arguments laid out otherwise, evaluated besides the best of
each leading mesh (when the tuner schedules them)."""

BOUND_SWEEPS = 10
"""Sweeps of each mesh's lower bound (``ilp.LowerBound``) before the meshes are
solved, cheapest bound first; ``BOUND_MORE_SWEEPS`` more when it does not yet exceed
the ``top``-th best estimate, before solving it."""
BOUND_MORE_SWEEPS = 30

TUNE_MAX_SCHEDULES = 32
"""Schedules the tuner evaluates per plan (``tuner.Limits``): its search orders them by
their bounds, so the best are among the first."""

TUNE_MAX_EXPLORED_OPS = 200_000
"""The ops of the programs the tuner's exploration of one plan keeps (``tuner.Limits``'s
``max_explored_ops``: every schedule it finds is a copy of the program, or of one part
of it). The garbage collector stays paused while the planner tunes (``plan``; the
copies are collected once after each plan's tuning), so this bounds its memory as well
as its time: the explorations of the JAX GPT step's plans on one dgx2 node kept
944,226 ops of programs without it, 84 schedules (198,974 ops) with it, and the picks
and the plans are the same (the tuner evaluates at most ``TUNE_MAX_SCHEDULES``, the most promising
first). Measured on that plan (``bench/plan.py --only gptjax --machines dgx2:1``, load
3-7): the planner's tuning took 335 s of CPU and the planner peaked at 2,240 MiB with
the collector resumed around each exploration and xDSL's copies; 80 s and 2,023 MiB
with it paused and ``fast.clone``'s copies; 34 s and 717 MiB with this bound too."""

Progress = Callable[[str, int, int], None]


class NoPlanFits(InputRejected):
    """No placement fits the memory per device; ``smallest`` is the least memory per
    rank any mesh reaches."""

    def __init__(self, message: str, smallest: float):
        super().__init__(message)
        self.smallest = smallest


@dataclass
class Searched:
    """One mesh's integer program: its optimum (None: nothing fits), its size."""

    mesh: Mesh
    solution: ilp.Solution | None
    size: dict[str, int]
    problem: ilp.Problem | None = field(default=None, repr=False)
    seconds: float = 0.0
    """CPU seconds building and solving it."""
    overlapped: bool = False
    """A candidate for a schedule to make better than its price says: priced with the
    collectives after matmuls and embeddings overlapped (``ilp.problem``), or the best
    plan with its largest arguments laid out otherwise; evaluated only when the tuner
    schedules it."""
    solved: bool = False
    """Whether its integer program was solved (``solution`` None and ``solved``: no
    placement fits the memory)."""
    bound: float | None = None
    """Not solved: a lower bound of its optimum (``ilp.LowerBound``) above the estimate
    of the ``top``-th best plan found, which it therefore cannot beat."""
    annotated: bool = False
    """Written as a user writes a plan by hand: its arguments placed as the solution
    says, everything else by the partitioner's propagation (``materialize.annotated``)."""

    @property
    def estimate(self) -> float:
        return self.solution.seconds if self.solution is not None else math.inf


@dataclass
class Term:
    """One term of a plan's cost for ``--explain``: what (in the plan's mesh axes), how
    many, seconds in all, and ``key``: the same term in words that do not depend on the
    mesh (to compare plans on different meshes)."""

    what: str
    count: int
    seconds: float
    key: str = ""


@dataclass
class Plan:
    mesh: Mesh
    module: ModuleOp
    strategies: list[Strategy]
    """Per node of the graph."""
    estimate_s: float
    """The integer program's objective."""
    predicted_s: float = math.nan
    compute_s: float = 0.0
    communication_s: float = 0.0
    collectives: dict[str, float] = field(default_factory=dict)
    memory: Memory | None = None
    pipeline: str = ""
    """The passes applied to the partitioned program (``distir-opt -p``)."""
    schedule: str = ""
    """The tuner's name for the schedule (empty: not tuned)."""
    notes: list[str] = field(default_factory=list)
    verified: bool = False
    """Whether ``module`` verified: ``plan`` verifies the best plan's program (the one
    written and run); the others were only predicted (``verify`` before running one)."""
    prepared: tuple | None = field(default=None, repr=False, compare=False)
    """(module, its lowering prepared for the cost model) when ``schedule`` predicted
    ``module``: ``predict`` takes it rather than lowering the program again."""
    explained: Callable[[], list[Term]] | list[Term] = field(default_factory=list, repr=False, compare=False)
    """``terms``, or what computes them when first asked (only ``--explain`` reads them)."""

    @property
    def terms(self) -> list[Term]:
        """The terms of its integer program's objective (``explain_terms``)."""
        if callable(self.explained):
            self.explained = self.explained()
        return self.explained

    def verify(self) -> None:
        """Verify ``module`` (a ``VerifyException`` if it does not: a bug in distir)."""
        from distir.dialects.verifier import ensure_verified

        ensure_verified(self.module)
        self.verified = True

    def placements(self, g: Graph) -> dict[str, list[str]]:
        """Each tensor argument's placements (by name, without ``%``)."""
        out = {}
        for node in g.nodes:
            if node.is_arg:
                v = g.values[node.results[0]]
                out[v.name] = [str(p) for p in self.strategies[node.id].results[0].placements(len(self.mesh.sizes))]
        return out


@dataclass
class PlanResult:
    graph: Graph
    ranks: int
    topology: Topology
    memory_limit: float
    plans: list[Plan]
    searched: list[Searched]
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cut_short: str | None = None
    evaluated: int = 0
    """Plans lowered and predicted (``plans`` keeps the ``top`` best)."""

    @property
    def best(self) -> Plan:
        return self.plans[0]


@gc_paused()  # a quarter of a GPT plan's CPU went to full collections over the IR's cycles
@collections_of_new_objects()  # the collection after each tuning scans the tuner's copies only
def plan(
    module: ModuleOp,
    ranks: int,
    topology: Topology,
    memory: float = 80 << 30,
    topology_name: str | None = None,
    func_name: str | None = None,
    top: int = 3,
    mixed: bool = False,
    uneven: bool = False,
    tune: bool = True,
    time_budget: float | None = None,
    progress: Progress | None = None,
    interrupted: Callable[[], bool] | None = None,
    alternatives: int = ALTERNATIVES,
    prune: bool = True,
) -> PlanResult:
    """The best plans of ``module``'s function on ``ranks`` ranks of ``topology`` within
    ``memory`` bytes per device (module doc). ``topology_name`` (a built-in name or a
    TOML path) is what the reduction synthesis pass reads; ``time_budget`` (seconds)
    stops the search of meshes early with the best found; ``alternatives``: how many
    other layouts of the largest arguments to try on each leading mesh (0: none, nor
    the overlapped pricing); ``prune=False`` solves every mesh's integer program, even
    those whose lower bound shows they cannot lead (the same plans, more slowly: for
    comparison)."""
    report = progress or (lambda phase, done, total: None)
    stop = interrupted or (lambda: False)
    seconds: dict[str, float] = {}
    clock = time.monotonic
    deadline = None if time_budget is None else clock() + time_budget
    t0 = time.process_time()
    g = read_graph(module, func_name)
    seconds["read"] = time.process_time() - t0
    shape = None
    if not g.one_device and len(g.mesh_sizes) > 1:
        shape = tuple(g.mesh_sizes)
        if math.prod(shape) != ranks:  # type: ignore[arg-type]
            raise PlanError(f"distir-plan: the program's mesh has {math.prod(shape)} ranks (shape {list(shape)}), --ranks is {ranks}")  # type: ignore[arg-type]
    try:
        candidates = meshes(topology, ranks, mixed=mixed, shape=shape)  # type: ignore[arg-type]
    except ValueError as e:
        raise PlanError(f"distir-plan: {e}") from None
    if not candidates:
        raise PlanError(f"distir-plan: no mesh of {ranks} ranks fits {topology.describe()}")
    t0 = time.process_time()
    structures: dict[tuple[int, ...], tuple[ShapeCosts, ilp.Structure]] = {}
    searched: list[Searched] = []
    cut_short = None

    def out_of_time(k: int) -> bool:
        nonlocal cut_short
        if k and (stop() or (deadline is not None and clock() >= deadline)):
            cut_short = "interrupted" if stop() else "the time budget ran out"
            return True
        return False

    def solve(s: Searched) -> None:
        s.solution = ilp.solve(s.problem, memory)  # type: ignore[arg-type]
        s.solved = True

    # each mesh's integer program and a lower bound of its optimum (``ilp.LowerBound``)
    bounds: list[ilp.LowerBound | None] = []
    report("search", 0, len(candidates))
    for k, mesh in enumerate(candidates):
        if out_of_time(k):
            break
        t1 = time.process_time()
        if mesh.sizes not in structures:
            sc = ShapeCosts(g, mesh.sizes, topology, reductions=topology_name is not None)
            structures[mesh.sizes] = (sc, ilp.build(g, sc, uneven))
        sc, st = structures[mesh.sizes]
        p = ilp.problem(st, Costs(sc, mesh))
        bound = ilp.LowerBound(p) if prune else None
        if bound is not None:
            bound.raise_(BOUND_SWEEPS)
        searched.append(Searched(mesh, None, p.size(), p, time.process_time() - t1))
        bounds.append(bound)
    # solved cheapest bound first; once ``top`` have solutions, a mesh whose bound
    # exceeds the ``top``-th best estimate cannot be among them: not solved
    order = sorted(range(len(searched)), key=lambda i: bounds[i].value if bounds[i] is not None else 0.0)
    best: list[float] = []  # the ``keep`` best estimates found
    keep = max(1, top)
    for n, i in enumerate(order):
        s, bound = searched[i], bounds[i]
        if n and (cut_short is not None or out_of_time(n)):
            break
        report("search", n, len(searched))
        t1 = time.process_time()
        if bound is not None and len(best) >= keep:
            if not bound.above(best[keep - 1]):
                bound.raise_(BOUND_MORE_SWEEPS, above=best[keep - 1])
            if bound.above(best[keep - 1]):
                s.bound = bound.value
                s.seconds += time.process_time() - t1
                continue
        solve(s)
        s.seconds += time.process_time() - t1
        if s.solution is not None:
            best = sorted([*best, s.solution.seconds])[:keep]
    searched = [s for s in searched if s.solved or s.bound is not None]  # in the candidates' order: ties keep it
    report("search", len(searched), len(candidates))
    seconds["search"] = time.process_time() - t0
    feasible = sorted((s for s in searched if s.solution is not None), key=lambda s: s.estimate)
    if not feasible:
        smallest = min(ilp.smallest_memory(s.problem) for s in searched if s.problem is not None)
        raise NoPlanFits(
            f"distir-plan: no plan fits {format_bytes(memory)} per device on {ranks} ranks: the smallest memory per rank "
            f"found is {format_bytes(smallest)} (give --memory {math.ceil(smallest / (1 << 30))}GiB or more ranks)",
            smallest,
        )
    t0 = time.process_time()
    plans: list[Plan] = []
    notes: list[str] = []
    dropped: list[float] = []
    leading = feasible[: max(1, top)]
    seen = [(s.mesh.key, s.problem.chosen(s.solution.choice)) for s in leading]  # type: ignore[union-attr]
    tunable = [tune]
    tuned: dict[str, tuple[str, str] | None] = {}  # a program's schedule, by its text: tuned once

    def variants() -> list[Searched]:
        """Candidates a schedule may favour, when the tuner schedules these programs
        (module doc, step 3): on each leading mesh and on the mesh of the hierarchy's
        levels, the plan priced as if the tuner overlapped every collective after a
        matmul or an embedding with it (the placements whose schedule hides their
        communication) and the best plans that lay the largest arguments out otherwise
        (the next family: a schedule may favour it, as CoCoNet's fused collectives
        favour sliced state). All of them: the best plan a schedule makes may be any
        (a DLRM whose tables a fused ReduceScatter favours sliced came after the
        overlapped pricing of two meshes, and was cut when only ``top`` were kept).
        The one-axis mesh's optimum (data parallelism's and ZeRO's mesh), solved even
        when bounded out, is a candidate too (not its variants: tuning a model's
        takes minutes each).
        Then the best and the otherwise laid out plans of the one-axis mesh and of the
        mesh of the levels written as a user writes a plan by hand (``Searched.annotated``): the standard plans (data
        parallelism, its sliced optimizer state, Megatron's tensor parallelism inside a
        node) are such programs, and the tuner's fused operators take a chain the
        partitioner propagated whole (an AllReduce and the ops after it, replicated)
        where a solution splits it over the axes."""
        out: list[Searched] = []
        if not alternatives or not tunable[0]:
            return out
        for s in searched:
            if standard_mesh(s.mesh) and not s.solved:
                solve(s)  # bounded out of the leading meshes, but a start
        pool = sorted((s for s in searched if s.solution is not None), key=lambda s: s.estimate)
        starts = pool[: max(1, top)]
        starts += [s for s in pool if levels_mesh(s.mesh) and s not in starts]
        # the one-axis mesh's optimum, where data parallelism and ZeRO live: itself (and
        # written by hand, below), not its variants (a model's take minutes to tune)
        one_axis = [s for s in pool if len(s.mesh.sizes) == 1 and s not in starts]
        for s in one_axis:
            assert s.problem is not None and s.solution is not None
            if (s.mesh.key, s.problem.chosen(s.solution.choice)) not in seen:
                seen.append((s.mesh.key, s.problem.chosen(s.solution.choice)))
                out.append(Searched(s.mesh, s.solution, s.size, s.problem, 0.0, overlapped=True))
        for s in starts:
            sc, st = structures[s.mesh.sizes]
            p = ilp.problem(st, Costs(sc, s.mesh), overlap=True)
            sol = ilp.solve(p, memory)
            if sol is not None and (s.mesh.key, p.chosen(sol.choice)) not in seen:
                seen.append((s.mesh.key, p.chosen(sol.choice)))
                out.append(Searched(s.mesh, sol, p.size(), p, 0.0, overlapped=True))
        laid_out: list[Searched] = []
        for first in starts:
            assert first.problem is not None and first.solution is not None
            for r in ilp.largest_arguments(g, first.problem, alternatives):
                sol = ilp.solve(first.problem, memory, forbid={r: first.solution.choice[r]})
                if sol is not None and (first.mesh.key, first.problem.chosen(sol.choice)) not in seen:
                    seen.append((first.mesh.key, first.problem.chosen(sol.choice)))
                    laid_out.append(Searched(first.mesh, sol, first.size, first.problem, 0.0, overlapped=True))
        out += laid_out
        written: set = set()
        for s in [*starts, *one_axis, *laid_out]:
            key = (s.mesh.key, arguments_of(g, s))
            if standard_mesh(s.mesh) and key not in written:
                written.add(key)
                out.append(Searched(s.mesh, s.solution, s.size, s.problem, 0.0, overlapped=True, annotated=True))
        return out

    k = 0
    while k < len(leading):
        s = leading[k]
        k += 1
        report("evaluate", k - 1, len(leading))
        assert s.problem is not None and s.solution is not None
        chosen = s.problem.chosen(s.solution.choice)
        strategies = [s.problem.strategies[g.class_of[n.id]][chosen[g.class_of[n.id]]] for n in g.nodes]
        from distir.planner.materialize import annotated, materialize

        if s.annotated:
            build = partial(annotated, g, s.mesh, {n.id: strategies[n.id].results[0] for n in g.nodes if n.is_arg})
        else:
            build = partial(materialize, g, s.mesh, strategies)
        m = build()
        if k == 1:
            tunable[0] = tune and explored_collectives(m) <= TUNE_MAX_COLLECTIVES
            leading += variants()
        if s.overlapped and not tunable[0]:
            continue  # no schedule will overlap its collectives: its price was not its own
        pl = Plan(s.mesh, m, strategies, s.estimate)
        pl.explained = partial(explain_terms, g, s, sc_of(structures, s.mesh), topology)
        schedule(pl, ranks, topology, topology_name, tune and (deadline is None or clock() < deadline),
                 rebuild=build, verify=False, tuned=tuned)  # predicted only: the best is verified below
        aside = set_aside()  # the plan so far (its program is kept) is not scanned again
        predict(pl, ranks, topology)
        if aside:
            collect_garbage()  # the lowered copy the prediction priced, alone
        if any(p.mesh.describe() == pl.mesh.describe() and p.predicted_s == pl.predicted_s and p.memory.total == pl.memory.total for p in plans if p.memory and pl.memory):
            continue  # the same program as a plan before it, once scheduled
        if pl.memory is not None and pl.memory.total > memory:
            notes.append(f"the plan on mesh {s.mesh.describe()} needs {format_bytes(pl.memory.total)} per rank once partitioned: over the limit, dropped")
            dropped.append(pl.memory.total)
            continue
        plans.append(pl)
    report("evaluate", len(leading), len(leading))
    seconds["evaluate"] = time.process_time() - t0
    if not plans:
        smallest = min(dropped, default=math.inf)
        raise NoPlanFits(
            f"distir-plan: no plan fits {format_bytes(memory)} per device on {ranks} ranks once partitioned: the smallest needs "
            f"{format_bytes(smallest)} per rank", smallest)
    plans.sort(key=lambda p: p.predicted_s)
    evaluated = len(plans)
    plans = plans[: max(1, top)]
    plans[0].verify()  # the program a plan writes and runs: nothing unverified runs
    if cut_short is not None:
        notes.insert(0, f"the search was cut short ({cut_short}) after {len(searched)} of {len(candidates)} meshes: the best plans found so far")
    return PlanResult(g, ranks, topology, memory, plans, searched, seconds, notes, cut_short, evaluated)


def standard_mesh(mesh: Mesh) -> bool:
    """The meshes of the standard plans: one axis over every rank (data parallelism,
    ZeRO) and the hierarchy's levels (``levels_mesh``: Megatron's)."""
    return len(mesh.sizes) == 1 or levels_mesh(mesh)


def levels_mesh(mesh: Mesh) -> bool:
    """Whether each axis of a two-axis mesh is one whole level of the hierarchy (nodes x
    the GPUs of a node: Megatron's tensor parallelism inside a node, data parallelism
    across)."""
    h = mesh.placement.hierarchy
    return len(mesh.sizes) == 2 and len(h) == 2 and all(mesh.pure(a) for a in (0, 1)) and sorted(mesh.sizes) == sorted(h)


def arguments_of(g: Graph, s: Searched) -> tuple:
    """The layout of every argument under a search's solution."""
    assert s.problem is not None and s.solution is not None
    chosen = s.problem.chosen(s.solution.choice)
    return tuple(s.problem.strategies[g.class_of[n.id]][chosen[g.class_of[n.id]]].results[0] for n in g.nodes if n.is_arg)


def sc_of(structures: dict, mesh: Mesh) -> ShapeCosts:
    return structures[mesh.sizes][0]


# ======================================================================================
# Reductions, schedules and prediction
# ======================================================================================


def collectives_of(module: ModuleOp) -> int:
    return sum(1 for op in walk(module) if isinstance(op, coll.CollectiveOp))


def explored_collectives(module: ModuleOp) -> int:
    """The most collectives the tuner's exploration meets at once: those of the largest
    independent part of the program (``tuning/units.py``: a model's optimizer step is
    tuned one tensor's update at a time)."""
    from distir.tuning import units

    f = next(o for o in module.ops if isinstance(o, func.FuncOp))
    return units.most_in_one_unit(f, lambda op: sum(1 for o in (walk(op) if op.regions else (op,)) if _COLLECTIVE(o)))


_COLLECTIVE = Kinds(coll.CollectiveOp)


def _count_ops(module: ModuleOp) -> int:
    """The ops of ``module``: what tells whether ``synthesize-reductions`` changed it,
    as it only ever replaces an AllReduce by more ops (the remeshes to the hardware's
    mesh and back around its program). Comparing each op's name, properties and result
    types before and after compared every attribute of a model's program (0.2 s of a
    plan of the 24-layer GPT step at 256 ranks); printing it twice took seconds."""
    return sum(1 for _ in walk(module))


@collections_of_new_objects()  # called alone too: its collection scans the tuner's copies, not the caller's objects
def schedule(pl: Plan, ranks: int, topology: Topology, topology_name: str | None, tune: bool,
             rebuild: Callable[[], ModuleOp] | None = None, verify: bool = True,
             tuned: dict[str, tuple[str, str] | None] | None = None) -> None:
    """P²'s reductions, then the tuner's schedule (module doc, step 4), on ``pl.module``,
    which is verified first (the program a plan prints and writes) and after each pass
    (what changed). ``rebuild`` makes ``pl.module`` again: given, the reductions are
    synthesized in place (no copy of a model's program), and a machine the pass refuses
    leaves the plan rebuilt as it was. ``verify=False``: a program only predicted (a
    candidate; ``Plan.verify`` before it runs) is not verified before the reductions
    nor after them (the tuner verifies what it schedules). ``tuned``: the tuner's
    picks (name and pipeline) by program text, for the same ``ranks`` and
    ``topology`` (``plan``'s candidates): a program tuned before is not tuned again."""
    from xdsl.context import Context

    from distir.dialects.diagnostics import InternalError
    from distir.dialects.verifier import ensure_verified
    from distir.passes.pipeline import run_passes
    from distir.passes.support import scratch
    from distir.synthesis.synthesize_reductions import SynthesizeReductionsPass

    if verify:
        ensure_verified(pl.module)
        pl.verified = True
    steps = []
    if topology_name is not None and pl.mesh.placement.hierarchy[0] > 1 and any(isinstance(op, coll.AllReduceOp) for op in walk(pl.module)):
        nodes = pl.mesh.placement.hierarchy[0]
        p = SynthesizeReductionsPass(topology=topology_name, nodes=nodes)
        before = _count_ops(pl.module)
        synthesized = pl.module if rebuild is not None else pl.module.clone()
        try:
            with scratch(synthesized):  # a refusal leaves it half rewritten: rebuilt below
                run_passes(synthesized, [p], Context(), verify=verify)  # verified after: a broken result is a bug, raised
        except InternalError:
            raise
        except Exception as e:  # the pass refuses a machine it cannot read: keep the plain reductions
            pl.notes.append(f"reductions not synthesized: {e}")
            if rebuild is not None:
                pl.module = rebuild()
                if verify:
                    ensure_verified(pl.module)
        else:
            if _count_ops(synthesized) != before:
                pl.module = synthesized
                pl.verified = verify
                steps.append(f"synthesize-reductions{{topology={topology_name} nodes={nodes}}}")
    if tune:
        n = explored_collectives(pl.module)
        if n > TUNE_MAX_COLLECTIVES:
            pl.notes.append(f"schedule as partitioned: {n} collectives in one part of the program are more than the tuner explores ({TUNE_MAX_COLLECTIVES})")
        else:
            from distir.tuning.tuner import Limits
            from distir.tuning.tuner import tune as run_tuner

            text = str(pl.module) if tuned is not None else ""
            if tuned is None or text not in tuned:
                # only the pick is checked (the tuner checks the next when it fails); its
                # copies of the program (``TUNE_MAX_EXPLORED_OPS``) are collected once
                # it is done (``plan`` pauses the collection)
                limits = Limits.of(max_schedules=TUNE_MAX_SCHEDULES, max_explored_ops=TUNE_MAX_EXPLORED_OPS)
                result = run_tuner(pl.module, ranks, model=topology, limits=limits, jobs=1, check_all=False)
                name = result.best.get(result.sizes[0])
                pick = None if name is None else (name, result.by_name(name).pipeline)
                del result
                collect_garbage()  # the exploration's copies (one collection per plan tuned)
                if tuned is not None:
                    tuned[text] = pick
            else:
                pick = tuned[text]
            if pick is not None:
                name, pipeline = pick
                if pipeline:
                    from distir.passes.pipeline import apply_pipeline

                    from distir.dialects.verifier import verified_clone

                    scheduled = apply_pipeline(verified_clone(pl.module), pipeline)  # verified: what changed
                    pl.verified = True  # verified_clone verified it
                    # the schedule stays if the model predicts the whole program faster
                    # with it (the tuner decides some programs part by part)
                    with_schedule, without = _prepared(scheduled, ranks, topology), _prepared(pl.module, ranks, topology)
                    if _seconds(with_schedule) < _seconds(without):
                        pl.module = scheduled
                        pl.verified = True
                        pl.prepared = (scheduled, with_schedule)
                        steps.append(pipeline)
                        pl.schedule = name
                    else:
                        pl.prepared = (pl.module, without)
                        pl.notes.append(f"the tuner's {name} is not faster for the whole program: schedule as partitioned")
    pl.pipeline = ",".join(steps)


def predict(pl: Plan, ranks: int, topology: Topology) -> None:
    """The plan's step time, its breakdown and its memory per rank (module doc, step 5)."""
    from distir.tuning.cost_model import breakdown

    if pl.prepared is not None and pl.prepared[0] is pl.module:
        prepared = pl.prepared[1]  # lowered by ``schedule``
    else:
        prepared = _prepared(pl.module, ranks, topology)
    pl.prepared = None  # a lowering is as large as its program: not kept
    pl.predicted_s = _seconds(prepared)
    parts = breakdown(prepared, 1)
    pl.compute_s = parts.pop("compute", 0.0)
    pl.collectives = dict(sorted(parts.items(), key=lambda kv: -kv[1]))
    pl.communication_s = sum(pl.collectives.values())
    pl.memory = memory_per_rank(pl.module, ranks)


def _prepared(module: ModuleOp, ranks: int, topology: Topology):
    """``module`` lowered and prepared for the cost model at its own size."""
    from distir.lowering.pipeline import lower
    from distir.tuning.cost_model import Scaling, prepare, topology_target

    f = next(o for o in module.ops if isinstance(o, func.FuncOp))
    lowered = lower(module, ranks, target=topology_target(topology), verify=False)  # predicted, never run
    return prepare(lowered, f.sym_name.data, topology, ranks, Scaling(1, _BIG_PRIME))


def _seconds(prepared) -> float:
    from distir.tuning.cost_model import predict as run_model

    return float(run_model(prepared, [1])[0])


_BIG_PRIME = 2_305_843_009_213_693_951
"""A prime no dim of a program reaches: the cost model's reference size is then the
program's own (``cost_model.Scaling``)."""


# ======================================================================================
# What the winner's cost is made of (--explain)
# ======================================================================================


def explain_terms(g: Graph, s: Searched, sc: ShapeCosts, topology: Topology) -> list[Term]:
    """The terms of the integer program's objective at its optimum, by op kind, by
    resharding collective and by what the lowering runs as one (module ``ilp``): what
    ``--explain`` lists; they add up to the objective."""
    from distir.planner.strategies import fixed_layout

    assert s.problem is not None and s.solution is not None
    p = s.problem
    chosen = p.chosen(s.solution.choice)
    costs = Costs(sc, s.mesh)
    naxes = len(s.mesh.sizes)
    terms: dict[str, list] = {}

    def add(what: str, key: str, secs: float, n: int = 1) -> None:
        t = terms.setdefault(what, [0, 0.0, key])
        t[0] += n
        t[1] += secs

    def axes_of(axes) -> str:
        return "x".join(s.mesh.names[a] for a in axes)

    def charge(c, mode: frozenset, what: str, key: str) -> None:
        if c.group in mode:
            c = ilp.shared_charge(c, p.sizes)
        kind = f"{c.kind} over {axes_of(c.axes)}" if c.axes else f"{c.kind} of blocks"
        add(f"{kind} {what}", f"{c.kind} {key}", costs.charge_seconds(c))

    layouts: dict[int, Layout] = {}
    resharded: set[tuple[int, Layout]] = set()  # the partitioner reshards a value once per target
    for node in g.nodes:
        st = p.strategies[g.class_of[node.id]][chosen[g.class_of[node.id]]]
        for k, r in enumerate(node.results):
            layouts[r] = st.results[k]
        if not node.is_arg and node.op is not None:
            # in a run of element-wise ops, what it adds to the run's kernel (whose launch the run's group pays)
            add(f"{node.op.name} {_how(node, st, s.mesh)}", f"{node.op.name} (compute)", sc.op(node, st, *p.launched.get(node.id, ())))
        for k, x in enumerate(node.operands):
            if x is None or (x, st.operands[k]) in resharded:
                continue
            resharded.add((x, st.operands[k]))
            mode = p.modes.get((node.id, k), frozenset())
            for c in sc.charges(g.values[x].shape, g.values[x].element_type, layouts[x], st.operands[k]) or ():
                charge(c, mode, _role(node), _role(node))
    for n, r in enumerate(g.results):
        v = g.values[r.value]
        src = layouts[r.value]
        if r.inplace is not None and r.inplace in g.arg_node:
            dst = layouts[g.values[g.nodes[g.arg_node[r.inplace]].results[0]].id]
        elif r.fixed is not None:
            dst = fixed_layout(g, r.fixed, len(v.shape), naxes, f"result %{v.name}")
        else:
            dst = src.whole()
        mode = p.modes.get(("result", n), frozenset())
        for c in sc.charges(v.shape, v.element_type, src, dst) or ():
            charge(c, mode, "into the results", "into the results")
    for grp in p.groups:
        if grp.active(p, s.solution.choice):
            if grp.kind == "kernel":
                add(f"one launch for each run of {grp.size} element-wise ops", "one launch per run of element-wise ops", grp.seconds, grp.count)
            else:
                add(f"one {grp.kind} call over {axes_of(grp.axes)} for {grp.size} combined", f"one {grp.kind} call for those combined", grp.seconds, grp.count)
    del topology
    out = [Term(w, n, t, key) for w, (n, t, key) in terms.items()]
    out.sort(key=lambda t: -t.seconds)
    return out


def _how(node, st: Strategy, mesh: Mesh) -> str:
    """How an op's work is split: ``M on p0, K on p1`` style."""
    if not node.factors:
        return "(replicated)"
    names = []
    for a, f in enumerate(st.assign):
        if f >= 0:
            kind = "contracted dim" if node.factors[f][1] is not None else "split"
            names.append(f"{kind} on {mesh.names[a]}")
    return "(" + (", ".join(names) or "replicated") + ")"


def _role(node) -> str:
    return f"for {node.op.name}" if node.op is not None else "for an argument"


def sliced_tensors(g: Graph, pl: Plan, count: int = 6) -> list[tuple[str, str, str]]:
    """The largest arguments and what slices them: (name, shape, how)."""
    out = []
    for node in g.nodes:
        if node.is_arg:
            v = g.values[node.results[0]]
            out.append((v.nbytes, v.name, "x".join(map(str, v.shape)), pl.strategies[node.id].results[0].describe(pl.mesh.names)))
    out.sort(key=lambda t: -t[0])
    return [(n, s, how) for _, n, s, how in out[:count]]


def check_options(ranks: int, memory: float, top: int) -> None:
    if ranks < 1:
        raise InputRejected(f"distir-plan: --ranks must be at least 1, got {ranks}")
    if not memory > 0:
        raise InputRejected(f"distir-plan: --memory must be positive, got {memory}")
    if top < 1:
        raise InputRejected(f"distir-plan: --top must be at least 1, got {top}")


def layouts_described(g: Graph, pl: Plan, names: Sequence[str]) -> dict[str, str]:
    return {g.values[n.results[0]].name: pl.strategies[n.id].results[0].describe(names) for n in g.nodes if n.is_arg}
