"""``coll.send``."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from distir.dialects import nccl
from distir.dialects.collectives.base import AXES, CollectiveOp, collective, count, group_rank_of
from distir.dialects.format import Kw
from distir.dialects.placements import At


@collective
@irdl_op_definition
class SendOp(CollectiveOp):
    """``send = store(load(x), to)``: point-to-point, the value held by one group rank
    moves to group rank ``to`` (pipeline stages); at<r> -> at<to> on each axis of ``axes``.

    ``%y = coll.send %x to 1 : !dist.tensor<64xf32, @world, [at<0>]> -> !dist.tensor<64xf32, @world, [at<1>]>``

    Before: rank 0 holds ``a``; after: rank 1 holds ``a``. Lowered to ``nccl.send`` on the
    holder and ``nccl.recv`` on the target, each in a group.
    """

    name = "coll.send"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("to", "int"), AXES)
    TOKEN: ClassVar[str] = "P2P"
    PHASES: ClassVar[tuple[str, str] | None] = ("load", "store")
    RANK_OPTION: ClassVar[str | None] = "to"
    RANK_NAME: ClassVar[str | None] = "target rank"
    TRANSITION: ClassVar[tuple[type, type] | None] = (At, At)

    @classmethod
    def exchange(cls, buffers, options, group):
        return cls.store_at(buffers[group.holder], options, len(buffers))

    @classmethod
    def lower(cls, lw, call):
        src, dst = group_rank_of(call.operand, call.axes, call.sizes), call.options["to"]
        if src == dst:
            return call.send
        s = lw.contiguous(call.send)
        recv = call.recv

        def sender():
            lw.emit(nccl.GroupStartOp.make([], []))
            call.nccl(lw, nccl.SendOp, [s, lw.const(dst)], count=count(s))
            lw.emit(nccl.GroupEndOp.make([], []))

        def receiver():
            lw.emit(nccl.GroupStartOp.make([], []))
            call.nccl(lw, nccl.RecvOp, [recv, lw.const(src)], count=count(recv))
            lw.emit(nccl.GroupEndOp.make([], []))

        lw.guarded(call.operand, sender)
        lw.guarded(call.result, receiver)
        return recv
