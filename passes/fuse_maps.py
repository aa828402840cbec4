"""``fuse-maps{targets=...}``: ``map(f, map(g, x), y) = map(f∘g, x, y)`` (DESIGN §3;
CoCoNet's computation fuse).

A map ``C`` using results of a map ``P`` of the same block becomes one map whose body is
``P``'s body followed by ``C``'s. Results of ``P`` that are also used elsewhere become
extra results of the fused map (a multi-result map, as CoCoNet fuses Adam's updates of
``m``, ``v`` and ``p`` into one kernel); this needs them to have ``C``'s shape and
placements, and their other uses to come after ``C`` or to be movable after it (nothing
up to ``C`` reads them). Otherwise the pair is left alone.
Operands broadcast as before: broadcasting composes. ``targets`` names the maps that
may fuse (a pair fuses when both are named; all maps when empty). Example::

    %a = dist.map(%x) : (T) -> T { ^bb0(%e: f32): %s = arith.mulf %e, %e : f32  dist.yield %s : f32 }
    %b = dist.map(%a, %y) : (T, T) -> T { ^bb0(%p: f32, %q: f32): %t = arith.addf %p, %q : f32  dist.yield %t : f32 }

becomes ``%b = dist.map(%x, %y) : (T, T) -> T`` computing ``x*x + y``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from distir.dialects import dist, layout
from distir.dialects.dist import TensorType
from distir.passes.support import (
    BlockOrder,
    Targets,
    ancestor_in,
    apply_all_or_nothing,
    make_yield,
    map_fits,
)


def _element_type(v: SSAValue):
    t = v.type
    return t.element_type if isinstance(t, TensorType) else t


def _fits_as_result(v: SSAValue, result: TensorType) -> bool:
    t = v.type
    assert isinstance(t, TensorType)
    return t.get_shape() == result.get_shape() and layout.same_layout(t.get_placements(), result.get_placements())


def fusable(producer: dist.MapOp, consumer: dist.MapOp, order: BlockOrder | None = None) -> bool:
    """Whether ``consumer`` and ``producer`` may fuse (``fuse_pair`` would fuse them);
    changes nothing."""
    return _plan(producer, consumer, order or BlockOrder()) is not None


def _plan(producer: dist.MapOp, consumer: dist.MapOp, order: BlockOrder) -> tuple[list[SSAValue], list[Operation], list[SSAValue]] | None:
    """How the pair fuses, None when it may not: the producer's results that become
    extra results, the users to move after the fused map, the fused map's operands."""
    block = consumer.parent_block()
    if block is None or producer.parent_block() is not block or not order.before(producer, consumer):
        return None
    res0 = consumer.outputs[0].type
    assert isinstance(res0, TensorType)
    extra: list[SSAValue] = []
    postpone: list[Operation] = []
    for r in producer.outputs:
        others = [u.operation for u in r.uses if u.operation is not consumer]
        if not others:
            continue
        if not _fits_as_result(r, res0):
            return None
        for user in others:
            a = ancestor_in(user, block)
            if a is None or a is consumer:
                return None
            if not order.before(consumer, a):
                # a user between the two maps can follow the fused map if nothing up to
                # the consumer reads it
                if any(not order.before(consumer, ancestor_in(u.operation, block) or consumer) for ar in a.results for u in ar.uses):
                    return None
                if a not in postpone:
                    postpone.append(a)
        extra.append(r)
    operands: list[SSAValue] = []
    for v in [*producer.inputs, *(v for v in consumer.inputs if v.owner is not producer)]:
        if v not in operands:
            operands.append(v)
    if not map_fits(operands, res0):
        return None
    return extra, postpone, operands


def fuse_pair(
    producer: dist.MapOp, consumer: dist.MapOp, order: BlockOrder | None = None
) -> tuple[dist.MapOp, list[SSAValue], list[SSAValue]] | None:
    """The fused map of ``consumer`` over ``producer``, the old values its results replace,
    and those results; None when the pair may not fuse. ``order`` answers "is A before
    B" in the block (shared by the caller across pairs)."""
    order = order or BlockOrder()
    plan = _plan(producer, consumer, order)
    if plan is None:
        return None
    extra, postpone, operands = plan
    block = consumer.parent_block()
    assert block is not None
    res0 = consumer.outputs[0].type
    assert isinstance(res0, TensorType)
    block_new = Block(arg_types=[_element_type(v) for v in operands])
    arg_of = {v: a for v, a in zip(operands, block_new.args)}
    for m in (consumer, producer):
        for ba, v in zip(m.body.block.args, m.inputs):
            if v in arg_of and ba.name_hint:
                arg_of[v].name_hint = ba.name_hint
    # the producer's body on the fused map's arguments
    mapping: dict[SSAValue, SSAValue] = {pa: arg_of[v] for pa, v in zip(producer.body.block.args, producer.inputs)}
    p_yield = producer.body.block.last_op
    assert isinstance(p_yield, dist.YieldOp)
    for op in producer.body.block.ops:
        if op is p_yield:
            break
        block_new.add_op(op.clone(mapping))
    p_values = {r: mapping.get(y, y) for r, y in zip(producer.outputs, p_yield.values)}
    # then the consumer's body, its producer operands reading the values just computed
    c_mapping: dict[SSAValue, SSAValue] = {}
    for ca, v in zip(consumer.body.block.args, consumer.inputs):
        c_mapping[ca] = p_values[v] if v.owner is producer else arg_of[v]
    c_yield = consumer.body.block.last_op
    assert isinstance(c_yield, dist.YieldOp)
    for op in consumer.body.block.ops:
        if op is c_yield:
            break
        block_new.add_op(op.clone(c_mapping))
    yields = [c_mapping.get(y, y) for y in c_yield.values] + [p_values[r] for r in extra]
    block_new.add_op(make_yield(dist.YieldOp, yields))
    types = [r.type for r in consumer.outputs] + [res0.with_(element_type=_element_type(r)) for r in extra]
    fused = dist.MapOp.make(operands, types, [Region(block_new)])
    old = [*consumer.outputs, *extra]
    for o, n in zip(old, fused.outputs):
        n.name_hint = o.name_hint
    moved = order.sort(postpone)
    for a in reversed(moved):
        a.detach()
        block.insert_op_after(a, consumer)
    order.place_run(moved)
    return fused, old, list(fused.outputs)


@dataclass
class FuseMapIntoConsumer(RewritePattern):
    """map(f, map(g, x), y) -> map(f∘g, x, y)."""

    targets: Targets
    fused: set[Operation] = field(default_factory=set)
    order: BlockOrder = field(default_factory=BlockOrder)

    def _selected(self, m: dist.MapOp) -> bool:
        return m in self.fused or all(self.targets.selects(r) for r in m.outputs)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dist.MapOp, rewriter: PatternRewriter, /):
        if not self._selected(op):
            return
        seen: list[Operation] = []
        for v in op.inputs:
            p = v.owner
            if not isinstance(p, dist.MapOp) or p is op or p in seen or not self._selected(p):
                continue
            seen.append(p)
            done = fuse_pair(p, op, self.order)
            if done is None:
                continue
            fused, old, new = done
            self.fused.add(fused)
            rewriter.insert(fused, _before(op))
            self.order.place(fused)
            for o, n in zip(old, new):
                rewriter.replace_all_uses_with(o, n)
            rewriter.erase(op)
            if not any(r.uses for r in p.outputs):
                rewriter.erase(p)
            return


def _before(op: Operation):
    from xdsl.rewriter import InsertPoint

    return InsertPoint.before(op)


@dataclass(frozen=True)
class FuseMapsPass(ModulePass):
    """Fuse producer -> consumer maps into one (multi-result) map; see the module docstring."""

    name = "fuse-maps"

    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            maps = [v for o in module.walk() if isinstance(o, dist.MapOp) for v in o.outputs]
            targets.require_known("maps", maps)
            for name in targets.wanted:
                targets.require(name, any(isinstance(v.owner, dist.MapOp) for v in targets.values(name)), "is not the result of a dist.map")
            PatternRewriteWalker(
                GreedyRewritePatternApplier([FuseMapIntoConsumer(targets)]), apply_recursively=True
            ).rewrite_module(module)

        apply_all_or_nothing(op, run, self.targets)
