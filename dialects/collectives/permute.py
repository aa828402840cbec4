"""``coll.permute``: each rank's local value moves to another rank of its group
(StableHLO's ``collective_permute``; one step of a ring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.dialects.builtin import AnyFloat, DenseArrayBase, FloatAttr, IndexType, IntegerAttr, MemRefType, i64
from xdsl.ir import Attribute, Block, Region
from xdsl.irdl import irdl_op_definition
from xdsl.parser import Parser

from distir.dialects import layout, nccl, rt
from distir.dialects.collectives.base import AXES, Call, CollectiveOp, Lowering, collective, count, need_all
from distir.dialects.dist import RuleError, TensorType
from distir.dialects.format import Kw, parse_int
from distir.dialects.placements import At, Local


@dataclass(frozen=True)
class PairsKw(Kw):
    """``pairs [[source, target], ...]`` (group ranks), stored flat as
    ``array<i64: s0, t0, s1, t1, ...>``."""

    def to_attr(self, value: Any) -> Attribute:
        return DenseArrayBase.from_list(i64, [int(r) for pair in value for r in pair])

    def from_attr(self, attr: Attribute) -> Any:
        assert isinstance(attr, DenseArrayBase)
        flat = tuple(attr.get_values())
        return tuple(zip(flat[0::2], flat[1::2]))

    def parse_value(self, parser: Parser) -> Any:
        def pair() -> tuple[int, int]:
            start = parser.pos
            ranks = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int(parser), " in a pair")
            if len(ranks) != 2:
                parser.raise_error(f"a pair is [source, target], got {len(ranks)} rank(s)", start, parser.pos)
            return ranks[0], ranks[1]

        return tuple(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, pair, f" after '{self.keyword}'"))

    def format_value(self, value: Any) -> str:
        return "[" + ", ".join(f"[{s}, {t}]" for s, t in value) + "]"


OFFSET = Kw("offset", "int", None)
PAIRS = PairsKw("pairs", "ints", None)


@collective
@irdl_op_definition
class PermuteOp(CollectiveOp):
    """``permute``: every rank of the group sends its local value to one rank and
    receives one rank's value: with ``offset k``, group rank i's value goes to group
    rank (i + k) mod n (k may be negative; one step of a ring); with ``pairs [[s, t],
    ...]``, group rank s's value goes to group rank t, and a rank that no pair targets
    gets zeros (StableHLO's ``collective_permute``). local -> local on each axis of
    ``axes`` (the type does not change); pairs must name ranks of the group, each
    source at most once and each target at most once.

    In the functional primitives, rank t's result is ``x_s``, the element s of the
    ``local`` list that ``x`` is, which no primitive reads out (``reduce`` combines the
    whole list): ``permute`` is no composition of them, and ``expand-collectives`` keeps
    it. Its meaning is the one above (``exchange``), which the interpreter runs.

    ``%y = coll.permute %x offset 1 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [local]>``

    ``%y = coll.permute %x pairs [[0, 1], [1, 0]] axes [1] : !dist.tensor<64xf32, @grid, [replicated, local]> -> !dist.tensor<64xf32, @grid, [replicated, local]>``

    What each rank of a group of 4 holds::

        rank                            0    1    2    3
        before                          a0   a1   a2   a3
        after offset 1                  a3   a0   a1   a2
        after offset -1                 a1   a2   a3   a0
        after pairs [[0, 1], [1, 2],    0    a0   a1   a2
                     [2, 3]]

    Lowered to ``nccl.group_start``, a send to the target and a receive from the source
    on each rank, ``nccl.group_end`` (with ``pairs``, each send and receive under
    ``scf.if`` on its rank; a rank no pair targets fills its result with zeros, a rank
    that is its own target copies); on ``local`` and ``mpi`` that is one
    ``Comm.group`` call per rank, and the cost model charges a point-to-point transfer
    per pair on the topology.
    """

    name = "coll.permute"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (OFFSET, PAIRS, AXES)
    TOKEN: ClassVar[str] = "Perm"

    @classmethod
    def rule(cls, t, axes, sizes, options):
        need_all(t, axes, Local)
        offset, pairs = options.get("offset"), options.get("pairs")
        if offset is None and pairs is None:
            raise RuleError("needs 'offset' or 'pairs'")
        if offset is not None and pairs is not None:
            raise RuleError("takes 'offset' or 'pairs', not both")
        if pairs is not None:
            check_pairs(pairs, layout.group_size(sizes or [None] * len(t.get_placements()), axes))
        return list(t.get_placements())

    @classmethod
    def exchange(cls, buffers, options, group):
        import numpy as np

        n = len(buffers)
        out = [np.zeros_like(buffers[0])] * n
        for s, t in targets(options, n):
            out[t] = buffers[s]
        return out

    @classmethod
    def lower(cls, lw: Lowering, call: Call):
        n = call.n
        pairs = targets(call.options, n)
        if len(pairs) == n and all(s == t for s, t in pairs):
            return call.send
        send = lw.contiguous(call.send)
        offset = call.options.get("offset")
        if offset is not None:
            lw.guarded(call.operand, lambda: _shift(lw, call, send, offset % n), call.axes)
        else:
            lw.guarded(call.operand, lambda: _pairs(lw, call, send, pairs), call.axes)
        return call.recv

    def moves_nothing(self) -> bool:
        sizes = self.mesh_sizes()
        n = layout.group_size(sizes, list(self.axes)) if sizes is not None else None
        if n is None:
            return self.option("offset") == 0
        pairs = targets(self.options(), n)
        return len(pairs) == n and all(s == t for s, t in pairs)


def check_pairs(pairs: Sequence[tuple[int, int]], n: int | None) -> None:
    """Pairs name group ranks (``n`` of them, None when unknown), each source and each
    target at most once."""
    sources: set[int] = set()
    seen: set[int] = set()
    for s, t in pairs:
        where = f"pair [{s}, {t}]"
        if s < 0 or t < 0:
            raise RuleError(f"{where} names a negative rank")
        if n is not None and (s >= n or t >= n):
            raise RuleError(f"{where} is out of range for a group of {n} ranks")
        if s in sources:
            raise RuleError(f"{where}: rank {s} is the source of an earlier pair too")
        if t in seen:
            raise RuleError(f"{where}: rank {t} is the target of an earlier pair too")
        sources.add(s)
        seen.add(t)


def targets(options: dict[str, Any], n: int) -> list[tuple[int, int]]:
    """The (source, target) group ranks of a permute over ``n`` ranks."""
    offset = options.get("offset")
    if offset is not None:
        return [(i, (i + offset) % n) for i in range(n)]
    pairs = [(int(s), int(t)) for s, t in options["pairs"]]
    check_pairs(pairs, n)
    return pairs


def _shift(lw: Lowering, call: Call, send, k: int) -> None:
    """Every rank sends to group rank + k and receives from group rank - k."""
    lw.emit(nccl.GroupStartOp.make([], []))
    call.nccl(lw, nccl.SendOp, [send, lw.group_rank(call.mesh, call.axes, k)], count=count(send))
    call.nccl(lw, nccl.RecvOp, [call.recv, lw.group_rank(call.mesh, call.axes, -k)], count=count(call.recv))
    lw.emit(nccl.GroupEndOp.make([], []))


def _pairs(lw: Lowering, call: Call, send, pairs: list[tuple[int, int]]) -> None:
    """Each pair's source sends and its target receives, in one group; a rank that is its
    own target copies, a rank no pair targets fills its result with zeros."""
    recv = call.recv

    def on(rank: int, body) -> None:
        lw.guarded(_at(call, rank), body)

    moves = [(s, t) for s, t in pairs if s != t]
    if moves:
        lw.emit(nccl.GroupStartOp.make([], []))
        for s, t in moves:
            on(s, lambda t=t: call.nccl(lw, nccl.SendOp, [send, lw.const(t)], count=count(send)))
            on(t, lambda s=s: call.nccl(lw, nccl.RecvOp, [recv, lw.const(s)], count=count(recv)))
        lw.emit(nccl.GroupEndOp.make([], []))
    for s, t in pairs:
        if s == t:
            on(s, lambda: lw.copy(send, recv))
    targeted = {t for _, t in pairs}
    idle = [r for r in range(call.n) if r not in targeted]
    if idle:
        name = lw.kernel(_zero_name(recv.type), lambda: _zero_kernel(recv.type))  # type: ignore[arg-type]

        def fill() -> None:
            lw.emit(rt.LaunchOp.get(name, [recv, lw.stream]))

        if len(idle) == call.n:
            fill()
        else:
            for r in idle:
                on(r, fill)


def _at(call: Call, rank: int) -> TensorType:
    """The operand's type with the value held by group rank ``rank`` only."""
    ps = list(call.operand.get_placements())
    for a, digit in zip(call.axes, layout.at_digits(rank, [call.sizes[a] for a in call.axes])):
        ps[a] = At(digit)
    return call.operand.with_(placements=ps)


def _zero_name(t: MemRefType) -> str:
    return f"zero_{'x'.join(map(str, t.get_shape())) or 'scalar'}_{t.element_type}"


def _zero_kernel(t: MemRefType) -> rt.KernelOp:
    """``rt.kernel @zero_<shape>_<type>``: stores 0 at every element of its buffer."""
    from xdsl.dialects import arith, memref

    space = list(t.get_shape())
    block = Block(arg_types=[t, *([IndexType()] * len(space))])
    elt = t.element_type
    zero = arith.ConstantOp(FloatAttr(0.0, elt) if isinstance(elt, AnyFloat) else IntegerAttr(0, elt))  # type: ignore[arg-type]
    block.add_ops([zero, memref.StoreOp.get(zero.result, block.args[0], list(block.args[1:]))])
    return rt.KernelOp.get(_zero_name(t), space, Region(block))
