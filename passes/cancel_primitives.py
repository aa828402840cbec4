"""``cancel-primitives``: the inverse pairs of functional primitives (DESIGN §3) vanish::

    join(slice(x)) = x        slice(join(x)) = x     (same axis and dim)
    drop(repl(x))  = x        repl(drop(x))  = x
    load(store(x)) = x        store(load(x), r) = x  (x is at<r>)

Both primitives act on the same mesh axis. A pair cancels exactly when the outer
primitive gives back the type of the inner one's operand (these six pairs are the only
compositions of two primitives on one axis that do), which is the check made here. The
inner primitive stays if it has other uses. Example::

    %s = dist.slice %x dim 0 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %j = dist.join %s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [unplaced]>

makes every use of ``%j`` a use of ``%x``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from distir.dialects import dist
from distir.passes.support import same_type

INVERSE: dict[type[dist.PrimitiveOp], type[dist.PrimitiveOp]] = {
    dist.JoinOp: dist.SliceOp,
    dist.SliceOp: dist.JoinOp,
    dist.DropOp: dist.ReplOp,
    dist.ReplOp: dist.DropOp,
    dist.LoadOp: dist.StoreOp,
    dist.StoreOp: dist.LoadOp,
}


class CancelInversePair(RewritePattern):
    """outer(inner(x)) with inner the inverse of outer on the same axis -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dist.PrimitiveOp, rewriter: PatternRewriter, /):
        inner = op.input.owner
        if type(op) not in INVERSE or not isinstance(inner, INVERSE[type(op)]):
            return
        if inner.option("axis") != op.option("axis"):
            return
        x = inner.input
        if not same_type(x.type, op.result.type):
            return
        rewriter.replace(op, [], [x])
        if not inner.result.uses:
            rewriter.erase(inner)


@dataclass(frozen=True)
class CancelPrimitivesPass(ModulePass):
    """Remove inverse pairs of functional primitives; see the module docstring."""

    name = "cancel-primitives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([CancelInversePair()]),
            apply_recursively=True,
        ).rewrite_module(op)
