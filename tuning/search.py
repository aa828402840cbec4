"""Which schedules the tuner evaluates: fewer than ``explore`` finds, deciding the same.

Evaluating a schedule (lowering it once and walking the lowered program,
``cost_model.prepare``) costs about as much as its lowered program has ops, and an
overlap in c chunks has about c times the ops of its chain: the 8- and 16-chunk
variants of every chain are most of the work of a model-parallel block. The search
therefore evaluates, in this order:

1. **Every schedule without a chunked overlap**: the programs ``explore`` reaches
   before its final overlap step, and the fused computation-collective operators
   (``granularity=tile``, one op whatever the tile count). These are cheap.
2. **Each overlap family at its fewest chunks.** A family is the overlaps of one
   chain of one program (``Family``): every chunk count and order.
3. **The families, most promising first, chunk count by chunk count**, while their
   bound is below the best time found at some size, and while more chunks still help.

The bound comes from the pipeline an overlap runs: with c chunks, a chain whose stages
take L_1 .. L_k (k >= 2, the longest L_max) and a fixed cost a_i per chunk and stage
takes ``T(c) = L_max + (sum L - L_max) / c + sum a + (c - 1) a_max``, i.e. ``P + Q/c + K
c`` with Q, K >= 0; the program without the overlap is ``T(1)``. From T(1) and T(2),
no chunk count beats ``T(1) - 2 (T(1) - T(2))`` (K >= 0), and once
three counts are known, P, Q and K follow and bound the rest. Small messages bend the
curve (NCCL's protocols change as they are cut), so where two chunks gained more than
1% the first bound allows more chunks ``FIRST_GAIN`` times what two gained. A family whose bound is
not below the best time at any size is not evaluated further; neither is one whose
time stopped falling (T(c) >= T(c/2) at every size: with Q, K >= 0 the times are
convex in c). This is the cost model's own structure, not a guarantee on every
program: ``tune(..., exhaustive=True)`` (``distir-tune --all``) evaluates everything,
and ``test/tuning/test_search.py`` checks that both pick the same schedules on the
examples.

A schedule that splits an AllReduce along a dim is not evaluated when the same
schedule split along an outer dim is one too and pads no block at any size: dim 0's
blocks are contiguous, any other dim's are packed and unpacked around every collective,
in shorter runs the further in (``_strided``). An outer dim the ranks do not divide
(blocks of ceil(s/n), some ranks holding less or nothing) moves padding and leaves
ranks idle, so there the split along the inner dim is evaluated too.

Two schedules that the cost model cannot tell apart share one evaluation: an overlap in
``ring`` or ``remote_first`` order whose chain ``lower-overlap`` cuts in natural order
anyway (only a matmul feeding a reduction in as many chunks as the group has ranks
runs by point-to-point transfers in its order, ``lowering/overlap_p2p.py``) lowers to the
same program as its ``natural`` sibling. The interpreter check, which runs an overlap
as the chain it holds, is shared by all schedules with one ``Candidate.check_key``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from distir.dialects.fast import clone, walk
from distir.tuning.explore import Candidate

Times = np.ndarray
"""Seconds per size, NaN where the schedule does not run at that size."""


@dataclass
class Family:
    """The overlaps of one chain of one program: ``members[(chunks, order)]`` are
    candidate indices; ``parent`` the program without the overlap (its index, or None
    when it is not a schedule); ``stages`` the ops of the chain; ``tiles``: the fused
    computation-collective operators of the chain (chunks are tiles per destination,
    in ``remote_first`` order), whose program without the overlap is no point of
    their curve."""

    parent: int | None
    stages: int
    tiles: bool
    members: dict[tuple[int, str], int] = field(default_factory=dict)

    @property
    def order(self) -> str:
        return "remote_first" if self.tiles else "natural"

    def chunk_counts(self) -> list[int]:
        return sorted({c for c, o in self.members if o == self.order})


@dataclass
class Plan:
    """The schedules of an exploration sorted for the search (module doc)."""

    first: list[int]
    """Evaluated first: schedules without a chunked overlap, and each family's
    natural variant at its fewest chunks."""
    families: list[Family]
    shares: dict[int, int]
    """Schedule -> the schedule whose lowering (and so prediction) it shares."""
    strided: set[int] = field(default_factory=set)
    """Schedules that split a collective along a dim other than 0 where the same
    schedule split along an outer dim pads no block: never evaluated (module doc)."""


def plan(candidates: Sequence[Candidate], ranks: int, unpadded: Callable[[ModuleOp], bool] | None = None) -> Plan:
    """Families, folded order variants and the first stage (module doc). ``unpadded``
    says of a schedule whether it pads no block at any size (``sizes.unpadded``); a
    split defers to an outer one only where that holds (None: every schedule)."""
    index = {id(c): i for i, c in enumerate(candidates)}
    strided = _strided(candidates, unpadded)
    families: dict[tuple, Family] = {}
    first: list[int] = []
    ordered: list[tuple[int, tuple, int]] = []
    for i, c in enumerate(candidates):
        if i in strided:
            continue
        step = c.overlap
        if step is None or c.parent is None:
            first.append(i)
            continue
        tiles = step.granularity == "tile"
        key = (id(c.parent), tuple(step.targets), tiles)
        fam = families.get(key)
        if fam is None:
            fam = families[key] = Family(index.get(id(c.parent)), _stages(c), tiles)
        fam.members[(step.chunks, step.order)] = i
        if not tiles and step.order != "natural":
            ordered.append((i, key, step.chunks))
    shares: dict[int, int] = {}
    fixed: dict[tuple, ModuleOp | None] = {}  # per family: one program with its mesh sizes fixed
    for i, key, chunks in ordered:
        natural = families[key].members.get((chunks, "natural"))
        if natural is not None and not _order_matters(candidates[i], ranks, fixed, key):
            shares[i] = natural
    return Plan(sorted(first), list(families.values()), shares, strided)


def _strided(candidates: Sequence[Candidate], unpadded: Callable[[ModuleOp], bool] | None = None) -> set[int]:
    """The schedules that split an AllReduce along a dim when the same schedule split
    along an outer dim is a candidate too and pads no block (``unpadded``): an outer
    dim's blocks are longer contiguous runs (dim 0's are contiguous, row-major
    buffers), every other dim's are packed and unpacked around each NCCL call, which
    costs copies and saves nothing. An outer split with padded blocks moves padding
    and idles ranks instead, so it decides nothing."""
    from distir.passes.pipeline import pass_spec, pipeline_spec

    specs: dict[int, str] = {}  # per pass, by id: the candidates share their first steps' passes
    by_pipeline: dict[str, int] | None = None  # built when first asked (no split names a dim: never)

    def pipeline(c: Candidate) -> str:  # ``c.pipeline``, each pass's spec made once
        for p in c.passes:
            if id(p) not in specs:
                specs[id(p)] = pass_spec(p)
        return ",".join([specs[id(p)] for p in c.passes])

    out = set()
    flat: dict[int, bool] = {}  # unpadded, per schedule asked about (many splits defer to one)

    def named(p) -> bool:  # a split along a dim it names (None: the pass picks one)
        return p.name == "split-allreduce" and getattr(p, "dim", None) is not None

    for i, c in enumerate(candidates):
        dims = [p.dim for p in c.passes if named(p)]  # type: ignore[attr-defined]
        if not any(dims):
            continue
        for outer in range(max(dims)):
            split = tuple(dataclasses.replace(p, dim=min(p.dim, outer)) if named(p) else p for p in c.passes)  # type: ignore[attr-defined]
            if by_pipeline is None:
                by_pipeline = {pipeline(c): i for i, c in enumerate(candidates)}
            j = by_pipeline.get(pipeline_spec(split)) if split != c.passes else None
            if j is not None and j not in flat:
                flat[j] = unpadded is None or unpadded(candidates[j].shaped_as.module)  # its types
            if j is not None and flat[j]:
                out.add(i)
                break
    return out


def _stages(cand: Candidate) -> int:
    """The ops of the overlapped chain (its pipeline's stages)."""
    from distir.dialects import coll

    for o in walk(cand.shaped_as.module):  # a variant's chain is its base's
        if isinstance(o, coll.OverlapOp):
            return max(1, sum(1 for x in o.body.block.ops if not isinstance(x, coll.YieldOp)))
    return 1


def _order_matters(cand: Candidate, ranks: int, fixed: dict[tuple, ModuleOp | None] | None = None, family: tuple = ()) -> bool:
    """Whether the lowering runs this overlap in its (ring / remote_first) order:
    ``lowering.overlap_p2p.p2p_plan`` once the mesh sizes are fixed for ``ranks``.
    ``fixed``: the program of a member of the same ``family`` with its mesh sizes fixed,
    by family: the members differ only in their overlap's options, which it takes (one
    copy and fixing per family, not per member)."""
    from xdsl.context import Context

    from distir.dialects import coll
    from distir.lowering.common import meshes
    from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
    from distir.lowering.overlap_p2p import p2p_plan

    def overlaps(m: ModuleOp) -> list[coll.OverlapOp]:
        return [o for o in walk(m) if isinstance(o, coll.OverlapOp)]

    options = cand.overlap_properties()  # a variant's program is not made for this
    module = None if fixed is None else fixed.get(family)
    if module is not None and len(overlaps(module)) == len(options):
        for mine, theirs in zip(overlaps(module), options):
            mine.properties = theirs
    elif fixed is None or family not in fixed or module is not None:
        module = clone(cand.shaped_as.module)
        for mine, theirs in zip(overlaps(module), options):
            mine.properties = dict(theirs)
        try:
            FixMeshSizesPass(ranks=ranks).apply(Context(), module)
        except Exception:  # noqa: BLE001 - a program that cannot be fixed is evaluated on its own
            module = None
        if fixed is not None:
            fixed[family] = module
    if module is None:
        return True
    mesh_ops = meshes(module)
    return any(
        p2p_plan(o, mesh_ops) is not None for o in walk(module) if isinstance(o, coll.OverlapOp) and o.option("granularity") != "tile"
    )


# --------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------

FIRST_GAIN = 8.0
"""How many times what two chunks gained over none more chunks may still gain
(``first_bound``) where two chunks gained more than ``BENT`` of the time: an ideal
pipeline gains at most twice as much, but small messages change NCCL protocol as they
are cut, and a family seen gaining 6 us (2.3%) with two chunks gained 31 us with four
(``examples/megatron_mlp.mlir`` on 8 ranks at 2^10). Where two chunks gained less, the
chain's communication is a sliver of the step (large messages, one protocol) and the
ideal pipeline's 2 holds."""

BENT = 0.01


def first_bound(t1: Times | None, t2: Times) -> Times:
    """A family's bound from the program without the overlap (``t1``) and its fewest
    chunks (``t2``): ``T(1) - FIRST_GAIN (T(1) - T(2))`` where more chunks can help, and
    T(2) where they cannot (module doc); -inf where T(1) is unknown, +inf where T(2)
    does not run (more chunks divide no better)."""
    t2 = np.where(np.isnan(t2), np.inf, t2)
    if t1 is None:
        return np.where(np.isinf(t2), np.inf, -np.inf)
    t1 = np.where(np.isnan(t1), -np.inf, t1)
    gain = t1 - t2
    times = np.where(np.abs(gain) > BENT * np.abs(t1), FIRST_GAIN, 2.0)
    bound = np.where(gain > 0, t1 - times * gain, t2)
    return np.where(np.isinf(t1), np.where(np.isinf(t2), np.inf, -np.inf), bound)


def fitted_bound(points: Sequence[tuple[int, Times]], remaining: Sequence[int]) -> Times | None:
    """With ``T(c) = P + Q/c + K c`` through the last three (chunks, times), the least
    that any of the ``remaining`` chunk counts can take (``P + Q / max + K min``), where
    the fit has Q, K >= 0; -inf elsewhere. None without three points."""
    if len(points) < 3 or not remaining:
        return None
    (c1, a), (c2, b), (c3, d) = points[-3:]
    m = np.array([[1, 1 / c1, c1], [1, 1 / c2, c2], [1, 1 / c3, c3]], dtype=float)
    y = np.stack([a, b, d])
    ok = np.all(np.isfinite(y), axis=0)
    coef = np.linalg.solve(m, np.where(ok, y, 0.0))
    p, q, k = coef
    valid = ok & (q >= 0) & (k >= 0)
    least = p + q / max(remaining) + k * min(remaining)
    return np.where(valid, least, -np.inf)


def parent_bound(t1: Times | None, stages: int) -> Times:
    """A family's bound before any of it is evaluated: its chain's stages, pipelined
    (in chunks or in tiles), still take as long as the longest of them, so T(c) >=
    T(1) / stages."""
    if t1 is None:
        return np.full(1, -np.inf)
    return np.where(np.isnan(t1), -np.inf, t1 / stages)


TOLERANCE = 0.005
"""A family is pruned when its bound is within this fraction of the best time at
every size: what it could still win there is noise in the model's predictions."""


def pruned(bound: Times, best: Times) -> bool:
    """Whether a bound is no better than the best found at every size (up to
    ``TOLERANCE``)."""
    return bool(np.all(bound * (1 + TOLERANCE) >= best))


def stopped_falling(before: Times, after: Times) -> bool:
    """Whether more chunks helped at no size where both ran."""
    both = ~(np.isnan(before) | np.isnan(after))
    return bool(np.all(after[both] >= before[both])) and not np.any(np.isnan(before) & ~np.isnan(after))


# --------------------------------------------------------------------------------------
# The search
# --------------------------------------------------------------------------------------


Evaluate = Callable[[list[int]], None]
"""Evaluates schedules by index (and records their times)."""


def search(plan_: Plan, times: Callable[[int], Times | None], evaluate: Evaluate, n_sizes: int, stop: Callable[[], bool] = lambda: False) -> int:
    """Run the search (module doc) on a plan: ``evaluate`` a list of schedules, then
    read each one's ``times`` (None: it did not pass its check). Returns how many
    schedules were evaluated. ``stop`` ends the search early (a time budget)."""
    done: set[int] = set()

    def run(idxs: list[int]) -> None:
        todo = [i for i in idxs if i not in done]
        if todo:
            evaluate(todo)
            done.update(todo)

    def best() -> Times:
        out = np.full(n_sizes, np.inf)
        for i in done:
            t = times(i)
            if t is not None:
                out = np.fmin(out, np.where(np.isnan(t), np.inf, t))
        return out

    def curve(fam: Family, chunks: int) -> Times:
        t = times(fam.members[(chunks, fam.order)])
        return np.full(n_sizes, np.nan) if t is None else t

    run(plan_.first)
    # each family at its fewest chunks, unless even a perfect pipeline of its chain
    # cannot win (``parent_bound``)
    current = best()
    started = []
    for fam in plan_.families:
        counts = fam.chunk_counts()
        if not counts:
            continue
        t1 = times(fam.parent) if fam.parent is not None else None
        if pruned(parent_bound(t1, fam.stages), current):
            continue
        started.append((fam, counts, None if fam.tiles else t1))
    run([fam.members[(counts[0], fam.order)] for fam, counts, _ in started])
    current = best()
    queue = [(first_bound(t1, curve(fam, counts[0])), counts, fam, t1) for fam, counts, t1 in started]
    queue.sort(key=lambda q: float(np.min(q[0] - current)))
    for bound, counts, fam, t1 in queue:
        if stop():
            break
        points = ([(1, t1)] if t1 is not None else []) + [(counts[0], curve(fam, counts[0]))]
        alive = True
        for c in counts[1:]:
            current = best()
            if pruned(bound, current) or stop():
                alive = not pruned(bound, current)
                break
            run([fam.members[(c, fam.order)]])
            now = curve(fam, c)
            before = points[-1][1]
            points.append((c, now))
            later = [x for x in counts if x > c]
            fitted = fitted_bound(points, later)
            if fitted is not None:
                bound = np.maximum(bound, fitted)
            if stopped_falling(before, now):
                break
        if alive and not stop():
            # the orders that run differently (point to point) are other algorithms:
            # evaluated whenever the family was worth evaluating at all
            run([i for (c, o), i in fam.members.items() if o != fam.order and i not in plan_.shares])
    return len(done)


def share_times(plan_: Plan, times: dict[int, object], done: set[int]) -> None:
    """Give every schedule that shares another's lowering that one's result."""
    for i, j in plan_.shares.items():
        if j in done and i not in done:
            times[i] = times[j]
            done.add(i)

