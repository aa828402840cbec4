"""``coll.all_reduce`` and ``coll.fused_all_reduce``."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from distir.dialects import nccl
from distir.dialects.collectives.all_gather import AllGatherOp
from distir.dialects.collectives.base import AXES, DIM, GATHER, CollectiveOp, FusedCollectiveOp, collective, count
from distir.dialects.collectives.reduce_scatter import ReduceScatterOp
from distir.dialects.format import Kw
from distir.dialects.placements import Local, Replicated


@collective
@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """``all_reduce = repl(reduce(x))``: every rank of the group gets the element-wise
    reduction of the group's local values; local -> replicated on each axis of ``axes``.

    ``%y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>``

    Before (4 ranks): ``a0 a1 a2 a3``; after: ``s s s s`` with ``s = a0+a1+a2+a3``.
    Lowered to ``nccl.all_reduce``.
    """

    name = "coll.all_reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES,)
    TOKEN: ClassVar[str] = "AR"
    PHASES: ClassVar[tuple[str, str] | None] = ("reduce", "repl")
    TRANSITION: ClassVar[tuple[type, type] | None] = (Local, Replicated)

    @classmethod
    def exchange(cls, buffers, options, group):
        return [group.reduce(buffers, options["op"])] * len(buffers)

    @classmethod
    def lower(cls, lw, call):
        s = lw.contiguous(call.send)
        op, recv = call.options.get("op"), call.recv
        lw.guarded(call.operand, lambda: call.nccl(lw, nccl.AllReduceOp, [s, recv], op=op, count=count(recv)), call.axes)
        return recv


@collective
@irdl_op_definition
class FusedAllReduceOp(FusedCollectiveOp):
    """``fused_all_reduce = repl(map(g, reduce(x)))``, executed as a ReduceScatter along
    ``dim``, the region ``g`` on this rank's reduced slice, and an AllGather of the results
    flagged in ``gather`` (the others stay sliced, ZeRO-style). The region may use outer
    values (``take_slice`` of replicated ones, sliced state directly) and inner
    collectives (an all_reduce of scalar norms for LAMB).

    ::

        %p1, %m1 = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
        ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
          ...
          coll.yield %ps, %ms : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
        }
    """

    name = "coll.fused_all_reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES, GATHER)
    PLAIN: ClassVar[type[CollectiveOp]] = AllReduceOp
    FIRST: ClassVar[type[CollectiveOp] | None] = ReduceScatterOp
    FINISH: ClassVar[type[CollectiveOp] | None] = AllGatherOp
