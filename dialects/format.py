"""The custom textual syntax shared by the ``dist`` and ``coll`` ops.

Every op reads::

    %r = dialect.op [KIND] OPERANDS [keyword VALUE]* [attr-dict] : IN-TYPES -> OUT-TYPES [REGION]

where ``KIND`` is a bare reduction word (``sum``), keywords are bare words followed by an
integer (``dim 0``), an integer list (``axes [0, 2]``), a float (``p 0.1``), a boolean list
(``gather [true, false]``) or a word (``order ring``), or stand alone (a flag:
``in_place``), and the type signature is printed
like MLIR's shard ops: ``: T -> U`` for one operand, ``: (T, S) -> U`` otherwise, results
parenthesised when there are several. Keywords whose value is their default are omitted
when printing. An op class declares its syntax with the class constants below; the
parser and printer here are written once for all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Region, SSAValue
from xdsl.irdl import IRDLOperation, OptionalDef, VarOperandDef, VarRegionDef, VarResultDef, opt_prop_def, prop_def
from xdsl.parser import BaseParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from distir.dialects.fast import new_op

REDUCTIONS = ("sum", "prod", "max", "min", "avg")

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def parse_int(parser: BaseParser, context_msg: str = "") -> int:
    """An integer of distir's syntax (a dim, an axis, a size): stored as i64, so a value
    outside [-2^63, 2^63) is a diagnostic at the literal rather than a wrapped value."""
    start = parser.pos
    value = parser.parse_integer(context_msg=context_msg)
    if not I64_MIN <= value <= I64_MAX:
        end = start + len(parser.lexer.input.content[start : parser.pos].rstrip())
        parser.raise_error(f"integer {value} is out of range for i64", start, end)
    return value

Kind = Literal["int", "ints", "float", "bools", "word", "flag"]

REQUIRED = object()


@dataclass(frozen=True)
class Kw:
    """One ``keyword VALUE`` clause of an op's syntax, stored as property ``prop``."""

    keyword: str
    kind: Kind
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()

    @property
    def prop(self) -> str:
        return self.keyword

    def to_attr(self, value: Any) -> Attribute:
        if self.kind == "int":
            return _int_attr(int(value))
        if self.kind == "ints":
            return _ints_attr(tuple(int(v) for v in value))
        if self.kind == "float":
            return FloatAttr(float(value), f64)
        if self.kind == "bools":
            return _bools_attr(tuple(bool(v) for v in value))
        if self.kind == "flag":
            return UnitAttr()
        return _word_attr(str(value))

    def from_attr(self, attr: Attribute) -> Any:
        if self.kind == "int":
            assert isinstance(attr, IntegerAttr)
            return attr.value.data
        if self.kind == "ints":
            assert isinstance(attr, DenseArrayBase)
            return tuple(attr.get_values())
        if self.kind == "float":
            assert isinstance(attr, FloatAttr)
            return attr.value.data
        if self.kind == "bools":
            assert isinstance(attr, ArrayAttr)
            return tuple(bool(a.value.data) for a in attr.data)  # type: ignore[union-attr]
        if self.kind == "flag":
            return True
        assert isinstance(attr, StringAttr)
        return attr.data

    def parse_value(self, parser: Parser) -> Any:
        if self.kind == "flag":
            return True
        if self.kind == "int":
            return parse_int(parser, f" after '{self.keyword}'")
        if self.kind == "float":
            return parser.parse_number(context_msg=f" after '{self.keyword}'")
        if self.kind == "ints":
            return parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: parse_int(parser), f" after '{self.keyword}'"
            )
        if self.kind == "bools":
            return parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, parser.parse_boolean, f" after '{self.keyword}'"
            )
        word = parser.parse_identifier(f" after '{self.keyword}'")
        if self.choices and word not in self.choices:
            parser.raise_error(f"'{self.keyword}' must be one of {', '.join(self.choices)}, got '{word}'")
        return word

    def format_value(self, value: Any) -> str:
        if self.kind == "flag":
            return ""
        if self.kind in ("int", "word"):
            return str(value)
        if self.kind == "float":
            return repr(float(value))
        if self.kind == "ints":
            return "[" + ", ".join(str(v) for v in value) + "]"
        return "[" + ", ".join("true" if v else "false" for v in value) + "]"


# Options are attributes built (and verified) once per value: attributes are immutable,
# and the passes build ops by the ten thousand on a model's program.


@functools.lru_cache(maxsize=4096)
def _int_attr(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


@functools.lru_cache(maxsize=4096)
def _ints_attr(values: tuple[int, ...]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


@functools.lru_cache(maxsize=1024)
def _bools_attr(values: tuple[bool, ...]) -> ArrayAttr:
    return ArrayAttr([IntegerAttr(1 if v else 0, i1) for v in values])


@functools.lru_cache(maxsize=1024)
def _word_attr(word: str) -> StringAttr:
    return StringAttr(word)


def parse_type_signature(parser: Parser) -> tuple[list[Attribute], list[Attribute]]:
    """``T -> U``, ``(T, S) -> U`` or ``(T) -> (U, V)``; ``()`` for no operands."""
    ins = parser.parse_optional_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
    if ins is None:
        ins = [parser.parse_type()]
    parser.parse_punctuation("->")
    outs = parser.parse_optional_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
    if outs is None:
        outs = [parser.parse_type()]
    return ins, outs


def print_type_list(printer: Printer, types: Sequence[Attribute], parens: bool) -> None:
    if parens or len(types) != 1:
        printer.print_string("(")
        printer.print_list(types, printer.print_attribute)
        printer.print_string(")")
    else:
        printer.print_attribute(types[0])


_CONSTRAINT = {"int": IntegerAttr, "ints": DenseArrayBase, "float": FloatAttr, "bools": ArrayAttr, "word": StringAttr, "flag": UnitAttr}


class FormattedOp(IRDLOperation):
    """Base of the ``dist``/``coll`` ops: the shared syntax, builder and option access.

    The properties behind ``KIND`` and ``KEYWORDS`` are declared automatically (field
    ``<name>_prop``, property ``<name>``); read them as Python values with ``option``.
    """

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "KIND" in own and cls.KIND is not None:
            setattr(cls, f"{cls.KIND}_prop", prop_def(StringAttr, prop_name=cls.KIND))
        for kw in own.get("KEYWORDS", ()):
            constraint = _CONSTRAINT[kw.kind]
            field = (
                prop_def(constraint, prop_name=kw.prop)
                if kw.default is REQUIRED
                else opt_prop_def(constraint, prop_name=kw.prop)
            )
            setattr(cls, f"{kw.prop}_prop", field)

    KIND: ClassVar[str | None] = None
    """Property holding a leading reduction word (``sum``), if the op has one."""
    KEYWORDS: ClassVar[tuple[Kw, ...]] = ()
    """Keyword clauses after the operands, in printing order."""
    PAREN_OPERANDS: ClassVar[bool] = False
    """Operands in parentheses right after the name, as ``dist.map(%a, %b)``."""

    # ---------------------------------------------------------------- option access
    @classmethod
    def keyword(cls, name: str) -> Kw:
        for kw in cls.KEYWORDS:
            if kw.keyword == name:
                return kw
        raise KeyError(f"{cls.name} has no option '{name}'")

    def option(self, name: str) -> Any:
        """The Python value of option ``name`` (its default when absent)."""
        if name == self.KIND:
            attr = self.properties.get(name)
            return attr.data if isinstance(attr, StringAttr) else None
        kw = self.keyword(name)
        attr = self.properties.get(kw.prop)
        if attr is None:
            return None if kw.default is REQUIRED else kw.default
        return kw.from_attr(attr)

    @classmethod
    def make(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        regions: Sequence[Region] = (),
        attributes: dict[str, Attribute] | None = None,
        **options: Any,
    ):
        """Build the op from flat operand and result lists and Python option values:
        ``AllReduceOp.make([x], [t], op="sum", axes=[0])``."""
        return cls.make_with(operands, result_types, regions, attributes, cls.properties_of(options))

    @classmethod
    def properties_of(cls, options: dict[str, Any]) -> dict[str, Attribute]:
        """The properties ``make`` gives the op for these option values (a default or
        None left out)."""
        props: dict[str, Attribute] = {}
        for name, value in options.items():
            if value is None:
                continue
            if name == cls.KIND:
                props[name] = StringAttr(value)
            else:
                kw = cls.keyword(name)
                if (kw.default is not REQUIRED and _same(value, kw.default)) or (kw.kind == "flag" and not value):
                    continue
                props[kw.prop] = kw.to_attr(value)
        return props

    @classmethod
    def make_with(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        regions: Sequence[Region],
        attributes: dict[str, Attribute] | None,
        props: dict[str, Attribute],
    ):
        """``make`` with the properties already made (``properties_of``)."""
        op_def = cls.get_irdl_definition()
        grouped = _group(op_def.operands, list(operands), "operand", cls.name)
        grouped_types = _group(op_def.results, list(result_types), "result", cls.name)
        if _direct(cls) and len(regions) == len(op_def.regions) and all(isinstance(v, SSAValue) for v in operands) \
                and all(isinstance(r, Region) for r in regions) and not any(v is None for v in (attributes or {}).values()):
            # what ``build`` makes of these lists, without its generic checks (``_direct``)
            return new_op(cls, operands, result_types, props, attributes or {}, None, regions)
        return cls.build(
            operands=grouped,
            result_types=grouped_types,
            properties=props,
            attributes=attributes or {},
            regions=list(regions),
        )

    # ---------------------------------------------------------------- parsing
    @classmethod
    def parse(cls, parser: Parser):
        options: dict[str, Any] = {}
        if cls.KIND is not None:
            pos = parser.pos
            word = parser.parse_optional_identifier()
            if word not in REDUCTIONS:
                parser.raise_error(
                    f"'{cls.name}' expects a reduction ({', '.join(REDUCTIONS)})", pos, parser.pos
                )
            options[cls.KIND] = word
        if cls.PAREN_OPERANDS:
            unresolved = parser.parse_comma_separated_list(
                parser.Delimiter.PAREN, parser.parse_unresolved_operand
            )
        else:
            unresolved = []
            first = parser.parse_optional_unresolved_operand()
            if first is not None:
                unresolved.append(first)
                while parser.parse_optional_punctuation(","):
                    unresolved.append(parser.parse_unresolved_operand())
        for kw in cls.KEYWORDS:
            if parser.parse_optional_keyword(kw.keyword):
                options[kw.keyword] = kw.parse_value(parser)
            elif kw.default is REQUIRED:
                parser.raise_error(f"'{cls.name}' expects '{kw.keyword}' here")
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        pos = parser.pos
        ins, outs = parse_type_signature(parser)
        if len(ins) != len(unresolved):
            parser.raise_error(
                f"'{cls.name}' has {len(unresolved)} operand(s) but the signature gives {len(ins)} type(s)",
                pos,
                parser.pos,
            )
        operands = [parser.resolve_operand(u, t) for u, t in zip(unresolved, ins)]
        regions = []
        if cls.get_irdl_definition().regions:
            regions.append(parser.parse_region())
        try:
            return cls.make(operands, outs, regions, attributes, **options)
        except VerifyException as e:
            parser.raise_error(str(e), pos, parser.pos)

    # ---------------------------------------------------------------- printing
    def print(self, printer: Printer):
        if self.PAREN_OPERANDS:
            printer.print_string("(")
            printer.print_list(self.operands, printer.print_operand)
            printer.print_string(")")
        else:
            if self.KIND is not None:
                printer.print_string(f" {self.option(self.KIND)}")
            if self.operands:
                printer.print_string(" ")
                printer.print_list(self.operands, printer.print_operand)
        for kw in self.KEYWORDS:
            if kw.prop in self.properties:
                value = kw.from_attr(self.properties[kw.prop])
                if kw.default is REQUIRED or not _same(value, kw.default):
                    shown = kw.format_value(value)
                    printer.print_string(f" {kw.keyword} {shown}" if shown else f" {kw.keyword}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        print_type_list(printer, self.operand_types, parens=self.PAREN_OPERANDS)
        printer.print_string(" -> ")
        print_type_list(printer, self.result_types, parens=False)
        for region in self.regions:
            printer.print_string(" ")
            printer.print_region(region, print_entry_block_args=True, print_block_terminators=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return tuple(a) == tuple(b)
    return a == b


_DIRECT: dict[type, bool] = {}


def _direct(cls: type[IRDLOperation]) -> bool:
    """Whether ``IRDLOperation.build`` of ``cls`` from ``make``'s lists is
    ``Operation.__init__`` of the flat lists: no segment sizes or other options, no
    optional definitions, no successors, one region per region definition. (Building
    ops is most of the passes' time on a model's program; xDSL's builder checks each
    list against the definitions again.)"""
    got = _DIRECT.get(cls)
    if got is None:
        d = cls.get_irdl_definition()
        got = (not d.options and not d.successors and not any(isinstance(x, OptionalDef) for _, x in (*d.operands, *d.results))
               and not any(isinstance(x, (OptionalDef, VarRegionDef)) for _, x in d.regions))
        _DIRECT[cls] = got
    return got


def _group(defs: Sequence[tuple[str, Any]], values: list[Any], what: str, op_name: str) -> list[Any]:
    """Spread a flat value list over an op's operand/result definitions (one variadic
    definition at most takes the rest)."""
    variadic = [i for i, (_, d) in enumerate(defs) if isinstance(d, (VarOperandDef, VarResultDef))]
    fixed = len(defs) - len(variadic)
    if not variadic:
        if len(values) != fixed:
            raise VerifyException(f"'{op_name}' takes {fixed} {what}(s), got {len(values)}")
        return values
    if len(values) < fixed:
        raise VerifyException(f"'{op_name}' takes at least {fixed} {what}(s), got {len(values)}")
    v = variadic[0]
    n_var = len(values) - fixed
    return values[:v] + [values[v : v + n_var]] + values[v + n_var :]

