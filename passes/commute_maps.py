"""``commute-maps{direction=up|down targets=...}``: move ``dist.map`` across the functional
primitives, using the identity that a pointwise map commutes with every primitive but
``reduce`` (DESIGN §3)::

    map(f, P(x), y) = P(map(f, x, Q(y)))        P in slice, join, repl, drop, store, load

where ``Q`` re-places the other operands to match ``x`` on P's axis (``drop`` for a
replicated operand under ``repl``, ``slice`` under ``join``, ``store`` under ``load``, ...;
an operand broadcast along a sliced dim is replicated instead; an operand that is itself
``P(z)`` just becomes ``z``).

``direction=up`` (the default) moves maps up, before the primitive feeding one of their
operands (the left-to-right reading of the identity): this is how ``reorder-allgather``
follows from the identities, since ``all_gather = repl(join(x))``::

    map(f, repl(join(x)), r)  ->  repl(join(map(f, x, slice(drop(r)))))

A primitive created to re-place an operand is never itself crossed in the same run, so
the pass terminates. ``direction=down`` moves a primitive from after a single-use map to
its operands (the right-to-left reading)::

    P(map(f, x, y))  ->  map(f, P(x), P'(y))

``targets`` names the maps to move (all maps when empty). Example (``up``)::

    %r = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
    %y = dist.map(%r, %s) : (..., f32) -> !dist.tensor<64xf32, @world, [replicated]> { ... }

becomes ``%y_m = dist.map(%x, %s) -> [unplaced]`` and ``%y = dist.repl %y_m``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from distir.dialects import dist, layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import (
    REPLICATED,
    UNPLACED,
    At,
    Replicated,
    Sliced,
    Unplaced,
)
from distir.passes.support import (
    Targets,
    apply_all_or_nothing,
    clone_map,
    fail,
    map_fits,
    mesh_sizes,
    place_like,
    returns_split,
    same_type,
    try_build,
)

COMMUTING = (dist.SliceOp, dist.JoinOp, dist.ReplOp, dist.DropOp, dist.StoreOp, dist.LoadOp)


def place_on_axis(v: SSAValue, want: TensorType, axis: int, sizes, ops: list[Operation]) -> SSAValue | None:
    """``v`` with its placement on ``axis`` changed by one primitive so that its type is
    ``want``; None when no single primitive does it."""
    t = v.type
    if not isinstance(t, TensorType):
        return v
    if layout.same_layout(t.get_placements(), want.get_placements()):
        return v
    cur, new = t.get_placements()[axis], want.get_placements()[axis]
    op: Operation | None = None
    if isinstance(cur, Unplaced) and isinstance(new, Sliced):
        op = try_build(lambda: dist.SliceOp.of(v, sizes=sizes, dim=new.dim.data, axis=axis))
    elif isinstance(cur, Unplaced) and isinstance(new, Replicated):
        op = try_build(lambda: dist.ReplOp.of(v, sizes=sizes, axis=axis))
    elif isinstance(cur, Unplaced) and isinstance(new, At):
        op = try_build(lambda: dist.StoreOp.of(v, sizes=sizes, rank=new.rank.data, axis=axis))
    elif isinstance(cur, Replicated) and isinstance(new, Unplaced):
        op = try_build(lambda: dist.DropOp.of(v, sizes=sizes, axis=axis))
    elif isinstance(cur, Sliced) and isinstance(new, Unplaced):
        op = try_build(lambda: dist.JoinOp.of(v, sizes=sizes, axis=axis))
    elif isinstance(cur, At) and isinstance(new, Unplaced):
        op = try_build(lambda: dist.LoadOp.of(v, sizes=sizes, axis=axis))
    if op is None or not same_type(op.results[0].type, want):
        return None
    ops.append(op)
    return op.results[0]


def _before_primitive(p: dist.PrimitiveOp, result: TensorType, operand: TensorType) -> tuple[TensorType, dict] | None:
    """The map result type before primitive ``p`` (applied to a map operand of type
    ``operand`` giving a map result of type ``result``), and ``p``'s options for the
    result."""
    a = p.option("axis")
    opts = dict(p.options())
    pl = result.get_placements()
    shift = result.rank - operand.rank
    if isinstance(p, (dist.ReplOp, dist.StoreOp)):
        new = layout.replace_axes(pl, [a], UNPLACED)
    elif isinstance(p, dist.SliceOp):
        d = p.option("dim") + shift
        if not isinstance(pl[a], Sliced) or pl[a].dim.data != d:
            return None
        new = layout.replace_axes(pl, [a], UNPLACED)
        opts["dim"] = d
    elif isinstance(p, dist.DropOp):
        new = layout.replace_axes(pl, [a], REPLICATED)
    elif isinstance(p, dist.LoadOp):
        new = layout.replace_axes(pl, [a], p.input.type.get_placements()[a])  # type: ignore[union-attr]
    else:
        assert isinstance(p, dist.JoinOp)
        src = p.input.type.get_placements()[a]  # type: ignore[union-attr]
        d = src.dim.data + shift
        if operand.get_shape()[src.dim.data] != result.get_shape()[d]:
            return None  # the operand is broadcast along the joined dim
        new = layout.add_slicing(pl, d, [a])
    return result.with_(placements=new), opts


@dataclass
class CommuteUp(RewritePattern):
    """map(f, P(x), y) -> P(map(f, x, Q(y)))."""

    targets: Targets
    placers: set[Operation] = field(default_factory=set)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dist.MapOp, rewriter: PatternRewriter, /):
        if not all(self.targets.selects(r) for r in op.outputs) and not self._derived(op):
            return
        for v in op.inputs:
            p = v.owner
            if isinstance(p, COMMUTING) and p not in self.placers and self._commute(op, p, rewriter):
                return

    def _derived(self, op: dist.MapOp) -> bool:
        return op in self.moved

    moved: set[Operation] = field(default_factory=set)

    def _commute(self, op: dist.MapOp, p: dist.PrimitiveOp, rewriter: PatternRewriter) -> bool:
        res0 = op.outputs[0].type
        assert isinstance(res0, TensorType)
        before = _before_primitive(p, res0, p.result.type)  # type: ignore[arg-type]
        if before is None:
            return False
        new_t, p_opts = before
        a = p.option("axis")
        sizes = mesh_sizes(op, res0)
        placers: list[Operation] = []
        operands: list[SSAValue] = []
        for v in op.inputs:
            t = v.type
            if not isinstance(t, TensorType):
                operands.append(v)
                continue
            want = t.with_(placements=place_like(new_t, t.get_shape()))
            owner = v.owner
            if isinstance(owner, dist.PrimitiveOp) and owner.option("axis") == a and same_type(owner.input.type, want):
                operands.append(owner.input)  # P(z) is z before P; a placer's inverse cancels it
                continue
            placed = place_on_axis(v, want, a, sizes, placers)
            if placed is None:
                return False
            operands.append(placed)
        if not map_fits(operands, new_t):
            return False
        new_types = [new_t.with_(element_type=r.type.element_type) for r in op.outputs]  # type: ignore[attr-defined]
        inner = clone_map(op, operands, new_types)
        outs: list[Operation] = []
        derived = op in self.moved
        for r, nr in zip(op.outputs, inner.outputs):
            # the map keeps its name (with `_m` once moved); the primitive after it takes
            # the name of the value it now computes, unless that was an earlier map's
            nr.name_hint = r.name_hint if derived or not r.name_hint else f"{r.name_hint}_m"
            q = try_build(lambda: type(p).of(nr, sizes=sizes, **p_opts))
            if q is None or not same_type(q.results[0].type, r.type):
                return False
            q.results[0].name_hint = None if derived else r.name_hint
            outs.append(q)
        self.placers.update(placers)
        self.moved.add(inner)
        rewriter.insert([*placers, inner, *outs], InsertPoint.before(op))
        for r, q in zip(op.outputs, outs):
            rewriter.replace_all_uses_with(r, q.results[0])
            q.results[0].name_hint = None if derived else r.name_hint  # (the replacement carries names)
        rewriter.erase(op)
        return True


def _operand_primitive(p: dist.PrimitiveOp, v: SSAValue, result: TensorType, new_result: TensorType, sizes) -> Operation | None:
    """P applied to map operand ``v`` so that it lines up with ``new_result``."""
    t = v.type
    assert isinstance(t, TensorType)
    want = t.with_(placements=place_like(new_result, t.get_shape()))
    a = p.option("axis")
    ops: list[Operation] = []
    placed = place_on_axis(v, want, a, sizes, ops)
    if placed is None or placed is v:
        return None
    return ops[0]


@dataclass
class CommuteDown(RewritePattern):
    """P(map(f, x, y)) -> map(f, P(x), P'(y)) for a map used only by P."""

    targets: Targets

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dist.PrimitiveOp, rewriter: PatternRewriter, /):
        if not isinstance(op, COMMUTING):
            return
        m = op.input.owner
        if not isinstance(m, dist.MapOp) or len(m.outputs) != 1 or not self.targets.selects(m.outputs[0]):
            return
        if m.outputs[0].get_unique_use() is None:
            return
        res = op.result.type
        assert isinstance(res, TensorType)
        sizes = mesh_sizes(op, res)
        ops: list[Operation] = []
        operands: list[SSAValue] = []
        for v in m.inputs:
            if not isinstance(v.type, TensorType):
                operands.append(v)
                continue
            q = _operand_primitive(op, v, m.outputs[0].type, res, sizes)  # type: ignore[arg-type]
            if q is None:
                if same_type(v.type, v.type.with_(placements=place_like(res, v.type.get_shape()))):
                    operands.append(v)
                    continue
                return
            ops.append(q)
            operands.append(q.results[0])
        if not map_fits(operands, res):
            return
        new = clone_map(m, operands, [res])
        new.outputs[0].name_hint = op.result.name_hint
        rewriter.insert(ops, InsertPoint.before(op))
        rewriter.replace(op, [new], [new.outputs[0]])
        rewriter.erase(m)


@dataclass(frozen=True)
class CommuteMapsPass(ModulePass):
    """Move maps across functional primitives; see the module docstring."""

    name = "commute-maps"

    direction: str = "up"
    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.direction not in ("up", "down"):
            fail(self.name, f"direction must be up or down, got '{self.direction}'")

        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            maps = [v for o in module.walk() if isinstance(o, dist.MapOp) for v in o.outputs]
            targets.require_known("maps", maps)
            for name in targets.wanted:
                targets.require(name, any(isinstance(v.owner, dist.MapOp) for v in targets.values(name)), "is not the result of a dist.map")
            pattern = CommuteUp(targets) if self.direction == "up" else CommuteDown(targets)
            with returns_split(module):
                PatternRewriteWalker(
                    GreedyRewritePatternApplier([pattern]), apply_recursively=True
                ).rewrite_module(module)

        apply_all_or_nothing(op, run, self.targets)
