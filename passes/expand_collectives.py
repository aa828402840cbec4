"""``expand-collectives``: every ``coll`` op becomes the ``dist`` functional primitives it
is defined by (CoCoNet's functional primitives; DESIGN §3).

Each collective over ``axes`` is a first phase (one primitive per axis) followed by a
second phase (one primitive per axis, in the order listed): its descriptor's ``PHASES``
(``dialects/collectives/``; ``all_reduce {op}`` is ``reduce {op}`` then ``repl``,
``reduce_scatter`` ``reduce {op}`` then ``slice {dim}``, ``send {to}`` ``load`` then
``store {rank: digit of to}``, ...). A join phase joins the innermost axis first; a store
phase stores at the digits of the group rank named by the descriptor's
``RANK_OPTION``. ``form-collectives`` reads the same definitions backwards. A
collective that is no composition of the primitives (no ``PHASES``; its docstring says
why) stays as it is, so expanding and forming again gives the program back.

An average over several axes of an integer tensor stays a collective: averaging axis by
axis truncates each partial average, which the average over the whole group does not.

A fused collective becomes its ``FIRST`` collective's expansion on each operand, its region
inlined, and its ``FINISH`` collective's expansion on each result whose ``gather`` flag
is set. A ``coll.overlap`` means exactly the chain it holds, which is inlined. Example::

    %y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>

becomes::

    %y_reduce = dist.reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [unplaced]>
    %y = dist.repl %y_reduce : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

from distir.dialects import coll, dist
from distir.dialects.dist import TensorType, group_rank_digits
from distir.passes.support import inexact_average, mesh_sizes, set_name

# collective -> (first phase, second phase); the primitive words name dist ops.
EXPANSION: dict[type[coll.CollectiveOp], tuple[str, str]] = {c: c.PHASES for c in coll.collectives() if c.PHASES is not None}

PRIMITIVES: dict[str, type[dist.PrimitiveOp]] = {
    "reduce": dist.ReduceOp,
    "slice": dist.SliceOp,
    "join": dist.JoinOp,
    "repl": dist.ReplOp,
    "drop": dist.DropOp,
    "store": dist.StoreOp,
    "load": dist.LoadOp,
}


def _digits(rank: int, sizes, axes: Sequence[int], what: str) -> list[int]:
    digits = group_rank_digits(rank, sizes or [None] * (max(axes) + 1), axes, what)
    if digits is None:  # several axes of unknown size: the verifier rejects this already
        raise ValueError(f"{what} over several axes of unknown size")
    return digits


def expand_collective(
    cls: type[coll.CollectiveOp], x: SSAValue, options: dict, sizes, base: str | None
) -> tuple[list[Operation], SSAValue]:
    """The primitive ops computing ``cls`` (with ``options``) on ``x``, and the result."""
    first, second = EXPANSION[cls]
    axes = list(options.get("axes", (0,)))
    ops: list[Operation] = []
    cur = x

    def add(op: Operation, word: str) -> None:
        nonlocal cur
        ops.append(op)
        cur = op.results[0]
        set_name(cur, base, f"_{word}")

    first_axes = list(reversed(axes)) if first == "join" else axes
    for a in first_axes:
        if first == "reduce":
            add(dist.ReduceOp.of(cur, sizes=sizes, op=options["op"], axis=a), first)
        else:
            add(PRIMITIVES[first].of(cur, sizes=sizes, axis=a), first)
    if second == "store":
        t = x.type
        assert isinstance(t, TensorType)
        assert cls.RANK_OPTION is not None
        digits = _digits(options[cls.RANK_OPTION], sizes, axes, cls.RANK_OPTION)
    for i, a in enumerate(axes):
        if second == "slice":
            add(dist.SliceOp.of(cur, sizes=sizes, dim=options["dim"], axis=a), second)
        elif second == "store":
            add(dist.StoreOp.of(cur, sizes=sizes, rank=digits[i], axis=a), second)
        else:
            add(PRIMITIVES[second].of(cur, sizes=sizes, axis=a), second)
    return ops, cur


def _sizes(op: Operation, v: SSAValue):
    t = v.type
    return mesh_sizes(op, t) if isinstance(t, TensorType) else None


class ExpandCollective(RewritePattern):
    """A plain collective -> its first and second phase of primitives."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if type(op) not in EXPANSION:
            return
        assert isinstance(op, coll.CollectiveOp)
        if inexact_average(op.option("op") if op.KIND else None, op.input.type, len(op.axes)):
            return
        ops, result = expand_collective(type(op), op.input, op.options(), _sizes(op, op.input), op.result.name_hint)
        result.name_hint = op.result.name_hint
        rewriter.replace(op, ops, [result])


class ExpandFusedCollective(RewritePattern):
    """fused(x) { region } -> FIRST's primitives on x, the region inlined, FINISH's
    primitives on the gathered results."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.FusedCollectiveOp, rewriter: PatternRewriter, /):
        sizes = _sizes(op, op.inputs[0])
        opts = op.options()
        if any(inexact_average(opts.get("op"), x.type, len(opts["axes"])) for x in op.inputs):
            return
        args: list[SSAValue] = []
        for x in op.inputs:
            if op.FIRST is None:
                args.append(x)
                continue
            ops, v = expand_collective(op.FIRST, x, op.first_options(), sizes, x.name_hint)
            rewriter.insert(ops, InsertPoint.before(op))
            args.append(v)
        block = op.body.block
        term = block.last_op
        assert isinstance(term, coll.YieldOp)
        # a yielded block argument stands for the operand value it is bound to
        yielded = [args[block.args.index(v)] if v in block.args else v for v in term.values]
        rewriter.erase(term, safe_erase=False)
        rewriter.inline_block(block, InsertPoint.before(op), args)
        results: list[SSAValue] = []
        for v, res, g in zip(yielded, op.outputs, op.gather_flags()):
            if not g:
                results.append(v)
                continue
            assert op.FINISH is not None
            ops, out = expand_collective(op.FINISH, v, {"axes": opts["axes"]}, sizes, res.name_hint)
            rewriter.insert(ops, InsertPoint.before(op))
            out.name_hint = res.name_hint
            results.append(out)
        rewriter.replace(op, [], results)


class InlineOverlap(RewritePattern):
    """overlap { chain } -> chain (the overlap means exactly its chain)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coll.OverlapOp, rewriter: PatternRewriter, /):
        block = op.body.block
        term = block.last_op
        assert isinstance(term, coll.YieldOp)
        yielded = list(term.values)
        rewriter.erase(term, safe_erase=False)
        rewriter.inline_block(block, InsertPoint.before(op))
        for v, res in zip(yielded, op.outputs):
            if res.name_hint and not v.name_hint:
                v.name_hint = res.name_hint
        rewriter.replace(op, [], yielded)


@dataclass(frozen=True)
class ExpandCollectivesPass(ModulePass):
    """Rewrite every ``coll`` op (fused ones and ``coll.overlap`` included) into ``dist``
    functional primitives; see the module docstring for the definitions."""

    name = "expand-collectives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([InlineOverlap(), ExpandFusedCollective(), ExpandCollective()], dce_enabled=False),
            apply_recursively=True,
        ).rewrite_module(op)
