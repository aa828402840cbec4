"""``coll.overlap`` with a rank-dependent chunk order (``ring``, ``remote_first``), as
``lower-collectives`` lowers it: a matmul whose partial sums a collective reduces
(``all_reduce``, ``reduce_scatter`` or ``fused_all_reduce``, sum or avg) is computed one
block at a time in the order its reduction consumes the blocks, and the reduction is
done by point-to-point transfers, so that every rank can follow its own order (NCCL and
MPI match collectives by issue order, which all ranks share; P2P pairs can differ).

The result is cut into as many blocks as the group has ranks (``chunks`` must equal the
group size), along the reduction's dim (the reduce-scatter's dim; for an all-reduce the
first dim that the matmul can cut). Block j is owned by group rank j. With n ranks and
``me`` this rank's group rank:

* ``remote_first`` (the fused-operator paper): step s = 0 .. n-2 computes the partial
  block of owner ``me+1+s`` and sends it there while receiving the partial of ``me``'s
  block from ``me-1-s`` (one ``nccl.group_start/end`` per step); the last step computes
  ``me``'s own block, to which the received partials are added.
* ``ring`` (CoCoNet: rank n starts at chunk n, the order a ring reduce-scatter consumes
  them): step s computes the partial of block ``me-1-s``, adds the accumulation received
  from ``me-1`` and passes it on to ``me+1``; after n-1 steps the block ``me`` is fully
  reduced.

The matmul of each step runs on stream 0, the transfers and additions on stream 1
(events order them), so the transfer of block s overlaps the matmul of block s+1. The
reduced block then finishes the collective: it is this rank's slice of a reduce-scatter;
an all-reduce all-gathers it; a fused all-reduce runs its region on it and all-gathers
the gathered results. Chains that do not have this shape, and ``natural`` order, are cut
by ``lower-overlap`` (or, if they cannot be cut, run as one piece).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import AnyFloat, FloatAttr, IndexType, MemRefType
from xdsl.ir import Block, Region, SSAValue

from distir.dialects import coll, dist, nccl, rt
from distir.dialects.dist import TensorType
from distir.lowering.common import group_size, local_shape, static_sizes

REDUCTIONS = (coll.AllReduceOp, coll.ReduceScatterOp, coll.FusedAllReduceOp)


@dataclass
class P2PPlan:
    matmul: dist.MatmulOp
    collective: coll.CollectiveOp | coll.FusedCollectiveOp
    dim: int
    axes: list[int]
    ranks: int


def p2p_plan(op: coll.OverlapOp, mesh_ops) -> P2PPlan | None:
    """The plan of a ring/remote_first overlap, or None when the chain does not have the
    shape this lowering handles (see the module doc)."""
    if op.option("order") == "natural":
        return None
    block = op.body.block
    ops = [o for o in block.ops if not isinstance(o, coll.YieldOp)]
    if len(ops) != 2 or not isinstance(ops[0], dist.MatmulOp) or not isinstance(ops[1], REDUCTIONS):
        return None
    mm, c = ops
    if c.operands[0] is not mm.result or c.option("op") not in ("sum", "avg"):
        return None
    if c.option("op") == "avg" and not isinstance(mm.result.type.element_type, AnyFloat):  # type: ignore[attr-defined]
        return None
    t: TensorType = mm.result.type  # type: ignore[assignment]
    axes = list(c.option("axes") or (0,))
    sizes = static_sizes("lower-collectives", mesh_ops[t.mesh_name])
    n = group_size(sizes, axes)
    if n < 2 or op.option("chunks") != n:
        return None
    local = local_shape(t, sizes)
    if isinstance(c, coll.AllReduceOp):
        dims = [d for d in range(t.rank) if local[d] % n == 0]
        if not dims:
            return None
        d = dims[0]
    else:
        d = c.option("dim")
        if local[d] % n:
            return None
    lhs: TensorType = mm.lhs.type  # type: ignore[assignment]
    rhs: TensorType = mm.rhs.type  # type: ignore[assignment]
    if d == t.rank - 1 and rhs.rank != 2:
        return None
    if d < t.rank - 1 and (lhs.rank != t.rank or (rhs.rank != 2 and d >= t.rank - 2)):
        return None
    return P2PPlan(mm, c, d, axes, n)


def _binary_kernel(lowering, name: str, t: MemRefType, kind: str) -> str:
    """An element-wise kernel ``out = a + b`` (``add``) or ``out = a * s`` (``scale``)
    over buffers of type ``t``, added to the module once."""
    elt = t.element_type
    sym = f"{kind}_{'x'.join(map(str, t.get_shape())) or 'scalar'}_{elt}"
    if sym in lowering.extra_kernels:
        return sym
    space = list(t.get_shape())
    scalar_t = elt
    params = [t, t, t] if kind == "add" else [t, scalar_t, t]
    block = Block(arg_types=[*params, *([IndexType()] * len(space))])
    idx = list(block.args[3:])

    def add_op(o):
        block.add_op(o)
        return o.results[0] if o.results else None

    a = add_op(memref.LoadOp.get(block.args[0], idx))
    b = block.args[1] if kind == "scale" else add_op(memref.LoadOp.get(block.args[1], idx))
    is_float = isinstance(elt, AnyFloat)
    if kind == "add":
        r = add_op(arith.AddfOp(a, b) if is_float else arith.AddiOp(a, b))
    else:
        r = add_op(arith.MulfOp(a, b) if is_float else arith.MuliOp(a, b))
    add_op(memref.StoreOp.get(r, block.args[2], idx))
    lowering.module.body.block.add_op(rt.KernelOp.get(sym, space, Region(block)))
    lowering.extra_kernels.add(sym)
    return sym


def lower_p2p(lowering, op: coll.OverlapOp, plan: P2PPlan) -> None:
    mm, c, d, n = plan.matmul, plan.collective, plan.dim, plan.ranks
    t: TensorType = mm.result.type  # type: ignore[assignment]
    mesh = t.mesh_name
    axes = plan.axes
    sizes = lowering.sizes(t)
    shape = list(local_shape(t, sizes))
    shape[d] //= n
    elt = t.element_type
    blk = MemRefType(elt, shape)
    a, w = lowering.input(mm.lhs), lowering.input(mm.rhs)
    comm = lowering.comm(mesh, axes)
    s0, s1 = lowering.stream_n(0), lowering.stream_n(1)
    add = _binary_kernel(lowering, "add", blk, "add")
    order = op.option("order")
    count = 1
    for x in shape:
        count *= x

    def emit(o):
        return lowering.emit(o)

    def partial(owner: SSAValue) -> SSAValue:
        out = lowering.alloc(blk)
        if d == t.rank - 1:
            args = [a, lowering.block(w, owner, 1, n), out, s0]
        else:
            args = [lowering.block(a, owner, d, n), w, out, s0]
        emit(rt.MatmulOp.make(args, []))
        return out

    def s1_waits_s0() -> None:
        e = emit(rt.EventRecordOp.make([s0], [rt.EVENT])).results[0]
        emit(rt.StreamWaitOp.make([s1, e], []))

    def exchange(send: SSAValue, to: SSAValue, recv: SSAValue, frm: SSAValue) -> None:
        emit(nccl.GroupStartOp.make([], []))
        emit(nccl.SendOp.make([send, to, comm, s1], [], count=count))
        emit(nccl.RecvOp.make([recv, frm, comm, s1], [], count=count))
        emit(nccl.GroupEndOp.make([], []))

    lowering.order_streams([mm.lhs, mm.rhs])
    received: list[SSAValue] = []
    acc: SSAValue | None = None
    for s in range(n):
        if order == "remote_first":
            owner = lowering.group_rank(mesh, axes, s + 1)
        else:
            owner = lowering.group_rank(mesh, axes, -(1 + s))
        p = partial(owner)
        s1_waits_s0()
        if order == "remote_first":
            if s < n - 1:
                r = lowering.alloc(blk)
                exchange(p, owner, r, lowering.group_rank(mesh, axes, -(s + 1)))
                received.append(r)
            else:
                acc = p
                for r in received:
                    emit(rt.LaunchOp.get(add, [acc, r, acc, s1]))
        else:
            if received:
                emit(rt.LaunchOp.get(add, [p, received[-1], p, s1]))
            if s < n - 1:
                r = lowering.alloc(blk)
                exchange(p, lowering.group_rank(mesh, axes, 1), r, lowering.group_rank(mesh, axes, -1))
                received.append(r)
            else:
                acc = p
    assert acc is not None
    if c.option("op") == "avg":
        scale = _binary_kernel(lowering, "scale", blk, "scale")
        inv = emit(arith.ConstantOp(FloatAttr(1.0 / n, elt))).results[0]
        emit(rt.LaunchOp.get(scale, [acc, inv, acc, s1]))
    # Finish the collective on this rank's reduced block, on stream 1.
    saved = lowering.stream
    lowering.stream = s1
    try:
        if isinstance(c, coll.ReduceScatterOp):
            result = acc
        elif isinstance(c, coll.AllReduceOp):
            result = lowering.out(c.result)
            lowering.gather_block(acc, result, d, n, comm)
        else:
            lowering.fused(c, first=[acc])
            result = lowering.input(c.outputs[0])
    finally:
        lowering.stream = saved
    term = op.body.block.last_op
    assert isinstance(term, coll.YieldOp)
    lowering.buf[op.outputs[0]] = result if not isinstance(c, coll.FusedAllReduceOp) else lowering.input(term.values[0])
    lowering.on_stream[op.outputs[0]] = s1


def lower_overlap(lowering, op: coll.OverlapOp) -> None:
    """Lower a ``coll.overlap`` that ``lower-overlap`` left: ``granularity tile`` chains
    to a fused tile operator (``fused_ops.py``), ring/remote_first chains of the shape
    above by point-to-point transfers, any other chain as it is (one piece)."""
    if op.option("granularity") == "tile":
        from distir.lowering.fused_ops import lower_tiled

        if lower_tiled(lowering, op):
            return
        return _lower_whole(lowering, op)
    plan = p2p_plan(op, lowering.meshes)
    if plan is not None:
        lower_p2p(lowering, op, plan)
        return
    _lower_whole(lowering, op)


def _lower_whole(lowering, op: coll.OverlapOp) -> None:
    """The chain as it is, in one piece."""
    block = op.body.block
    term = block.last_op
    for inner in block.ops:
        if inner is not term:
            lowering.lower_op(inner)
    for r, y in zip(op.outputs, term.values):  # type: ignore[union-attr]
        lowering.buf[r] = lowering.input(y)
