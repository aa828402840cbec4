"""``lower-overlap``: run each ``coll.overlap`` chain chunk by chunk, so that the
communication of chunk i overlaps the computation of chunk i+1 (CoCoNet's overlap).

The chain's result is cut into ``chunks`` pieces along one dim: the outermost one that
every op of the chain can be cut along (not a dim a reduction reduces or an all-to-all
moves), so that chunks are contiguous where they can be. Each chunk is the chain
applied to chunks of the chain's inputs (``rt.chunk``; an input an op reads whole,
such as a matmul's weight, stays whole), and ``rt.assemble`` puts the chunk results
together. The ops of a chunk before its first collective run on stream 0
(computation), the rest on stream 1 (the collectives, with the computation fused into
them), marked ``{rt.stream = 1}``; ``lower-collectives`` orders the streams with
events. A dropout in a chunk keeps the random numbers of its elements (``{rt.chunk =
[dim, k, n]}`` tells ``lower-to-kernels`` the chunk's position).

    %y = coll.overlap chunks 2 -> T {
      %l = dist.matmul %x, %w : ...
      %s = coll.all_reduce sum %l : ...
      coll.yield %s : T
    }

becomes::

    %x0 = rt.chunk %x, %c0 dim 0 count 2 : ...
    %l0 = dist.matmul %x0, %w {rt.stream = 0} : ...
    %s0 = coll.all_reduce sum %l0 {rt.stream = 1} : ...
    %x1 = rt.chunk %x, %c1 dim 0 count 2 : ...
    %l1 = dist.matmul %x1, %w {rt.stream = 0} : ...
    %s1 = coll.all_reduce sum %l1 {rt.stream = 1} : ...
    %y = rt.assemble %s0, %s1 dim 0 : ...

``rt.chunk`` and ``rt.assemble`` act on each rank's own buffer: a value sliced along the
cut dim is chunked rank-major (rank r's chunk k is chunk k of its block), which is
right as long as no op of the chain slices or gathers that dim.

**Cutting along the dim a chain slices and gathers back.** A chain that reduce-scatters
a dim and all-gathers it before its result (``ol(MM,RS-C-AG)``, ``ol(MM,fuse(RS-C-AG))``)
can be cut along that dim too, chunk-major: chunk k of the rows is reduce-scattered on
its own, so rank r holds block r *of chunk k*, the pointwise ops run on that block, and
the all-gather of chunk k rebuilds the rows of chunk k. Every value of the chunk is then
the logical chunk k of the value it stands for, which equals the unchunked chain
exactly when nothing that crosses the chain's boundary in chunks is sliced along the
cut dim rank-major: the chain's result must not be sliced along it (``ol(MM,RS)`` keeps
its rows sliced, and cut along them rank r would own other rows: it is cut along
another dim), nor an input, except one that a ``take_slice`` of a replicated value
slices (as ``reorder-allgather`` leaves a residual), which is sliced again from its
source's chunk. A dropout in such a chunk is marked ``{rt.chunk = [dim, k, n, 1]}``
(chunk-major offsets). With the reduce-scatter along dim 0::

    %y = coll.overlap chunks 2 -> !dist.tensor<16x8xf32, @world, [replicated]> {
      %l = dist.matmul %x, %w : ... -> !dist.tensor<16x8xf32, @world, [local]>
      %s = coll.reduce_scatter sum %l dim 0 : ... -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
      %g = coll.all_gather %s : ... -> !dist.tensor<16x8xf32, @world, [replicated]>
      coll.yield %g : ...
    }

is cut along dim 0 (chunk k: rows 8k .. 8k+7, each reduce-scattered over the ranks and
gathered back, every NCCL call on a contiguous block), not along dim 1 (strided chunks
that are packed and unpacked around every call).

A ``granularity tile`` chain is one fused computation-collective operator, left for
``lower-collectives`` (``fused_ops.py``). Chunks run in the order 0, 1, ... on every
rank (``natural``). A ``ring`` or ``remote_first`` order is rank-dependent, and
per-chunk collectives must be issued in one order by all ranks (NCCL and MPI match them
by issue order): a matmul -> all_reduce / reduce_scatter / fused_all_reduce chain with
such an order is left for ``lower-collectives``, which reduces it by point-to-point
transfers in that order, along the reduction's dim (``overlap_p2p.py``); other chains with
those orders are cut here in natural order. A chain that cannot be cut (several
results, a reduction over the cut dim, sizes that the chunks do not divide) is left to
``lower-collectives``, which runs it as one piece.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    ArrayAttr,
    IndexType,
    IntegerAttr,
    ModuleOp,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll, dist, layout, rt
from distir.dialects.dist import RuleError, TensorType
from distir.dialects.fast import Kinds, walk
from distir.lowering.common import local_shape, meshes, static_sizes

PASS = "lower-overlap"
STREAM = "rt.stream"
CHUNK = "rt.chunk"

ELEMENTWISE = (dist.MapOp, dist.CastOp, dist.DropoutOp)
_OVERLAP = Kinds(coll.OverlapOp)
SAME_DIM = (dist.TakeSliceOp, dist.RemeshOp, coll.AllReduceOp, coll.ReduceOp, coll.BroadcastOp, coll.SendOp)


class NotChunkable(Exception):
    """Why a chain cannot be cut along a dim."""


def _elementwise_dims(op: Operation, c: int | None) -> list[int | None]:
    r: TensorType = op.results[0].type  # type: ignore[assignment]
    out: list[int | None] = []
    for v in op.operands:
        t = v.type
        if c is None or not isinstance(t, TensorType):
            out.append(None)
            continue
        j = c - (r.rank - t.rank)
        out.append(j if j >= 0 and t.get_shape()[j] == r.get_shape()[c] else None)
    return out


def _sliced_along(t: Attribute, d: int) -> bool:
    return isinstance(t, TensorType) and bool(layout.slicing_axes(t.get_placements(), d))


def _sliced_view(v: SSAValue, d: int) -> dist.TakeSliceOp | None:
    """The ``take_slice`` along ``d`` of a value not sliced along ``d`` that defines
    ``v`` (a replicated input that an earlier pass sliced before the chain), or None."""
    owner = v.owner
    if isinstance(owner, dist.TakeSliceOp) and owner.option("dim") == d and not _sliced_along(owner.operands[0].type, d):
        return owner
    return None


class Plan:
    """Chunk dims of every value of a chain (None: used whole), and of each use of a value
    from outside the chain."""

    def __init__(self) -> None:
        self.dims: dict[SSAValue, int | None] = {}
        self.uses: dict[tuple[Operation, int], int | None] = {}
        self.internal: set[SSAValue] = set()
        # Some op of the chain slices or gathers the cut dim: chunks are logical chunks
        # (rank r holds block r of chunk k), see the module doc.
        self.logical = False

    def collective(self, cls, t: TensorType, options: dict, c: int | None) -> int | None:
        """The operand dim of a collective whose result is cut along ``c``."""
        if c is None:
            return None
        try:
            d, logical = cls.chunk(t, options, c)
        except RuleError as e:
            raise NotChunkable(str(e)) from None
        if logical:
            self.logical = True
        return d

    def need(self, v: SSAValue, d: int | None, user: Operation, index: int) -> None:
        if v in self.internal:
            if v in self.dims and self.dims[v] != d:
                raise NotChunkable("a value of the chain is needed cut along two dims")
            self.dims[v] = d
        else:
            self.uses[(user, index)] = d

    def ops(self, ops: Sequence[Operation]) -> None:
        for op in reversed(ops):
            self.op(op)

    def op(self, op: Operation) -> None:
        if len(op.results) > 1 and isinstance(op, ELEMENTWISE):  # one shape: cut every result alike
            wanted = {self.dims[r] for r in op.results if r in self.dims}
            if len(wanted) > 1:
                raise NotChunkable(f"the results of '{op.name}' are needed cut along different dims")
            for r in op.results:
                self.dims[r] = next(iter(wanted), None)
        res = [self.dims.get(r) for r in op.results]
        c = res[0] if res else None
        if isinstance(op, ELEMENTWISE):
            dims = _elementwise_dims(op, c)
        elif isinstance(op, SAME_DIM) or isinstance(op, coll.CollectiveOp):
            t: TensorType = op.operands[0].type  # type: ignore[assignment]
            dims = [self.collective(type(op), t, op.options(), c)] if isinstance(op, coll.CollectiveOp) else [c]  # type: ignore[attr-defined]
            if isinstance(op, dist.TakeSliceOp) and op.option("dim") == c:
                self.logical = True
        elif isinstance(op, dist.MatmulOp):
            rr = op.result.type.rank  # type: ignore[attr-defined]
            rb = op.rhs.type.rank  # type: ignore[attr-defined]
            if c is None:
                dims = [None, None]
            elif c == rr - 1:
                dims = [None, rb - 1]
            else:
                dims = [c, c if rb == rr and c < rr - 2 else None]
        elif isinstance(op, dist.ReduceTensorOp):
            t = op.input.type  # type: ignore[assignment]
            kept = [d for d in range(t.rank) if d not in op.option("dims")]
            dims = [None if c is None else kept[c]]
        elif isinstance(op, dist.EmbeddingBagOp):
            rr = op.result.type.rank  # type: ignore[attr-defined]
            lead = rr - 2
            if c is None:
                dims = [None, None]
            elif lead and c == 0:
                dims = [0, 0]
            elif c == rr - 2:
                dims = [None, op.indices.type.rank - 2]  # type: ignore[attr-defined]
            else:
                dims = [op.table.type.rank - 1, None]  # type: ignore[attr-defined]
        elif isinstance(op, coll.FusedCollectiveOp):
            dims = self.fused(op, res)
        else:
            raise NotChunkable(f"'{op.name}' cannot be cut")
        for i, (v, d) in enumerate(zip(op.operands, dims)):
            if isinstance(v.type, TensorType) and v.type.rank == 0:
                d = None
            self.need(v, d, op, i)

    def fused(self, op: coll.FusedCollectiveOp, res: list[int | None]) -> list[int | None]:
        block = op.body.block
        term = block.last_op
        assert isinstance(term, coll.YieldOp)
        axes = list(op.option("axes") or (0,))
        self.internal.update(block.args)
        for inner in block.ops:
            self.internal.update(inner.results)
        for i, (y, d) in enumerate(zip(term.values, res)):
            if op.FINISH is not None and op.gather_flags()[i] and d is not None:
                self.collective(op.FINISH, y.type, {"axes": axes}, d)  # type: ignore[arg-type]
            self.need(y, d, term, i)
        self.ops([o for o in block.ops if o is not term])
        out = []
        for x, arg in zip(op.inputs, block.args):
            d = self.dims.get(arg)
            if op.FIRST is not None and d is not None:
                d = self.collective(op.FIRST, x.type, op.first_options(), d)  # type: ignore[arg-type]
            out.append(d)
        return out


def chunk_type(t: Attribute, d: int | None, n: int) -> Attribute:
    if d is None or not isinstance(t, TensorType):
        return t
    shape = list(t.get_shape())
    shape[d] //= n
    return t.with_(shape=shape)


def _values(op: Operation):
    """Results and block arguments of ``op`` and everything nested in it, in walk order."""
    for o in op.walk():
        yield from o.results
        for r in o.regions:
            for b in r.blocks:
                yield from b.args


@dataclass(frozen=True)
class LowerOverlapPass(ModulePass):
    name = "lower-overlap"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        mesh_ops = meshes(op)
        for ov in [o for o in walk(op) if _OVERLAP(o)]:
            self.lower(ov, mesh_ops)

    def lower(self, ov: coll.OverlapOp, mesh_ops) -> None:
        from distir.lowering.overlap_p2p import p2p_plan

        if ov.option("granularity") == "tile":
            return  # one fused tile operator (lower-collectives, fused_ops.py)
        if p2p_plan(ov, mesh_ops) is not None:
            return  # ring/remote_first by point-to-point transfers (lower-collectives)
        block = ov.body.block
        term = block.last_op
        chain = [o for o in block.ops if o is not term]
        n = ov.option("chunks")
        if len(ov.outputs) != 1 or n < 2 or not isinstance(ov.outputs[0].type, TensorType):
            return
        out_t: TensorType = ov.outputs[0].type  # type: ignore[assignment]
        plan = None
        for c in range(out_t.rank):
            try:
                plan = self.plan(chain, term, c, n, mesh_ops)
                break
            except NotChunkable:
                plan = None
        if plan is None:
            return
        self.emit(ov, chain, term, plan, n)

    @staticmethod
    def plan(chain: list[Operation], term: Operation, c: int, n: int, mesh_ops) -> Plan:
        plan = Plan()
        for o in chain:
            plan.internal.update(_values(o))
        plan.need(term.operands[0], c, term, 0)
        plan.ops(chain)
        checked = [(v.type, d) for v, d in plan.dims.items() if d is not None]
        inputs = [(u[0].operands[u[1]], d) for u, d in plan.uses.items() if d is not None]
        checked += [(v.type, d) for v, d in inputs]
        if plan.logical:
            if _sliced_along(term.operands[0].type, c):
                raise NotChunkable(f"the chain's result stays sliced along dim {c}, which the chain slices")
            if any(_sliced_along(v.type, d) and _sliced_view(v, d) is None for v, d in inputs):
                raise NotChunkable(f"an input read in chunks is sliced along dim {c}, which the chain slices")
        for t, d in checked:
            if not isinstance(t, TensorType):
                raise NotChunkable("a scalar cannot be cut")
            if t.get_shape()[d] % n:
                raise NotChunkable(f"dim {d} of {t} is not divisible into {n} chunks")
            local = local_shape(t, static_sizes(PASS, mesh_ops[t.mesh_name]))
            if local[d] % n:
                raise NotChunkable(f"the local blocks of {t} along dim {d} are not divisible into {n} chunks")
        return plan

    @staticmethod
    def emit(ov: coll.OverlapOp, chain: list[Operation], term: Operation, plan: Plan, n: int) -> None:
        parent = ov.parent_block()
        assert parent is not None
        first_coll = next(i for i, o in enumerate(chain) if isinstance(o, (coll.CollectiveOp, coll.FusedCollectiveOp)))
        views: dict[tuple[SSAValue, int, int], SSAValue] = {}
        results = []
        c_out = plan.dims[term.operands[0]]

        def insert(new: Operation) -> Operation:
            parent.insert_op_before(new, ov)
            return new

        def chunk_input(v: SSAValue, d: int, k: int, kc: SSAValue) -> SSAValue:
            """Chunk k of input ``v`` along ``d``; in a chunk-major cut, an input sliced
            along ``d`` by a take_slice is sliced again from its source's chunk."""
            ts = _sliced_view(v, d) if plan.logical and _sliced_along(v.type, d) else None
            src = ts.operands[0] if ts is not None else v
            view = insert(rt.ChunkOp.get(src, kc, d, n, chunk_type(src.type, d, n)))
            if src.name_hint:
                view.result.name_hint = f"{src.name_hint}_c{k}"
            if ts is None:
                return view.result
            sliced = insert(ts.clone(value_mapper={src: view.result}))
            sliced.results[0]._type = chunk_type(v.type, d, n)  # noqa: SLF001 - retyping a fresh clone
            if v.name_hint:
                sliced.results[0].name_hint = f"{v.name_hint}_c{k}"
            return sliced.results[0]

        for k in range(n):
            kc = insert(arith.ConstantOp.from_int_and_width(k, IndexType())).results[0]
            mapper: dict[SSAValue, SSAValue] = {}
            for pos, o in enumerate(chain):
                clone = o.clone(value_mapper=mapper)
                for old_v in _values(o):
                    d = plan.dims.get(old_v)
                    if d is not None and old_v in mapper:
                        mapper[old_v]._type = chunk_type(old_v.type, d, n)  # noqa: SLF001 - retyping a fresh clone
                for old_op, new_op in zip(o.walk(), clone.walk()):
                    for i, v in enumerate(old_op.operands):
                        d = plan.uses.get((old_op, i))
                        if d is None or v in plan.internal:
                            continue
                        key = (v, d, k)
                        if key not in views:
                            views[key] = chunk_input(v, d, k, kc)
                        new_op.operands = [views[key] if j == i else w for j, w in enumerate(new_op.operands)]
                    if isinstance(new_op, dist.DropoutOp):
                        d = plan.dims.get(old_op.results[0])
                        if d is not None:
                            where = (d, k, n, 1) if plan.logical else (d, k, n)
                            new_op.attributes[CHUNK] = ArrayAttr([IntegerAttr(x, i64) for x in where])
                clone.attributes[STREAM] = IntegerAttr(0 if pos < first_coll else 1, i64)
                for r in clone.results:
                    if r.name_hint:
                        r.name_hint = f"{r.name_hint}_c{k}"
                insert(clone)
            results.append(mapper[term.operands[0]])
        asm = insert(rt.AssembleOp.get(results, c_out, ov.outputs[0].type))  # type: ignore[arg-type]
        asm.result.name_hint = ov.outputs[0].name_hint
        ov.outputs[0].replace_all_uses_with(asm.result)
        parent.erase_op(ov)
