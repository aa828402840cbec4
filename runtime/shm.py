"""Shared memory between the processes of one node without MPI: what a communicator that
is not MPI (``frameworks/torch_comm.py``: a ``torch.distributed`` process group) brings
so that steps take the zero-copy paths the ``mpi`` backend takes through its MPI-3 window.

``ShmHeap(rank, size, nbytes, allgather)``: every rank creates one segment (a file in
``/dev/shm``, mapped), learns its peers' file names through ``allgather`` (any
collective that returns every rank's Python object: the process group's
``all_gather_object``), maps them, and removes the files once every rank has mapped them
(the memory lives until the last process unmaps it, so nothing is left behind when a job
dies). Each segment begins with a control block:

* a counter per rank, for ``barrier()``: a rank bumps its own counter and waits until
  every peer's has reached it (spinning, then yielding the core; a peer that failed sets
  its abort word and the waiters raise ``CommError``);
* a mailbox, through which ``exchange(obj)`` hands every rank each peer's small object.

After the control block a rank bump-allocates buffers (``alloc``, as ``mpi.SharedHeap``:
an "args" region and an "allocs" region) that its peers see by (offset, shape, strides,
dtype) (``locate``, ``view``). ``ShmPeers`` gives a communicator the two methods the
zero-copy fused collectives and tile operators use, ``peer_buffers`` and
``peer_barrier``; ``ShmDevice`` allocates a step's buffers in the heap.
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from distir.runtime.comm import CommError
from distir.runtime.host import HostDevice
from distir.runtime.streams import SyncStream

CONTROL = 1 << 16
"""Bytes of the control block at the start of each segment (counter, abort word,
mailbox)."""
MAILBOX = 64
REASON = 512
"""Bytes at the end of the control block for the message of a rank that aborted."""
SPINS = 2000
TIMEOUT = 600.0
"""Seconds a barrier waits for its peers before it gives up (a peer that hangs)."""


class ShmHeap:
    """One segment per rank in ``/dev/shm`` (module doc). Raises ``OSError`` when the
    ranks are not on one node or the segment cannot be made (every rank: the check is
    collective)."""

    ALIGN = 64

    def __init__(self, rank: int, size: int, nbytes: int, allgather: Callable[[Any], list[Any]], args_bytes: int | None = None):
        self.rank, self.size = rank, size
        total = CONTROL + self._align(nbytes)
        path, error = None, None
        tag = allgather(uuid.uuid4().hex if rank == 0 else None)[0]
        try:
            path = f"/dev/shm/distir-{tag}-{rank}"
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, total)
                mine = mmap.mmap(fd, total)
            finally:
                os.close(fd)
        except OSError as e:
            error, mine = str(e), None
        everyone = allgather((socket.gethostname(), path, total, error))
        problems = [f"rank {r}: {e}" for r, (_, _, _, e) in enumerate(everyone) if e]
        hosts = {h for h, *_ in everyone}
        if problems or len(hosts) > 1:
            if path and mine is not None:
                mine.close()
                os.unlink(path)
            raise OSError("; ".join(problems) or f"the ranks run on {len(hosts)} hosts")
        self.maps: list[mmap.mmap] = []
        for r, (_, p, n, _) in enumerate(everyone):
            if r == rank:
                self.maps.append(mine)
                continue
            fd = os.open(p, os.O_RDWR)
            try:
                self.maps.append(mmap.mmap(fd, n))
            finally:
                os.close(fd)
        allgather(None)  # every rank has mapped every segment
        os.unlink(path)
        self.segments = [np.frombuffer(m, dtype=np.uint8) for m in self.maps]
        self.mine = self.segments[rank]
        self.base = self.mine.__array_interface__["data"][0]
        self.counters = [s[:8].view(np.int64) for s in self.segments]
        self.aborts = [s[8:16].view(np.int64) for s in self.segments]
        self.count = 0
        args = self._align(nbytes if args_bytes is None else args_bytes)
        self.top = {"args": CONTROL, "allocs": CONTROL + args}
        self.limit = {"args": CONTROL + args, "allocs": total}

    @classmethod
    def _align(cls, n: int) -> int:
        return -(-n // cls.ALIGN) * cls.ALIGN

    # ------------------------------------------------------------------ buffers
    def alloc(self, shape, dtype, region: str = "allocs") -> np.ndarray | None:
        """A zeroed array in this rank's segment, or None when the region is full."""
        from distir.runtime.buffers import STAGGER, STAGGER_FROM

        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        start = self.top[region]
        if start + nbytes > self.limit[region]:
            return None
        self.top[region] = start + self._align(max(nbytes, 1)) + (STAGGER if nbytes >= STAGGER_FROM else 0)
        a = np.ndarray(tuple(shape), dtype, buffer=self.mine, offset=start)
        a[...] = 0
        return a

    def locate(self, a: Any) -> tuple | None:
        """(offset, shape, strides, dtype) of ``a`` in this rank's segment, or None."""
        if not isinstance(a, np.ndarray):
            return None
        start = a.__array_interface__["data"][0] - self.base
        span = sum((n - 1) * st for n, st in zip(a.shape, a.strides) if n) + a.itemsize
        if start < CONTROL or any(st < 0 for st in a.strides) or start + span > self.mine.size:
            return None
        return (start, a.shape, a.strides, a.dtype)  # the dtype itself: bf16 (ml_dtypes) has no str of its own

    def view(self, rank: int, where: tuple) -> np.ndarray:
        offset, shape, strides, dtype = where
        return np.ndarray(shape, np.dtype(dtype), buffer=self.segments[rank], offset=offset, strides=strides)

    # ------------------------------------------------------------------ synchronisation
    def barrier(self) -> None:
        """Wait until every rank has reached this barrier (module doc)."""
        self.count += 1
        k = self.count
        self.counters[self.rank][0] = k
        spins = 0
        start = None
        while True:
            if min(int(c[0]) for c in self.counters) >= k:
                return
            spins += 1
            if spins > SPINS:
                if any(int(a[0]) for a in self.aborts):
                    raise CommError(self.failure())
                if start is None:
                    start = time.monotonic()
                elif time.monotonic() - start > TIMEOUT:
                    raise CommError(f"a peer did not reach a shared-memory barrier within {TIMEOUT:.0f} s")
                time.sleep(0 if spins < 4 * SPINS else 1e-4)

    def abort(self, message: str = "") -> None:
        """Tell the peers that this rank failed (their barriers raise with ``message``)."""
        raw = message.encode()[: REASON - 1]
        self.mine[CONTROL - REASON : CONTROL] = 0
        self.mine[CONTROL - REASON : CONTROL - REASON + len(raw)] = np.frombuffer(raw, np.uint8)
        self.aborts[self.rank][0] = 1

    def failure(self) -> str:
        """Why a peer aborted (``abort``), as its message says."""
        for r, a in enumerate(self.aborts):
            if int(a[0]):
                text = bytes(self.segments[r][CONTROL - REASON : CONTROL]).rstrip(b"\0").decode(errors="replace")
                return text or f"rank {r} failed"
        return "a peer failed"

    def exchange(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (small: it travels through the mailboxes; collective)."""
        data = pickle.dumps(obj)
        if len(data) + 8 > CONTROL - REASON - MAILBOX:
            raise CommError(f"a shared-memory message of {len(data)} bytes does not fit the mailbox")
        box = self.mine
        box[MAILBOX : MAILBOX + 8].view(np.int64)[0] = len(data)
        box[MAILBOX + 8 : MAILBOX + 8 + len(data)] = np.frombuffer(data, np.uint8)
        self.barrier()
        out = []
        for s in self.segments:
            n = int(s[MAILBOX : MAILBOX + 8].view(np.int64)[0])
            out.append(pickle.loads(bytes(s[MAILBOX + 8 : MAILBOX + 8 + n])))
        self.barrier()  # every rank has read the mailboxes before any writes again
        return out

    def close(self) -> None:
        self.segments, self.counters, self.aborts, self.mine = [], [], [], np.zeros(0, np.uint8)
        for m in self.maps:
            try:
                m.close()
            except BufferError:
                pass  # a view of it is still alive: unmapped when that goes
        self.maps = []


class ShmPeers:
    """``peer_buffers`` / ``peer_barrier`` through a ``ShmHeap`` (mixed into a
    communicator whose group is the heap's ranks in the same order)."""

    heap: ShmHeap | None

    def peer_buffers(self, arrays: list[np.ndarray]) -> list[list[np.ndarray]] | None:
        """Every rank's ``arrays`` as views of their segments (collective), or None on
        every rank when some rank's buffers are not in its segment."""
        heap = self.heap
        if heap is None:
            return None
        everyone = heap.exchange([heap.locate(a) for a in arrays])
        if any(w is None for ws in everyone for w in ws):
            return None
        return [[heap.view(r, w) for w in ws] for r, ws in enumerate(everyone)]

    def peer_barrier(self) -> None:
        assert self.heap is not None
        self.heap.barrier()

    def abort(self, message: str) -> None:
        """This rank cannot go on: the peers' shared-memory waits raise with ``message``
        (``comm.py``)."""
        if self.heap is not None:
            self.heap.abort(message)


class ShmDevice(HostDevice):
    """The host device with a step's buffers in a ``ShmHeap`` (plain memory when it is
    full or there is none)."""

    def __init__(self, heap: ShmHeap | None = None):
        super().__init__()
        self.heap = heap

    def stream(self, index: int):
        if index == 0:
            return SyncStream(0)
        return super().stream(index)

    def alloc(self, shape, dtype) -> np.ndarray:
        a = self.heap.alloc(shape, dtype) if self.heap is not None else None
        return a if a is not None else super().alloc(shape, dtype)
