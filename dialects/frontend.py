"""The front end: source text to a verified module, for any text a user may write.

Every way a text can be wrong ends in a located diagnostic (xDSL's ``ParseError`` or
``VerifyException`` whose text is ``file:line:col``, the source line and the message), in
time linear in the size of the text::

    module, spans = parse_source(text, "prog.mlir")     # ParseError when rejected
    verify_module(module, spans)                        # VerifyException when rejected

``parse_source`` guards the paths where xDSL 0.74's parser is not robust, without
changing xDSL (a subclassed lexer and parser, and a scan before lexing):

* **String literals.** xDSL's string regex backtracks exponentially on an unterminated
  string followed by a long line; ``SafeLexer`` matches the same language with
  possessive quantifiers (linear).
* **Nesting.** A scan before parsing bounds the nesting of brackets, braces, parentheses
  and angle brackets to ``MAX_NESTING`` levels (the parser is recursive: deeper input
  would exhaust Python's stack); the diagnostic points at the first bracket too deep.
* **Numbers.** Decimal integer literals longer than ``MAX_INT_DIGITS`` digits are
  rejected by the same scan (Python refuses to convert them); an integer or float
  attribute whose value does not fit its type (``300 : i8``, ``1.0e39 : f32``, a hex
  float of 40 digits) is a diagnostic at the literal; the integers of distir's own syntax
  are range-checked against i64 where they are parsed (``format.parse_int``).
* **Shapes.** ``4x8x...xf32`` with thousands of dims parses in linear time (xDSL re-lexes
  the rest of the ``x4x8...`` identifier after every dim).
* **Anything else** xDSL's parser raises on malformed input (``ValueError``,
  ``OverflowError``, a ``VerifyException`` of an attribute built while parsing, ...:
  ``EXPECTED_PARSER_ERRORS``) becomes a diagnostic at the current token; a name that is
  never defined is reported at its first use (xDSL reports it at the end of the input).

``spans`` maps every parsed op to the source position of its first token, so that the
verifier (``dialects/verifier.py``) and the pass manager can point at the source line.
The spans of a parsed module are also remembered for it (``source_spans``).
"""

from __future__ import annotations

import re
import struct
import sys

from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from distir.dialects.fast import OpMemo
from distir.dialects.format import I64_MAX

MAX_NESTING = 100
"""Deepest nesting of ``( [ { <`` the front end accepts (real programs stay below 20)."""

MAX_INT_DIGITS = 400
"""Longest decimal integer literal accepted (an i1024 needs 309 digits)."""

RECURSION_LIMIT = 6000
"""Python recursion limit the front end ensures: enough for ``MAX_NESTING`` levels of
parsing, verifying and printing."""



class SafeLexer(MLIRLexer):
    """xDSL's MLIR lexer with a string-literal pattern that cannot backtrack: the same
    language (characters other than quote, backslash and line breaks, or the escapes
    ``\\"``, ``\\n``, ``\\t``, ``\\\\``, ``\\XX``), matched possessively."""

    _unescaped_characters_regex = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')


# One pass over the text: strings and comments are skipped, identifiers are skipped so
# that the digits inside them are not numbers, the rest is brackets and numbers.
_SCAN = re.compile(
    r'(?P<str>"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"?)'
    r"|(?P<comment>//[^\n]*+)"
    r"|(?P<arrow>->)"
    r"|(?P<ident>[A-Za-z_][\w$.]*+|[%@#!^][\w$.\-]*+)"
    r"|(?P<hex>0x[0-9A-Fa-f]++)"
    r"|(?P<int>[0-9]++)(?P<frac>\.[0-9]*+(?:[eE][+-]?[0-9]++)?)?"
    r"|(?P<open>[\[({<])"
    r"|(?P<close>[\])}>])"
)


def check_text(text: str, name: str) -> None:
    """Reject, before lexing, a text the parser cannot handle in bounded time and stack:
    nesting deeper than ``MAX_NESTING`` and decimal integers longer than
    ``MAX_INT_DIGITS`` digits (``ParseError`` at the offending token)."""
    depth = 0
    source = None
    for m in _SCAN.finditer(text):
        kind = m.lastgroup
        if kind == "open":
            depth += 1
            if depth > MAX_NESTING:
                source = source or Input(text, name)
                raise ParseError(Span(m.start(), m.end(), source), f"nesting deeper than {MAX_NESTING} levels")
        elif kind == "close":
            depth = max(depth - 1, 0)  # '>' also ends '>=' in affine sets: never below 0
        elif kind in ("int", "frac"):
            digits = m.end("int") - m.start("int")
            if digits > MAX_INT_DIGITS and m.group("frac") is None:
                source = source or Input(text, name)
                raise ParseError(
                    Span(m.start(), m.end(), source),
                    f"integer literal of {digits} digits is out of range of every integer type",
                )


_DIMS = re.compile(r"(?:[0-9]++|\?)(?:\s*+x\s*+(?:[0-9]++|\?))*+")


class SourceParser(Parser):
    """xDSL's parser over ``SafeLexer``, remembering where each operation starts
    (``op_spans``) and checking numbers against their types."""

    def __init__(self, ctx: Context, text: str, name: str = "<unknown>"):
        super().__init__(ctx, "", name)
        self._parser_state = ParserState(SafeLexer(Input(text, name)))
        self.op_spans: dict[Operation, Span] = {}

    def parse_optional_operation(self) -> Operation | None:
        start = self._current_token.span
        op = super().parse_optional_operation()
        if op is not None:
            self.op_spans[op] = start
        return op

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as e:
            if not self.forward_ssa_references or not e.msg.startswith("values used but not defined"):
                raise
            raise self._undefined_value() from None

    def _undefined_value(self) -> ParseError:
        """xDSL reports names never defined at the end of the input; point at the first
        use instead."""
        first: tuple[int, str, Span] | None = None
        for name, refs in self.forward_ssa_references.items():
            for value in refs.values():
                for use in value.uses:
                    span = self.op_spans.get(use.operation)
                    if span is not None and (first is None or span.start < first[0]):
                        first = (span.start, name, span)
        if first is None:
            names = ", ".join("%" + n for n in self.forward_ssa_references)
            return ParseError(self._current_token.span, f"values used but not defined: [{names}]")
        _, name, span = first
        return ParseError(span, f"%{name} is used but not defined here (a value defined inside a region is not visible outside it)")

    def parse_dimension_list(self) -> list[int]:
        """``4x?x8`` (the ``x`` before the element type stays), in linear time."""
        token = self._current_token
        if token.kind not in (MLIRTokenKind.INTEGER_LIT, MLIRTokenKind.QUESTION):
            return []
        text = self.lexer.input.content
        m = _DIMS.match(text, token.span.start)
        assert m is not None  # the current token is a digit or '?'
        dims = []
        pos = m.start()
        for item in re.finditer(r"[0-9]++|\?", m.group()):
            if item.group() == "?":
                dims.append(DYNAMIC_INDEX)
                continue
            if len(item.group()) > 19 or int(item.group()) > I64_MAX:
                at = pos + item.start()
                raise ParseError(Span(at, at + len(item.group()), self.lexer.input), f"dimension {item.group()} is out of range for i64")
            dims.append(int(item.group()))
        self._resume_from(m.end())
        return dims

    def parse_optional_builtin_int_or_float_attr(self):
        start = self._current_token.span.start
        try:
            return super().parse_optional_builtin_int_or_float_attr()
        except (ValueError, OverflowError, VerifyException):
            text = self.lexer.input.content[start : self.pos].rstrip()
            span = Span(start, start + max(len(text), 1), self.lexer.input)
            value, _, type_ = (" ".join(text.split())).partition(" : ")
            raise ParseError(span, f"{value} is out of range for {type_ or 'its type'}") from None


EXPECTED_PARSER_ERRORS = (ValueError, OverflowError, RecursionError, VerifyException, struct.error, NotImplementedError)
"""What xDSL's parser raises (rather than a ParseError) on some malformed inputs: out of
range values, attributes that do not verify, unsupported widths (``dense<1> :
tensor<2xi128>``). ``parse_source`` turns these, and anything else, into a
``ParseError`` at the current token (its ``cause`` is the original type)."""

_SPANS: OpMemo[dict[Operation, Span]] = OpMemo("spans")


def source_spans(module: Operation) -> dict[Operation, Span]:
    """Where each op of a module parsed by ``parse_source`` started (empty for a module
    built otherwise); ops created later by passes have no entry."""
    return _SPANS.get(module, {})


def copy_spans(source: Operation, copy: Operation) -> None:
    """Give the ops of ``copy`` (a clone of ``source``) the source positions of
    ``source``'s ops, so that diagnostics about the copy point into the file."""
    spans = _SPANS.get(source)
    if spans:
        _SPANS[copy] = {new: spans[old] for old, new in zip(source.walk(), copy.walk()) if old in spans}


def ensure_recursion_limit() -> None:
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)


ensure_recursion_limit()


def parse_source(text: str, name: str, ctx: Context, implicit_module: bool = True) -> tuple[ModuleOp, dict[Operation, Span]]:
    """Parse ``text`` (not verified); a ``ParseError`` for any malformed input."""
    ensure_recursion_limit()
    check_text(text, name)
    parser = SourceParser(ctx, text, name)
    try:
        module = parser.parse_module(implicit_module)
    except ParseError:
        raise
    except Exception as e:  # noqa: BLE001 - xDSL's parser on malformed input: a diagnostic here
        token = parser._current_token.span  # noqa: SLF001 - where the parser stood
        if isinstance(e, RecursionError):
            why = "input nested too deeply"
        elif isinstance(e, struct.error):
            why = f"a value does not fit its element type ({e})"
        elif isinstance(e, EXPECTED_PARSER_ERRORS):
            why = str(e)
        else:
            why = f"cannot parse this ({type(e).__name__}: {e})"
        error = ParseError(token, why)
        error.cause = type(e)  # type: ignore[attr-defined] - the fuzz tests look at it
        raise error from None
    _SPANS[module] = parser.op_spans
    return module, parser.op_spans


def decode_source(data: bytes, name: str) -> str:
    """The input as text; bytes that are not UTF-8 are a located parse error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = data.decode("utf-8", errors="replace")
        pos = len(data[: e.start].decode("utf-8", errors="replace"))
        raise ParseError(Span(pos, pos + 1, Input(text, name)), f"input is not UTF-8 text (byte 0x{data[e.start]:02x})") from None
