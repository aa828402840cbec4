"""StableHLO's own rules, checked on the syntax tree before any op is translated, so that
an invalid program is a located diagnostic and never a program of another meaning.

The reader (``mlir_text.py``) keeps the types each op declares; these rules compare them
(StableHLO's specification, https://openxla.org/stablehlo/spec, for each op read):

================================  ====================================================
rule                              checked
================================  ====================================================
a value's uses                    every use names the value with the type its
                                  definition declared (``%x has type tensor<4xf32>,
                                  the op's type says tensor<4xf16>``)
terminators                       a function body or a region ends with its return,
                                  and nothing follows it; a function returns the
                                  types of its signature
calls                             ``func.call @f`` takes and gives exactly ``@f``'s
                                  argument and result types
element-wise ops                  operands and result of one type (``add``,
                                  ``exponential``, ``chlo.erf``, ...); float-only ops
                                  on floats, bitwise ops and shifts on integers
                                  (shifts, ``subtract``, ``divide``, ``negate``, ...
                                  are not defined on i1)
``compare``                       operands of one type, an i1 result of their shape,
                                  a comparison type that fits the element type
                                  (FLOAT/TOTALORDER floats, SIGNED signed integers,
                                  UNSIGNED unsigned integers and i1)
``select``, ``clamp``             the predicate i1 (scalar or of the operands'
                                  shape), the bounds scalar or of the operand's shape,
                                  the values and the result of one type
``convert``, ``bitcast_convert``  one shape (and one element width for a bitcast)
``is_finite``                     a float operand, an i1 result of its shape
================================  ====================================================

The op-specific shape rules (dims of a broadcast, a transpose's permutation, dot
dimension numbers, ...) are checked by each op's translation (``stablehlo.py``), and
Shardy's attributes by ``sdy.py`` (a misspelled ``sdy.sharding`` is a diagnostic, never
a replicated value).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Span

from distir.frontends.mlir_text import Block, Module, OpNode, TensorT, Type

UNSIGNED = ("ui8", "ui16", "ui32", "ui64")
FLOATS = ("f16", "bf16", "f32", "f64")

SAME_TYPE = {
    *("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "atan2"),
    *("and", "or", "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical", "not"),
    *("negate", "abs", "sign", "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic"),
    *("sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh", "floor", "ceil"),
    *("round_nearest_even", "round_nearest_afz", "reduce_precision", "optimization_barrier"),
}
"""StableHLO ops whose operands and results all have one type."""

CHLO_SAME_TYPE = ("square", "erf", "erfc", "tan")

FLOAT_ONLY = {
    *("exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "sqrt", "rsqrt", "cbrt"),
    *("sine", "cosine", "tan", "tanh", "floor", "ceil", "round_nearest_even", "round_nearest_afz"),
    *("atan2", "reduce_precision", "is_finite", "erf", "erfc"),
}
INTEGER_ONLY = {"shift_left", "shift_right_arithmetic", "shift_right_logical"}
"""Integer types only (not i1)."""
BITWISE = {"and", "or", "xor", "not"}
"""Integers or booleans."""
NOT_BOOLEAN = {"subtract", "divide", "remainder", "power", "negate", "abs", "sign"}
"""Integers or floats, not i1 (booleans have add/multiply/maximum/minimum as or/and)."""

TERMINATORS = ("func.return", "return", "stablehlo.return", "sdy.return", "shard.return")


def _fmt(t: Type) -> str:
    return str(t)


def _is_float(elt: str) -> bool:
    return elt in FLOATS


class Verifier:
    def __init__(self, module: Module):
        self.module = module
        self.funcs = {op.sym: op for op in module.ops if op.name == "func.func" and op.sym}

    def error(self, span: Span, msg: str) -> ParseError:
        return ParseError(span, msg)

    def run(self) -> None:
        for op in self.module.ops:
            if op.name == "func.func" and op.regions:
                self.function(op)

    # ------------------------------------------------------------------ bodies
    def function(self, f: OpNode) -> None:
        (body,) = f.regions[0][:1] or [None]
        if body is None:
            return
        env: dict[str, Type] = {}
        ret = self.block(body, env, f"function @{f.sym}")
        if ret is not None and ret.name in ("func.return", "return"):
            self.same_types(ret, ret.in_types, f.out_types, f"@{f.sym} returns", "its signature says")

    def block(self, block: Block, env: dict[str, Type], what: str) -> OpNode | None:
        """Check a block's ops; its terminator (None if it has none)."""
        env = dict(env)
        for v, t in block.args:
            env[v.name] = t
        for k, op in enumerate(block.ops):
            if op.name in TERMINATORS:
                if k != len(block.ops) - 1:
                    after = block.ops[k + 1]
                    raise self.error(after.span, f"'{after.name}' after the return of {what}: a return ends its block")
                self.uses(op, env)
                return op
            self.uses(op, env)
            self.rule(op)
            for region in op.regions:
                for b in region:
                    self.block(b, env, f"the region of '{op.name}'")
            for i, r in enumerate(op.results):
                if i < len(op.out_types):
                    env[r.name] = op.out_types[i]
        return None

    def uses(self, op: OpNode, env: dict[str, Type]) -> None:
        for i, v in enumerate(op.operands):
            have = env.get(v.name)
            want = op.in_types[i] if i < len(op.in_types) else None
            if isinstance(have, TensorT) and isinstance(want, TensorT) and have != want:
                raise self.error(v.span, f"%{v.name} has type {have}, the op's type says {want}")
        if op.name in ("func.call", "call"):
            self.call(op)

    def call(self, op: OpNode) -> None:
        callee = self.funcs.get(op.sym or "")
        if callee is None:
            return  # the translation names the unknown callee
        self.same_types(op, op.in_types, callee.in_types, f"the call of @{op.sym} passes", f"@{op.sym} takes")
        self.same_types(op, op.out_types, callee.out_types, f"the call of @{op.sym} expects", f"@{op.sym} returns")

    def same_types(self, op: OpNode, got: Sequence[Type], want: Sequence[Type], said: str, says: str) -> None:
        if len(got) != len(want) or any(a != b for a, b in zip(got, want)):
            raise self.error(op.span, f"{said} ({', '.join(map(_fmt, got))}), {says} ({', '.join(map(_fmt, want))})")

    # ------------------------------------------------------------------ per-op rules
    def rule(self, op: OpNode) -> None:
        dialect, _, kind = op.name.partition(".")
        if dialect not in ("stablehlo", "chlo"):
            return
        tensors = [t for t in (*op.in_types, *op.out_types) if isinstance(t, TensorT)]
        if len(tensors) != len(op.in_types) + len(op.out_types) or not tensors:
            return
        ins, outs = op.in_types, op.out_types
        if kind in SAME_TYPE or (dialect == "chlo" and kind in CHLO_SAME_TYPE):
            if any(t != tensors[0] for t in tensors):
                raise self.error(op.span, f"'{op.name}' takes and gives one type, got ({', '.join(map(_fmt, ins))}) -> {', '.join(map(_fmt, outs))}")
            self.element_kind(op, kind, tensors[0].elt)
        elif kind == "compare":
            self.compare(op)
        elif kind == "select" and len(ins) == 3 and len(outs) == 1:
            p, a, b = ins
            if p.elt != "i1" or p.shape not in ((), a.shape) or a != b or a != outs[0]:
                raise self.error(op.span, f"'stablehlo.select' takes an i1 predicate (scalar or of the values' shape) and two values of the result's type, got ({', '.join(map(_fmt, ins))}) -> {_fmt(outs[0])}")
        elif kind == "clamp" and len(ins) == 3 and len(outs) == 1:
            lo, x, hi = ins
            if x != outs[0] or any(b.elt != x.elt or b.shape not in ((), x.shape) for b in (lo, hi)):
                raise self.error(op.span, f"'stablehlo.clamp' takes bounds of the operand's element type (scalar or of its shape) and gives the operand's type, got ({', '.join(map(_fmt, ins))}) -> {_fmt(outs[0])}")
        elif kind in ("convert", "bitcast_convert") and len(ins) == 1 and len(outs) == 1:
            if ins[0].shape != outs[0].shape:
                raise self.error(op.span, f"'{op.name}' keeps the shape, got {_fmt(ins[0])} -> {_fmt(outs[0])}")
            if kind == "bitcast_convert" and _width(ins[0].elt) != _width(outs[0].elt):
                raise self.error(op.span, f"'stablehlo.bitcast_convert' between element types of different widths ({ins[0].elt}, {outs[0].elt}) changes the shape, which distir does not read")
        elif kind == "is_finite" and len(ins) == 1 and len(outs) == 1:
            if not _is_float(ins[0].elt) or outs[0].elt != "i1" or outs[0].shape != ins[0].shape:
                raise self.error(op.span, f"'stablehlo.is_finite' takes floats and gives i1 of their shape, got {_fmt(ins[0])} -> {_fmt(outs[0])}")

    def element_kind(self, op: OpNode, kind: str, elt: str) -> None:
        if kind in FLOAT_ONLY and not _is_float(elt):
            raise self.error(op.span, f"'{op.name}' is defined on floats, got {elt}")
        if kind in INTEGER_ONLY and (_is_float(elt) or elt == "i1"):
            raise self.error(op.span, f"'{op.name}' is defined on integers, got {elt}")
        if kind in BITWISE and _is_float(elt):
            raise self.error(op.span, f"'{op.name}' is defined on integers and booleans, got {elt}")
        if kind in NOT_BOOLEAN and elt == "i1":
            raise self.error(op.span, f"'{op.name}' is not defined on i1 (booleans) in StableHLO")

    def compare(self, op: OpNode) -> None:
        ins, outs = op.in_types, op.out_types
        if len(ins) != 2 or len(outs) != 1:
            return
        a, b = ins
        if a != b or outs[0].elt != "i1" or outs[0].shape != a.shape:
            raise self.error(op.span, f"'stablehlo.compare' takes two operands of one type and gives i1 of their shape, got ({_fmt(a)}, {_fmt(b)}) -> {_fmt(outs[0])}")
        ctype = op.attrs.get("compare_type")
        if ctype is not None and not isinstance(ctype, str):
            text = getattr(ctype, "text", "")
            ctype = text.rstrip(">").split()[-1] if text else None
        if ctype is None:
            return
        fits = {"FLOAT": _is_float(a.elt), "TOTALORDER": _is_float(a.elt), "SIGNED": not _is_float(a.elt) and a.elt not in UNSIGNED and a.elt != "i1", "UNSIGNED": a.elt in UNSIGNED or a.elt == "i1"}
        if not fits.get(str(ctype), False):
            raise self.error(op.span, f"comparison type {ctype} does not fit {a.elt} (FLOAT or TOTALORDER for floats, SIGNED for signed integers, UNSIGNED for unsigned integers and i1)")


def _width(elt: str) -> int:
    digits = "".join(c for c in elt if c.isdigit())
    return int(digits) if digits else 0


def verify(module: Module) -> None:
    """Raise a located ``ParseError`` at the first broken StableHLO rule of ``module``."""
    Verifier(module).run()

