"""The descriptor interface of a collective, and what the descriptors share.

A collective is one op class (a subclass of ``CollectiveOp``) in a module of its own
(``dialects/collectives/<kind>.py``), registered with ``@collective``. The class is the
collective's descriptor: every fact about it that a pass, the interpreter, the lowering
or the tuner needs is a class constant or a method of it, with a default where most
collectives agree. The layers above iterate the registry (``collectives()``,
``fused_collectives()``) instead of keeping their own tables.

============================  ==========================================================
fact                          used by
============================  ==========================================================
``name``, ``KIND``,           the textual syntax (``dialects/format.py``)
``KEYWORDS``
``rule``                      the verifier and the builders: the placements of the
                              result on the collective's axes (by default from
                              ``TRANSITION``)
``PHASES``, ``RANK_OPTION``   ``expand-collectives`` (and ``form-collectives``
                              backwards): the definition in functional primitives
``TRANSITION``                ``canonicalize``: the collective of a placement change
``exchange``                  the reference interpreter: what each group member gets
                              (``store_at`` for a ``store`` second phase)
``lower``                     ``lower-collectives``: the ``nccl``/``rt`` calls, which
                              every backend runs through its ``Comm`` (local, mpi,
                              nccl; the cost model times the same calls)
``TOKEN``                     the tuner's schedule names (``AR``, ``RS``, ...)
``moves_nothing``             ``canonicalize``: when the op is the identity
``chunk``                     ``lower-overlap``: how a chunked result maps to its operand
``cut_dims``, ``padding``     ``lower-collectives``: the dims ``lower`` cuts into one
                              block per member (laid out padded where uneven); the
                              partitioner's remarks and the tuner: the padding moved
============================  ==========================================================

The interfaces the methods are written against (so that this floor imports nothing
above it) are here too: ``Group`` (one group of ranks as the interpreter sees it),
``Lowering`` (the lowering of one function, as ``lower-collectives`` provides it) and
``Call`` (one collective being lowered).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator

from distir.dialects import layout
from distir.dialects.dist import (
    DistCanonicalization,
    DistOp,
    RuleError,
    TensorType,
    _innermost,
    check_axes,
    check_dim,
    check_tensor,
    expect_type,
    group_rank_digits,
    need_placement,
    need_tensor,
)
from distir.dialects.format import Kw
from distir.dialects.placements import REPLICATED, At, Placement, Replicated, Sliced

if TYPE_CHECKING:
    import numpy as np  # imported by the functions that run collectives: parsing needs no numpy

AXES = Kw("axes", "ints", (0,))
DIM = Kw("dim", "int")
GATHER = Kw("gather", "bools", None)


# ======================================================================================
# The interfaces the descriptors are written against
# ======================================================================================


@dataclass(frozen=True)
class Group:
    """One group of ranks running a collective, as its reference semantics
    (``CollectiveOp.exchange``) sees it besides the members' buffers: the group's size,
    the operand's type, the axes and the mesh sizes of the run, and the element-wise
    reduction as the runtime computes it (``reduce(buffers, kind)``, in group order)."""

    size: int
    operand: TensorType
    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    reduce: Callable[[Sequence[np.ndarray], str], np.ndarray]

    @property
    def counts(self) -> list[int]:
        """The ranks of each of the group's axes, in the order listed (a new slicing
        nests over them in that order: ``split``)."""
        return [self.sizes[a] for a in self.axes]

    @property
    def joined_dim(self) -> int:
        """The dim the operand is sliced along on the group's axes."""
        p = self.operand.get_placements()[self.axes[0]]
        return p.dim.data  # type: ignore[union-attr]

    @property
    def holder(self) -> int:
        """The group rank holding an operand placed ``at<r>`` on the group's axes."""
        return group_rank_of(self.operand, self.axes, self.sizes)


class Lowering(Protocol):
    """What ``lower-collectives`` offers a collective's ``lower``: emission of ops into
    the function being lowered, on the current stream (``stream``), and its buffers."""

    stream: SSAValue

    def emit(self, op: Operation) -> Operation:
        """Append ``op`` where the lowering is emitting."""

    def guarded(self, t: Attribute, body: Callable[[], None], skip: Sequence[int] = ()) -> None:
        """Emit ``body`` under ``scf.if`` on the ranks holding a value placed like ``t``
        (``at<r>`` placements, ignoring the ``skip`` axes), or directly when there are none."""

    def is_contiguous(self, buf: SSAValue) -> bool:
        """Whether a buffer is contiguous (a block along an inner dim is not)."""

    def contiguous(self, buf: SSAValue) -> SSAValue:
        """``buf`` when contiguous, else a contiguous copy of it."""

    def alloc(self, t: Attribute, hint: str | None = None) -> SSAValue:
        """A new buffer of memref type ``t``."""

    def block(self, buf: SSAValue, index: SSAValue, dim: int, count: int) -> SSAValue:
        """A view of block ``index`` of ``count`` along ``dim``."""

    def copy(self, src: SSAValue, dst: SSAValue) -> None: ...

    def const(self, n: int) -> SSAValue:
        """An ``index`` constant."""

    def group_rank(self, mesh: str, axes: Sequence[int], shift: int = 0) -> SSAValue:
        """This rank's index in its group over ``axes``, plus ``shift``, modulo the size."""

    def pack(self, buf: SSAValue, dim: int, n: int) -> SSAValue:
        """A contiguous copy whose block j (outermost) is block j of ``buf`` along ``dim``."""

    def unpack(self, tmp: SSAValue, buf: SSAValue, dim: int, n: int) -> None:
        """The reverse of ``pack``: block j of ``tmp`` into block j of ``buf`` along ``dim``."""

    def kernel(self, name: str, make: Callable[[], Operation]) -> str:
        """The kernel ``@name`` (an ``rt.kernel`` that ``make`` builds), added to the
        module once."""


@dataclass(frozen=True)
class Call:
    """One collective being lowered: the operand's and the result's types, the options,
    the group (``axes``, ``n`` ranks, mesh ``sizes``), the operand's buffer ``send``, the
    buffer the result goes to ``recv`` and the group's communicator ``comm``."""

    op: Operation
    operand: TensorType
    result: TensorType
    options: dict[str, Any]
    axes: list[int]
    sizes: tuple[int, ...]
    n: int
    send: SSAValue
    recv: SSAValue
    comm: SSAValue

    @property
    def mesh(self) -> str:
        return self.operand.mesh_name

    def nccl(self, lw: Lowering, cls: type[Operation], buffers: Sequence[SSAValue], **options: Any) -> Operation:
        """Emit the NCCL call ``cls`` on ``buffers``, the group's communicator and the
        current stream."""
        return lw.emit(cls.make([*buffers, self.comm, lw.stream], [], **options))  # type: ignore[attr-defined]


def shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())  # type: ignore[attr-defined]


def count(v: SSAValue) -> int:
    """Elements of a buffer (NCCL's ``count``)."""
    import numpy as np

    return int(np.prod(shape(v), dtype=np.int64))


def element(v: SSAValue) -> Attribute:
    return v.type.element_type  # type: ignore[attr-defined]


def is_contiguous_block(shape: Sequence[int], dim: int) -> bool:
    """Whether the blocks of a buffer of this shape along ``dim`` are contiguous."""
    return all(s == 1 for s in shape[:dim])


def group_rank_of(t: TensorType, axes: Sequence[int], sizes: Sequence[int]) -> int:
    """Group rank (row-major over ``axes``) of the rank holding a value placed at<r> on them."""
    r = 0
    for a in axes:
        p = t.get_placements()[a]
        assert isinstance(p, At)
        r = r * sizes[a] + p.rank.data
    return r


def buffer_type(buf: SSAValue) -> MemRefType:
    t = buf.type
    assert isinstance(t, MemRefType)
    return t


# ======================================================================================
# Collectives
# ======================================================================================


class CollectiveOp(DistOp):
    """A collective over the mesh axes ``axes``: the descriptor of one kind of collective
    (see the module doc). Subclasses give ``rule``, ``exchange`` and ``lower`` and set
    the constants that apply."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(DistCanonicalization())

    TOKEN: ClassVar[str] = ""
    """The collective's name in the tuner's schedule names (CoCoNet's ``AR``)."""
    PHASES: ClassVar[tuple[str, str] | None] = None
    """The definition in functional primitives: a first and a second phase, each one
    primitive per axis (``("reduce", "repl")`` for all_reduce); None when the collective
    is no composition of the primitives (``expand-collectives`` keeps it)."""
    RANK_OPTION: ClassVar[str | None] = None
    """With a ``store`` second phase: the option giving the group rank stored at."""
    RANK_NAME: ClassVar[str | None] = None
    """How diagnostics name that rank (None: the option's name)."""
    TRANSITION: ClassVar[tuple[type[Placement], type[Placement]] | None] = None
    """The placement change on each axis of ``axes`` (operand kind, result kind), for
    the canonicalizer to find the collective of a change; None when it changes none."""
    LOWERS_INTO_VIEWS: ClassVar[bool] = False
    """Whether ``lower`` writes a strided ``recv`` itself (NCCL writes contiguous
    buffers; otherwise the lowering gives a contiguous one and copies the result)."""

    @property
    def axes(self) -> tuple[int, ...]:
        return self.option("axes")

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "operand")
        axes = list(options.get("axes", (0,)))
        check_axes(axes, t)
        return [t.with_(placements=cls.rule(t, axes, sizes, options))]

    # ---------------------------------------------------------------- the descriptor
    @classmethod
    def rule(cls, t: TensorType, axes: Sequence[int], sizes, options: dict[str, Any]) -> list[Placement]:
        """The result's placements for an operand of type ``t`` (``sizes``: the mesh's,
        None where unknown); raises ``RuleError`` when the operand breaks the rule.

        By default the ``TRANSITION`` on every axis of ``axes``: the operand must be
        placed as its first kind there (``sliced``: the innermost slicing of one dim), a
        ``dim`` option must be a dim of the operand, and the result is ``replicated``,
        ``at<r>`` (the group rank of ``RANK_OPTION``) or ``sliced<dim>`` (nested inside
        the axes already slicing ``dim``) there."""
        if cls.TRANSITION is None:
            raise NotImplementedError(f"{cls.name} changes no placement kind: it gives its own rule")
        src, dst = cls.TRANSITION
        if src is Sliced:
            _innermost(t, axes)
        else:
            need_all(t, axes, src)
        if "dim" in options:
            check_dim(options["dim"], t)
        if dst is At:
            assert cls.RANK_OPTION is not None
            return place_at(t, axes, sizes, options[cls.RANK_OPTION], cls.RANK_NAME or cls.RANK_OPTION)
        placements = t.get_placements()
        if dst is Replicated:
            return layout.replace_axes(placements, axes, REPLICATED)
        assert dst is Sliced
        joined = layout.replace_axes(placements, axes, REPLICATED) if src is Sliced else list(placements)
        return layout.add_slicing(joined, options["dim"], axes)

    @classmethod
    def exchange(cls, buffers: list[np.ndarray | None], options: dict[str, Any], group: Group) -> list[np.ndarray | None]:
        """The reference semantics on one group: each member's result buffer (None: it
        holds none) from the members' operand buffers (None where a member holds none),
        in group order. Raises ``RuleError`` for options the run cannot meet."""
        raise NotImplementedError

    @classmethod
    def lower(cls, lw: Lowering, call: Call) -> SSAValue:
        """Emit the calls computing the collective from ``call.send`` into
        ``call.recv``; returns the buffer holding the result (``recv``, or ``send`` when
        nothing moves)."""
        raise NotImplementedError

    @classmethod
    def cut_dims(cls, t: TensorType, options: dict[str, Any], axes: Sequence[int]) -> tuple[list[int], list[int]]:
        """The dims of the operand's buffer (an operand of type ``t``) and of the
        result's buffer that ``lower`` cuts into one equal block per group member: where
        the ranks do not divide such a dim the lowering lays the buffer out padded
        (``lowering/padding.py``). None by default."""
        return [], []

    @classmethod
    def padding(cls, t: TensorType, result: TensorType, options: dict[str, Any], sizes: Sequence[int]) -> int:
        """Elements of padding in the buffers ``lower`` cuts into one block per member
        (``cut_dims``), per rank: where the ranks do not divide such a dim, the
        collective moves blocks of the largest block's size (NCCL's equal counts), so
        ``n * max_block - size`` of its elements along the dim are padding (0 where the
        ranks divide every cut dim)."""
        axes = list(options.get("axes") or (0,))
        counts = [sizes[a] for a in axes]
        send, recv = cls.cut_dims(t, options, axes)
        total = 0
        for side, dims in ((t, send), (result, recv)):
            for d in dims:
                outer = layout.slicing_counts(side.get_placements(), sizes, d)
                shape = list(layout.local_shape(side.get_shape(), side.get_placements(), sizes))
                extent = layout.padded_extent(side.get_shape()[d], outer, counts)
                if extent > shape[d]:
                    import numpy as np

                    rest = int(np.prod([x for k, x in enumerate(shape) if k != d], dtype=np.int64))
                    total += (extent - layout.max_block(side.get_shape()[d], outer)) * rest
        return total

    @classmethod
    def chunk(cls, t: TensorType, options: dict[str, Any], dim: int) -> tuple[int, bool]:
        """For a result cut into chunks along ``dim`` (``coll.overlap``): the operand dim
        cut the same way, and whether the chunks are logical ones (rank r holds block r
        of chunk k); raises ``RuleError`` when the collective cannot run chunk by chunk."""
        return dim, False

    @classmethod
    def store_at(cls, value: np.ndarray, options: dict[str, Any], n: int) -> list[np.ndarray | None]:
        """``exchange``'s result for a ``store`` second phase: ``value`` at the group rank
        of ``RANK_OPTION`` (checked against the group size ``n``), nothing elsewhere."""
        assert cls.RANK_OPTION is not None
        rank = options[cls.RANK_OPTION]
        check_group_rank(rank, n, cls.RANK_NAME or cls.RANK_OPTION)
        out: list[np.ndarray | None] = [None] * n
        out[rank] = value
        return out

    def moves_nothing(self) -> bool:
        """Whether each rank's result is its own operand value when the result type is the
        operand's (or the group has one rank): true for every collective that only
        changes placements."""
        return True


def need_all(t: TensorType, axes: Sequence[int], kind: type) -> None:
    for a in axes:
        need_placement(t, a, kind)


def place_at(t: TensorType, axes: Sequence[int], sizes, rank: int, what: str) -> list:
    """Placements with the value held by group rank ``rank`` of ``axes``."""
    if rank < 0:
        raise RuleError(f"{what} must be non-negative, got {rank}")
    digits = group_rank_digits(rank, sizes or [None] * len(t.get_placements()), axes, what)
    if digits is None:
        raise RuleError(f"{what} over several axes needs their sizes to be static")
    out = layout.replace_axes(t.get_placements(), axes, REPLICATED)
    for a, d in zip(axes, digits):
        out[a] = At(d)
    return out


def check_group_rank(rank: int, n: int, what: str) -> None:
    """A group rank given by an option, against the group size of the run."""
    if not 0 <= rank < n:
        raise RuleError(f"{what} {rank} is out of range for a group of {n} ranks on this run")


def concat(buffers: Sequence[np.ndarray], dim: int) -> np.ndarray:
    if len(buffers) == 1:
        return buffers[0]
    import numpy as np

    return np.concatenate(buffers, axis=dim)


def split(buffer: np.ndarray, counts: Sequence[int], dim: int) -> list[np.ndarray]:
    """The blocks of ``buffer`` along ``dim`` (views) for a group over axes of ``counts``
    ranks, in group order (row-major over the axes): ``layout.dim_block`` nested once
    per axis, the first outermost, so that the last blocks may be shorter or empty (the
    inverse of ``concat``)."""
    import numpy as np

    out = []
    for k in range(int(np.prod(counts, dtype=np.int64))):
        lo, size = layout.dim_block(buffer.shape[dim], counts, layout.at_digits(k, counts))
        out.append(buffer[(slice(None),) * dim + (slice(lo, lo + size),)])
    return out


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of the regions of fused collectives and ``coll.overlap``."""

    name = "coll.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "attr-dict ($values^ `:` type($values))?"


# ======================================================================================
# Fused collectives
# ======================================================================================


class FusedCollectiveOp(DistOp):
    """A collective with a computation fused at the point where its output is first
    produced (CoCoNet Table 2). Each operand goes through the ``FIRST`` collective (or
    none), the region runs on those values (block argument i = operand i after
    ``FIRST``) and may use ``dist`` ops, outer values and inner collectives; result i is
    yielded value i after the ``FINISH`` collective when ``gather[i]`` is true, else the
    yielded value itself. ``PLAIN`` is the collective it is the fused form of.
    """

    INFER: ClassVar[bool] = False
    PLAIN: ClassVar[type[CollectiveOp]]
    FIRST: ClassVar[type[CollectiveOp] | None] = None
    FINISH: ClassVar[type[CollectiveOp] | None] = None

    inputs = var_operand_def(TensorType)
    outputs = var_result_def()
    body = region_def("single_block")
    traits = traits_def(DistCanonicalization())

    def gather_flags(self) -> tuple[bool, ...]:
        if self.FINISH is None:
            return (False,) * len(self.outputs)
        flags = self.option("gather")
        return tuple(flags) if flags is not None else (True,) * len(self.outputs)

    def first_options(self) -> dict[str, Any]:
        opts = self.options()
        assert self.FIRST is not None
        return {k: v for k, v in opts.items() if k in {kw.keyword for kw in self.FIRST.KEYWORDS} | {self.FIRST.KIND}}

    def block_arg_types(self) -> list[Attribute]:
        sizes = self.mesh_sizes()
        if self.FIRST is None:
            return list(self.operand_types)
        options = self.first_options()
        return [self.FIRST.infer([t], sizes, options)[0] for t in self.operand_types]

    def finish_type(self, t: Attribute, sizes: tuple[int | None, ...] | None = None) -> Attribute:
        """The type of a yielded value of type ``t`` once gathered (``sizes``: the mesh's,
        when the caller has them)."""
        assert self.FINISH is not None
        return self.FINISH.infer([t], sizes if sizes is not None else self.mesh_sizes(), {"axes": self.option("axes")})[0]

    def verify_rule(self) -> None:
        if not self.inputs:
            raise RuleError("needs at least one operand")
        block = self.body.block
        want = self.block_arg_types()
        if len(block.args) != len(want):
            raise RuleError(f"region must have {len(want)} argument(s), one per operand, got {len(block.args)}")
        for i, (arg, t) in enumerate(zip(block.args, want)):
            expect_type(self, f"region argument {i}", arg.type, t)
            check_tensor(self, arg.type, f"region argument {i}")  # its slices, on a sized mesh
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise RuleError("region must end with coll.yield")
        if len(term.values) != len(self.outputs):
            raise RuleError(f"region yields {len(term.values)} value(s) for {len(self.outputs)} result(s)")
        flags = self.gather_flags()
        if len(flags) != len(self.outputs):
            raise RuleError(f"gather has {len(flags)} flag(s) for {len(self.outputs)} result(s)")
        sizes = self.mesh_sizes()
        for i, (v, r, g) in enumerate(zip(term.values, self.result_types, flags)):
            expect_type(self, f"result {i}", r, self.finish_type(v.type, sizes) if g else v.type)


# ======================================================================================
# The registry
# ======================================================================================

_PLAIN: list[type[CollectiveOp]] = []
_FUSED: list[type[FusedCollectiveOp]] = []

C = TypeVar("C", bound=type)


def collective(cls: C) -> C:
    """Register a collective (or a fused collective) op class: the ``coll`` dialect and
    every table of the layers above list it from here."""
    if issubclass(cls, CollectiveOp):
        _PLAIN.append(cls)
    elif issubclass(cls, FusedCollectiveOp):
        _FUSED.append(cls)
    else:
        raise TypeError(f"{cls.__name__} is no collective")
    return cls


def collectives() -> tuple[type[CollectiveOp], ...]:
    """The registered collectives, in registration order."""
    return tuple(_PLAIN)


def fused_collectives() -> tuple[type[FusedCollectiveOp], ...]:
    """The registered fused collectives, in registration order."""
    return tuple(_FUSED)
