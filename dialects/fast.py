"""Making and walking ops without xDSL's generic paths, with the same results.

xDSL builds an op through its generic builder, which checks each list against the op's
definitions again, and walks nested ops through a chain of generators (op, region,
block, op, ...), one frame per level for every op yielded. A model's program has tens
of thousands of ops, copied and walked several times per plan: ``new_op`` makes the
op ``cls.create`` makes, ``walk`` lists the ops ``op.walk()`` yields, in the same
order.

``OpMemo`` keeps what distir learned about one op (a module's symbol table, what it
verified as, where its ops came from) on the op itself, so that it goes when the op
goes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from xdsl.dialects.builtin import UNKNOWN_LOC
from xdsl.ir import Attribute, Operation, Region, SSAValue
from xdsl.ir.core import OpResult, SSAValues, Use


def new_op(cls: type[Operation], operands: Sequence[SSAValue], result_types: Sequence[Attribute], properties: dict[str, Attribute],
           attributes: dict[str, Attribute], location: Attribute | None, regions: Sequence[Region]) -> Any:
    """``cls.create(operands=..., ...)`` without successors: the same op (each operand's
    use added in order, the dicts copied, the regions attached, ``__post_init__`` run,
    which fills an IRDL op's defaults), made in half the time."""
    op = cls.__new__(cls)
    ops = SSAValues(operands)
    uses = tuple([Use(op, i) for i in range(len(ops))])
    for v, u in zip(ops, uses):
        v.add_use(u)
    op._operands = ops  # noqa: SLF001 (what the ``operands`` setter sets)
    op._operand_uses = uses  # noqa: SLF001
    op.results = SSAValues([OpResult(t, op, i) for i, t in enumerate(result_types)])
    op.properties = dict(properties)
    op.attributes = dict(attributes)
    op.location = UNKNOWN_LOC if location is None else location
    op._successors = ()  # noqa: SLF001
    op._successor_uses = ()  # noqa: SLF001
    op.regions = ()
    for region in regions:
        op.add_region(region)
    if _fills_defaults(cls):
        op.__post_init__()
    return op


@functools.cache
def _fills_defaults(cls: type[Operation]) -> bool:
    """Whether ``__post_init__`` may change an op of class ``cls``: an IRDL op's fills its
    properties' and attributes' defaults (none for most classes: nothing to do, and
    xDSL's base checks only the class's name); any other class's always runs."""
    from xdsl.irdl import IRDLOperation
    from xdsl.irdl.operations import OptionalDef

    if cls.__post_init__ is not IRDLOperation.__post_init__ or not cls.name or not isinstance(cls.name, str):
        return True
    op_def = cls.get_irdl_definition()  # type: ignore[attr-defined]
    return any(not isinstance(d, OptionalDef) and d.default_value is not None for d in (*op_def.properties.values(), *op_def.attributes.values()))


def walk(op: Operation, region_first: bool = False) -> list[Operation]:
    """``list(op.walk(region_first=...))``: ``op`` and every op nested in it, each before
    its regions' ops (after them with ``region_first``), blocks and ops in order."""
    out: list[Operation] = []
    _walk(op, out, region_first)
    return out


def _walk(op: Operation, out: list[Operation], region_first: bool) -> None:
    if not region_first:
        out.append(op)
    for region in op.regions:
        block = region._first_block  # noqa: SLF001 (the region's block list, as its iterator reads it)
        while block is not None:
            inner = block._first_op  # noqa: SLF001
            while inner is not None:
                if inner.regions:
                    _walk(inner, out, region_first)
                else:
                    out.append(inner)
                inner = inner._next_op  # noqa: SLF001
            block = block._next_block  # noqa: SLF001
    if region_first:
        out.append(op)


class Kinds:
    """``isinstance(op, classes)``, answered once per op class: op classes are abstract
    base classes to Python, whose ``isinstance`` takes microseconds (a whole-program
    walk asks it of every op)."""

    def __init__(self, *classes: type) -> None:
        self.classes = classes
        self._memo: dict[type, bool] = {}

    def __call__(self, op: object) -> bool:
        t = type(op)
        got = self._memo.get(t)
        if got is None:
            got = self._memo[t] = isinstance(op, self.classes)
        return got


T = TypeVar("T")


class OpMemo(Generic[T]):
    """A record per op, held by the op (``get``, ``[op]``, ``pop``, ``in``). A
    ``WeakKeyDictionary`` cannot hold such records: they name the op's nested ops (a
    symbol table, a fingerprint per op), which name the op through their parents, so
    the record kept its key alive and no module verified, parsed or looked up in was
    ever freed (the planner's and the tuner's thousands of copies of a program). On
    the op, the record and the op are one cycle, freed together. A copy of the op
    (``clone``) starts without it."""

    def __init__(self, name: str) -> None:
        self.attr = f"_distir_{name}"

    def get(self, op: Operation, default: T | None = None) -> T | None:
        return op.__dict__.get(self.attr, default)

    def __getitem__(self, op: Operation) -> T:
        try:
            return op.__dict__[self.attr]
        except KeyError:
            raise KeyError(op) from None

    def __setitem__(self, op: Operation, value: T) -> None:
        op.__dict__[self.attr] = value

    def pop(self, op: Operation, default: T | None = None) -> T | None:
        return op.__dict__.pop(self.attr, default)

    def __contains__(self, op: Operation) -> bool:
        return self.attr in op.__dict__
