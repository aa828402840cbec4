"""Making and walking ops without xDSL's generic paths, with the same results.

xDSL builds an op through its generic builder, which checks each list against the op's
definitions again, and walks nested ops through a chain of generators (op, region,
block, op, ...), one frame per level for every op yielded. A model's program has tens
of thousands of ops, copied and walked several times per plan: ``new_op`` makes the
op ``cls.create`` makes, ``walk`` lists the ops ``op.walk()`` yields, in the same
order, and ``clone`` the copy ``op.clone()`` makes, in one walk.

``OpMemo`` keeps what distir learned about one op (a module's symbol table, what it
verified as, where its ops came from) on the op itself, so that it goes when the op
goes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from xdsl.dialects.builtin import UNKNOWN_LOC
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.core import OpResult, SSAValues, Use

T = TypeVar("T")
OpT = TypeVar("OpT", bound=Operation)


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


class _Mapper(dict):
    """``Operation.clone``'s value map that remembers the values it was asked for and
    did not hold (defined outside what is cloned, or later in it)."""

    def __init__(self) -> None:
        super().__init__()
        self.missed: list[SSAValue] = []

    def get(self, key, default=None):  # type: ignore[override]
        got = super().get(key, self)
        if got is self:
            self.missed.append(key)
            return default
        return got


def clone(op: OpT, value_mapper: dict[SSAValue, SSAValue] | None = None) -> OpT:
    """``op.clone()``: the same copy (types, properties, attributes, locations, name
    hints, and every value's uses in the same order), made in one walk. xDSL's clone
    makes every op without operands and sets them all in a second walk over both trees
    (for a graph region's uses of values defined after them); here each op takes its
    operands when it is made, and only when some op used a value of the copy before it
    was made are the operands set again, in walk order, as xDSL sets them. (The
    planner copies a model's partitioned program of thousands of ops per plan, the
    tuner hundreds of copies of it per plan.) ``value_mapper``, as xDSL's: the values
    it holds stand for theirs in the copy, and it receives each value of ``op`` mapped
    to its copy."""
    mapper = _Mapper()
    if value_mapper:
        mapper.update(value_mapper)
    blocks: dict[Block, Block] = {}
    new = _clone_op(op, mapper, blocks)
    if any(v in mapper for v in mapper.missed):
        for old, copy in zip(op.walk(), new.walk()):
            copy.operands = tuple(mapper.get(v, v) for v in old.operands)
    if value_mapper is not None:
        value_mapper.update(mapper)
    return new


@functools.lru_cache(maxsize=1 << 16)
def _valid_name(name: str) -> str:
    return SSAValue.extract_valid_name(name)


def _clone_op(op: OpT, mapper: _Mapper, blocks: dict[Block, Block]) -> OpT:
    if op._successors:  # noqa: SLF001 (a branch: xDSL's own copy)
        new = op.clone_without_regions(mapper, blocks)  # operands mapped as it is made
    else:  # what ``clone_without_regions`` makes, built directly (``format.new_op``)
        get = mapper.get
        new = new_op(type(op), [get(v, v) for v in op._operands], [r._type for r in op.results], op.properties,  # noqa: SLF001
                     op.attributes, op.location, [Region() for _ in op.regions])
        for r, c in zip(op.results, new.results):
            mapper[r] = c
            if r._name is not None:  # noqa: SLF001
                c._name = _valid_name(r._name)  # noqa: SLF001 (what the ``name_hint`` setter stores)
    for region, into in zip(op.regions, new.regions):
        copies = [Block() for _ in region.blocks]
        for block, copy in zip(region.blocks, copies):
            blocks[block] = copy
        into.insert_block(copies, 0)
        for block, copy in zip(region.blocks, copies):
            for idx, arg in enumerate(block.args):
                copy.insert_arg(arg.type, idx, arg.location)
                mapper[arg] = copy.args[idx]
                copy.args[idx].name_hint = arg.name_hint
            last = None  # ``copy.add_op`` of each copy, without its checks (a new op, a new block)
            inner = block._first_op  # noqa: SLF001
            while inner is not None:
                made = _clone_op(inner, mapper, blocks)
                made.parent = copy
                if last is None:
                    copy._first_op = made  # noqa: SLF001
                else:  # the fields in the order xDSL sets them (``insert_op_after``)
                    made._prev_op = last  # noqa: SLF001
                    made._next_op = None  # noqa: SLF001
                    last._next_op = made  # noqa: SLF001
                last = made
                inner = inner._next_op  # noqa: SLF001
            copy._last_op = last  # noqa: SLF001
    return new



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
