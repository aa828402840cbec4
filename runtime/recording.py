"""A communicator that records the exact sequence of calls a rank issues (op, count,
datatype, reduction, root or peer, communicator, stream) and passes them on to another
communicator. It checks the ``nccl`` backend's call sequence without a GPU: the
executor issues the same calls whatever the device.

    log = []
    comm = RecordingComm(LocalWorld(2).comm(0), log)
    ...
    log[0]  ->  Call(op='all_reduce', count=1024, dtype='float32', reduction='avg', peer=None, comm=0, stream=0)

Communicators are numbered in the order this rank creates them (0 = the world); every
``split`` is recorded with its color and key, so a log also says which groups exist.

``HostViewComm`` lets a host communicator serve a device whose arrays wrap numpy arrays
(numba's CUDA simulator): it hands the communicator the numpy views and runs the calls
at once (simulated launches complete when they are issued).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distir.runtime.comm import P2P
from distir.runtime.streams import SyncStream


@dataclass(frozen=True)
class Call:
    op: str
    count: int = 0
    dtype: str = ""
    reduction: str | None = None
    peer: int | None = None
    comm: int = 0
    stream: int = 0
    color: int | None = None
    key: int | None = None

    def __str__(self) -> str:
        parts = [self.op]
        if self.op == "split":
            parts.append(f"color={self.color} key={self.key} -> comm{self.comm}")
            return " ".join(parts)
        if self.reduction:
            parts.append(self.reduction)
        if self.count or self.dtype:
            parts.append(f"{self.count}x{self.dtype}")
        if self.peer is not None:
            parts.append(f"peer={self.peer}" if self.op in ("send", "recv") else f"root={self.peer}")
        parts.append(f"comm{self.comm} stream{self.stream}")
        return " ".join(parts)


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n


def _dtype(buf: Any) -> str:
    return str(getattr(buf, "dtype", type(buf).__name__))


class RecordingComm:
    """Records every call into ``log`` (a list shared by this rank's communicators)."""

    def __init__(self, inner, log: list[Call], number: int = 0, counter: _Counter | None = None):
        self.inner = inner
        self.log = log
        self.number = number
        self.counter = counter or _Counter()
        self.rank = inner.rank
        self.size = inner.size

    def _rec(self, op: str, buf: Any = None, count: int = 0, reduction: str | None = None, peer: int | None = None, stream: Any = None) -> None:
        self.log.append(
            Call(op, count, _dtype(buf) if buf is not None else "", reduction, peer, self.number, getattr(stream, "index", 0))
        )

    def abort(self, message: str) -> None:
        self.inner.abort(message)

    def split(self, color: int, key: int) -> RecordingComm:
        number = self.counter.next()
        self.log.append(Call("split", comm=number, color=color, key=key))
        return RecordingComm(self.inner.split(color, key), self.log, number, self.counter)

    def all_reduce(self, send, recv, count, op, stream) -> None:
        self._rec("all_reduce", send, count, op, None, stream)
        self.inner.all_reduce(send, recv, count, op, stream)

    def reduce_scatter(self, send, recv, count, op, stream) -> None:
        self._rec("reduce_scatter", send, count, op, None, stream)
        self.inner.reduce_scatter(send, recv, count, op, stream)

    def all_gather(self, send, recv, count, stream, **plan) -> None:
        self._rec("all_gather", send, count, None, None, stream)
        self.inner.all_gather(send, recv, count, stream, **plan)

    def reduce(self, send, recv, count, op, root, stream) -> None:
        self._rec("reduce", send, count, op, root, stream)
        self.inner.reduce(send, recv, count, op, root, stream)

    def broadcast(self, send, recv, count, root, stream, **plan) -> None:
        self._rec("broadcast", send, count, None, root, stream)
        self.inner.broadcast(send, recv, count, root, stream, **plan)

    def group(self, calls: list[P2P], stream) -> None:
        self._rec("group_start", stream=stream)
        for c in calls:
            self._rec(c.kind, c.buffer, c.count, None, c.peer, stream)
        self._rec("group_end", stream=stream)
        self.inner.group(calls, stream)


class HostViewComm:
    """A host communicator serving device arrays that wrap numpy arrays (see the module
    doc); ``view`` maps a device array to its numpy array."""

    def __init__(self, inner, view):
        self.inner = inner
        self.view = view
        self.rank = inner.rank
        self.size = inner.size
        self._now = SyncStream(0)

    def abort(self, message: str) -> None:
        self.inner.abort(message)

    def split(self, color: int, key: int) -> HostViewComm:
        return HostViewComm(self.inner.split(color, key), self.view)

    def all_reduce(self, send, recv, count, op, stream) -> None:
        self.inner.all_reduce(self.view(send), self.view(recv), count, op, self._now)

    def reduce_scatter(self, send, recv, count, op, stream) -> None:
        self.inner.reduce_scatter(self.view(send), self.view(recv), count, op, self._now)

    def all_gather(self, send, recv, count, stream, **plan) -> None:
        self.inner.all_gather(self.view(send), self.view(recv), count, self._now, **plan)

    def reduce(self, send, recv, count, op, root, stream) -> None:
        self.inner.reduce(self.view(send), self.view(recv), count, op, root, self._now)

    def broadcast(self, send, recv, count, root, stream, **plan) -> None:
        self.inner.broadcast(self.view(send), self.view(recv), count, root, self._now, **plan)

    def group(self, calls: list[P2P], stream) -> None:
        self.inner.group([P2P(c.kind, self.view(c.buffer), c.count, c.peer, c.stream_from) for c in calls], self._now)
