"""A bound on a test's work that a loaded machine does not trip.

    with bounded(30):          # TimeoutError after 30 s of this process's CPU time
        parse(text)

A hang in the front end is a loop (catastrophic backtracking, runaway recursion): it
burns CPU, so the bound counts CPU seconds (``ITIMER_PROF``: user + system time of this
process), which do not grow when other jobs share the machine. A wait that burns no CPU
(a deadlock) is caught by the wall-clock bound, ``WALL_FACTOR`` times larger.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

WALL_FACTOR = 20


@contextmanager
def bounded(cpu_seconds: float):
    """Raise ``TimeoutError`` in the body after ``cpu_seconds`` of CPU time (or
    ``WALL_FACTOR`` times that of wall time)."""

    def cpu(signum, frame):
        raise TimeoutError(f"no result within {cpu_seconds:g} s of CPU time: a hang")

    def wall(signum, frame):
        raise TimeoutError(f"no result within {cpu_seconds * WALL_FACTOR:g} s: a hang")

    before = signal.signal(signal.SIGPROF, cpu), signal.signal(signal.SIGALRM, wall)
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    signal.setitimer(signal.ITIMER_REAL, cpu_seconds * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, before[0])
        signal.signal(signal.SIGALRM, before[1])
