"""Translation of ``rt.kernel`` to Numba source: a ``numba.njit(parallel=..., fastmath=...,
error_model="numpy")`` loop nest for CPUs and a ``numba.cuda.jit`` kernel for GPUs.

The body is translated op by op into Python statements over scalars. Ops that depend
only on scalar parameters and constants are hoisted out of the loop. Each float op
computes in the widest type of its operands and at least f32 (CoCoNet's mixed
precision: f16/bf16 values are widened on load and rounded on store; an f32 op stays
f32 even in a kernel that also has f64 values, so results equal the interpreter's);
integers wrap in their width. A 0-d memref parameter is passed as a 1-element
1-d array. Numba has no f16 or bf16 arithmetic on the CPU and no bf16 arrays anywhere:
such arrays are passed as their 16-bit patterns (uint16) and converted on each load and
store (``HALF_HELPERS`` on the CPU: LLVM's half conversions and bf16 bit arithmetic with
round-to-nearest-even; ``BF16_HELPERS`` on CUDA, where f16 arrays are native).

CPU loop nest (``prange`` over the outermost dim)::

    def k0(a0, a1, a2, a3):
        t0 = numba.float32(1.0) - a2            # hoisted
        for i0 in numba.prange(1024):
            t1 = numba.float32(a0[i0])
            ...
            a3[i0] = numba.float32(t5)

CUDA kernel (grid-stride loop over the flattened iteration space)::

    def k0(a0, a1, a2, a3):
        t0 = numba.float32(1.0) - a2
        for g in range(cuda.grid(1), 1024, cuda.gridsize(1)):
            i0 = g
            ...

Two CPU variants serve the shared-memory runtime: ``ZeroCopy`` (a fused all-reduce:
parameters reduced straight from the peers' buffers and outputs written straight into
every peer's buffer) and ``Bucketed`` (scattered tensors: the loop runs over a bucket
table of (segment, offset, length) with at most 1024 elements per bucket).

Sources are pure functions of the kernel IR and the options, so compiled kernels are
cached by source text (``compile_cpu`` / ``compile_cuda``), and written to files under
the cache directory so that Numba's on-disk cache serves later processes too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdsl.dialects import arith, memref
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
)
from xdsl.ir import Attribute, Operation, SSAValue

from distir.dialects import rt, scalar

ZERO_COPY_TILE = 2048
"""Elements per tile of the zero-copy fused kernel (its reduction buffer stays in L1/L2)."""

DEFAULT_FASTMATH = frozenset({"contract", "nsz", "arcp", "reassoc"})
"""LLVM fast-math flags for CPU kernels: no ``nnan``/``ninf``, so NaN and inf keep IEEE
semantics (comparisons, max/min)."""


class UnsupportedKernel(Exception):
    """A kernel op the translation does not handle (the message names it)."""


# ======================================================================================
# Types
# ======================================================================================


def is_float(t: Attribute) -> bool:
    return isinstance(t, AnyFloat)


def float_bits(t: Attribute) -> int:
    return t.bitwidth if isinstance(t, AnyFloat) else 0  # type: ignore[attr-defined]


def int_name(t: Attribute) -> str:
    if isinstance(t, IndexType):
        return "int64"
    assert isinstance(t, IntegerType)
    w = t.width.data
    if w == 1:
        return "boolean"
    if w in (8, 16, 32, 64):
        return f"int{w}"
    raise UnsupportedKernel(f"integer type {t} is not supported in kernels")


def storage_name(t: Attribute, target: str) -> str:
    """numba type of the array elements as the kernel sees them: arrays of half elements
    hold their 16 bits (uint16: numba has no bf16 arrays, and no f16 arithmetic on the
    CPU), converted on load and store (``half_helper``); on CUDA f16 stays f16."""
    if isinstance(t, (Float16Type,)):
        return "float16" if target == "cuda" else "uint16"
    if isinstance(t, BFloat16Type):
        return "uint16"
    if is_float(t):
        return "float64" if float_bits(t) == 64 else "float32"
    return int_name(t)


# ======================================================================================
# Variants
# ======================================================================================


@dataclass(frozen=True)
class ZeroCopy:
    """Fused-collective variant for ranks sharing memory: parameter ``reduce_param`` is
    the reduction (``op``) over ``ranks`` peer buffers (flat, this rank's block starting
    at ``base``), and each parameter of ``gather_params`` is also stored into the same
    block of every peer's buffer."""

    ranks: int
    op: str
    reduce_param: int
    gather_params: tuple[int, ...] = ()
    own: tuple[tuple[int, int], ...] = ()
    """(parameter, gather parameter): the parameter is this rank's block of that gather
    parameter's buffer, read as ``g<param>_<me>[base + i]`` (one pointer for the read
    and the write of an in-place update, so that the loop vectorises)."""
    me: int = 0


@dataclass(frozen=True)
class Bucketed:
    """Scattered-tensor variant of a 1-d kernel: each parameter in ``scattered`` is a
    tuple of 1-d pieces; the loop runs over a bucket table of rows ``(piece, offset in
    the piece, length, offset in the whole)``, at most 1024 elements per bucket, and a
    scattered parameter is indexed ``a[piece][offset + j]``; other arrays are indexed by
    the offset in the whole."""

    scattered: tuple[int, ...]


@dataclass
class KernelSource:
    name: str
    source: str
    target: str
    params: list[str]
    """Per kernel parameter: 'array', 'scalar' or 'index'."""
    storage: list[str | None] = field(default_factory=list)
    """Per parameter: numba element type of its array (None for scalars)."""


# ======================================================================================
# Translation
# ======================================================================================

HELPERS = '''
@_dev
def _fmax(a, b):
    if a != a or b != b:
        return a + b
    return a if a > b else b


@_dev
def _fmin(a, b):
    if a != a or b != b:
        return a + b
    return a if a < b else b


@_dev
def _fmaxnum(a, b):
    if a != a:
        return b
    if b != b:
        return a
    return a if a > b else b


@_dev
def _fminnum(a, b):
    if a != a:
        return b
    if b != b:
        return a
    return a if a < b else b


@_dev
def _round(x):
    r = math.floor(abs(x) + 0.5)
    return math.copysign(r, x)


@_dev
def _roundeven(x):
    r = math.floor(x)
    d = x - r
    if d > 0.5 or (d == 0.5 and r - 2.0 * math.floor(r * 0.5) != 0.0):  # r odd (numba's CPU has no math.fmod)
        r += 1.0
    return r


@_dev
def _trunc(x):
    return math.copysign(math.floor(abs(x)), x)


@_dev
def _divsi(a, b):
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@_dev
def _remsi(a, b):
    if b == 0:
        return 0
    return a - _divsi(a, b) * b


@_dev
def _floordivsi(a, b):
    if b == 0:
        return 0
    return a // b


@_dev
def _ceildivsi(a, b):
    if b == 0:
        return 0
    return -((-a) // b)


@_dev
def _bits(seed, index):
    z = numba.uint64(seed)
    z = (z ^ (z >> _U30)) * _M1
    z = (z ^ (z >> _U27)) * _M2
    key = z ^ (z >> _U31)
    z = numba.uint64(index) * _GOLDEN + key
    z = (z ^ (z >> _U30)) * _M1
    z = (z ^ (z >> _U27)) * _M2
    z = z ^ (z >> _U31)
    return numba.int32(z >> _U40)
'''

BF16_HELPERS = '''
# bf16 <-> f32 for arrays holding bf16 bits (uint16). On a GPU: numba.cuda.bf16
# (numba-cuda >= 0.12, compute capability >= 8.0); numba's CUDA simulator has no bf16
# type, so there the same round-to-nearest-even conversions are bit arithmetic.
try:
    from numba.cuda import bf16 as _bf16
except ImportError:
    _bf16 = None
if _bf16 is not None and getattr(_bf16, "bfloat16", None) is not None:
    @cuda.jit(device=True, inline=True)
    def _bf16_load(bits):
        return _bf16.bfloat162float(_bf16.ushort_as_bfloat16(numba.uint16(bits)))

    @cuda.jit(device=True, inline=True)
    def _bf16_store(x):
        return _bf16.bfloat16_as_ushort(_bf16.float2bfloat16_rn(numba.float32(x)))
else:
    def _bf16_load(bits):
        return np.array([np.uint32(bits) << np.uint32(16)], dtype=np.uint32).view(np.float32)[0]

    def _bf16_store(x):
        b = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
        if (b & 0x7FFFFFFF) > 0x7F800000:
            return np.uint16(0x7FC0)
        b += 0x7FFF + ((b >> 16) & 1)
        return np.uint16((b >> 16) & 0xFFFF)
'''

HALF_HELPERS = '''
# f16 and bf16 <-> f32 for CPU arrays holding the 16 bits (uint16): f16 through LLVM's
# half conversions (F16C instructions on x86), bf16 as bit arithmetic, round to nearest
# even (NaN stays NaN), as numpy's and ml_dtypes' casts.
from llvmlite import ir as _ir
from numba.core import types as _types
from numba.extending import intrinsic as _intrinsic


@_intrinsic
def _f16_load(typingctx, bits):
    def codegen(context, builder, sig, args):
        h = context.cast(builder, args[0], sig.args[0], _types.uint16)
        return builder.fpext(builder.bitcast(h, _ir.HalfType()), _ir.FloatType())

    return _types.float32(bits), codegen


@_intrinsic
def _f16_store(typingctx, x):
    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], _types.float32)
        return builder.bitcast(builder.fptrunc(v, _ir.HalfType()), _ir.IntType(16))

    return _types.uint16(x), codegen


@_intrinsic
def _f32_bits(typingctx, x):
    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], _types.float32)
        return builder.bitcast(v, _ir.IntType(32))

    return _types.uint32(x), codegen


@_intrinsic
def _bits_f32(typingctx, bits):
    def codegen(context, builder, sig, args):
        b = context.cast(builder, args[0], sig.args[0], _types.uint32)
        return builder.bitcast(b, _ir.FloatType())

    return _types.float32(bits), codegen


@_dev
def _bf16_load(bits):
    return _bits_f32(numba.uint32(bits) << numba.uint32(16))


@_dev
def _bf16_store(x):
    b = _f32_bits(x)
    if (b & numba.uint32(0x7FFFFFFF)) > numba.uint32(0x7F800000):
        return numba.uint16((b >> numba.uint32(16)) | numba.uint32(0x40))
    b = b + numba.uint32(0x7FFF) + ((b >> numba.uint32(16)) & numba.uint32(1))
    return numba.uint16(b >> numba.uint32(16))
'''


def half_helper(t: Attribute, target: str) -> str | None:
    """The prefix of the load/store conversions (``_bf16``, ``_f16``) of an array of
    element type ``t`` held as 16-bit patterns on ``target``; None when it is not."""
    if isinstance(t, BFloat16Type):
        return "_bf16"
    if isinstance(t, Float16Type) and target == "cpu":
        return "_f16"
    return None


CONSTANTS = """
_GOLDEN = numba.uint64(0x9E3779B97F4A7C15)
_M1 = numba.uint64(0xBF58476D1CE4E5B9)
_M2 = numba.uint64(0x94D049BB133111EB)
_U30 = numba.uint64(30)
_U27 = numba.uint64(27)
_U31 = numba.uint64(31)
_U40 = numba.uint64(40)
"""

_FLOAT_BIN = {
    arith.AddfOp: "({a} + {b})",
    arith.SubfOp: "({a} - {b})",
    arith.MulfOp: "({a} * {b})",
    arith.DivfOp: "({a} / {b})",
    arith.MaximumfOp: "_fmax({a}, {b})",
    arith.MinimumfOp: "_fmin({a}, {b})",
    arith.MaxnumfOp: "_fmaxnum({a}, {b})",
    arith.MinnumfOp: "_fminnum({a}, {b})",
    xmath.PowFOp: "math.pow({a}, {b})",
    xmath.Atan2Op: "math.atan2({a}, {b})",
    xmath.CopySignOp: "math.copysign({a}, {b})",
    scalar.RemFOp: "FMOD({a}, {b})",
}

_FLOAT_UN = {
    arith.NegfOp: "(-{a})",
    xmath.SqrtOp: "SQRT({a})",
    xmath.RsqrtOp: "({one} / SQRT({a}))",
    xmath.ExpOp: "math.exp({a})",
    xmath.Exp2Op: "math.pow({two}, {a})",
    xmath.ExpM1Op: "math.expm1({a})",
    xmath.LogOp: "math.log({a})",
    xmath.Log2Op: "math.log2({a})",
    xmath.Log10Op: "math.log10({a})",
    xmath.Log1pOp: "math.log1p({a})",
    xmath.TanhOp: "math.tanh({a})",
    xmath.SinOp: "math.sin({a})",
    xmath.CosOp: "math.cos({a})",
    xmath.TanOp: "math.tan({a})",
    xmath.AtanOp: "math.atan({a})",
    xmath.ErfOp: "math.erf({a})",
    xmath.AbsFOp: "abs({a})",
    xmath.FloorOp: "math.floor({a})",
    xmath.CeilOp: "math.ceil({a})",
    xmath.RoundOp: "_round({a})",
    xmath.RoundEvenOp: "_roundeven({a})",
    xmath.TruncOp: "_trunc({a})",
    xmath.CbrtOp: "math.copysign(math.pow(abs({a}), {third}), {a})",
    scalar.ErfcOp: "math.erfc({a})",
}
for _name in ("AsinOp", "AcosOp", "SinhOp", "CoshOp", "AsinhOp", "AcoshOp", "AtanhOp", "ErfcOp"):
    if hasattr(xmath, _name):
        _FLOAT_UN[getattr(xmath, _name)] = "math." + _name.removesuffix("Op").lower() + "({a})"

_INT_BIN = {
    arith.AddiOp: "({a} + {b})",
    arith.SubiOp: "({a} - {b})",
    arith.MuliOp: "({a} * {b})",
    arith.DivSIOp: "_divsi({a}, {b})",
    arith.RemSIOp: "_remsi({a}, {b})",
    arith.FloorDivSIOp: "_floordivsi({a}, {b})",
    arith.CeilDivSIOp: "_ceildivsi({a}, {b})",
    arith.AndIOp: "({a} & {b})",
    arith.OrIOp: "({a} | {b})",
    arith.XOrIOp: "({a} ^ {b})",
    arith.MaxSIOp: "max({a}, {b})",
    arith.MinSIOp: "min({a}, {b})",
    arith.ShLIOp: "({a} << {b})",
    arith.ShRSIOp: "({a} >> {b})",
}

_UINT_BIN = {
    arith.DivUIOp: "(({a} // {b}) if {y} != 0 else 0)",
    arith.RemUIOp: "(({a} % {b}) if {y} != 0 else 0)",
    arith.MaxUIOp: "({x} if {a} >= {b} else {y})",
    arith.MinUIOp: "({x} if {a} <= {b} else {y})",
}

_CMPF = {
    "oeq": "({a} == {b})",
    "ogt": "({a} > {b})",
    "oge": "({a} >= {b})",
    "olt": "({a} < {b})",
    "ole": "({a} <= {b})",
    "one": "(({a} < {b}) or ({a} > {b}))",
    "ord": "(({a} == {a}) and ({b} == {b}))",
    "ueq": "(not (({a} < {b}) or ({a} > {b})))",
    "ugt": "(not ({a} <= {b}))",
    "uge": "(not ({a} < {b}))",
    "ult": "(not ({a} >= {b}))",
    "ule": "(not ({a} > {b}))",
    "une": "({a} != {b})",
    "uno": "(({a} != {a}) or ({b} != {b}))",
    "true": "True",
    "false": "False",
}
_CMPF_NAMES = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true"]
_CMPI_NAMES = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
_CMPI = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=", "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}


class Translator:
    """Translates one kernel body into Python statements. ``aliases`` maps a parameter
    to an earlier one holding the same buffer: it is read and written through that
    name, so that LLVM sees one pointer (in-place updates then vectorise without the
    runtime overlap check, which they would fail)."""

    def __init__(self, kernel: rt.KernelOp, target: str, aliases: dict[int, int] | None = None):
        self.kernel = kernel
        self.target = target
        self.names: dict[SSAValue, str] = {}
        self.counter = 0
        block = kernel.body.block
        n_idx = len(kernel.space)
        self.params = list(block.args[: len(block.args) - n_idx])
        self.indices = list(block.args[len(block.args) - n_idx :])
        for i, a in enumerate(self.params):
            self.names[a] = f"a{(aliases or {}).get(i, i)}"
        for k, a in enumerate(self.indices):
            self.names[a] = f"i{k}"
        self.invariant: set[SSAValue] = {a for a in self.params if not isinstance(a.type, MemRefType)}
        self.load_hook = None  # (param index, index expr list) -> expression
        self.store_hook = None  # (param index, index expr list, value expr) -> list of statements

    def half(self, ref: SSAValue) -> str | None:
        """The conversion prefix of array ``ref`` when it holds half elements as their
        bits (``half_helper``)."""
        return half_helper(ref.type.element_type, self.target)  # type: ignore[attr-defined]

    def pname(self, p: int) -> str:
        """The name parameter p is read and written through (its alias's)."""
        return self.names[self.params[p]]

    def fresh(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    def ftype(self, t: Attribute) -> str:
        """numba type an op of float type ``t`` computes in: f64 for f64, else f32."""
        return "float64" if is_float(t) and float_bits(t) == 64 else "float32"

    def cast(self, t: Attribute) -> str:
        if is_float(t):
            return f"numba.{self.ftype(t)}"
        return f"numba.{int_name(t)}"

    def name(self, v: SSAValue) -> str:
        return self.names[v]

    def split(self) -> tuple[list[str], list[str]]:
        """(hoisted statements, loop-body statements)."""
        hoisted: list[str] = []
        body: list[str] = []
        for op in self.kernel.body.block.ops:
            lines = self.op(op)
            inv = not isinstance(op, (memref.LoadOp, memref.StoreOp)) and all(o in self.invariant for o in op.operands)
            if inv and op.results:
                self.invariant.update(op.results)
                hoisted.extend(lines)
            else:
                body.extend(lines)
        return hoisted, body

    def index_exprs(self, op: Operation, ref: SSAValue) -> list[str]:
        t = ref.type
        assert isinstance(t, MemRefType)
        idx = [self.name(i) for i in op.operands[-len(t.get_shape()) :]] if t.get_shape() else []
        return idx if idx else ["0"]

    def op(self, op: Operation) -> list[str]:
        cls = type(op)
        if isinstance(op, memref.LoadOp):
            p = self.params.index(op.memref)
            idx = self.index_exprs(op, op.memref)
            if self.load_hook is not None:
                expr = self.load_hook(p, idx)
            else:
                expr = f"{self.name(op.memref)}[{', '.join(idx)}]"
            if h := self.half(op.memref):
                expr = f"{h}_load({expr})"
            return [self.assign(op.res, f"{self.cast(op.res.type)}({expr})")]
        if isinstance(op, memref.StoreOp):
            p = self.params.index(op.memref)
            idx = self.index_exprs(op, op.memref)
            elt = op.memref.type.element_type  # type: ignore[attr-defined]
            st = storage_name(elt, self.target)
            if h := self.half(op.memref):
                value = f"{h}_store({self.name(op.value)})"
            else:
                value = f"{'np' if st == 'float16' else 'numba'}.{st}({self.name(op.value)})"
            if self.store_hook is not None:
                return self.store_hook(p, idx, value)
            return [f"{self.name(op.memref)}[{', '.join(idx)}] = {value}"]
        if isinstance(op, arith.ConstantOp):
            v = op.value
            if isinstance(v, FloatAttr):
                lit = repr(float(v.value.data))
                if lit in ("inf", "-inf", "nan"):
                    lit = f"float('{lit}')"
                return [self.assign(op.result, f"{self.cast(op.result.type)}({lit})")]
            if isinstance(v, IntegerAttr):
                val = v.value.data
                if isinstance(op.result.type, IntegerType) and op.result.type.width.data == 1:
                    return [self.assign(op.result, "True" if val else "False")]
                return [self.assign(op.result, f"{self.cast(op.result.type)}({val})")]
            raise UnsupportedKernel(f"constant {v} is not supported in kernels")
        ft = self.cast(op.results[0].type) if op.results else ""
        if cls in _FLOAT_BIN:
            a, b = (self.name(x) for x in op.operands)
            expr = _FLOAT_BIN[cls].format(a=a, b=b)
            # numba has np.fmod on the CPU and math.fmod on CUDA (not the other way round)
            expr = expr.replace("FMOD(", "np.fmod(" if self.target == "cpu" else "math.fmod(")
            return [self.assign(op.results[0], f"{ft}({expr})")]
        if cls in _FLOAT_UN:
            a = self.name(op.operands[0])
            expr = _FLOAT_UN[cls].format(a=a, one=f"{ft}(1.0)", two=f"{ft}(2.0)", third=f"{ft}(1.0 / 3.0)")
            # np.sqrt is LLVM's sqrt intrinsic on the CPU (math.sqrt calls libm and stops
            # the loop from vectorising); CUDA maps math.sqrt to the hardware instruction.
            expr = expr.replace("SQRT(", "np.sqrt(" if self.target == "cpu" else "math.sqrt(")
            return [self.assign(op.results[0], f"{ft}({expr})")]
        if cls is xmath.FmaOp:
            a, b, c = (self.name(x) for x in op.operands)
            return [self.assign(op.results[0], f"{ft}({a} * {b} + {c})")]
        if cls is xmath.FPowIOp:
            a, b = (self.name(x) for x in op.operands)
            return [self.assign(op.results[0], f"{ft}(math.pow({a}, {ft}({b})))")]
        if cls in (xmath.AbsIOp,):
            return [self.assign(op.results[0], f"{self.cast(op.results[0].type)}(abs({self.name(op.operands[0])}))")]
        if cls is arith.ShRUIOp:  # a logical shift: the bits as unsigned
            a, b = (self.name(x) for x in op.operands)
            t = op.results[0].type
            u = "numba.uint64" if isinstance(t, IndexType) else f"numba.uint{int_name(t).removeprefix('int')}"
            return [self.assign(op.results[0], f"{self.cast(t)}({u}({a}) >> {u}({b}))")]
        if cls in _UINT_BIN:  # the bits as unsigned; division by zero gives 0, as arith.py
            a, b = (self.unsigned(x) for x in op.operands)
            t = op.results[0].type
            expr = _UINT_BIN[cls].format(a=a, b=b, x=self.name(op.operands[0]), y=self.name(op.operands[1]))
            return [self.assign(op.results[0], f"{self.cast(t)}({expr})")]
        if cls in _INT_BIN:
            a, b = (self.name(x) for x in op.operands)
            t = op.results[0].type
            expr = _INT_BIN[cls].format(a=a, b=b)
            if isinstance(t, IntegerType) and t.width.data == 1:
                expr = {arith.AndIOp: f"({a} and {b})", arith.OrIOp: f"({a} or {b})", arith.XOrIOp: f"({a} != {b})"}.get(cls, expr)  # type: ignore[call-overload]
                return [self.assign(op.results[0], expr)]
            return [self.assign(op.results[0], f"{self.cast(t)}({expr})")]
        if isinstance(op, arith.CmpfOp):
            pred = _CMPF_NAMES[op.predicate.value.data]
            a, b = self.name(op.lhs), self.name(op.rhs)
            return [self.assign(op.result, _CMPF[pred].format(a=a, b=b))]
        if isinstance(op, arith.CmpiOp):
            pred = _CMPI_NAMES[op.predicate.value.data]
            a, b = self.name(op.lhs), self.name(op.rhs)
            if pred.startswith("u"):
                w = 64 if isinstance(op.lhs.type, IndexType) else op.lhs.type.width.data  # type: ignore[attr-defined]
                a, b = f"numba.uint{max(8, w) if w in (8, 16, 32, 64) else 64}({a})", f"numba.uint{max(8, w) if w in (8, 16, 32, 64) else 64}({b})"
            return [self.assign(op.result, f"({a} {_CMPI[pred]} {b})")]
        if isinstance(op, arith.SelectOp):
            c, a, b = (self.name(x) for x in op.operands)
            return [self.assign(op.result, f"({a} if {c} else {b})")]
        if isinstance(op, (arith.ExtFOp, arith.TruncFOp)):
            # f16/bf16 compute in f32 (rounded on store), so only f64 boundaries convert.
            return [self.assign(op.results[0], f"{ft}({self.name(op.operands[0])})")]
        if isinstance(op, arith.UIToFPOp):  # the bits as unsigned
            return [self.assign(op.results[0], f"{ft}({self.unsigned(op.operands[0])})")]
        if isinstance(op, arith.ExtUIOp):
            return [self.assign(op.results[0], f"{self.cast(op.results[0].type)}({self.unsigned(op.operands[0])})")]
        if isinstance(op, arith.FPToUIOp):  # through uint64: a value above the signed range wraps
            return [self.assign(op.results[0], f"{self.cast(op.results[0].type)}(numba.uint64({self.name(op.operands[0])}))")]
        if isinstance(op, arith.SIToFPOp):
            return [self.assign(op.results[0], f"{ft}({self.name(op.operands[0])})")]
        if isinstance(op, (arith.FPToSIOp, arith.ExtSIOp, arith.TruncIOp, arith.IndexCastOp)):
            return [self.assign(op.results[0], f"{self.cast(op.results[0].type)}({self.name(op.operands[0])})")]
        if isinstance(op, arith.BitcastOp):
            src, dst = op.operands[0].type, op.results[0].type
            if float_bits(src) not in (0, 32, 64) or float_bits(dst) not in (0, 32, 64) or int_name(src if not is_float(src) else dst) not in ("int32", "int64"):
                raise UnsupportedKernel(f"'arith.bitcast' from {src} to {dst} is not supported in kernels (32 and 64 bits)")
            name = f"_bitcast_{'f' if is_float(src) else 'i'}{'f' if is_float(dst) else 'i'}{max(float_bits(src), float_bits(dst))}"
            return [self.assign(op.results[0], f"{name}({self.cast(src)}({self.name(op.operands[0])}))")]
        if isinstance(op, rt.RandomOp):
            seed, index = (self.name(x) for x in op.operands)
            return [self.assign(op.results[0], f"_bits({seed}, {index})")]
        raise UnsupportedKernel(f"'{op.name}' is not supported in kernels")

    def unsigned(self, v: SSAValue) -> str:
        """``v``'s bits as an unsigned integer of its width."""
        t = v.type
        w = 64 if isinstance(t, IndexType) else t.width.data  # type: ignore[attr-defined]
        return f"numba.uint{w if w in (8, 16, 32, 64) else 64}({self.name(v)})"

    def assign(self, v: SSAValue, expr: str) -> str:
        n = self.fresh()
        self.names[v] = n
        return f"{n} = {expr}"


def _indent(lines: Sequence[str], n: int) -> list[str]:
    return [" " * n + line for line in lines]


BITCAST_CPU = '''
# arith.bitcast: the bits of a scalar as another type of the same width (an LLVM bitcast).
from llvmlite import ir as _ir
from numba.core import types as _types
from numba.extending import intrinsic as _intrinsic


def _bitcaster(src, dst, to):
    @_intrinsic
    def cast(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], to)

        return dst(src), codegen

    return cast


_bitcast_fi32 = _bitcaster(_types.float32, _types.int32, _ir.IntType(32))
_bitcast_if32 = _bitcaster(_types.int32, _types.float32, _ir.FloatType())
_bitcast_fi64 = _bitcaster(_types.float64, _types.int64, _ir.IntType(64))
_bitcast_if64 = _bitcaster(_types.int64, _types.float64, _ir.DoubleType())
'''

BITCAST_CUDA = '''
# arith.bitcast on a GPU: libdevice's __float_as_int and friends; in numba's simulator,
# numpy views.
from numba import config as _config

if _config.ENABLE_CUDASIM:
    def _bitcast_fi32(x):
        return np.array([x], np.float32).view(np.int32)[0]

    def _bitcast_if32(x):
        return np.array([x], np.int32).view(np.float32)[0]

    def _bitcast_fi64(x):
        return np.array([x], np.float64).view(np.int64)[0]

    def _bitcast_if64(x):
        return np.array([x], np.int64).view(np.float64)[0]
else:
    from numba.cuda import libdevice as _libdevice

    @_dev
    def _bitcast_fi32(x):
        return _libdevice.float_as_int(x)

    @_dev
    def _bitcast_if32(x):
        return _libdevice.int_as_float(x)

    @_dev
    def _bitcast_fi64(x):
        return _libdevice.double_as_longlong(x)

    @_dev
    def _bitcast_if64(x):
        return _libdevice.longlong_as_double(x)
'''


def _header(target: str, fastmath: Any = None, parallel: bool = False) -> str:
    if target == "cuda":
        dev = "cuda.jit(device=True, inline=True)"
        head = "import math\nimport numba\nimport numpy as np\nfrom numba import cuda\n"
        bitcast = BITCAST_CUDA
    else:
        dev = "numba.njit(inline='always', error_model='numpy')"
        head = "import math\nimport numba\nimport numpy as np\n"
        bitcast = BITCAST_CPU
    return head + f"_dev = {dev}\n" + CONSTANTS + HELPERS + bitcast


def _param_kinds(tr: Translator, target: str) -> tuple[list[str], list[str | None]]:
    kinds, storage = [], []
    for a in tr.params:
        if isinstance(a.type, MemRefType):
            kinds.append("array")
            storage.append(storage_name(a.type.element_type, target))
        elif isinstance(a.type, IndexType):
            kinds.append("index")
            storage.append(None)
        else:
            kinds.append("scalar")
            storage.append(None)
    return kinds, storage


def cpu_source(kernel: rt.KernelOp, variant: ZeroCopy | Bucketed | None = None, aliases: tuple[tuple[int, int], ...] = ()) -> KernelSource:
    """The CPU loop nest of a kernel (its decorator is applied by ``compile_cpu``);
    ``aliases`` are (parameter, earlier parameter holding the same buffer) pairs."""
    tr = Translator(kernel, "cpu", dict(aliases))
    space = kernel.space
    name = "kernel"
    args = [f"a{i}" for i in range(len(tr.params))]
    pre: list[str] = []
    tiled = isinstance(variant, ZeroCopy) and len(space) == 1
    if isinstance(variant, ZeroCopy):
        n = variant.ranks
        flat = "i0" if tiled else _flat_expr(space)
        peers = {variant.reduce_param: [f"r{j}" for j in range(n)]}
        for g in variant.gather_params:
            peers[g] = [f"g{g}_{j}" for j in range(n)]
        extra = peers[variant.reduce_param] + [x for g in variant.gather_params for x in peers[g]] + ["base"]
        args = args + extra
        own = dict(variant.own)
        # the reduction computes in the reduced buffer's precision (f32 for f16/bf16,
        # whose result is rounded once to the buffer's type, as the interpreter rounds
        # it, and held as its bits like the buffer's elements)
        relt = tr.params[variant.reduce_param].type.element_type  # type: ignore[attr-defined]
        rct = tr.ftype(relt)
        rh = half_helper(relt, "cpu")

        def reduced(at: str) -> str:
            terms = [f"{rh}_load({r}[{at}])" if rh else f"numba.{rct}({r}[{at}])" for r in peers[variant.reduce_param]]
            if variant.op in ("sum", "avg", "prod"):
                expr = "(" + (" * " if variant.op == "prod" else " + ").join(terms) + ")"
                if variant.op == "avg":
                    expr = f"({expr} / numba.{rct}({n}))"
            else:
                fn = "_fmax" if variant.op == "max" else "_fmin"
                expr = terms[0]
                for t in terms[1:]:
                    expr = f"{fn}({expr}, {t})"
            return f"{rh}_store({expr})" if rh else expr

        def load(p, idx):
            if p in own:
                return f"g{own[p]}_{variant.me}[base + {flat}]"
            if p == variant.reduce_param:
                # Tiled: the tile's reduction sits in a small (cache-resident) buffer.
                return "tmp[j]" if tiled else reduced(f"base + {flat}")
            return f"{tr.pname(p)}[{', '.join(idx)}]"

        def store(p, idx, value):
            if p not in variant.gather_params:
                return [f"{tr.pname(p)}[{', '.join(idx)}] = {value}"]
            if tiled:  # this rank's buffer now, the peers' after the tile
                return [f"g{p}_{variant.me}[base + i0] = {value}"]
            v = tr.fresh()
            return [f"{v} = {value}"] + [f"{g}[base + {flat}] = {v}" for g in peers[p]]

        tr.load_hook, tr.store_hook = load, store
    if isinstance(variant, Bucketed):
        if len(space) != 1:
            raise UnsupportedKernel("scattered tensors need 1-d kernels")

        def bload(p, idx):
            return f"{tr.pname(p)}[seg][off + j]" if p in variant.scattered else f"{tr.pname(p)}[{', '.join(idx)}]"

        def bstore(p, idx, value):
            return [f"{tr.pname(p)}[seg][off + j] = {value}" if p in variant.scattered else f"{tr.pname(p)}[{', '.join(idx)}] = {value}"]

        tr.load_hook, tr.store_hook = bload, bstore
    hoisted, body = tr.split()
    # Loop bounds are read from an output's shape, so that the source (and its compiled
    # code) is the same for every kernel with this body, whatever its iteration space.
    extent = _extents(tr, kernel)
    lines = [f"def {name}({', '.join(args)}):"]
    lines += _indent(pre + hoisted, 4)
    if isinstance(variant, Bucketed):
        lines[0] = f"def {name}({', '.join(args + ['table'])}):"
        lines += _indent(
            [
                "for b in numba.prange(table.shape[0]):",
                "    seg = table[b, 0]",
                "    off = table[b, 1]",
                "    glob = table[b, 3]",
                "    for j in range(table[b, 2]):",
                "        i0 = glob + j",
            ],
            4,
        )
        lines += _indent(body, 12)
    elif tiled:
        # One tile at a time: reduce the tile from the peers into a small buffer, run
        # the body with in-place writes to this rank's buffers only (few distinct
        # pointers, so LLVM vectorises the loop), then copy the tile's gathered results
        # into the peers' buffers while they are still in cache.
        tile = ZERO_COPY_TILE
        # Indices are unsigned: numba then skips the negative-index fix-up, which
        # would keep the loads from being consecutive (and the loop from vectorising).
        lines += _indent(
            [
                f"tmp = np.empty({tile}, np.{'uint16' if rh else rct})",
                "base = numba.uint64(base)",
                f"for t0 in range(numba.uint64(0), numba.uint64({extent[0]}), numba.uint64({tile})):",
                f"    size = min(numba.uint64({tile}), numba.uint64({extent[0]}) - t0)",
                "    for j in range(size):",
                f"        tmp[j] = {reduced('base + t0 + j')}",
                "    for j in range(size):",
                "        i0 = t0 + j",
            ],
            4,
        )
        lines += _indent(body, 12)
        for g in variant.gather_params:  # type: ignore[union-attr]
            for k in range(variant.ranks):  # type: ignore[union-attr]
                if k != variant.me:  # type: ignore[union-attr]
                    lines += _indent(
                        ["for j in range(size):", f"    g{g}_{k}[base + t0 + j] = g{g}_{variant.me}[base + t0 + j]"], 8  # type: ignore[union-attr]
                    )
    elif not space:
        lines += _indent(body, 4)
    else:
        loop_indent = 4
        for k, bound in enumerate(extent):
            rng_fn = "numba.prange" if k == 0 else "range"
            lines.append(" " * loop_indent + f"for i{k} in {rng_fn}({bound}):")
            loop_indent += 4
        lines += _indent(body, loop_indent)
    if len(lines) == 1 or lines[-1].endswith(":"):
        lines.append("    pass")
    kinds, storage = _param_kinds(tr, "cpu")
    head = _header("cpu")
    if any(isinstance(a.type, MemRefType) and tr.half(a) for a in tr.params):
        head += HALF_HELPERS
    src = head + "\n\n" + "\n".join(lines) + "\n"
    return KernelSource(name, src, "cpu", kinds, storage)


def _extents(tr: Translator, kernel: rt.KernelOp) -> list[str]:
    """The iteration space's extents as expressions: the shape of a stored parameter of
    the space's rank (every kernel stores its results over the whole space), else the
    constants."""
    space = list(kernel.space)
    for op in kernel.body.block.ops:
        if isinstance(op, memref.StoreOp):
            t = op.memref.type
            if isinstance(t, MemRefType) and list(t.get_shape()) == space and space:
                p = tr.params.index(op.memref)
                return [f"{tr.pname(p)}.shape[{k}]" for k in range(len(space))]
    return [str(e) for e in space]


def _flat_expr(space: Sequence[int]) -> str:
    if not space:
        return "0"
    expr = "i0"
    for k in range(1, len(space)):
        expr = f"({expr} * {space[k]} + i{k})"
    return expr


def unravel(ndim: int, extent, index: str = "i", rest_name: str = "r") -> list[str]:
    """Statements turning the flat index ``g`` into indices ``{index}0 ..`` (row-major;
    ``extent(d)`` is the source text of dim d's extent)."""
    lines = []
    rest = "g"
    for k in reversed(range(ndim)):
        if k == 0:
            lines.append(f"{index}0 = {rest}")
        else:
            lines.append(f"{index}{k} = {rest} % {extent(k)}")
            lines.append(f"{rest_name}{k} = {rest} // {extent(k)}")
            rest = f"{rest_name}{k}"
    return lines


def cuda_source(kernel: rt.KernelOp) -> KernelSource:
    """The CUDA kernel of a kernel: one thread per element, grid-stride loop."""
    tr = Translator(kernel, "cuda")
    space = kernel.space
    total = math.prod(space)
    hoisted, body = tr.split()
    args = [f"a{i}" for i in range(len(tr.params))]
    lines = [f"def kernel({', '.join(args)}):"]
    lines += _indent(hoisted, 4)
    lines.append(f"    for g in range(cuda.grid(1), {total}, cuda.gridsize(1)):")
    idx = unravel(len(space), lambda k: str(space[k]))
    lines += _indent(idx + body if body else idx + ["pass"], 8)
    kinds, storage = _param_kinds(tr, "cuda")
    head = _header("cuda")
    if any(isinstance(a.type, MemRefType) and tr.half(a) for a in tr.params):
        head += BF16_HELPERS
    src = head + "\n\n" + "\n".join(lines) + "\n"
    return KernelSource("kernel", src, "cuda", kinds, storage)


# ======================================================================================
# Compilation (cached by source)
# ======================================================================================

_LOCK = threading.Lock()
_COMPILED: dict[tuple, Any] = {}


def cache_dir() -> Path:
    """Where generated kernel modules (and Numba's cache of them) live: ``kernels`` in the
    user's cache directory (``platformdirs``: ``~/.cache/distir/kernels`` on Linux, as
    the calibration's)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("distir")) / "kernels"


def _load_module(source: str, tag: str):
    """The module of a kernel's source: a file in the cache directory (Numba caches a
    function only when its module has one), or, when the cache cannot be written (a
    read-only folder, a file where the folder should be), a module in memory, with a
    warning (``cached`` is then False on it)."""
    digest = hashlib.sha256((tag + source).encode()).hexdigest()[:24]
    modname = f"distir_kernel_{digest}"
    if modname in sys.modules:
        return sys.modules[modname]
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{modname}.py"
        if not path.exists() or path.read_text(errors="replace") != source:
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(modname, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.cached = True
    except OSError as e:
        import types

        why = "it is a file, not a folder" if d.exists() and not d.is_dir() else e.strerror or str(e)
        _cache_warning(f"the kernel cache {d} cannot be written ({why}): kernels are compiled in every run")
        mod = types.ModuleType(modname)
        exec(compile(source, f"<{modname}>", "exec"), mod.__dict__)
        mod.cached = False
    sys.modules[modname] = mod
    return mod


def _cache_warning(text: str) -> None:
    """A warning about the kernel cache, once per process."""
    from distir.dialects.diagnostics import warn_once

    warn_once(text)


def _robust_cache(fn):
    """``fn`` (a Numba dispatcher with ``cache=True``) whose on-disk cache never fails a
    run: a cached kernel that cannot be read (an empty or truncated index or data file:
    Numba raised EOFError or UnpicklingError at every call until the cache was deleted by
    hand) is a warning, its entries are dropped and the kernel compiled and cached again;
    one that cannot be written is a warning."""
    cache = getattr(fn, "_cache", None)
    if cache is None or not hasattr(cache, "load_overload"):
        return fn
    load, save = cache.load_overload, cache.save_overload

    def load_overload(*args, **kwargs):
        try:
            return load(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any damage to the files: compile again
            _cache_warning(f"a cached kernel in {cache_dir()} could not be read ({type(e).__name__}: {e}): it is compiled and cached again")
            try:
                cache.flush()
            except Exception:  # noqa: BLE001 - the index cannot even be rewritten
                pass
            return None

    def save_overload(*args, **kwargs):
        try:
            return save(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the kernel runs; only the cache misses it
            _cache_warning(f"a kernel could not be cached in {cache_dir()} ({type(e).__name__}: {e})")
            return None

    cache.load_overload, cache.save_overload = load_overload, save_overload
    return _compiled_once_per_machine(fn)


def _compiled_once_per_machine(fn):
    """``fn`` (a cached dispatcher) whose first compilation of a signature holds a lock
    file beside its module in the kernel cache: processes that need the same kernel at
    the same time (the ranks of one ``mpiexec`` job, every rank lowering the same
    program) wait while the first compiles it and then load it from Numba's cache,
    instead of each compiling it (a 4-rank job of the JAX programs: 190 kernels compiled
    by each rank, 80% of its CPU). A waiting process sleeps in ``flock``. No lock where
    ``fcntl`` is missing (Windows) or the lock file cannot be opened: each compiles."""
    try:
        import fcntl
    except ImportError:
        return fn
    compile_ = fn.compile
    path = cache_dir() / f"{fn.py_func.__module__}.lock"

    def compile(sig):
        from numba.core.compiler_lock import global_compiler_lock

        # a compilation inside another (a kernel typing a call to a kernel) already holds
        # Numba's lock, which a thread of this process waiting on the file may need
        if global_compiler_lock.is_locked():
            return compile_(sig)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return compile_(sig)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return compile_(sig)
        finally:
            os.close(fd)  # releases the lock

    fn.compile = compile
    return fn


def _quiet_numba_notes() -> None:
    """Numba's note that ``parallel=True`` found nothing to parallelise (a small or
    sequential kernel) is for distir's developers, not its users."""
    import warnings

    from numba.core.errors import NumbaPerformanceWarning

    warnings.filterwarnings("ignore", message=r"(?s).*The keyword argument 'parallel=True' was specified", category=NumbaPerformanceWarning)


def compile_cpu(ks: KernelSource, parallel: bool = False, fastmath: frozenset[str] = DEFAULT_FASTMATH):
    """The ``numba.njit`` function of a CPU kernel source (compiled lazily on first call)."""
    import numba

    if parallel:
        _quiet_numba_notes()

    key = ("cpu", ks.source, parallel, fastmath)
    with _LOCK:
        fn = _COMPILED.get(key)
        if fn is None:
            mod = _load_module(ks.source, "cpu")
            options = dict(parallel=parallel, fastmath=set(fastmath), error_model="numpy", nogil=True)
            try:
                fn = _robust_cache(numba.njit(**options, cache=mod.cached)(getattr(mod, ks.name)))
            except RuntimeError as e:  # Numba finds no usable cache folder for the module
                _cache_warning(f"kernels cannot be cached ({e}): they are compiled in every run")
                fn = numba.njit(**options)(getattr(mod, ks.name))
            _COMPILED[key] = fn
    return fn


def compile_cuda(ks: KernelSource):
    """The ``numba.cuda.jit`` kernel of a CUDA kernel source."""
    from numba import cuda

    key = ("cuda", ks.source)
    with _LOCK:
        fn = _COMPILED.get(key)
        if fn is None:
            mod = _load_module(ks.source, "cuda")
            fn = cuda.jit(getattr(mod, ks.name))
            _COMPILED[key] = fn
    return fn
