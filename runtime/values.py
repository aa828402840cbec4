"""How the reference interpreter holds a distributed value: per-rank numpy buffers laid
out exactly as the value's placements say.

A ``DistValue`` has the value's ``!dist.tensor`` type, the mesh with its sizes fixed for
the run (a ``layout.MeshGrid``) and ``buffers``: global rank -> that rank's buffer, whose
shape is ``layout.local_shape`` of the logical shape at the rank's coordinates (its
block, ``layout.block_span``: ranks that do not divide a dim hold blocks of different
sizes, some maybe empty). Which ranks have a buffer:

* ``at<r>`` on an axis: only ranks whose coordinate on that axis is r;
* ``replicated``, ``sliced<d>`` and ``local``: every rank of the axis (``sliced``: its
  block, ``local``: its own full-shape value);
* ``unplaced``: the logical value is held by no rank. The interpreter still files it
  under every rank of the axis (as if replicated: all those entries are the same numpy
  array), so that a value unplaced on one axis and local or sliced on another keeps one
  entry per position on the other axes. ``holds`` (``layout.holds``) tells held buffers
  from these logical ones; statistics count only held buffers.

Values are immutable SSA values: replicas of a replicated value, and the entries of an
unplaced one, share one read-only numpy array, and blocks are views where possible.
Builtin scalars (``f32`` operands of ``dist.map``) are held as 0-d numpy arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
)
from xdsl.ir import Attribute

from distir.dialects import layout
from distir.dialects.dist import TensorType
from distir.dialects.layout import rank_coords  # noqa: F401 (the runtime's name for it)
from distir.dialects.placements import At, Local, Placement, Sliced

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

_FLOATS: dict[type, np.dtype] = {
    Float16Type: np.dtype(np.float16),
    BFloat16Type: BFLOAT16,
    Float32Type: np.dtype(np.float32),
    Float64Type: np.dtype(np.float64),
}
_INTS = {1: np.dtype(np.bool_), 8: np.dtype(np.int8), 16: np.dtype(np.int16), 32: np.dtype(np.int32), 64: np.dtype(np.int64)}


class UnsupportedType(Exception):
    """An element type the interpreter has no numpy representation for."""


def numpy_dtype(element_type: Attribute) -> np.dtype:
    """The numpy dtype holding elements of a builtin type: f16, bf16 (ml_dtypes), f32,
    f64, i1 (bool), i8, i16, i32, i64 (signless integers are stored signed)."""
    for cls, dt in _FLOATS.items():
        if isinstance(element_type, cls):
            return dt
    if isinstance(element_type, IntegerType) and element_type.width.data in _INTS:
        return _INTS[element_type.width.data]
    raise UnsupportedType(f"element type {element_type} is not supported by the interpreter")


def is_half(dtype: np.dtype) -> bool:
    return dtype == np.float16 or dtype == BFLOAT16


def is_float(dtype: np.dtype) -> bool:
    return is_half(dtype) or np.issubdtype(dtype, np.floating)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in: f32 for f16 and bf16 (rounded once per op, as GPUs
    do), the dtype itself otherwise."""
    return np.dtype(np.float32) if is_half(dtype) else np.dtype(dtype)


def value_dtype(t: Attribute) -> np.dtype:
    return numpy_dtype(t.element_type if isinstance(t, TensorType) else t)


# --------------------------------------------------------------------------------------
# Placements on one rank
# --------------------------------------------------------------------------------------


def stores(placements: Sequence[Placement], coords: Sequence[int]) -> bool:
    """Whether the interpreter files a buffer for the rank at ``coords``: every ``at<r>``
    axis matches (``unplaced`` axes are filed under every rank, see the module doc)."""
    return all(not isinstance(p, At) or coords[a] == p.rank.data for a, p in enumerate(placements))


def local_axes(placements: Sequence[Placement]) -> list[int]:
    return [a for a, p in enumerate(placements) if isinstance(p, Local)]


def local_nbytes(t: TensorType, sizes: Sequence[int], coords: Sequence[int] | None = None) -> int:
    """Bytes of the buffer of the rank at ``coords`` (without: of the largest block)."""
    return _local_nbytes(t, tuple(sizes), None if coords is None else tuple(coords))


@functools.lru_cache(maxsize=1 << 16)
def _local_nbytes(t: TensorType, sizes: tuple[int, ...], coords: tuple[int, ...] | None) -> int:
    """``local_nbytes`` once per type, mesh sizes and rank (the interpreter records every
    value's bytes on every rank: the tuner's checks asked the same ones thousands of
    times)."""
    shape = layout.local_shape(t.get_shape(), t.get_placements(), sizes, coords)
    return int(np.prod(shape, dtype=np.int64)) * value_dtype(t).itemsize


def sub_block(buf: np.ndarray, dim: int, index: int, count: int) -> np.ndarray:
    """Block ``index`` of ``count`` blocks of ``buf`` along ``dim`` (a view; the blocks of
    ``layout.dim_block``: the last ones may be shorter or empty)."""
    lo, n = layout.dim_block(buf.shape[dim], [count], [index])
    return buf[(slice(None),) * dim + (slice(lo, lo + n),)]


def split_blocks(buf: np.ndarray, dim: int, count: int) -> list[np.ndarray]:
    """The ``count`` blocks of ``buf`` along ``dim`` (``sub_block`` of each index)."""
    return [sub_block(buf, dim, i, count) for i in range(count)]


def frozen(a: np.ndarray) -> np.ndarray:
    """``a`` marked read-only (values are immutable; replicas share arrays)."""
    if a.flags.writeable:
        a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class DistValue:
    """A distributed tensor value: its type, its mesh for this run, and the buffer of
    every rank that files one (global rank -> buffer; see the module doc)."""

    type: TensorType
    grid: layout.MeshGrid
    buffers: Mapping[int, np.ndarray]

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self.type.get_placements()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.get_shape()

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.type.element_type)

    def local_shape(self, rank: int | None = None) -> tuple[int, ...]:
        """The shape of ``rank``'s buffer (without: of the largest block)."""
        coords = None if rank is None else rank_coords(self.grid)[rank]
        return layout.local_shape(self.shape, self.placements, self.grid.sizes, coords)

    def holds(self, rank: int) -> bool:
        """Whether ``rank`` really holds a buffer (not only a logical, unplaced one)."""
        return rank in self.buffers and layout.holds(self.placements, rank_coords(self.grid)[rank])

    def block(self, rank: int) -> tuple[slice, ...]:
        """The part of the logical tensor that ``rank``'s buffer covers."""
        return layout.block(self.shape, self.placements, self.grid.sizes, rank_coords(self.grid)[rank])

    def sliced_dims(self) -> set[int]:
        return {p.dim.data for p in self.placements if isinstance(p, Sliced)}


# --------------------------------------------------------------------------------------
# Element-wise reductions over ranks (dist.reduce and the reducing collectives)
# --------------------------------------------------------------------------------------


def reduce_arrays(arrays: Sequence[np.ndarray], kind: str, dtype: np.dtype) -> np.ndarray:
    """Element-wise ``kind`` (sum, prod, max, min, avg) of equally shaped arrays, in list
    order, computed in ``compute_dtype`` and rounded once to ``dtype``. ``avg`` is the
    sum divided by the number of arrays (truncated toward zero for integers); max and
    min propagate NaN. A single array is returned as it is."""
    if len(arrays) == 1:
        return arrays[0]
    cdt = compute_dtype(dtype)
    if kind == "max" or kind == "min":
        fn = np.maximum if kind == "max" else np.minimum
        acc = np.array(fn(arrays[0], arrays[1]))
        for a in arrays[2:]:
            fn(acc, a, out=acc)
        return acc
    fn = np.multiply if kind == "prod" else np.add
    with np.errstate(all="ignore"):
        acc = np.array(fn(arrays[0], arrays[1], dtype=cdt))
        for a in arrays[2:]:
            fn(acc, a, out=acc, dtype=cdt, casting="unsafe")
        if kind == "avg":
            n = len(arrays)
            if np.issubdtype(cdt, np.integer) or cdt == np.bool_:
                acc = np.asarray(np.sign(acc) * (np.abs(acc) // n)).astype(cdt)
            else:
                acc = np.divide(acc, cdt.type(n), dtype=cdt)
        elif kind not in ("sum", "prod"):
            raise ValueError(f"unknown reduction '{kind}'")
    return np.asarray(acc).astype(dtype, copy=False)
