"""The ``nccl`` backend: one process per GPU, started with ``mpiexec -n N`` (MPI carries
NCCL's unique id), nccl4py communicators, numba-cuda device arrays and streams, and the
generated CUDA kernels (``cuda.CudaDevice``).

Each ``nccl.*`` op of the lowered program is the nccl4py call of the same name on the
op's communicator (``Communicator.split(color, key)`` of the world communicator) and
stream; a group of point-to-point calls is ``group_start(); send/recv...; group_end()``.
``coll.overlap`` puts communication on stream 1, ordered after the computation of its
chunk by events.

The fused tile operators (``tiles.py``) run as one kernel computing every tile in
the remote-first order with per-tile ready flags on stream 0, while stream 1 waits for
each tile's flag and sends it with ``send``/``recv``.

This needs a CUDA GPU and driver; where there is none, ``run`` says so. The call
sequence a program issues is tested without a GPU by ``recording.RecordingComm``, and
every generated kernel runs in numba's CUDA simulator and compiles to PTX and cubin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import InputRejected
from distir.runtime.comm import P2P
from distir.runtime.executor import ExecutionFailed, LoweredProgram, RankExecutor


def _nccl():
    import nccl.core as nccl

    return nccl


def _ops():
    nccl = _nccl()
    return {"sum": nccl.SUM, "prod": nccl.PROD, "max": nccl.MAX, "min": nccl.MIN, "avg": nccl.AVG}


def _flat(buf, count: int):
    return buf.reshape(-1)[:count] if buf.ndim != 1 or buf.shape[0] != count else buf


class NcclComm:
    """One rank's nccl4py communicator with the ``Comm`` interface (``comm.py``).

    The device keeps bf16 buffers as their bits (uint16 arrays, ``cuda.CudaDevice``);
    they are handed to NCCL as bf16 views (``StridedMemoryView`` with the ml-dtypes
    bfloat16 dtype, NCCL's ``ncclBfloat16``). Not yet run on a GPU."""

    def __init__(self, comm, device=None):
        self.comm = comm
        self.rank = comm.rank
        self.size = comm.nranks
        self.device = device

    def split(self, color: int, key: int) -> NcclComm:
        return NcclComm(self.comm.split(color, key), self.device)

    def abort(self, message: str) -> None:
        """End the job (``comm.py``): the nccl backend's ranks are the processes of an
        MPI job, and ``MPI_Abort`` ends them all, whatever their GPUs wait for."""
        from distir.runtime.mpi import abort_job

        abort_job(message)

    def _b(self, buf, count: int):
        flat = _flat(buf, count)
        if self.device is None or not self.device.is_bf16(buf):
            return flat
        try:
            from cuda.core.utils import StridedMemoryView

            from distir.runtime.values import BFLOAT16

            return StridedMemoryView.from_any_interface(flat).view(dtype=BFLOAT16)
        except Exception as e:  # noqa: BLE001 - reported with the reason
            raise RuntimeError(f"cannot hand a bf16 buffer to NCCL as bf16: {e}") from e

    def all_reduce(self, send, recv, count, op, stream) -> None:
        self.comm.allreduce(self._b(send, count), self._b(recv, count), _ops()[op], stream=stream.stream)

    def reduce_scatter(self, send, recv, count, op, stream) -> None:
        self.comm.reduce_scatter(self._b(send, count * self.size), self._b(recv, count), _ops()[op], stream=stream.stream)

    def all_gather(self, send, recv, count, stream, in_place=False) -> None:
        # NCCL sees an in-place all-gather by its pointers (send = recv + rank * count)
        self.comm.allgather(self._b(send, count), self._b(recv, count * self.size), stream=stream.stream)

    def reduce(self, send, recv, count, op, root, stream) -> None:
        self.comm.reduce(self._b(send, count), self._b(recv, count), _ops()[op], root=root, stream=stream.stream)

    def broadcast(self, send, recv, count, root, stream) -> None:
        self.comm.broadcast(self._b(send, count), self._b(recv, count), root, stream=stream.stream)

    def group(self, calls: list[P2P], stream) -> None:
        nccl = _nccl()
        nccl.group_start()
        try:
            for c in calls:
                buf = self._b(c.buffer, c.count)
                if c.kind == "send":
                    self.comm.send(buf, c.peer, stream=stream.stream)
                else:
                    self.comm.recv(buf, c.peer, stream=stream.stream)
        finally:
            nccl.group_end()


MPIEXEC_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
"""Variables mpiexec (MPICH's hydra, Open MPI, PMIx) sets in the processes it starts."""


class OneProcess:
    """The world of one rank started without ``mpiexec``: nothing to broadcast or gather,
    so a 1-rank run needs neither mpi4py nor an MPI library (a GPU machine's image may
    have mpi4py without one)."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 1

    def bcast(self, value, root: int = 0):
        return value

    def gather(self, value, root: int = 0) -> list:
        return [value]


def _world(ranks: int):
    """MPI's world communicator, or :class:`OneProcess` for one rank outside mpiexec."""
    import os

    if ranks == 1 and not any(v in os.environ for v in MPIEXEC_VARIABLES):
        return OneProcess()
    from mpi4py import MPI

    return MPI.COMM_WORLD


def world_comm(ranks: int) -> tuple[NcclComm, Any]:
    """The world communicator of this process's rank: rank 0 makes NCCL's unique id and
    MPI broadcasts it; each rank uses GPU (rank mod the node's GPU count)."""
    from numba import cuda

    nccl = _nccl()
    mpi = _world(ranks)
    if mpi.Get_size() != ranks:
        raise InputRejected(f"the nccl backend runs one process per GPU: start {ranks} processes (mpiexec -n {ranks})")
    rank = mpi.Get_rank()
    try:
        gpus = len(cuda.gpus)
    except Exception as e:  # noqa: BLE001 - no driver, no device
        raise InputRejected(f"the nccl backend needs a CUDA GPU and driver: {e}") from None
    if gpus == 0:
        raise InputRejected("the nccl backend needs a CUDA GPU; none was found")
    cuda.select_device(rank % gpus)
    uid = nccl.get_unique_id() if rank == 0 else None
    uid = mpi.bcast(uid, root=0)
    return NcclComm(nccl.Communicator.init(nranks=ranks, rank=rank, unique_id=uid)), mpi


class NcclBackend:
    """``nccl``: lower (if needed) and run this process's rank on its GPU."""

    name = "nccl"

    def __init__(self) -> None:
        self.is_output_rank = True

    @staticmethod
    def launched_ranks() -> int | None:
        """The process count when started by ``mpiexec -n N`` (one process per GPU)."""
        from distir.runtime.mpi import MpiBackend

        return MpiBackend.launched_ranks()

    def run(self, module: ModuleOp, func: str, inputs: Mapping[str, np.ndarray], ranks: int, seed: int) -> list[np.ndarray]:
        from distir.runtime.cuda import CudaDevice

        try:
            import nccl.core  # noqa: F401
            from numba import cuda  # noqa: F401
        except ImportError as e:
            raise InputRejected(
                f"the nccl backend needs the GPU extra (pip install 'distir[gpu]'): {e}"
            ) from None
        program = LoweredProgram.build(module, func, ranks)
        full = program.prepare_inputs(inputs, seed)
        comm, mpi = world_comm(ranks)
        device = CudaDevice()
        comm.device = device
        rank = mpi.Get_rank()
        ex = RankExecutor(program, rank, comm, device)
        try:
            out = ex.run(program.rank_args(full, rank, device))
            for s in ex.streams.values():
                s.synchronize()
        except Exception as e:  # noqa: BLE001
            raise ExecutionFailed(f"rank {rank}: {type(e).__name__}: {e}") from e
        host = [device.to_host(r) for r in out]
        everyone = mpi.gather(host, root=0)
        self.is_output_rank = rank == 0
        outs = program.collect(everyone, np.asarray) if rank == 0 else None
        return mpi.bcast(outs, root=0)
