"""The runtime's communicator (``runtime/comm.py``) over a ``torch.distributed`` process
group, so that any ``torchrun`` job runs distir steps without MPI.

Calls map to the process group's collectives on the numpy buffers seen as tensors
(``torch.from_numpy``: no copy)::

    all_reduce      dist.all_reduce (avg: sum, then divide by the group size; f16 and bf16
                    in f32, rounded once, as the other backends reduce them)
    reduce_scatter  dist.reduce_scatter_single
    all_gather      dist.all_gather_single
    reduce          dist.reduce
    broadcast       dist.broadcast
    group of P2P    dist.batch_isend_irecv
    split           dist.new_group per color (every rank creates every group)

For each step (``bind_program``) the ranks of a node also make a shared-memory heap
(``runtime/shm.py``) sized for the program, the process group serving only as the
rendezvous: the step's buffers live there, and the fused collectives run zero-copy, as
under ``mpiexec``. When the ranks are on several hosts (or ``shared_memory=False``) the
step runs on the collectives alone.
"""

from __future__ import annotations

import atexit
import time
import weakref
from collections import deque
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from distir.runtime.comm import P2P, CommError
from distir.runtime.shm import ShmDevice, ShmHeap, ShmPeers
from distir.runtime.values import BFLOAT16

_HANDED: deque[weakref.ref] = deque(maxlen=64)
"""The tensors of the last collectives handed to torch (weak references). A gloo worker
thread lets go of a call's tensors after the call has returned (a ``barrier`` keeps the
calls before it until it ends), and letting go of a tensor that has a Python object
takes the GIL. At interpreter exit, Python ends a thread that asks for the GIL
(``pthread_exit``), here inside a ``noexcept`` destructor: the process aborts
("terminate called without an active exception") after its work is done, and its
launcher reports the job failed. ``_settle`` at exit waits for these tensors to go."""

SETTLE_SECONDS = 2.0
"""How long ``_settle`` waits at most for torch's threads to let go of the tensors."""


def _handed(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    _HANDED.extend(weakref.ref(t) for t in tensors)
    return tensors


@atexit.register
def _settle() -> None:
    """Before the interpreter finalizes: wait until torch holds none of the tensors of
    the last collectives (each goes when its worker thread has dropped it, which needs
    the GIL this wait gives up), at most ``SETTLE_SECONDS``."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while any(r() is not None for r in _HANDED) and time.monotonic() < deadline:
        time.sleep(0.001)


_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _t(a: np.ndarray, count: int | None = None) -> torch.Tensor:
    flat = a.reshape(-1)
    flat = flat if count is None else flat[:count]
    if flat.dtype == BFLOAT16:  # ml_dtypes' bf16, which torch does not take: through its bits
        return torch.from_numpy(flat.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(flat)


class TorchComm(ShmPeers):
    """One rank's communicator over process group ``group`` (None: the default group)."""

    def __init__(self, group: Any = None, heap: ShmHeap | None = None, shared_memory: bool = True):
        if not dist.is_initialized():
            raise CommError("torch.distributed is not initialized: call torch.distributed.init_process_group first")
        self.pg = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.heap = heap
        self.shared_memory = shared_memory
        self._splits: dict[tuple, TorchComm] = {}

    def __repr__(self) -> str:
        return f"TorchComm(rank {self.rank} of {self.size}, {dist.get_backend(self.pg)}, shared memory: {self.heap is not None})"

    # ------------------------------------------------------------------ steps
    def allgather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.pg)
        return out

    def bind_program(self, program) -> tuple[TorchComm, ShmDevice]:
        """(communicator, device) for one step of ``program``: a shared-memory heap
        sized for it (collective), or none when the ranks cannot share memory."""
        from distir.runtime.mpi import shared_bytes

        heap = None
        if self.shared_memory:
            args, allocs = shared_bytes(program)
            try:
                heap = ShmHeap(self.rank, self.size, args + allocs, self.allgather_object, args_bytes=args)
            except OSError:
                heap = None
        return TorchComm(self.pg, heap, self.shared_memory), ShmDevice(heap)

    # ------------------------------------------------------------------ groups
    def split(self, color: int, key: int) -> TorchComm:
        everyone = self.allgather_object((color, key))
        colors = sorted({c for c, _ in everyone})
        if len(colors) == 1 and sorted(range(self.size), key=lambda r: everyone[r][1]) == list(range(self.size)):
            return TorchComm(self.pg, self.heap, self.shared_memory)
        mine = None
        base = dist.get_process_group_ranks(self.pg) if self.pg is not None else list(range(self.size))
        for c in colors:
            members = sorted((k, r) for r, (cc, k) in enumerate(everyone) if cc == c)
            g = dist.new_group([base[r] for _, r in members])
            if c == color:
                mine = g
        return TorchComm(mine, None, self.shared_memory)

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, send, recv, count, op, stream) -> None:
        stream.submit(lambda: self._all_reduce(send, recv, count, op))

    def _all_reduce(self, send, recv, count, op) -> None:
        out = _t(recv, count)
        wide = out.float() if _half(out) else out  # half types: reduced in f32, rounded once (as MPI's and NCCL's)
        if send is not recv or wide is not out:
            wide.copy_(_t(send, count))
        dist.all_reduce(*_handed(wide), op=_OPS[op], group=self.pg)
        if op == "avg":
            _divide(wide, self.size)
        if wide is not out:
            out.copy_(wide)

    def reduce_scatter(self, send, recv, count, op, stream) -> None:
        stream.submit(lambda: self._reduce_scatter(send, recv, count, op))

    def _reduce_scatter(self, send, recv, count, op) -> None:
        out, src = _t(recv, count), _t(send, count * self.size)
        wide = out.float() if _half(out) else out  # half types: reduced in f32, rounded once
        dist.reduce_scatter_single(*_handed(wide, src.float() if wide is not out else src), op=_OPS[op], group=self.pg)
        if op == "avg":
            _divide(wide, self.size)
        if wide is not out:
            out.copy_(wide)

    def all_gather(self, send, recv, count, stream, in_place=False) -> None:
        stream.submit(lambda: dist.all_gather_single(*_handed(_t(recv, count * self.size), _t(send, count).clone()), group=self.pg))

    def reduce(self, send, recv, count, op, root, stream) -> None:
        def run():
            buf = _t(send, count)
            buf = buf.float() if _half(buf) else buf.clone()  # half types: reduced in f32, rounded once
            dist.reduce(*_handed(buf), dist.get_global_rank(self.pg, root) if self.pg is not None else root, op=_OPS[op], group=self.pg)
            if self.rank == root:
                if op == "avg":
                    _divide(buf, self.size)
                _t(recv, count).copy_(buf)

        stream.submit(run)

    def broadcast(self, send, recv, count, root, stream) -> None:
        def run():
            out = _t(recv, count)
            if self.rank == root and send is not recv:
                out.copy_(_t(send, count))
            dist.broadcast(*_handed(out), dist.get_global_rank(self.pg, root) if self.pg is not None else root, group=self.pg)

        stream.submit(run)

    def group(self, calls: list[P2P], stream) -> None:
        def run():
            ops = []
            for c in calls:
                peer = dist.get_global_rank(self.pg, c.peer) if self.pg is not None else c.peer
                fn = dist.isend if c.kind == "send" else dist.irecv
                ops.append(dist.P2POp(fn, *_handed(_t(c.buffer, c.count)), peer, group=self.pg))
            for w in dist.batch_isend_irecv(ops) if ops else []:
                w.wait()

        stream.submit(run)


def _half(t: torch.Tensor) -> bool:
    return t.dtype in (torch.float16, torch.bfloat16)


def _divide(t: torch.Tensor, n: int) -> None:
    if t.is_floating_point():
        t.div_(n)
    else:
        t.copy_(torch.sign(t) * (t.abs() // n))
