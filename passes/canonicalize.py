"""Canonicalization patterns of the ``dist`` and ``coll`` ops, applied by xDSL's own
``canonicalize`` pass (``-p canonicalize``): the ops declare them through the
``DistCanonicalization`` trait (``dialects/dist.py``), as MLIR ops declare
``getCanonicalizationPatterns``. Each pattern is an identity of the functional
primitives:

=============================================  ==========================================
pattern                                        identity
=============================================  ==========================================
all_gather(reduce_scatter(x)) -> all_reduce(x)  repl(join(slice(reduce x))) = repl(reduce x)
broadcast(reduce(x, r)) -> all_reduce(x)        repl(load(store(reduce x, r))) = repl(reduce x)
map(+, all_reduce(x), all_reduce(y))            reduce is linear: reduce(x) + reduce(y)
  -> all_reduce(map(+, x, y))                   = reduce(x + y)  (sum/avg; + or -)
all_gather(take_slice(x)) -> x                  repl(join(slice(drop x))) = x
take_slice(all_gather(y)) -> y                  slice(drop(repl(join y))) = y
a collective giving its operand's type -> x     send to the holder itself, all_to_all to
  (when it ``moves_nothing``)                   the dim already sliced
two collectives over a group of size 1 -> one   on one rank every collective is a copy:
  (or none)                                     the pair becomes the collective of the
                                                overall placement change, or vanishes
a fused collective of one operand whose       the plain FIRST and FINISH collectives
  region only yields it -> plain collectives
a collective, fused collective, overlap or      dead code (Pure ops are removed by the
  dropout without uses -> erased                pass's own dead-code elimination)
=============================================  ==========================================

A collective over a size-1 group that changes the type of a function argument or
result stays (the IR has no op that retypes a value for free); at run time it copies
nothing. Example::

    %rs = coll.reduce_scatter sum %x dim 0 : ... [local] -> ... [sliced<0>]
    %ag = coll.all_gather %rs : ... [sliced<0>] -> ... [replicated]

becomes ``%ag = coll.all_reduce sum %x : ... [local] -> ... [replicated]``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from distir.dialects import coll, dist, layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import At, Sliced
from distir.passes.support import mesh_sizes, same_type, try_build


def _single_use_producer(v: SSAValue, cls) -> Operation | None:
    owner = v.owner
    if isinstance(owner, cls) and v.get_unique_use() is not None:
        return owner
    return None


def _sizes(op: Operation, v: SSAValue):
    t = v.type
    return mesh_sizes(op, t) if isinstance(t, TensorType) else None


def _replace(rewriter: PatternRewriter, op: Operation, new: Operation | None, value: SSAValue) -> None:
    if new is not None:
        rewriter.insert(new, InsertPoint.before(op))
        new.results[0].name_hint = op.results[0].name_hint
    rewriter.replace_all_uses_with(op.results[0], value)
    rewriter.erase(op)


def _fold_into_all_reduce(op: coll.CollectiveOp, first: type[coll.CollectiveOp], rewriter: PatternRewriter) -> None:
    """``op(first(x))`` over the same axes -> ``all_reduce(x)`` when the types agree."""
    prev = _single_use_producer(op.input, first)
    if prev is None or list(prev.axes) != list(op.axes):
        return
    ar = try_build(lambda: coll.AllReduceOp.of(prev.input, sizes=_sizes(op, prev.input), op=prev.option("op"), axes=list(op.axes)))
    if ar is None or not same_type(ar.results[0].type, op.result.type):
        return
    _replace(rewriter, op, ar, ar.results[0])
    rewriter.erase(prev)


class FoldAllGatherOfReduceScatter(RewritePattern):
    """all_gather(reduce_scatter(x)) over the same axes -> all_reduce(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.AllGatherOp, rewriter: PatternRewriter, /):
        _fold_into_all_reduce(op, coll.ReduceScatterOp, rewriter)


class FoldBroadcastOfReduce(RewritePattern):
    """broadcast(reduce(x, root)) over the same axes -> all_reduce(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.BroadcastOp, rewriter: PatternRewriter, /):
        _fold_into_all_reduce(op, coll.ReduceOp, rewriter)


class FoldAllGatherOfTakeSlice(RewritePattern):
    """all_gather(take_slice(x)) -> x (the chain of take_slices, one per axis)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.AllGatherOp, rewriter: PatternRewriter, /):
        cur = op.input
        while isinstance(cur.owner, dist.TakeSliceOp):
            cur = cur.owner.input
            if same_type(cur.type, op.result.type):
                _replace(rewriter, op, None, cur)
                return


class FoldTakeSliceOfAllGather(RewritePattern):
    """take_slice(all_gather(y)) -> y."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dist.TakeSliceOp, rewriter: PatternRewriter, /):
        ag = op.input.owner
        if isinstance(ag, coll.AllGatherOp) and same_type(ag.input.type, op.result.type):
            _replace(rewriter, op, None, ag.input)


class EraseIdentityCollective(RewritePattern):
    """A collective whose result has its operand's type is the identity."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.CollectiveOp, rewriter: PatternRewriter, /):
        if same_type(op.input.type, op.result.type) and op.moves_nothing():
            _replace(rewriter, op, None, op.input)


def _transition(src: TensorType, dst: TensorType, axes: list[int]):
    """The collective class taking ``src``'s placements on ``axes`` to ``dst``'s."""
    kinds = set()
    for a in axes:
        p, q = src.get_placements()[a], dst.get_placements()[a]
        kinds.add((type(p), type(q)))
    if len(kinds) != 1:
        return None
    ((p, q),) = kinds
    return next((c for c in coll.collectives() if c.TRANSITION == (p, q)), None)


class FoldUnitGroupPair(RewritePattern):
    """c2(c1(x)) over one group of size 1: one collective for the whole change, or none."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.CollectiveOp, rewriter: PatternRewriter, /):
        first = _single_use_producer(op.input, coll.CollectiveOp)
        if first is None or sorted(first.axes) != sorted(op.axes) or not (first.moves_nothing() and op.moves_nothing()):
            return
        sizes = _sizes(op, op.input)
        if sizes is None or layout.group_size(sizes, list(op.axes)) != 1:
            return
        x = first.input
        src, dst = x.type, op.result.type
        assert isinstance(src, TensorType) and isinstance(dst, TensorType)
        if same_type(src, dst):
            _replace(rewriter, op, None, x)
            rewriter.erase(first)
            return
        cls = _transition(src, dst, list(op.axes))
        if cls is None:
            return
        opts: dict = {"axes": list(op.axes)}
        if cls.KIND is not None:
            opts["op"] = first.option("op") if first.KIND is not None else "sum"
        q = dst.get_placements()[op.axes[0]]
        if isinstance(q, Sliced):
            opts["dim"] = q.dim.data
        if isinstance(q, At) and cls.RANK_OPTION is not None:
            opts[cls.RANK_OPTION] = 0
        new = try_build(lambda: cls.of(x, sizes=sizes, **opts))
        if new is None or not same_type(new.results[0].type, dst):
            return
        _replace(rewriter, op, new, new.results[0])
        rewriter.erase(first)


LINEAR = {"arith.addf", "arith.subf", "arith.addi", "arith.subi"}


class SumOfAllReduces(RewritePattern):
    """map(x + y) of all_reduce(x), all_reduce(y) -> all_reduce(map(x + y))."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dist.MapOp, rewriter: PatternRewriter, /):
        if len(op.inputs) != 2 or len(op.outputs) != 1:
            return
        ars = [_single_use_producer(v, coll.AllReduceOp) for v in op.inputs]
        if any(a is None for a in ars) or ars[0] is ars[1]:
            return
        a, b = ars
        assert a is not None and b is not None
        if a.option("op") not in ("sum", "avg") or a.option("op") != b.option("op") or list(a.axes) != list(b.axes):
            return
        if not same_type(a.input.type, b.input.type) or not same_type(a.result.type, op.outputs[0].type):
            return
        if a.option("op") == "avg" and isinstance(a.input.type.element_type, IntegerType):  # type: ignore[attr-defined]
            return  # truncated averages do not add up
        body = list(op.body.block.ops)
        if len(body) != 2 or body[0].name not in LINEAR or tuple(body[1].operands) != (body[0].results[0],):
            return
        if set(body[0].operands) != set(op.body.block.args):
            return
        t = a.input.type
        assert isinstance(t, TensorType)
        local = dist.MapOp.make([a.input, b.input], [t.with_(element_type=op.outputs[0].type.element_type)], [op.body.clone()])  # type: ignore[attr-defined]
        ar = try_build(lambda: coll.AllReduceOp.of(local.outputs[0], sizes=_sizes(op, a.input), op=a.option("op"), axes=list(a.axes)))
        if ar is None or not same_type(ar.results[0].type, op.outputs[0].type):
            return
        if op.outputs[0].name_hint:
            local.outputs[0].name_hint = f"{op.outputs[0].name_hint}_part"
        rewriter.insert(local, InsertPoint.before(op))
        _replace(rewriter, op, ar, ar.results[0])
        rewriter.erase(a)
        rewriter.erase(b)


class UnfuseTrivialRegion(RewritePattern):
    """A fused collective of one operand whose region only yields its argument -> FIRST
    and FINISH. (With several operands it is a combined collective, see
    ``combine-collectives``: one call over all of them, which stays.)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.FusedCollectiveOp, rewriter: PatternRewriter, /):
        if len(op.inputs) != 1:
            return
        block = op.body.block
        term = block.last_op
        if block.first_op is not term or not all(v in block.args for v in term.operands):  # type: ignore[union-attr]
            return
        sizes = _sizes(op, op.inputs[0])
        new_ops: list[Operation] = []
        results: list[SSAValue] = []
        for v, g, r in zip(term.operands, op.gather_flags(), op.outputs):  # type: ignore[union-attr]
            x = op.inputs[block.args.index(v)]
            cur = x
            if op.FIRST is not None:
                f = op.FIRST.of(cur, sizes=sizes, **op.first_options())
                new_ops.append(f)
                cur = f.results[0]
            if g:
                assert op.FINISH is not None
                f = op.FINISH.of(cur, sizes=sizes, axes=list(op.option("axes")))
                new_ops.append(f)
                cur = f.results[0]
            cur.name_hint = r.name_hint
            results.append(cur)
        rewriter.insert(new_ops, InsertPoint.before(op))
        for r, n in zip(op.outputs, results):
            rewriter.replace_all_uses_with(r, n)
        rewriter.erase(op)


class EraseDead(RewritePattern):
    """Collectives, fused collectives, overlaps and dropouts nobody reads compute
    nothing observable."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if not isinstance(op, (coll.CollectiveOp, coll.FusedCollectiveOp, coll.OverlapOp, dist.DropoutOp)):
            return
        if op.results and all(not r.uses for r in op.results):
            rewriter.erase(op)


_DEAD = EraseDead()
PATTERNS: dict[type, tuple[RewritePattern, ...]] = {
    coll.AllGatherOp: (FoldAllGatherOfReduceScatter(), FoldAllGatherOfTakeSlice()),
    coll.BroadcastOp: (FoldBroadcastOfReduce(),),
    dist.TakeSliceOp: (FoldTakeSliceOfAllGather(),),
    dist.MapOp: (SumOfAllReduces(),),
}
_COLLECTIVE = (EraseIdentityCollective(), FoldUnitGroupPair(), _DEAD)
_FUSED = (UnfuseTrivialRegion(), _DEAD)


def patterns_for(op_type: type[Operation]) -> tuple[RewritePattern, ...]:
    """The canonicalization patterns of one op class."""
    own = PATTERNS.get(op_type, ())
    if issubclass(op_type, coll.CollectiveOp):
        return (*own, *_COLLECTIVE)
    if issubclass(op_type, coll.FusedCollectiveOp):
        return (*own, *_FUSED)
    if issubclass(op_type, (coll.OverlapOp, dist.DropoutOp)):
        return (*own, _DEAD)
    return own


def all_patterns() -> tuple[RewritePattern, ...]:
    out: list[RewritePattern] = []
    for ps in (*PATTERNS.values(), _COLLECTIVE, _FUSED):
        out.extend(p for p in ps if p not in out)
    return tuple(out)
