"""The ``rt`` dialect: the runtime level of a lowered distir program.

A lowered function is one SPMD program that every rank runs on its own buffers. Values
are rank-local buffers (builtin ``memref`` types, of the rank's local shape), scalars,
indices and the handles below; the mesh ops (``dist.mesh``) stay in the module as the
description of the ranks. ``rt`` holds everything that is not a library call to NCCL
(those are the ``nccl`` dialect):

* where a rank is: ``rt.comm`` (the communicator of this rank's group over some mesh
  axes: NCCL's ``ncclCommSplit`` with color = index on the other axes, key = index on
  the axes), ``rt.group_rank`` (this rank's index in such a group, optionally shifted),
  ``rt.holds`` (whether this rank holds a value placed ``at<r>``);
* buffers: ``rt.alloc``, ``rt.block`` (a view of one of ``count`` equal blocks along a
  dim), ``rt.copy``, ``rt.copy_blocks`` (blocks along one dim to blocks along another,
  one op whatever their number);
* streams and events: ``rt.stream``, ``rt.event_record``, ``rt.stream_wait``,
  ``rt.stream_sync`` (CUDA's model; host backends run stream 0 in order on the rank's
  thread and other streams asynchronously);
* computation: ``rt.kernel`` (a ``gpu.func``-style element-wise kernel over memref
  arguments, translated to Numba), ``rt.launch``, and library calls ``rt.matmul``,
  ``rt.reduce_tensor``, ``rt.embedding_bag``, ``rt.scatter_add``, ``rt.sort``;
* ``rt.fused``: a group of calls forming one fused collective (reduce-scatter, kernel on
  this rank's slice, all-gather), which shared-memory backends may run as one zero-copy
  kernel.

Ops that run on a stream take it as their last operand. Every op prints in the same
``: operand-types -> result-types`` syntax as the ``dist`` and ``coll`` ops::

    %c = rt.comm @world axes [0] : !rt.comm
    %s = rt.stream 0 : !rt.stream
    %i = rt.group_rank @world axes [0] : index
    %b = rt.alloc : () -> memref<256xf32>
    %v = rt.block %p, %i dim 0 count 4 : (memref<1024xf32>, index) -> memref<256xf32>
    rt.launch @k0(%b, %v, %lr, %s) : (memref<256xf32>, memref<256xf32>, f32, !rt.stream) -> ()
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    SymbolRefAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, Region, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from distir.dialects.fast import new_op
from distir.dialects.format import (
    REDUCTIONS,
    REQUIRED,
    FormattedOp,
    Kw,
    parse_int,
    parse_type_signature,
    print_type_list,
)
from distir.dialects.placements import Placement, parse_placement

# ======================================================================================
# Types
# ======================================================================================


@irdl_attr_definition
class CommType(ParametrizedAttribute, TypeAttribute):
    """A communicator (``ncclComm_t``): the ranks of one group, numbered 0..n-1."""

    name = "rt.comm"


@irdl_attr_definition
class StreamType(ParametrizedAttribute, TypeAttribute):
    """An in-order queue of work (``cudaStream_t``)."""

    name = "rt.stream"


@irdl_attr_definition
class EventType(ParametrizedAttribute, TypeAttribute):
    """A point in a stream (``cudaEvent_t``)."""

    name = "rt.event"


@irdl_attr_definition
class TargetAttr(ParametrizedAttribute):
    """``#rt.target<"NAME", shared_memory, host_copies [KIND, ..], stream_from N>``: what the
    machine that runs a planned program can do, recorded by ``plan-execution`` as the
    module attribute ``rt.target`` (``lowering/target.py`` lists the targets):

    * ``shared_memory``: the ranks of a group see each other's buffers (zero-copy fused
      groups, tiles stored straight into peers' buffers);
    * ``host_copies``: the collectives whose data the communicator copies on the host
      (``all_gather``, ``broadcast``, ``send``, ``recv`` on ``local``); a library copies
      the others;
    * ``stream_from N``: host copies of at least N contiguous bytes may use streaming
      stores (absent: the target never streams, a GPU).

    ``#rt.target<"local", shared_memory, host_copies [all_gather, broadcast, send, recv], stream_from 4194304>``
    """

    name = "rt.target"

    target: StringAttr
    shared: IntAttr
    copies: ArrayAttr[StringAttr]
    stream: IntAttr

    def __init__(self, name: str, shared_memory: bool, host_copies: Sequence[str] = (), stream_from: int | None = None):
        super().__init__(
            StringAttr(name),
            IntAttr(int(shared_memory)),
            ArrayAttr([StringAttr(k) for k in host_copies]),
            IntAttr(-1 if stream_from is None else stream_from),
        )

    @property
    def target_name(self) -> str:
        return self.target.data

    @property
    def shared_memory(self) -> bool:
        return bool(self.shared.data)

    @property
    def host_copies(self) -> tuple[str, ...]:
        return tuple(k.data for k in self.copies.data)

    @property
    def stream_from(self) -> int | None:
        return None if self.stream.data < 0 else self.stream.data

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        name = parser.parse_str_literal(" (the target's name)")
        shared, copies, stream = False, [], None
        while parser.parse_optional_punctuation(","):
            pos = parser.pos
            word = parser.parse_identifier(" (a target capability)")
            if word == "shared_memory":
                shared = True
            elif word == "host_copies":
                copies = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_identifier)
            elif word == "stream_from":
                stream = parse_int(parser, " after 'stream_from'")
            else:
                parser.raise_error(f"unknown target capability '{word}' (shared_memory, host_copies, stream_from)", pos, parser.pos)
        parser.parse_punctuation(">")
        made = cls(name, shared, copies, stream)
        return (made.target, made.shared, made.copies, made.stream)

    def print_parameters(self, printer: Printer) -> None:
        parts = [f'"{self.target_name}"']
        if self.shared_memory:
            parts.append("shared_memory")
        if self.host_copies:
            parts.append(f"host_copies [{', '.join(self.host_copies)}]")
        if self.stream_from is not None:
            parts.append(f"stream_from {self.stream_from}")
        printer.print_string("<" + ", ".join(parts) + ">")

    def verify(self) -> None:
        if self.stream.data < -1:
            raise VerifyException(f"#rt.target stream_from must be non-negative, got {self.stream.data}")
        unknown = [k for k in self.host_copies if k not in HOST_COPY_KINDS]
        if unknown:
            raise VerifyException(f"#rt.target host_copies must be among {', '.join(HOST_COPY_KINDS)}, got {', '.join(unknown)}")


HOST_COPY_KINDS = ("all_gather", "broadcast", "send", "recv")
"""The collectives a communicator may run as host copies of their data."""

TARGET = "rt.target"
"""Module attribute holding the ``#rt.target`` a program was planned for."""


COMM = CommType()
STREAM = StreamType()
EVENT = EventType()
INDEX = IndexType()
DYNAMIC = DYNAMIC_INDEX
"""A ``?`` dim of a memref type (a rank's part of a padded buffer, ``rt.prefix``)."""


def fail(op: IRDLOperation, msg: str):
    raise VerifyException(f"'{op.name}' op {msg}")


def memref_count(t: Attribute) -> int:
    """Number of elements of a memref type."""
    assert isinstance(t, MemRefType)
    return math.prod(t.get_shape())


def need_memref(op: IRDLOperation, t: Attribute, what: str) -> MemRefType:
    if not isinstance(t, MemRefType):
        fail(op, f"{what} must be a memref, got {t}")
    return t  # type: ignore[return-value]


def need_type(op: IRDLOperation, t: Attribute, want: Attribute, what: str) -> None:
    if t != want:
        fail(op, f"{what} must be {want}, got {t}")


class RtOp(FormattedOp):
    """Base of the ``rt`` ops written in the shared ``dist``/``coll`` syntax; the
    operand and result lists are flat (``make`` spreads them)."""

    def verify_(self) -> None:
        if self.KIND is not None and self.option(self.KIND) not in REDUCTIONS:
            fail(self, f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.option(self.KIND)}")
        self.verify_types()

    def verify_types(self) -> None:
        pass


def _stream_last(op: IRDLOperation) -> None:
    if not op.operands or op.operands[-1].type != STREAM:
        fail(op, "takes the stream it runs on as its last operand")


# ======================================================================================
# Where a rank is: communicators, group ranks, holders
# ======================================================================================


class MeshRefOp(IRDLOperation):
    """Ops naming a mesh and some of its axes: ``rt.op @mesh axes [..] ... : T``."""

    mesh = prop_def(SymbolRefAttr)
    axes = prop_def(DenseArrayBase)

    @property
    def mesh_name(self) -> str:
        return self.mesh.root_reference.data

    @property
    def axis_list(self) -> tuple[int, ...]:
        return tuple(self.axes.get_values())  # type: ignore[arg-type]

    def _verify_axes(self) -> None:
        from distir.dialects.dist import MeshOp, _lookup

        mesh = _lookup(self, self.mesh)
        if not isinstance(mesh, MeshOp):
            fail(self, f"unknown mesh @{self.mesh_name}: declare it with dist.mesh")
        axes = self.axis_list
        if not axes or len(set(axes)) != len(axes) or not all(0 <= a < mesh.rank for a in axes):
            fail(self, f"axes must be distinct axes of @{self.mesh_name} (rank {mesh.rank}), got {list(axes)}")


@functools.lru_cache(maxsize=4096)
def kernel_ref(name: str) -> SymbolRefAttr:
    """``@name`` (attributes are immutable: the calls of one kernel share one)."""
    return SymbolRefAttr(name)


@irdl_op_definition
class CommOp(MeshRefOp):
    """``rt.comm @mesh axes [..]``: the communicator of this rank's group, the ranks that
    differ from it only on ``axes`` (NCCL: ``ncclCommSplit(world, color, key)`` with color =
    this rank's index on the other axes, key = its index on ``axes``, row-major in the
    order listed). Every rank of the mesh executes it.

    ``%c = rt.comm @grid axes [1] : !rt.comm``
    """

    name = "rt.comm"
    result = result_def(CommType)

    @classmethod
    def get(cls, mesh: str, axes: Sequence[int]) -> CommOp:
        return cls.build(
            properties={"mesh": SymbolRefAttr(mesh), "axes": DenseArrayBase.from_list(i64, list(axes))},
            result_types=[COMM],
        )

    @classmethod
    def parse(cls, parser: Parser) -> CommOp:
        mesh = parser.parse_symbol_name().data
        parser.parse_keyword("axes")
        axes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int(parser))
        parser.parse_punctuation(":")
        parser.parse_type()
        return cls.get(mesh, axes)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.mesh_name} axes [{', '.join(map(str, self.axis_list))}] : !rt.comm")

    def verify_(self) -> None:
        self._verify_axes()


@irdl_op_definition
class GroupRankOp(MeshRefOp):
    """``rt.group_rank @mesh axes [..] shift s``: (this rank's index in its group over
    ``axes`` + ``s``) mod the group size. The block of a value sliced over those axes that
    this rank holds, the peers of P2P exchanges and rank-dependent chunk orders are all
    group ranks.

    ``%next = rt.group_rank @world axes [0] shift 1 : index``
    """

    name = "rt.group_rank"
    shift = prop_def(IntegerAttr)
    result = result_def(IndexType)

    @classmethod
    def get(cls, mesh: str, axes: Sequence[int], shift: int = 0) -> GroupRankOp:
        return cls.build(
            properties={
                "mesh": SymbolRefAttr(mesh),
                "axes": DenseArrayBase.from_list(i64, list(axes)),
                "shift": IntegerAttr(shift, i64),
            },
            result_types=[INDEX],
        )

    @property
    def shift_value(self) -> int:
        return self.shift.value.data

    @classmethod
    def parse(cls, parser: Parser) -> GroupRankOp:
        mesh = parser.parse_symbol_name().data
        parser.parse_keyword("axes")
        axes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int(parser))
        shift = 0
        if parser.parse_optional_keyword("shift"):
            shift = parse_int(parser)
        parser.parse_punctuation(":")
        parser.parse_type()
        return cls.get(mesh, axes, shift)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.mesh_name} axes [{', '.join(map(str, self.axis_list))}]")
        if self.shift_value:
            printer.print_string(f" shift {self.shift_value}")
        printer.print_string(" : index")

    def verify_(self) -> None:
        self._verify_axes()


@irdl_op_definition
class SpanOp(MeshRefOp):
    """``rt.span @mesh axes [..] size S``: this rank's block of a dim of ``S`` elements
    sliced over ``axes`` (nested, outermost first): its first element and its element
    count, by DESIGN §2's rule (``layout.dim_block``: blocks of ceil(S/n), the last ranks
    hold fewer elements or none). Where the ranks do not divide the dim, a rank's buffer
    is padded to the largest block; ops that must not read the padding (reductions over
    the dim, a matmul contracting it, an embedding's rows) take ``rt.prefix`` of the
    count, and kernels drawing random numbers start at the offset.

    ``%off, %len = rt.span @world axes [0] size 10 : index, index``
    """

    name = "rt.span"
    size = prop_def(IntegerAttr)
    offset = result_def(IndexType)
    length = result_def(IndexType)

    @classmethod
    def get(cls, mesh: str, axes: Sequence[int], size: int) -> SpanOp:
        return cls.build(
            properties={"mesh": SymbolRefAttr(mesh), "axes": DenseArrayBase.from_list(i64, list(axes)), "size": IntegerAttr(size, i64)},
            result_types=[INDEX, INDEX],
        )

    @property
    def size_value(self) -> int:
        return self.size.value.data

    @classmethod
    def parse(cls, parser: Parser) -> SpanOp:
        mesh = parser.parse_symbol_name().data
        parser.parse_keyword("axes")
        axes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int(parser))
        parser.parse_keyword("size")
        size = parse_int(parser)
        parser.parse_punctuation(":")
        parser.parse_type()
        parser.parse_punctuation(",")
        parser.parse_type()
        return cls.get(mesh, axes, size)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.mesh_name} axes [{', '.join(map(str, self.axis_list))}] size {self.size_value} : index, index")

    def verify_(self) -> None:
        self._verify_axes()
        if self.size_value < 0:
            fail(self, f"size must be non-negative, got {self.size_value}")


@irdl_op_definition
class HoldsOp(IRDLOperation):
    """``rt.holds @mesh [placements]``: true on the ranks that hold a value placed so,
    i.e. whose coordinate is r on every axis placed ``at<r>``. Ops on such values run
    under ``scf.if`` of it.

    ``%h = rt.holds @grid [at<1>, replicated] : i1``
    """

    name = "rt.holds"
    mesh = prop_def(SymbolRefAttr)
    placements = prop_def(Attribute)
    result = result_def(IntegerType)

    @classmethod
    def get(cls, mesh: str, placements: Sequence[Placement]) -> HoldsOp:
        from xdsl.dialects.builtin import ArrayAttr

        return cls.build(
            properties={"mesh": SymbolRefAttr(mesh), "placements": ArrayAttr(list(placements))},
            result_types=[i1],
        )

    @property
    def mesh_name(self) -> str:
        return self.mesh.root_reference.data

    def placement_list(self) -> tuple[Placement, ...]:
        return tuple(self.placements.data)  # type: ignore[attr-defined]

    @classmethod
    def parse(cls, parser: Parser) -> HoldsOp:
        mesh = parser.parse_symbol_name().data
        placements = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_placement(parser))
        parser.parse_punctuation(":")
        parser.parse_type()
        return cls.get(mesh, placements)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.mesh_name} [{', '.join(str(p) for p in self.placement_list())}] : i1")


# ======================================================================================
# Streams and events
# ======================================================================================


@irdl_op_definition
class StreamOp(IRDLOperation):
    """``rt.stream N``: stream number N of this rank (0 computes; the lowering puts the
    communication of ``coll.overlap`` on stream 1).

    ``%s = rt.stream 0 : !rt.stream``
    """

    name = "rt.stream"
    index = prop_def(IntegerAttr)
    result = result_def(StreamType)

    @classmethod
    def get(cls, index: int) -> StreamOp:
        return cls.build(properties={"index": IntegerAttr(index, i64)}, result_types=[STREAM])

    @property
    def number(self) -> int:
        return self.index.value.data

    @classmethod
    def parse(cls, parser: Parser) -> StreamOp:
        n = parse_int(parser)
        parser.parse_punctuation(":")
        parser.parse_type()
        return cls.get(n)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.number} : !rt.stream")


@irdl_op_definition
class EventRecordOp(RtOp):
    """``rt.event_record %s``: an event that completes when the work queued on ``%s`` so
    far has completed.

    ``%e = rt.event_record %s : !rt.stream -> !rt.event``
    """

    name = "rt.event_record"
    args = var_operand_def()
    result = result_def(EventType)

    def verify_types(self) -> None:
        if len(self.args) != 1 or self.args[0].type != STREAM:
            fail(self, "takes one stream")


@irdl_op_definition
class StreamWaitOp(RtOp):
    """``rt.stream_wait %s, %e``: work queued on ``%s`` after this waits for ``%e``.

    ``rt.stream_wait %s1, %e : (!rt.stream, !rt.event) -> ()``
    """

    name = "rt.stream_wait"
    args = var_operand_def()

    def verify_types(self) -> None:
        if [a.type for a in self.args] != [STREAM, EVENT]:
            fail(self, "takes a stream and an event")


@irdl_op_definition
class StreamSyncOp(RtOp):
    """``rt.stream_sync %s``: the host waits until the work queued on ``%s`` is done.

    ``rt.stream_sync %s : !rt.stream -> ()``
    """

    name = "rt.stream_sync"
    args = var_operand_def()

    def verify_types(self) -> None:
        if [a.type for a in self.args] != [STREAM]:
            fail(self, "takes one stream")


# ======================================================================================
# Buffers
# ======================================================================================


@irdl_op_definition
class AllocOp(RtOp):
    """``rt.alloc``: a new rank-local buffer (contents undefined).

    ``%b = rt.alloc : () -> memref<256xf32>``
    """

    name = "rt.alloc"
    args = var_operand_def()
    result = result_def(MemRefType)

    def verify_types(self) -> None:
        if self.args:
            fail(self, "takes no operands")


@irdl_op_definition
class BlockOp(RtOp):
    """``rt.block %buf, %i dim d count n``: a view of block ``%i`` of ``n`` equal blocks of
    ``%buf`` along dim ``d`` (no copy; strided when ``d`` is not the outermost dim of
    extent > 1).

    ``%v = rt.block %p, %i dim 0 count 4 : (memref<1024xf32>, index) -> memref<256xf32>``
    """

    name = "rt.block"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"), Kw("count", "int"))
    args = var_operand_def()
    result = result_def(MemRefType)

    def verify_types(self) -> None:
        if len(self.args) != 2 or self.args[1].type != INDEX:
            fail(self, "takes a buffer and an index")
        t = need_memref(self, self.args[0].type, "operand 0")
        r = need_memref(self, self.result.type, "result")
        d, n = self.option("dim"), self.option("count")
        shape = list(t.get_shape())
        if not 0 <= d < len(shape):
            fail(self, f"dim {d} is out of range for {t}")
        if n < 1 or shape[d] % n:
            fail(self, f"dim {d} of size {shape[d]} is not divisible into {n} blocks")
        shape[d] //= n
        if list(r.get_shape()) != shape or r.element_type != t.element_type:
            fail(self, f"result must be memref<{'x'.join(map(str, shape))}x{t.element_type}>, got {r}")

    @staticmethod
    def contiguous(shape: Sequence[int], dim: int) -> bool:
        """Whether a block along ``dim`` of a contiguous buffer of ``shape`` is contiguous."""
        return all(s == 1 for s in shape[:dim])


@irdl_op_definition
class PrefixOp(RtOp):
    """``rt.prefix %buf[, %n] dim d``: a view (no copy) of the leading elements of ``%buf``
    along dim ``d``: as many as the result type says, or ``%n`` (the result's dim is then
    ``?``). A value whose dim the plan pads (a buffer of n equal blocks for a collective,
    where the ranks do not divide the dim) is the prefix of its padded buffer; a rank's
    valid part of a padded block is the prefix of its ``rt.span`` count.

    ``%v = rt.prefix %pad dim 0 : memref<12x8xf32> -> memref<10x8xf32>``
    ``%w = rt.prefix %blk, %len dim 0 : (memref<3x8xf32>, index) -> memref<?x8xf32>``
    """

    name = "rt.prefix"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"),)
    args = var_operand_def()
    result = result_def(MemRefType)

    def verify_types(self) -> None:
        if len(self.args) not in (1, 2) or (len(self.args) == 2 and self.args[1].type != INDEX):
            fail(self, "takes a buffer and, optionally, an index")
        t = need_memref(self, self.args[0].type, "operand 0")
        r = need_memref(self, self.result.type, "result")
        d = self.option("dim")
        shape, out = list(t.get_shape()), list(r.get_shape())
        if not 0 <= d < len(shape):
            fail(self, f"dim {d} is out of range for {t}")
        same = len(out) == len(shape) and all(x == y for k, (x, y) in enumerate(zip(out, shape)) if k != d)
        fits = out[d] == DYNAMIC if len(self.args) == 2 else same and (0 <= out[d] <= shape[d] or shape[d] == DYNAMIC)
        if not same or not fits or r.element_type != t.element_type:
            fail(self, f"result must keep {t} outside dim {d} and take at most {shape[d]} elements there ('?' with a count), got {r}")


def pad_blocks_operands(op: IRDLOperation) -> None:
    """``rt.pad_blocks``/``rt.unpad_blocks``: source, destination, extent, stream."""
    _stream_last(op)
    if len(op.operands) != 4 or op.operands[2].type != INDEX:
        fail(op, "takes a source, a destination, an element count and a stream")
    a = need_memref(op, op.operands[0].type, "source")
    b = need_memref(op, op.operands[1].type, "destination")
    if a.element_type != b.element_type:
        fail(op, f"source {a} and destination {b} must have the same element type")


class _PadBlocksBase(RtOp):
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"), Kw("counts", "ints"))
    PADDED: ClassVar[int] = 1
    """Which operand (0 source, 1 destination) holds the equal padded blocks."""
    args = var_operand_def()

    def verify_types(self) -> None:
        pad_blocks_operands(self)
        d, counts = self.option("dim"), self.option("counts")
        if not counts or any(c < 1 for c in counts):
            fail(self, f"counts must be positive, got {list(counts)}")
        n = math.prod(counts)
        t = need_memref(self, self.args[self.PADDED].type, "padded buffer")
        shape = t.get_shape()
        if not 0 <= d < len(shape):
            fail(self, f"dim {d} is out of range for {t}")
        if n < 1 or shape[d] % n:
            fail(self, f"the padded buffer's dim {d} (size {shape[d]}) must hold {n} equal blocks")


@irdl_op_definition
class PadBlocksOp(_PadBlocksBase):
    """``rt.pad_blocks %src, %dst, %len, %s dim d counts [n0, ..]``: the blocks of the
    first ``%len`` elements of ``%src`` along dim ``d`` for a group over axes of ``n0,
    ..`` ranks (``layout.dim_block`` nested over them, in group order) into the
    ``n0 * ..`` equal blocks of ``%dst`` along ``d``, each at the start of its block
    (the rest is left). Lays out a buffer for a collective that cuts it in equal blocks
    where a rank's blocks do not fall where the padded ones do (a dim whose outer
    blocks differ in size, a group over several axes).

    ``rt.pad_blocks %x, %t, %len, %s dim 0 counts [4] : (memref<5xf32>, memref<8xf32>, index, !rt.stream) -> ()``
    """

    name = "rt.pad_blocks"
    PADDED: ClassVar[int] = 1


@irdl_op_definition
class UnpadBlocksOp(_PadBlocksBase):
    """``rt.unpad_blocks %src, %dst, %len, %s dim d counts [n0, ..]``: the inverse of
    ``rt.pad_blocks``: the start of each equal block of ``%src`` along ``d`` into its
    block of the first ``%len`` elements of ``%dst``.

    ``rt.unpad_blocks %t, %y, %len, %s dim 0 counts [4] : (memref<8xf32>, memref<5xf32>, index, !rt.stream) -> ()``
    """

    name = "rt.unpad_blocks"
    PADDED: ClassVar[int] = 0


STREAM_FROM = Kw("stream_from", "int", None)
"""``stream_from N`` (``plan-execution``): a host copy of this op's data of at least N
contiguous bytes uses streaming stores (each contiguous piece of a scattered buffer on its
own); absent, plain stores. A threshold rather than yes or no, so that one lowering
serves every size the cost model evaluates."""


@irdl_op_definition
class CopyOp(RtOp):
    """``rt.copy %src, %dst, %s [stream_from N]``: copy the elements of ``%src`` into
    ``%dst`` in row-major order (the shapes may differ, the element counts and types may
    not). ``stream_from N`` (``plan-execution``, host targets): a copy of at least N bytes
    between contiguous buffers uses streaming stores.

    ``rt.copy %a, %b, %s stream_from 4194304 : (memref<4x8xf32>, memref<1x4x8xf32>, !rt.stream) -> ()``
    """

    name = "rt.copy"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (STREAM_FROM,)
    args = var_operand_def()

    def verify_types(self) -> None:
        _copy_operands(self)


def _copy_operands(op: IRDLOperation) -> tuple[MemRefType, MemRefType]:
    """The source and destination of a copy (``%src, %dst, %stream``): memrefs of one
    element type and count."""
    _stream_last(op)
    if len(op.operands) != 3:
        fail(op, "takes a source, a destination and a stream")
    a = need_memref(op, op.operands[0].type, "source")
    b = need_memref(op, op.operands[1].type, "destination")
    if memref_count(a) != memref_count(b) or a.element_type != b.element_type:
        fail(op, f"source {a} and destination {b} must have the same element count and type")
    return a, b


@irdl_op_definition
class CopyBlocksOp(RtOp):
    """``rt.copy_blocks %src, %dst, %s from d to e count n``: for every j < n, ``rt.copy``
    block j of n along dim ``d`` of ``%src`` into block j of n along dim ``e`` of ``%dst``
    (row-major within each block), as one copy: packing the strided blocks of a buffer
    side by side for a collective (``e`` = 0 of a ``[n, ..]`` buffer), or spreading them
    back. The element counts and types must agree; both dims must divide into ``n``.

    ``rt.copy_blocks %x, %t, %s from 1 to 0 count 4 : (memref<8x16xf32>, memref<4x8x4xf32>, !rt.stream) -> ()``
    """

    name = "rt.copy_blocks"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("from", "int"), Kw("to", "int"), Kw("count", "int"))
    args = var_operand_def()

    def verify_types(self) -> None:
        a, b = _copy_operands(self)
        n = self.option("count")
        if n < 1:
            fail(self, f"count must be at least 1, got {n}")
        for what, t, d in (("source", a, self.option("from")), ("destination", b, self.option("to"))):
            shape = t.get_shape()
            if not 0 <= d < len(shape):
                fail(self, f"dim {d} is out of range for the {what} {t}")
            if shape[d] % n:
                fail(self, f"dim {d} of the {what} (size {shape[d]}) is not divisible into {n} blocks")


# ======================================================================================
# Computation
# ======================================================================================


@irdl_op_definition
class KernelOp(IRDLOperation):
    """``rt.kernel @name shape [d0, ..]``: a ``gpu.func``-style element-wise kernel. Its
    block arguments are the kernel parameters (memrefs and scalars) followed by one
    ``index`` per dim of ``shape``, the iteration space: the body runs once per index
    tuple, loads elements with ``memref.load``, computes with ``arith``/``math`` ops and
    writes with ``memref.store`` (several outputs allowed). Broadcast operands are
    loaded with fewer indices or constant 0. The translation to Numba gives a
    ``numba.cuda.jit`` kernel (one thread per index tuple) or an ``njit(parallel=True)``
    loop nest; arithmetic runs in the widest type involved (f16 and bf16 in f32).

    ::

        rt.kernel @k0 shape [256] {
        ^bb0(%g: memref<256xf32>, %p: memref<256xf32>, %lr: f32, %i: index):
          %gi = memref.load %g[%i] : memref<256xf32>
          %pi = memref.load %p[%i] : memref<256xf32>
          %u = arith.mulf %lr, %gi : f32
          %n = arith.subf %pi, %u : f32
          memref.store %n, %p[%i] : memref<256xf32>
        }
    """

    name = "rt.kernel"
    sym_name = prop_def(StringAttr)
    shape = prop_def(DenseArrayBase)
    body = region_def("single_block")
    traits = traits_def(SymbolOpInterface(), NoTerminator())

    @classmethod
    def get(cls, name: str, shape: Sequence[int], body: Region) -> KernelOp:
        return cls.build(
            properties={"sym_name": StringAttr(name), "shape": DenseArrayBase.from_list(i64, list(shape))},
            regions=[body],
        )

    @property
    def kernel_name(self) -> str:
        return self.sym_name.data

    @property
    def space(self) -> tuple[int, ...]:
        return tuple(self.shape.get_values())  # type: ignore[arg-type]

    @property
    def params(self):
        args = self.body.block.args
        return args[: len(args) - len(self.space)]

    @property
    def indices(self):
        args = self.body.block.args
        return args[len(args) - len(self.space) :]

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name().data
        parser.parse_keyword("shape")
        shape = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int(parser))
        region = parser.parse_region()
        return cls.get(name, shape, region)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.kernel_name} shape [{', '.join(map(str, self.space))}] ")
        printer.print_region(self.body, print_entry_block_args=True, print_block_terminators=True)

    def verify_(self) -> None:
        block = self.body.block
        n = len(self.space)
        if len(block.args) < n:
            fail(self, f"needs {n} index block argument(s) for shape {list(self.space)}, got {len(block.args)} argument(s)")
        for a in self.indices:
            if a.type != INDEX:
                fail(self, f"the last {n} block arguments must be indices, got {a.type}")
        from distir.dialects.dist import is_scalar_type

        for i, a in enumerate(self.params):
            if not (isinstance(a.type, MemRefType) or is_scalar_type(a.type) or a.type == INDEX):
                fail(self, f"parameter {i} must be a memref, a scalar or an index, got {a.type}")
        for op in block.ops:
            if not op.name.startswith(("arith.", "math.", "memref.load", "memref.store", "rt.random")):
                fail(self, f"body may hold only arith, math, memref.load/store and rt.random ops, got '{op.name}'")


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """``rt.launch @kernel(%args.., %stream)``: run a kernel over its whole iteration space
    on a stream.

    ``rt.launch @k0(%g, %p, %lr, %s) : (memref<256xf32>, memref<256xf32>, f32, !rt.stream) -> ()``
    """

    name = "rt.launch"
    kernel = prop_def(SymbolRefAttr)
    args = var_operand_def()

    @classmethod
    def get(cls, kernel: str, args) -> LaunchOp:
        args = list(args)
        if all(isinstance(a, SSAValue) for a in args):  # what ``build`` makes of them (``format.new_op``)
            return new_op(cls, args, (), {"kernel": kernel_ref(kernel)}, {}, None, ())
        return cls.build(properties={"kernel": kernel_ref(kernel)}, operands=[args])

    @property
    def kernel_name(self) -> str:
        return self.kernel.root_reference.data

    @classmethod
    def parse(cls, parser: Parser) -> LaunchOp:
        name = parser.parse_symbol_name().data
        unresolved = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        pos = parser.pos
        ins, outs = parse_type_signature(parser)
        if len(ins) != len(unresolved) or outs:
            parser.raise_error(f"'rt.launch' has {len(unresolved)} operand(s); expected as many types and no results", pos)
        return cls.get(name, [parser.resolve_operand(u, t) for u, t in zip(unresolved, ins)])

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.kernel_name}(")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(") : ")
        print_type_list(printer, [a.type for a in self.args], parens=True)
        printer.print_string(" -> ()")

    def verify_(self) -> None:
        from distir.dialects.dist import _lookup

        _stream_last(self)
        k = _lookup(self, self.kernel)
        if not isinstance(k, KernelOp):
            fail(self, f"unknown kernel @{self.kernel_name}")
        want = [a.type for a in k.params] + [STREAM]
        got = [a.type for a in self.args]
        if want != got:
            fail(self, f"arguments of @{self.kernel_name} must have types ({', '.join(map(str, want))}), got ({', '.join(map(str, got))})")


@irdl_op_definition
class CallOp(IRDLOperation):
    """``rt.call @kernel(%operands)``: a kernel applied to distributed values, before
    bufferization (the output of ``lower-to-kernels``): the kernel's parameters are the
    rank-local buffers of the operands (scalars and indices as they are) followed by one
    buffer per result. Results share placements, like ``dist.map``'s.

    ``%m1 = rt.call @k0(%m, %g, %b1) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]>``
    """

    name = "rt.call"
    kernel = prop_def(SymbolRefAttr)
    args = var_operand_def()
    outputs = var_result_def()

    @classmethod
    def get(cls, kernel: str, args, result_types) -> CallOp:
        args, result_types = list(args), list(result_types)
        if all(isinstance(a, SSAValue) for a in args):  # what ``build`` makes of them (``format.new_op``)
            return new_op(cls, args, result_types, {"kernel": kernel_ref(kernel)}, {}, None, ())
        return cls.build(properties={"kernel": kernel_ref(kernel)}, operands=[args], result_types=[result_types])

    @property
    def kernel_name(self) -> str:
        return self.kernel.root_reference.data

    @classmethod
    def parse(cls, parser: Parser) -> CallOp:
        name = parser.parse_symbol_name().data
        unresolved = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        pos = parser.pos
        ins, outs = parse_type_signature(parser)
        if len(ins) != len(unresolved):
            parser.raise_error(f"'rt.call' has {len(unresolved)} operand(s) but the signature gives {len(ins)} type(s)", pos)
        return cls.get(name, [parser.resolve_operand(u, t) for u, t in zip(unresolved, ins)], outs)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.kernel_name}(")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(") : ")
        print_type_list(printer, [a.type for a in self.args], parens=True)
        printer.print_string(" -> ")
        print_type_list(printer, list(self.result_types), parens=False)

    def verify_(self) -> None:
        from distir.dialects.dist import _lookup

        k = _lookup(self, self.kernel)
        if not isinstance(k, KernelOp):
            fail(self, f"unknown kernel @{self.kernel_name}")
        n = len(self.args) + len(self.outputs)
        if len(k.params) != n:
            fail(self, f"@{self.kernel_name} takes {len(k.params)} parameter(s), the call gives {n} (operands and results)")


@irdl_op_definition
class MatmulOp(RtOp):
    """``rt.matmul %a, %b, %c, %s``: ``c = a @ b`` on this rank's blocks (``a[..., M, K]``,
    ``b[K, N]`` or batched like ``a``). numpy/BLAS on the CPU, a tiled numba-cuda kernel
    on the GPU.

    ``rt.matmul %a, %b, %c, %s : (memref<8x64xf32>, memref<64x32xf32>, memref<8x32xf32>, !rt.stream) -> ()``
    """

    name = "rt.matmul"
    args = var_operand_def()

    def verify_types(self) -> None:
        _stream_last(self)
        if len(self.args) != 4:
            fail(self, "takes lhs, rhs, result and a stream")
        a, b, c = (need_memref(self, v.type, w) for v, w in zip(self.args, ("lhs", "rhs", "result")))
        sa, sb, sc = a.get_shape(), b.get_shape(), c.get_shape()
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or tuple(sc) != (*sa[:-1], sb[-1]):
            fail(self, f"shapes {a}, {b} -> {c} do not form a matmul")


@irdl_op_definition
class ReduceTensorOp(RtOp):
    """``rt.reduce_tensor sum %a, %out, %s dims [..] [count C]``: reduce this rank's block
    over ``dims``; ``avg`` divides the sum by ``C``, by default the elements reduced (a
    dim the ranks do not divide: its size over the ranks, ``layout.avg_count``). The
    reduction of an empty block is the identity (0, 1, -inf, +inf).

    ``rt.reduce_tensor sum %a, %n, %s dims [0] : (memref<256xf32>, memref<f32>, !rt.stream) -> ()``
    """

    name = "rt.reduce_tensor"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dims", "ints"), Kw("count", "float", None))
    args = var_operand_def()

    def verify_types(self) -> None:
        _stream_last(self)
        if len(self.args) != 3:
            fail(self, "takes an input, an output and a stream")
        a = need_memref(self, self.args[0].type, "input")
        o = need_memref(self, self.args[1].type, "output")
        dims = self.option("dims")
        keep = [s for d, s in enumerate(a.get_shape()) if d not in dims]
        if list(o.get_shape()) != keep:
            fail(self, f"output must have shape {keep}, got {list(o.get_shape())}")


@irdl_op_definition
class EmbeddingBagOp(RtOp):
    """``rt.embedding_bag %table, %indices, %row0, %out, %s mode sum``: combine the rows
    listed by ``indices`` (global row numbers) from this rank's block of the table, whose
    first row is global row ``%row0``; rows outside the block count as absent (their
    sum is completed by an all-reduce).

    ``rt.embedding_bag %t, %i, %r0, %o, %s mode sum : (memref<2x100x16xf32>, memref<2x32x4xi32>, index, memref<2x32x16xf32>, !rt.stream) -> ()``
    """

    name = "rt.embedding_bag"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("mode", "word", "sum", ("sum", "mean", "max")),)
    args = var_operand_def()

    def verify_types(self) -> None:
        _stream_last(self)
        if len(self.args) != 5 or self.args[2].type != INDEX:
            fail(self, "takes a table, indices, a first-row index, an output and a stream")


@irdl_op_definition
class ScatterAddOp(RtOp):
    """``rt.scatter_add %indices, %updates, %row0, %out, %s``: ``out`` (this rank's block
    of the result rows, the first being global row ``%row0``) set to the sum of the
    update rows whose index (a global row number) falls in the block, in the order of
    the (bag, position) pairs (``dist.scatter_add``).

    ``rt.scatter_add %i, %u, %r0, %o, %s : (memref<32x1xi32>, memref<32x16xf32>, index, memref<25x16xf32>, !rt.stream) -> ()``
    """

    name = "rt.scatter_add"
    args = var_operand_def()

    def verify_types(self) -> None:
        _stream_last(self)
        if len(self.args) != 5 or self.args[2].type != INDEX:
            fail(self, "takes indices, updates, a first-row index, an output and a stream")


@irdl_op_definition
class SortOp(RtOp):
    """``rt.sort %in0, .., %out0, .., %s dim d``: each ``out_k`` set to ``in_k`` reordered
    along ``d`` by the keys of ``in0`` (``dist.sort``: ascending, stable, NaN last).

    ``rt.sort %x, %j, %y, %k, %s dim 1 : (memref<8x16xf32>, memref<8x16xi32>, memref<8x16xf32>, memref<8x16xi32>, !rt.stream) -> ()``
    """

    name = "rt.sort"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"),)
    args = var_operand_def()

    def verify_types(self) -> None:
        _stream_last(self)
        n = len(self.args) - 1
        if n < 2 or n % 2:
            fail(self, "takes inputs, as many outputs and a stream")
        for a, b in zip(self.args[: n // 2], self.args[n // 2 : n]):
            x, y = need_memref(self, a.type, "input"), need_memref(self, b.type, "output")
            if x.get_shape() != y.get_shape() or x.element_type != y.element_type:
                fail(self, f"output {y} must have its input's type {x}")

    def io(self) -> tuple[list[SSAValue], list[SSAValue]]:
        n = (len(self.args) - 1) // 2
        return list(self.args[:n]), list(self.args[n : 2 * n])


# ======================================================================================
# Fused computation-collective operators (the fused-operator paper)
# ======================================================================================

TILE_ORDERS = ("natural", "ring", "remote_first")
TRANSPORT = Kw("transport", "word", None, ("shared", "messages"))
"""``transport shared|messages`` (``plan-execution``) of a fused tile operator: tiles
stored straight into the destination rank's buffers (ranks that share memory) or sent
as point-to-point messages on the communication stream; absent (not planned), messages."""
TRANSPORT_ELSE = Kw("else", "word", None, ("messages",))
"""``transport shared else messages`` (``plan-execution``, on targets whose ranks may be
given buffers their peers cannot see): a run over such buffers sends the tiles as
messages, alike on every rank. Without it, such a run fails."""


def tile_order(order: str, n: int, me: int) -> list[int]:
    """The destination (or owner) ranks in the order a rank computes their tiles:
    ``remote_first`` me+1, .., me-1, me (communication-aware: own tiles last);
    ``ring`` me, me+1, .. (own first); ``natural`` 0, 1, .., n-1 (oblivious)."""
    if order == "remote_first":
        return [(me + s) % n for s in range(1, n)] + [me]
    if order == "ring":
        return [(me + s) % n for s in range(n)]
    return list(range(n))


class TiledCollectiveOp(RtOp):
    """Base of the fused computation-collective operators: a producer (matmul or
    embedding bag) whose result feeds one collective over the ranks of ``%comm``, run
    tile by tile. The producer's result is cut into one block per destination rank
    (along ``dim``) and each block into ``tiles`` tiles along the same dim; a tile is the
    unit of computation and of communication. Ranks compute the tiles of the
    destinations in ``order`` (``tile_order``) and each tile goes to its destination as
    soon as it is computed: stored straight into the destination rank's buffer
    (``transport shared``, planned where ranks share memory: ``local``; ``mpi`` through
    MPI-3 shared-memory windows), sent point to point on the second stream otherwise
    (``transport messages``: ``mpi`` across nodes, ``nccl``).
    The last two operands are the compute stream and the communication stream; the
    result is complete on the compute stream when the op is. Operands:
    producer inputs, the collective's output buffer, [a reduction buffer], ``%comm``,
    ``%s0``, ``%s1``."""

    READS_PRODUCERS: ClassVar[bool] = True
    """Its verifier checks which ops produce its operands (``dialects/verifier.py``)."""

    PRODUCER_ARGS: ClassVar[int] = 2
    HAS_RED: ClassVar[bool] = False
    args = var_operand_def()

    # ---- operand access
    @property
    def inputs(self):
        return self.args[: self.PRODUCER_ARGS]

    @property
    def out(self):
        return self.args[self.PRODUCER_ARGS]

    @property
    def red(self):
        return self.args[self.PRODUCER_ARGS + 1] if self.HAS_RED else None

    @property
    def comm(self):
        return self.args[-3]

    @property
    def streams(self):
        return self.args[-2], self.args[-1]

    def n_args(self) -> int:
        return self.PRODUCER_ARGS + 1 + int(self.HAS_RED) + 3

    def producer_shape(self) -> tuple[int, ...]:
        """Shape of this rank's producer result (before the collective)."""
        raise NotImplementedError

    def ranks(self) -> int:
        """The group size, read from the buffer shapes."""
        raise NotImplementedError

    def tile_dim(self) -> int:
        """The dim each destination's block is cut into tiles along (``dim`` unless
        the op says otherwise)."""
        return self.option("dim")

    def tile_shape(self) -> tuple[int, ...]:
        """Shape of one tile (of the producer's result)."""
        shape = list(self.producer_shape())
        shape[self.option("dim")] //= self.ranks()
        shape[self.tile_dim()] //= self.option("tiles")
        return tuple(shape)

    def verify_types(self) -> None:
        _stream_last(self)
        if len(self.args) != self.n_args():
            fail(self, f"takes {self.n_args()} operands (producer inputs, output{', reduction buffer' if self.HAS_RED else ''}, communicator, compute stream, communication stream), got {len(self.args)}")
        if self.args[-2].type != STREAM or self.comm.type != COMM:
            fail(self, "takes a communicator, then the compute and communication streams, as its last operands")
        for i, v in enumerate(self.args[: self.PRODUCER_ARGS + 1 + int(self.HAS_RED)]):
            if not (isinstance(v.type, MemRefType) or v.type == INDEX):
                fail(self, f"operand {i} must be a memref, got {v.type}")
        self.verify_producer()
        if self.option("else") is not None and self.option("transport") != "shared":
            fail(self, "'else messages' belongs to 'transport shared'")
        if self.option("tiles") < 1:
            fail(self, f"tiles must be at least 1, got {self.option('tiles')}")
        p = self.producer_shape()
        d, t = self.option("dim"), self.tile_dim()
        for what, x in (("dim", d), ("tile_dim", t)):
            if not 0 <= x < len(p):
                fail(self, f"{what} {x} is out of range for the producer's result of shape {list(p)}")
        n = self.ranks()
        tiles = self.option("tiles")
        if t == d and (n < 1 or p[d] % (n * tiles)):
            fail(self, f"dim {d} of the producer's result ({p[d]}) is not divisible into {n} blocks of {tiles} tiles")
        if t != d and (n < 1 or p[d] % n or p[t] % tiles):
            fail(self, f"dim {d} of the producer's result ({p[d]}) is not divisible into {n} blocks, or its dim {t} ({p[t]}) into {tiles} tiles")
        self.verify_collective(p, n)

    def verify_producer(self) -> None:
        pass

    def verify_collective(self, p: tuple[int, ...], n: int) -> None:
        pass


class MatmulReduceOp(TiledCollectiveOp):
    """Shared by GEMM/GEMV + AllReduce and GEMM/GEMV + ReduceScatter: ``%a[..., M, K] @
    %b[K, N]`` (or ``b`` batched like ``a``) gives this rank's partial sums; the
    reduction buffer ``%red[n, block]`` is the owner's: slot j receives rank j's partial
    of the owner's block (along ``dim``), the owner's own partial goes straight into
    its output (the paper's two-phase direct AllReduce)."""

    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"), Kw("tiles", "int"), Kw("order", "word", REQUIRED, TILE_ORDERS), TRANSPORT, TRANSPORT_ELSE)
    HAS_RED: ClassVar[bool] = True

    def producer_shape(self) -> tuple[int, ...]:
        a, b = (v.type.get_shape() for v in self.inputs)  # type: ignore[attr-defined]
        return (*a[:-1], b[-1])

    def ranks(self) -> int:
        return self.red.type.get_shape()[0]  # type: ignore[union-attr]

    def block_shape(self) -> tuple[int, ...]:
        shape = list(self.producer_shape())
        shape[self.option("dim")] //= self.ranks()
        return tuple(shape)

    def verify_producer(self) -> None:
        a, b = (need_memref(self, v.type, w) for v, w in zip(self.inputs, ("lhs", "rhs")))
        sa, sb = a.get_shape(), b.get_shape()
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or (len(sb) > 2 and tuple(sb[:-2]) != tuple(sa[:-2])):
            fail(self, f"shapes {a} and {b} do not form a matmul")
        red = need_memref(self, self.red.type, "reduction buffer")  # type: ignore[union-attr]
        if len(red.get_shape()) != len(sa) + 1:
            fail(self, f"reduction buffer must be memref<n x block>, got {red}")

    def verify_collective(self, p: tuple[int, ...], n: int) -> None:
        out = need_memref(self, self.out.type, "output")
        want = tuple(p) if self.GATHER else self.block_shape()
        if tuple(out.get_shape()) != want:
            fail(self, f"output must have shape {list(want)}, got {list(out.get_shape())}")
        if tuple(self.red.type.get_shape()[1:]) != self.block_shape():  # type: ignore[union-attr]
            fail(self, f"reduction buffer must have shape {[n, *self.block_shape()]}, got {list(self.red.type.get_shape())}")  # type: ignore[union-attr]

    GATHER: ClassVar[bool] = True


@irdl_op_definition
class MatmulAllReduceOp(MatmulReduceOp):
    """``rt.matmul_all_reduce sum %a, %b, %out, %red, %comm, %s, %s1 dim d tiles t order
    o``: ``out = all_reduce(a @ b)`` fused tile by tile (GEMV/GEMM + AllReduce): each
    rank computes the partial tiles of the other owners' blocks first (``order``),
    sends each to its owner (straight into the owner's reduction buffer where memory is
    shared), computes its own block's partial into ``%out`` last, reduces the peers'
    partials into it tile by tile as they arrive and gathers each reduced tile into
    every rank's ``%out``. See ``TiledCollectiveOp``.

    ``rt.matmul_all_reduce sum %a, %w, %o, %red, %c, %s, %s1 dim 1 tiles 2 order remote_first : (memref<4x64xf32>, memref<64x32xf32>, memref<4x32xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()``
    """

    name = "rt.matmul_all_reduce"
    GATHER: ClassVar[bool] = True


@irdl_op_definition
class MatmulReduceScatterOp(MatmulReduceOp):
    """``rt.matmul_reduce_scatter sum %a, %b, %out, %red, %comm, %s, %s1 dim d tiles t
    order o``: ``out = reduce_scatter(a @ b)`` along ``dim`` fused tile by tile, as
    ``rt.matmul_all_reduce`` without the gathering: ``%out`` is this rank's block.

    ``rt.matmul_reduce_scatter sum %a, %w, %o, %red, %c, %s, %s1 dim 1 tiles 2 order remote_first : (memref<4x64xf32>, memref<64x32xf32>, memref<4x16xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()``
    """

    name = "rt.matmul_reduce_scatter"
    GATHER: ClassVar[bool] = False


class TiledAllToAllOp(TiledCollectiveOp):
    """Shared by the producer + All-to-All operators: the producer's result is sliced
    on ``concat`` (this rank holds block ``me`` of it) and the all-to-all slices it on
    ``dim`` instead: block j along ``dim`` goes to rank j, where it becomes block ``me``
    along ``concat`` of ``%out``. Each block is cut into ``tiles`` tiles along
    ``tile_dim`` (default: ``dim``; another dim, e.g. the tables of an embedding bag or
    the experts of a batched GEMM, lets the tiles of one group of tables or experts for
    every destination run back to back, reading their inputs once). The region is the
    epilogue, run on every finished tile in place (its block argument, a view of the
    tile where it was stored), e.g. the activation of an expert GEMM."""

    KEYWORDS: ClassVar[tuple[Kw, ...]] = (
        Kw("dim", "int"),
        Kw("concat", "int"),
        Kw("tile_dim", "int", -1),
        Kw("tiles", "int"),
        Kw("order", "word", REQUIRED, TILE_ORDERS),
        TRANSPORT,
        TRANSPORT_ELSE,
    )
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def tile_dim(self) -> int:
        t = self.option("tile_dim")
        return self.option("dim") if t < 0 else t

    def ranks(self) -> int:
        p = self.producer_shape()
        c = self.option("concat")
        out = self.out.type.get_shape()  # type: ignore[attr-defined]
        return out[c] // p[c] if 0 <= c < len(p) and p[c] else 0

    def verify_collective(self, p: tuple[int, ...], n: int) -> None:
        out = need_memref(self, self.out.type, "output")
        d, c = self.option("dim"), self.option("concat")
        if c == d or not 0 <= c < len(p):
            fail(self, f"concat must be another dim of the producer's result than dim {d}, got {c}")
        want = list(p)
        want[d] //= n
        want[c] *= n
        if list(out.get_shape()) != want:
            fail(self, f"output must have shape {want} for a group of {n} rank(s) (the producer's dim {d} divided by it, dim {c} multiplied), got {list(out.get_shape())}")
        block = self.body.block
        tile = MemRefType(out.element_type, self.tile_shape())
        if len(block.args) != 1 or block.args[0].type != tile:
            fail(self, f"the epilogue region takes one argument, the tile ({tile})")


@irdl_op_definition
class MatmulAllToAllOp(TiledAllToAllOp):
    """``rt.matmul_all_to_all %a, %b, %out, %comm, %s, %s1 dim e concat d tiles t order o
    { epilogue }``: ``out = all_to_all(epilogue(a @ b))`` fused tile by tile (GEMM +
    All-to-All, MoE's expert GEMM and combine): tiles bound for other ranks are
    computed first (``order``) straight into their destination (where memory is shared),
    own tiles last. See ``TiledAllToAllOp``.

    ::

        rt.matmul_all_to_all %x, %w, %o, %c, %s, %s1 dim 1 concat 0 tiles 2 order remote_first : (memref<1x8x16xf32>, memref<1x16x32xf32>, memref<2x4x32xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
        ^bb0(%t: memref<1x2x32xf32>):
          rt.launch @relu(%t, %t, %s) : (memref<1x2x32xf32>, memref<1x2x32xf32>, !rt.stream) -> ()
        }
    """

    name = "rt.matmul_all_to_all"

    def producer_shape(self) -> tuple[int, ...]:
        a, b = (v.type.get_shape() for v in self.inputs)  # type: ignore[attr-defined]
        return (*a[:-1], b[-1])

    def verify_producer(self) -> None:
        a, b = (need_memref(self, v.type, w) for v, w in zip(self.inputs, ("lhs", "rhs")))
        sa, sb = a.get_shape(), b.get_shape()
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or (len(sb) > 2 and tuple(sb[:-2]) != tuple(sa[:-2])):
            fail(self, f"shapes {a} and {b} do not form a matmul")


@irdl_op_definition
class EmbeddingAllToAllOp(TiledAllToAllOp):
    """``rt.embedding_all_to_all %table, %indices, %row0, %out, %comm, %s, %s1 mode m dim
    e concat d tiles t order o { epilogue }``: ``out = all_to_all(embedding_bag(table,
    indices))`` fused tile by tile (DLRM's embedding + All-to-All): the pooled rows bound
    for other ranks are computed first, each tile stored straight into its destination
    (where memory is shared), own rows last. ``%row0`` is the global number of the
    table block's first row, as for ``rt.embedding_bag``. See ``TiledAllToAllOp``.

    ::

        rt.embedding_all_to_all %t, %i, %r0, %o, %c, %s, %s1 dim 1 concat 0 tiles 2 order remote_first : (memref<2x100x16xf32>, memref<2x8x4xi32>, index, memref<4x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
        ^bb0(%tile: memref<2x2x16xf32>):
        }
    """

    name = "rt.embedding_all_to_all"
    PRODUCER_ARGS: ClassVar[int] = 3
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("mode", "word", "sum", ("sum", "mean", "max")), *TiledAllToAllOp.KEYWORDS)

    def producer_shape(self) -> tuple[int, ...]:
        t, i = (v.type.get_shape() for v in self.inputs[:2])  # type: ignore[attr-defined]
        return (*i[:-1], t[-1])

    def verify_producer(self) -> None:
        t = need_memref(self, self.inputs[0].type, "table")
        i = need_memref(self, self.inputs[1].type, "indices")
        if self.inputs[2].type != INDEX:
            fail(self, f"operand 2 (the table block's first row) must be an index, got {self.inputs[2].type}")
        st, si = t.get_shape(), i.get_shape()
        if len(st) not in (2, 3) or len(si) != len(st) or tuple(st[:-2]) != tuple(si[:-2]):
            fail(self, f"table {t} and indices {i} do not form an embedding bag")
        if not isinstance(i.element_type, IntegerType):
            fail(self, f"indices must have an integer element type, got {i.element_type}")


@irdl_op_definition
class RandomOp(RtOp):
    """``rt.random %seed, %index``: inside a kernel, the uniform [0, 1) number of the
    counter-based generator for (seed, logical element index); ``dist.dropout`` keeps an
    element when it is >= p.

    ``%u = rt.random %seed, %lin : (i64, i64) -> f64``
    """

    name = "rt.random"
    args = var_operand_def()
    result = result_def(Attribute)


@irdl_op_definition
class ChunkOp(IRDLOperation):
    """``rt.chunk %x, %k dim d count n``: chunk ``%k`` of ``n`` of a distributed value
    along dim ``d``, as ``coll.overlap``'s lowering cuts a chain (value semantics, before
    bufferization): each rank takes block ``%k`` of ``n`` of its own buffer along ``d``,
    so the chunk is laid out as ``%x`` is, with dim ``d`` divided by ``n``.

    ``%c = rt.chunk %x, %k dim 0 count 2 : (!dist.tensor<8x16xf32, @world, [local]>, index) -> !dist.tensor<4x16xf32, @world, [local]>``
    """

    name = "rt.chunk"
    dim = prop_def(IntegerAttr)
    count = prop_def(IntegerAttr)
    input = var_operand_def()
    result = result_def(Attribute)

    @classmethod
    def get(cls, x, index, dim: int, count: int, result_type: Attribute) -> ChunkOp:
        return cls.build(
            operands=[[x, index]],
            result_types=[result_type],
            properties={"dim": IntegerAttr(dim, i64), "count": IntegerAttr(count, i64)},
        )

    @classmethod
    def parse(cls, parser: Parser) -> ChunkOp:
        x = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        k = parser.parse_unresolved_operand()
        parser.parse_keyword("dim")
        d = parse_int(parser)
        parser.parse_keyword("count")
        n = parse_int(parser)
        parser.parse_punctuation(":")
        ins, outs = parse_type_signature(parser)
        return cls.get(parser.resolve_operand(x, ins[0]), parser.resolve_operand(k, ins[1]), d, n, outs[0])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.input, printer.print_operand)
        printer.print_string(f" dim {self.dim.value.data} count {self.count.value.data} : ")
        print_type_list(printer, [a.type for a in self.input], parens=True)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


@irdl_op_definition
class AssembleOp(IRDLOperation):
    """``rt.assemble %c0, %c1, .. dim d``: the value whose chunks along dim ``d`` are the
    operands, in order (inverse of ``rt.chunk``). Lowered by computing each chunk straight
    into its block of the result's buffer.

    ``%y = rt.assemble %c0, %c1 dim 0 : (!dist.tensor<4x16xf32, @world, [replicated]>, !dist.tensor<4x16xf32, @world, [replicated]>) -> !dist.tensor<8x16xf32, @world, [replicated]>``
    """

    name = "rt.assemble"
    dim = prop_def(IntegerAttr)
    chunks = var_operand_def()
    result = result_def(Attribute)

    @classmethod
    def get(cls, chunks, dim: int, result_type: Attribute) -> AssembleOp:
        return cls.build(operands=[list(chunks)], result_types=[result_type], properties={"dim": IntegerAttr(dim, i64)})

    @classmethod
    def parse(cls, parser: Parser) -> AssembleOp:
        unresolved = [parser.parse_unresolved_operand()]
        while parser.parse_optional_punctuation(","):
            unresolved.append(parser.parse_unresolved_operand())
        parser.parse_keyword("dim")
        d = parse_int(parser)
        parser.parse_punctuation(":")
        ins, outs = parse_type_signature(parser)
        return cls.get([parser.resolve_operand(u, t) for u, t in zip(unresolved, ins)], d, outs[0])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.chunks, printer.print_operand)
        printer.print_string(f" dim {self.dim.value.data} : ")
        print_type_list(printer, [a.type for a in self.chunks], parens=True)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


@irdl_op_definition
class FusedOp(IRDLOperation):
    """``rt.fused [zero_copy reduce R gather [G, ..] [else sequential] | sequential] { .. }``: the calls of
    one fused collective (CoCoNet's FusedAllReduce): a ``nccl.reduce_scatter``, the
    kernel on this rank's slice, and the in-place ``nccl.all_gather`` of the results to
    gather. The ops mean exactly what they say, in order; ``plan-execution`` decides how
    they run:

    * ``sequential``: one by one (the only way where ranks do not share memory);
    * ``zero_copy reduce R gather [G..]``: as one kernel per rank over its slice that
      reduces the slice straight from every peer's reduce-scatter input (into kernel
      parameter ``R``, the reduce-scatter's output, which is never stored) and stores
      kernel outputs ``G..`` (each the all-gather input of one gathered result, this
      rank's block of it) straight into every peer's gathered buffer. Valid only for a
      group of that shape (checked here): the reduce-scatter first, then ``rt.block``,
      ``rt.group_rank`` and ``arith`` ops, one ``rt.launch`` whose space is the
      reduce-scatter's output, then in-place all-gathers of launch outputs on the same
      communicator. The buffers the group touches must be where every peer sees them
      (a run that gives it others fails, naming the op), unless the plan adds
      ``else sequential``: then a run whose buffers a peer cannot see (a step's
      caller's arrays outside the shared memory) runs the group sequentially, on every
      rank of the group alike.

    Unplanned (no clause), the group runs sequentially.

    ::

        rt.fused zero_copy reduce 0 gather [1] {
          nccl.reduce_scatter avg %g, %rs, %c, %s count 256 : (...) -> ()
          %pv = rt.block %p, %i dim 0 count 4 : (memref<1024xf32>, index) -> memref<256xf32>
          rt.launch @k0(%rs, %pv, %lr, %s) : (...) -> ()
          nccl.all_gather %pv, %p, %c, %s count 256 in_place : (...) -> ()
        }
    """

    READS_PRODUCERS: ClassVar[bool] = True
    """Its verifier checks which ops produce the all-gathers' inputs (``dialects/verifier.py``)."""

    name = "rt.fused"
    execution = opt_prop_def(StringAttr)
    reduce = opt_prop_def(IntegerAttr)
    gather = opt_prop_def(DenseArrayBase)
    fallback = opt_prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    EXECUTIONS: ClassVar[tuple[str, ...]] = ("zero_copy", "sequential")

    @property
    def mode(self) -> str | None:
        """``zero_copy``, ``sequential`` or None (not planned)."""
        return self.execution.data if self.execution is not None else None

    @property
    def reduce_param(self) -> int:
        assert self.reduce is not None
        return self.reduce.value.data

    @property
    def gather_params(self) -> tuple[int, ...]:
        return tuple(self.gather.get_values()) if self.gather is not None else ()  # type: ignore[arg-type]

    @property
    def falls_back(self) -> bool:
        """Whether a ``zero_copy`` group runs sequentially over buffers a peer cannot see
        (``else sequential``) rather than failing."""
        return self.fallback is not None

    def plan(self, mode: str | None, reduce: int | None = None, gather: Sequence[int] = (), falls_back: bool = False) -> None:
        """Record how the group runs (``plan-execution``)."""
        for k in ("execution", "reduce", "gather", "fallback"):
            self.properties.pop(k, None)
        if mode is None:
            return
        self.properties["execution"] = StringAttr(mode)
        if mode == "zero_copy":
            assert reduce is not None
            self.properties["reduce"] = IntegerAttr(reduce, i64)
            self.properties["gather"] = DenseArrayBase.from_list(i64, list(gather))
            if falls_back:
                self.properties["fallback"] = StringAttr("sequential")

    @classmethod
    def parse(cls, parser: Parser) -> FusedOp:
        mode = reduce = None
        gather: list[int] = []
        falls_back = False
        pos = parser.pos
        word = parser.parse_optional_identifier()
        if word is not None:
            if word not in cls.EXECUTIONS:
                parser.raise_error(f"'rt.fused' execution must be one of {', '.join(cls.EXECUTIONS)}, got '{word}'", pos, parser.pos)
            mode = word
            if mode == "zero_copy":
                parser.parse_keyword("reduce")
                reduce = parse_int(parser, " after 'reduce'")
                parser.parse_keyword("gather")
                gather = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int(parser), " after 'gather'")
                if parser.parse_optional_keyword("else") is not None:
                    parser.parse_keyword("sequential")
                    falls_back = True
        region = parser.parse_region()
        op = cls.build(regions=[region])
        op.plan(mode, reduce, gather, falls_back)
        op.attributes.update(parser.parse_optional_attr_dict())
        return op

    def print(self, printer: Printer) -> None:
        mode = self.mode
        if mode == "zero_copy":
            printer.print_string(f" zero_copy reduce {self.reduce_param} gather [{', '.join(map(str, self.gather_params))}]")
            if self.falls_back:
                printer.print_string(" else sequential")
        elif mode is not None:
            printer.print_string(f" {mode}")
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_block_terminators=True)
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        mode = self.mode
        if mode is not None and mode not in self.EXECUTIONS:
            fail(self, f"execution must be one of {', '.join(self.EXECUTIONS)}, got '{mode}'")
        if self.fallback is not None and self.fallback.data != "sequential":
            fail(self, f"a zero_copy group falls back to sequential, not '{self.fallback.data}'")
        if mode != "zero_copy":
            if self.reduce is not None or self.gather is not None or self.fallback is not None:
                fail(self, "reduce, gather and else belong to a zero_copy group")
            return
        got = self.zero_copy_layout()
        if isinstance(got, str):
            fail(self, f"cannot run zero_copy: {got}")
        if got != (self.reduce_param, self.gather_params):
            fail(self, f"zero_copy group reduces into parameter {got[0]} and gathers parameters {list(got[1])}, not reduce {self.reduce_param} gather {list(self.gather_params)}")

    def zero_copy_layout(self) -> tuple[int, tuple[int, ...]] | str:
        """(kernel parameter that receives the reduced slice, kernel parameters whose
        outputs are gathered in place) when the group has the shape a zero-copy kernel
        runs (see the class doc); otherwise why not."""
        from xdsl.dialects import memref

        from distir.dialects import nccl
        from distir.dialects.dist import _lookup

        ops = list(self.body.block.ops)
        if not ops or not isinstance(ops[0], nccl.ReduceScatterOp):
            return "it does not start with a nccl.reduce_scatter"
        rs = ops[0]
        launches = [o for o in ops if isinstance(o, LaunchOp)]
        if len(launches) != 1:
            return f"it has {len(launches)} rt.launch ops, not one"
        launch = launches[0]
        at = ops.index(launch)
        if not all(isinstance(o, (BlockOp, GroupRankOp)) or o.dialect_name() == "arith" for o in ops[1:at]):
            return "only rt.block, rt.group_rank and arith ops may come between the reduce-scatter and the launch"
        gathers = ops[at + 1 :]
        if not all(isinstance(g, nccl.AllGatherOp) for g in gathers):
            return "only nccl.all_gather ops may follow the launch"
        kernel = _lookup(self, launch.kernel)
        if not isinstance(kernel, KernelOp):
            return f"unknown kernel @{launch.kernel_name}"
        space = tuple(kernel.space)
        recv = rs.buffers[1]
        args = list(launch.args[:-1])
        if args.count(recv) != 1 or any(recv in g.args for g in gathers):
            return "the reduce-scatter's output must be one kernel argument, and no all-gather's"
        if any(u.operation is not rs and u.operation is not launch for u in recv.uses):
            # the kernel reduces the peers' blocks as it reads them: the buffer stays unwritten
            return "the reduce-scatter's output must be read by the kernel only"
        if tuple(recv.type.get_shape()) != space or math.prod(space) != rs.count:  # type: ignore[attr-defined]
            return "the kernel's space must be the reduce-scatter's output"
        params = list(kernel.params)
        stored = {params.index(o.memref) for o in kernel.body.block.ops if isinstance(o, memref.StoreOp)}
        gather_params = []
        for g in gathers:
            send, full = g.buffers
            outs = [i for i, a in enumerate(args) if a is send and i in stored]
            if g.comm is not rs.comm or len(outs) != 1:
                return "each all-gather must gather one kernel output on the reduce-scatter's communicator"
            if tuple(send.type.get_shape()) != space or g.count != rs.count:  # type: ignore[attr-defined]
                return "each all-gather must gather a block of the reduce-scatter's size"
            if not in_place_block(send, full, rs.count, rs.comm):
                return "each all-gather must be in place (its input this rank's contiguous block of its output)"
            gather_params.append(outs[0])
        return args.index(recv), tuple(gather_params)


def in_place_block(send, recv, count: int, comm=None) -> bool:
    """Whether ``send`` is this rank's contiguous block of ``recv`` (``rt.block %recv,
    %group_rank dim d`` of ``count`` elements, the group rank unshifted and, with
    ``comm``, of that communicator's group): an in-place all-gather."""
    view = send.owner
    if not isinstance(view, BlockOp) or view.args[0] is not recv:
        return False
    index = view.args[1].owner
    shape = list(recv.type.get_shape())
    if not (
        isinstance(index, GroupRankOp)
        and index.shift_value == 0
        and BlockOp.contiguous(shape, view.option("dim"))
        and math.prod(shape) == count * view.option("count")
    ):
        return False
    group = comm.owner if comm is not None else None
    return not isinstance(group, CommOp) or (group.mesh_name, group.axis_list) == (index.mesh_name, index.axis_list)


# ======================================================================================
# Buckets: values side by side in one buffer (combined collectives, horizontal kernels)
# ======================================================================================


def _numel(t: Attribute) -> int:
    return math.prod(t.get_shape())  # type: ignore[attr-defined]


def _offsets(types: Sequence[Attribute]) -> list[int]:
    out, at = [], 0
    for t in types:
        out.append(at)
        at += _numel(t)
    return out


def _bucket_error(members: Sequence[Attribute], bucket: Attribute) -> str | None:
    """Why ``bucket`` is not the 1-d bucket type of ``members``, or None."""
    from distir.dialects import layout
    from distir.dialects.dist import TensorType
    from distir.dialects.placements import At, Sliced

    if not members:
        return "needs at least one member"
    if not isinstance(bucket, TensorType) or bucket.rank != 1:
        return f"bucket must be a 1-d !dist.tensor, got {bucket}"
    for i, t in enumerate(members):
        if not isinstance(t, TensorType):
            return f"member {i} must be a !dist.tensor, got {t}"
        if t.element_type != bucket.element_type or t.mesh_name != bucket.mesh_name:
            return f"member {i} of type {t} must have the bucket's element type and mesh ({bucket})"
        if any(isinstance(p, (Sliced, At)) for p in t.get_placements()):
            return f"member {i} of type {t} must not be sliced or at<r>: every rank holds its whole buffer"
        if not layout.same_layout(t.get_placements(), bucket.get_placements()):
            return f"member {i} of type {t} must be placed as the bucket ({bucket})"
    total = sum(_numel(t) for t in members)
    if bucket.get_shape() != (total,):
        return f"bucket must have the members' {total} elements, got {bucket.get_shape()[0]}"
    return None


@irdl_op_definition
class PackOp(IRDLOperation):
    """``rt.pack %x0, %x1, ..``: one 1-d value holding the operands side by side, each
    flattened, in order (value semantics, before bufferization; made by
    ``lower-buckets`` for combined collectives and horizontal kernels). The operands are
    distributed values of one element type and mesh, placed alike and never sliced or
    at<r>: every rank's buffer of the result is its buffers of the operands,
    concatenated. Bufferized without copies when the operands are function arguments
    (the runtime lays them out in one buffer) or are computed straight into it.

    ``%b = rt.pack %x, %y : (!dist.tensor<64xf32, @world, [local]>, !dist.tensor<8x4xf32, @world, [local]>) -> !dist.tensor<96xf32, @world, [local]>``
    """

    name = "rt.pack"
    members = var_operand_def()
    result = result_def(Attribute)

    @classmethod
    def get(cls, members, result_type: Attribute) -> PackOp:
        return cls.build(operands=[list(members)], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser) -> PackOp:
        unresolved = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        ins, outs = parse_type_signature(parser)
        return cls.get([parser.resolve_operand(u, t) for u, t in zip(unresolved, ins)], outs[0])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.members, printer.print_operand)
        printer.print_string(" : ")
        print_type_list(printer, [a.type for a in self.members], parens=True)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        why = _bucket_error([m.type for m in self.members], self.result.type)
        if why:
            fail(self, why)

    def offsets(self) -> list[int]:
        """Element offset of each member in the bucket."""
        return _offsets([m.type for m in self.members])


@irdl_op_definition
class UnpackOp(IRDLOperation):
    """``rt.unpack %b``: the members of a bucket (the inverse of ``rt.pack``): result i is
    the elements of ``%b`` after those of results 0..i-1, in result i's shape.

    ``%x, %y = rt.unpack %b : !dist.tensor<96xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [local]>, !dist.tensor<8x4xf32, @world, [local]>)``
    """

    name = "rt.unpack"
    input = operand_def()
    members = var_result_def()

    @classmethod
    def get(cls, bucket, member_types) -> UnpackOp:
        return cls.build(operands=[bucket], result_types=[list(member_types)])

    @classmethod
    def parse(cls, parser: Parser) -> UnpackOp:
        u = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        ins, outs = parse_type_signature(parser)
        return cls.get(parser.resolve_operand(u, ins[0]), outs)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.input)
        printer.print_string(" : ")
        printer.print_attribute(self.input.type)
        printer.print_string(" -> ")
        print_type_list(printer, [r.type for r in self.members], parens=len(self.members) != 1)

    def verify_(self) -> None:
        why = _bucket_error([m.type for m in self.members], self.input.type)
        if why:
            fail(self, why)

    def offsets(self) -> list[int]:
        """Element offset of each member in the bucket."""
        return _offsets([m.type for m in self.members])


@irdl_op_definition
class ViewOp(IRDLOperation):
    """``rt.view %b offset N``: a view (no copy) of elements ``N .. N + count`` of a
    contiguous buffer, in the result's shape: a member of a bucket buffer.

    ``%v = rt.view %b offset 64 : memref<96xf32> -> memref<8x4xf32>``
    """

    name = "rt.view"
    buffer = operand_def(MemRefType)
    offset = prop_def(IntegerAttr)
    result = result_def(MemRefType)

    @classmethod
    def get(cls, buffer, offset: int, result_type: Attribute) -> ViewOp:
        return cls.build(operands=[buffer], result_types=[result_type], properties={"offset": IntegerAttr(offset, i64)})

    @property
    def offset_value(self) -> int:
        return self.offset.value.data

    @classmethod
    def parse(cls, parser: Parser) -> ViewOp:
        u = parser.parse_unresolved_operand()
        parser.parse_keyword("offset")
        n = parser.parse_integer()
        parser.parse_punctuation(":")
        ins, outs = parse_type_signature(parser)
        return cls.get(parser.resolve_operand(u, ins[0]), n, outs[0])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.buffer)
        printer.print_string(f" offset {self.offset_value} : ")
        printer.print_attribute(self.buffer.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        b = need_memref(self, self.buffer.type, "buffer")
        r = need_memref(self, self.result.type, "result")
        if b.element_type != r.element_type:
            fail(self, f"result element type must be {b.element_type}, got {r.element_type}")
        if self.offset_value < 0 or self.offset_value + memref_count(r) > memref_count(b):
            fail(self, f"elements {self.offset_value}..{self.offset_value + memref_count(r)} are outside {b}")


Rt = Dialect(
    "rt",
    [
        CommOp,
        GroupRankOp,
        SpanOp,
        HoldsOp,
        StreamOp,
        EventRecordOp,
        StreamWaitOp,
        StreamSyncOp,
        AllocOp,
        BlockOp,
        PrefixOp,
        PadBlocksOp,
        UnpadBlocksOp,
        CopyOp,
        CopyBlocksOp,
        KernelOp,
        LaunchOp,
        CallOp,
        MatmulOp,
        ReduceTensorOp,
        EmbeddingBagOp,
        ScatterAddOp,
        SortOp,
        RandomOp,
        MatmulAllReduceOp,
        MatmulReduceScatterOp,
        MatmulAllToAllOp,
        EmbeddingAllToAllOp,
        ChunkOp,
        AssembleOp,
        FusedOp,
        PackOp,
        UnpackOp,
        ViewOp,
    ],
    [CommType, StreamType, EventType, TargetAttr],
)
