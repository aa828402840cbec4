"""``coll.reduce_scatter`` and ``coll.fused_reduce_scatter``."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from distir.dialects import nccl
from distir.dialects.collectives.base import AXES, DIM, CollectiveOp, FusedCollectiveOp, collective, count, is_contiguous_block, shape, split
from distir.dialects.format import Kw
from distir.dialects.placements import Local, Sliced


@collective
@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    """``reduce_scatter = slice(reduce(x))``: rank i of the group gets block i (along
    ``dim``) of the reduction; local -> sliced<dim> on each axis of ``axes``, nested inside
    any axes already slicing ``dim``.

    ``%y = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>``

    Before: ``a0 a1 a2 a3``; after: rank i holds block i of ``a0+a1+a2+a3``. Lowered to
    ``nccl.reduce_scatter`` (the blocks along ``dim`` packed first unless contiguous).
    """

    name = "coll.reduce_scatter"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)
    TOKEN: ClassVar[str] = "RS"
    PHASES: ClassVar[tuple[str, str] | None] = ("reduce", "slice")
    TRANSITION: ClassVar[tuple[type, type] | None] = (Local, Sliced)

    @classmethod
    def exchange(cls, buffers, options, group):
        return split(group.reduce(buffers, options["op"]), group.counts, options["dim"])

    @classmethod
    def lower(cls, lw, call):
        d, send, recv = call.options["dim"], call.send, call.recv

        def body():
            s = send if lw.is_contiguous(send) and is_contiguous_block(shape(send), d) else lw.pack(send, d, call.n)
            call.nccl(lw, nccl.ReduceScatterOp, [s, recv], op=call.options.get("op"), count=count(recv))

        lw.guarded(call.operand, body, call.axes)
        return recv

    @classmethod
    def cut_dims(cls, t, options, axes):
        return [options["dim"]], []

    @classmethod
    def chunk(cls, t, options, dim):
        return dim, options.get("dim") == dim


@collective
@irdl_op_definition
class FusedReduceScatterOp(FusedCollectiveOp):
    """``fused_reduce_scatter = slice(map(g, reduce(x)))``: a ReduceScatter whose slices go
    straight into the region; the results stay sliced."""

    name = "coll.fused_reduce_scatter"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)
    PLAIN: ClassVar[type[CollectiveOp]] = ReduceScatterOp
    FIRST: ClassVar[type[CollectiveOp] | None] = ReduceScatterOp
