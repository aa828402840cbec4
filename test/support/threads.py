"""Running the ranks of a test as threads, with a time limit (a hang fails the test)."""

from __future__ import annotations

import threading


def on_threads(n: int, fn, timeout: float = 300.0) -> list:
    """Run ``fn(rank)`` on ``n`` threads; every rank's result, or the exception it raised."""
    out: list = [None] * n

    def run(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            out[r] = e

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank hung"
    return out


def results(outs: list) -> list:
    """``outs`` of ``on_threads``, raising the first rank's exception."""
    for o in outs:
        if isinstance(o, BaseException):
            raise o
    return outs
