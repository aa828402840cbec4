"""The ``nccl`` dialect: one op per NCCL call, on rank-local buffers.

Each op mirrors the NCCL C API call of the same name: its operands are the buffers, the
communicator (``!rt.comm``) and the stream (``!rt.stream``); ``count`` is the element
count NCCL takes and the datatype is the buffers' element type (``f32`` ->
``ncclFloat32``); reductions are bare words (``sum``, ``prod``, ``max``, ``min``,
``avg``). Buffers passed to NCCL are contiguous. Calls between ``nccl.group_start`` and
``nccl.group_end`` are issued together (point-to-point pairs). The decision clauses
``in_place`` and ``stream_from N`` are written by ``plan-execution`` (``docs/planning.md``).

=======================================================================  ===============================================
op                                                                      NCCL call
=======================================================================  ===============================================
``nccl.all_reduce OP %send, %recv, %comm, %stream count N``               ``ncclAllReduce(send, recv, N, dt, op, comm, stream)``
``nccl.reduce_scatter OP %send, %recv, %comm, %stream count N``           ``ncclReduceScatter(send, recv, N, ...)`` (N = recv count)
``nccl.all_gather %send, %recv, %comm, %stream count N [in_place]``       ``ncclAllGather(send, recv, N, ...)`` (N = send count)
``nccl.reduce OP %send, %recv, %comm, %stream count N root R``            ``ncclReduce(send, recv, N, dt, op, R, comm, stream)``
``nccl.broadcast %send, %recv, %comm, %stream count N root R``            ``ncclBroadcast(send, recv, N, dt, R, comm, stream)``
``nccl.send %buf, %peer, %comm, %stream count N``                         ``ncclSend(buf, N, dt, peer, comm, stream)``
``nccl.recv %buf, %peer, %comm, %stream count N``                         ``ncclRecv(buf, N, dt, peer, comm, stream)``
``nccl.group_start`` / ``nccl.group_end``                                 ``ncclGroupStart()`` / ``ncclGroupEnd()``
=======================================================================  ===============================================

Example (data-parallel gradient averaging)::

    nccl.all_reduce avg %g, %g, %c, %s count 1024 : (memref<1024xf32>, memref<1024xf32>, !rt.comm, !rt.stream) -> ()
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.ir import Dialect
from xdsl.irdl import irdl_op_definition, var_operand_def

from distir.dialects.format import Kw
from distir.dialects.rt import (
    COMM,
    INDEX,
    STREAM,
    STREAM_FROM,
    RtOp,
    fail,
    in_place_block,
    memref_count,
    need_memref,
)

COUNT = Kw("count", "int")
ROOT = Kw("root", "int")
IN_PLACE = Kw("in_place", "flag", False)


class NcclOp(RtOp):
    """A NCCL call. ``BUFFERS`` buffer operands come first, then (``PEER``) the peer's
    group rank, then the communicator and the stream."""

    BUFFERS: ClassVar[int] = 2
    PEER: ClassVar[bool] = False
    args = var_operand_def()

    @property
    def buffers(self):
        return self.args[: self.BUFFERS]

    @property
    def peer(self):
        assert self.PEER
        return self.args[self.BUFFERS]

    @property
    def comm(self):
        return self.args[-2]

    @property
    def stream(self):
        return self.args[-1]

    @property
    def count(self) -> int:
        return self.option("count")

    def verify_types(self) -> None:
        want = self.BUFFERS + int(self.PEER) + 2
        if len(self.args) != want:
            fail(self, f"takes {want} operands, got {len(self.args)}")
        if self.comm.type != COMM or self.stream.type != STREAM:
            fail(self, "takes a communicator and a stream as its last operands")
        if self.PEER and self.peer.type != INDEX:
            fail(self, f"peer must be an index, got {self.peer.type}")
        bufs = [need_memref(self, b.type, f"buffer {i}") for i, b in enumerate(self.buffers)]
        if len({b.element_type for b in bufs}) > 1:
            fail(self, f"buffers must share one datatype, got {', '.join(str(b.element_type) for b in bufs)}")
        if self.count < 0:
            fail(self, f"count must be non-negative, got {self.count}")
        self.check_counts([memref_count(b) for b in bufs])

    def check_counts(self, sizes: list[int]) -> None:
        for i, n in enumerate(sizes):
            if n != self.count:
                fail(self, f"buffer {i} has {n} elements, count is {self.count}")


@irdl_op_definition
class AllReduceOp(NcclOp):
    """``ncclAllReduce``: ``recv`` = reduction of every group rank's ``send``."""

    name = "nccl.all_reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (COUNT,)


@irdl_op_definition
class ReduceScatterOp(NcclOp):
    """``ncclReduceScatter``: group rank i gets block i (``count`` elements) of the
    reduction of every rank's ``send`` (``n * count`` elements)."""

    name = "nccl.reduce_scatter"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (COUNT,)

    def check_counts(self, sizes: list[int]) -> None:
        send, recv = sizes
        if recv != self.count or (self.count and send % self.count):
            fail(self, f"needs a recv buffer of count {self.count} and a send buffer of a multiple of it, got {recv} and {send}")


@irdl_op_definition
class AllGatherOp(NcclOp):
    """``ncclAllGather``: block i of ``recv`` (``n * count`` elements) on every rank is
    group rank i's ``send`` (``count`` elements). ``in_place`` (``plan-execution``):
    ``send`` is this rank's block of ``recv`` (``rt.block %recv, %group_rank``, checked),
    so this rank's own block is not copied (NCCL's and MPI's in-place all-gather).
    ``stream_from N``: see ``rt.copy`` (host-copying communicators)."""

    name = "nccl.all_gather"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (COUNT, IN_PLACE, STREAM_FROM)

    def check_counts(self, sizes: list[int]) -> None:
        send, recv = sizes
        if send != self.count or (self.count and recv % self.count):
            fail(self, f"needs a send buffer of count {self.count} and a recv buffer of a multiple of it, got {send} and {recv}")
        if self.option("in_place") and not in_place_block(self.buffers[0], self.buffers[1], self.count, self.comm):
            fail(self, "in_place needs the send buffer to be this rank's contiguous block of the recv buffer (rt.block %recv, %group_rank of the communicator's group)")


@irdl_op_definition
class ReduceOp(NcclOp):
    """``ncclReduce``: group rank ``root``'s ``recv`` = reduction of every rank's ``send``
    (``recv`` is ignored on the other ranks)."""

    name = "nccl.reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (COUNT, ROOT)


@irdl_op_definition
class BroadcastOp(NcclOp):
    """``ncclBroadcast``: every rank's ``recv`` = group rank ``root``'s ``send``.
    ``stream_from N``: see ``rt.copy`` (host-copying communicators)."""

    name = "nccl.broadcast"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (COUNT, ROOT, STREAM_FROM)


@irdl_op_definition
class SendOp(NcclOp):
    """``ncclSend``: send ``count`` elements of ``buf`` to group rank ``peer``.
    ``stream_from N``: see ``rt.copy`` (host-copying communicators)."""

    name = "nccl.send"
    BUFFERS: ClassVar[int] = 1
    PEER: ClassVar[bool] = True
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (COUNT, STREAM_FROM)


@irdl_op_definition
class RecvOp(NcclOp):
    """``ncclRecv``: receive ``count`` elements from group rank ``peer`` into ``buf``.
    ``stream_from N``: see ``rt.copy`` (host-copying communicators: the receiver copies
    the message)."""

    name = "nccl.recv"
    BUFFERS: ClassVar[int] = 1
    PEER: ClassVar[bool] = True
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (COUNT, STREAM_FROM)


@irdl_op_definition
class GroupStartOp(RtOp):
    """``ncclGroupStart``: calls up to the matching ``nccl.group_end`` are issued together."""

    name = "nccl.group_start"
    args = var_operand_def()


@irdl_op_definition
class GroupEndOp(RtOp):
    """``ncclGroupEnd``."""

    name = "nccl.group_end"
    args = var_operand_def()


COLLECTIVES = (AllReduceOp, ReduceScatterOp, AllGatherOp, ReduceOp, BroadcastOp)

Nccl = Dialect(
    "nccl",
    [AllReduceOp, ReduceScatterOp, AllGatherOp, ReduceOp, BroadcastOp, SendOp, RecvOp, GroupStartOp, GroupEndOp],
    [],
)
