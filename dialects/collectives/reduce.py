"""``coll.reduce`` and ``coll.fused_reduce``."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from distir.dialects import nccl
from distir.dialects.collectives.base import AXES, CollectiveOp, FusedCollectiveOp, collective, count
from distir.dialects.format import Kw
from distir.dialects.placements import At, Local


@collective
@irdl_op_definition
class ReduceOp(CollectiveOp):
    """``reduce = store(reduce(x), root)``: group rank ``root`` gets the reduction;
    local -> at<root> on each axis of ``axes`` (the digits of ``root``).

    ``%y = coll.reduce sum %x root 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [at<0>]>``

    Before: ``a0 a1 a2 a3``; after: rank 0 holds ``a0+a1+a2+a3``, the others nothing.
    Lowered to ``nccl.reduce``.
    """

    name = "coll.reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("root", "int"), AXES)
    TOKEN: ClassVar[str] = "Reduce"
    PHASES: ClassVar[tuple[str, str] | None] = ("reduce", "store")
    RANK_OPTION: ClassVar[str | None] = "root"
    TRANSITION: ClassVar[tuple[type, type] | None] = (Local, At)

    @classmethod
    def exchange(cls, buffers, options, group):
        return cls.store_at(group.reduce(buffers, options["op"]), options, len(buffers))

    @classmethod
    def lower(cls, lw, call):
        s = lw.contiguous(call.send)
        recv, options = call.recv, call.options
        lw.guarded(
            call.operand,
            lambda: call.nccl(lw, nccl.ReduceOp, [s, recv], op=options.get("op"), count=count(recv), root=options["root"]),
            call.axes,
        )
        return recv


@collective
@irdl_op_definition
class FusedReduceOp(FusedCollectiveOp):
    """``fused_reduce = store(map(g, reduce(x)), root)``: the region runs on the root's
    reduced value."""

    name = "coll.fused_reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("root", "int"), AXES)
    PLAIN: ClassVar[type[CollectiveOp]] = ReduceOp
    FIRST: ClassVar[type[CollectiveOp] | None] = ReduceOp
