"""The communicator interface every runtime backend implements: NCCL's calls, one
method each, on one group of ranks.

A ``Comm`` belongs to one rank; ``rank`` is its index in the group and ``size`` the
group's size. Buffers are the device's arrays (numpy arrays on the host backends,
numba-cuda device arrays for ``nccl``); ``count`` is an element count as NCCL takes it;
``op`` is a reduction word (sum, prod, max, min, avg); ``stream`` is the stream the call
is queued on (``runtime/streams.py`` on the host). ``split(color, key)`` is collective
over the group, like ``ncclCommSplit``. Point-to-point calls are issued together with
``group(calls, stream)``, where each call is ``P2P("send"|"recv", buffer, count, peer)``
(``ncclGroupStart``; the calls; ``ncclGroupEnd``).

Two decisions of the program's plan (``plan-execution``, ``docs/planning.md``) reach the
communicator as keywords, given only when the program says so: ``in_place=True`` on
``all_gather`` (``send`` is this rank's block of ``recv``: nothing of its own to copy,
``MPI_IN_PLACE``), and ``stream_from=N`` on ``all_gather``, ``broadcast`` and each
``P2P`` (the host copies of its data use streaming stores from N bytes on), only for
communicators that copy collectives on the host (the ``local`` target's).

Failures: ``abort(message)`` is how a rank that cannot go on (an error between two
collectives, a peer found gone) stops the job instead of leaving its peers waiting for
it in a collective. ``message`` names the rank and the cause; every backend implements
it once, and every layer above (``step.Step``, the framework bridges) calls it:

    local   the peers' waits raise ``CommError`` carrying the message (rank threads;
            a peer whose thread ended, or a wait longer than the world's timeout, is
            found by the waiters themselves: ``local.LocalWorld``)
    mpi     the message on standard error, then ``MPI_Abort``: mpiexec ends every rank
    nccl    as mpi (the nccl backend runs under mpiexec)
    torch   the peers' shared-memory waits raise; the process group's peers fail when
            this process ends (torchrun then stops the job)

Implementations: ``local.LocalComm`` (threads sharing memory), ``mpi.MpiComm``,
``nccl.NcclComm``, ``frameworks/torch_comm.TorchComm``, and ``recording.RecordingComm``
which wraps any of them and records the call sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

REDUCTIONS = ("sum", "prod", "max", "min", "avg")


@dataclass(frozen=True)
class P2P:
    """One point-to-point call of a group: ``kind`` is "send" or "recv"."""

    kind: str
    buffer: Any
    count: int
    peer: int
    stream_from: int | None = None


class Comm(Protocol):
    rank: int
    size: int

    def split(self, color: int, key: int) -> Comm: ...

    def all_reduce(self, send, recv, count: int, op: str, stream) -> None: ...

    def reduce_scatter(self, send, recv, count: int, op: str, stream) -> None: ...

    def all_gather(self, send, recv, count: int, stream, in_place: bool = False) -> None: ...

    def reduce(self, send, recv, count: int, op: str, root: int, stream) -> None: ...

    def broadcast(self, send, recv, count: int, root: int, stream) -> None: ...

    def group(self, calls: list[P2P], stream) -> None: ...

    def abort(self, message: str) -> None: ...


class CommError(RuntimeError):
    """A communication failed (a peer failed, or the calls of the ranks do not match)."""
