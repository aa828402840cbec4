"""``coll.broadcast`` and ``coll.fused_broadcast``."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from distir.dialects import nccl
from distir.dialects.collectives.base import AXES, GATHER, CollectiveOp, FusedCollectiveOp, collective, count, group_rank_of
from distir.dialects.dist import TensorType
from distir.dialects.format import Kw
from distir.dialects.placements import At, Replicated


@collective
@irdl_op_definition
class BroadcastOp(CollectiveOp):
    """``broadcast = repl(load(x))``: the value held by one rank of the group (the root
    is in the operand's ``at<r>`` placement) reaches every rank of the group; at<r> ->
    replicated on each axis of ``axes``.

    ``%y = coll.broadcast %x : !dist.tensor<64xf32, @world, [at<0>]> -> !dist.tensor<64xf32, @world, [replicated]>``

    Before: rank 0 holds ``a``, the others nothing; after: ``a a a a``. Lowered to
    ``nccl.broadcast``.
    """

    name = "coll.broadcast"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES,)
    TOKEN: ClassVar[str] = "Bcast"
    PHASES: ClassVar[tuple[str, str] | None] = ("load", "repl")
    TRANSITION: ClassVar[tuple[type, type] | None] = (At, Replicated)

    def root(self) -> int:
        """The group rank holding the operand."""
        t = self.input.type
        assert isinstance(t, TensorType)
        sizes = self.mesh_sizes() or ()
        return group_rank_of(t, self.axes, [s or 1 for s in sizes])

    @classmethod
    def exchange(cls, buffers, options, group):
        return [buffers[group.holder]] * len(buffers)

    @classmethod
    def lower(cls, lw, call):
        root = group_rank_of(call.operand, call.axes, call.sizes)
        s = lw.contiguous(call.send)
        recv = call.recv
        lw.guarded(call.operand, lambda: call.nccl(lw, nccl.BroadcastOp, [s, recv], count=count(recv), root=root), call.axes)
        return recv


@collective
@irdl_op_definition
class FusedBroadcastOp(FusedCollectiveOp):
    """``fused_broadcast = repl(map(g, load(x)))``: the region runs on the root's value and
    the results flagged in ``gather`` are broadcast."""

    name = "coll.fused_broadcast"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES, GATHER)
    PLAIN: ClassVar[type[CollectiveOp]] = BroadcastOp
    FINISH: ClassVar[type[CollectiveOp] | None] = BroadcastOp
