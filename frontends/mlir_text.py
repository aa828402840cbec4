"""A reader for the MLIR text that the front ends accept: a lexer, MLIR's generic op form,
attribute values, types, regions, and hooks for the custom (pretty) forms of the ops of
each source dialect (``stablehlo.py``, ``sdy.py``, ``shard.py`` register theirs).

The reader builds a small syntax tree (``Module`` of ``OpNode``s), not xDSL IR: the source
dialects are not xDSL dialects, and their custom syntaxes are irregular. Everything that
is not accepted is a ``ParseError`` (xDSL's type, so the tools print it like every other
diagnostic: ``file:line:col``, the source line, a caret, the message), never another
exception: integers are bounded, nesting is bounded, and every token the grammar does
not expect names what was expected and what was found.

Grammar accepted (MLIR's, restricted to what the source dialects print)::

    module     ::= [`module` [@name] [`attributes` attr-dict]] `{` op* `}` | op*
    op         ::= [results `=`] (generic-op | custom-op) [`loc(...)`]
    results    ::= result (`,` result)*        result ::= %name [`:` N]
    generic-op ::= string `(` operands `)` [`<{` props `}>`] [`(` region (`,` region)* `)`]
                   [attr-dict] `:` function-type
    custom-op  ::= bare-name <the op's own syntax, read by its registered hook>
    region     ::= `{` [block-label] op* `}`      block-label ::= ^name [`(` args `)`] `:`
    type       ::= tensor<DxDx...xE> | E | !dialect.name[<...>] | `(` types `)` `->` types

A value is named ``%name`` or ``%name#k`` (result k of a multi-result op ``%name:N``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Input, Span

MAX_NESTING = 64
"""Deepest nesting of regions and attribute brackets accepted (real programs: < 10)."""

MAX_INT_DIGITS = 40
"""Longest integer literal accepted (an i128 needs 39 digits)."""

MAX_DIMS = 64
"""Most dims of a tensor type."""

ELEMENT_TYPES = ("f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64")
"""Element types a program may use besides the unsigned ones (complex, f8 and sub-byte
types are rejected)."""
UNSIGNED_TYPES = ("ui8", "ui16", "ui32", "ui64")
"""Unsigned types (``partition_id``, random bits); distir computes on their bits as
signless integers of their width (``stablehlo.py``)."""


# ======================================================================================
# Syntax tree
# ======================================================================================


@dataclass(frozen=True)
class TensorT:
    """``tensor<8x16xf32>``: a static shape and an element type name."""

    shape: tuple[int, ...]
    elt: str

    def __str__(self) -> str:
        return "tensor<" + "".join(f"{d}x" for d in self.shape) + self.elt + ">"

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class OtherT:
    """A type the reader keeps as text (``!shard.sharding``, an element type alone)."""

    text: str

    def __str__(self) -> str:
        return self.text


Type = TensorT | OtherT


@dataclass(frozen=True)
class Opaque:
    """An attribute value kept as its source text (``#stablehlo.channel_handle<...>``)."""

    text: str


@dataclass(frozen=True)
class Dense:
    """``dense<...> : tensor<...>``: the literal's values (nested lists or one value) and
    the tensor type."""

    value: Any
    type: Type | None


@dataclass(frozen=True)
class SymRef:
    name: str


@dataclass(frozen=True)
class Typed:
    """``4 : i64``, ``1.0 : f32``: a number with a type."""

    value: Any
    type: Type


@dataclass(eq=False)
class Value:
    """A use of an SSA value: its name (``0``, ``arg3``, ``1#1``) and where it is written."""

    name: str
    span: Span


@dataclass(eq=False)
class Block:
    args: list[tuple[Value, Type]]
    ops: list[OpNode]


@dataclass(eq=False)
class OpNode:
    """One operation: its name, result names, operand uses, attributes (generic
    attributes and properties, and whatever the custom form read), types and regions."""

    name: str
    span: Span
    results: list[Value] = field(default_factory=list)
    operands: list[Value] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    in_types: list[Type] = field(default_factory=list)
    out_types: list[Type] = field(default_factory=list)
    regions: list[list[Block]] = field(default_factory=list)
    # ``func.func``: the symbol, argument and result attributes
    sym: str | None = None
    arg_attrs: list[dict[str, Any]] = field(default_factory=list)
    res_attrs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(eq=False)
class Module:
    ops: list[OpNode]
    source: Input
    name: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


# ======================================================================================
# Lexer
# ======================================================================================

_TOKEN = re.compile(
    r"""
    (?P<ws>(?:\s|//[^\n]*)+)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<ssa>%[A-Za-z0-9_$.\-]+(?:\#[0-9]+)?)
  | (?P<sym>@(?:[A-Za-z_$.][A-Za-z0-9_$.\-]*|"(?:[^"\\\n]|\\.)*"))
  | (?P<hash>\#[A-Za-z_][A-Za-z0-9_$.]*)
  | (?P<bang>![A-Za-z_][A-Za-z0-9_$.]*)
  | (?P<caret>\^[A-Za-z0-9_$.\-]+)
  | (?P<hex>0x[0-9A-Fa-f]+)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?)
  | (?P<int>[0-9]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_$.]*)
  | (?P<arrow>->)
  | (?P<punct>[()\[\]{}<>,:=*?+\-|])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int
    end: int


_EOF_KIND = "eof"


class Reader:
    """A cursor over the text with the grammar's building blocks. Custom-form hooks use
    it to read their op's syntax; every ``expect_*`` raises a located ``ParseError``."""

    def __init__(self, text: str, name: str, hooks: dict[str, Callable[[Reader, OpNode], None]] | None = None):
        self.text = text
        self.input = Input(text, name)
        self.pos = 0
        self.hooks = hooks or {}
        self.attr_hooks: dict[str, Callable[[Reader, int], Any]] = {}
        self.depth = 0
        self._tok: Token | None = None

    # ------------------------------------------------------------------ tokens
    def error(self, msg: str, start: int | None = None, end: int | None = None) -> ParseError:
        if start is None:
            t = self.peek()
            start, end = t.start, max(t.end, t.start + 1)
        if end is None or end <= start:
            end = start + 1
        end = min(end, max(len(self.text), start + 1))
        return ParseError(Span(start, end, self.input), msg)

    def peek(self) -> Token:
        if self._tok is not None:
            return self._tok
        pos = self.pos
        while True:
            m = _TOKEN.match(self.text, pos)
            if m is None:
                if pos >= len(self.text):
                    self._tok = Token(_EOF_KIND, "", pos, pos)
                    return self._tok
                raise ParseError(Span(pos, pos + 1, self.input), f"unexpected character {self.text[pos]!r}")
            if m.lastgroup == "ws":
                pos = m.end()
                continue
            if m.lastgroup == "string" and m.end() - m.start() > 100_000:
                raise ParseError(Span(pos, pos + 1, self.input), "string literal too long")
            self._tok = Token(m.lastgroup or "", m.group(), m.start(), m.end())
            if self._tok.kind == "int" and len(self._tok.text) > MAX_INT_DIGITS:
                raise self.error(f"integer literal of {len(self._tok.text)} digits is out of range", m.start(), m.end())
            return self._tok

    def next(self) -> Token:
        t = self.peek()
        self.pos = t.end
        self._tok = None
        return t

    def at(self, text: str) -> bool:
        t = self.peek()
        return t.text == text and t.kind in ("punct", "arrow", "ident")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def describe(self, t: Token) -> str:
        return "the end of the input" if t.kind == _EOF_KIND else f"'{t.text}'"

    def expect(self, text: str, what: str = "") -> Token:
        t = self.peek()
        if not self.at(text):
            raise self.error(f"expected '{text}'{what}, got {self.describe(t)}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        t = self.peek()
        if t.kind != kind:
            raise self.error(f"expected {what}, got {self.describe(t)}")
        return self.next()

    def ident(self, what: str = "an identifier") -> str:
        return self.expect_kind("ident", what).text

    def keyword(self, word: str, what: str = "") -> None:
        t = self.peek()
        if t.kind != "ident" or t.text != word:
            raise self.error(f"expected '{word}'{what}, got {self.describe(t)}")
        self.next()

    def string(self, what: str = "a string") -> str:
        t = self.expect_kind("string", what)
        return unescape(t.text[1:-1])

    def integer(self, what: str = "an integer") -> int:
        neg = self.accept("-")
        t = self.peek()
        if t.kind == "hex":
            self.next()
            return -int(t.text, 16) if neg else int(t.text, 16)
        t = self.expect_kind("int", what)
        return -int(t.text) if neg else int(t.text)

    def number(self, what: str = "a number") -> int | float:
        neg = self.accept("-")
        t = self.peek()
        if t.kind == "float":
            self.next()
            try:
                v = float(t.text)
            except (ValueError, OverflowError):
                raise self.error(f"bad number {t.text}", t.start, t.end) from None
            return -v if neg else v
        if t.kind in ("int", "hex"):
            self.next()
            v = int(t.text, 16 if t.kind == "hex" else 10)
            return -v if neg else v
        raise self.error(f"expected {what}, got {self.describe(t)}")

    def int_list(self, what: str = "a list of integers") -> list[int]:
        """``[1, 2, 3]`` (``[]`` allowed)."""
        self.expect("[", f" to start {what}")
        return self.items("]", lambda: self.integer(f"an integer in {what}"), f" or ']' in {what}")

    def items(self, close: str, read: Callable[[], Any], what: str = "") -> list[Any]:
        """Items read by ``read``, separated by commas, up to ``close`` (the opening
        bracket already read; none allowed). ``what`` ends the message of a missing comma."""
        out: list[Any] = []
        if not self.accept(close):
            while True:
                out.append(read())
                if self.accept(close):
                    break
                self.expect(",", what)
        return out

    def value(self) -> Value:
        t = self.expect_kind("ssa", "a value (%name)")
        return Value(t.text[1:], Span(t.start, t.end, self.input))

    def values(self) -> list[Value]:
        """``%a, %b`` (possibly none)."""
        out: list[Value] = []
        if self.peek().kind != "ssa":
            return out
        out.append(self.value())
        while self.accept(","):
            out.append(self.value())
        return out

    def symbol(self, what: str = "a symbol (@name)") -> str:
        t = self.expect_kind("sym", what)
        s = t.text[1:]
        return unescape(s[1:-1]) if s.startswith('"') else s

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"nesting deeper than {MAX_NESTING} levels")

    def unnest(self) -> None:
        self.depth -= 1

    # ------------------------------------------------------------------ types
    _TENSOR = re.compile(r"tensor\s*<\s*((?:(?:[0-9]+|\?)\s*x\s*)*)([A-Za-z][A-Za-z0-9_]*)\s*(,|>)")

    def type(self, what: str = "a type") -> Type:
        t = self.peek()
        if t.kind == "ident" and t.text == "tensor":
            m = self._TENSOR.match(self.text, t.start)
            if m is None:
                raise self.error("expected a tensor type such as tensor<4x8xf32>", t.start, t.end)
            dims_text = [d for d in re.split(r"\s*x\s*", m.group(1).strip()) if d]
            if len(dims_text) > MAX_DIMS:
                raise self.error(f"tensor type with more than {MAX_DIMS} dims", t.start, m.end())
            if any(d == "?" for d in dims_text):
                raise self.error("dynamic dims ('?') are not supported: shapes must be static", t.start, m.end())
            if any(len(d) > 18 for d in dims_text):
                raise self.error("tensor dimension out of range", t.start, m.end())
            elt = m.group(2)
            if m.group(3) == ",":
                raise self.error("tensor types with an encoding are not supported", m.start(3), m.end(3))
            self.pos = m.end()
            self._tok = None
            tt = TensorT(tuple(int(d) for d in dims_text), elt)
            check_element_type(self, elt, t.start, m.end())
            return tt
        if t.kind == "ident":
            self.next()
            return OtherT(t.text)
        if t.kind == "bang":
            self.next()
            text = t.text
            if self.at("<"):
                text += self.balanced("<", ">")
            return OtherT(text)
        raise self.error(f"expected {what}, got {self.describe(t)}")

    def type_list(self) -> list[Type]:
        """``T`` or ``(T, S, ...)``."""
        if self.accept("("):
            out: list[Type] = []
            if not self.accept(")"):
                while True:
                    out.append(self.type())
                    if self.accept(")"):
                        break
                    self.expect(",", " or ')' in a type list")
            return out
        return [self.type()]

    def function_type(self) -> tuple[list[Type], list[Type]]:
        """``(T, S) -> U`` or ``(T) -> (U, V)``."""
        ins = self.type_list()
        self.expect("->", " in a function type")
        outs = self.type_list()
        return ins, outs

    def balanced(self, open_: str, close: str) -> str:
        """The text from the current ``open_`` to its matching ``close`` (for attributes
        the reader keeps opaque)."""
        start = self.peek().start
        self.expect(open_)
        depth = 1
        pairs = {"<": ">", "[": "]", "(": ")", "{": "}"}
        stack = [close]
        while depth:
            t = self.peek()
            if t.kind == _EOF_KIND:
                raise self.error(f"expected '{stack[-1]}' to close the '{open_}' opened here", start, start + 1)
            self.next()
            if t.kind in ("punct",) and t.text in pairs:
                stack.append(pairs[t.text])
                depth += 1
                if depth > MAX_NESTING:
                    raise self.error(f"nesting deeper than {MAX_NESTING} levels", t.start, t.end)
            elif t.kind == "punct" and t.text == stack[-1]:
                stack.pop()
                depth -= 1
            elif t.kind == "punct" and t.text in ")]}":
                raise self.error(f"expected '{stack[-1]}', got '{t.text}'", t.start, t.end)
        return self.text[start : self.pos]

    # ------------------------------------------------------------------ attributes
    def attr_dict(self) -> dict[str, Any]:
        """``{name = value, unit_name, ...}``."""
        self.expect("{")
        self.nest()
        out: dict[str, Any] = {}
        if not self.accept("}"):
            while True:
                t = self.peek()
                if t.kind == "string":
                    key = self.string()
                else:
                    key = self.ident("an attribute name")
                out[key] = self.attr_value() if self.accept("=") else True
                if self.accept("}"):
                    break
                self.expect(",", " or '}' in an attribute dictionary")
        self.unnest()
        return out

    def attr_value(self) -> Any:
        t = self.peek()
        self.nest()
        try:
            return self._attr_value(t)
        finally:
            self.unnest()

    def _attr_value(self, t: Token) -> Any:
        if t.kind == "string":
            s = self.string()
            return Typed(s, self.type()) if self.accept(":") else s
        if t.kind == "sym":
            return SymRef(self.symbol())
        if t.kind in ("int", "float", "hex") or (t.kind == "punct" and t.text == "-"):
            v = self.number()
            if self.accept(":"):
                return Typed(v, self.type())
            return v
        if t.kind == "hash":
            hook = self.attr_hooks.get(t.text)
            if hook is not None:
                self.next()
                return hook(self, t.start)
            self.next()
            text = t.text + (self.balanced("<", ">") if self.at("<") else "")
            return Opaque(text)
        if t.kind == "punct" and t.text == "[":
            self.next()
            out: list[Any] = []
            if not self.accept("]"):
                while True:
                    out.append(self.attr_value())
                    if self.accept("]"):
                        break
                    self.expect(",", " or ']' in an array attribute")
            return out
        if t.kind == "punct" and t.text == "{":
            return self.attr_dict()
        if t.kind == "ident":
            if t.text == "dense":
                return self.dense()
            if t.text == "array":
                return self.dense_array()
            if t.text in ("true", "false"):
                self.next()
                return t.text == "true"
            if t.text in ("unit",):
                self.next()
                return True
            if t.text == "tensor" or t.text in ELEMENT_TYPES or t.text in ("index",):
                return self.type()
            self.next()
            text = t.text + (self.balanced("<", ">") if self.at("<") else "")
            return Opaque(text)
        if t.kind == "bang":
            return self.type()
        raise self.error(f"expected an attribute value, got {self.describe(t)}")

    def dense(self) -> Dense:
        """``dense<LITERAL> : tensor<...>`` (a literal: a number, true/false, a hex bit
        pattern, a string, or nested ``[...]`` lists of them)."""
        self.keyword("dense")
        self.expect("<", " after 'dense'")
        value = None if self.at(">") else self._dense_literal()
        self.expect(">", " to close 'dense<'")
        ty = None
        if self.accept(":"):
            ty = self.type()
        return Dense(value, ty)

    def _dense_literal(self) -> Any:
        t = self.peek()
        if t.kind == "punct" and t.text == "[":
            self.next()
            self.nest()
            out: list[Any] = []
            if not self.accept("]"):
                while True:
                    out.append(self._dense_literal())
                    if self.accept("]"):
                        break
                    self.expect(",", " or ']' in a dense literal")
            self.unnest()
            return out
        if t.kind == "ident" and t.text in ("true", "false"):
            self.next()
            return t.text == "true"
        if t.kind == "hex":
            self.next()
            return HexBits(t.text)
        if t.kind == "string":
            return self.string()
        if t.kind == "punct" and t.text == "(":
            raise self.error("complex constants are not supported")
        return self.number("a number in a dense literal")

    def dense_array(self) -> list[int | float]:
        """``array<i64: 1, 2>``."""
        self.keyword("array")
        self.expect("<", " after 'array'")
        self.type()
        out: list[int | float] = []
        if self.accept(":"):
            while True:
                out.append(self.number())
                if not self.accept(","):
                    break
        self.expect(">", " to close 'array<'")
        return out

    # ------------------------------------------------------------------ ops
    def skip_aliases(self) -> None:
        """Attribute aliases at the top level (``#loc1 = loc("x")``, which JAX prints with
        ``as_text(debug_info=True)``): read and ignored (locations are ignored)."""
        while self.peek().kind == "hash" and self.text[self.peek().end :].lstrip().startswith("="):
            self.next()
            self.expect("=")
            t = self.peek()
            if t.kind == "ident" and t.text == "loc":
                self.next()
                self.balanced("(", ")")
            else:
                self.attr_value()

    def module(self) -> Module:
        self.skip_aliases()
        t = self.peek()
        name = None
        attrs: dict[str, Any] = {}
        if t.kind == "ident" and t.text in ("module", "builtin.module"):
            self.next()
            if self.peek().kind == "sym":
                name = self.symbol()
            if self.peek().kind == "ident" and self.peek().text == "attributes":
                self.next()
                attrs = self.attr_dict()
            self.expect("{", " to open the module body")
            ops = self.ops_until("}")
            self.expect("}")
            self.skip_location()
            self.skip_aliases()
        else:
            ops = self.ops_until(None)
        if self.peek().kind != _EOF_KIND:
            raise self.error(f"expected the end of the input, got {self.describe(self.peek())}")
        return Module(ops, self.input, name, attrs)

    def ops_until(self, close: str | None) -> list[OpNode]:
        out: list[OpNode] = []
        while True:
            t = self.peek()
            if t.kind == _EOF_KIND:
                if close is None:
                    return out
                raise self.error(f"expected '{close}', got the end of the input")
            if close is not None and t.kind == "punct" and t.text == close:
                return out
            out.append(self.op())

    def op(self) -> OpNode:
        start = self.peek().start
        results: list[Value] = []
        if self.peek().kind == "ssa":
            while True:
                v = self.value()
                if "#" in v.name:
                    raise self.error("a result name cannot have '#'", v.span.start, v.span.end)
                count = 1
                if self.accept(":"):
                    count = self.integer("a result count")
                    if not 1 <= count <= 64:
                        raise self.error(f"result count {count} out of range", v.span.start, self.pos)
                if count == 1:
                    results.append(v)
                else:
                    results += [Value(f"{v.name}#{k}", v.span) for k in range(count)]
                if not self.accept(","):
                    break
            self.expect("=", " after the results")
        t = self.peek()
        if t.kind == "string":
            node = OpNode(unescape(t.text[1:-1]), Span(t.start, t.end, self.input), results)
            self.next()
            self.generic_op(node)
        elif t.kind == "ident":
            self.next()
            node = OpNode(t.text, Span(t.start, t.end, self.input), results)
            hook = self.hooks.get(t.text)
            if hook is None:
                raise self.error(f"unsupported op '{t.text}'", t.start, t.end)
            hook(self, node)
        else:
            raise self.error(f"expected an operation, got {self.describe(t)}")
        self.skip_location()
        del start
        return node

    def generic_op(self, node: OpNode) -> None:
        self.expect("(", f" after '\"{node.name}\"'")
        node.operands = self.values()
        self.expect(")", " after the operands")
        if self.at("<"):
            self.expect("<")
            node.attrs.update(self.attr_dict())
            self.expect(">", " to close the properties")
        if self.at("("):
            self.next()
            while True:
                node.regions.append(self.region())
                if self.accept(")"):
                    break
                self.expect(",", " or ')' after a region")
        if self.at("{"):
            node.attrs.update(self.attr_dict())
        self.expect(":", " before the type of the op")
        node.in_types, node.out_types = self.function_type()
        self.check_counts(node)

    def check_counts(self, node: OpNode) -> None:
        if len(node.in_types) != len(node.operands):
            raise self.error(
                f"'{node.name}' has {len(node.operands)} operand(s) but its type lists {len(node.in_types)}",
                node.span.start,
                node.span.end,
            )
        if len(node.out_types) != len(node.results):
            raise self.error(
                f"'{node.name}' has {len(node.results)} result(s) but its type lists {len(node.out_types)}",
                node.span.start,
                node.span.end,
            )

    def region(self) -> list[Block]:
        """``{ [^bb(%a: T, ...):] ops }`` (one block; more blocks are rejected)."""
        self.expect("{", " to open a region")
        self.nest()
        args: list[tuple[Value, Type]] = []
        if self.peek().kind == "caret":
            self.next()
            if self.accept("("):
                args = self.block_args(")")
            self.expect(":", " after the block label")
        ops = self.ops_until("}")
        for op in ops:
            if op.name == "^":
                raise self.error("regions with several blocks are not supported", op.span.start, op.span.end)
        self.expect("}")
        self.unnest()
        return [Block(args, ops)]

    def block_args(self, close: str) -> list[tuple[Value, Type]]:
        """``%a: T, %b: S`` up to ``close`` (consumed)."""
        out: list[tuple[Value, Type]] = []
        if self.accept(close):
            return out
        while True:
            v = self.value()
            self.expect(":", " after a block argument")
            out.append((v, self.type()))
            if self.peek().kind == "punct" and self.peek().text == "{":
                self.attr_dict()
            self.skip_location()
            if self.accept(close):
                return out
            self.expect(",", f" or '{close}' after a block argument")

    def skip_location(self) -> None:
        t = self.peek()
        if t.kind == "ident" and t.text == "loc" and self.text.startswith("(", t.end):
            self.next()
            self.balanced("(", ")")


class HexBits(str):
    """A dense literal written as its bit pattern (``0xFF800000`` is -inf in f32)."""


def unescape(s: str) -> str:
    return re.sub(r"\\([0-9A-Fa-f]{2}|.)", lambda m: _escape(m.group(1)), s)


def _escape(c: str) -> str:
    if len(c) == 2:
        return chr(int(c, 16))
    return {"n": "\n", "t": "\t"}.get(c, c)


def check_element_type(r: Reader, elt: str, start: int, end: int) -> None:
    if elt not in ELEMENT_TYPES and elt not in UNSIGNED_TYPES:
        raise r.error(f"element type '{elt}' is not supported (supported: {', '.join(ELEMENT_TYPES + UNSIGNED_TYPES)})", start, end)


def read_module(text: str, name: str, hooks: dict[str, Callable[[Reader, OpNode], None]], attr_hooks: dict[str, Callable[[Reader, int], Any]] | None = None) -> Module:
    """Read ``text`` into a syntax tree; custom op forms by ``hooks`` (op name -> reader of
    the rest of the op), attributes by ``attr_hooks`` (``#dialect.attr`` -> reader)."""
    r = Reader(text, name, hooks)
    r.attr_hooks = attr_hooks or {}
    return r.module()


def span_of(node: OpNode) -> Span:
    return node.span
