"""Scattered tensors (CoCoNet §5.2, §6.4): one program applied to a list of separate,
non-contiguous tensors (a model's parameters, one buffer per layer) without packing
them into one buffer.

The program is written for one 1-D tensor (``%p: !dist.tensor<Nxf32, ...>``); at run time
an argument named in ``scatter`` is given as a list of 1-D pieces whose lengths add up
to N, and every scattered argument has the same piece lengths. A rank's buffer of such
an argument is a ``ScatteredArray``: the pieces (or, for a sliced argument, the parts of
them in the rank's block), each a numpy array of its own, seen as one 1-D array:

* kernels run over a **bucket table** of (piece, offset in the piece, length <= 1024,
  offset in the whole) rows (``bucket_table``; the ``Bucketed`` variant of the code
  generator): each bucket indexes its piece directly, so no thread searches for the
  piece an element is in;
* collectives work **per piece** (per-tensor views): ``segments`` cuts a range of the
  whole into the contiguous views of the pieces it covers, aligned across all the
  buffers of a call, and the shared-memory and MPI communicators apply the call to each
  (``local.reduce_into``, ``copy_into``; MPI calls per view).

    backend.run_scattered(module, "adam", {"g": [g0, g1, g2], "p": [p0, p1, p2], ...}, ranks=2)

returns the outputs with in-place results of scattered arguments as lists of pieces
again. ``distir-run --scatter-args g,p,m,v`` reads ``g.0``, ``g.1``, ... from the npz.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from distir.dialects import layout
from distir.dialects.diagnostics import InputRejected
from distir.dialects.dist import TensorType
from distir.dialects.placements import Local, Replicated, Sliced
from distir.runtime import bulk

BUCKET = 1024
"""Most elements in one bucket (CoCoNet: buckets of at most 2^10 elements)."""


class ScatteredArray:
    """A 1-D array stored as several pieces (numpy 1-D contiguous arrays, one dtype)."""

    def __init__(self, pieces: Sequence[np.ndarray]):
        if not pieces:
            raise ValueError("a scattered array needs at least one piece")
        self.pieces = [p.reshape(-1) for p in pieces]
        self.dtype = self.pieces[0].dtype
        self.lengths = tuple(int(p.size) for p in self.pieces)
        self.starts = tuple(int(s) for s in np.cumsum((0, *self.lengths))[:-1])
        self.size = sum(self.lengths)
        self.shape = (self.size,)
        self.ndim = 1

    def __repr__(self) -> str:
        return f"ScatteredArray({list(self.lengths)}, {self.dtype})"

    def reshape(self, *shape) -> ScatteredArray:
        if len(shape) == 1 and isinstance(shape[0], tuple):
            shape = shape[0]
        if tuple(shape) in ((-1,), (self.size,)):
            return self
        raise ValueError(f"a scattered array of {self.size} elements cannot be reshaped to {shape}")

    def view(self, lo: int, hi: int) -> ScatteredArray:
        """Elements lo..hi of the whole, as the parts of the pieces they are in."""
        out = []
        for start, p in zip(self.starts, self.pieces):
            a, b = max(lo, start), min(hi, start + p.size)
            if a < b:
                out.append(p[a - start : b - start])
        if not out:
            out = [self.pieces[0][:0]]
        return ScatteredArray(out)

    def __getitem__(self, index) -> ScatteredArray:
        if isinstance(index, tuple):
            if len(index) != 1:
                raise IndexError("scattered arrays are 1-D")
            index = index[0]
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise IndexError("scattered arrays take contiguous slices only")
        lo, hi, _ = index.indices(self.size)
        return self.view(lo, hi)

    def gather(self) -> np.ndarray:
        """A contiguous copy (for reporting results only)."""
        return np.concatenate(self.pieces)

    def cuts(self, lo: int, hi: int) -> list[int]:
        return [s for s in self.starts if lo < s < hi]


def is_scattered(x: Any) -> bool:
    return isinstance(x, ScatteredArray)


def segments(arrays: Sequence[Any], lo: int, hi: int) -> list[tuple[int, int, list[np.ndarray]]]:
    """Cut elements lo..hi of equally long 1-D buffers (numpy or scattered) into ranges
    where every buffer is one contiguous numpy view: [(start, stop, [view per buffer])]."""
    cuts = {lo, hi}
    for a in arrays:
        if isinstance(a, ScatteredArray):
            cuts.update(a.cuts(lo, hi))
    points = sorted(cuts)
    out = []
    for a, b in zip(points, points[1:]):
        views = []
        for x in arrays:
            if isinstance(x, ScatteredArray):
                (piece,) = x.view(a, b).pieces
                views.append(piece)
            else:
                views.append(x.reshape(-1)[a:b])
        out.append((a, b, views))
    return out


def copy_into(dst: Any, src: Any, stream_from: int | None = bulk.HOST_DEFAULT) -> None:
    """dst[:] = src for 1-D buffers of equal length (numpy or scattered); each contiguous
    piece of at least ``stream_from`` bytes with streaming stores (``bulk.copy``)."""
    n = dst.size
    for _, _, (d, s) in segments([dst, src], 0, n):
        if d.__array_interface__["data"][0] != s.__array_interface__["data"][0]:
            bulk.copy(d, s, stream_from)


_TABLES: dict[tuple[int, ...], np.ndarray] = {}


def bucket_table(lengths: Sequence[int]) -> np.ndarray:
    """Rows (piece, offset in the piece, length, offset in the whole) covering pieces of
    these lengths in buckets of at most ``BUCKET`` elements (cached per lengths)."""
    key = tuple(lengths)
    table = _TABLES.get(key)
    if table is None:
        rows = []
        start = 0
        for seg, n in enumerate(lengths):
            for off in range(0, n, BUCKET):
                rows.append((seg, off, min(BUCKET, n - off), start + off))
            start += n
        table = _TABLES[key] = np.array(rows or [(0, 0, 0, 0)], dtype=np.int64).reshape(-1, 4)
    return table


# --------------------------------------------------------------------------------------
# Scattered arguments and results
# --------------------------------------------------------------------------------------


def check_scatter(signature: Sequence[tuple[str, Any]], scatter: Mapping[str, Sequence[int]]) -> None:
    """Reject scattered arguments that are not 1-D tensors placed replicated, local or
    sliced<0>, or whose piece lengths differ or do not add up to the tensor's length."""
    names = {n: t for n, t in signature}
    lengths = None
    for name, pieces in scatter.items():
        if name not in names:
            raise InputRejected(f"--scatter-args: the function has no argument '{name}' (arguments: {', '.join(names)})")
        t = names[name]
        if not isinstance(t, TensorType) or t.rank != 1:
            raise InputRejected(f"--scatter-args: argument '{name}' must be a 1-D tensor, got {t}")
        for p in t.get_placements():
            if not isinstance(p, (Replicated, Local)) and not (isinstance(p, Sliced) and p.dim.data == 0):
                raise InputRejected(f"--scatter-args: argument '{name}' must be replicated, local or sliced<0>, got {p}")
        if sum(pieces) != t.get_shape()[0] or any(n <= 0 for n in pieces):
            raise InputRejected(
                f"--scatter-args: the pieces of '{name}' have {sum(pieces)} elements ({list(pieces)}), the argument has {t.get_shape()[0]}"
            )
        if lengths is not None and tuple(pieces) != lengths:
            raise InputRejected(f"--scatter-args: scattered arguments must have the same pieces: '{name}' has {list(pieces)}, others {list(lengths)}")
        lengths = tuple(pieces)


def rank_buffer(t: TensorType, pieces: Sequence[np.ndarray], grid: layout.MeshGrid, coords: Sequence[int]) -> ScatteredArray:
    """This rank's buffer of a scattered argument: its own copy of the parts of the
    pieces in its block (a ``local`` argument gives one value per rank: pieces stacked
    over the local axes, as the npz convention stacks the whole tensor)."""
    lead = tuple(coords[a] for a, p in enumerate(t.get_placements()) if isinstance(p, Local))
    own = [np.array(p[lead] if lead else p, copy=True).reshape(-1) for p in pieces]
    whole = ScatteredArray(own)
    blk = layout.block(t.get_shape(), t.get_placements(), grid.sizes, coords)[0]
    return whole.view(blk.start, blk.stop)


def split_pieces(a: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """A logical value (npz convention: local values stacked in front) cut into pieces."""
    edges = np.cumsum(lengths)[:-1]
    return list(np.split(a, edges, axis=a.ndim - 1))


def pieces_of(inputs: Mapping[str, Any], scatter_names: Sequence[str]) -> dict[str, list[np.ndarray]]:
    """The pieces of each scattered argument: a list of arrays, or the npz keys
    ``NAME.0``, ``NAME.1``, ... (the pieces in order)."""
    out = {}
    for name in scatter_names:
        v = inputs.get(name)
        if isinstance(v, (list, tuple)):
            out[name] = [np.asarray(x) for x in v]
            continue
        keys = []
        i = 0
        while f"{name}.{i}" in inputs:
            keys.append(f"{name}.{i}")
            i += 1
        if not keys:
            raise InputRejected(f"--scatter-args: no pieces for '{name}': give {name}.0, {name}.1, ... in the inputs")
        out[name] = [np.asarray(inputs[k]) for k in keys]
    return out


def piece_lengths(pieces: Sequence[np.ndarray]) -> tuple[int, ...]:
    return tuple(int(p.shape[-1]) if p.ndim else 1 for p in pieces)



# --------------------------------------------------------------------------------------
# Running programs on scattered arguments
# --------------------------------------------------------------------------------------


def prepare(program, inputs: Mapping[str, Any], scatter: Sequence[str], seed: int):
    """(complete logical inputs, pieces of each scattered argument): the pieces come
    from ``inputs`` (lists, or ``NAME.i`` keys); the logical value of a scattered
    argument is their concatenation (checked like any input)."""
    names = list(scatter)
    pieces = pieces_of(inputs, names)
    check_scatter(program.signature(), {n: piece_lengths(ps) for n, ps in pieces.items()})
    logical = {k: v for k, v in inputs.items() if not any(k == n or k.startswith(n + ".") for n in names)}
    for n, ps in pieces.items():
        logical[n] = np.concatenate([np.asarray(p) for p in ps], axis=-1)
    return program.prepare_inputs(logical, seed), pieces


def as_pieces(program, outputs: list[np.ndarray], pieces: Mapping[str, Sequence[np.ndarray]]) -> list[Any]:
    """Outputs with the in-place results of scattered arguments cut into pieces again."""
    names = [n for n, _ in program.signature()]
    out: list[Any] = list(outputs)
    for i, arg in program.inplace().items():
        if names[arg] in pieces:
            out[i] = split_pieces(outputs[i], piece_lengths(pieces[names[arg]]))
    return out


def logical_inputs(given: Mapping[str, np.ndarray], names: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[str, list[np.ndarray]]]:
    """(inputs with each scattered argument as the concatenation of its pieces, the
    pieces): how ``distir-run --scatter-args`` reads an npz with ``NAME.i`` keys."""
    pieces = pieces_of(given, names)
    logical = {k: v for k, v in given.items() if not any(k.startswith(n + ".") for n in names)}
    for n, ps in pieces.items():
        logical[n] = np.concatenate(ps, axis=-1)
    return logical, pieces


def flatten_outputs(outputs: Sequence[Any]) -> dict[str, np.ndarray]:
    """``result<i>`` arrays, ``result<i>.<j>`` for a result given as pieces (npz)."""
    out = {}
    for i, o in enumerate(outputs):
        if isinstance(o, list):
            for j, p in enumerate(o):
                out[f"result{i}.{j}"] = np.asarray(p)
        else:
            out[f"result{i}"] = np.asarray(o)
    return out
