"""Host buffers of the runtime (``local`` and ``mpi`` backends): where a large buffer
starts within a memory page."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

PAGE = 4096
STAGGER = 448
"""Successive large buffers start this many bytes further into a page (mod 4 KiB; 448 =
7 cache lines, so 64 buffers in a row all start at different lines)."""
STAGGER_FROM = 1 << 16
_next_color = itertools.count()


def new_buffer(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """A zeroed C-contiguous array. Large ones (``STAGGER_FROM`` bytes and more) start at
    a different offset within a 4 KiB page than the ones allocated just before them: a
    kernel that streams several buffers which all start at the same page offset (as every
    large numpy array does) stalls on loads that alias the stores it just issued (same
    address bits 11:0) and on cache-set conflicts; on this project's 2-core machine such
    a step ran 1.5-2x slower (``bench/rs_ag_ratio.py``)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < STAGGER_FROM:
        return np.zeros(shape, dtype=dtype)
    raw = np.zeros(nbytes + 2 * PAGE, dtype=np.uint8)
    base = raw.__array_interface__["data"][0]
    start = (-base) % PAGE + (next(_next_color) * STAGGER) % PAGE
    return raw[start : start + nbytes].view(dtype).reshape(tuple(shape))
