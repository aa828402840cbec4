"""Schedule exploration: every program CoCoNet's transformations reach from a program,
each named as CoCoNet names schedules and checked against the original.

The search follows CoCoNet's autotuner ("Automatic Exploration of Schedules"): it first
fuses the pointwise computations (``fuse-maps``), then explores breadth first: from every
program reached so far it applies every transformation of ``TRANSFORMATIONS`` at every
place it applies (each ``targets`` value, each option), in CoCoNet's order: fuse
computations; split an AllReduce (ReduceScatter + AllGather along each dim, or Reduce +
Broadcast); reorder an AllGather, Broadcast or send with computations; fuse collectives
with computations (``fuse-allreduce``, ``fuse-collectives``); keep in-place state sliced
(``slice-state``, CoCoNet's ``asSlice``, on the optimizer state: ``state_names``); last,
overlap a producer with its collectives in 2, 4, 8 or 16 chunks (a matmul's or an
embedding's chain in every order; ``_starts_chain`` says which chains are worth it), or
make a matmul's or embedding's chain one fused computation-collective operator
(``overlap{granularity=tile}``, 1, 2 or 4 tiles per destination, remote tiles first). A
scalar AllReduce (a norm) belongs to its computation and is not split. Each
transformation proposes only the places that pass cheap necessary conditions of its
pass (``_values``); a request the pass then refuses is simply not a step. Programs that
are structurally equal (the same IR up to the names of values: ``structure_key``, which
walks the ops and never prints) are one schedule, reached by the shortest pipeline;
every new program is verified. An overlap at other chunks or in another order than the
first made on a chain is that program with its ``coll.overlap``'s options changed: its
copy is made only when asked for (most are named, keyed and bounded, never lowered). A program is printed once, for the names its
transformations target, and the copies the passes rewrite reuse those names. ``TRANSFORMATIONS`` is data: a
new pass is one more ``Transformation``.

Each schedule is named from its structure, CoCoNet-style: ``AR`` (AllReduce), ``RS``,
``AG``, ``Reduce``, ``Bcast``, ``A2A``, ``P2P`` (send), ``MM`` (matmul), ``Emb``
(embedding bag) and ``C`` for computations (maps, dropout, tensor reductions and the
scalar AllReduces that complete them), or the optimizer's name when the function is
``adam``, ``lamb`` or ``sgd`` (``AR-Adam``); ``fuse(...)`` is a fused collective and
``ol(...)`` an overlapped chain: ``fuse(RS-Adam-AG)``, ``ol(MM,fuse(RS-C-AG))``,
``ol(RS,fuse(P2P-C),AG)``; ``fused(producer+collective)`` a fused computation-collective
operator (``fused(MM+AR)``, ``fused(Emb+A2A)``, ``fused(MM-C+A2A)`` with its epilogue). Schedules with the same structure differ in details that a
bracket then names: the state kept sliced (``[asSlice(m,v)]``), the overlap's chunks
and order (``[4 ring]``), the dim an AllReduce was split along (``[dim 1]``). The
program as written is always a candidate (``(as written)`` when its name is taken).

``check`` (a ``Checker`` per schedule) runs each schedule and the original on the same
random inputs with the reference interpreter on reduced shapes (every dim d becomes
gcd(d, 16·ranks), or gcd(d, f·ranks) for a smaller f of 8, 4, 2 where the arguments
would hold more than ``CHECK_ELEMENTS`` on all ranks: ``check_mapping``; on at most 4
ranks times the static part of the mesh): every
transformation preserves meaning, so a disagreement is a bug in distir, reported as
such, and that schedule is never picked; one that cannot run on the reduced shapes is
not picked either.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException, PassFailedException, VerifyException

from distir.dialects import coll, dist
from distir.dialects.diagnostics import InputRejected, check_body
from distir.dialects.dist import TensorType
from distir.dialects.fast import walk
from distir.dialects.format import REQUIRED
from distir.dialects.placements import Sliced
from distir.dialects.verifier import verified_clone
from distir.passes.fuse_collectives import FINISH_FUSED, FIRST_FUSED
from distir.passes.fuse_maps import fusable
from distir.passes.fusion import backward_plan
from distir.passes.pipeline import pipeline_spec
from distir.passes.support import BlockOrder, printed_names, scratch

# ======================================================================================
# Transformations
# ======================================================================================

Instances = Callable[[ModuleOp, dict], list[dict[str, Any]]]
"""Given a program and its top-level values by kind, the option sets to try."""


@dataclass(frozen=True)
class Transformation:
    """One kind of step: the pass ``pass_name`` with each option set ``instances``
    gives for a program (``targets`` included)."""

    verb: str
    pass_name: str
    instances: Instances
    first_only: bool = False
    """Take only the first option set that applies (alternatives, best first)."""
    final: bool = False
    """The search does not transform its results further (CoCoNet overlaps last)."""

    def passes(self, module: ModuleOp, values: dict) -> list[ModulePass]:
        from distir.passes.registry import ALL_PASSES

        cls = ALL_PASSES[self.pass_name]()
        return [cls(**opts) for opts in self.instances(module, values)]


def _each(kind: str, **options: Any) -> Instances:
    """One application per top-level value of ``kind`` (``values`` of ``_values``)."""
    return lambda module, values: [{"targets": (name,), **options} for name in values.get(kind, ())]


def _everywhere(**options: Any) -> Instances:
    return lambda module, values: [dict(options)]


def _splits(module: ModuleOp, values: dict) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, rank in values.get("all_reduce", ()):
        # split-allreduce picks the dim itself when not told (the only one of a 1-d value)
        out += [{"targets": (name,), "dim": d} for d in range(rank)] if rank > 1 else [{"targets": (name,)}]
        out.append({"targets": (name,), "strategy": "reduce-bcast"})
    return out


CHUNKS = (2, 4, 8, 16)
ORDERS = ("natural", "ring", "remote_first")


TILES = (1, 2, 4)
"""Tiles per destination block tried for a fused computation-collective operator."""


def _overlaps(module: ModuleOp, values: dict) -> list[dict[str, Any]]:
    # The chunk order only changes how a chain that starts with a matmul (or an
    # embedding bag) is lowered (``lowering/lower_overlap.py``); other chains run in
    # natural order whatever the option says, so only that one is tried for them. A
    # chain starting with a matmul or embedding bag may also become one fused
    # computation-collective operator (``granularity=tile``) in the fused-operator
    # paper's communication-aware order; the pass refuses the chains no operator holds.
    out = [
        {"targets": (name,), "chunks": c, "order": o}
        for name, ordered in values.get("chain_start", ())
        for c in CHUNKS
        for o in (ORDERS if ordered else ORDERS[:1])
    ]
    out += [
        {"targets": (name,), "chunks": c, "order": "remote_first", "granularity": "tile"}
        for name, ordered in values.get("chain_start", ())
        if ordered
        for c in TILES
    ]
    return out


def _slices(module: ModuleOp, values: dict) -> list[dict[str, Any]]:
    # CoCoNet's asSlice of the optimizer state: every allowed argument at once or, when
    # that is not possible, the first that can be (the next step takes the others).
    state = tuple(values.get("state", ()))
    if not state:
        return []
    out = [{"targets": state}]
    if len(state) > 1:
        out += [{"targets": (s,)} for s in state]
    return out


TRANSFORMATIONS: tuple[Transformation, ...] = (
    Transformation("fuse", "fuse-maps", lambda module, values: [{}] if values.get("maps") else []),
    Transformation("split", "split-allreduce", _splits),
    Transformation("reorder", "reorder-allgather", _each("all_gather")),
    Transformation("reorder", "reorder-broadcast", _each("broadcast")),
    Transformation("reorder", "reorder-send", _each("send")),
    Transformation("fuse", "fuse-allreduce", _each("reduce_scatter")),
    Transformation("fuse", "fuse-collectives", _each("collective")),
    Transformation("asSlice", "slice-state", _slices, first_only=True),
    Transformation("overlap", "overlap", _overlaps, final=True),
)
"""The search space, in CoCoNet's order (module doc)."""

FIRST = Transformation("fuse", "fuse-maps", _everywhere())
"""Applied once before the search: CoCoNet's autotuner fuses computations first."""

_COLLECTIVE_KIND = {
    coll.AllReduceOp: "all_reduce",
    coll.ReduceScatterOp: "reduce_scatter",
    coll.AllGatherOp: "all_gather",
    coll.BroadcastOp: "broadcast",
    coll.SendOp: "send",
}
_CHAIN_OPS = (dist.MatmulOp, dist.EmbeddingBagOp, dist.MapOp, dist.DropoutOp, dist.CastOp, coll.CollectiveOp, coll.FusedCollectiveOp)
_PRODUCERS = (dist.MatmulOp, dist.EmbeddingBagOp, coll.CollectiveOp, coll.FusedCollectiveOp)
"""Ops an overlapped chain may start with: a producer whose output a collective
communicates (CoCoNet's ol(MM, ...)) or a collective feeding more communication
(ol(RS, ...)); a chain starting with a pointwise computation would only split it."""


def _values(module: ModuleOp, as_slice: Sequence[str] | None = None, names: dict[SSAValue, str] | None = None) -> dict[str, list]:
    """The top-level values of the program that transformations may target, by kind
    (cheap necessary conditions of each pass's rule; the pass has the last word):
    ``state``: in-place arguments that may be kept sliced (``as_slice`` by name; None:
    ``state_names``) and are read only through ``dist.take_slice``; ``collective``:
    collectives ``fuse-collectives`` may fuse with a computation
    (``_fuses_with_computation``); ``maps``: whether two maps fuse; ``all_gather`` and
    ``broadcast``: those a computation of their block reads (what a reorder moves).
    ``names``: ``printed_names(module)`` when the caller has them."""
    names = printed_names(module) if names is None else names
    out: dict[str, list] = {}
    for f in module.ops:
        if not isinstance(f, func.FuncOp):
            continue
        allowed = state_names(f) if as_slice is None else set(as_slice)
        for a in f.body.block.args:
            if (
                isinstance(a.type, TensorType)
                and names[a] in allowed
                and not any(isinstance(p, Sliced) for p in a.type.get_placements())
                and a.uses
                and all(isinstance(u.operation, dist.TakeSliceOp) for u in a.uses)
            ):
                out.setdefault("state", []).append(names[a])
        order = BlockOrder()
        if any(isinstance(op, dist.MapOp) and _fuses(op, order) for op in f.walk()):
            out["maps"] = [True]
        for op in f.body.block.ops:
            if not op.results:
                continue
            name = names.get(op.results[0])
            if name is None:
                continue
            kind = _COLLECTIVE_KIND.get(type(op))
            t = op.results[0].type
            scalar = not isinstance(t, TensorType) or t.rank == 0
            if scalar:
                continue  # a norm's scalar AllReduce belongs to its computation (CoCoNet)
            if kind == "all_reduce":
                out.setdefault(kind, []).append((name, t.rank))
            elif kind in ("all_gather", "broadcast"):
                if _reorderable(op):
                    out.setdefault(kind, []).append(name)
            elif kind is not None:
                out.setdefault(kind, []).append(name)
            if _fuses_with_computation(op, order):
                out.setdefault("collective", []).append(name)
            if isinstance(op, _PRODUCERS) and _starts_chain(op):
                out.setdefault("chain_start", []).append((name, isinstance(op, (dist.MatmulOp, dist.EmbeddingBagOp))))
    return out


def _fuses(op: dist.MapOp, order: BlockOrder) -> bool:
    """Whether ``fuse-maps`` fuses the map with a map whose result it reads (the pass's
    own rule, ``fuse_maps.fusable``: without such a pair it changes nothing)."""
    return any(isinstance(p := v.owner, dist.MapOp) and p is not op and fusable(p, op, order) for v in op.inputs)


_REORDERED = (dist.MapOp, dist.DropoutOp, dist.CastOp, dist.MatmulOp, dist.ReduceTensorOp)
"""The computations ``reorder-allgather`` and ``reorder-broadcast`` move past their
collective."""


def _reorderable(op: coll.CollectiveOp) -> bool:
    """Whether a computation of the collective's block reads its result (the reorder
    passes move nothing else past an AllGather or Broadcast they are given)."""
    block = op.parent_block()
    return any(isinstance(u.operation, _REORDERED) and u.operation.parent_block() is block for u in op.result.uses)


def _fuses_with_computation(op: Operation, order: BlockOrder) -> bool:
    """Whether ``fuse-collectives`` may fuse the collective with computations: one it
    fuses (not an AllReduce: ``fuse-allreduce`` does) that a computation reads or that a
    computation feeds (an AllGather's or a Broadcast's computations feed it alone: the
    pass's ``backward_plan``)."""
    if type(op) in FINISH_FUSED:
        return _fusable(op) and bool(backward_plan(op, order=order).region)  # type: ignore[arg-type]
    return type(op) in FIRST_FUSED and _fusable(op)  # type: ignore[arg-type]


def _fusable(op: coll.CollectiveOp) -> bool:
    """Whether a computation reads the collective's result or produces its input."""
    if any(isinstance(u.operation, _COMPUTE) for u in op.result.uses):
        return True
    return isinstance(op.input.owner, _COMPUTE) or (
        isinstance(op.input.owner, coll.SendOp) and any(isinstance(u.operation, _COMPUTE) for u in op.input.owner.result.uses)
    )


def _updated_in_place(f: func.FuncOp) -> list[str]:
    """The arguments the in-place results of ``f`` update, in result order."""
    names = []
    if f.res_attrs is not None:
        for attrs in f.res_attrs.data:
            a = attrs.data.get("dist.inplace")  # type: ignore[union-attr]
            if a is not None:
                names.append(_arg_name(f.body.block.args[a.value.data]))  # type: ignore[attr-defined]
    return names


def check_as_slice(f: func.FuncOp, as_slice: Sequence[str]) -> None:
    """Every name of ``as_slice`` is an argument that an in-place result updates (the
    state ``slice-state`` may keep sliced), else a diagnostic naming those that are."""
    updated = _updated_in_place(f)
    unknown = [n for n in as_slice if n not in updated]
    if unknown:
        which = ", ".join("%" + n for n in updated) or "none"
        raise InputRejected(
            f"--as-slice: {', '.join('%' + n for n in unknown)} {'is' if len(unknown) == 1 else 'are'} not updated in place "
            f"by @{f.sym_name.data} (its in-place arguments: {which})"
        )


def state_names(f: func.FuncOp) -> set[str]:
    """The in-place arguments CoCoNet's ``asSlice`` may keep sliced by default: every
    argument an in-place result updates, except the one the first in-place result
    updates (by the convention of the optimizer examples, the parameters, which the
    next forward pass needs whole; ``--as-slice`` overrides)."""
    return set(_updated_in_place(f)[1:])


def _starts_chain(op: Operation) -> bool:
    """Whether ``op`` starts a producer -> collective chain (``passes/overlap.py``) worth
    overlapping: a matmul or embedding bag anywhere in a chain, or the collective at a
    chain's head; its single result feeds exactly one op of the chain, a collective
    follows, and the chain does some work besides collectives that only reassemble each
    other (a computation, a fused collective, a send): an overlapped ReduceScatter ->
    AllGather is just a chunked AllReduce."""
    if not isinstance(op, (dist.MatmulOp, dist.EmbeddingBagOp)):
        # a collective starts a chain only at its head (a matmul may start one anywhere:
        # CoCoNet overlaps the MLP's second matmul with its AllReduce)
        for v in op.operands:
            owner = v.owner
            if isinstance(owner, _CHAIN_OPS) and owner.parent_block() is op.parent_block() and len(list(v.uses)) == 1:
                return False
    chain = [op]
    while len(chain[-1].results) == 1:
        uses = list(chain[-1].results[0].uses)
        if len(uses) != 1:
            break
        nxt = uses[0].operation
        if not isinstance(nxt, _CHAIN_OPS) or nxt.parent_block() is not op.parent_block():
            break
        chain.append(nxt)
    last = max((i for i, o in enumerate(chain) if isinstance(o, (coll.CollectiveOp, coll.FusedCollectiveOp))), default=-1)
    chain = chain[: last + 1]  # the pass wraps up to the last collective
    communicates = last >= 0
    if any(isinstance(o, (dist.MatmulOp, dist.EmbeddingBagOp)) for o in chain[1:]):
        return False  # the later producer starts the chain to overlap
    works = any(not isinstance(o, coll.CollectiveOp) or isinstance(o, coll.SendOp) for o in chain)
    return len(chain) >= 2 and communicates and works


# ======================================================================================
# Candidates
# ======================================================================================


@dataclass(eq=False)
class Candidate:
    """A schedule: the program, the passes that produce it from the original, its name
    and the result of its interpreter check. Two candidates are equal when they are one
    (their programs are distinct objects)."""

    built: ModuleOp | None
    """The program, or None until ``module`` makes it (``make``: an overlap variant, which
    the exploration names and keys without a copy of its own; or a pipeline the tuner's
    search was cut short before building, which stays None)."""
    passes: tuple[ModulePass, ...]
    name: str = ""
    original: bool = False
    check: str = "unchecked"
    """``ok``, ``unchecked``, ``differs: ...`` (a distir bug) or ``not run: ...``."""
    parent: Candidate | None = field(default=None, repr=False, compare=False)
    """The schedule whose program the last pass transformed."""
    variant_of: Candidate | None = field(default=None, repr=False, compare=False)
    """An overlap at other chunks or another order (``_overlap_variant``): the program of
    that application with its ``coll.overlap``'s options changed, nothing else (the same
    types, meshes and structural name)."""
    verified: bool = field(default=False, repr=False, compare=False)
    """The exploration verified ``module`` (which it never changes after): its copies
    need not look at it again (``verified_clone``'s ``unchanged``)."""
    make: Callable[[], ModuleOp] | None = field(default=None, repr=False, compare=False)
    """Makes the program the first time ``module`` is asked for (``built`` is None)."""
    options: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """An overlap variant's: the properties of its ``coll.overlap`` (``overlap_properties``)."""

    @property
    def module(self) -> ModuleOp:
        """The program (made now if it was not: ``make``)."""
        if self.built is None and self.make is not None:
            self.built, self.make = self.make(), None
        return self.built  # type: ignore[return-value]

    @property
    def shaped_as(self) -> Candidate:
        """The candidate whose program has this one's types, meshes and structural name:
        an overlap variant's base (``variant_of``), else itself."""
        return self.variant_of if self.variant_of is not None else self

    @property
    def pipeline(self) -> str:
        return pipeline_spec(self.passes)

    @property
    def depth(self) -> int:
        return len(self.passes)

    @property
    def usable(self) -> bool:
        return self.check == "ok"

    @property
    def overlap(self) -> ModulePass | None:
        """The ``overlap`` step that made this schedule (the last step: overlaps are
        final), or None."""
        last = self.passes[-1] if self.passes else None
        return last if last is not None and last.name == "overlap" else None

    def overlap_properties(self) -> list[dict[str, Any]]:
        """The properties of each ``coll.overlap`` of the program, in program order,
        without making a variant's program."""
        if self.options is not None:  # a variant's one overlap
            return [dict(self.options)]
        return [dict(o.properties) for o in walk(self.module) if isinstance(o, coll.OverlapOp)]

    def check_key(self) -> str:
        """What the interpreter check sees: the structure without the overlaps' chunks,
        order and granularity (an overlap means exactly its chain: schedules that differ
        only in those pass or fail the check together). An overlap variant's is its
        base's."""
        return structure_key(self.shaped_as.module, _OVERLAP_OPTIONS)


_OVERLAP_OPTIONS = {coll.OverlapOp.name: {coll.OverlapOp.keyword(k).prop for k in ("chunks", "order", "granularity")}}
"""The options of ``coll.overlap`` that ``Candidate.check_key`` leaves out."""


@dataclass
class Exploration:
    """The schedules of a program (``candidates[0]`` is the program as written)."""

    candidates: list[Candidate]
    truncated: bool = False
    errors: list[str] = field(default_factory=list)
    """Passes that failed other than by refusing (distir bugs)."""
    unfit: int = 0
    """Programs reached that fit no size (``explore``'s ``fits``): not schedules."""
    ops: int = 0
    """The ops of the candidates' programs, all together (``explore``'s ``max_ops``)."""


def structure_key(
    module: Operation, ignore: Mapping[str, Collection[str]] | None = None, replace: Mapping[str, dict[str, Any]] | None = None
) -> tuple:
    """The program's structure up to the names of its values and blocks: equal exactly for
    programs that print alike once SSA names are replaced by their order of appearance.
    Computed by walking the ops, never by printing (the exploration takes one key per
    program reached): per op its name, the numbers of its results, operands and
    successors (values and blocks numbered in order of appearance), its result types,
    properties and attributes (by name), and its regions' blocks with their argument
    types. The whole tuple is the key (a dictionary compares keys whose hashes collide:
    two programs never share one). ``ignore`` names, per op name, properties left out
    (``Candidate.check_key``); ``replace`` gives, per op name, the properties to read
    instead of the op's own (an overlap variant's key, read from its base's program)."""
    values: dict[SSAValue, int] = {}
    blocks: dict[Block, int] = {}
    number = values.setdefault
    label = blocks.setdefault

    def block_key(b: Block) -> tuple:
        label(b, len(blocks))
        return (tuple([(number(a, len(values)), a.type) for a in b.args]), tuple([op_key(o) for o in b.ops]))

    def op_key(op: Operation) -> tuple:
        props = op.properties
        if replace and op.name in replace:
            props = replace[op.name]
        if ignore and props and (drop := ignore.get(op.name)):
            props = {k: v for k, v in props.items() if k not in drop}
        return (
            op.name,
            tuple([(number(r, len(values)), r.type) for r in op.results]),
            tuple([number(v, len(values)) for v in op.operands]),
            tuple([label(b, len(blocks)) for b in op.successors]),
            tuple(sorted(props.items())) if props else (),
            tuple(sorted(op.attributes.items())) if op.attributes else (),
            tuple([tuple([block_key(b) for b in r.blocks]) for r in op.regions]),
        )

    return op_key(module)


def explore(
    module: ModuleOp,
    transformations: Sequence[Transformation] = TRANSFORMATIONS,
    as_slice: Sequence[str] | None = None,
    max_depth: int = 8,
    max_schedules: int = 400,
    progress: Callable[[int], None] | None = None,
    fits: Callable[[ModuleOp], bool] | None = None,
    stop: Callable[[], bool] | None = None,
    max_ops: int | None = None,
) -> Exploration:
    """Every schedule of ``module`` (one function) reachable by ``transformations``, breadth
    first (module doc); ``as_slice`` names the state ``slice-state`` may keep sliced
    (default ``state_names``). ``progress`` is called with the number found so far.
    ``fits`` (the tuner's sizes and ranks, ``sizes.fitting``; it reads the program's
    types and meshes only, asked once for overlaps that differ in their options alone): a program it rejects
    cannot run at any size, so it is no schedule and is not transformed further (the
    transformations keep every dim they slice sliced); the program as written is
    always kept. ``stop()`` (a time budget) ends the exploration early, as
    ``max_schedules`` does, and ``max_ops``: the ops of the schedules found (each a
    copy of the program; the program as written counts too) stay within it
    (``truncated``; ``Exploration.ops`` is what they hold)."""
    from distir.dialects.context import make_context

    if as_slice:
        for f in module.ops:
            if isinstance(f, func.FuncOp):
                check_as_slice(f, as_slice)
    ctx = make_context()
    original = Candidate(verified_clone(module), (), original=True, verified=True)
    found = [original]
    held = len(walk(original.module))
    seen = {structure_key(original.module): original}
    errors: list[str] = []
    unfit = 0
    truncated = False
    first = FIRST.passes(original.module, {})[0]
    start = _apply(first, original, ctx, errors)
    frontier = [original] if fits is None or fits(original.module) else []
    if start is not None and _verifies(start, first, errors):
        key = structure_key(start.module)
        if key not in seen:
            seen[key] = start
            n = len(walk(start.module))
            if max_ops is not None and held + n > max_ops:
                truncated = True
            elif fits is None or fits(start.module):
                found.append(start)
                held += n
                frontier = [start]
            else:
                unfit += 1
                frontier = []
    fit: dict[int, bool] = {}  # fits, per program asked about (by id of its candidate)

    def fitted(c: Candidate) -> bool:
        src = c.shaped_as  # its types and meshes are all that ``fits`` reads
        if id(src) not in fit:
            fit[id(src)] = fits(src.module)  # type: ignore[misc]
        return fit[id(src)]

    for _ in range(max_depth):
        if truncated:
            break
        nxt: list[Candidate] = []
        for cand in frontier:
            if stop is not None and stop():
                truncated = True
                break
            names = printed_names(cand.module)  # once per program: its copies' names are these
            values = _values(cand.module, as_slice, names)
            wrapped: dict[tuple, Candidate | None] = {}
            overlapped = any(isinstance(o, coll.OverlapOp) for o in walk(cand.module))
            for t in transformations:
                for p in t.passes(cand.module, values):
                    variant = _overlap_variant(p, cand, wrapped, overlapped)
                    new = variant if variant is not None else _apply(p, cand, ctx, errors, names)
                    if p.name == "overlap" and variant is None:
                        wrapped.setdefault((p.granularity, tuple(p.targets)), new)  # type: ignore[attr-defined]
                    if new is None:
                        continue
                    if variant is not None:  # its base's program with its own overlap options
                        assert variant.variant_of is not None and variant.options is not None
                        key = structure_key(variant.variant_of.module, replace={coll.OverlapOp.name: variant.options})
                    else:
                        key = structure_key(new.module)
                    if key not in seen and variant is None and not _verifies(new, p, errors):
                        continue
                    if key not in seen:
                        n = len(walk(new.shaped_as.module))  # a variant's copy, once made, has as many
                        if len(found) >= max_schedules or (max_ops is not None and held + n > max_ops):
                            truncated = True
                            break
                        seen[key] = new
                        if fits is not None and not fitted(new):
                            unfit += 1
                        else:
                            found.append(new)
                            held += n
                            if not t.final:
                                nxt.append(new)
                            if progress is not None:
                                progress(len(found))
                    if t.first_only:
                        break
                if truncated:
                    break
            if truncated:  # nothing more is kept: no more copies made
                break
        frontier = nxt
        if not frontier or truncated:
            break
    name_all(found, _function(module))
    return Exploration(found, truncated, errors, unfit, held)


def _overlap_variant(p: ModulePass, cand: Candidate, wrapped: dict[tuple, Candidate | None], overlapped: bool) -> Candidate | None:
    """``overlap`` at another chunk count or order than an application already made on
    the same program and chain: the pass wraps the same chain whatever those are, so the
    result is that application with the options of its new ``coll.overlap`` changed
    (not applied or verified again). None when there is no such application, or when
    the program already held overlaps (``overlapped``). The variant's program is made
    only when asked for (``Candidate.make``: most variants are named, keyed and bounded,
    never lowered); ``Candidate.options`` are its overlap's properties meanwhile."""
    if p.name != "overlap" or p.granularity != "chunk":  # type: ignore[attr-defined]
        return None
    base = wrapped.get(("chunk", tuple(p.targets)))  # type: ignore[attr-defined]
    if base is None or overlapped:
        return None
    (op,) = [o for o in walk(base.module) if isinstance(o, coll.OverlapOp)]  # the one it wrapped
    options = dict(op.properties)
    for name, value in (("chunks", p.chunks), ("order", p.order)):  # type: ignore[attr-defined]
        kw = coll.OverlapOp.keyword(name)
        if kw.default is not REQUIRED and value == kw.default:
            options.pop(kw.prop, None)
        else:
            options[kw.prop] = kw.to_attr(value)

    def make() -> ModuleOp:
        module = verified_clone(base.module, unchanged=base.verified)
        for o in walk(module):
            if isinstance(o, coll.OverlapOp):
                o.properties = dict(options)
                o.verify()  # its options (what changed): a refusal is a distir bug, raised
        return module

    return Candidate(None, (*cand.passes, p), parent=cand, variant_of=base, verified=True, make=make, options=options)


def _verifies(cand: Candidate, p: ModulePass, errors: list[str]) -> bool:
    """Verify what the last pass ``p`` changed (a pass that produces an invalid program
    is a distir bug: reported, and the program is no schedule)."""
    from distir.dialects.diagnostics import InternalError
    from distir.passes.pipeline import verify_after

    try:
        verify_after(p, cand.module)
    except (InternalError, VerifyException, DiagnosticException) as e:
        errors.append(f"{cand.pipeline}: the result does not verify: {e}")
        return False
    cand.verified = True
    return True


def _apply(p: ModulePass, cand: Candidate, ctx, errors: list[str], names: dict[SSAValue, str] | None = None) -> Candidate | None:
    """``p`` applied to a copy of ``cand``'s program (None when it refuses); ``names``:
    ``printed_names(cand.module)``, which the copy's ``Targets`` take instead of printing
    it again."""
    copies: dict[SSAValue, SSAValue] = {}
    m = verified_clone(cand.module, spans=False, value_mapper=copies, unchanged=cand.verified)
    known = None if names is None else {copies[v]: n for v, n in names.items()}
    try:
        with scratch(m, known):  # a rejected request leaves m half rewritten: it is dropped
            p.apply(ctx, m)
    except (PassFailedException, VerifyException, DiagnosticException, InputRejected):
        return None
    except Exception as e:  # noqa: BLE001 - a pass that crashes is a distir bug, reported, not fatal
        errors.append(f"{pipeline_spec((*cand.passes, p))}: {type(e).__name__}: {e}")
        return None
    return Candidate(m, (*cand.passes, p), parent=cand)


def _function(module: ModuleOp) -> func.FuncOp:
    funcs = [f for f in module.ops if isinstance(f, func.FuncOp)]
    if len(funcs) != 1:
        raise InputRejected(f"the tuner explores one function; the module has {len(funcs)} (choose one with --func)")
    return funcs[0]


def only_function(module: ModuleOp, name: str | None) -> ModuleOp:
    """A module holding function ``name`` of ``module`` (the only function when
    ``name`` is None) and the meshes it uses (``dist.alone``: only they constrain the
    rank count)."""
    funcs = [f for f in module.ops if isinstance(f, func.FuncOp)]
    if name is None:
        if len(funcs) != 1:
            listed = ", ".join("@" + f.sym_name.data for f in funcs)
            raise InputRejected(f"the module has {len(funcs)} functions ({listed}): choose one with --func NAME")
        check_body(funcs[0])
        out = dist.alone(module, funcs[0])
        return module.clone() if out is module else out
    keep = [f for f in funcs if f.sym_name.data == name]
    if not keep:
        listed = ", ".join("@" + f.sym_name.data for f in funcs)
        raise InputRejected(f"--func {name}: no function @{name} in the module (functions: {listed})")
    check_body(keep[0])
    out = dist.alone(module, keep[0])
    return module.clone() if out is module else out


# ======================================================================================
# Names
# ======================================================================================

OPTIMIZERS = {"adam": "Adam", "lamb": "LAMB", "sgd": "SGD"}
"""Functions whose computation CoCoNet names after the optimizer (``AR-Adam``)."""

_TOKENS: dict[type[Operation], str] = {
    **{c: c.TOKEN for c in coll.collectives()},
    dist.MatmulOp: "MM",
    dist.EmbeddingBagOp: "Emb",
}
_COMPUTE = (dist.MapOp, dist.DropoutOp, dist.CastOp, dist.ReduceTensorOp)
_FUSED: dict[type[Operation], tuple[tuple[str, ...], tuple[str, ...]]] = {
    # (tokens before the region, tokens after) inside fuse(...), then tokens after fuse(...)
    f: ((f.FIRST.TOKEN,), (f.FINISH.TOKEN,) if f.FINISH else ()) if f.FIRST else ((), ())
    for f in coll.fused_collectives()
}
_FINISH_OUTSIDE = {f: f.FINISH.TOKEN for f in coll.fused_collectives() if f.FINISH and not f.FIRST}


def _tokens(ops: Sequence[Operation], label: str) -> list[str]:
    out: list[str] = []
    last: list[str] = []
    for op in ops:
        if isinstance(op, (coll.AllGatherOp, coll.BroadcastOp)) and op.result.uses and all(
            isinstance(u.operation, func.ReturnOp) for u in op.result.uses
        ):
            # a gather of a result finishes the program, wherever it is issued
            last.append(_TOKENS[type(op)])
            continue
        if isinstance(op, coll.OverlapOp):
            inner = _tokens([o for o in op.body.block.ops if not isinstance(o, coll.YieldOp)], label)
            if op.option("granularity") == "tile":
                # the fused-operator paper's fused(GEMV+AR): the producer (and its
                # epilogue) + the collective it feeds, one operator
                out.append("fused(" + "-".join(inner[:-1]) + "+" + inner[-1] + ")")
            else:
                out.append("ol(" + ",".join(inner) + ")")
        elif type(op) in _FUSED:
            before, after = _FUSED[type(op)]
            region = _tokens([o for o in op.regions[0].block.ops if not isinstance(o, coll.YieldOp)], label)
            out.append("fuse(" + "-".join([*before, *_collapse(region, label), *after]) + ")")
            if type(op) in _FINISH_OUTSIDE:
                out.append(_FINISH_OUTSIDE[type(op)])
        elif isinstance(op, coll.AllReduceOp) and isinstance(op.input.type, TensorType) and op.input.type.rank == 0:
            out.append(label)  # a norm's scalar AllReduce belongs to the computation
        elif type(op) in _TOKENS:
            out.append(_TOKENS[type(op)])
        elif isinstance(op, _COMPUTE):
            out.append(label)
    return _collapse(out + last, label)


def _collapse(tokens: list[str], label: str) -> list[str]:
    """Consecutive equal tokens are one stage (CoCoNet's RS-Adam-AG gathers p, m and v)."""
    out: list[str] = []
    for t in tokens:
        if out and out[-1] == t:
            continue
        out.append(t)
    return out


def structural_name(module: ModuleOp) -> str:
    """The CoCoNet-style name of a program's (only) function (module doc)."""
    f = _function(module)
    label = OPTIMIZERS.get(f.sym_name.data, "C")
    return "-".join(_tokens([o for o in f.body.block.ops if not isinstance(o, func.ReturnOp)], label)) or "(empty)"


def _details(cand: Candidate, original: func.FuncOp) -> dict[str, str]:
    """What distinguishes schedules of one structure (an overlap variant's, from its
    base's program and its own overlap options)."""
    f = _function(cand.shaped_as.module)
    out: dict[str, str] = {}
    sliced = [
        _arg_name(a)
        for a, b in zip(f.body.block.args, original.body.block.args)
        if isinstance(a.type, TensorType) and a.type != b.type
    ]
    if sliced:
        out["slice"] = f"asSlice({','.join(sliced)})"
    ols = [
        f"{o.option('chunks')} {o.option('order')}" + (" tiles" if o.option("granularity") == "tile" else "")
        for o in f.walk()
        if isinstance(o, coll.OverlapOp)
    ]
    if cand.variant_of is not None:  # its one overlap, at its own chunks and order
        step = cand.overlap
        assert step is not None and len(ols) == 1
        ols = [f"{step.chunks} {step.order}"]  # type: ignore[attr-defined]
    if ols:
        out["overlap"] = "; ".join(ols)
    dims = [str(o.option("dim")) for o in f.walk() if isinstance(o, (coll.ReduceScatterOp, coll.FusedAllReduceOp, coll.FusedReduceScatterOp))]
    if dims:
        out["dim"] = "dim " + ",".join(dims)
    return out


def _arg_name(a: BlockArgument) -> str:
    return a.name_hint or f"arg{a.index}"


def name_all(candidates: list[Candidate], original: func.FuncOp) -> None:
    """Give every candidate a unique name (module doc)."""
    structural: dict[int, str] = {}  # an overlap variant's is its base's (``Candidate.shaped_as``)
    for c in candidates:
        if id(c.shaped_as) not in structural:
            structural[id(c.shaped_as)] = structural_name(c.shaped_as.module)
    base = [structural[id(c.shaped_as)] for c in candidates]
    groups: dict[str, list[int]] = {}
    for i, b in enumerate(base):
        groups.setdefault(b, []).append(i)
    names = list(base)
    for b, idx in groups.items():
        if len(idx) == 1:
            continue
        details = [_details(candidates[i], original) for i in idx]
        keys = [k for k in ("slice", "overlap", "dim") if len({d.get(k, "") for d in details}) > 1]
        for i, d in zip(idx, details):
            if candidates[i].original:
                names[i] = f"{b} (as written)"
                continue
            parts = [d[k] for k in keys if k in d]
            names[i] = f"{b} [{', '.join(parts)}]" if parts else b
    counts: dict[str, int] = {}
    for i, n in enumerate(names):
        counts[n] = counts.get(n, 0) + 1
        if counts[n] > 1:
            names[i] = f"{n} #{counts[n]}"
    for c, n in zip(candidates, names):
        c.name = n


# ======================================================================================
# The interpreter check
# ======================================================================================


def check_ranks(module: ModuleOp, ranks: int) -> int:
    """The rank count of the interpreter check: the program's static mesh size, or (with
    a ``?`` axis) the static part times up to 4."""
    from distir.dialects.dist import MeshOp

    fixed, free = 1, False
    for op in module.ops:
        if isinstance(op, MeshOp) and op.parent_mesh() is None:
            sizes = op.declared_sizes
            fixed = max(fixed, _prod(s for s in sizes if s is not None))
            free = free or any(s is None for s in sizes)
    if not free:
        return fixed
    per = max(1, min(4, ranks // fixed))
    return fixed * per


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


CHECK_FACTORS = (16, 8, 4, 2)
"""The factors f of the check's reduced shapes, gcd(d, f·ranks), largest first: f = 16
(``max(CHUNKS)``) keeps blocks of up to 16 elements where the ranks slice a dim, and
f = 2 blocks of at least 2 where the ranks divide it (a block of one element would
look the same laid out in order or strided)."""


def check_mapping(module: ModuleOp, ranks: int, factors: Sequence[int] = CHECK_FACTORS, also: Collection[ModuleOp] = ()) -> dict[int, int]:
    """Each dim d of ``module`` (and of the modules ``also``) -> its size in the
    interpreter check on ``ranks`` ranks: gcd(d, f·ranks) for the largest f of
    ``factors`` (the last when none) under which ``module``'s function arguments hold at
    most ``CHECK_ELEMENTS`` elements on all ranks together. Every
    group of ranks that slices a dim divides ``ranks``, so whatever f, the reduced dim is
    divisible by a group exactly when d is: the ranks' blocks fall as at full size (who
    holds a block, whether it is padded); f only bounds how long the blocks are. A
    Llama-7B step on 256 ranks (dims 4096, 11008, 32000) checks at 512 and 256, not
    at 4096, the hidden size itself."""
    import math

    from distir.tuning.sizes import program_dims

    dims = set(program_dims(module)).union(*(program_dims(m) for m in also))
    shapes = [
        a.type.get_shape()
        for op in module.ops
        if isinstance(op, func.FuncOp) and not op.is_declaration
        for a in op.body.block.args
        if isinstance(a.type, TensorType)
    ]
    for f in factors:
        mapping = {d: math.gcd(d, f * ranks) for d in dims}
        if ranks * sum(_prod(mapping[x] for x in shape) for shape in shapes) <= CHECK_ELEMENTS:
            break
    return mapping


CHECK_ELEMENTS = 1 << 24
"""The most elements the function's arguments of an interpreter check hold on all its
ranks together (each rank counted whole): above it, the reduced shapes shrink further
(``Checker.of``)."""


@dataclass
class Checker:
    """The interpreter check of one program's schedules: the reduced shapes (every dim
    d becomes gcd(d, f·ranks) for the largest f of 16, 8, 4, 2 under which the
    arguments hold at most ``CHECK_ELEMENTS`` on all ranks; f = 2 when none does:
    ``check_mapping``) and
    the program as written at them."""

    ranks: int
    mapping: dict[int, int]
    original: ModuleOp
    reference: dict = field(default_factory=dict)
    """The original's runs (``equivalent``'s ``reference``): it runs once, not per check."""

    @classmethod
    def of(cls, exploration: Exploration, ranks: int) -> Checker:
        from distir.tuning.sizes import substitute

        original = exploration.candidates[0].module
        n = check_ranks(original, ranks)
        mapping = check_mapping(original, n)
        return cls(n, mapping, substitute(original, mapping))

    def __call__(self, cand: Candidate) -> str:
        """``ok``, ``differs: ...`` or ``not run: ...`` (see ``Candidate.check``)."""
        from distir.runtime.equivalence import equivalent
        from distir.tuning.sizes import substitute

        if cand.original:
            return "ok"
        small = substitute(cand.module, self.mapping)
        try:
            report = equivalent(self.original, small, self.ranks, trials=1, seed=0, reference=self.reference)
        except (InputRejected, ValueError, ArithmeticError) as e:
            return f"not run: {e}"
        return "ok" if report else f"differs: {report.message}"


def check(exploration: Exploration, ranks: int, progress: Callable[[int], None] | None = None) -> list[Candidate]:
    """Check every schedule against the program as written with the reference
    interpreter on reduced shapes (``Checker``); returns the schedules that disagree
    (distir bugs)."""
    checker = Checker.of(exploration, ranks)
    for i, cand in enumerate(exploration.candidates):
        cand.check = checker(cand)
        if progress is not None and i:
            progress(i)
    return [c for c in exploration.candidates if c.check.startswith("differs")]
