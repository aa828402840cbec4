"""Streams and events on the host, with CUDA's semantics: work queued on one stream runs in
order; an event completes when the work queued before it has completed; a stream made
to wait for an event runs later work only after the event completes.

``SyncStream`` runs work at once on the calling thread (stream 0 of a rank: the rank's
own thread). ``ThreadStream`` runs work on a worker thread, so that a rank computes on
stream 0 while its stream 1 communicates (``coll.overlap``). The MPI backend adds a
stream of non-blocking requests (``mpi.RequestStream``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class DoneEvent:
    """An event that has completed."""

    def wait(self) -> None:
        pass

    def query(self) -> bool:
        return True


class ThreadEvent:
    def __init__(self, abort: threading.Event | None = None):
        self._event = threading.Event()
        self._abort = abort

    def set(self) -> None:
        self._event.set()

    def wait(self) -> None:
        while not self._event.wait(0.05):
            if self._abort is not None and self._abort.is_set():
                raise RuntimeError("a peer failed while this rank waited for an event")

    def query(self) -> bool:
        return self._event.is_set()


class SyncStream:
    """Runs work immediately on the calling thread."""

    def __init__(self, index: int = 0):
        self.index = index

    def submit(self, fn: Callable[[], None]) -> None:
        fn()

    def record(self):
        return DoneEvent()

    def wait_event(self, event) -> None:
        event.wait()

    def synchronize(self) -> None:
        pass

    def poll(self) -> None:
        pass

    def close(self) -> None:
        pass


class ThreadStream:
    """Runs work in order on a worker thread. A failure is raised by the next
    ``synchronize`` (and reported at once through ``on_error``)."""

    def __init__(self, index: int, name: str, abort: threading.Event | None = None, on_error: Callable[[BaseException], None] | None = None):
        self.index = index
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._abort = abort
        self._on_error = on_error
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            if self._error is not None:
                if isinstance(fn, _Marker):
                    fn()
                continue
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported to the host thread
                self._error = e
                if self._on_error is not None:
                    self._on_error(e)

    def submit(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)

    def record(self) -> ThreadEvent:
        ev = ThreadEvent(self._abort)
        self._queue.put(_Marker(ev.set))
        return ev

    def wait_event(self, event) -> None:
        self.submit(event.wait)

    def synchronize(self) -> None:
        ev = self.record()
        ev.wait()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def poll(self) -> None:
        pass

    def close(self) -> None:
        self._queue.put(None)


class _Marker:
    """Queue entry that runs even after a failure (so that waiters wake up)."""

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn

    def __call__(self) -> None:
        self.fn()
