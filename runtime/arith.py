"""Vectorised numpy semantics of the ``arith`` and ``math`` ops that ``dist.map`` bodies
(and builtin-scalar code outside them) are written in.

A body is evaluated once over whole arrays, not per element: each block argument is
bound to an operand's local buffer (or a 0-d array for a builtin scalar), the arrays
broadcast as numpy does, and every op maps arrays to arrays. ``SCALAR_OPS`` is the
dispatch table, keyed by op class.

Numerics:

* f16 and bf16 compute in f32 and round once per op to the op's result type (as GPUs
  do); f32 and f64 compute in their own type.
* Integer ops wrap in their width (i1, i8, i16, i32, i64); ``divsi``/``remsi`` truncate
  toward zero, ``floordivsi``/``ceildivsi`` round down/up, the unsigned ops (``divui``,
  ``remui``, ``cmpi ult``, ``shrui``, ``extui``, ``uitofp``, ...) reinterpret the bits as
  unsigned. Division by zero, undefined in arith, gives 0 here.
* ``remf`` is C's ``fmod`` (exact), ``bitcast`` reinterprets the bits (same width).
* ``cmpf`` follows IEEE ordered/unordered predicates; ``maximumf``/``minimumf``
  propagate NaN, ``maxnumf``/``minnumf`` ignore it; ``math.round`` rounds half away
  from zero, ``roundeven`` half to even; ``fma`` of f32 is computed in f64 and rounded
  once (exact product), of f64 as ``a*b+c``.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.ir import Block, Operation

from distir.dialects import scalar
from distir.runtime.values import compute_dtype, numpy_dtype

Handler = Callable[[Operation, list[np.ndarray]], list[np.ndarray]]

SCALAR_OPS: dict[type[Operation], Handler] = {}


class UnsupportedOp(Exception):
    """An op the interpreter cannot evaluate (the message names it)."""


def _register(*classes: type[Operation]):
    def deco(fn: Handler) -> Handler:
        for c in classes:
            SCALAR_OPS[c] = fn
        return fn

    return deco


def _out(op: Operation, i: int = 0) -> np.dtype:
    return numpy_dtype(op.results[i].type)


def _arr(x) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x)


# --------------------------------------------------------------------------------------
# Floats: compute in f32 for f16/bf16, round once to the result type
# --------------------------------------------------------------------------------------


def _float_op(fn: Callable[..., np.ndarray]) -> Handler:
    def handler(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
        out = _out(op)
        cdt = compute_dtype(out)
        with np.errstate(all="ignore"):
            if isinstance(fn, np.ufunc):
                r = fn(*args, dtype=cdt)
            else:
                r = fn(*[a.astype(cdt, copy=False) for a in args])
        return [_arr(r).astype(out, copy=False)]

    return handler


def _erf(x: np.ndarray) -> np.ndarray:
    flat = np.frompyfunc(pymath.erf, 1, 1)(x.astype(np.float64))
    return np.asarray(flat, dtype=np.float64).astype(x.dtype)


def _erfc(x: np.ndarray) -> np.ndarray:
    flat = np.frompyfunc(pymath.erfc, 1, 1)(x.astype(np.float64))
    return np.asarray(flat, dtype=np.float64).astype(x.dtype)


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    if a.dtype == np.float32:
        return (a.astype(np.float64) * b + c).astype(np.float32)
    return a * b + c


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.floor(np.abs(x) + x.dtype.type(0.5)), x)


for _cls, _fn in {
    arith.AddfOp: np.add,
    arith.SubfOp: np.subtract,
    arith.MulfOp: np.multiply,
    arith.DivfOp: np.divide,
    arith.NegfOp: np.negative,
    arith.MaximumfOp: np.maximum,
    arith.MinimumfOp: np.minimum,
    arith.MaxnumfOp: np.fmax,
    arith.MinnumfOp: np.fmin,
    math.SqrtOp: np.sqrt,
    math.RsqrtOp: lambda x: 1 / np.sqrt(x),
    math.ExpOp: np.exp,
    math.Exp2Op: np.exp2,
    math.ExpM1Op: np.expm1,
    math.LogOp: np.log,
    math.Log2Op: np.log2,
    math.Log10Op: np.log10,
    math.Log1pOp: np.log1p,
    math.PowFOp: np.power,
    math.TanhOp: np.tanh,
    math.SinOp: np.sin,
    math.CosOp: np.cos,
    math.TanOp: np.tan,
    math.AtanOp: np.arctan,
    math.Atan2Op: np.arctan2,
    math.CbrtOp: np.cbrt,
    math.ErfOp: _erf,
    scalar.ErfcOp: _erfc,
    scalar.RemFOp: np.fmod,
    math.AbsFOp: np.abs,
    math.CopySignOp: np.copysign,
    math.FmaOp: _fma,
    math.CeilOp: np.ceil,
    math.FloorOp: np.floor,
    math.TruncOp: np.trunc,
    math.RoundEvenOp: np.rint,
    math.RoundOp: _round_half_away,
}.items():
    SCALAR_OPS[_cls] = _float_op(_fn)


_CMPF: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    0: lambda a, b: np.zeros(np.broadcast_shapes(a.shape, b.shape), bool),
    1: np.equal,
    2: np.greater,
    3: np.greater_equal,
    4: np.less,
    5: np.less_equal,
    6: lambda a, b: np.not_equal(a, b) & ~np.isnan(a) & ~np.isnan(b),
    7: lambda a, b: ~np.isnan(a) & ~np.isnan(b),
    8: lambda a, b: np.equal(a, b) | np.isnan(a) | np.isnan(b),
    9: lambda a, b: np.greater(a, b) | np.isnan(a) | np.isnan(b),
    10: lambda a, b: np.greater_equal(a, b) | np.isnan(a) | np.isnan(b),
    11: lambda a, b: np.less(a, b) | np.isnan(a) | np.isnan(b),
    12: lambda a, b: np.less_equal(a, b) | np.isnan(a) | np.isnan(b),
    13: np.not_equal,
    14: lambda a, b: np.isnan(a) | np.isnan(b),
    15: lambda a, b: np.ones(np.broadcast_shapes(a.shape, b.shape), bool),
}


@_register(arith.CmpfOp)
def _cmpf(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
    assert isinstance(op, arith.CmpfOp)
    a, b = (x.astype(compute_dtype(x.dtype), copy=False) for x in args)
    with np.errstate(all="ignore"):
        return [_arr(_CMPF[op.predicate.value.data](a, b))]


# --------------------------------------------------------------------------------------
# Integers: wrap in the result width; unsigned ops reinterpret the bits
# --------------------------------------------------------------------------------------


def _unsigned(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.bool_:
        return a
    return a.astype(np.dtype(f"u{a.dtype.itemsize}"), copy=False)


def _divsi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe)
    fix = (np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))
    return np.where(b == 0, 0, q + fix)


def _int_op(fn: Callable[..., np.ndarray], unsigned: bool = False) -> Handler:
    def handler(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
        out = _out(op)
        xs = [_unsigned(a) if unsigned else a for a in args]
        with np.errstate(all="ignore"):
            r = _arr(fn(*xs))
        return [r.astype(out, copy=False)]

    return handler


def _safe(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``fn(a, b)``, 0 where ``b`` is 0."""

    def g(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(b == 0, 0, fn(a, np.where(b == 0, 1, b)))

    return g


def _bool_aware(fn_int, fn_bool):
    return lambda a, b: fn_bool(a, b) if a.dtype == np.bool_ else fn_int(a, b)


for _cls, (_fn, _uns) in {
    arith.AddiOp: (_bool_aware(np.add, np.logical_xor), False),
    arith.SubiOp: (_bool_aware(np.subtract, np.logical_xor), False),
    arith.MuliOp: (_bool_aware(np.multiply, np.logical_and), False),
    arith.DivSIOp: (_divsi, False),
    arith.DivUIOp: (_safe(np.floor_divide), True),
    arith.RemSIOp: (_safe(np.fmod), False),
    arith.RemUIOp: (_safe(np.remainder), True),
    arith.FloorDivSIOp: (_safe(np.floor_divide), False),
    arith.CeilDivSIOp: (_safe(lambda a, b: -np.floor_divide(-a, b)), False),
    arith.CeilDivUIOp: (_safe(lambda a, b: (a + b - 1) // b), True),
    arith.MaxSIOp: (np.maximum, False),
    arith.MinSIOp: (np.minimum, False),
    arith.MaxUIOp: (np.maximum, True),
    arith.MinUIOp: (np.minimum, True),
    arith.AndIOp: (np.bitwise_and, False),
    arith.OrIOp: (np.bitwise_or, False),
    arith.XOrIOp: (np.bitwise_xor, False),
    arith.ShLIOp: (np.left_shift, False),
    arith.ShRSIOp: (np.right_shift, False),
    arith.ShRUIOp: (np.right_shift, True),
    math.AbsIOp: (np.abs, False),
}.items():
    SCALAR_OPS[_cls] = _int_op(_fn, _uns)

_CMPI: dict[int, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], bool]] = {
    0: (np.equal, False),
    1: (np.not_equal, False),
    2: (np.less, False),
    3: (np.less_equal, False),
    4: (np.greater, False),
    5: (np.greater_equal, False),
    6: (np.less, True),
    7: (np.less_equal, True),
    8: (np.greater, True),
    9: (np.greater_equal, True),
}


@_register(arith.CmpiOp)
def _cmpi(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
    assert isinstance(op, arith.CmpiOp)
    fn, uns = _CMPI[op.predicate.value.data]
    a, b = (_unsigned(x) if uns else x for x in args)
    return [_arr(fn(a, b))]


@_register(arith.SelectOp)
def _select(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
    c, a, b = args
    return [_arr(np.where(c, a, b)).astype(_out(op), copy=False)]


@_register(arith.ConstantOp)
def _constant(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
    assert isinstance(op, arith.ConstantOp)
    v = op.value
    out = _out(op)
    if isinstance(v, FloatAttr):
        return [np.asarray(v.value.data, dtype=np.float64).astype(out)]
    if isinstance(v, IntegerAttr):
        n = v.value.data
        if out == np.bool_:
            return [np.asarray(bool(n & 1))]
        return [np.asarray(n).astype(out)]
    raise UnsupportedOp(f"'arith.constant' of {v} is not supported by the interpreter (scalar constants only)")


# --------------------------------------------------------------------------------------
# Casts
# --------------------------------------------------------------------------------------


def _cast(src_unsigned: bool = False, sign_extend_bool: bool = False) -> Handler:
    def handler(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
        (a,) = args
        out = _out(op)
        if a.dtype == np.bool_ and sign_extend_bool and out != np.bool_:
            return [_arr(-a.astype(out))]
        if out == np.bool_:  # trunci to i1 keeps the low bit
            return [_arr((a.astype(np.int64) & 1).astype(bool))]
        x = _unsigned(a) if src_unsigned else a
        with np.errstate(all="ignore"):
            return [_arr(x.astype(out))]

    return handler


for _cls, _h in {
    arith.ExtFOp: _cast(),
    arith.TruncFOp: _cast(),
    arith.SIToFPOp: _cast(sign_extend_bool=True),
    arith.UIToFPOp: _cast(src_unsigned=True),
    arith.FPToSIOp: _cast(),
    arith.FPToUIOp: _cast(),
    arith.ExtSIOp: _cast(sign_extend_bool=True),
    arith.ExtUIOp: _cast(src_unsigned=True),
    arith.TruncIOp: _cast(),
}.items():
    SCALAR_OPS[_cls] = _h


@_register(arith.BitcastOp)
def _bitcast(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
    """The bits of each element as the result type (of the same width)."""
    return [np.ascontiguousarray(args[0]).view(_out(op))]


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------


def eval_op(op: Operation, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate one arith/math op on arrays."""
    handler = SCALAR_OPS.get(type(op))
    if handler is None:
        raise UnsupportedOp(f"'{op.name}' is not supported by the interpreter")
    return handler(op, list(args))


def eval_body(block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a ``dist.map`` body over whole arrays; returns the yielded arrays."""
    env = dict(zip(block.args, args))
    for op in block.ops:
        if op is block.last_op:
            return [env[v] for v in op.operands]
        results = eval_op(op, [env[v] for v in op.operands])
        env.update(zip(op.results, results))
    return []
