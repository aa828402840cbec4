"""The ``mpi`` backend: one process per rank, mpi4py collectives on numpy buffers.

Run it under ``mpiexec -n N distir-run FILE --ranks N --backend mpi`` (every process
runs its rank; rank 0 reports), or from a single process: the backend then starts
``mpiexec -n N`` itself (the ``mpich`` wheel's, next to the Python interpreter) and
reads the results back.

Each ``rt.comm`` is an ``MPI.Comm.Split(color, key)`` of the world. The calls map to MPI
as follows; f16/bf16 reductions go through f32 (MPI has no half-precision sums) and
``avg`` is a sum divided by the group size afterwards::

    all_reduce      Allreduce (MPI.IN_PLACE when send is recv)
    reduce_scatter  Reduce_scatter_block
    all_gather      Allgather (MPI.IN_PLACE when send is this rank's block of recv)
    reduce          Reduce
    broadcast       Bcast (the root copies send into recv first)
    group of P2P    Isend/Irecv ... Waitall

On a stream other than 0 (``coll.overlap``) the non-blocking forms (``Iallreduce``,
``Ireduce_scatter_block``, ``Iallgather``, ...) are issued instead and polled between
the ops of stream 0 (MPI progresses only inside MPI calls); a stream's requests
complete, in order, before later work on that stream and at its events.

Ranks that share a node share memory: every buffer of a rank (arguments and
``rt.alloc``) lives in that rank's segment of one MPI-3 shared-memory window on the
node (``MPI.Win.Allocate_shared`` on ``COMM_TYPE_SHARED``, ``SharedHeap``), so that the
communicator can hand every rank of a group its peers' buffers (``peer_buffers``) as
``local``'s does. That gives ``mpi`` the same zero-copy paths: a fused all-reduce
(``rt.fused``, CoCoNet's fuse(RS-C-AG)) runs as one kernel that reduces straight from
the peers' buffers and writes gathered results straight into theirs, and the fused
tile operators store tiles straight into their destinations (``tiles.py``). A group
that spans nodes (or a run with ``shared_memory=False``) keeps the reduce-scatter +
kernel + all-gather path and sends tiles with non-blocking point-to-point messages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import InputRejected, JobFailed, ResultsDiffer, Terminated
from distir.runtime.buffers import STAGGER, STAGGER_FROM
from distir.runtime.comm import P2P
from distir.runtime.executor import ExecutionFailed, LoweredProgram, RankExecutor
from distir.runtime.host import HostDevice
from distir.runtime.scattered import copy_into, is_scattered, segments
from distir.runtime.streams import SyncStream
from distir.runtime.values import BFLOAT16, is_half

_F32 = np.dtype(np.float32)


def _mpi():
    from mpi4py import MPI

    return MPI


def _op(name: str):
    MPI = _mpi()
    return {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[name]


def _raw(a: np.ndarray) -> np.ndarray:
    """A view MPI can move as it is (bytes-compatible types for f16, bf16 and bool)."""
    if a.dtype == np.float16 or a.dtype == BFLOAT16:
        return a.view(np.uint16)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.size == b.size


def _finish_avg(recv: np.ndarray, n: int) -> None:
    if np.issubdtype(recv.dtype, np.integer):
        recv[...] = np.sign(recv) * (np.abs(recv) // n)
    else:
        np.divide(recv, recv.dtype.type(n), out=recv)


class RequestStream:
    """A stream (stream 1 of a rank) whose communication is MPI non-blocking requests.

    Work runs in order, one item at a time, as on a CUDA stream: a request starts when
    the item before it has completed; host work queued on the stream (copies, kernels)
    runs when the stream reaches it. The stream advances whenever the rank polls it
    (between the ops of stream 0: MPI progresses only inside MPI calls), at its events
    and at ``synchronize``."""

    def __init__(self, index: int):
        self.index = index
        self.queue: deque = deque()
        self.active: tuple[list, Callable[[], None] | None, tuple] | None = None
        self.markers = 0

    def issue(self, start: Callable[[], tuple[list, Callable[[], None] | None, tuple]]) -> None:
        """Queue a request: when the stream reaches it, ``start()`` prepares the buffers,
        starts the requests and returns (requests, what to do after them, the buffers
        MPI uses until they complete)."""
        self.queue.append(("request", start, None, ()))
        self.poll()

    def submit(self, fn: Callable[[], None]) -> None:
        self.queue.append(("host", fn, None, ()))
        self.poll()

    def record(self):
        ev = _RequestEvent(self)
        self.queue.append(("marker", ev, None, ()))
        self.poll()
        return ev

    def wait_event(self, event) -> None:
        # The only events this stream waits for come from stream 0 (done when recorded)
        # or from itself (ordered already).
        event.wait()

    def poll(self, block: bool = False) -> None:
        """Advance: finish the active request if it is done (or wait for it when
        ``block``), then start or run the items after it."""
        MPI = _mpi()
        while True:
            if self.active is not None:
                reqs, post, _keep = self.active
                if block:
                    with _waiting(0, issue=False):
                        MPI.Request.Waitall(reqs)
                elif not MPI.Request.Testall(reqs):
                    return
                self.active = None
                if post is not None:
                    post()
            if not self.queue:
                return
            kind, what, post, keep = self.queue.popleft()
            if kind == "host":
                what()
            elif kind == "marker":
                what.done = True
            else:
                self.active = what()

    def synchronize(self) -> None:
        while self.active is not None or self.queue:
            self.poll(block=True)

    def close(self) -> None:
        self.synchronize()


class _RequestEvent:
    def __init__(self, stream: RequestStream):
        self.stream = stream
        self.done = False

    def wait(self) -> None:
        while not self.done:
            self.stream.poll(block=True)

    def query(self) -> bool:
        return self.done


class SharedHeap:
    """This process's buffers in shared memory: one MPI-3 shared-memory window on the
    node (collective over the node's ranks, made once per runner), of which every rank
    owns one segment. A rank bump-allocates its buffers in its own segment (arguments in
    one region, reset by each ``bind``; ``rt.alloc`` buffers after it) and maps its node
    peers' segments, so that a buffer is named across processes by (node rank, offset,
    shape, strides, dtype)."""

    ALIGN = 64

    def __init__(self, world, args_bytes: int, allocs_bytes: int):
        MPI = _mpi()
        self.node = world.Split_type(MPI.COMM_TYPE_SHARED)
        self.args_bytes = self._align(args_bytes)
        size = self.args_bytes + self._align(allocs_bytes)
        self.win = MPI.Win.Allocate_shared(size, 1, comm=self.node)
        self.segments = []
        for r in range(self.node.Get_size()):
            buf, _ = self.win.Shared_query(r)
            self.segments.append(np.frombuffer(buf, dtype=np.uint8))
        self.mine = self.segments[self.node.Get_rank()]
        self.base = self.mine.__array_interface__["data"][0] if self.mine.size else 0
        leader = self.node.bcast(world.Get_rank(), root=0)
        # world rank -> (node, rank on the node)
        self.where: list[tuple[int, int]] = world.allgather((leader, self.node.Get_rank()))
        self.world_group = world.Get_group()
        self.node_id = leader
        self.top = {"args": 0, "allocs": self.args_bytes}
        self.limit = {"args": self.args_bytes, "allocs": size}

    @classmethod
    def _align(cls, n: int) -> int:
        return -(-n // cls.ALIGN) * cls.ALIGN

    @classmethod
    def footprint(cls, nbytes: int) -> int:
        """Bytes a buffer of ``nbytes`` takes in the segment: aligned, and a large one
        followed by ``buffers.STAGGER`` bytes, so that consecutive large buffers start at
        different offsets within a page (``buffers.new_buffer``)."""
        return cls._align(max(nbytes, 1)) + (STAGGER if nbytes >= STAGGER_FROM else 0)

    def free(self) -> None:
        """Release the window (collective over the node; no buffer of it may be used
        after)."""
        self.segments, self.mine = [], np.zeros(0, np.uint8)
        self.win.Free()
        self.node.Free()

    def reset_args(self) -> None:
        self.top["args"] = 0

    def alloc(self, shape, dtype: np.dtype, region: str = "allocs") -> np.ndarray | None:
        """A zeroed array in this rank's segment, or None when the region is full."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        start = self.top[region]
        if start + nbytes > self.limit[region]:
            return None
        self.top[region] = start + self.footprint(nbytes)
        a = np.ndarray(tuple(shape), dtype, buffer=self.mine, offset=start)
        a[...] = 0
        return a

    def locate(self, a: Any) -> tuple | None:
        """How peers find ``a``: (offset, shape, strides, dtype) in this rank's segment,
        or None when it does not lie there."""
        if not isinstance(a, np.ndarray) or not self.mine.size:
            return None
        start = a.__array_interface__["data"][0] - self.base
        span = sum((n - 1) * st for n, st in zip(a.shape, a.strides) if n) + a.itemsize
        if start < 0 or any(st < 0 for st in a.strides) or start + span > self.mine.size:
            return None
        return (start, a.shape, a.strides, a.dtype)  # the dtype itself: bf16 (ml_dtypes) has no str of its own

    def view(self, node_rank: int, where: tuple) -> np.ndarray:
        offset, shape, strides, dtype = where
        return np.ndarray(shape, np.dtype(dtype), buffer=self.segments[node_rank], offset=offset, strides=strides)

    def node_ranks(self, comm) -> list[int] | None:
        """The node ranks of the members of ``comm`` (in group order), or None when
        they are not all on this node."""
        members = comm.Get_group().Translate_ranks(list(range(comm.Get_size())), self.world_group)
        places = [self.where[r] for r in members]
        if any(node != self.node_id for node, _ in places):
            return None
        return [nr for _, nr in places]


class MpiComm:
    """One rank's communicator over an ``MPI.Comm`` (see the module doc); with a
    ``SharedHeap`` whose node holds the whole group it also shares buffers."""

    def __init__(self, comm, heap: SharedHeap | None = None):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.heap: SharedHeap | None = None
        self.node_ranks: list[int] | None = None
        if heap is not None:
            self.attach(heap)

    def attach(self, heap: SharedHeap) -> None:
        """Share buffers through ``heap`` (when the whole group is on its node)."""
        self.heap = heap
        self.node_ranks = heap.node_ranks(self.comm)

    def split(self, color: int, key: int) -> MpiComm:
        with _waiting(self.size):
            return MpiComm(self.comm.Split(color, key), self.heap)

    def abort(self, message: str) -> None:
        """End the job: ``message`` on standard error, then ``MPI_Abort`` (mpiexec ends
        every rank; ``comm.py``)."""
        abort_job(message)

    # ------------------------------------------------------------------ shared buffers
    def peer_buffers(self, arrays: list[np.ndarray]) -> list[list[np.ndarray]] | None:
        """Every group rank's ``arrays`` as views of their shared-memory segments
        (collective: it synchronises the group), or None on every rank when some rank's
        buffers are not in shared memory or the group spans nodes."""
        if self.node_ranks is None:
            return None
        assert self.heap is not None
        heap = self.heap
        with _waiting(self.size):
            everyone = self.comm.allgather([heap.locate(a) for a in arrays])
        if any(w is None for ws in everyone for w in ws):
            return None
        return [[heap.view(self.node_ranks[r], w) for w in ws] for r, ws in enumerate(everyone)]

    def peer_barrier(self) -> None:
        with _waiting(self.size):
            self.comm.Barrier()

    def tile_flags(self, count: int):
        """``count`` per-tile ready flags per rank in shared memory (``tiles.SharedFlags``;
        collective), or None on every rank when they cannot be shared."""
        from distir.runtime.tiles import SharedFlags

        if self.node_ranks is None:
            return None
        assert self.heap is not None
        mine = self.heap.alloc((count,), np.dtype(np.int64))
        rows = self.peer_buffers([mine if mine is not None else np.zeros(0)])
        if rows is None or mine is None:
            return None
        return SharedFlags(mine, [r[0] for r in rows])

    # Each call runs blocking on a SyncStream, and is queued on a RequestStream, where
    # its buffers are prepared only when the stream reaches it (after the work before).
    def _do(self, stream, prepare, blocking, nonblocking) -> None:
        """``prepare()`` -> (args, post, keep); ``blocking(*args)`` runs the call,
        ``nonblocking(*args)`` starts it and returns a request."""

        def start():
            args, post, keep = prepare()
            return [nonblocking(*args)], post, keep

        if isinstance(stream, RequestStream):
            _issued(self.size)
            stream.issue(start)
            return
        args, post, _ = prepare()
        with _waiting(self.size):
            blocking(*args)
        if post is not None:
            post()

    def _reduction_buffers(self, send: np.ndarray, recv: np.ndarray, op: str):
        """(send, recv, post) with half types widened to f32 and avg finished after."""
        n = self.size
        if is_half(recv.dtype):
            s32, r32 = send.astype(_F32), np.empty(recv.shape, _F32)

            def post():
                if op == "avg":
                    _finish_avg(r32, n)
                recv[...] = r32.astype(recv.dtype)

            return s32, r32, post
        post = (lambda: _finish_avg(recv, n)) if op == "avg" else None
        return send, recv, post

    # ---- scattered tensors: one call per contiguous piece (per-tensor views), run in
    # stream order; pieces are cut where the buffers that all ranks share are cut.
    def _per_piece(self, stream, fn) -> None:
        if isinstance(stream, RequestStream):
            _issued(self.size)
            stream.submit(fn)
        else:
            with _waiting(self.size):
                fn()

    def _reduce_piece(self, send: np.ndarray, op: str, root: int | None) -> np.ndarray:
        out = np.empty_like(send)
        s, r, post = self._reduction_buffers(send, out, op)
        if root is None:
            self.comm.Allreduce(s, r, _op(op))
        else:
            self.comm.Reduce(s, r, _op(op), root)
        if post is not None and (root is None or root == self.rank):
            post()
        return out

    def _scattered_reduce(self, send, recv, count, op, root, blocks: bool) -> None:
        n = self.size if blocks else 1
        for j in range(n):
            lo = j * count if blocks else 0
            target = root if root is not None else (j if blocks else None)
            for a, b, (s,) in segments([send.reshape(-1)], lo, lo + count):
                out = self._reduce_piece(np.ascontiguousarray(s), op, target)
                if target is None or target == self.rank:
                    copy_into(recv.reshape(-1)[a - lo : b - lo], out)

    def _scattered_bcast(self, full, count, root_of_block, blocks: int) -> None:
        for j in range(blocks):
            root = root_of_block(j)
            for _, _, (v,) in segments([full.reshape(-1)], j * count, (j + 1) * count):
                self.comm.Bcast(_raw(v), root)

    def all_reduce(self, send, recv, count, op, stream) -> None:
        if is_scattered(send) or is_scattered(recv):
            self._per_piece(stream, lambda: self._scattered_reduce(send, recv, count, op, None, False))
            return

        def prepare():
            s, r, post = self._reduction_buffers(send.reshape(-1)[:count], recv.reshape(-1)[:count], op)
            return (_mpi().IN_PLACE if _same(s, r) else s, r), post, (s, r)

        self._do(stream, prepare, lambda sb, r: self.comm.Allreduce(sb, r, _op(op)), lambda sb, r: self.comm.Iallreduce(sb, r, _op(op)))

    def reduce_scatter(self, send, recv, count, op, stream) -> None:
        if is_scattered(send) or is_scattered(recv):
            self._per_piece(stream, lambda: self._scattered_reduce(send, recv, count, op, None, True))
            return

        def prepare():
            flat = send.reshape(-1)[: count * self.size]
            if np.shares_memory(flat, recv):
                flat = flat.copy()
            s, r, post = self._reduction_buffers(flat, recv.reshape(-1)[:count], op)
            return (s, r), post, (s, r)

        self._do(
            stream,
            prepare,
            lambda s, r: self.comm.Reduce_scatter_block(s, r, _op(op)),
            lambda s, r: self.comm.Ireduce_scatter_block(s, r, _op(op)),
        )

    def all_gather(self, send, recv, count, stream, in_place=False) -> None:
        if is_scattered(send) or is_scattered(recv):

            def run():
                if not in_place:
                    copy_into(recv.reshape(-1)[self.rank * count : (self.rank + 1) * count], send.reshape(-1)[:count])
                self._scattered_bcast(recv, count, lambda j: j, self.size)

            self._per_piece(stream, run)
            return

        def prepare():
            s, r = _raw(send.reshape(-1)[:count]), _raw(recv.reshape(-1)[: count * self.size])
            return (_mpi().IN_PLACE if in_place else s, r), None, (s, r)

        self._do(stream, prepare, lambda sb, r: self.comm.Allgather(sb, r), lambda sb, r: self.comm.Iallgather(sb, r))

    def reduce(self, send, recv, count, op, root, stream) -> None:
        if is_scattered(send) or is_scattered(recv):
            self._per_piece(stream, lambda: self._scattered_reduce(send, recv, count, op, root, False))
            return

        def prepare():
            s, r, post = self._reduction_buffers(send.reshape(-1)[:count], recv.reshape(-1)[:count], op)
            sb = _mpi().IN_PLACE if self.rank == root and _same(s, r) else s
            return (sb, r), (post if self.rank == root else None), (s, r)

        self._do(stream, prepare, lambda sb, r: self.comm.Reduce(sb, r, _op(op), root), lambda sb, r: self.comm.Ireduce(sb, r, _op(op), root))

    def broadcast(self, send, recv, count, root, stream) -> None:
        if is_scattered(send) or is_scattered(recv):

            def run():
                if self.rank == root:
                    copy_into(recv.reshape(-1)[:count], send.reshape(-1)[:count])
                self._scattered_bcast(recv, count, lambda j: root, 1)

            self._per_piece(stream, run)
            return

        def prepare():
            r = recv.reshape(-1)[:count]
            if self.rank == root and not _same(send.reshape(-1), r):
                r[...] = send.reshape(-1)[:count]
            rb = _raw(r)
            return (rb,), None, (rb,)

        self._do(stream, prepare, lambda rb: self.comm.Bcast(rb, root), lambda rb: self.comm.Ibcast(rb, root))

    def group(self, calls: list[P2P], stream) -> None:
        if any(is_scattered(c.buffer) for c in calls):
            # Point-to-point messages of scattered buffers go through contiguous copies.
            def run():
                tmps = [np.empty(c.count, c.buffer.dtype) for c in calls]
                for c, t in zip(calls, tmps):
                    if c.kind == "send":
                        copy_into(t, c.buffer.reshape(-1)[: c.count])
                reqs = [
                    self.comm.Isend(_raw(t), c.peer, tag=7) if c.kind == "send" else self.comm.Irecv(_raw(t), c.peer, tag=7)
                    for c, t in zip(calls, tmps)
                ]
                _mpi().Request.Waitall(reqs)
                for c, t in zip(calls, tmps):
                    if c.kind == "recv":
                        copy_into(c.buffer.reshape(-1)[: c.count], t)

            self._per_piece(stream, run)
            return

        def start():
            bufs = [_raw(c.buffer.reshape(-1)[: c.count]) for c in calls]
            reqs = [
                self.comm.Isend(b, c.peer, tag=7) if c.kind == "send" else self.comm.Irecv(b, c.peer, tag=7)
                for c, b in zip(calls, bufs)
            ]
            return reqs, None, tuple(bufs)

        if isinstance(stream, RequestStream):
            _issued(self.size)
            stream.issue(start)
        else:
            with _waiting(self.size):
                _mpi().Request.Waitall(start()[0])


class MpiDevice(HostDevice):
    """The host device with MPI request streams for streams other than 0, and buffers
    in the node's shared-memory window when there is one."""

    def __init__(self, heap: SharedHeap | None = None):
        super().__init__()
        self.heap = heap

    def stream(self, index: int):
        return SyncStream(0) if index == 0 else RequestStream(index)

    def alloc(self, shape, dtype: np.dtype) -> np.ndarray:
        a = self.heap.alloc(shape, dtype) if self.heap is not None else None
        return a if a is not None else np.zeros(shape, dtype=dtype)

    def from_host(self, a: np.ndarray) -> np.ndarray:
        if self.heap is None or not isinstance(a, np.ndarray):
            return a
        b = self.heap.alloc(a.shape, a.dtype, "args")
        if b is None:
            return a
        b[...] = a
        return b


class PollingExecutor(RankExecutor):
    """Polls the MPI request streams between ops, so that non-blocking collectives of
    ``coll.overlap`` progress while stream 0 computes. ``running`` is the stack of ops
    being executed (innermost last), for the watchdog's report."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.running: list = []

    def block(self, block):
        from xdsl.dialects import func, scf

        streams = self.streams
        running = self.running
        for op in block.ops:
            if isinstance(op, (func.ReturnOp, scf.YieldOp)):
                return []  # the function's results: ``RankExecutor.run``
            running.append(op)
            self.block_op(op)
            for s in streams.values():
                s.poll()
            running.pop()
        return []

    def where(self) -> str:
        """The op this rank executes (or waits in) now, for diagnostics."""
        if not self.running:
            return "no op (before or after the program)"
        op = self.running[-1]
        body = self.program.func.body.block
        top = self.running[0]
        index = next((i for i, o in enumerate(body.ops) if o is top), -1)
        names = ", ".join(f"%{r.name_hint}" for r in op.results if r.name_hint)
        return f"'{op.name}'{' ' + names if names else ''} (op {index} of @{self.program.func.sym_name.data})"


# ======================================================================================
# A job's ranks that leave: the guard of a training script's MPI job
# ======================================================================================
#
# A script run under mpiexec (a training loop calling distir's steps) hangs when one
# rank leaves while its peers wait for it in a collective: an exception escapes the
# script on one rank, or one rank returns (sys.exit(0)) early. Its process then waits
# in MPI_Finalize, its peers in the collective, and mpiexec waits for both. The guard
# (``guard_job``, installed by ``step.mpi_comm``) ends such a job with one message:
#
#   * every rank marks, in a small shared-memory window of its node, whether it waits
#     in a collective of the whole job and how many it has issued (``_waiting``, around
#     each blocking MPI call of ``MpiComm``);
#   * a rank that leaves (Python's exit: the end of the script, sys.exit, an exception
#     that escaped: its message is kept by ``sys.excepthook``) marks that it left, then
#     waits, as MPI_Finalize would, until every rank of its node has left too. If it
#     sees a peer waiting in a collective it never issued, that peer would wait
#     forever: it ends the job (``abort_job``) with a message naming itself and why;
#   * a rank that enters a collective after a peer has left ends the job the same way.
#
# Only ranks of one node see each other's marks; a job over several nodes keeps
# MPI's own behaviour across nodes. A rank killed (a signal) is mpiexec's to report:
# it ends every other rank at once.

_GUARD: JobGuard | None = None


class JobGuard:
    """This process's part of the guard (the comment above). ``WORDS``: per rank, waiting
    (0/1), collectives of the job issued, left (0/1), ending the job (0/1); then
    ``REASON`` bytes saying why it left."""

    WORDS = 4
    REASON = 256

    def __init__(self, world):
        import atexit

        MPI = _mpi()
        self.world = world
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.node = world.Split_type(MPI.COMM_TYPE_SHARED)
        row = 8 * self.WORDS + self.REASON
        self.win = MPI.Win.Allocate_shared(row, 1, comm=self.node)
        rows = [np.frombuffer(self.win.Shared_query(r)[0], np.uint8)[:row] for r in range(self.node.Get_size())]
        self.words = [r[: 8 * self.WORDS].view(np.int64) for r in rows]
        self.reasons = [r[8 * self.WORDS :] for r in rows]
        self.node_rank = self.node.Get_rank()
        self.mine = self.words[self.node_rank]
        self.mine[:] = 0
        self.ranks = self.node.allgather(self.rank)
        """The world rank of each rank of the node."""
        self.why = "its script returned or called sys.exit"
        unlink_mpich_segments(self.node)  # a barrier: every row is zeroed before use
        self.previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self.leave)

    def _excepthook(self, kind, value, tb) -> None:
        self.why = f"it raised {kind.__name__}: {value}"
        self.previous_hook(kind, value, tb)

    def _reason(self, r: int) -> str:
        return bytes(self.reasons[r]).rstrip(b"\0").decode(errors="replace")

    def enter(self, issue: bool) -> None:
        me = self.mine
        if issue:
            me[1] += 1
        me[0] = 1
        for r, w in enumerate(self.words):
            if w[2]:
                self.end_job(
                    f"rank {self.ranks[r]} left the job ({self._reason(r)}) while rank {self.rank} still calls distir's collectives: "
                    "every rank of the job must make the same calls; the job stops"
                )

    def end_job(self, message: str) -> None:
        """End the job with ``message``, printed once: two ranks may find the same
        fault at once (one leaving, one entering); the lowest of those that mark
        themselves ending prints it and aborts, the others wait to be ended with it."""
        import time

        me = self.node_rank
        if not any(w[3] for r, w in enumerate(self.words) if r != me):
            self.mine[3] = 1
            time.sleep(0.05)  # every mark made by now is seen
            if not any(w[3] for r, w in enumerate(self.words) if r < me):
                abort_job(message)
        time.sleep(10)  # another rank ends the job (MPI_Abort ends this process too)
        abort_job(message, quiet=True)

    def leave(self) -> None:
        """Python's exit on this rank (atexit): wait for the node's other ranks to leave,
        or end the job when one of them waits for this one (the comment above)."""
        import time

        if _mpi().Is_finalized():
            return
        me = self.mine
        why = self.why.encode()[: self.REASON - 1]
        self.reasons[self.node_rank][: len(why)] = np.frombuffer(why, np.uint8)
        me[0] = 0
        me[2] = 1
        while True:
            if all(w[2] for w in self.words):
                return
            for r, w in enumerate(self.words):
                if not w[2] and (w[0] and w[1] > me[1] or w[3]):
                    self.end_job(
                        f"rank {self.rank} left the job ({self.why}) while rank {self.ranks[r]} waits for it in a collective: "
                        "every rank of the job must make the same calls; the job stops"
                    )
            time.sleep(0.005)


class _Mark:
    """``with``: this rank waits in a collective (``JobGuard``)."""

    __slots__ = ("guard", "issue")

    def __init__(self, guard: JobGuard, issue: bool):
        self.guard, self.issue = guard, issue

    def __enter__(self) -> None:
        self.guard.enter(self.issue)

    def __exit__(self, *exc) -> None:
        self.guard.mine[0] = 0


class _NoMark:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


_NO_MARK = _NoMark()


def _waiting(size: int, issue: bool = True):
    """The mark around a blocking call on a communicator of ``size`` ranks (``issue``:
    it is a new collective, not the wait for one issued before): counted when it spans
    the job, and only once a guard is installed."""
    g = _GUARD
    if g is None or (issue and size != g.size):
        return _NO_MARK
    return _Mark(g, issue)


def _issued(size: int) -> None:
    """A collective of the job issued without waiting (a request stream's)."""
    g = _GUARD
    if g is not None and size == g.size:
        g.mine[1] += 1


def guard_job(world=None) -> JobGuard | None:
    """Install this process's ``JobGuard`` over ``world`` (default ``COMM_WORLD``) once;
    collective the first time. Nothing for a job of one rank."""
    global _GUARD
    MPI = _mpi()
    world = world if world is not None else MPI.COMM_WORLD
    if _GUARD is None and world.Get_size() > 1:
        _GUARD = JobGuard(world)
    return _GUARD


def abort_job(message: str, code: int = 1, quiet: bool = False) -> None:
    """End the whole MPI job now: ``distir: message`` on standard error (unless
    ``quiet``), then ``MPI_Abort`` (mpiexec ends every rank)."""
    try:
        sys.stdout.flush()
        if not quiet:
            print(f"distir: {message}", file=sys.stderr, flush=True)
            # mpiexec forwards a rank's standard error through its proxy; MPI_Abort tears
            # the proxies down, which on a loaded machine lost the message still in the
            # pipe (the job ended with exit 1 and an empty standard error)
            import time

            time.sleep(0.3)
    finally:
        _mpi().COMM_WORLD.Abort(code)


# ======================================================================================
# The backend
# ======================================================================================


def _shared_heap(world, program: LoweredProgram) -> SharedHeap | None:
    """The node's shared-memory window for ``program``'s buffers; None on every rank
    when one rank could not make it (the ranks then exchange messages only)."""
    MPI = _mpi()
    args, allocs = shared_bytes(program)
    try:
        heap: SharedHeap | None = SharedHeap(world, args, allocs)
        ok = 1
    except MPI.Exception:
        heap, ok = None, 0
    if world.allreduce(ok, op=MPI.MIN) == 0:
        return None
    assert heap is not None
    unlink_mpich_segments(heap.node)
    return heap


def unlink_mpich_segments(node) -> None:
    """Remove the names of the ``/dev/shm`` files MPICH made for this node's ranks at
    ``MPI_Init`` (collective over ``node``, the ranks of one node: every one of them has
    mapped them by now). The memory stays mapped until the last rank ends, as the
    segments of ``shm.py``; MPICH removes the names at ``MPI_Finalize`` only, so a job
    whose ranks were killed left them behind (2 MiB each)."""
    node.Barrier()
    if node.Get_rank() != 0:
        return
    try:
        with open("/proc/self/maps") as f:
            names = {line.split()[-1] for line in f if "/dev/shm/mpich_shm_" in line and not line.rstrip().endswith("(deleted)")}
    except OSError:
        return
    for name in names:
        try:
            os.unlink(name)
        except OSError:
            pass


def forget_mpich_segments(world=None) -> None:
    """``unlink_mpich_segments`` for the ranks of ``world`` (default ``COMM_WORLD``),
    node by node; collective. Called as early as a job's ranks can: the start of a
    ``distir-run`` under mpiexec, of the jobs distir starts itself, of a training
    script's guard."""
    MPI = _mpi()
    node = (world if world is not None else MPI.COMM_WORLD).Split_type(MPI.COMM_TYPE_SHARED)
    try:
        unlink_mpich_segments(node)
    finally:
        node.Free()


def mpiexec_path() -> str:
    """The ``mpiexec`` of the ``mpich`` wheel next to this Python, or one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise InputRejected("the mpi backend needs mpiexec: install the 'mpich' wheel (pip install mpich)")
    return found


def shared_bytes(program: LoweredProgram) -> tuple[int, int]:
    """Bytes of this rank's (argument, ``rt.alloc``) buffers, with alignment and the
    ready flags of the fused tile operators: the size of its shared-memory segment."""
    from xdsl.dialects.builtin import MemRefType

    from distir.dialects import rt
    from distir.runtime.values import numpy_dtype

    def size(t) -> int:
        if not isinstance(t, MemRefType):
            return 0
        n = int(np.prod(t.get_shape(), dtype=np.int64)) * numpy_dtype(t.element_type).itemsize
        return SharedHeap.footprint(n)

    args = sum(size(t) for t in program.func.function_type.inputs.data)
    allocs = 0
    for op in program.func.walk():
        if isinstance(op, rt.AllocOp):
            allocs += size(op.result.type)
        elif isinstance(op, rt.TiledCollectiveOp):
            n = op.ranks()
            allocs += SharedHeap.footprint(2 * n * op.option("tiles") * 8) + SharedHeap.ALIGN
    return args, allocs + SharedHeap.ALIGN


class MpiRunner:
    """This process's rank of a lowered program (the process count of ``comm``, default
    ``MPI.COMM_WORLD``, must be the rank count). With ``shared_memory`` (the default)
    the buffers live in the node's MPI-3 shared-memory window (``SharedHeap``) and ranks
    of one node take the zero-copy paths; without it every exchange is a message, as
    between nodes."""

    def __init__(self, program: LoweredProgram, shared_memory: bool = True, comm: Any = None):
        MPI = _mpi()
        self.world = MPI.COMM_WORLD if comm is None else comm
        if self.world.Get_size() != program.ranks:
            raise InputRejected(
                f"the mpi backend runs one process per rank: start {program.ranks} processes "
                f"(mpiexec -n {program.ranks}), not {self.world.Get_size()}"
            )
        self.program = program
        self.rank = self.world.Get_rank()
        self.shared_memory = shared_memory
        self.heap: SharedHeap | None = None
        self.started = False
        self.device = MpiDevice()
        self.comm = MpiComm(self.world)
        self.executor = PollingExecutor(program, self.rank, self.comm, self.device)
        self.args: list[Any] = []

    def bind(self, inputs: Mapping[str, np.ndarray], pieces: Mapping[str, Any] | None = None) -> None:
        """This rank's argument buffers (no communication: before the first step they
        are private, and move into the shared-memory window when it is made)."""
        if self.heap is not None:
            self.heap.reset_args()
        self.args = self.program.rank_args(inputs, self.rank, self.device, pieces)

    def start(self) -> None:
        """Collective, once, at the first step (after the ranks' start-up agreement):
        make the node's shared-memory window and move the bound arguments into it, and
        give each rank its share of the node's cores for BLAS (OpenBLAS threads of
        several ranks would fight over the cores, as the local backend's rank threads
        would)."""
        if self.started:
            return
        self.started = True
        if self.shared_memory:
            self.heap = _shared_heap(self.world, self.program)
        if self.heap is not None:
            self.device.heap = self.heap
            self.comm.attach(self.heap)
            self.args = self._into_heap(self.args)
        from distir.runtime.host import limit_blas_threads

        on_node = self.heap.node.Get_size() if self.heap is not None else self.world.Get_size()
        limit_blas_threads(max(1, (os.cpu_count() or 1) // on_node))

    def _into_heap(self, args: list[Any]) -> list[Any]:
        """The bound arguments moved into the shared-memory window. An arena
        (``lower-buckets``: the members' buffers side by side, an extra trailing argument)
        moves as one buffer and its members become views of the moved arena again, so
        that what the program writes through the arena is what the members return. A
        scattered arena (its pieces are the members' own buffers) stays where it is, with
        its members."""
        arenas = self.program.arenas()
        first = len(args) - len(arenas)
        out = list(args)
        done: set[int] = set()
        for k, members in enumerate(arenas):
            arena = args[first + k]
            done.update(members)
            done.add(first + k)
            if not isinstance(arena, np.ndarray):
                continue
            moved = self.device.from_host(arena)
            flat = moved.reshape(-1)
            base = arena.ctypes.data
            for i in members:
                a = args[i]
                at = (a.ctypes.data - base) // a.itemsize
                out[i] = flat[at : at + a.size].reshape(a.shape)
            out[first + k] = moved
        for i, a in enumerate(args):
            if i not in done and isinstance(a, np.ndarray):
                out[i] = self.device.from_host(a)
        return out

    def step(self) -> list[Any]:
        self.start()
        try:
            out = self.executor.run(self.args)
            for s in self.executor.streams.values():
                s.synchronize()
        except (InputRejected, ExecutionFailed):
            raise
        except Exception as e:  # noqa: BLE001 - a peer may be blocked: mpiexec ends the job when we exit
            raise ExecutionFailed(f"rank {self.rank}: {type(e).__name__}: {e}") from e
        return out

    def close(self) -> None:
        """Release the shared-memory window (collective: every rank closes its runner)."""
        if self.heap is not None:
            self.executor.env.clear()
            self.executor.persistent.clear()
            self.args = []
            self.heap.free()
            self.heap = None

    def outputs(self, results: list[Any]) -> list[np.ndarray] | None:
        """The logical outputs on rank 0 (None elsewhere)."""
        host = [np.asarray(r) if isinstance(r, np.ndarray) else r for r in results]
        everyone = self.world.gather(host, root=0)
        if self.rank != 0:
            return None
        return self.program.collect(everyone, np.asarray)


class MpiBackend:
    """``mpi``: one process per rank (see the module doc). ``scatter`` names arguments
    given as lists of pieces (``scattered.py``).

    Under ``mpiexec``, every rank first does all its local work (lowering, inputs,
    buffers: ``prepare``), then the ranks agree (``agree``, one small collective)
    before the first data collective, so that an error on one rank stops every rank."""

    name = "mpi"
    supports_scatter = True

    def __init__(self) -> None:
        self.is_output_rank = True

    @staticmethod
    def launched_ranks() -> int | None:
        """The process count when started by ``mpiexec -n N`` (N > 1), else None."""
        size = _mpi().COMM_WORLD.Get_size()
        return size if size > 1 else None

    def prepare(self, module: ModuleOp, func: str, inputs: Mapping[str, np.ndarray], ranks: int, seed: int, scatter: Sequence[str] = ()) -> PreparedRun:
        """This rank's part of a run, ready to execute: no communication yet."""
        from distir.runtime import scattered

        program = LoweredProgram.build(module, func, ranks, scattered=scatter)
        pieces: dict = {}
        if scatter:
            full, pieces = scattered.prepare(program, inputs, scatter, seed)
        else:
            full = program.prepare_inputs(inputs, seed)
        runner = MpiRunner(program)
        runner.bind(full, pieces)
        return PreparedRun(self, program, runner, pieces, bool(scatter))

    def run(self, module: ModuleOp, func: str, inputs: Mapping[str, np.ndarray], ranks: int, seed: int, scatter: Sequence[str] = ()) -> list[np.ndarray]:
        MPI = _mpi()
        if MPI.COMM_WORLD.Get_size() == 1 and ranks > 1:
            return spawn(module, func, inputs, ranks, seed, scatter)
        prepared: PreparedRun | None = None
        error: BaseException | None = None
        try:
            prepared = self.prepare(module, func, inputs, ranks, seed, scatter)
        except Exception as e:  # noqa: BLE001 - every rank must reach the agreement
            error = e
        fingerprint = {"program": program_digest(str(module)), "function": f"@{func}", "ranks": str(ranks), "seed": str(seed)}
        fingerprint.update(inputs_fingerprint(inputs))
        outcome = agree(MPI.COMM_WORLD, fingerprint, failure_of(error) if error is not None else None)
        if not outcome.ok:
            if error is not None and outcome.shared:
                raise error  # the same error on every rank: raise it as it is
            raise Disagreement(outcome)
        assert prepared is not None
        return prepared.execute()


class PreparedRun:
    """A rank's prepared run (``MpiBackend.prepare``); ``execute`` runs it and returns
    the logical outputs (broadcast from rank 0 to every rank)."""

    def __init__(self, backend: MpiBackend, program: LoweredProgram, runner: MpiRunner, pieces: dict, scatter: bool):
        self.backend, self.program, self.runner, self.pieces, self.scatter = backend, program, runner, pieces, scatter

    def where(self) -> str:
        return self.runner.executor.where()

    def execute(self) -> list[np.ndarray]:
        """Run; rank 0 assembles the outputs, checking that replicas agree, and every
        rank gets them, or the same ``ResultsDiffer`` (the peers wait for rank 0's
        verdict: were it rank 0's alone, they would wait forever)."""
        from distir.runtime import scattered

        runner = self.runner
        results = runner.step()
        verdict: tuple[Any, ResultsDiffer | None]
        try:
            verdict = (runner.outputs(results), None)
        except ResultsDiffer as e:
            verdict = (None, e)
        self.backend.is_output_rank = runner.rank == 0
        outs, differ = runner.world.bcast(verdict, root=0)
        if differ is not None:
            raise differ
        return scattered.as_pieces(self.program, outs, self.pieces) if self.scatter else outs


# ======================================================================================
# Start-up agreement, watchdog, stopping every rank
# ======================================================================================
#
# Under mpiexec every process runs the same distir-run; nothing guarantees that they
# read the same program, function and inputs, or that none of them fails before the
# first collective (a missing npz on one node). A rank that fails alone while its peers
# wait in a collective would hang the job (an exiting MPI process waits in
# MPI_Finalize for its peers). So every rank reaches `agree` exactly once, before any
# data collective, with either its error or a fingerprint of its run:
#
#   1. Iallgather of (status, digest of the fingerprint), polled until done or until
#      the deadline of --timeout;
#   2. only when a status is not ok or the digests differ: allgather of (status,
#      message, fingerprint), from which every rank builds the same diagnostic
#      (`Agreement`); rank 0 prints it, every rank exits 1 (3 for internal errors).
#
# After the agreement, a failure on one rank is reported by that rank, which then ends
# its process without MPI_Finalize (`stop_job`): mpiexec then ends every rank at once.
# A rank that dies (killed, crashed) makes mpiexec end the job and print its own
# message; the surviving ranks are killed too and cannot print anything.

OK, REJECTED, FAILED = 0, 1, 3


def checksum(a: np.ndarray) -> str:
    """A short checksum of an array's bytes."""
    import hashlib

    data = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def program_digest(text: str | bytes) -> str:
    import hashlib

    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


def inputs_fingerprint(arrays: Mapping[str, Any], checksums: bool = True) -> dict[str, str]:
    """``{"input NAME": "float32[64x8] checksum 1a2b..."}`` for each array (scattered
    inputs: each piece)."""
    out = {}
    for name in sorted(arrays):
        values = arrays[name]
        parts = values if isinstance(values, (list, tuple)) else [values]
        descr = []
        for v in parts:
            a = np.asarray(v)
            d = f"{a.dtype.name}[{'x'.join(map(str, a.shape))}]"
            descr.append(f"{d} checksum {checksum(a)}" if checksums else d)
        out[f"input {name}"] = "; ".join(descr)
    return out


class Agreement:
    """The ranks' verdict on a run: ``ok``, else the exit ``code``, the diagnostic
    ``message`` (the same on every rank), ``report`` (whether this rank prints it), the
    failing ranks and ``shared`` (every rank failed with this same message)."""

    def __init__(self, ok: bool, code: int = 0, message: str = "", report: bool = False, failed_ranks: list[int] | None = None, shared: bool = False):
        self.ok, self.code, self.message, self.report = ok, code, message, report
        self.failed_ranks = failed_ranks or []
        self.shared = shared


class StartupStalled(RuntimeError):
    """Not every rank reached the start-up agreement before the deadline."""


class Disagreement(InputRejected):
    """The ranks' agreement failed (``Agreement``): ``code`` is the exit code, ``report``
    says whether this rank prints the message (rank 0 does)."""

    def __init__(self, agreement: Agreement):
        super().__init__(agreement.message)
        self.code, self.report = agreement.code, agreement.report


def failure_of(error: BaseException) -> tuple[int, str]:
    """(exit code, message) of an error a rank hit before the agreement."""
    if isinstance(error, InputRejected):
        return REJECTED, str(error)
    if isinstance(error, ExecutionFailed):
        return FAILED, str(error)
    return FAILED, f"internal error: {type(error).__name__}: {error} (a bug in distir)"


def agree(comm, fingerprint: Mapping[str, str] | None, failure: tuple[int, str] | None = None, deadline: float | None = None) -> Agreement:
    """Every rank calls this once, before the first data collective: with its failure
    (exit code, message; ``fingerprint`` may then be None) or with the fingerprint of
    its run. Returns the same verdict on every rank (see the comment above).
    ``deadline`` (``time.monotonic``) bounds the wait for the other ranks
    (``StartupStalled``)."""
    import hashlib
    import time

    rank, size = comm.Get_rank(), comm.Get_size()
    status, message = failure if failure is not None else (OK, "")
    fp = dict(fingerprint or {})
    digest = hashlib.blake2b(json.dumps(sorted(fp.items())).encode(), digest_size=16).digest()
    mine = np.frombuffer(bytes([status]) + digest, dtype=np.uint8).copy()
    everyone = np.zeros((size, mine.size), dtype=np.uint8)
    req = comm.Iallgather(mine, everyone)
    pause = 0.0005
    while not req.Test():
        if deadline is not None and time.monotonic() > deadline:
            raise StartupStalled("waiting in the start-up agreement: not every rank has reached it")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    statuses = [int(s) for s in everyone[:, 0]]
    if all(s == OK for s in statuses) and all((row == everyone[0]).all() for row in everyone[1:]):
        return Agreement(True)
    info = comm.allgather((status, message, fp))
    return _verdict(rank, info)


def _strip_tool(msg: str) -> str:
    return msg.removeprefix("distir-run: ")


def _verdict(rank: int, info: Sequence[tuple[int, str, Mapping[str, str]]]) -> Agreement:
    size = len(info)
    failed = [r for r, (st, _, _) in enumerate(info) if st != OK]
    if failed:
        code = REJECTED if any(info[r][0] == REJECTED for r in failed) else info[failed[0]][0]
        messages = {info[r][1] for r in failed}
        if len(failed) == size and len(messages) == 1:
            return Agreement(False, code, info[0][1], report=rank == 0, failed_ranks=failed, shared=True)
        lines = []
        by_message: dict[str, list[int]] = {}
        for r in failed:
            by_message.setdefault(info[r][1], []).append(r)
        for msg, ranks in by_message.items():
            who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
            body = _strip_tool(msg)
            sep = ":\n" if "\n" in body else ": "
            lines.append(f"distir-run: {who} rejected the run{sep}{body}")
        ok = [r for r in range(size) if r not in failed]
        lines.append(f"distir-run: every rank stops ({len(ok)} of {size} were ready)")
        return Agreement(False, code, "\n".join(lines), report=rank == 0, failed_ranks=failed)
    # Every rank is ready, but they do not run the same thing.
    groups: dict[str, list[int]] = {}
    for r, (_, _, fp) in enumerate(info):
        groups.setdefault(json.dumps(sorted(fp.items())), []).append(r)
    reference = info[0][2]
    lines = ["distir-run: the ranks disagree on what to run; every rank stops:"]
    for ranks in groups.values():
        if ranks[0] == 0:
            continue
        other = info[ranks[0]][2]
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        for key in sorted(set(reference) | set(other)):
            a, b = reference.get(key, "(none)"), other.get(key, "(none)")
            if a != b:
                lines.append(f"  {key}: rank 0 has {a}, {who} {'has' if len(ranks) == 1 else 'have'} {b}")
    if any(line.startswith("  input ") for line in lines):
        lines.append("  (every rank must read the same inputs; distir-run --trust-inputs skips the input checksums)")
    return Agreement(False, REJECTED, "\n".join(lines), report=rank == 0, failed_ranks=list(range(1, size)))


class Watchdog:
    """``--timeout S``: if the run has not finished ``seconds`` after it started, print
    what this process waits in (``where()``; ``label`` names the rank) and end the
    process (``stop_job``: mpiexec then ends the whole job).

    In an MPI job (``comm``) the ranks start at different moments (a loaded machine
    imports Python for seconds), so each rank's clock runs out at another time. The
    first rank whose clock runs out tells every other rank (a message with tag
    ``WATCHDOG_TAG``), and a rank told so reports at once: every rank prints where it
    waits. A rank that has reported then waits until every other rank has reported too
    (at most ``grace`` seconds, for a rank that cannot) before it ends the job. Without
    ``comm`` it waits ``grace`` seconds."""

    POLL = 0.02

    def __init__(self, seconds: float, label: str, where: Callable[[], str], grace: float = 0.0, code: int = 1, comm=None):
        import threading
        import time

        self.seconds, self.label, self.where, self.grace, self.code = seconds, label, where, grace, code
        self.deadline = time.monotonic() + seconds
        self.comm = comm
        self._notices: list = []
        if comm is not None:
            me = comm.Get_rank()
            self._peers = [r for r in range(comm.Get_size()) if r != me]
            self._boxes = {r: np.zeros(1, np.uint8) for r in self._peers}
            self._notices = [comm.Irecv(self._boxes[r], source=r, tag=WATCHDOG_TAG) for r in self._peers]
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._fired = False
        self._thread = threading.Thread(target=self._watch, name="distir-watchdog", daemon=True)
        self._thread.start()

    def _told(self) -> bool:
        """Whether another rank has reported its timeout."""
        from mpi4py import MPI

        return bool(self._notices) and MPI.Request.Testany(self._notices)[1]

    def _watch(self) -> None:
        import time

        while True:
            left = self.deadline - time.monotonic()
            if self._done.wait(max(min(left, self.POLL), 0) if self._notices else max(left, 0)):
                return
            if left <= 0 or self._told():
                break
        with self._lock:
            if self._done.is_set():
                return
            self._fired = True
        try:
            where = self.where()
        except Exception as e:  # noqa: BLE001 - the report must not fail
            where = f"an unknown place ({type(e).__name__})"
        who = f"{self.label}: " if self.label else ""
        print(f"distir-run: {who}no result within {self.seconds:g} s (--timeout): waiting in {where}", file=sys.stderr, flush=True)
        self._settle()
        stop_job(self.code)

    def _settle(self) -> None:
        """After this rank's report: tell the others, and wait for theirs."""
        import time

        if not self._notices:
            time.sleep(self.grace)
            return
        from mpi4py import MPI

        sent = [self.comm.Isend(np.ones(1, np.uint8), dest=r, tag=WATCHDOG_TAG) for r in self._peers]
        end = time.monotonic() + self.grace
        while not MPI.Request.Testall(self._notices) and time.monotonic() < end:
            time.sleep(self.POLL)
        MPI.Request.Testall(sent)

    def stop(self) -> None:
        """The run is over; once the timeout was reported, the process ends as the
        report said (the run finishing during the grace period does not make it a
        success)."""
        with self._lock:
            self._done.set()
            fired = self._fired
        self._thread.join()  # (once it has reported, it ends the process)
        for req in self._notices:  # no rank reported: the receives wait no more
            if not req.Test():
                req.Cancel()
                req.Wait()


WATCHDOG_TAG = 27017
"""The tag of a rank's message saying that it reached ``--timeout`` (``Watchdog``)."""


def stop_job(code: int) -> None:
    """End this process now, without MPI_Finalize (which would wait for the peers):
    mpiexec then ends every other rank of the job."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


STOP_GRACE = 10.0
"""Seconds mpiexec has to end its ranks after SIGTERM before it gets SIGKILL."""


YIELD = "MPIR_CVAR_ENABLE_HEAVY_YIELD"
"""MPICH's setting that makes a rank waiting in an MPI call sleep between polls of its
progress engine (``nanosleep``) rather than spin: with more ranks than cores, spinning
ranks take the cores from the ranks whose work they wait for. Measured here (MPICH 5.0,
4 ranks on 2 cores at load 8, ``test_permute.py``'s MPI runs): 58 and 54 s of CPU
spinning, 40 and 39 s sleeping, and 45 -> 37 s of wall time."""


def mpiexec_env(ranks: int, env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The environment of an ``mpiexec -n ranks`` job: ``env`` (None: this process's)
    with ``YIELD`` on when the ranks are more than this process's cores and the
    environment does not set it already; None when nothing changes."""
    base = dict(os.environ if env is None else env)
    if YIELD in base or ranks <= _cores():
        return None if env is None else base
    return {**base, YIELD: "1"}


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run_mpiexec(cmd: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run an ``mpiexec`` command to its end, its output captured. SIGTERM or SIGHUP to
    this process (``timeout``, SLURM, Kubernetes: asked to stop) is passed on to mpiexec,
    which ends its ranks; once it has ended, ``Terminated`` is raised (the caller's
    ``with`` blocks then remove its temporary files). Past ``timeout`` seconds mpiexec
    gets SIGTERM too and ``subprocess.TimeoutExpired`` is raised once it has ended. A
    mpiexec that ignores SIGTERM for ``STOP_GRACE`` seconds is killed."""
    import signal
    import threading
    import time

    asked: list[int] = []

    def forward(signum, frame) -> None:
        asked.append(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, forward)
    deadline = time.monotonic() + timeout
    stopping: float | None = None
    try:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=None if env is None else dict(env))
    except BaseException:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        raise
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if stopping is None and (asked or now > deadline):
                    stopping = now
                    proc.terminate()
                elif stopping is not None and now - stopping > STOP_GRACE:
                    proc.kill()
            except BaseException:  # Ctrl-C: mpiexec has it too; do not leave it behind
                proc.terminate()
                try:
                    proc.wait(STOP_GRACE)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if asked:
        name = signal.Signals(asked[0]).name
        raise Terminated(asked[0], f"stopped by {name}: mpiexec and its ranks were stopped, the job's files removed")
    if stopping is not None:
        raise subprocess.TimeoutExpired(cmd, timeout, out, err)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def spawn(module: ModuleOp, func: str | None, inputs: Mapping[str, Any], ranks: int, seed: int, scatter: Sequence[str] = (), timeout: float = 600) -> list[Any]:
    """Run on ``ranks`` processes started with ``mpiexec`` and return rank 0's outputs."""
    from distir.runtime import npz
    from distir.runtime.scattered import pieces_of

    with tempfile.TemporaryDirectory(prefix="distir-mpi-") as d:
        job = Path(d)
        (job / "program.mlir").write_text(str(module))
        arrays = {k: np.asarray(v) for k, v in inputs.items() if k not in scatter}
        for name, ps in pieces_of(inputs, list(scatter)).items():
            arrays.update({f"{name}.{i}": p for i, p in enumerate(ps)})
        np.savez(job / "inputs.npz", **arrays)
        (job / "job.json").write_text(json.dumps({"func": func, "ranks": ranks, "seed": seed, "scatter": list(scatter)}))
        cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "distir.runtime.mpi_worker", str(job)]
        try:
            proc = run_mpiexec(cmd, timeout, env=mpiexec_env(ranks))
        except subprocess.TimeoutExpired:
            raise JobFailed(f"mpiexec -n {ranks} did not finish within {timeout:.0f} s: it was stopped") from None
        err = job / "error.txt"
        if err.exists():
            kind, _, msg = err.read_text().partition("\n")
            if kind == "rejected":
                raise InputRejected(msg)
            if kind == "differ":
                raise ResultsDiffer(msg)
            raise ExecutionFailed(msg)
        if proc.returncode != 0 or not (job / "outputs.npz").exists():
            import re

            died = re.search(r"EXIT STRING: (.*)", proc.stdout + proc.stderr)
            if died:
                raise JobFailed(f"a rank of 'mpiexec -n {ranks}' died ({died.group(1).strip()}); mpiexec ended the other ranks")
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise ExecutionFailed(f"mpiexec -n {ranks} failed (exit {proc.returncode}): " + " | ".join(tail))
        data = npz.load_npz(str(job / "outputs.npz"))
        outs: list[Any] = []
        i = 0
        while f"result{i}" in data or f"result{i}.0" in data:
            if f"result{i}" in data:
                outs.append(data[f"result{i}"])
            else:
                j, ps = 0, []
                while f"result{i}.{j}" in data:
                    ps.append(data[f"result{i}.{j}"])
                    j += 1
                outs.append(ps)
            i += 1
        return outs


def worker_main(job_dir: str) -> int:
    """Entry point of the processes ``spawn`` starts: prepare, agree, run; errors go
    to ``error.txt`` for the parent (one report: the agreement's, or the first rank's
    after it)."""
    from distir.dialects.context import parse_module
    from distir.runtime import npz

    job = Path(job_dir)
    MPI = _mpi()
    rank = MPI.COMM_WORLD.Get_rank()
    forget_mpich_segments()
    prepared: PreparedRun | None = None
    failure = None
    try:
        spec = json.loads((job / "job.json").read_text())
        module = parse_module((job / "program.mlir").read_text())
        inputs = npz.load_npz(str(job / "inputs.npz"))
        prepared = MpiBackend().prepare(module, spec["func"], inputs, spec["ranks"], spec["seed"], spec.get("scatter") or [])
    except Exception as e:  # noqa: BLE001 - every rank must reach the agreement
        failure = failure_of(e)
    outcome = agree(MPI.COMM_WORLD, {"job": job_dir}, failure)
    if not outcome.ok:
        if outcome.report:
            _report(job, rank, ("rejected" if outcome.code == REJECTED else "failed") + "\n" + outcome.message)
        return 1
    assert prepared is not None
    try:
        outs = prepared.execute()
        if rank == 0:
            from distir.runtime import scattered

            np.savez(job / "outputs.npz", **scattered.flatten_outputs(outs))
        return 0
    except ResultsDiffer as e:  # every rank has rank 0's verdict (PreparedRun.execute)
        if rank == 0:
            _report(job, rank, f"differ\n{e}")
        return 1
    except InputRejected as e:
        _report(job, rank, f"rejected\n{e}")
    except Exception as e:  # noqa: BLE001 - reported to the parent
        _report(job, rank, f"failed\n{e}")
    stop_job(1)  # the peers may wait in a collective: end the job
    return 1


def _report(job: Path, rank: int, text: str) -> None:
    path = job / "error.txt"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(text)
