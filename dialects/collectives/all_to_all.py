"""``coll.all_to_all`` and ``coll.fused_all_to_all``."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from distir.dialects import layout, nccl
from distir.dialects.collectives.base import AXES, DIM, CollectiveOp, FusedCollectiveOp, collective, concat, count, split
from distir.dialects.dist import RuleError
from distir.dialects.format import Kw
from distir.dialects.placements import Sliced


@collective
@irdl_op_definition
class AllToAllOp(CollectiveOp):
    """``all_to_all = slice<dim>(join(x))``: re-slice a value sliced on one dim along
    another; rank i sends block j of its slice to rank j; sliced<d> -> sliced<dim> on
    each axis of ``axes``.

    ``%y = coll.all_to_all %x dim 1 : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>``

    Before (2 ranks, blocks ``[r, c]``): rank 0 holds ``[0,0] [0,1]``, rank 1 ``[1,0]
    [1,1]``; after: rank 0 holds ``[0,0] [1,0]``, rank 1 ``[0,1] [1,1]``. Lowered to
    ``nccl.group_start``, N-1 send/recv pairs, ``nccl.group_end`` (and a copy to self).
    """

    name = "coll.all_to_all"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)
    TOKEN: ClassVar[str] = "A2A"
    PHASES: ClassVar[tuple[str, str] | None] = ("join", "slice")
    TRANSITION: ClassVar[tuple[type, type] | None] = (Sliced, Sliced)
    LOWERS_INTO_VIEWS: ClassVar[bool] = True

    @classmethod
    def exchange(cls, buffers, options, group):
        return split(concat(buffers, group.joined_dim), group.counts, options["dim"])

    @classmethod
    def lower(cls, lw, call):
        if layout.innermost_slicing(call.operand.get_placements(), call.axes) == call.options["dim"]:
            return call.send
        lw.guarded(call.operand, lambda: _exchange_blocks(lw, call), call.axes)
        return call.recv

    @classmethod
    def cut_dims(cls, t, options, axes):
        d = layout.innermost_slicing(t.get_placements(), axes)
        if d is None or d == options["dim"]:
            return [], []
        return [options["dim"]], [d]

    @classmethod
    def chunk(cls, t, options, dim):
        axes = list(options.get("axes") or (0,))
        if options.get("dim") == dim or layout.innermost_slicing(t.get_placements(), axes) == dim:
            raise RuleError(f"the all-to-all moves dim {dim}")
        return dim, False


def _exchange_blocks(lw, call) -> None:
    """Rank i sends block j (along the new sliced dim) of its buffer to rank j and puts
    what rank j sends at block j along the joined dim."""
    e = call.options["dim"]
    d = layout.innermost_slicing(call.operand.get_placements(), call.axes)
    assert d is not None
    n = call.n
    pieces_out, pieces_in = [], []
    for k in range(n):
        to, frm = lw.group_rank(call.mesh, call.axes, k), lw.group_rank(call.mesh, call.axes, -k)
        out_piece = lw.block(call.send, to, e, n)
        in_piece = lw.block(call.recv, frm, d, n)
        if k == 0:
            lw.copy(out_piece, in_piece)
            continue
        pieces_out.append((lw.contiguous(out_piece), to))
        tgt = in_piece if lw.is_contiguous(in_piece) else lw.alloc(in_piece.type)
        pieces_in.append((tgt, in_piece, frm))
    if n == 1:
        return
    lw.emit(nccl.GroupStartOp.make([], []))
    for (s, to), (tgt, _, frm) in zip(pieces_out, pieces_in):
        call.nccl(lw, nccl.SendOp, [s, to], count=count(s))
        call.nccl(lw, nccl.RecvOp, [tgt, frm], count=count(tgt))
    lw.emit(nccl.GroupEndOp.make([], []))
    for tgt, in_piece, _ in pieces_in:
        if tgt is not in_piece:
            lw.copy(tgt, in_piece)


@collective
@irdl_op_definition
class FusedAllToAllOp(FusedCollectiveOp):
    """``fused_all_to_all = map(g, slice<dim>(join(x)))``: the region runs on the re-sliced
    blocks each rank receives."""

    name = "coll.fused_all_to_all"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)
    PLAIN: ClassVar[type[CollectiveOp]] = AllToAllOp
    FIRST: ClassVar[type[CollectiveOp] | None] = AllToAllOp
