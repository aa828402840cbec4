"""Values that differ between devices but are known, device by device, at import time.

Inside a manual computation, ``stablehlo.partition_id`` is each device's id, and what
JAX's ``axis_index`` (and distir's own sdy export) computes from it -- a device's
coordinate on a mesh axis, its rank in a group, the first index of its block -- is
scalar arithmetic on that id: ``divide``, ``remainder``, ``multiply``, ``add``,
``convert``, ``broadcast_in_dim``. The importer evaluates that arithmetic for every
device (``DevVal``: one value per distir rank, row-major over the mesh), with
StableHLO's integer semantics (unsigned types wrap modulo 2^N, signed ones in two's
complement, ``divide`` truncates toward zero, ``remainder`` takes the dividend's sign),
so that

* a ``dynamic_slice`` at such offsets is recognised as a device taking its block
  (``dist.take_slice``), and
* anything else that uses such a value gets it as a ``dist.map`` of the device's rank
  (``ManualTranslator.device_scalar`` in ``sdy.py``): an affine form of the device's
  coordinates, or a chain of selects on the rank.

    %pid = stablehlo.partition_id : tensor<ui32>              # DevVal (0, 1, 2, 3)
    %q = stablehlo.divide %pid, %c2 : tensor<ui32>             # DevVal (0, 0, 1, 1)
    %c = stablehlo.convert %q : (tensor<ui32>) -> tensor<i32>  # DevVal (0, 0, 1, 1)
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Scalar = int | float | bool

_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


@dataclass(frozen=True)
class DevVal:
    """``values[r]`` is distir rank r's element (splat over ``shape``), of StableHLO
    element type ``elt`` (``ui32`` included)."""

    values: tuple[Scalar, ...]
    elt: str
    shape: tuple[int, ...]

    def uniform(self) -> bool:
        return all(v == self.values[0] for v in self.values)


class FoldError(ValueError):
    """An operation the evaluation does not define (the message says which)."""


def is_int(elt: str) -> bool:
    return elt.startswith(("i", "ui"))


def width(elt: str) -> int:
    return int(elt.removeprefix("u").removeprefix("i"))


def wrap(v: Scalar, elt: str) -> Scalar:
    """``v`` as a value of ``elt``: integers wrap, floats round to the type."""
    if elt == "i1":
        return bool(v)
    if elt.startswith("ui"):
        return int(v) % (1 << width(elt))
    if elt.startswith("i"):
        w = width(elt)
        x = int(v) % (1 << w)
        return x - (1 << w) if x >= 1 << (w - 1) else x
    if elt in _FLOATS:
        with np.errstate(all="ignore"):
            return float(_FLOATS[elt](v))
    raise FoldError(f"per-device values of type {elt} are not supported")


def convert(v: Scalar, src: str, dst: str) -> Scalar:
    if dst == "i1":
        return bool(v)
    if is_int(dst):
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise FoldError(f"conversion of {v} to {dst}")
            v = int(v)  # toward zero
        return wrap(int(v), dst)
    return wrap(float(v), dst)


def _div(a: Scalar, b: Scalar, elt: str) -> Scalar:
    if not is_int(elt):
        with np.errstate(all="ignore"):
            return float(_FLOATS[elt](a) / _FLOATS[elt](b)) if elt in _FLOATS else wrap(a, elt)
    if b == 0:
        raise FoldError("integer division by zero")
    q = abs(int(a)) // abs(int(b))
    return -q if (a < 0) != (b < 0) else q


def _rem(a: Scalar, b: Scalar, elt: str) -> Scalar:
    if not is_int(elt):
        with np.errstate(all="ignore"):
            return float(np.fmod(_FLOATS[elt](a), _FLOATS[elt](b)))
    if b == 0:
        raise FoldError("integer remainder by zero")
    r = abs(int(a)) % abs(int(b))
    return -r if a < 0 else r


def _shift(kind: str) -> Callable[[Scalar, Scalar, str], Scalar]:
    def shift(a: Scalar, b: Scalar, elt: str) -> Scalar:
        w = width(elt)
        if kind == "left":
            return 0 if not 0 <= b < w else int(a) << int(b)
        if kind == "logical":
            return 0 if not 0 <= b < w else (int(a) % (1 << w)) >> int(b)
        return int(a) >> (int(b) if 0 <= b < w else w - 1)

    return shift


BINARY: dict[str, Callable[[Scalar, Scalar, str], Scalar]] = {
    "add": lambda a, b, e: a + b,
    "subtract": lambda a, b, e: a - b,
    "multiply": lambda a, b, e: a * b,
    "divide": _div,
    "remainder": _rem,
    "maximum": lambda a, b, e: max(a, b),
    "minimum": lambda a, b, e: min(a, b),
    "and": lambda a, b, e: a & b,
    "or": lambda a, b, e: a | b,
    "xor": lambda a, b, e: a ^ b,
    "shift_left": _shift("left"),
    "shift_right_logical": _shift("logical"),
    "shift_right_arithmetic": _shift("arithmetic"),
}
"""StableHLO's binary ops on one element (the result is wrapped to the type after)."""

UNARY: dict[str, Callable[[Scalar, str], Scalar]] = {
    "negate": lambda a, e: -a,
    "abs": lambda a, e: abs(a),
    "not": lambda a, e: (not a) if e == "i1" else ~int(a),
    "sign": lambda a, e: a if a != a or a == 0 else (1 if a > 0 else -1),
}

COMPARE: dict[str, Callable[[Scalar, Scalar], bool]] = {
    "EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge,
}  # fmt: skip


def elementwise(kind: str, args: Sequence[Sequence[Scalar]], elt: str, direction: str | None = None) -> tuple[Scalar, ...]:
    """``kind`` (an op name without ``stablehlo.``) applied device by device: ``args[i][r]``
    is operand i's element on rank r; the result of element type ``elt``."""
    n = max(len(a) for a in args)
    cols = [list(a) * n if len(a) == 1 else list(a) for a in args]
    out: list[Scalar] = []
    for r in range(n):
        xs = [c[r] for c in cols]
        if kind in BINARY and len(xs) == 2:
            if not is_int(elt) and kind in ("and", "or", "xor") or kind.startswith("shift") and not is_int(elt):
                raise FoldError(f"'{kind}' on {elt}")
            v = BINARY[kind](xs[0], xs[1], elt)
        elif kind in UNARY and len(xs) == 1:
            v = UNARY[kind](xs[0], elt)
        elif kind == "compare" and direction in COMPARE:
            v = COMPARE[direction](xs[0], xs[1])
        elif kind == "select" and len(xs) == 3:
            v = xs[1] if xs[0] else xs[2]
        elif kind == "clamp" and len(xs) == 3:
            v = min(max(xs[1], xs[0]), xs[2])
        else:
            raise FoldError(f"'stablehlo.{kind}' of per-device values is not supported")
        out.append(wrap(v, elt))
    return tuple(out)


def affine(values: Sequence[Scalar], sizes: Sequence[int]) -> tuple[int, list[int]] | None:
    """``(b, a)`` with ``values[r] == b + sum(a[k] * coord_k(r))`` for every rank r of a
    mesh of ``sizes`` (row-major coordinates), for integer values (or floats that are
    integers); None otherwise."""
    if any(isinstance(v, bool) or (isinstance(v, float) and not (v == v and abs(v) < 2**53 and v == int(v))) for v in values):
        return None
    b = int(values[0])
    strides = [int(np.prod(sizes[k + 1 :], dtype=np.int64)) for k in range(len(sizes))]
    a = [int(values[strides[k]]) - b if sizes[k] > 1 else 0 for k in range(len(sizes))]
    for r, v in enumerate(values):
        coords = [(r // strides[k]) % sizes[k] for k in range(len(sizes))]
        if b + sum(x * c for x, c in zip(a, coords)) != v:
            return None
    return b, a
