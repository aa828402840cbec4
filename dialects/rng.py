"""The counter-based random generator behind ``dist.dropout``.

Every element of a tensor draws its random number from (``seed``, its *logical* flat
index in the global tensor, row-major) alone, so a rank holding a block of a sliced
tensor draws exactly the numbers the full tensor would have at those positions: slicing
(and every other placement change) commutes with dropout. A ``local`` value draws the
same numbers on every rank (its index is the index in the full shape).

The hash is splitmix64's finaliser applied to ``index * 0x9E3779B97F4A7C15 +
mix(seed)``, all modulo 2**64, where ``mix(seed)`` is the finaliser applied to the seed.
The top 24 bits ``r`` give the uniform number ``u = r / 2**24`` in [0, 1).

Dropout keeps an element iff ``u >= p``, i.e. iff ``r >= ceil(p * 2**24)``, and scales
kept elements by ``1 / (1 - p)`` (computed in f32 for f16/bf16 and rounded once);
dropped elements are 0. Other backends reproduce these bits exactly from
``uniform_bits``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
BITS = 24
"""Bits of the uniform number used by dropout."""

_CHUNK = 1 << 20


def _finalise(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function, in place on a uint64 array."""
    tmp = np.empty_like(z)
    np.right_shift(z, np.uint64(30), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, _M1, out=z)
    np.right_shift(z, np.uint64(27), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, _M2, out=z)
    np.right_shift(z, np.uint64(31), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    return z


def seed_key(seed: int) -> np.uint64:
    z = np.array([seed % (1 << 64)], dtype=np.uint64)
    return _finalise(z)[0]


def uniform_bits(seed: int, index: np.ndarray) -> np.ndarray:
    """The ``BITS``-bit random integer of each logical flat ``index`` (uint64 array in,
    uint32 array of the same shape out)."""
    index = np.asarray(index, dtype=np.uint64)
    z = index.reshape(-1) * GOLDEN
    z += seed_key(seed)
    z = _finalise(z)
    return (z >> np.uint64(64 - BITS)).astype(np.uint32).reshape(index.shape)


def uniform(seed: int, index: np.ndarray) -> np.ndarray:
    """u in [0, 1) for each logical flat ``index`` (float64)."""
    return uniform_bits(seed, index).astype(np.float64) / float(1 << BITS)


def keep_threshold(p: float) -> int:
    """Dropout keeps an element iff its ``uniform_bits`` >= this (i.e. u >= p)."""
    return math.ceil(p * (1 << BITS))


def block_indices(shape: Sequence[int], block: Sequence[slice]) -> Iterator[tuple[tuple[slice, ...], np.ndarray]]:
    """Logical flat indices of the block ``block`` of a tensor of logical ``shape``, in
    pieces of about a million elements: yields (index into the block, uint64 indices)."""
    starts = [s.start or 0 for s in block]
    counts = [(s.stop if s.stop is not None else n) - st for s, st, n in zip(block, starts, shape)]
    strides = [int(np.prod(shape[d + 1 :], dtype=np.int64)) for d in range(len(shape))]
    yield from _pieces(starts, counts, strides, 0, 0, ())


def _pieces(starts, counts, strides, d, base, prefix):
    rank = len(counts)
    if d == rank:
        yield prefix, np.asarray(base, dtype=np.uint64)
        return
    inner = int(np.prod(counts[d + 1 :], dtype=np.int64))
    if inner <= _CHUNK:
        tail = np.zeros((), dtype=np.uint64)
        for e in range(d + 1, rank):
            axis = (starts[e] + np.arange(counts[e], dtype=np.uint64)) * np.uint64(strides[e])
            tail = np.add.outer(tail, axis)
        rows = max(1, _CHUNK // max(inner, 1))
        for r0 in range(0, counts[d], rows):
            r1 = min(counts[d], r0 + rows)
            lead = (starts[d] + np.arange(r0, r1, dtype=np.uint64)) * np.uint64(strides[d]) + np.uint64(base)
            yield prefix + (slice(r0, r1),), np.add.outer(lead, tail)
        return
    for i in range(counts[d]):
        yield from _pieces(starts, counts, strides, d + 1, base + (starts[d] + i) * strides[d], prefix + (i,))
