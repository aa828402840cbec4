"""The ``coll`` dialect: collectives as compositions of the ``dist`` functional primitives,
fused collectives, and ``coll.overlap``.

A collective acts on the mesh axes named by ``axes`` (default ``[0]``): the ranks that
differ only on those axes form one group (ordered row-major over ``axes`` in the order
listed) and every other axis keeps its placement. Definitions, and the placement change
on each axis of ``axes``:

==========================  ============================  ===========================
op                          definition                    operand -> result
==========================  ============================  ===========================
``coll.all_reduce {op}``    repl(reduce(x))               local -> replicated
``coll.reduce_scatter``     slice(reduce(x))              local -> sliced<dim>
``coll.all_gather``         repl(join(x))                 sliced<d> -> replicated
``coll.reduce {op, root}``  store(reduce(x), root)        local -> at<root>
``coll.broadcast``          repl(load(x))                 at<r> -> replicated
``coll.all_to_all {dim}``   slice<dim>(join(x))           sliced<d> -> sliced<dim>
``coll.send {to}``          store(load(x), to)            at<r> -> at<to>
==========================  ============================  ===========================

Fused collectives (CoCoNet Table 2) run a region on the values the collective first
produces and then finish the collective on the region's results; see
``FusedCollectiveOp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.ir import Attribute, Dialect
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
from xdsl.parser import Parser
from xdsl.printer import Printer
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
from distir.dialects.format import Kw, print_type_list
from distir.dialects.placements import REPLICATED, At, Local

AXES = Kw("axes", "ints", (0,))
DIM = Kw("dim", "int")


class CollectiveOp(DistOp):
    """A collective over the mesh axes ``axes``; subclasses give ``rule``."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(DistCanonicalization())

    @property
    def axes(self) -> tuple[int, ...]:
        return self.option("axes")

    # Each collective defines
    #   @classmethod rule(cls, t, axes, sizes, options) -> list[Placement]

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "operand")
        axes = list(options.get("axes", (0,)))
        check_axes(axes, t)
        return [t.with_(placements=cls.rule(t, axes, sizes, options))]


def _need_all(t: TensorType, axes: Sequence[int], kind: type) -> None:
    for a in axes:
        need_placement(t, a, kind)


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """``all_reduce = repl(reduce(x))``: every rank of the group gets the element-wise
    reduction of the group's local values.

    ``%y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>``

    Before (4 ranks): ``a0 a1 a2 a3``; after: ``s s s s`` with ``s = a0+a1+a2+a3``.
    """

    name = "coll.all_reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES,)

    @classmethod
    def rule(cls, t, axes, sizes, options):
        _need_all(t, axes, Local)
        return layout.replace_axes(t.get_placements(), axes, REPLICATED)


@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    """``reduce_scatter = slice(reduce(x))``: rank i of the group gets block i (along
    ``dim``) of the reduction; nested inside any axes already slicing ``dim``.

    ``%y = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>``

    Before: ``a0 a1 a2 a3``; after: rank i holds block i of ``a0+a1+a2+a3``.
    """

    name = "coll.reduce_scatter"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)

    @classmethod
    def rule(cls, t, axes, sizes, options):
        _need_all(t, axes, Local)
        check_dim(options["dim"], t)
        return layout.add_slicing(t.get_placements(), options["dim"], axes)


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """``all_gather = repl(join(x))``: every rank gets the concatenation of the group's
    blocks. The gathered axes must be the innermost slicing of their dim.

    ``%y = coll.all_gather %x : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>``

    Before: rank i holds block i; after: every rank holds all blocks.
    """

    name = "coll.all_gather"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES,)

    @classmethod
    def rule(cls, t, axes, sizes, options):
        _innermost(t, axes)
        return layout.replace_axes(t.get_placements(), axes, REPLICATED)


@irdl_op_definition
class ReduceOp(CollectiveOp):
    """``reduce = store(reduce(x), root)``: group rank ``root`` gets the reduction.

    ``%y = coll.reduce sum %x root 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [at<0>]>``
    """

    name = "coll.reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("root", "int"), AXES)

    @classmethod
    def rule(cls, t, axes, sizes, options):
        _need_all(t, axes, Local)
        return _place_at(t, axes, sizes, options["root"], "root")


def _place_at(t: TensorType, axes: Sequence[int], sizes, rank: int, what: str) -> list:
    if rank < 0:
        raise RuleError(f"{what} must be non-negative, got {rank}")
    digits = group_rank_digits(rank, sizes or [None] * len(t.get_placements()), axes, what)
    if digits is None:
        raise RuleError(f"{what} over several axes needs their sizes to be static")
    out = layout.replace_axes(t.get_placements(), axes, REPLICATED)
    for a, d in zip(axes, digits):
        out[a] = At(d)
    return out


@irdl_op_definition
class BroadcastOp(CollectiveOp):
    """``broadcast = repl(load(x))``: the value held by one rank of the group (the root
    is in the operand's ``at<r>`` placement) reaches every rank of the group.

    ``%y = coll.broadcast %x : !dist.tensor<64xf32, @world, [at<0>]> -> !dist.tensor<64xf32, @world, [replicated]>``
    """

    name = "coll.broadcast"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES,)

    @classmethod
    def rule(cls, t, axes, sizes, options):
        _need_all(t, axes, At)
        return layout.replace_axes(t.get_placements(), axes, REPLICATED)

    def root(self) -> int:
        """The group rank holding the operand."""
        t = self.input.type
        assert isinstance(t, TensorType)
        sizes = self.mesh_sizes() or ()
        r = 0
        for a in self.axes:
            r = r * (sizes[a] or 1) + t.get_placements()[a].rank.data  # type: ignore[union-attr]
        return r


@irdl_op_definition
class AllToAllOp(CollectiveOp):
    """``all_to_all = slice<dim>(join(x))``: re-slice a value sliced on one dim along
    another; rank i sends block j of its slice to rank j.

    ``%y = coll.all_to_all %x dim 1 : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>``
    """

    name = "coll.all_to_all"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)

    @classmethod
    def rule(cls, t, axes, sizes, options):
        _innermost(t, axes)
        check_dim(options["dim"], t)
        joined = layout.replace_axes(t.get_placements(), axes, REPLICATED)
        return layout.add_slicing(joined, options["dim"], axes)


@irdl_op_definition
class SendOp(CollectiveOp):
    """``send = store(load(x), to)``: point-to-point, the value held by one group rank
    moves to group rank ``to`` (pipeline stages).

    ``%y = coll.send %x to 1 : !dist.tensor<64xf32, @world, [at<0>]> -> !dist.tensor<64xf32, @world, [at<1>]>``
    """

    name = "coll.send"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("to", "int"), AXES)

    @classmethod
    def rule(cls, t, axes, sizes, options):
        _need_all(t, axes, At)
        return _place_at(t, axes, sizes, options["to"], "target rank")


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
    yielded value itself.
    """

    INFER: ClassVar[bool] = False
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


GATHER = Kw("gather", "bools", None)


@irdl_op_definition
class FusedAllReduceOp(FusedCollectiveOp):
    """``fused_all_reduce = repl(map(g, reduce(x)))``, executed as a ReduceScatter along
    ``dim``, the region ``g`` on this rank's reduced slice, and an AllGather of the results
    flagged in ``gather`` (the others stay sliced, ZeRO-style). The region may use outer
    values (``take_slice`` of replicated ones, sliced state directly) and inner
    collectives (an all_reduce of scalar norms for LAMB).

    ::

        %p1, %m1 = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
        ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
          ...
          coll.yield %ps, %ms : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
        }
    """

    name = "coll.fused_all_reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES, GATHER)
    FIRST: ClassVar[type[CollectiveOp] | None] = ReduceScatterOp
    FINISH: ClassVar[type[CollectiveOp] | None] = AllGatherOp


@irdl_op_definition
class FusedReduceScatterOp(FusedCollectiveOp):
    """``fused_reduce_scatter = slice(map(g, reduce(x)))``: a ReduceScatter whose slices go
    straight into the region; the results stay sliced."""

    name = "coll.fused_reduce_scatter"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)
    FIRST: ClassVar[type[CollectiveOp] | None] = ReduceScatterOp


@irdl_op_definition
class FusedAllGatherOp(FusedCollectiveOp):
    """``fused_all_gather = repl(join(map(g, x)))``: the region runs on this rank's slice,
    then the results flagged in ``gather`` are all-gathered."""

    name = "coll.fused_all_gather"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES, GATHER)
    FINISH: ClassVar[type[CollectiveOp] | None] = AllGatherOp


@irdl_op_definition
class FusedReduceOp(FusedCollectiveOp):
    """``fused_reduce = store(map(g, reduce(x)), root)``: the region runs on the root's
    reduced value."""

    name = "coll.fused_reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("root", "int"), AXES)
    FIRST: ClassVar[type[CollectiveOp] | None] = ReduceOp


@irdl_op_definition
class FusedBroadcastOp(FusedCollectiveOp):
    """``fused_broadcast = repl(map(g, load(x)))``: the region runs on the root's value and
    the results flagged in ``gather`` are broadcast."""

    name = "coll.fused_broadcast"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXES, GATHER)
    FINISH: ClassVar[type[CollectiveOp] | None] = BroadcastOp


@irdl_op_definition
class FusedAllToAllOp(FusedCollectiveOp):
    """``fused_all_to_all = map(g, slice<dim>(join(x)))``: the region runs on the re-sliced
    blocks each rank receives."""

    name = "coll.fused_all_to_all"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (DIM, AXES)
    FIRST: ClassVar[type[CollectiveOp] | None] = AllToAllOp


# ======================================================================================
# Overlap
# ======================================================================================

ORDERS = ("natural", "ring", "remote_first")
GRANULARITIES = ("chunk", "tile")


def tile_chain_problem(ops: Sequence[Any]) -> str | None:
    """Why ``ops`` (a producer -> collective chain, in order) cannot be one fused tile
    operator (``coll.overlap ... granularity tile``), or None when it can: a
    ``dist.matmul`` or ``dist.embedding_bag``, element-wise ``dist.map``/``dist.cast``
    ops each reading the previous result (other operands scalars or 0-d tensors), and
    one ``coll.all_reduce``/``coll.reduce_scatter`` (matmul only, no maps between) or
    ``coll.all_to_all`` reading the last result."""
    from distir.dialects.dist import CastOp, EmbeddingBagOp, MapOp, MatmulOp
    from distir.dialects.rt import CallOp

    if len(ops) < 2:
        return "a fused tile operator needs a producer and a collective"
    head, *mid, last = ops
    if not isinstance(head, (MatmulOp, EmbeddingBagOp)):
        return f"its producer must be dist.matmul or dist.embedding_bag, got '{head.name}'"
    prev = head
    for op in mid:
        if not isinstance(op, (MapOp, CastOp, CallOp)):  # rt.call: a map after lower-to-kernels
            return f"only dist.map and dist.cast may sit between the producer and the collective, got '{op.name}'"
        others = [v for v in op.operands if v is not prev.results[0]]
        if len(others) == len(op.operands):
            return f"'{op.name}' does not read the result of the op before it"
        if any(isinstance(v.type, TensorType) and v.type.get_shape() for v in others):
            return f"the other operands of '{op.name}' must be scalars or 0-d tensors"
        if len(op.results) != 1 or op.results[0].type.element_type != head.results[0].type.element_type:
            return f"'{op.name}' must keep the element type of the producer's result"
        prev = op
    if not last.operands or last.operands[0] is not prev.results[0]:
        return f"'{last.name}' does not read the result of the op before it"
    if isinstance(last, (AllReduceOp, ReduceScatterOp)):
        if not isinstance(head, MatmulOp) or mid:
            return f"'{last.name}' fuses only with a dist.matmul that feeds it directly"
        return None
    if isinstance(last, AllToAllOp):
        t = last.input.type
        if layout.innermost_slicing(t.get_placements(), list(last.axes)) == last.option("dim"):  # type: ignore[attr-defined]
            return "the all_to_all moves nothing (it slices the dim its operand is sliced on)"
        return None
    return f"the collective must be coll.all_reduce, coll.reduce_scatter or coll.all_to_all, got '{last.name}'"


@irdl_op_definition
class OverlapOp(DistOp):
    """``overlap``: a producer -> collective chain (matmul -> all_reduce, reduce_scatter ->
    send -> all_gather, embedding_bag -> all_to_all) that means exactly that chain;
    lowering runs it in ``chunks`` pieces so that communication of chunk i overlaps
    computation of chunk i+1, in the chunk ``order`` ``natural``, ``ring`` (rank n starts
    at chunk n) or ``remote_first`` (chunks bound for other ranks first).

    With ``granularity tile`` the chain is one fused computation-collective operator
    (the fused-operator paper): a producer (``dist.matmul`` or ``dist.embedding_bag``),
    optional element-wise maps/casts on its result (an epilogue; their other operands
    scalars or 0-d tensors) and one collective it feeds: matmul -> all_reduce |
    reduce_scatter (no epilogue), matmul | embedding_bag -> all_to_all. Each
    destination rank's block of the producer's result is cut into ``chunks`` tiles,
    the unit of both computation and communication, computed in ``order``
    (``remote_first``: tiles bound for other ranks first, own tiles last).

    ::

        %y = coll.overlap chunks 4 order ring -> !dist.tensor<8x64xf32, @world, [replicated]> {
          %l = dist.matmul %x, %w : (...) -> !dist.tensor<8x64xf32, @world, [local]>
          %s = coll.all_reduce sum %l : ...
          coll.yield %s : !dist.tensor<8x64xf32, @world, [replicated]>
        }
    """

    name = "coll.overlap"
    INFER: ClassVar[bool] = False
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (
        Kw("chunks", "int"),
        Kw("order", "word", "natural", ORDERS),
        Kw("granularity", "word", "chunk", GRANULARITIES),
    )
    outputs = var_result_def()
    body = region_def("single_block")
    traits = traits_def(DistCanonicalization())

    def verify_rule(self) -> None:
        if self.option("chunks") < 1:
            raise RuleError(f"chunks must be at least 1, got {self.option('chunks')}")
        block = self.body.block
        if not any(op.name.startswith("coll.") and not isinstance(op, YieldOp) for op in block.ops):
            raise RuleError("region must hold a chain ending in a collective")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise RuleError("region must end with coll.yield")
        if len(term.values) != len(self.outputs):
            raise RuleError(f"region yields {len(term.values)} value(s) for {len(self.outputs)} result(s)")
        for i, (v, r) in enumerate(zip(term.values, self.result_types)):
            expect_type(self, f"result {i}", r, v.type)
        if self.option("granularity") == "tile":
            problem = tile_chain_problem([op for op in block.ops if op is not term])
            if problem is not None:
                raise RuleError(f"granularity tile: {problem}")

    @classmethod
    def parse(cls, parser: Parser):
        options = {}
        for kw in cls.KEYWORDS:
            if parser.parse_optional_keyword(kw.keyword):
                options[kw.keyword] = kw.parse_value(parser)
            elif kw.keyword == "chunks":
                parser.raise_error("'coll.overlap' expects 'chunks' here")
        attributes = parser.parse_optional_attr_dict()
        types: list[Attribute] = []
        if parser.parse_optional_punctuation("->"):
            types = parser.parse_optional_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type) or [
                parser.parse_type()
            ]
        region = parser.parse_region()
        return cls.make([], types, [region], attributes, **options)

    def print(self, printer: Printer):
        printer.print_string(f" chunks {self.option('chunks')}")
        if self.option("order") != "natural":
            printer.print_string(f" order {self.option('order')}")
        if self.option("granularity") != "chunk":
            printer.print_string(f" granularity {self.option('granularity')}")
        printer.print_op_attributes(self.attributes)
        if self.outputs:
            printer.print_string(" -> ")
            print_type_list(printer, self.result_types, parens=False)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_block_terminators=True)


Coll = Dialect(
    "coll",
    [
        AllReduceOp,
        ReduceScatterOp,
        AllGatherOp,
        ReduceOp,
        BroadcastOp,
        AllToAllOp,
        SendOp,
        FusedAllReduceOp,
        FusedReduceScatterOp,
        FusedAllGatherOp,
        FusedReduceOp,
        FusedBroadcastOp,
        FusedAllToAllOp,
        OverlapOp,
        YieldOp,
    ],
    [],
)
