"""Garbage collection in the test helpers that run many jobs in one process
(``runtime/mpi_batch.py``, ``frontends/mpi_batch.py``, ``runtime/cuda_sim_batch.py``):
none inside a job, one collection after it that scans only what the job made.

A batch process keeps what every job leaves alive (imported modules, compiled kernels,
caches) and makes each job's program, a graph of cyclic garbage once the job ends.
CPython's automatic collections walked the survivors of the jobs before, again and
again: 9-16% of an MPI batch's CPU (the 36 JAX programs at 4 ranks: 28.3 -> 23.8 s of
busy CPU; 121 runtime jobs at 4 ranks: 17.9 -> 15.7 s) and 7% of a simulated CUDA
batch's (16 full collections: 21.6 -> 20.1 s). After each job, ``gc.collect()`` frees its garbage and
``gc.freeze()`` sets what survives aside, so the next job's collection scans only the
next job's objects; garbage is collected once per job, as a tool that runs one program
per process frees it when it exits. (The planner's ``passes.support`` mechanism,
``collections_of_new_objects`` + ``gc_paused`` + ``collect_garbage``, which unfreezes
after each job and freezes again before the next, measured 15% slower on the JAX batch:
23.7-25.2 against 20.6-21.7 s of busy CPU, for a reason not found; hence this one.)"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def one_job() -> Iterator[None]:
    """A job of a batch: no automatic collection inside, its garbage collected after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if was:
            gc.enable()
