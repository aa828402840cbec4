"""StableHLO, as JAX prints it, into ``dist`` IR: the op subset, its syntax, its meaning.

The reader (``mlir_text.py``) reads the custom forms below and MLIR's generic form of
every op; ``Translator`` turns a function body into ``dist`` ops on one mesh. Outside a
``sdy.manual_computation`` every value is *global*: ``unplaced`` on every mesh axis (the
logical value, as JAX's program means it before XLA partitions it); the ``partition``
pass (``partition.py``) then gives every value a placement. Inside a manual computation
values are per-device (``sdy.py``).

====================================  ==============================================
StableHLO op (custom form printed)    dist IR
====================================  ==============================================
``constant dense<c> : T``             a splat; folded into the ``dist.map`` bodies that
                                      use it (``arith.constant``), else a ``dist.map``
                                      without operands; a non-splat one is a
                                      ``Literal`` (folded by data movement, else a
                                      select per element of ``dist.iota``)
``add subtract multiply divide``      ``dist.map`` with ``arith.addf``/``addi``, ...
``maximum minimum power remainder``   (``maximumf``, ``maxsi``, ``math.powf``,
``and or xor not shift_*``            ``remf``, ``remsi``, ``andi``, ...); integer
                                      division by zero and shifts beyond the width as
                                      StableHLO gives them (``INT_EDGES``); booleans:
                                      add/max are or, multiply/min and
``chlo.square erf erfc tan``          ``dist.map`` with ``mulf``, ``math.erf``, ``erfc``
``is_finite``  ``bitcast_convert``    ``cmpf one |x|, inf``; ``arith.bitcast``
``reduce_precision``                  integer ops on the bits (f32, f64)
``negate abs sign exponential log``   ``dist.map`` with ``arith``/``math`` ops
``exponential_minus_one``             (``math.exp``, ``math.log1p``, ``math.tanh``,
``log_plus_one tanh logistic sqrt``   ``math.rsqrt``, ...; ``logistic`` is
``rsqrt cbrt sine cosine tan floor``  1/(1+exp(-x)), ``sign`` a pair of selects)
``ceil round_nearest_even``
``round_nearest_afz``
``compare DIR, a, b, TYPE``           ``dist.map`` with ``arith.cmpf``/``cmpi`` (FLOAT,
                                      SIGNED, UNSIGNED; TOTALORDER only in jnp.sort's
                                      comparator)
``select p, a, b``  ``clamp lo, x, hi``  ``dist.map`` with ``arith.select`` / max+min
``convert x``                         ``dist.cast`` (nothing when the type is the same;
                                      ``uitofp``/``extui``/``fptoui`` maps for unsigned)
``broadcast_in_dim x, dims = [..]``   kept lazy: a ``dist.map`` operand broadcasts as
                                      numpy does, after a ``dist.reshape`` (and
                                      ``dist.transpose``) when ``dims`` need it;
                                      materialised by an identity ``dist.map``
``reshape x``                         ``dist.reshape``
``transpose x, dims = [..]``          ``dist.transpose``
``dot_general a, b, batching_dims =   ``dist.matmul`` on ``[B.., M, K] x [B.., K, N]``,
  [..] x [..], contracting_dims =     with ``dist.transpose``/``dist.reshape`` around
  [..] x [..]``  ``dot a, b``         it when the dims are elsewhere or several
``reduce(x init: c) applies OP        ``dist.reduce_tensor`` sum / prod / max / min
  across dimensions = [..]``          (then OP with ``c`` unless ``c`` is OP's
  (or a ``reducer`` region of one     identity); of booleans: min/max of 0/1 as i32;
  binary op)                          argmax/argmin (two operands, JAX's comparator):
                                      max/min, then the least index reaching it
``sort`` (jnp.sort's comparator)      ``dist.sort`` (stable, NaN last)
``iota dim = d``                      ``dist.iota``
``slice x [a:b:s, ...]``              ``dist.extract_slice``
``dynamic_slice x, i.., sizes = [..]``  constant starts: ``dist.extract_slice``; starts that
                                      differ per device (from ``partition_id``) and are
                                      each device's block of a group of mesh axes:
                                      ``dist.take_slice`` (``sdy.py``); clamped as StableHLO
``gather`` (row lookups,              ``dist.embedding_bag`` of bags of one row, indices
  ``take_along_axis``)                clamped into the table, batching dims merged into
                                      one table dim (``_h_gather``, ``RowLookup``)
``scatter`` (adding rows)             ``dist.scatter_add`` (+ the operand unless +0)
``dynamic_update_slice``              known starts: slices and ``dist.concat``
``partition_id`` (manual bodies)      a value known per device (``device_values.py``):
                                      the scalar arithmetic on it is evaluated at import
``concatenate a, b, dim = d``         ``dist.concat``
``func.call @f(...)`` / ``call``      the body of the private ``@f``, inlined
``func.return`` / ``return``          the function's results
``while``, ``case``, ``if``,          unrolled / chosen or selected at import
``dynamic_update_slice``              (``control_flow.py``)
====================================  ==============================================

Any other op, attribute form or type is a diagnostic at the op naming it. Element types:
f16, bf16, f32, f64, i1, i8, i16, i32, i64, and ui8 .. ui64 as the signless integers of
their width (``SIGNLESS``; the sign-dependent ops take arith's unsigned forms from the
op's declared types). StableHLO's type rules are checked before translation
(``stablehlo_verify.py``).
"""

from __future__ import annotations

import bisect
import math as pymath
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    f16,
    f32,
    f64,
    i1,
    i8,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from distir.dialects import dist, scalar
from distir.dialects.dist import TensorType
from distir.dialects.placements import UNPLACED
from distir.frontends import device_values
from distir.frontends.device_values import DevVal, FoldError
from distir.frontends.mlir_text import Block as AstBlock
from distir.frontends.mlir_text import (
    Dense,
    HexBits,
    Module,
    Opaque,
    OpNode,
    Reader,
    TensorT,
    Type,
    Typed,
    Value,
)

bf16 = BFloat16Type()

ELEMENT = {"f16": f16, "bf16": bf16, "f32": f32, "f64": f64, "i1": i1, "i8": i8, "i16": i16, "i32": i32, "i64": i64}
UNSIGNED = ("ui8", "ui16", "ui32", "ui64")
SIGNLESS = {"ui8": i8, "ui16": i16, "ui32": i32, "ui64": i64}
"""Unsigned element types are computed on as MLIR's arith does: as the signless integers of
their width (the same bits); the ops whose meaning depends on the sign (divide,
remainder, maximum, minimum, convert, compare UNSIGNED) take the unsigned form
(``divui``, ``remui``, ``maxui``, ``uitofp``, ``extui``, ``cmpi ult``, ...) from the op's
declared types."""


def element_of(name: str) -> Attribute | None:
    """The dist element type of a StableHLO element type name (unsigned: signless)."""
    return ELEMENT.get(name) or SIGNLESS.get(name)


def signless_name(name: str) -> str:
    return name.removeprefix("u") if name in UNSIGNED else name


# ======================================================================================
# Custom forms (the reader's hooks)
# ======================================================================================


def _same_type_sig(r: Reader, node: OpNode) -> None:
    """``: T`` (every operand and the result have type T) or ``: (T, S) -> U``."""
    r.expect(":", f" before the type of '{node.name}'")
    if r.at("("):
        node.in_types, node.out_types = r.function_type()
    else:
        t = r.type()
        node.in_types, node.out_types = [t] * len(node.operands), [t]
    r.check_counts(node)


def _elementwise(r: Reader, node: OpNode) -> None:
    node.operands = r.values()
    _same_type_sig(r, node)


def _compare(r: Reader, node: OpNode) -> None:
    node.attrs["comparison_direction"] = r.ident("a comparison direction (EQ, NE, LT, LE, GT, GE)")
    r.expect(",", " after the comparison direction")
    node.operands = [r.value()]
    r.expect(",", " between the operands")
    node.operands.append(r.value())
    if r.accept(","):
        node.attrs["compare_type"] = r.ident("a comparison type (FLOAT, SIGNED, UNSIGNED)")
    r.expect(":", " before the type of 'stablehlo.compare'")
    node.in_types, node.out_types = r.function_type()
    r.check_counts(node)


def _select(r: Reader, node: OpNode) -> None:
    node.operands = r.values()
    r.expect(":", " before the type of 'stablehlo.select'")
    if r.at("("):
        node.in_types, node.out_types = r.function_type()
    else:
        pred = r.type()
        r.expect(",", " between the predicate type and the result type")
        t = r.type()
        node.in_types, node.out_types = [pred, t, t], [t]
    r.check_counts(node)


def _with_dims(key: str) -> Callable[[Reader, OpNode], None]:
    """``%x, dims = [..] : (T) -> U`` (broadcast_in_dim, transpose)."""

    def hook(r: Reader, node: OpNode) -> None:
        node.operands = [r.value()]
        r.expect(",", " after the operand")
        r.keyword("dims")
        r.expect("=")
        node.attrs[key] = r.int_list("the dims")
        _typed(r, node)

    return hook


def _typed(r: Reader, node: OpNode) -> None:
    r.expect(":", f" before the type of '{node.name}'")
    node.in_types, node.out_types = r.function_type()
    r.check_counts(node)


def _unary_typed(r: Reader, node: OpNode) -> None:
    """``%x : (T) -> U`` or ``%x : T`` (reshape, convert)."""
    node.operands = [r.value()]
    _same_type_sig(r, node)


def _constant(r: Reader, node: OpNode) -> None:
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    node.attrs["value"] = r.dense()
    d: Dense = node.attrs["value"]
    if d.type is None:
        raise r.error("expected ': tensor<...>' after the constant")
    node.out_types = [d.type]
    r.check_counts(node)


def _iota(r: Reader, node: OpNode) -> None:
    r.keyword("dim")
    r.expect("=")
    node.attrs["iota_dimension"] = r.integer("the iota dim")
    r.expect(":", " before the type of 'stablehlo.iota'")
    node.out_types = [r.type()]
    r.check_counts(node)


def _operands_then(r: Reader, node: OpNode, keyword: str, key: str, read: Callable[[], Any], form: str) -> None:
    """``%a, %b, .., KEYWORD = X : (..) -> T``: the operands, X (read by ``read``) as
    attribute ``key``, the type."""
    node.operands = [r.value()]
    while r.accept(","):
        if r.peek().kind == "ssa":
            node.operands.append(r.value())
            continue
        r.keyword(keyword)
        r.expect("=")
        node.attrs[key] = read()
        break
    if key not in node.attrs:
        raise r.error(f"expected '{form}' in '{node.name}'")
    _typed(r, node)


def _concatenate(r: Reader, node: OpNode) -> None:
    _operands_then(r, node, "dim", "dimension", lambda: r.integer("the concatenation dim"), ", dim = N")


def _slice(r: Reader, node: OpNode) -> None:
    node.operands = [r.value()]
    r.expect("[", " before the slice ranges")
    start, limit, stride = [], [], []
    if not r.accept("]"):
        while True:
            start.append(r.integer("a start index"))
            r.expect(":", " between start and limit")
            limit.append(r.integer("a limit index"))
            stride.append(r.integer("a stride") if r.accept(":") else 1)
            if r.accept("]"):
                break
            r.expect(",", " or ']' between slice ranges")
    node.attrs.update(start_indices=start, limit_indices=limit, strides=stride)
    _typed(r, node)


def _operands_typed(r: Reader, node: OpNode) -> None:
    """``%a, %b, .. : (..) -> T`` (dynamic_update_slice)."""
    node.operands = r.values()
    _typed(r, node)


def _dynamic_slice(r: Reader, node: OpNode) -> None:
    """``%x, %i0, %i1, sizes = [..] : (T, tensor<i32>, ..) -> U``."""
    _operands_then(r, node, "sizes", "slice_sizes", lambda: r.int_list("the slice sizes"), ", sizes = [..]")


def _nullary(r: Reader, node: OpNode) -> None:
    """``: T`` (partition_id)."""
    r.expect(":", f" before the type of '{node.name}'")
    node.out_types = [r.type()]
    r.check_counts(node)


def _dims_pair(r: Reader) -> tuple[list[int], list[int]]:
    a = r.int_list("the lhs dims")
    r.keyword("x", " between the lhs and rhs dims")
    return a, r.int_list("the rhs dims")


def _dot_general(r: Reader, node: OpNode) -> None:
    node.operands = [r.value()]
    r.expect(",")
    node.operands.append(r.value())
    dn: dict[str, list[int]] = {"lhs_batching_dimensions": [], "rhs_batching_dimensions": [], "lhs_contracting_dimensions": [], "rhs_contracting_dimensions": []}
    while r.accept(","):
        key = r.ident("batching_dims, contracting_dims, precision or algorithm")
        r.expect("=")
        if key == "batching_dims":
            dn["lhs_batching_dimensions"], dn["rhs_batching_dimensions"] = _dims_pair(r)
        elif key == "contracting_dims":
            dn["lhs_contracting_dimensions"], dn["rhs_contracting_dimensions"] = _dims_pair(r)
        elif key == "precision":
            r.balanced("[", "]")
        elif key == "algorithm":
            r.balanced("<", ">")
        else:
            raise r.error(f"unknown clause '{key}' in 'stablehlo.dot_general'")
    node.attrs["dot_dimension_numbers"] = dn
    _typed(r, node)


def _dot(r: Reader, node: OpNode) -> None:
    node.operands = [r.value()]
    r.expect(",")
    node.operands.append(r.value())
    if r.accept(","):
        r.keyword("precision")
        r.expect("=")
        r.balanced("[", "]")
    _typed(r, node)


def _reduce(r: Reader, node: OpNode) -> None:
    """``reduce(%x init: %c)[, (%y init: %d)] applies OP across dimensions = [..] : T`` or
    ``... across dimensions = [..] : T reducer(%a: T, %b: T) [(%c, %d)] { body }``."""
    inputs, inits = [], []
    while True:
        r.expect("(", " before a reduce operand")
        inputs.append(r.value())
        r.keyword("init")
        r.expect(":")
        inits.append(r.value())
        r.expect(")")
        if not r.accept(","):
            break
    node.operands = inputs + inits
    if r.peek().text == "applies":
        r.next()
        t = r.peek()
        node.attrs["applies"] = r.ident("the reducing op")
        node.attrs["applies_span"] = (t.start, t.end)
    r.keyword("across")
    r.keyword("dimensions")
    r.expect("=")
    node.attrs["dimensions"] = r.int_list("the reduced dims")
    _typed(r, node)
    if "applies" not in node.attrs:
        r.keyword("reducer", " (the reduce body)")
        args_a, args_b = [], []
        for _ in range(len(inputs)):
            r.expect("(")
            a = r.block_args(")")
            if len(a) != 2:
                raise r.error("each reducer argument group has two arguments")
            args_a.append(a[0])
            args_b.append(a[1])
        body = r.region()
        body[0].args = args_a + args_b
        node.regions.append(body)


def _chlo_unary(r: Reader, node: OpNode) -> None:
    """``chlo.erfc %x : tensor<..> -> tensor<..>`` (chlo's custom form), or ``: T``."""
    node.operands = [r.value()]
    r.expect(":", f" before the type of '{node.name}'")
    if r.at("("):
        node.in_types, node.out_types = r.function_type()
    else:
        t = r.type()
        node.in_types, node.out_types = [t], [r.type() if r.accept("->") else t]
    r.check_counts(node)


def _reduce_precision(r: Reader, node: OpNode) -> None:
    """``%x, format = e5m10 : T``."""
    node.operands = [r.value()]
    r.expect(",", " after the operand")
    r.keyword("format")
    r.expect("=")
    t = r.peek()
    fmt = r.ident("a format eEmM (exponent and mantissa bits)")
    m = re.fullmatch(r"e(\d+)m(\d+)", fmt)
    if m is None:
        raise r.error(f"expected a format eEmM (exponent and mantissa bits), got '{fmt}'", t.start, t.end)
    node.attrs["exponent_bits"], node.attrs["mantissa_bits"] = int(m.group(1)), int(m.group(2))
    _same_type_sig(r, node)


def _return(r: Reader, node: OpNode) -> None:
    node.operands = r.values()
    if node.operands:
        r.expect(":", " before the types of the returned values")
        node.in_types = [r.type()]
        while r.accept(","):
            node.in_types.append(r.type())
    r.check_counts(node)


def _call(r: Reader, node: OpNode) -> None:
    node.sym = r.symbol("the callee (@name)")
    r.expect("(", " after the callee")
    node.operands = r.values()
    r.expect(")")
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    _typed(r, node)


def _func(r: Reader, node: OpNode) -> None:
    """``func.func [public|private] @name(%a: T {attrs}, ...) [-> (T {attrs}, ...)]
    [attributes {..}] { body }``."""
    if r.peek().kind == "ident" and r.peek().text in ("public", "private", "nested"):
        node.attrs["visibility"] = r.next().text
    node.sym = r.symbol("the function name (@name)")
    r.expect("(", " to open the arguments")
    args: list[tuple[Value, Type]] = []
    if not r.accept(")"):
        while True:
            v = r.value()
            r.expect(":", " after an argument name")
            t = r.type()
            args.append((v, t))
            node.arg_attrs.append(r.attr_dict() if r.at("{") else {})
            r.skip_location()
            if r.accept(")"):
                break
            r.expect(",", " or ')' after an argument")
    node.in_types = [t for _, t in args]
    if r.accept("->"):
        if r.accept("("):
            if not r.accept(")"):
                while True:
                    node.out_types.append(r.type())
                    node.res_attrs.append(r.attr_dict() if r.at("{") else {})
                    if r.accept(")"):
                        break
                    r.expect(",", " or ')' after a result type")
        else:
            node.out_types.append(r.type())
            node.res_attrs.append({})
    if r.peek().kind == "ident" and r.peek().text == "attributes":
        r.next()
        node.attrs.update(r.attr_dict())
    if not r.at("{"):
        raise r.error(f"function @{node.sym} has no body (declarations are not supported)")
    body = r.region()
    if body[0].args:
        raise r.error("a function body takes its arguments from the signature, not a block label")
    body[0].args = args
    node.regions.append(body)


HOOKS: dict[str, Callable[[Reader, OpNode], None]] = {
    "func.func": _func,
    "func.return": _return,
    "return": _return,
    "stablehlo.return": _return,
    "func.call": _call,
    "call": _call,
    "stablehlo.constant": _constant,
    "stablehlo.compare": _compare,
    "stablehlo.select": _select,
    "stablehlo.broadcast_in_dim": _with_dims("broadcast_dimensions"),
    "stablehlo.transpose": _with_dims("permutation"),
    "stablehlo.reshape": _unary_typed,
    "stablehlo.convert": _unary_typed,
    "stablehlo.iota": _iota,
    "stablehlo.concatenate": _concatenate,
    "stablehlo.slice": _slice,
    "stablehlo.dynamic_slice": _dynamic_slice,
    "stablehlo.partition_id": _nullary,
    "stablehlo.dot_general": _dot_general,
    "stablehlo.dot": _dot,
    "stablehlo.reduce": _reduce,
    "stablehlo.dynamic_update_slice": _operands_typed,
    "stablehlo.is_finite": _unary_typed,
    "stablehlo.bitcast_convert": _unary_typed,
    "stablehlo.reduce_precision": _reduce_precision,
    **{f"chlo.{n}": _chlo_unary for n in ("square", "erf", "erfc", "tan", "is_inf", "is_pos_inf", "is_neg_inf")},
}

FLOAT_BINARY: dict[str, type[Operation]] = {
    "add": arith.AddfOp,
    "subtract": arith.SubfOp,
    "multiply": arith.MulfOp,
    "divide": arith.DivfOp,
    "maximum": arith.MaximumfOp,
    "minimum": arith.MinimumfOp,
    "power": xmath.PowFOp,
    "atan2": xmath.Atan2Op,
    "remainder": scalar.RemFOp,
}
INT_BINARY: dict[str, type[Operation]] = {
    "add": arith.AddiOp,
    "subtract": arith.SubiOp,
    "multiply": arith.MuliOp,
    "divide": arith.DivSIOp,
    "remainder": arith.RemSIOp,
    "maximum": arith.MaxSIOp,
    "minimum": arith.MinSIOp,
    "and": arith.AndIOp,
    "or": arith.OrIOp,
    "xor": arith.XOrIOp,
    "shift_left": arith.ShLIOp,
    "shift_right_arithmetic": arith.ShRSIOp,
    "shift_right_logical": arith.ShRUIOp,
}
FLOAT_UNARY: dict[str, type[Operation]] = {
    "exponential": xmath.ExpOp,
    "exponential_minus_one": xmath.ExpM1Op,
    "log": xmath.LogOp,
    "log_plus_one": xmath.Log1pOp,
    "tanh": xmath.TanhOp,
    "sqrt": xmath.SqrtOp,
    "rsqrt": xmath.RsqrtOp,
    "cbrt": xmath.CbrtOp,
    "sine": xmath.SinOp,
    "cosine": xmath.CosOp,
    "tan": xmath.TanOp,
    "floor": xmath.FloorOp,
    "ceil": xmath.CeilOp,
    "abs": xmath.AbsFOp,
    "negate": arith.NegfOp,
    "round_nearest_even": xmath.RoundEvenOp,
    "round_nearest_afz": xmath.RoundOp,
}
UNARY = (*FLOAT_UNARY, "not", "sign", "logistic")
BINARY = (*FLOAT_BINARY, *INT_BINARY)
for _name in (*UNARY, *BINARY, "clamp"):
    HOOKS.setdefault(f"stablehlo.{_name}", _elementwise)

CMPF = {"EQ": "oeq", "NE": "une", "LT": "olt", "LE": "ole", "GT": "ogt", "GE": "oge"}
CMPI_SIGNED = {"EQ": "eq", "NE": "ne", "LT": "slt", "LE": "sle", "GT": "sgt", "GE": "sge"}
CMPI_UNSIGNED = {"EQ": "eq", "NE": "ne", "LT": "ult", "LE": "ule", "GT": "ugt", "GE": "uge"}

REDUCE_KINDS = {"stablehlo.add": "sum", "stablehlo.multiply": "prod", "stablehlo.maximum": "max", "stablehlo.minimum": "min", "stablehlo.and": "and", "stablehlo.or": "or"}


# ======================================================================================
# Values during translation
# ======================================================================================


@dataclass(frozen=True)
class Const:
    """A splat constant of ``shape`` (kept out of the IR until a non-map op needs it)."""

    value: float | int | bool
    elt: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Bcast:
    """``broadcast_in_dim`` of ``src`` (a dist value or a constant): result dim
    ``dims[i]`` is source dim ``i``; kept lazy so that ``dist.map`` broadcasts it."""

    src: SSAValue
    dims: tuple[int, ...]
    shape: tuple[int, ...]


@dataclass(eq=False)
class PatchLog:
    """The blocks written into one lazily updated value, in order, and an index of them
    all (start -> (size, value), non-overlapping; ``starts`` sorted). Every ``Patched``
    that shares the log is the base with a prefix of the writes."""

    writes: list[tuple[int, int, Any]] = field(default_factory=list)
    index: dict[int, tuple[int, Any]] = field(default_factory=dict)
    starts: list[int] = field(default_factory=list)

    def add(self, start: int, size: int, value: Any) -> None:
        if start not in self.index:
            bisect.insort(self.starts, start)
        self.index[start] = (size, value)
        self.writes.append((start, size, value))


@dataclass(eq=False)
class Patched:
    """``dynamic_update_slice`` at offsets known at import time, kept lazy: ``base`` with
    the first ``n`` blocks of ``log`` written along ``dim`` (each block spans every other
    dim). A scan's stacked outputs are such values; a ``dynamic_slice`` that reads one
    block back takes it directly, anything else gets one ``dist.concat``
    (``Translator.materialize``), so a loop of L iterations writes O(L) data, not O(L^2).
    A write to the newest value of a log extends the log (O(log L)); a write to an older
    one copies its prefix first."""

    base: Any
    dim: int
    shape: tuple[int, ...]
    elt: Attribute
    log: PatchLog = field(default_factory=PatchLog)
    n: int = 0
    _view: tuple[dict[int, tuple[int, Any]], list[int]] | None = None

    def view(self) -> tuple[dict[int, tuple[int, Any]], list[int]]:
        """The blocks of this value: start -> (size, value), and the sorted starts."""
        if self.n == len(self.log.writes):
            return self.log.index, self.log.starts
        if self._view is None:
            old = PatchLog()
            for w in self.log.writes[: self.n]:
                old.add(*w)
            self._view = (old.index, old.starts)
        return self._view

    def write(self, start: int, size: int, value: Any) -> Patched | None:
        """This value with [start, start + size) along ``dim`` replaced by ``value``; None
        when the block overlaps a written one without being it."""
        index, starts = self.view()
        i = bisect.bisect_left(starts, start)
        prev_end = starts[i - 1] + index[starts[i - 1]][0] if i > 0 else 0
        same = i < len(starts) and starts[i] == start and index[start][0] == size
        if not same and not (prev_end <= start and (i == len(starts) or start + size <= starts[i])):
            return None
        log = self.log
        if self.n != len(log.writes):
            log = PatchLog()
            for w in self.log.writes[: self.n]:
                log.add(*w)
        log.add(start, size, value)
        return Patched(self.base, self.dim, self.shape, self.elt, log, len(log.writes))

    def block(self, starts: Sequence[int], sizes: Sequence[int]) -> Any:
        """The written block that a slice at ``starts`` of ``sizes`` reads whole (a scan
        reading back what an earlier scan wrote), or None."""
        d = self.dim
        hit = self.view()[0].get(starts[d])
        if hit is None or hit[0] != sizes[d]:
            return None
        if any(starts[k] != 0 or sizes[k] != self.shape[k] for k in range(len(self.shape)) if k != d):
            return None
        return hit[1]


@dataclass(frozen=True, eq=False)
class Literal:
    """A constant of several values (``dense<[13, 15, 26, 6]>``), kept out of the IR while
    the ops that only move data (slice, reshape, transpose, broadcast_in_dim, convert)
    fold it; a slice of equal values is a ``Const``. Materialised (at most
    ``LITERAL_LIMIT`` elements) as a ``dist.map`` of the element's flat index."""

    values: tuple  # row-major
    elt: str
    shape: tuple[int, ...]

    def array(self) -> Any:
        return np.array(self.values, dtype=object).reshape(self.shape)

    @staticmethod
    def of(array: Any, elt: str) -> Literal | Const:
        values = tuple(array.reshape(-1).tolist())
        if values and all(_same_number(v, values[0]) for v in values):
            return Const(values[0], elt, tuple(array.shape))
        return Literal(values, elt, tuple(array.shape))


LITERAL_LIMIT = 256
"""The most elements of a non-splat constant that becomes a dist value (a select per
element in a map body); larger ones are a diagnostic."""

Val = SSAValue | Const | Bcast | DevVal | Literal | Patched
LAZY_USERS = ("stablehlo.return", "func.return", "return", "sdy.return", "func.call", "call", "stablehlo.while", "stablehlo.optimization_barrier")
"""Ops that take a ``Patched`` operand as it is (the others get it materialised)."""


class ImportError_(Exception):
    """Internal marker; never escapes (see ``fail``)."""


def shape_of(v: Val) -> tuple[int, ...]:
    if isinstance(v, (Const, Bcast, DevVal, Literal, Patched)):
        return v.shape
    t = v.type
    return t.get_shape() if isinstance(t, TensorType) else ()


def elt_name(t: Attribute) -> str:
    for k, v in ELEMENT.items():
        if v == t:
            return k
    return str(t)


def decode_scalar(value: Any, elt: str) -> float | int | bool:
    """One element of a dense literal as a Python number of its element type."""
    if isinstance(value, HexBits):
        bits = int(value, 16)
        if elt in ("f32",):
            return struct.unpack(">f", (bits & 0xFFFFFFFF).to_bytes(4, "big"))[0]
        if elt == "f64":
            return struct.unpack(">d", (bits & (2**64 - 1)).to_bytes(8, "big"))[0]
        if elt == "f16":
            return struct.unpack(">e", (bits & 0xFFFF).to_bytes(2, "big"))[0]
        if elt == "bf16":
            return struct.unpack(">f", ((bits & 0xFFFF) << 16).to_bytes(4, "big"))[0]
        return int(value, 16)
    if elt == "i1":
        return bool(value)
    if elt.startswith(("i", "ui")):
        if isinstance(value, float):
            raise ValueError(f"{value} is not an integer")
        width = int(elt.removeprefix("u")[1:])
        v = int(value)
        if not (0 if elt.startswith("u") else -(2 ** (width - 1))) <= v < 2**width:
            raise ValueError(f"{v} is out of range for {elt}")
        return v
    if isinstance(value, bool):
        return float(value)
    return float(value)


def flat(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [x for v in value for x in flat(v)]
    return [value]


# ======================================================================================
# Translation
# ======================================================================================

Handler = Callable[["Translator", OpNode], list[Val]]


class Translator:
    """Translates function bodies into ``dist`` ops appended to ``self.block``.

    ``placements(shape)`` gives the placements of a new global value (``unplaced`` on
    every axis); ``sdy.py`` supplies the mesh, the handlers of its own ops and the
    per-device mode of manual computations."""

    def __init__(self, module: Module, mesh: str, naxes: int, spans: dict[Operation, Span], extra: dict[str, Handler] | None = None):
        self.module = module
        self.mesh = mesh
        self.naxes = naxes
        self.spans = spans
        self.funcs = {op.sym: op for op in module.ops if op.name == "func.func" and op.sym}
        self.handlers: dict[str, Handler] = dict(HANDLERS)
        self.handlers.update(extra or {})
        self.env: dict[str, Val] = {}
        self.stype: dict[str, str] = {}  # the StableHLO element type of each name in env
        self.block: Block = Block()
        self.node: OpNode | None = None
        self.inlining: list[str] = []
        self.depth = 0
        self.visited = 0  # source ops translated (loops count each iteration: control_flow.py)
        self._patched: dict[Patched, SSAValue] = {}

    # ------------------------------------------------------------------ diagnostics
    def error(self, msg: str, node: OpNode | None = None, span: Span | None = None) -> ParseError:
        node = node or self.node
        if span is None:
            span = node.span if node is not None else Span(0, 1, self.module.source)
        return ParseError(span, msg)

    # ------------------------------------------------------------------ types
    def global_type(self, shape: Sequence[int], elt: Attribute) -> TensorType:
        return TensorType(tuple(shape), elt, self.mesh, [UNPLACED] * self.naxes)

    def elt(self, name: str, node: OpNode | None = None) -> Attribute:
        t = element_of(name)
        if t is None:
            raise self.error(f"element type '{name}' is not supported", node)
        return t

    def tensor_t(self, t: Type, what: str, node: OpNode | None = None) -> TensorT:
        if not isinstance(t, TensorT):
            raise self.error(f"{what} must be a tensor type, got {t}", node)
        return t

    def new_type_like(self, operands: Sequence[SSAValue], shape: Sequence[int], elt: Attribute) -> TensorType:
        """The type of a new value computed from ``operands`` (the placements of the first
        tensor operand: every operand of a global computation is unplaced)."""
        for v in operands:
            if isinstance(v.type, TensorType):
                return v.type.with_(shape=tuple(shape), element_type=elt)
        return self.fresh_type(shape, elt)

    def fresh_type(self, shape: Sequence[int], elt: Attribute) -> TensorType:
        """The type of a value computed from no operand (a constant, an iota)."""
        return self.global_type(shape, elt)

    # ------------------------------------------------------------------ emission
    def emit(self, op: Operation) -> Operation:
        self.block.add_op(op)
        if self.node is not None:
            self.spans[op] = self.node.span
        return op

    def emit_checked(self, build: Callable[[], Operation]) -> Operation:
        """Build an op with inferred types; a rule the op rejects is a diagnostic at the
        source op (it means the program is outside what distir can express)."""
        try:
            op = build()
        except VerifyException as e:
            raise self.error(f"'{self.node.name if self.node else '?'}' cannot be expressed in dist IR: {e}") from None
        return self.emit(op)

    # ------------------------------------------------------------------ values
    def lookup(self, v: Value) -> Val:
        got = self.env.get(v.name)
        if got is None:
            raise ParseError(v.span, f"%{v.name} is not defined here")
        return got

    def bind(self, node: OpNode, values: Sequence[Val]) -> None:
        if len(values) != len(node.results):
            raise self.error(f"'{node.name}' gives {len(values)} value(s) for {len(node.results)} result(s)", node)
        for k, (r, v) in enumerate(zip(node.results, values)):
            if r.name in self.env:
                raise ParseError(r.span, f"%{r.name} is defined twice")
            self.env[r.name] = v
            t = node.out_types[k] if k < len(node.out_types) else None
            if isinstance(t, TensorT):
                self.stype[r.name] = t.elt
            if isinstance(v, SSAValue) and v.name_hint is None:
                v.name_hint = value_name(r.name, node.name)

    def operand(self, node: OpNode, i: int) -> Val:
        v = self.lookup(node.operands[i])
        if isinstance(v, Patched) and node.name not in LAZY_USERS and not (node.name in ("stablehlo.dynamic_update_slice", "stablehlo.dynamic_slice") and i == 0):
            v = self.materialize(v)
        t = node.in_types[i] if i < len(node.in_types) else None
        if isinstance(t, TensorT) and tuple(t.shape) != shape_of(v):
            raise ParseError(node.operands[i].span, f"%{node.operands[i].name} has shape {_fmt(shape_of(v))}, the op's type says {t}")
        declared = self.stype.get(node.operands[i].name)
        if isinstance(v, (Const, DevVal)):
            declared = v.elt
        if isinstance(t, TensorT) and declared is not None and declared != t.elt:
            raise ParseError(node.operands[i].span, f"%{node.operands[i].name} has element type {declared}, the op's type says {t}")
        if isinstance(t, TensorT) and not isinstance(v, (Const, DevVal)) and element_of(t.elt) is not None and elt_name(_elt_of(v)) != signless_name(t.elt):
            raise ParseError(node.operands[i].span, f"%{node.operands[i].name} has element type {elt_name(_elt_of(v))}, the op's type says {t}")
        return v

    def materialize(self, v: Val) -> SSAValue:
        """A dist value for ``v`` (a constant or a lazy broadcast becomes a ``dist.map``)."""
        if isinstance(v, SSAValue):
            return v
        if isinstance(v, Patched):
            return self.materialize_patched(v)
        if isinstance(v, DevVal):
            x = self.device_scalar(v)
            return x if v.shape == () else self.materialize(Bcast(x, (), v.shape))
        if isinstance(v, Const):
            elt = self.elt(v.elt)
            return self.map_op([], [], v.shape, elt, lambda args: [self.const_op(v.value, elt)])
        if isinstance(v, Literal):
            return self.literal(v)
        if _only_unit_dims_added(shape_of(v.src), v.dims, v.shape):
            return self.reshape(v.src, v.shape)
        operand = self.broadcastable(v)
        elt = _elt_of(v)
        return self.map_op([operand], [elt], v.shape, elt, lambda args: [args[0]])

    def materialize_patched(self, v: Patched) -> SSAValue:
        """The blocks of ``v`` and the parts of its base between them, concatenated along
        ``v.dim`` (one ``dist.concat``, made once per value)."""
        done = self._patched.get(v)
        if done is not None:
            return done
        pieces: list[SSAValue] = []
        pos = 0

        def base_part(lo: int, hi: int) -> None:
            if lo >= hi:
                return
            shape = list(v.shape)
            shape[v.dim] = hi - lo
            if isinstance(v.base, Const):
                pieces.append(self.materialize(Const(v.base.value, v.base.elt, tuple(shape))))
                return
            b = self.materialize(v.base)
            offsets = [lo if d == v.dim else 0 for d in range(len(shape))]
            pieces.append(self.emit_checked(lambda: dist.ExtractSliceOp.get(b, offsets, shape, [1] * len(shape))).results[0])

        index, starts = v.view()
        for start in starts:
            size, value = index[start]
            base_part(pos, start)
            pieces.append(self.materialize(value))
            pos = start + size
        base_part(pos, v.shape[v.dim])
        if len(pieces) == 1:
            out = pieces[0]
        else:
            xs = self.unify(pieces, v.shape)
            out = self.emit_checked(lambda: dist.ConcatOp.of(*xs, dim=v.dim)).results[0]
        self._patched[v] = out
        return out

    def literal(self, v: Literal) -> SSAValue:
        """A non-splat constant: element k (row-major) is a select on its flat index."""
        n = len(v.values)
        if n > LITERAL_LIMIT:
            raise self.error(f"non-splat constants of more than {LITERAL_LIMIT} elements are not supported (this one has {n})")
        elt = self.elt(v.elt)
        index = self.emit_checked(lambda: dist.IotaOp.make([], [self.fresh_type((n,), i32)], dim=0)).results[0]

        def body(a: list[SSAValue]) -> list[Operation]:
            ops: list[Operation] = [last := self.const_op(v.values[-1], elt)]
            picked = last.results[0]
            for k in range(n - 2, -1, -1):
                c, kc = self.const_op(v.values[k], elt), self.const_op(k, i32)
                eq = arith.CmpiOp(a[0], kc.results[0], "eq")
                sel = arith.SelectOp(eq, c.results[0], picked)
                ops += [c, kc, eq, sel]
                picked = sel.results[0]
            return ops

        return self.reshape(self.map_op([index], [i32], (n,), elt, body), v.shape)

    def broadcastable(self, v: Bcast) -> SSAValue:
        """``v.src`` in a shape that numpy broadcasting takes to ``v.shape``."""
        src, dims, shape = v.src, list(v.dims), v.shape
        k, r = len(dims), len(shape)
        if dims == list(range(r - k, r)):
            return src
        if dims != sorted(dims):
            order = sorted(range(k), key=lambda i: dims[i])
            src = self.transpose(src, order)
            dims = [dims[i] for i in order]
        src_shape = shape_of(src)
        lo = dims[0] if dims else r
        new = [1] * (r - lo)
        for i, d in enumerate(dims):
            new[d - lo] = src_shape[i]
        return self.reshape(src, new)

    def device_scalar(self, v: DevVal) -> SSAValue:
        """A per-device value as a 0-d dist value (only manual computations have them)."""
        raise self.error(f"'{self.node.name if self.node else '?'}' uses a per-device value outside a manual computation")

    def device_slice(self, x: SSAValue, dims: list[tuple[int, tuple[int, ...], int]]) -> SSAValue:
        """``x`` sliced at per-device offsets: (dim, start on each rank, size) per dim."""
        raise self.error("'stablehlo.dynamic_slice' at per-device offsets outside a manual computation")

    # ------------------------------------------------------------------ dist builders
    def const_op(self, value: float | int | bool, elt: Attribute) -> Operation:
        if isinstance(elt, AnyFloat):
            return arith.ConstantOp(FloatAttr(float(value), elt))
        assert isinstance(elt, IntegerType)
        v = int(value)
        w = elt.width.data
        if w == 1:
            v = 1 if v else 0
        else:  # an unsigned value as the signed integer of the same bits
            v = (v + 2 ** (w - 1)) % 2**w - 2 ** (w - 1)
        return arith.ConstantOp(IntegerAttr(v, elt))

    def map_op(
        self,
        operands: Sequence[SSAValue],
        arg_elts: Sequence[Attribute],
        shape: Sequence[int],
        elt: Attribute,
        body: Callable[[list[SSAValue]], list[Operation]],
    ) -> SSAValue:
        """``dist.map`` of ``operands`` to one result of ``shape`` x ``elt``; ``body`` gets
        the block arguments and returns the ops computing the element (the last op's
        first result is yielded, or the argument itself when it returns one)."""
        operands = self.unify(list(operands), shape)
        block = Block(arg_types=list(arg_elts))
        try:
            ops = body(list(block.args))
        except (TypeError, ValueError, VerifyException) as e:
            raise self.error(f"'{self.node.name if self.node else '?'}' on these element types: {e}") from None
        for op in ops:
            if isinstance(op, Operation):
                block.add_op(op)
        last = ops[-1]
        result = last.results[0] if isinstance(last, Operation) else last
        block.add_op(dist.YieldOp.create(operands=[result]))
        t = self.new_type_like(operands, shape, elt)
        return self.emit_checked(lambda: dist.MapOp.make(operands, [t], [Region(block)])).results[0]

    def unify(self, operands: list[SSAValue], shape: Sequence[int]) -> list[SSAValue]:
        """Operands of one local computation with matching placements (global values are
        all unplaced; ``sdy.py`` overrides this for per-device values)."""
        return operands

    def transpose(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        if list(perm) == list(range(len(perm))):
            return x
        return self.emit_checked(lambda: dist.TransposeOp.of(x, perm=list(perm), sizes=self.sizes())).results[0]

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        if tuple(shape) == shape_of(x):
            return x
        t = x.type
        assert isinstance(t, TensorType)
        new = dist.ReshapeOp.result_type(t, tuple(shape), self.sizes())
        return self.emit_checked(lambda: dist.ReshapeOp.make([x], [new])).results[0]

    def sizes(self) -> tuple[int | None, ...] | None:
        return None

    # ------------------------------------------------------------------ functions
    def translate_body(self, body: AstBlock, args: Sequence[Val]) -> list[Val]:
        """Translate a function body whose block arguments are ``args``; the values it
        returns. The body sees only its arguments (a function is isolated from above)."""
        saved, saved_types = self.env, self.stype
        self.env, self.stype = {}, {}
        try:
            return self.translate_region(body, args)
        finally:
            self.env, self.stype = saved, saved_types

    def translate_region(self, body: AstBlock, args: Sequence[Val]) -> list[Val]:
        """Translate a region that also sees the values defined around it (a loop body,
        a branch); the names it defines are forgotten after it, so that it can be
        translated again (each iteration of an unrolled loop) at a cost linear in its
        size."""
        own = [v.name for v, _ in body.args] + [r.name for node in body.ops for r in node.results]
        for (v, t), a in zip(body.args, args):
            if v.name in self.env:
                raise ParseError(v.span, f"%{v.name} is defined twice")
            self.env[v.name] = a
            if isinstance(t, TensorT):
                self.stype[v.name] = t.elt
        try:
            for node in body.ops:
                self.visited += 1
                if node.name in ("func.return", "return", "stablehlo.return", "sdy.return"):
                    return [self.lookup_typed(node, i) for i in range(len(node.operands))]
                self.node = node
                folded = fold_device(self, node)
                if folded is None:
                    folded = fold_constant(self, node)
                if folded is not None:
                    self.bind(node, folded)
                    continue
                handler = self.handlers.get(node.name)
                if handler is None:
                    raise self.error(f"unsupported op '{node.name}'" + _hint(node.name), node)
                self.bind(node, handler(self, node))
            raise self.error("the body does not end with a return", None, body.ops[-1].span if body.ops else None)
        finally:
            for name in own:
                self.env.pop(name, None)
                self.stype.pop(name, None)

    def lookup_typed(self, node: OpNode, i: int) -> Val:
        self.node = node
        return self.operand(node, i)


def _valid_hint(name: str) -> bool:
    return bool(name) and (name[0].isalpha() or name[0] == "_") and "#" not in name


def value_name(source: str, op_name: str) -> str | None:
    """The name an imported value prints with: its name in the source when that reads
    as a name (``%cst``, ``%arg0``), else the kind of op that computed it
    (``stablehlo.dot_general`` gives ``%dot_general``, the printer numbers repeats:
    ``%dot_general_1``), so that pipelines name values as ``targets=dot_general_1``
    rather than by a number that the next pass renumbers."""
    if _valid_hint(source):
        return source
    kind = op_name.rsplit(".", 1)[-1]
    return kind if _valid_hint(kind) and kind.replace("_", "").isalnum() else None


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _hint(name: str) -> str:
    if name.startswith(("mhlo.", "chlo.")):
        return " (run JAX's lowering without custom calls, or express it in StableHLO)"
    return ""


def _only_unit_dims_added(src: Sequence[int], dims: Sequence[int], shape: Sequence[int]) -> bool:
    """``broadcast_in_dim`` that only inserts dims of size 1 (a reshape)."""
    if list(dims) != sorted(dims) or len(set(dims)) != len(dims):
        return False
    if any(shape[d] != s for d, s in zip(dims, src)):
        return False
    return all(shape[d] == 1 for d in range(len(shape)) if d not in dims)


# ======================================================================================
# Handlers, one per op of the subset
# ======================================================================================

HANDLERS: dict[str, Handler] = {}


def registers(table: dict[str, Handler]):
    """A decorator ``@handles("dialect.op", ...)`` adding a handler to ``table``."""

    def handles(*names: str):
        def deco(fn: Handler) -> Handler:
            for n in names:
                table[n] = fn
            return fn

        return deco

    return handles


handles = registers(HANDLERS)


def _result(tr: Translator, node: OpNode, i: int = 0) -> TensorT:
    if i >= len(node.out_types):
        raise tr.error(f"'{node.name}' must have a result type", node)
    return tr.tensor_t(node.out_types[i], "the result", node)


def _attr_int(tr: Translator, node: OpNode, key: str) -> int:
    v = node.attrs.get(key)
    if isinstance(v, Typed):
        v = v.value
    if isinstance(v, bool) or not isinstance(v, int):
        raise tr.error(f"'{node.name}' needs an integer attribute '{key}'", node)
    return v


def _attr_ints(tr: Translator, node: OpNode, key: str, default: list[int] | None = None) -> list[int]:
    v = node.attrs.get(key)
    if v is None and default is not None:
        return default
    if isinstance(v, Dense):
        v = flat(v.value) if v.value is not None else []
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise tr.error(f"'{node.name}' needs an integer list attribute '{key}'", node)
    return list(v)


@handles("stablehlo.constant")
def _h_constant(tr: Translator, node: OpNode) -> list[Val]:
    d = node.attrs.get("value")
    t = _result(tr, node)
    if t.elt not in UNSIGNED:
        tr.elt(t.elt, node)
    if not isinstance(d, Dense) or d.value is None:
        raise tr.error("'stablehlo.constant' needs a dense value", node)
    items = flat(d.value)
    try:
        values = [decode_scalar(x, t.elt) for x in items]
    except (ValueError, OverflowError, struct.error) as e:
        raise tr.error(f"bad constant: {e}", node) from None
    n = pymath.prod(t.shape)
    if len(values) not in (1, n):
        raise tr.error(f"the constant has {len(values)} values for a {t} of {n} elements", node)
    if any(not _same_number(v, values[0]) for v in values):
        return [Literal(tuple(values), t.elt, t.shape)]
    return [Const(values[0], t.elt, t.shape)]


def _np_array(values: Sequence[Any], shape: Sequence[int]) -> Any:
    return np.array(list(values), dtype=object).reshape(tuple(shape))


def _same_number(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and pymath.isnan(a) and pymath.isnan(b):
        return True
    return a == b


def elementwise(tr: Translator, node: OpNode, scalar: Callable[[list[SSAValue], list[Attribute]], list[Operation]], out_elt: Attribute | None = None) -> list[Val]:
    """``dist.map`` computing ``scalar`` of the operands' elements; constants become body
    constants, lazy broadcasts broadcast."""
    t = _result(tr, node)
    shape = t.shape
    elt = out_elt or tr.elt(t.elt, node)
    operands: list[SSAValue] = []
    arg_elts: list[Attribute] = []
    slots: list[tuple[str, Any]] = []
    vals = [tr.operand(node, i) for i in range(len(node.operands))]
    for i, v in enumerate(vals):
        in_t = tr.tensor_t(node.in_types[i], f"operand {i}", node) if i < len(node.in_types) else None
        if in_t is not None and in_t.shape not in (shape, ()) and node.name not in ("stablehlo.clamp", "stablehlo.select"):
            raise tr.error(f"operand {i} of '{node.name}' has shape {_fmt(in_t.shape)}, the result {_fmt(shape)}", node)
        if isinstance(v, Const):
            slots.append(("const", v))
            continue
        if isinstance(v, DevVal) and v.uniform():
            slots.append(("const", Const(v.values[0], v.elt, v.shape)))
            continue
        if isinstance(v, DevVal):
            v = tr.device_scalar(v)
        if isinstance(v, Literal):
            v = tr.materialize(v)
        if isinstance(v, Bcast) and isinstance(v.src, Const):  # pragma: no cover - consts broadcast to consts
            slots.append(("const", v.src))
            continue
        if isinstance(v, Bcast):
            x = tr.broadcastable(v)
        else:
            x = v
            if shape_of(x) not in (shape, ()):
                raise tr.error(f"operand {i} of '{node.name}' has shape {_fmt(shape_of(x))}, the result {_fmt(shape)}", node)
        slots.append(("arg", len(operands)))
        operands.append(x)
        arg_elts.append(x.type.element_type if isinstance(x.type, TensorType) else x.type)  # type: ignore[attr-defined]
    in_elts = [tr.elt(v.elt, node) if isinstance(v, (Const, DevVal)) else _elt_of(v) for v in vals]

    def body(args: list[SSAValue]) -> list[Operation]:
        ops: list[Operation] = []
        scalars: list[SSAValue] = []
        for (kind, what), e in zip(slots, in_elts):
            if kind == "const":
                c = tr.const_op(what.value, e)
                ops.append(c)
                scalars.append(c.results[0])
            else:
                scalars.append(args[what])
        ops += scalar(scalars, in_elts)
        return ops

    return [tr.map_op(operands, arg_elts, shape, elt, body)]


def _elt_of(v: Val) -> Attribute:
    if isinstance(v, (Const, DevVal, Literal)):
        return element_of(v.elt)  # type: ignore[return-value]
    if isinstance(v, Patched):
        return v.elt
    if isinstance(v, Bcast):
        return v.src.type.element_type  # type: ignore[attr-defined]
    t = v.type
    return t.element_type if isinstance(t, TensorType) else t  # type: ignore[return-value]


def _is_float(elt: Attribute) -> bool:
    return isinstance(elt, AnyFloat)


def _arity(tr: Translator, node: OpNode, n: int) -> tuple[str, Attribute]:
    """The op's kind (its name without the dialect) and result element type, after
    checking it has ``n`` operands."""
    if len(node.operands) != n:
        raise tr.error(f"'{node.name}' takes {'one operand' if n == 1 else f'{n} operands'}", node)
    return node.name.removeprefix("stablehlo."), tr.elt(_result(tr, node).elt, node)


@handles(*(f"stablehlo.{n}" for n in BINARY))
def _h_binary(tr: Translator, node: OpNode) -> list[Val]:
    kind, elt = _arity(tr, node, 2)
    table = FLOAT_BINARY if _is_float(elt) else INT_BINARY
    cls = table.get(kind)
    if cls is None:
        what = "float" if _is_float(elt) else "integer"
        raise tr.error(f"'{node.name}' on {what} elements is not supported", node)
    unsigned = _result(tr, node).elt in UNSIGNED
    if elt == i1:
        cls = BOOL_BINARY.get(kind)
        if cls is None:
            raise tr.error(f"'{node.name}' is not defined on i1 (booleans) in StableHLO", node)
    elif not _is_float(elt) and (unsigned and kind in UINT_EDGES or kind in INT_EDGES):
        build = UINT_EDGES[kind] if unsigned and kind in UINT_EDGES else INT_EDGES[kind]
        return elementwise(tr, node, lambda a, e: build(tr, a[0], a[1], elt))
    return elementwise(tr, node, lambda a, e: [cls(a[0], a[1])])


BOOL_BINARY: dict[str, type[Operation]] = {
    "add": arith.OrIOp,
    "maximum": arith.OrIOp,
    "multiply": arith.AndIOp,
    "minimum": arith.AndIOp,
    "and": arith.AndIOp,
    "or": arith.OrIOp,
    "xor": arith.XOrIOp,
}
"""StableHLO's binary ops on booleans: ``add``/``maximum`` are logical or, ``multiply``/
``minimum`` logical and; the others are not defined on i1."""


# StableHLO's integer ops where arith leaves the result undefined, with the values XLA
# gives (and JAX therefore computes): x / 0 = -1, x % 0 = x (INT_MIN / -1 = INT_MIN and
# INT_MIN % -1 = 0 wrap as arith's ops do); a shift by the bit width or more (or by a
# negative amount) gives 0, or the sign in every bit for an arithmetic right shift. The
# shift amount is masked to the width inside, so no backend meets an undefined shift.


def _guarded_division(cls: type[Operation], by_zero: Callable[[SSAValue, Translator, Attribute], list[Operation]]):
    def build(tr: Translator, a: SSAValue, b: SSAValue, elt: Attribute) -> list[Operation]:
        zero, one = tr.const_op(0, elt), tr.const_op(1, elt)
        is_zero = arith.CmpiOp(b, zero.results[0], "eq")
        safe = arith.SelectOp(is_zero, one.results[0], b)
        q = cls(a, safe)
        edge = by_zero(a, tr, elt)
        return [zero, one, is_zero, safe, q, *edge, arith.SelectOp(is_zero, edge[-1].results[0] if edge else a, q)]

    return build


def _guarded_shift(cls: type[Operation], beyond: str):
    def build(tr: Translator, a: SSAValue, b: SSAValue, elt: Attribute) -> list[Operation]:
        assert isinstance(elt, IntegerType)
        w = elt.width.data
        width, mask = tr.const_op(w, elt), tr.const_op(w - 1, elt)
        inside = arith.CmpiOp(b, width.results[0], "ult")
        amount = arith.AndIOp(b, mask.results[0])
        shifted = cls(a, amount)
        if beyond == "sign":
            edge: Operation = arith.ShRSIOp(a, mask.results[0])
        else:
            edge = tr.const_op(0, elt)
        return [width, mask, inside, amount, shifted, edge, arith.SelectOp(inside, shifted, edge.results[0])]

    return build


INT_EDGES: dict[str, Callable[[Translator, SSAValue, SSAValue, Attribute], list[Operation]]] = {
    "divide": _guarded_division(arith.DivSIOp, lambda a, tr, elt: [tr.const_op(-1, elt)]),
    "remainder": _guarded_division(arith.RemSIOp, lambda a, tr, elt: []),
    "shift_left": _guarded_shift(arith.ShLIOp, "zero"),
    "shift_right_logical": _guarded_shift(arith.ShRUIOp, "zero"),
    "shift_right_arithmetic": _guarded_shift(arith.ShRSIOp, "sign"),
}
UINT_EDGES: dict[str, Callable[[Translator, SSAValue, SSAValue, Attribute], list[Operation]]] = {
    "divide": _guarded_division(arith.DivUIOp, lambda a, tr, elt: [tr.const_op(-1, elt)]),
    "remainder": _guarded_division(arith.RemUIOp, lambda a, tr, elt: []),
    "maximum": lambda tr, a, b, elt: [arith.MaxUIOp(a, b)],
    "minimum": lambda tr, a, b, elt: [arith.MinUIOp(a, b)],
}
"""The ops on unsigned integers whose meaning is not the signed one's (x / 0 is all ones)."""


@handles(*(f"stablehlo.{n}" for n in UNARY))
def _h_unary(tr: Translator, node: OpNode) -> list[Val]:
    kind, elt = _arity(tr, node, 1)
    if _is_float(elt):
        if kind in FLOAT_UNARY:
            cls = FLOAT_UNARY[kind]
            return elementwise(tr, node, lambda a, e: [cls(a[0])])
        if kind == "logistic":

            def logistic(a: list[SSAValue], e: list[Attribute]) -> list[Operation]:
                one = tr.const_op(1.0, elt)
                neg = arith.NegfOp(a[0])
                ex = xmath.ExpOp(neg)
                den = arith.AddfOp(one, ex)
                return [one, neg, ex, den, arith.DivfOp(one, den)]

            return elementwise(tr, node, logistic)
        if kind == "sign":
            return elementwise(tr, node, lambda a, e: _sign(tr, a[0], elt, True))
        raise tr.error(f"'{node.name}' on float elements is not supported", node)
    assert isinstance(elt, IntegerType)
    if kind == "not":
        return elementwise(tr, node, lambda a, e: _not(tr, a[0], elt))
    if elt == i1:
        raise tr.error(f"'{node.name}' is not defined on i1 (booleans) in StableHLO", node)
    if kind == "negate":

        def neg(a: list[SSAValue], e: list[Attribute]) -> list[Operation]:
            z = tr.const_op(0, elt)
            return [z, arith.SubiOp(z, a[0])]

        return elementwise(tr, node, neg)
    if kind == "abs":
        return elementwise(tr, node, lambda a, e: [xmath.AbsIOp(a[0])])
    if kind == "sign":
        return elementwise(tr, node, lambda a, e: _sign(tr, a[0], elt, False))
    raise tr.error(f"'{node.name}' on integer elements is not supported", node)


@handles("chlo.square", "chlo.erf", "chlo.erfc", "chlo.tan")
def _h_chlo_unary(tr: Translator, node: OpNode) -> list[Val]:
    """chlo's element-wise ops JAX emits: ``square`` (``x.var()``: x * x), ``erf`` and
    ``erfc`` (exact GELU), ``tan``."""
    kind, elt = _arity(tr, node, 1)
    if kind == "chlo.square":
        mul = arith.MulfOp if _is_float(elt) else arith.MuliOp
        if elt == i1:
            mul = arith.AndIOp
        return elementwise(tr, node, lambda a, e: [mul(a[0], a[0])])
    if not _is_float(elt):
        raise tr.error(f"'{node.name}' takes float elements", node)
    cls = {"chlo.erf": xmath.ErfOp, "chlo.erfc": scalar.ErfcOp, "chlo.tan": xmath.TanOp}[kind]
    return elementwise(tr, node, lambda a, e: [cls(a[0])])


@handles("stablehlo.is_finite", "chlo.is_inf", "chlo.is_pos_inf", "chlo.is_neg_inf")
def _h_float_class(tr: Translator, node: OpNode) -> list[Val]:
    """``is_finite``: |x| compared (ordered, not equal) with +inf, false for NaN and
    infinities; ``is_inf``/``is_pos_inf``/``is_neg_inf``: equal to +-inf."""
    if len(node.operands) != 1:
        raise tr.error(f"'{node.name}' takes one operand", node)
    if _result(tr, node).elt != "i1":
        raise tr.error(f"'{node.name}' gives i1 (booleans), the result type says {_result(tr, node)}", node)
    in_elt = tr.elt(tr.tensor_t(node.in_types[0], "operand 0", node).elt, node)
    if not _is_float(in_elt):
        raise tr.error(f"'{node.name}' takes float elements", node)
    kind = node.name.split(".", 1)[1]

    def test(a: list[SSAValue], e: list[Attribute]) -> list[Operation]:
        inf = tr.const_op(float("-inf") if kind == "is_neg_inf" else float("inf"), in_elt)
        x: Operation | SSAValue = a[0]
        ops: list[Operation] = [inf]
        if kind in ("is_finite", "is_inf"):
            x = xmath.AbsFOp(a[0])
            ops.append(x)
        xv = x.results[0] if isinstance(x, Operation) else x
        return [*ops, arith.CmpfOp(xv, inf.results[0], "one" if kind == "is_finite" else "oeq")]

    return elementwise(tr, node, test, out_elt=i1)


BITCASTS = {("f32", "i32"), ("i32", "f32"), ("f64", "i64"), ("i64", "f64")}
"""``bitcast_convert`` pairs read (32 and 64 bits, signed or unsigned; an integer to an
integer of its width is the value itself)."""


@handles("stablehlo.bitcast_convert")
def _h_bitcast(tr: Translator, node: OpNode) -> list[Val]:
    """The bits of each element read as another type of the same width (``arith.bitcast``)."""
    t = _result(tr, node)
    src = tr.tensor_t(node.in_types[0], "operand 0", node) if node.in_types else None
    if src is None or src.shape != t.shape:
        raise tr.error("'stablehlo.bitcast_convert' between element types of one width keeps the shape", node)
    pair = (signless_name(src.elt), signless_name(t.elt))
    if pair[0] == pair[1]:
        return [tr.operand(node, 0)]
    if pair not in BITCASTS:
        raise tr.error(f"'stablehlo.bitcast_convert' from {src.elt} to {t.elt} is not supported (f32 <-> i32/ui32, f64 <-> i64/ui64)", node)
    elt = tr.elt(t.elt, node)
    return elementwise(tr, node, lambda a, e: [arith.BitcastOp(a[0], elt)])


@handles("stablehlo.reduce_precision")
def _h_reduce_precision(tr: Translator, node: OpNode) -> list[Val]:
    """Each element rounded to ``mantissa_bits`` (to nearest, ties to even) and to the
    range of ``exponent_bits`` (beyond it: +-inf; below its smallest normal: +-0), as a
    float of its own type; NaN stays NaN (StableHLO's ``reduce_precision``, on the bits:
    f32 and f64)."""
    kind, elt = _arity(tr, node, 1)
    e_bits, m_bits = (_attr_int(tr, node, k) for k in ("exponent_bits", "mantissa_bits"))
    if elt not in (f32, f64):
        raise tr.error(f"'{node.name}' of {elt_name(elt)} is not supported (f32, f64)", node)
    width, src_e, src_m = (32, 8, 23) if elt == f32 else (64, 11, 52)
    if e_bits < 1 or m_bits < 0:
        raise tr.error(f"'{node.name}' needs exponent_bits >= 1 and mantissa_bits >= 0, got {e_bits} and {m_bits}", node)
    if e_bits >= src_e and m_bits >= src_m:
        return [tr.operand(node, 0)]
    ielt = IntegerType(width)
    return elementwise(tr, node, lambda a, e: _reduce_precision_body(tr, a[0], elt, ielt, e_bits, m_bits, src_e, src_m))


def _reduce_precision_body(tr: Translator, x: SSAValue, elt: Attribute, ielt: IntegerType, e_bits: int, m_bits: int, src_e: int, src_m: int) -> list[Operation]:
    w = ielt.width.data
    ops: list[Operation] = []

    def c(v: int) -> SSAValue:
        v = (v + 2 ** (w - 1)) % 2**w - 2 ** (w - 1)  # the bits as a signed integer
        op = tr.const_op(v, ielt)
        ops.append(op)
        return op.results[0]

    def emit(op: Operation) -> SSAValue:
        ops.append(op)
        return op.results[0]

    bits = emit(arith.BitcastOp(x, ielt))
    if m_bits < src_m:
        shift = src_m - m_bits
        last = 1 << shift
        last_bit = emit(arith.ShRUIOp(emit(arith.AndIOp(bits, c(last))), c(shift)))
        bias = emit(arith.AddiOp(last_bit, c((last >> 1) - 1)))
        bits = emit(arith.AndIOp(emit(arith.AddiOp(bits, bias)), c(~(last - 1))))
    if e_bits < src_e:
        exp_mask = ((1 << src_e) - 1) << src_m
        src_bias, bias = (1 << (src_e - 1)) - 1, (1 << (e_bits - 1)) - 1
        exponent = emit(arith.AndIOp(bits, c(exp_mask)))
        over = emit(arith.CmpiOp(exponent, c((src_bias + bias) << src_m), "sgt"))
        under = emit(arith.CmpiOp(exponent, c((src_bias - bias) << src_m), "sle"))
        zero = emit(arith.AndIOp(bits, c(1 << (w - 1))))
        inf = emit(arith.OrIOp(zero, c(exp_mask)))
        bits = emit(arith.SelectOp(over, inf, emit(arith.SelectOp(under, zero, bits))))
    y = emit(arith.BitcastOp(bits, elt))
    if m_bits > 0:
        nan = emit(arith.CmpfOp(x, x, "uno"))
        y = emit(arith.SelectOp(nan, x, y))
    return ops


def _not(tr: Translator, x: SSAValue, elt: IntegerType) -> list[Operation]:
    ones = tr.const_op(1 if elt.width.data == 1 else -1, elt)
    return [ones, arith.XOrIOp(x, ones)]


def _sign(tr: Translator, x: SSAValue, elt: Attribute, is_float: bool) -> list[Operation]:
    """sign(x) = 1 if x > 0, -1 if x < 0, else x (0, -0 and NaN stay)."""
    zero, one, m1 = tr.const_op(0, elt), tr.const_op(1, elt), tr.const_op(-1, elt)
    if is_float:
        gt, lt = arith.CmpfOp(x, zero, "ogt"), arith.CmpfOp(x, zero, "olt")
    else:
        gt, lt = arith.CmpiOp(x, zero, "sgt"), arith.CmpiOp(x, zero, "slt")
    neg = arith.SelectOp(lt, m1, x)
    return [zero, one, m1, gt, lt, neg, arith.SelectOp(gt, one, neg)]


@handles("stablehlo.compare")
def _h_compare(tr: Translator, node: OpNode) -> list[Val]:
    direction = node.attrs.get("comparison_direction")
    if isinstance(direction, Opaque):  # generic form: #stablehlo<comparison_direction GT>
        direction = direction.text.rstrip(">").split()[-1]
    ctype = node.attrs.get("compare_type")
    if isinstance(ctype, Opaque):
        ctype = ctype.text.rstrip(">").split()[-1]
    if direction not in CMPF:
        raise tr.error(f"unknown comparison direction {direction}", node)
    in_t = tr.tensor_t(node.in_types[0], "operand 0", node)
    in_elt = tr.elt(in_t.elt, node)
    if _is_float(in_elt):
        if ctype not in (None, "FLOAT"):
            raise tr.error(f"comparison type {ctype} is not supported (only FLOAT for floats)", node)
        pred = CMPF[direction]
        return elementwise(tr, node, lambda a, e: [arith.CmpfOp(a[0], a[1], pred)], out_elt=i1)
    table = CMPI_UNSIGNED if ctype == "UNSIGNED" or in_elt == i1 else CMPI_SIGNED
    if ctype not in (None, "SIGNED", "UNSIGNED"):
        raise tr.error(f"comparison type {ctype} is not supported for integers", node)
    pred = table[direction]
    return elementwise(tr, node, lambda a, e: [arith.CmpiOp(a[0], a[1], pred)], out_elt=i1)


@handles("stablehlo.select")
def _h_select(tr: Translator, node: OpNode) -> list[Val]:
    if len(node.operands) != 3:
        raise tr.error("'stablehlo.select' takes three operands", node)
    return elementwise(tr, node, lambda a, e: [arith.SelectOp(a[0], a[1], a[2])])


@handles("stablehlo.clamp")
def _h_clamp(tr: Translator, node: OpNode) -> list[Val]:
    if len(node.operands) != 3:
        raise tr.error("'stablehlo.clamp' takes three operands", node)
    elt = tr.elt(_result(tr, node).elt, node)
    if _is_float(elt):
        return elementwise(tr, node, lambda a, e: _minmax(arith.MaximumfOp, arith.MinimumfOp, a))
    return elementwise(tr, node, lambda a, e: _minmax(arith.MaxSIOp, arith.MinSIOp, a))


def _minmax(mx: type[Operation], mn: type[Operation], a: list[SSAValue]) -> list[Operation]:
    lo = mx(a[1], a[0])
    return [lo, mn(lo, a[2])]


@handles("stablehlo.convert")
def _h_convert(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    v = tr.operand(node, 0)
    if isinstance(v, Literal):
        tr.elt(t.elt, node)
        try:
            values = [device_values.convert(x, v.elt, t.elt) for x in v.values]
        except FoldError as e:
            raise tr.error(f"bad conversion of a constant: {e}", node) from None
        return [Literal.of(_np_array(values, v.shape), t.elt)]
    if isinstance(v, Const) and (t.elt in UNSIGNED or v.elt in UNSIGNED):
        try:
            return [Const(device_values.convert(v.value, v.elt, t.elt), t.elt, v.shape)]
        except FoldError as e:
            raise tr.error(f"bad conversion of a constant: {e}", node) from None
    if isinstance(v, Const):
        tr.elt(t.elt, node)
        value = v.value
        if t.elt == "i1":
            value = bool(value)
        elif t.elt.startswith("i"):
            if isinstance(value, float) and not pymath.isfinite(value):
                raise tr.error("conversion of a non-finite constant to an integer", node)
            value = int(value)
        else:
            value = float(value)
        return [Const(value, t.elt, v.shape)]
    elt = tr.elt(t.elt, node)
    src = node.in_types[0].elt if node.in_types and isinstance(node.in_types[0], TensorT) else elt_name(_elt_of(v))
    if _elt_of(v) == elt:
        return [v]
    x = tr.materialize(v)
    unsigned_cast = _unsigned_cast(_elt_of(x), elt, src in UNSIGNED, t.elt in UNSIGNED)
    if unsigned_cast is not None:
        return elementwise(tr, node, lambda a, e: [unsigned_cast(a[0], elt)])
    return [tr.emit_checked(lambda: dist.CastOp.make([x], [x.type.with_(element_type=elt)])).results[0]]  # type: ignore[union-attr]


def _unsigned_cast(src: Attribute, dst: Attribute, from_unsigned: bool, to_unsigned: bool) -> type[Operation] | None:
    """The arith conversion where an unsigned operand or result changes its meaning from
    ``dist.cast``'s signed one (an unsigned integer widened or made a float, a float made
    an unsigned integer); None where the signed conversion gives the same bits."""
    if from_unsigned and isinstance(dst, AnyFloat):
        return arith.UIToFPOp
    if to_unsigned and isinstance(src, AnyFloat):
        return arith.FPToUIOp
    if from_unsigned and isinstance(dst, IntegerType) and isinstance(src, IntegerType) and dst.width.data > src.width.data:
        return arith.ExtUIOp
    return None


@handles("stablehlo.broadcast_in_dim")
def _h_broadcast(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    dims = _attr_ints(tr, node, "broadcast_dimensions")
    v = tr.operand(node, 0)
    src_shape = shape_of(v)
    if len(dims) != len(src_shape) or len(set(dims)) != len(dims) or any(not 0 <= d < t.rank for d in dims):
        raise tr.error(f"broadcast dims {dims} do not fit operand {_fmt(src_shape)} and result {t}", node)
    for i, d in enumerate(dims):
        if src_shape[i] not in (1, t.shape[d]):
            raise tr.error(f"operand dim {i} of size {src_shape[i]} cannot broadcast to result dim {d} of size {t.shape[d]}", node)
    if isinstance(v, Const):
        return [Const(v.value, v.elt, t.shape)]
    if isinstance(v, Literal):
        order = sorted(range(len(dims)), key=lambda i: dims[i])
        src = v.array().transpose(order)
        shaped = [1] * t.rank
        for i in order:
            shaped[dims[i]] = src_shape[i]
        return [Literal.of(np.broadcast_to(src.reshape(shaped), t.shape), v.elt)]
    if isinstance(v, Bcast):
        return [Bcast(v.src, tuple(dims[d] for d in v.dims), t.shape)]
    if tuple(dims) == tuple(range(len(src_shape))) and src_shape == t.shape:
        return [v]
    return [Bcast(v, tuple(dims), t.shape)]


@handles("stablehlo.reshape")
def _h_reshape(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    v = tr.operand(node, 0)
    if pymath.prod(shape_of(v)) != pymath.prod(t.shape):
        raise tr.error(f"reshape of {_fmt(shape_of(v))} to {t}: the element counts differ", node)
    if isinstance(v, Const):
        return [Const(v.value, v.elt, t.shape)]
    if isinstance(v, Literal):
        return [Literal.of(v.array().reshape(t.shape), v.elt)]
    if pymath.prod(t.shape) == 0:  # no element to move: a constant of the new shape
        return [Const(0, t.elt, t.shape)]
    return [tr.reshape(tr.materialize(v), t.shape)]


@handles("stablehlo.transpose")
def _h_transpose(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    perm = _attr_ints(tr, node, "permutation")
    v = tr.operand(node, 0)
    if sorted(perm) != list(range(len(shape_of(v)))):
        raise tr.error(f"permutation {perm} does not permute the {len(shape_of(v))} dims", node)
    if tuple(shape_of(v)[p] for p in perm) != t.shape:
        raise tr.error(f"transpose of {_fmt(shape_of(v))} by {perm} does not give {t}", node)
    if isinstance(v, Const):
        return [Const(v.value, v.elt, t.shape)]
    if isinstance(v, Literal):
        return [Literal.of(v.array().transpose(perm), v.elt)]
    return [tr.transpose(tr.materialize(v), perm)]


@handles("stablehlo.iota")
def _h_iota(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    dim = _attr_int(tr, node, "iota_dimension")
    if not 0 <= dim < t.rank:
        raise tr.error(f"iota dim {dim} is out of range for {t}", node)
    elt = tr.elt(t.elt, node)
    ty = tr.fresh_type(t.shape, elt)
    return [tr.emit_checked(lambda: dist.IotaOp.make([], [ty], dim=dim)).results[0]]


@handles("stablehlo.slice")
def _h_slice(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    v = tr.operand(node, 0)
    shape = shape_of(v)
    start = _attr_ints(tr, node, "start_indices")
    limit = _attr_ints(tr, node, "limit_indices")
    strides = _attr_ints(tr, node, "strides", [1] * len(shape))
    if not len(start) == len(limit) == len(strides) == len(shape):
        raise tr.error(f"the slice needs one range per dim of {_fmt(shape)}", node)
    for d, (a, b, s) in enumerate(zip(start, limit, strides)):
        if not (0 <= a <= b <= shape[d] and s >= 1):
            raise tr.error(f"slice range {a}:{b}:{s} is out of bounds for dim {d} of size {shape[d]}", node)
    sizes = tuple(-(-(b - a) // s) for a, b, s in zip(start, limit, strides))
    if sizes != t.shape:
        raise tr.error(f"the slice gives {_fmt(sizes)}, the result type says {t}", node)
    if isinstance(v, Const):
        return [Const(v.value, v.elt, t.shape)]
    if isinstance(v, Literal):
        return [Literal.of(v.array()[tuple(slice(a, b, c) for a, b, c in zip(start, limit, strides))], v.elt)]
    x = tr.materialize(v)
    return [tr.emit_checked(lambda: dist.ExtractSliceOp.get(x, start, sizes, strides)).results[0]]


@handles("stablehlo.concatenate")
def _h_concat(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    dim = _attr_int(tr, node, "dimension")
    xs = [tr.materialize(tr.operand(node, i)) for i in range(len(node.operands))]
    if not xs:
        raise tr.error("'stablehlo.concatenate' needs operands", node)
    if not 0 <= dim < t.rank:
        raise tr.error(f"concatenation dim {dim} is out of range for {t}", node)
    xs = tr.unify(xs, t.shape)
    return [tr.emit_checked(lambda: dist.ConcatOp.of(*xs, dim=dim)).results[0]]


@handles("stablehlo.dot_general", "stablehlo.dot")
def _h_dot(tr: Translator, node: OpNode) -> list[Val]:
    t = _result(tr, node)
    if len(node.operands) != 2:
        raise tr.error(f"'{node.name}' takes two operands", node)
    a, b = (tr.materialize(tr.operand(node, i)) for i in (0, 1))
    ra, rb = len(shape_of(a)), len(shape_of(b))
    if node.name == "stablehlo.dot":
        if ra not in (1, 2) or rb not in (1, 2):
            raise tr.error("'stablehlo.dot' takes vectors or matrices", node)
        dn = {"lhs_batching_dimensions": [], "rhs_batching_dimensions": [], "lhs_contracting_dimensions": [ra - 1], "rhs_contracting_dimensions": [0]}
    else:
        dn = node.attrs.get("dot_dimension_numbers")
        if isinstance(dn, Opaque):
            dn = dimension_numbers(tr, node, "dot_dimension_numbers", "dot", DOT_KEYS, ())
        if not isinstance(dn, dict):
            raise tr.error("'stablehlo.dot_general' needs its dimension numbers", node)
    lb, rbd = list(dn.get("lhs_batching_dimensions", [])), list(dn.get("rhs_batching_dimensions", []))
    lc, rc = list(dn.get("lhs_contracting_dimensions", [])), list(dn.get("rhs_contracting_dimensions", []))
    elt = tr.elt(t.elt, node)
    return [dot_general(tr, node, a, b, lb, rbd, lc, rc, t.shape, elt)]


DOT_KEYS = ("lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions", "rhs_contracting_dimensions")


def dot_general(
    tr: Translator,
    node: OpNode,
    a: SSAValue,
    b: SSAValue,
    lb: list[int],
    rb: list[int],
    lc: list[int],
    rc: list[int],
    out_shape: Sequence[int],
    elt: Attribute,
) -> SSAValue:
    """``dot_general`` as ``dist.matmul``: lhs to ``[B.., M.., K..]`` and rhs to
    ``[B.., K.., N..]`` (transposes), free and contracted dims merged (reshapes) when
    there are several, a unit M or N added when there is none, and the result reshaped
    to StableHLO's ``[B.., M.., N..]``."""
    sa, sb = shape_of(a), shape_of(b)
    ra, rb_ = len(sa), len(sb)
    dims_ok = (
        len(lb) == len(rb)
        and len(lc) == len(rc)
        and len(set(lb + lc)) == len(lb + lc)
        and len(set(rb + rc)) == len(rb + rc)
        and all(0 <= d < ra for d in lb + lc)
        and all(0 <= d < rb_ for d in rb + rc)
    )
    if not dims_ok:
        raise tr.error("bad dot_general dimension numbers", node)
    if any(sa[x] != sb[y] for x, y in zip(lb, rb)) or any(sa[x] != sb[y] for x, y in zip(lc, rc)):
        raise tr.error("dot_general: batching or contracting dims of lhs and rhs differ in size", node)
    lf = [d for d in range(ra) if d not in lb and d not in lc]
    rf = [d for d in range(rb_) if d not in rb and d not in rc]
    expect = tuple([sa[d] for d in lb] + [sa[d] for d in lf] + [sb[d] for d in rf])
    if expect != tuple(out_shape):
        raise tr.error(f"dot_general gives {_fmt(expect)}, the result type says {_fmt(out_shape)}", node)
    if _elt_of(a) != elt:
        a = tr.emit_checked(lambda: dist.CastOp.make([a], [a.type.with_(element_type=elt)])).results[0]  # type: ignore[attr-defined]
    if _elt_of(b) != elt:
        b = tr.emit_checked(lambda: dist.CastOp.make([b], [b.type.with_(element_type=elt)])).results[0]  # type: ignore[attr-defined]
    nb = len(lb)
    batch = [sa[d] for d in lb]
    m_dims, n_dims = [sa[d] for d in lf], [sb[d] for d in rf]
    k = pymath.prod(sa[d] for d in lc)
    a = tr.transpose(a, lb + lf + lc)
    b = tr.transpose(b, rb + rc + rf)
    # lhs: [B.., M.., K] (several M dims are fine when rhs has no batch dims)
    keep_m = nb == 0 and len(m_dims) >= 1
    a_shape = batch + (m_dims if keep_m else [pymath.prod(m_dims)]) + [k]
    b_shape = batch + [k, pymath.prod(n_dims)]
    if nb == 0 and not m_dims:
        a_shape = [1, k]
    a = tr.reshape(a, a_shape)
    b = tr.reshape(b, b_shape)
    if nb > 0 and len(b_shape) != len(a_shape):  # pragma: no cover - shapes agree by construction
        raise tr.error("dot_general: cannot line up the batch dims", node)
    y = tr.emit_checked(lambda: dist.MatmulOp.of(a, b, sizes=tr.sizes())).results[0]
    return tr.reshape(y, out_shape)


@handles("stablehlo.reduce")
def _h_reduce(tr: Translator, node: OpNode) -> list[Val]:
    if len(node.operands) == 4 and len(node.results) == 2:
        return _arg_reduce(tr, node)
    if len(node.operands) != 2 or len(node.results) != 1:
        raise tr.error("'stablehlo.reduce' of several operands at once is supported only as argmax/argmin (values and their indices)", node)
    kind_op = node.attrs.get("applies")
    span = None
    if kind_op is None:
        kind_op, span = _reducer_kind(tr, node)
    else:
        s = node.attrs.get("applies_span")
        span = Span(s[0], s[1], tr.module.source) if s else None
    kind = REDUCE_KINDS.get(kind_op)
    if kind is None:
        raise tr.error(f"reduction by '{kind_op}' is not supported (add, multiply, maximum, minimum; and, or of booleans)", node, span)
    t = _result(tr, node)
    dims = _attr_ints(tr, node, "dimensions")
    x = tr.operand(node, 0)
    init = tr.operand(node, 1)
    shape = shape_of(x)
    if len(set(dims)) != len(dims) or any(not 0 <= d < len(shape) for d in dims):
        raise tr.error(f"reduced dims {dims} are not dims of {_fmt(shape)}", node)
    if tuple(s for d, s in enumerate(shape) if d not in dims) != t.shape:
        raise tr.error(f"reducing {_fmt(shape)} over {dims} does not give {t}", node)
    elt = tr.elt(t.elt, node)
    if elt == i1:
        return [_reduce_bools(tr, x, init, dims, t.shape, BOOL_REDUCE[kind])]
    if kind in ("and", "or"):
        raise tr.error(f"bitwise '{kind}' reductions of integers are not supported (of booleans they are)", node, span)
    xv = tr.materialize(x)
    r = tr.emit_checked(lambda: dist.ReduceTensorOp.of(xv, op=kind, dims=sorted(dims), sizes=tr.sizes())).results[0]
    if isinstance(init, Const) and _is_identity(kind, init.value):
        return [r]
    # r OP init
    combine = {"sum": (arith.AddfOp, arith.AddiOp), "prod": (arith.MulfOp, arith.MuliOp), "max": (arith.MaximumfOp, arith.MaxSIOp), "min": (arith.MinimumfOp, arith.MinSIOp)}[kind]
    cls = combine[0] if _is_float(elt) else combine[1]
    if isinstance(init, Const):
        return [tr.map_op([r], [elt], t.shape, elt, lambda a: [c := tr.const_op(init.value, elt), cls(a[0], c.results[0])])]
    iv = tr.materialize(init)
    return [tr.map_op([r, iv], [elt, elt], t.shape, elt, lambda a: [cls(a[0], a[1])])]


# ------------------------------------------------------------------ regions as expressions
# The regions of variadic reduce and sort are small functions; the ones JAX writes for
# argmax, argmin and jnp.sort are recognised by their expression trees (block argument k
# is ("arg", k); and/or are commutative), never by running them.


def region_exprs(tr: Translator, node: OpNode) -> list[tuple]:
    """The values a one-block region returns, as expression trees over its arguments."""
    if not node.regions or len(node.regions[0]) != 1:
        raise tr.error(f"'{node.name}' needs a region of one block", node)
    body = node.regions[0][0]
    env: dict[str, tuple] = {v.name: ("arg", k) for k, (v, _) in enumerate(body.args)}

    def get(v: Value) -> tuple:
        if v.name not in env:
            raise ParseError(v.span, f"%{v.name} is not defined in the region of '{node.name}'")
        return env[v.name]

    for op in body.ops:
        if op.name in ("stablehlo.return", "func.return", "return"):
            return [get(v) for v in op.operands]
        args = [get(v) for v in op.operands]
        kind = op.name.removeprefix("stablehlo.")
        if kind == "constant" and isinstance(op.attrs.get("value"), Dense) and op.out_types:
            t = op.out_types[0]
            value = flat(op.attrs["value"].value)
            e: tuple = ("const", repr(decode_scalar(value[0], t.elt)) if isinstance(t, TensorT) and len(value) == 1 else repr(value))
        elif kind == "compare":
            d, ct = (x.text.rstrip(">").split()[-1] if isinstance(x, Opaque) else x for x in (op.attrs.get("comparison_direction"), op.attrs.get("compare_type")))
            e = ("compare", d, ct, *args)
        elif kind in ("and", "or", "add", "multiply", "maximum", "minimum") and len(args) == 2:
            e = (kind, *sorted(args, key=repr))
        else:
            e = (kind, *args)
        for r in op.results:
            env[r.name] = e
    raise tr.error(f"the region of '{node.name}' does not end with a return", node)


def _argmax_exprs(direction: str, ctype: str) -> list[tuple]:
    """JAX's argmax (GT) / argmin (LT) reducer over (value, index) pairs: the first value
    wins when it is greater (smaller) or NaN, the smaller index on ties."""
    xa, ia, xb, ib = (("arg", k) for k in range(4))

    def both(kind: str, a: tuple, b: tuple) -> tuple:
        return (kind, *sorted([a, b], key=repr))

    pick = both("or", ("compare", direction, ctype, xa, xb), ("compare", "NE", ctype, xa, xa))
    tie = both("and", ("compare", "EQ", ctype, xa, xb), ("compare", "LT", "SIGNED", ia, ib))
    return [("select", pick, xa, xb), ("select", both("or", pick, tie), ia, ib)]


def _arg_reduce(tr: Translator, node: OpNode) -> list[Val]:
    """argmax/argmin as JAX writes them (a reduce of values and their indices): the
    max (min) over the dims (NaN wins: maximumf), then the smallest index whose value
    equals it (or is NaN), each combined with the init pair as one more candidate."""
    x, ix, v0, i0 = (tr.operand(node, i) for i in range(4))
    shape = shape_of(x)
    dims = _attr_ints(tr, node, "dimensions")
    exprs = region_exprs(tr, node)
    elt, ielt = _elt_of(x), _elt_of(ix)
    ctype = "FLOAT" if _is_float(elt) else "SIGNED"
    kind = next((k for k, d in (("max", "GT"), ("min", "LT")) if exprs == _argmax_exprs(d, ctype)), None)
    if kind is None or shape_of(ix) != shape or not isinstance(ielt, IntegerType) or ielt == i1 or elt == i1:
        raise tr.error("a 'stablehlo.reduce' of two operands is supported as JAX's argmax/argmin (values, integer indices, its comparator region)", node)
    if len(set(dims)) != len(dims) or any(not 0 <= d < len(shape) for d in dims):
        raise tr.error(f"reduced dims {dims} are not dims of {_fmt(shape)}", node)
    keep = [d for d in range(len(shape)) if d not in dims]
    out_shape = tuple(shape[d] for d in keep)
    for i in range(2):
        if _result(tr, node, i).shape != out_shape:
            raise tr.error(f"reducing {_fmt(shape)} over {dims} does not give {_result(tr, node, i)}", node)
    xv, iv = tr.materialize(x), tr.materialize(ix)
    m = tr.emit_checked(lambda: dist.ReduceTensorOp.of(xv, op=kind, dims=sorted(dims), sizes=tr.sizes())).results[0]
    best = (1 << (ielt.width.data - 1)) - 1
    mb = tr.broadcastable(Bcast(m, tuple(keep), shape))
    pick = arith.MaximumfOp if kind == "max" else arith.MinimumfOp
    if not _is_float(elt):
        pick = arith.MaxSIOp if kind == "max" else arith.MinSIOp

    def hit(v: SSAValue, mv: SSAValue) -> list[Operation]:
        eq = arith.CmpfOp(v, mv, "oeq") if _is_float(elt) else arith.CmpiOp(v, mv, "eq")
        if not _is_float(elt):
            return [eq]
        nan = arith.CmpfOp(v, v, "uno")
        return [eq, nan, arith.OrIOp(eq.results[0], nan.results[0])]

    def candidate(a: list[SSAValue]) -> list[Operation]:
        h = hit(a[0], a[1])
        big = tr.const_op(best, ielt)
        return [*h, big, arith.SelectOp(h[-1].results[0], a[2], big.results[0])]

    cand = tr.map_op([xv, mb, iv], [elt, elt, ielt], shape, ielt, candidate)
    idx = tr.emit_checked(lambda: dist.ReduceTensorOp.of(cand, op="min", dims=sorted(dims), sizes=tr.sizes())).results[0]
    # the init pair: one more candidate
    operands, elts = [m, idx], [elt, ielt]
    inits: list[Val] = [v0, i0]
    for v, e in zip(inits, (elt, ielt)):
        if not isinstance(v, Const):
            operands.append(tr.materialize(v))
            elts.append(e)

    def combine(a: list[SSAValue], index: bool) -> list[Operation]:
        """The init pair as one more candidate: the value is pick(m, v0); the index is
        the smaller of the two whose values reach it."""
        ops: list[Operation] = []
        vals, k = [], 2
        for v, e in zip(inits, (elt, ielt)):
            if isinstance(v, Const):
                c = tr.const_op(v.value, e)
                ops.append(c)
                vals.append(c.results[0])
            else:
                vals.append(a[k])
                k += 1
        total = pick(a[0], vals[0])
        ops.append(total)
        if not index:
            return ops
        init_hit, elem_hit = hit(vals[0], total.results[0]), hit(a[0], total.results[0])
        both = arith.MinSIOp(a[1], vals[1])
        init_wins = arith.SelectOp(elem_hit[-1].results[0], both.results[0], vals[1])
        return [*ops, *init_hit, *elem_hit, both, init_wins, arith.SelectOp(init_hit[-1].results[0], init_wins.results[0], a[1])]

    return [tr.map_op(operands, elts, out_shape, elt, lambda a: combine(a, False)), tr.map_op(operands, elts, out_shape, ielt, lambda a: combine(a, True))]


def _sort_key_exprs(ctype: str) -> tuple:
    """jnp.sort's comparator of operand 0's keys (arguments 0 and 1): ``LT`` of the keys,
    floats first made canonical (-0.0 as +0.0, every NaN as one NaN) and compared in
    TOTALORDER; integers SIGNED."""
    a, b = ("arg", 0), ("arg", 1)
    if ctype == "SIGNED":
        return ("compare", "LT", "SIGNED", a, b)

    def canon(v: tuple) -> tuple:
        zero = ("select", ("compare", "EQ", "FLOAT", v, ("const", "0.0")), ("const", "0.0"), v)
        return ("select", ("compare", "NE", "FLOAT", v, v), ("const", "nan"), zero)

    return ("compare", "LT", "TOTALORDER", canon(a), canon(b))


@handles("stablehlo.sort")
def _h_sort(tr: Translator, node: OpNode) -> list[Val]:
    """``jnp.sort``/``jnp.argsort`` (the keys of operand 0, JAX's comparator; stable) as
    ``dist.sort`` along ``dimension``. Other comparators are a diagnostic."""
    if not node.operands or len(node.results) != len(node.operands):
        raise tr.error("'stablehlo.sort' gives one result per operand", node)
    dim = _attr_int(tr, node, "dimension")
    xs = [tr.materialize(tr.operand(node, i)) for i in range(len(node.operands))]
    shape = shape_of(xs[0])
    if dim < 0:
        dim += len(shape)
    if not 0 <= dim < len(shape):
        raise tr.error(f"sort dimension {dim} is out of range for {_fmt(shape)}", node)
    for i, x in enumerate(xs):
        if shape_of(x) != shape or _result(tr, node, i).shape != shape:
            raise tr.error(f"the operands and results of 'stablehlo.sort' share the shape {_fmt(shape)}", node)
    elt = _elt_of(xs[0])
    (expr,) = region_exprs(tr, node) or [None]
    if elt == i1 or expr != _sort_key_exprs("FLOAT" if _is_float(elt) else "SIGNED"):
        raise tr.error("'stablehlo.sort' is supported with jnp.sort's comparator (ascending keys of operand 0: floats in total order with -0 = +0 and NaN last, signed integers)", node)
    xs = tr.unify(xs, shape)
    return list(tr.emit_checked(lambda: dist.SortOp.of(*xs, dim=dim, sizes=tr.sizes())).results)


BOOL_REDUCE = {"sum": "or", "max": "or", "or": "or", "prod": "and", "min": "and", "and": "and"}
"""Reductions of booleans (StableHLO's add and maximum of i1 are or, multiply and minimum
are and): ``jnp.all``, ``jnp.any``, the bounds check of ``jnp.take``'s ``mode="fill"``."""


def _reduce_bools(tr: Translator, x: Val, init: Val, dims: list[int], shape: tuple[int, ...], kind: str) -> SSAValue:
    """``and``/``or`` of booleans over ``dims``: the min / max of their 0/1 values as i32
    (``dist.reduce_tensor``, so that a sliced dim leaves partial results that an
    all-reduce of the same kind completes), compared with 0, then combined with
    ``init`` unless it is the identity (true for and, false for or)."""
    xv = tr.materialize(x)
    xi = tr.emit_checked(lambda: dist.CastOp.make([xv], [xv.type.with_(element_type=i32)])).results[0]  # type: ignore[attr-defined]
    r = tr.emit_checked(lambda: dist.ReduceTensorOp.of(xi, op="min" if kind == "and" else "max", dims=sorted(dims), sizes=tr.sizes())).results[0]
    combine = arith.AndIOp if kind == "and" else arith.OrIOp
    operands, elts = [r], [i32]
    if not isinstance(init, Const):
        operands.append(tr.materialize(init))
        elts.append(i1)
    elif bool(init.value) == (kind == "and"):
        init = None

    def body(a: list[SSAValue]) -> list[Operation]:
        zero = tr.const_op(0, i32)
        ne = arith.CmpiOp(a[0], zero.results[0], "ne")
        if init is None:
            return [zero, ne]
        if isinstance(init, Const):
            c = tr.const_op(init.value, i1)
            return [zero, ne, c, combine(ne.results[0], c.results[0])]
        return [zero, ne, combine(ne.results[0], a[1])]

    return tr.map_op(operands, elts, shape, i1, body)


def _reducer_kind(tr: Translator, node: OpNode, what: str = "reduce") -> tuple[str, Span | None]:
    """The op of a ``reducer`` region that returns OP(a, b) of its two arguments."""
    if not node.regions or len(node.regions[0]) != 1:
        raise tr.error(f"'stablehlo.{what}' needs a region combining two values", node)
    body = node.regions[0][0]
    ops = body.ops
    args = [v.name for v, _ in body.args]
    aliases: dict[str, str] = {}
    if len(ops) == 3 and ops[1].name == "sdy.sharding_constraint" and ops[0].results and ops[1].operands and ops[1].results:
        # JAX constrains the combined scalar in a shard_map's reducer: no meaning here
        aliases[ops[1].results[0].name] = ops[1].operands[0].name
        ops = [ops[0], ops[2]]
    if len(ops) == 2 and len(args) == 2 and ops[1].name in ("stablehlo.return", "func.return", "return"):
        op, ret = ops
        names = sorted(v.name for v in op.operands)
        returned = aliases.get(ret.operands[0].name, ret.operands[0].name) if len(ret.operands) == 1 else None
        if names == sorted(args) and len(ret.operands) == 1 and op.results and returned == op.results[0].name:
            return op.name, op.span
    raise tr.error(f"only a '{what}' region of one binary op (add, multiply, maximum, minimum, and, or) is supported", node)


def _is_identity(kind: str, v: float | int | bool) -> bool:
    if kind == "sum":
        return v == 0
    if kind == "prod":
        return v == 1
    if kind == "max":
        return v == float("-inf") or (isinstance(v, int) and not isinstance(v, bool) and v <= -(2**31))
    if kind == "min":
        return v == float("inf") or (isinstance(v, int) and not isinstance(v, bool) and v >= 2**31 - 1)
    return False


# ------------------------------------------------------------------ per-device values

FOLDABLE = (*device_values.UNARY, *device_values.BINARY, "compare", "select", "clamp", "convert", "broadcast_in_dim", "reshape")
"""Ops evaluated on per-device values; any other op gets them as a ``dist.map`` of the
device's rank (``Translator.device_scalar``)."""


def fold_device(tr: Translator, node: OpNode) -> list[Val] | None:
    """The op evaluated device by device (``device_values``) when one of its operands is
    a per-device value and all are known at import time; None for any other op (its
    handler materialises per-device operands, or rejects them)."""
    kind = node.name.removeprefix("stablehlo.")
    if kind not in FOLDABLE or not node.name.startswith("stablehlo.") or not node.operands:
        return None
    known = [tr.env.get(v.name) for v in node.operands]
    if not any(isinstance(v, DevVal) for v in known) or not all(isinstance(v, (Const, DevVal)) for v in known):
        return None
    vals: list[Const | DevVal] = [tr.operand(node, i) for i in range(len(node.operands))]  # type: ignore[misc]
    t = _result(tr, node)
    if t.elt not in ELEMENT and t.elt not in UNSIGNED:
        raise tr.error(f"element type '{t.elt}' is not supported", node)
    cols = [v.values if isinstance(v, DevVal) else (v.value,) for v in vals]
    try:
        if kind == "convert":
            out = tuple(device_values.convert(x, vals[0].elt, t.elt) for x in cols[0])
        elif kind in ("broadcast_in_dim", "reshape"):
            src = shape_of(vals[0])
            if kind == "reshape" and pymath.prod(src) != pymath.prod(t.shape):
                raise tr.error(f"reshape of {_fmt(src)} to {t}: the element counts differ", node)
            if kind == "broadcast_in_dim":
                dims = _attr_ints(tr, node, "broadcast_dimensions")
                if len(dims) != len(src) or any(not 0 <= d < t.rank or s not in (1, t.shape[d]) for d, s in zip(dims, src)):
                    raise tr.error(f"broadcast dims {dims} do not fit operand {_fmt(src)} and result {t}", node)
            out = cols[0]
        elif kind == "compare":
            direction = node.attrs.get("comparison_direction")
            if isinstance(direction, Opaque):
                direction = direction.text.rstrip(">").split()[-1]
            out = device_values.elementwise("compare", cols, "i1", str(direction))
        else:
            out = device_values.elementwise(kind, cols, t.elt)
    except FoldError as e:
        raise tr.error(f"'{node.name}' of per-device values: {e}", node) from None
    n = max(len(c) for c in cols)
    return [DevVal(tuple(out) * (n // len(out)), t.elt, t.shape)]


INTEGER_FOLDABLE = (*device_values.UNARY, *device_values.BINARY, "compare", "select", "clamp")
"""Ops evaluated at import time when every operand is an integer or boolean splat constant:
a loop's counter and its condition (``control_flow.py``) are known so."""


def fold_constant(tr: Translator, node: OpNode) -> list[Val] | None:
    """The op evaluated at import time (StableHLO's integer semantics, ``device_values``)
    when all its operands are splat constants of integer or boolean type (a comparison's
    may be floats: comparing is exact); a ``select`` whose predicate is such a constant
    is the operand it picks. None for any other op."""
    kind = node.name.removeprefix("stablehlo.")
    if kind not in INTEGER_FOLDABLE or not node.name.startswith("stablehlo.") or not node.operands:
        return None
    known = [tr.env.get(v.name) for v in node.operands]
    if kind == "select" and isinstance(known[0], Const) and len(known) == 3 and node.out_types:
        t = _result(tr, node)
        picked = tr.operand(node, 1 if known[0].value else 2)
        return [picked] if shape_of(picked) == t.shape else None
    if not all(isinstance(v, Const) for v in known):
        return None
    t = _result(tr, node)
    ints = lambda e: e == "i1" or device_values.is_int(e)  # noqa: E731
    if not ints(t.elt) or not all(ints(v.elt) or kind == "compare" for v in known):  # type: ignore[union-attr]
        return None
    vals: list[Const] = [tr.operand(node, i) for i in range(len(node.operands))]  # type: ignore[misc]
    direction = None
    if kind == "compare":
        direction = node.attrs.get("comparison_direction")
        if isinstance(direction, Opaque):
            direction = direction.text.rstrip(">").split()[-1]
    try:
        (value,) = device_values.elementwise(kind, [(v.value,) for v in vals], t.elt, None if direction is None else str(direction))
    except FoldError as e:
        raise tr.error(f"'{node.name}' of constants: {e}", node) from None
    return [Const(value, t.elt, t.shape)]


@handles("stablehlo.dynamic_slice")
def _h_dynamic_slice(tr: Translator, node: OpNode) -> list[Val]:
    """``dynamic_slice`` at offsets known at import time: constants (``dist.extract_slice``)
    or per-device values that are each device's block of a group of mesh axes
    (``dist.take_slice``, ``device_slice``). StableHLO clamps each start into
    ``[0, dim - size]``."""
    t = _result(tr, node)
    v = tr.operand(node, 0)
    shape = shape_of(v)
    sizes = _attr_ints(tr, node, "slice_sizes")
    starts = [tr.operand(node, i) for i in range(1, len(node.operands))]
    if not len(starts) == len(sizes) == len(shape):
        raise tr.error(f"'stablehlo.dynamic_slice' needs one start index and one size per dim of {_fmt(shape)}", node)
    if tuple(sizes) != t.shape or any(not 0 <= s <= n for s, n in zip(sizes, shape)):
        raise tr.error(f"slice sizes {sizes} do not fit {_fmt(shape)} and the result {t}", node)
    offsets: list[int] = []
    per_device: list[tuple[int, tuple[int, ...], int]] = []
    for d, st in enumerate(starts):
        if shape_of(st) != () or not isinstance(st, (Const, DevVal)) or isinstance(st.values[0] if isinstance(st, DevVal) else st.value, float):
            raise ParseError(node.operands[d + 1].span, "a start index of 'stablehlo.dynamic_slice' must be an integer scalar known at import time (a constant, or computed from partition_id)")
        hi = shape[d] - sizes[d]
        if isinstance(st, DevVal) and not st.uniform():
            per_device.append((d, tuple(min(max(int(x), 0), hi) for x in st.values), sizes[d]))
            offsets.append(0)
        else:
            offsets.append(min(max(int(st.values[0] if isinstance(st, DevVal) else st.value), 0), hi))
    if isinstance(v, Const):
        return [Const(v.value, v.elt, t.shape)]
    if isinstance(v, Patched) and not per_device:
        block = v.block(offsets, sizes)
        if block is not None:
            return [block]
    x = tr.materialize(v)
    if per_device:
        x = tr.device_slice(x, per_device)
    if tuple(offsets) == (0,) * len(shape) and shape_of(x) == t.shape:
        return [x]
    return [tr.emit_checked(lambda: dist.ExtractSliceOp.get(x, offsets, list(sizes), [1] * len(sizes))).results[0]]


@handles("stablehlo.dynamic_update_slice")
def _h_dynamic_update_slice(tr: Translator, node: OpNode) -> list[Val]:
    """``x`` with ``update`` written at start indices known at import time (constants),
    each clamped into ``[0, dim - update dim]`` as StableHLO does: the parts of ``x``
    around the update's box and the update, put together dim by dim
    (``dist.extract_slice``, ``dist.concat``: data movement only, exact)."""
    t = _result(tr, node)
    if len(node.operands) < 2:
        raise tr.error("'stablehlo.dynamic_update_slice' takes an operand, an update and one start index per dim", node)
    x, u = tr.operand(node, 0), tr.operand(node, 1)
    shape, ushape = shape_of(x), shape_of(u)
    starts = [tr.operand(node, i) for i in range(2, len(node.operands))]
    if not len(starts) == len(shape) == len(ushape) or t.shape != shape:
        raise tr.error(f"'stablehlo.dynamic_update_slice' needs an update of the operand's rank, one start index per dim of {_fmt(shape)} and the operand's type as result", node)
    if any(not 0 <= a <= b for a, b in zip(ushape, shape)):
        raise tr.error(f"the update {_fmt(ushape)} does not fit in {_fmt(shape)}", node)
    if _elt_of(x) != _elt_of(u):
        raise tr.error(f"the update's element type {elt_name(_elt_of(u))} is not the operand's {elt_name(_elt_of(x))}", node)
    offsets = []
    for d, st in enumerate(starts):
        value = st.values[0] if isinstance(st, DevVal) and st.uniform() else getattr(st, "value", None)
        if shape_of(st) != () or not isinstance(value, int) or isinstance(value, bool):
            raise ParseError(node.operands[d + 2].span, "a start index of 'stablehlo.dynamic_update_slice' must be an integer scalar known at import time (a constant)")
        offsets.append(min(max(value, 0), shape[d] - ushape[d]))
    if ushape == shape:
        return [u]
    return [paste(tr, tr.materialize(x), tr.materialize(u), offsets, 0)]


def paste(tr: Translator, x: SSAValue, u: SSAValue, offsets: Sequence[int], d: int) -> SSAValue:
    """``x`` with ``u`` at ``offsets`` in dims ``d`` and after (earlier dims already
    match): the part before the box along d, ``u`` pasted into the box's slab, the part
    after, concatenated along d."""
    shape, ushape = shape_of(x), shape_of(u)
    if d == len(shape):
        return u
    o, n = offsets[d], ushape[d]
    if o == 0 and n == shape[d]:
        return paste(tr, x, u, offsets, d + 1)

    def part(lo: int, hi: int) -> SSAValue:
        off = [0] * len(shape)
        off[d] = lo
        size = list(shape)
        size[d] = hi - lo
        return tr.emit_checked(lambda: dist.ExtractSliceOp.get(x, off, size, [1] * len(shape))).results[0]

    pieces = [part(0, o)] if o else []
    pieces.append(paste(tr, part(o, o + n), u, offsets, d + 1))
    if o + n < shape[d]:
        pieces.append(part(o + n, shape[d]))
    pieces = tr.unify(pieces, shape)
    return tr.emit_checked(lambda: dist.ConcatOp.of(*pieces, dim=d)).results[0]


def dimension_numbers(tr: Translator, node: OpNode, attr: str, kind: str, lists: Sequence[str], ints: Sequence[str] = ("index_vector_dim",)) -> dict[str, Any]:
    """``#stablehlo.KIND<key = [..], key = N, ..>`` (attribute ``attr``) as a dict: every
    key of ``lists`` (absent: []) and ``ints`` (absent: None); any other key, or a key
    given twice, is a diagnostic (a misspelled key would otherwise change the meaning)."""
    dn = node.attrs.get(attr)
    text = dn.text if isinstance(dn, Opaque) else ""
    head = f"#stablehlo.{kind}<"
    if not (text.startswith(head) and text.endswith(">")):
        raise tr.error(f"'{node.name}' needs {attr} = {head}...>", node)
    out: dict[str, Any] = {k: [] for k in lists} | {k: None for k in ints}
    seen: set[str] = set()
    for m in re.finditer(r"\s*([A-Za-z_]\w*)\s*=\s*(\[[0-9,\s]*\]|-?\d+)\s*(,|$)", text[len(head) : -1]):
        key, value = m.group(1), m.group(2)
        if key in seen or (key not in lists and key not in ints):
            what = "given twice" if key in seen else f"not a key of #stablehlo.{kind} ({', '.join([*lists, *ints])})"
            raise tr.error(f"'{key}' in {attr} is {what}", node)
        seen.add(key)
        if value.startswith("["):
            if key not in lists:
                raise tr.error(f"'{key}' in {attr} takes an integer, got {value}", node)
            out[key] = [int(x) for x in value[1:-1].replace(" ", "").split(",") if x]
        else:
            if key not in ints:
                raise tr.error(f"'{key}' in {attr} takes a list, got {value}", node)
            out[key] = int(value)
    rest = re.sub(r"\s*([A-Za-z_]\w*)\s*=\s*(\[[0-9,\s]*\]|-?\d+)\s*(,|$)", "", text[len(head) : -1])
    if rest.strip():
        raise tr.error(f"cannot read '{rest.strip()}' in {attr}", node)
    return out


def _gather_numbers(tr: Translator, node: OpNode) -> dict[str, Any]:
    return dimension_numbers(tr, node, "dimension_numbers", "gather", ("offset_dims", "collapsed_slice_dims", "operand_batching_dims", "start_indices_batching_dims", "start_index_map"))


@dataclass
class RowLookup:
    """The dims of a gather or scatter of rows (``_h_gather``, ``_h_scatter``): a table of
    shape ``table`` whose dim ``g`` the indices select, whose dims ``batch`` are batching
    dims of the indices' dims ``ibatch`` (pairwise), and whose remaining dim, if any, is
    the row (taken whole); the indices' batch shape ``bshape`` (their shape without the
    index vector dim). ``dist.embedding_bag`` and ``dist.scatter_add`` take one leading
    table dim: the batching dims are moved first and merged into it (the logits
    ``[B, S, V]`` of a cross-entropy, looked up with labels ``[B, S, 1]``, are ``B * S``
    tables of ``V`` rows of width 1)."""

    table: tuple[int, ...]
    g: int
    batch: tuple[int, ...]
    ibatch: tuple[int, ...]
    bshape: tuple[int, ...]

    def valid(self) -> bool:
        k = len(self.batch)
        return (
            len(self.table) in (k + 1, k + 2)
            and len(self.ibatch) == k
            and len(set(self.batch)) == k == len(set(self.ibatch))
            and 0 <= self.g < len(self.table)
            and self.g not in self.batch
            and all(0 <= d < len(self.table) for d in self.batch)
            and all(0 <= d < len(self.bshape) for d in self.ibatch)
            and all(self.table[a] == self.bshape[b] for a, b in zip(self.batch, self.ibatch))
        )

    @property
    def width_dim(self) -> int | None:
        return next((d for d in range(len(self.table)) if d not in (*self.batch, self.g)), None)

    @property
    def width(self) -> int:
        w = self.width_dim
        return 1 if w is None else self.table[w]

    @property
    def lead(self) -> tuple[int, ...]:
        """The merged table dim (none without batching dims)."""
        return (pymath.prod(self.table[d] for d in self.batch),) if self.batch else ()

    @property
    def rest(self) -> list[int]:
        """The indices' batch dims that are not batching dims (the bags)."""
        return [d for d in range(len(self.bshape)) if d not in self.ibatch]

    @property
    def order(self) -> list[int]:
        """The indices' batch dims, batching dims first."""
        return [*self.ibatch, *self.rest]

    def tables(self, tr: Translator, x: SSAValue) -> SSAValue:
        """The table as ``[T, R, D]`` (``[R, D]`` without batching dims)."""
        w = self.width_dim
        x = tr.transpose(x, [*self.batch, self.g, *([] if w is None else [w])])
        return tr.reshape(x, (*self.lead, self.table[self.g], self.width))

    def indices(self, tr: Translator, idx: SSAValue) -> SSAValue:
        """The indices as ``[T, N, 1]`` (``[N, 1]`` without batching dims)."""
        if self.order != list(range(len(self.bshape))):
            idx = tr.transpose(tr.reshape(idx, self.bshape), self.order)
        return tr.reshape(idx, (*self.lead, pymath.prod(self.bshape[d] for d in self.rest), 1))

    def rows(self, tr: Translator, u: SSAValue, k: int | None) -> SSAValue:
        """Values of the indices' batch shape with a row at dim ``k`` (none: rows of width
        1) as ``[T, N, D]`` (``unrows``'s inverse)."""
        nb = len(self.bshape)
        if k is not None and k != nb:  # the row last
            u = tr.transpose(u, [d for d in range(nb + 1) if d != k] + [k])
        if self.order != list(range(nb)):
            u = tr.transpose(u if k is not None else tr.reshape(u, (*self.bshape, 1)), [*self.order, nb])
        return tr.reshape(u, (*self.lead, pymath.prod(self.bshape[d] for d in self.rest), self.width))

    def unrows(self, tr: Translator, y: SSAValue, k: int | None) -> SSAValue:
        """Bags ``[T, N, D]`` as the indices' batch shape with the row at dim ``k`` (none:
        rows of width 1, dropped)."""
        y = tr.reshape(y, (*(self.bshape[d] for d in self.order), *([self.width] if k is not None else [])))
        back = [self.order.index(d) for d in range(len(self.bshape))]
        if k is not None:
            back.insert(k, len(self.bshape))
        return tr.transpose(y, back)

    def untables(self, tr: Translator, y: SSAValue) -> SSAValue:
        """A result ``[T, R, D]`` in the table's shape and dim order (``tables``'s inverse)."""
        w = self.width_dim
        order = [*self.batch, self.g, *([] if w is None else [w])]
        y = tr.reshape(y, tuple(self.table[d] for d in order))
        return tr.transpose(y, [order.index(d) for d in range(len(self.table))])


GATHER_SUBSET = (
    "distir reads row lookups: one collapsed dim that the indices select (start_index_map = "
    "collapsed_slice_dims = [g]), any batching dims of the table paired with dims of the indices "
    "(operand_batching_dims, start_indices_batching_dims), at most one other dim, taken whole, "
    "the index vector dim last"
)


def _index_elt_ok(idx: Val) -> bool:
    elt = _elt_of(idx) if not isinstance(idx, (Const, DevVal)) else ELEMENT.get(idx.elt)
    return isinstance(elt, IntegerType) and elt != i1


@handles("stablehlo.gather")
def _h_gather(tr: Translator, node: OpNode) -> list[Val]:
    """Row lookups (``jnp.take(table, idx, axis=g)``, ``table[idx]``, the sdy export of
    ``dist.embedding_bag``) and element lookups along a dim of each row
    (``jnp.take_along_axis``: a table ``[B, V]`` or ``[B, S, V]`` whose leading dims are
    batching dims, no offset dim) as ``dist.embedding_bag`` of bags of one row: the
    indices clamped into the table (StableHLO's rule for a start index), the batching
    dims merged into one table dim (``RowLookup``), a table without a row width seen as
    rows of width 1, the bags reshaped to the indices' shape and the row moved to the
    offset dim. Any other gather is a diagnostic."""
    if len(node.operands) != 2:
        raise tr.error("'stablehlo.gather' takes a table and indices", node)
    t = _result(tr, node)
    table, idx = tr.operand(node, 0), tr.operand(node, 1)
    ts, ish = shape_of(table), shape_of(idx)
    nums = _gather_numbers(tr, node)
    sizes = _attr_ints(tr, node, "slice_sizes")
    g = nums["start_index_map"]
    ivd = nums["index_vector_dim"]
    look = RowLookup(tuple(ts), g[0] if len(g) == 1 else -1, tuple(nums["operand_batching_dims"]), tuple(nums["start_indices_batching_dims"]), tuple(ish[:ivd]) if ivd is not None else ())
    w = look.width_dim
    offset = nums["offset_dims"]
    ok = (
        ivd is not None
        and (ivd == len(ish) or (ivd == len(ish) - 1 and ish[-1] == 1))
        and nums["collapsed_slice_dims"] == g
        and look.valid()
        and len(sizes) == len(ts)
        and all(sizes[d] == 1 for d in (*look.batch, look.g))
        and (w is None or sizes[w] == ts[w])
        and len(offset) == (0 if w is None else 1)
        and (w is None or offset[0] <= len(look.bshape))
        and _index_elt_ok(idx)
    )
    if not ok:
        raise tr.error(f"this form of 'stablehlo.gather' is not supported ({GATHER_SUBSET})", node)
    k = offset[0] if w is not None else None
    want = list(look.bshape)
    if k is not None:
        want.insert(k, ts[w])
    if tuple(want) != t.shape:
        raise tr.error(f"the gather gives {_fmt(want)}, the result type says {t}", node)
    tab = look.tables(tr, tr.materialize(table))
    flat_idx = look.indices(tr, tr.materialize(idx))
    elt = _elt_of(flat_idx)
    rows = ts[look.g]

    def clamp(a: list[SSAValue]) -> list[Operation]:
        lo, hi = tr.const_op(0, elt), tr.const_op(rows - 1, elt)
        up = arith.MaxSIOp(a[0], lo.results[0])
        return [lo, hi, up, arith.MinSIOp(up.results[0], hi.results[0])]

    safe = tr.map_op([flat_idx], [elt], shape_of(flat_idx), elt, clamp)
    bags = tr.emit_checked(lambda: dist.EmbeddingBagOp.of(tab, safe, mode="sum", sizes=tr.sizes())).results[0]
    return [look.unrows(tr, bags, k)]


SCATTER_SUBSET = (
    "distir reads additions into rows (the gradient of a row lookup, table.at[ids].add(u)): one "
    "inserted dim that the indices select (scatter_dims_to_operand_dims = inserted_window_dims = [g]), "
    "any batching dims of the operand paired with dims of the indices (input_batching_dims, "
    "scatter_indices_batching_dims), updates holding whole rows, the index vector dim last, an add region"
)


@handles("stablehlo.scatter")
def _h_scatter(tr: Translator, node: OpNode) -> list[Val]:
    """Additions into rows as ``dist.scatter_add`` (the adjoint of ``embedding_bag``): the
    indices as ``[N, 1]`` (``[T, N, 1]`` with the batching dims merged into one table
    dim: ``RowLookup``), the updates as ``[N, D]`` with the row last, an operand without
    a row width seen as rows of width 1; indices outside the operand add nothing
    (StableHLO: such updates are skipped); the operand added unless it is a zero
    constant (the usual gradient). Any other scatter is a diagnostic."""
    if len(node.operands) != 3 or len(node.results) != 1:
        raise tr.error("'stablehlo.scatter' of several operands at once is not supported (one operand, indices, updates)", node)
    kind, span = _reducer_kind(tr, node, "scatter")
    if kind != "stablehlo.add":
        raise tr.error(f"'stablehlo.scatter' combining by '{kind}' is not supported (add: the gradient of a lookup)", node, span)
    t = _result(tr, node)
    operand, idx, upd = (tr.operand(node, i) for i in range(3))
    os_, ish, us = shape_of(operand), shape_of(idx), shape_of(upd)
    nums = dimension_numbers(tr, node, "scatter_dimension_numbers", "scatter", ("update_window_dims", "inserted_window_dims", "input_batching_dims", "scatter_indices_batching_dims", "scatter_dims_to_operand_dims"))
    g = nums["scatter_dims_to_operand_dims"]
    ivd = nums["index_vector_dim"]
    look = RowLookup(tuple(os_), g[0] if len(g) == 1 else -1, tuple(nums["input_batching_dims"]), tuple(nums["scatter_indices_batching_dims"]), tuple(ish[:ivd]) if ivd is not None else ())
    w = look.width_dim
    window = nums["update_window_dims"]
    ok = (
        ivd is not None
        and (ivd == len(ish) or (ivd == len(ish) - 1 and ish[-1] == 1))
        and nums["inserted_window_dims"] == g
        and look.valid()
        and len(window) == (0 if w is None else 1)
        and (w is None or window[0] <= len(look.bshape))
        and _index_elt_ok(idx)
        and t.shape == os_
    )
    k = window[0] if ok and w is not None else None
    if ok:
        want = list(look.bshape)
        if k is not None:
            want.insert(k, os_[w])
        ok = tuple(want) == us
    if not ok:
        raise tr.error(f"this form of 'stablehlo.scatter' is not supported ({SCATTER_SUBSET})", node)
    elt = tr.elt(t.elt, node)
    u = look.rows(tr, tr.materialize(upd), k)
    flat_idx = look.indices(tr, tr.materialize(idx))
    ty = tr.new_type_like([u], (*look.lead, os_[look.g], look.width), elt)
    y = look.untables(tr, tr.emit_checked(lambda: dist.ScatterAddOp.make([flat_idx, u], [ty])).results[0])
    if isinstance(operand, Const) and operand.value == 0 and pymath.copysign(1, operand.value) > 0:
        return [y]  # scatter_add starts from +0, as the zeros of a gradient do
    add = arith.AddfOp if _is_float(elt) else arith.AddiOp
    base = tr.materialize(operand)
    return [tr.map_op([base, y], [elt, elt], os_, elt, lambda a: [add(a[0], a[1])])]


@handles("func.call", "call")
def _h_call(tr: Translator, node: OpNode) -> list[Val]:
    callee = tr.funcs.get(node.sym or "")
    if callee is None:
        raise tr.error(f"call of unknown function @{node.sym}", node)
    if node.sym in tr.inlining:
        raise tr.error(f"recursive call of @{node.sym}", node)
    if len(callee.in_types) != len(node.operands):
        raise tr.error(f"@{node.sym} takes {len(callee.in_types)} argument(s), the call gives {len(node.operands)}", node)
    if len(callee.out_types) != len(node.results):
        raise tr.error(f"@{node.sym} returns {len(callee.out_types)} value(s), the call takes {len(node.results)}", node)
    args = [tr.operand(node, i) for i in range(len(node.operands))]
    for i, (a, t) in enumerate(zip(args, callee.in_types)):
        if isinstance(t, TensorT) and shape_of(a) != t.shape:
            raise tr.error(f"argument {i} of @{node.sym} is {t}, the call passes {_fmt(shape_of(a))}", node)
    tr.inlining.append(node.sym or "")
    saved = tr.node
    try:
        outs = tr.translate_body(callee.regions[0][0], args)
    finally:
        tr.inlining.pop()
        tr.node = saved
    for i, (o, t) in enumerate(zip(outs, callee.out_types)):
        if isinstance(t, TensorT) and shape_of(o) != t.shape:
            raise tr.error(f"@{node.sym} returns {_fmt(shape_of(o))} as result {i}, its type says {t}", node)
    return outs


from distir.frontends import control_flow  # noqa: E402,F401  (registers while, case, if: its handlers and custom form)
