"""``coll.all_gather`` and ``coll.fused_all_gather``."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import MemRefType
from xdsl.irdl import irdl_op_definition

from distir.dialects import layout, nccl
from distir.dialects.collectives.base import (
    AXES,
    GATHER,
    CollectiveOp,
    FusedCollectiveOp,
    collective,
    concat,
    count,
    element,
    is_contiguous_block,
    shape,
)
from distir.dialects.format import Kw
from distir.dialects.placements import Replicated, Sliced


@collective
@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """``all_gather = repl(join(x))``: every rank gets the concatenation of the group's
    blocks; sliced<d> -> replicated on each axis of ``axes``. The gathered axes must be
    the innermost slicing of their dim.

    ``%y = coll.all_gather %x : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>``

    Before: rank i holds block i; after: every rank holds all blocks. Lowered to
    ``nccl.all_gather`` (unpacked after unless the blocks along d are contiguous).
    """

    name = "coll.all_gather"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES,)
    TOKEN: ClassVar[str] = "AG"
    PHASES: ClassVar[tuple[str, str] | None] = ("join", "repl")
    TRANSITION: ClassVar[tuple[type, type] | None] = (Sliced, Replicated)
    LOWERS_INTO_VIEWS: ClassVar[bool] = True

    @classmethod
    def exchange(cls, buffers, options, group):
        return [concat(buffers, group.joined_dim)] * len(buffers)

    @classmethod
    def lower(cls, lw, call):
        d = layout.innermost_slicing(call.operand.get_placements(), call.axes)
        assert d is not None
        send, recv, n = call.send, call.recv, call.n

        def body():
            s = lw.contiguous(send)
            if lw.is_contiguous(recv) and is_contiguous_block(shape(recv), d):
                call.nccl(lw, nccl.AllGatherOp, [s, recv], count=count(s))
            else:
                tmp = lw.alloc(MemRefType(element(recv), [n, *shape(send)]))
                call.nccl(lw, nccl.AllGatherOp, [s, tmp], count=count(s))
                lw.unpack(tmp, recv, d, n)

        lw.guarded(call.operand, body, call.axes)
        return recv

    @classmethod
    def cut_dims(cls, t, options, axes):
        d = layout.innermost_slicing(t.get_placements(), axes)
        return [], [] if d is None else [d]

    @classmethod
    def chunk(cls, t, options, dim):
        return dim, layout.innermost_slicing(t.get_placements(), list(options.get("axes") or (0,))) == dim


@collective
@irdl_op_definition
class FusedAllGatherOp(FusedCollectiveOp):
    """``fused_all_gather = repl(join(map(g, x)))``: the region runs on this rank's slice,
    then the results flagged in ``gather`` are all-gathered."""

    name = "coll.fused_all_gather"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES, GATHER)
    PLAIN: ClassVar[type[CollectiveOp]] = AllGatherOp
    FINISH: ClassVar[type[CollectiveOp] | None] = AllGatherOp
