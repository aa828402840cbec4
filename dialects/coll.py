"""The ``coll`` dialect: collectives as compositions of the ``dist`` functional primitives,
fused collectives, and ``coll.overlap``.

A collective acts on the mesh axes named by ``axes`` (default ``[0]``): the ranks that
differ only on those axes form one group (ordered row-major over ``axes`` in the order
listed) and every other axis keeps its placement. Each collective lives in a module of
its own under ``dialects/collectives/``: its op class is its descriptor (placement rule,
definition in the functional primitives, interpreter semantics, lowering, name in the
tuner; ``dialects/collectives/base.py``), and its docstring gives the definition, the
placement change, an IR example and what each rank holds before and after. This
module imports them, which registers them, and defines ``coll.overlap``; ``Coll`` lists
every registered collective.

Fused collectives (CoCoNet Table 2) run a region on the values the collective first
produces and then finish the collective on the region's results; see
``FusedCollectiveOp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.ir import Attribute, Dialect
from xdsl.irdl import irdl_op_definition, region_def, traits_def, var_result_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from distir.dialects import layout

# The collectives, one module each; importing one registers it (``X as X``: re-exported,
# so that ``coll.AllReduceOp`` names it).
from distir.dialects.collectives.all_gather import AllGatherOp as AllGatherOp
from distir.dialects.collectives.all_gather import FusedAllGatherOp as FusedAllGatherOp
from distir.dialects.collectives.all_reduce import AllReduceOp as AllReduceOp
from distir.dialects.collectives.all_reduce import FusedAllReduceOp as FusedAllReduceOp
from distir.dialects.collectives.all_to_all import AllToAllOp as AllToAllOp
from distir.dialects.collectives.all_to_all import FusedAllToAllOp as FusedAllToAllOp
from distir.dialects.collectives.base import CollectiveOp as CollectiveOp
from distir.dialects.collectives.base import FusedCollectiveOp as FusedCollectiveOp
from distir.dialects.collectives.base import YieldOp as YieldOp
from distir.dialects.collectives.base import collectives as collectives
from distir.dialects.collectives.base import fused_collectives as fused_collectives
from distir.dialects.collectives.broadcast import BroadcastOp as BroadcastOp
from distir.dialects.collectives.broadcast import FusedBroadcastOp as FusedBroadcastOp
from distir.dialects.collectives.permute import PermuteOp as PermuteOp
from distir.dialects.collectives.reduce import FusedReduceOp as FusedReduceOp
from distir.dialects.collectives.reduce import ReduceOp as ReduceOp
from distir.dialects.collectives.reduce_scatter import FusedReduceScatterOp as FusedReduceScatterOp
from distir.dialects.collectives.reduce_scatter import ReduceScatterOp as ReduceScatterOp
from distir.dialects.collectives.send import SendOp as SendOp
from distir.dialects.dist import DistCanonicalization, DistOp, RuleError, TensorType, expect_type
from distir.dialects.format import Kw, print_type_list

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
    BODY_READS_PROPERTIES: ClassVar[bool] = False
    """The ops of its body verify alone: its chunks, order and granularity say how the
    chain is lowered (``verifier.ensure_verified`` re-verifies only the op when they change)."""
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


Coll = Dialect("coll", [*collectives(), *fused_collectives(), OverlapOp, YieldOp], [])
