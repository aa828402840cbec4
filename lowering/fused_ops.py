"""Lowering of the fused computation-collective operators: a ``coll.overlap ...
granularity tile`` chain (``passes/overlap.py``) becomes one ``rt`` op whose tiles are
the unit of both computation and communication, run by each backend its own way
(``runtime/tiles.py``)::

    dist.matmul -> coll.all_reduce       rt.matmul_all_reduce
    dist.matmul -> coll.reduce_scatter   rt.matmul_reduce_scatter
    dist.matmul [-> maps] -> all_to_all  rt.matmul_all_to_all { epilogue }
    dist.embedding_bag -> all_to_all     rt.embedding_all_to_all { epilogue }

The tile dim: for a reduce-scatter its dim; for an all-reduce the dim whose cut makes
each tile re-read the smaller matmul operand (the output columns of a GEMV, whose
weight is large and whose input is a few tokens; the rows of a GEMM with many rows);
for an all-to-all its dim (the blocks bound for each rank). Each rank's block of that
dim is cut into the largest tile count <= ``chunks`` that divides it; an all-to-all
whose producer has a leading table or expert dim (other than its dim) cuts that dim
into tiles instead (``tile_dim``), so that each group of tables or experts is read
once for all destinations. An all-reduce
gets a reduction buffer ``%red[n, block]`` (slot j: rank j's partial of this rank's
block). The maps of a GEMM + All-to-All (``rt.call`` of element-wise kernels after
``lower-to-kernels``) become the op's epilogue region: launches of tile-shaped copies
of their kernels (``@k0_tile_2x4x16``) on the tile, in place. The op takes the compute
stream and the communication stream (stream 1)::

    %y = coll.overlap chunks 2 order remote_first granularity tile -> T {
      %l = dist.matmul %x, %w : ...
      %s = coll.all_reduce sum %l : ...
      coll.yield %s : T
    }

becomes::

    %red = rt.alloc : () -> memref<2x4x8xf32>
    rt.matmul_all_reduce sum %x, %w, %y, %red, %c, %s, %s1 dim 1 tiles 2 order remote_first : (...) -> ()

A dim the group does not divide (blocks of ceil(s/n), the last ranks' shorter or
empty; ``tile_layout``): the producer's operands that carry the cut dim (``carriers``:
a matmul's rows or output columns, an embedding bag's bags, embedding dim or tables)
are laid out padded to ``n`` blocks of ceil(s/n), and so is the result along the dim
it gathers (an all-reduce's cut dim, an all-to-all's concatenation dim), by the plan
(``padding.py``: padded arguments in the lowered signature, the value a prefix of its
padded buffer, a copy only where the plan could not, as for nested blocks that do not
line up). Every block and every tile is then full, the padding's tiles computing
padding that nobody reads; a reduce-scatter's result is already one padded block. A
contracted dim the ranks do not divide is read as each rank's part (``rt.prefix``; the
last ranks' may be empty). A chain the runtime op cannot express (values held
``at<r>`` by some ranks, an epilogue with other tensor operands or index parameters)
runs unfused, as the chain it means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import IndexType, MemRefType
from xdsl.ir import Block, Operation, Region, SSAValue

from distir.dialects import coll, dist, layout, rt
from distir.dialects.dist import TensorType
from distir.lowering.common import group_size, local_shape


def _tiles(extent: int, chunks: int) -> int:
    """The largest tile count <= ``chunks`` dividing ``extent``."""
    return max(t for t in range(1, max(1, chunks) + 1) if extent % t == 0)


def reduce_dim(a_shape, b_shape, shape, n: int) -> int | None:
    """The dim an all-reduce of ``a @ b`` (local result ``shape``) is cut along: the last
    (output columns: each tile re-reads ``a``) when ``a`` is the smaller operand, else
    the first other dim the group divides (each tile re-reads ``b``). Where the group
    divides none, the same choice among all dims (cut into blocks of ceil(s/n): the
    buffers are laid out padded, ``padded_operands``)."""
    dims = [d for d in range(len(shape)) if shape[d] % n == 0] or list(range(len(shape)))
    if not dims:
        return None
    last = len(shape) - 1
    if last in dims and math.prod(a_shape) <= math.prod(b_shape):
        return last
    rows = [d for d in dims if d != last]
    return rows[0] if rows else last


def _tile_kernel(lowering, kernel: rt.KernelOp, full: tuple[int, ...], tile: tuple[int, ...]) -> str | None:
    """A copy of element-wise ``kernel`` over one tile: its space and its ``full``-shaped
    memref parameters take the tile's shape. None when the kernel has index parameters
    (a dropout's block offsets) or another space."""
    if tuple(kernel.space) != full:
        return None
    if any(isinstance(a.type, IndexType) for a in kernel.params):
        return None
    name = f"{kernel.kernel_name}_tile_{'x'.join(map(str, tile))}"
    if name in lowering.extra_kernels:
        return name
    new = kernel.clone()
    new.properties["sym_name"] = type(kernel.sym_name)(name)
    new.properties["shape"] = type(kernel.shape).from_list(kernel.shape.elt_type, list(tile))
    block = new.body.block
    for i in range(len(new.params)):
        a = block.args[i]
        t = a.type
        if isinstance(t, MemRefType) and tuple(t.get_shape()) == full:
            b = block.insert_arg(MemRefType(t.element_type, tile), i)
            a.replace_all_uses_with(b)
            block.erase_arg(a)
    lowering.module.body.block.add_op(new)
    lowering.extra_kernels.add(name)
    return name


def carriers(head: dist.MatmulOp | dist.EmbeddingBagOp, d: int) -> list[tuple[SSAValue, int]]:
    """The producer operands that carry dim ``d`` of its result, with their dim: a
    matmul's rhs for the output columns, its lhs for the rows (and both for a batch
    dim of a batched rhs); an embedding bag's indices for the bags, its table for the
    embedding dim, both for a leading table dim."""
    rr = head.results[0].type.rank  # type: ignore[attr-defined]
    if isinstance(head, dist.MatmulOp):
        rb = head.rhs.type.rank  # type: ignore[attr-defined]
        if d == rr - 1:
            return [(head.rhs, rb - 1)]
        return [(head.lhs, d)] + ([(head.rhs, d)] if rb == rr and d < rr - 2 else [])
    ti, tt = head.indices.type.rank, head.table.type.rank  # type: ignore[attr-defined]
    if d == rr - 1:
        return [(head.table, tt - 1)]
    if d == rr - 2:
        return [(head.indices, ti - 2)]
    return [(head.table, d), (head.indices, d)]


@dataclass
class TileLayout:
    """How a tile operator's buffers are laid out on a group of ``n`` ranks: ``dim`` of
    the producer's result is cut into one block per destination; where the group does
    not divide it (blocks of ceil(s/n)) the operands in ``padded`` (value, dim) are laid
    out padded to ``n`` equal blocks, so that every block and every tile is full (the
    padding's tiles compute padding); ``out_dim``: the dim of the result laid out
    padded the same way (an all-reduce's ``dim``, an all-to-all's concatenation dim
    where the group does not divide it), None when the result is one block."""

    dim: int
    padded: list[tuple[SSAValue, int]]
    out_dim: int | None


def tile_layout(ops: list[Operation], sizes_of) -> TileLayout | None:
    """The layout of the tile operator running ``ops`` (producer, epilogue, collective:
    see ``lower_tiled``), or None when no tile operator runs it (a dim ``at<r>`` or
    another op decides)."""
    head, *_, c = ops
    t: TensorType = head.results[0].type  # type: ignore[assignment]
    sizes = sizes_of(t)
    axes = list(c.option("axes") or (0,))
    n = group_size(sizes, axes)
    shape = layout.local_shape(t.get_shape(), t.get_placements(), sizes)
    out_dim = None
    if isinstance(c, coll.ReduceScatterOp):
        d = c.option("dim")
    elif isinstance(c, coll.AllReduceOp):
        at, bt = head.lhs.type, head.rhs.type  # type: ignore[attr-defined]
        d = reduce_dim(*(layout.local_shape(x.get_shape(), x.get_placements(), sizes) for x in (at, bt)), shape, n)
        if d is None:
            return None
        out_dim = d
    elif isinstance(c, coll.AllToAllOp):
        d = c.option("dim")
        cat = layout.innermost_slicing(t.get_placements(), axes)
        if cat is None or cat == d:
            return None
        out_dim = cat
    else:
        return None
    return TileLayout(d, [] if shape[d] % n == 0 else carriers(head, d), out_dim)


def padded_operands(lowering, head, result: SSAValue, lay: TileLayout, n: int, contracted: bool):
    """The producer's operands and the buffer the op writes for layout ``lay``: (inputs,
    the buffer the op writes, moves after the op): the values' own buffers where the
    group divides the dims, else their padded buffers (``padding.py``; a copy only where
    the plan could not lay them out padded). ``contracted``: a matmul's contracted dim
    the ranks do not divide is read as each rank's part (``rt.prefix``)."""
    bufs = {v: lowering.input(v) for v in head.operands}
    for v, dim in lay.padded:
        bufs[v] = lowering.laid_out(bufs[v], v.type, dim, [n])
    if contracted:
        at, bt = head.lhs.type, head.rhs.type
        bufs[head.lhs] = lowering.valid(bufs[head.lhs], at, at.rank - 1)
        bufs[head.rhs] = lowering.valid(bufs[head.rhs], bt, bt.rank - 2)
    else:  # an embedding: rows past this rank's block are not its rows
        tt = head.table.type
        bufs[head.table] = lowering.valid(bufs[head.table], tt, tt.rank - 2)
    out = lowering.out(result)
    after: list = []
    written = out
    if lay.out_dim is not None:
        written = lowering.receiving(out, result.type, lay.out_dim, [n], after)
    return [bufs[v] for v in head.operands], written, after, out


def lower_tiled(lowering, op: coll.OverlapOp) -> bool:
    """Lower a ``granularity tile`` overlap to its fused operator (see the module doc);
    False when the chain must run unfused."""
    block = op.body.block
    term = block.last_op
    ops = [o for o in block.ops if o is not term]
    if len(ops) < 2 or len(op.outputs) != 1:
        return False
    head, *epilogue, c = ops
    if not isinstance(head, (dist.MatmulOp, dist.EmbeddingBagOp)):
        return False
    values = [v for o in ops for v in (*o.operands, *o.results) if isinstance(v.type, TensorType)]
    if any(lowering.guard_placements(v.type) is not None for v in values):  # type: ignore[arg-type]
        return False
    t: TensorType = head.results[0].type  # type: ignore[assignment]
    ct: TensorType = c.results[0].type  # type: ignore[assignment]
    if ct.element_type != t.element_type:
        return False
    axes = list(c.option("axes") or (0,))
    sizes = lowering.sizes(t)
    n = group_size(sizes, axes)
    shape = tuple(local_shape(t, sizes))
    order = op.option("order")
    chunks = op.option("chunks")
    mesh = t.mesh_name
    comm = lowering.comm(mesh, axes)
    s0 = lowering.stream
    s1 = lowering.stream_n(2 if s0 is lowering.stream_n(1) else 1)
    elt = t.element_type

    if isinstance(c, (coll.AllReduceOp, coll.ReduceScatterOp)) and (not isinstance(head, dist.MatmulOp) or epilogue):
        return False
    lay = tile_layout(ops, lowering.sizes)
    if lay is None:
        return False
    d = lay.dim
    logical = shape
    if lay.padded:
        shape = tuple(n * -(-x // n) if i == d else x for i, x in enumerate(shape))

    if isinstance(c, (coll.AllReduceOp, coll.ReduceScatterOp)):
        inputs, out, after, value = padded_operands(lowering, head, op.outputs[0], lay, n, True)
        block_shape = list(shape)
        block_shape[d] //= n
        tiles = _tiles(block_shape[d], chunks)
        red = lowering.alloc(MemRefType(elt, [n, *block_shape]), f"{op.outputs[0].name_hint or 'y'}_red")
        cls = rt.MatmulAllReduceOp if isinstance(c, coll.AllReduceOp) else rt.MatmulReduceScatterOp
        lowering.emit(cls.make([*inputs, out, red, comm, s0, s1], [], op=c.option("op"), dim=d, tiles=tiles, order=order))
        for move in after:
            move()
        lowering.buf[op.outputs[0]] = value
        return True

    e, cat = d, lay.out_dim
    # Tiles along the leading (table / expert) dim when there is one other than the
    # destination dim: the tiles of one group of tables or experts then run back to back
    # for every destination, reading their rows or weights once.
    tile_dim = 0 if len(shape) >= 3 and e != 0 and shape[0] > 1 else e
    if tile_dim == e:
        tiles = _tiles(shape[e] // n, chunks)
    else:
        tiles = _tiles(shape[tile_dim], chunks)
    tile = list(shape)
    tile[e] //= n
    tile[tile_dim] //= tiles
    tile_t = MemRefType(elt, tile)
    region = Block(arg_types=[tile_t])
    prev: SSAValue = head.results[0]
    kernels = {k.kernel_name: k for k in lowering.module.ops if isinstance(k, rt.KernelOp)}
    for call in epilogue:
        if not isinstance(call, rt.CallOp) or len(call.outputs) != 1:
            return False
        kernel = kernels.get(call.kernel_name)
        name = _tile_kernel(lowering, kernel, logical, tuple(tile)) if kernel is not None else None
        if name is None:
            return False
        args: list[SSAValue] = []
        for v in call.args:
            if v is prev:
                args.append(region.args[0])
            elif isinstance(v.type, TensorType) and v.type.get_shape():
                return False
            else:
                args.append(lowering.input(v))
        region.add_op(rt.LaunchOp.get(name, [*args, region.args[0], s0]))
        prev = call.outputs[0]
    inputs, out, after, value = padded_operands(lowering, head, op.outputs[0], lay, n, isinstance(head, dist.MatmulOp))
    options = {"dim": e, "concat": cat, "tile_dim": tile_dim if tile_dim != e else -1, "tiles": tiles, "order": order}
    if isinstance(head, dist.MatmulOp):
        new = rt.MatmulAllToAllOp.make([*inputs, out, comm, s0, s1], [], [Region(region)], **options)
    else:
        operands = [*inputs, lowering.embedding_row0(head)]
        new = rt.EmbeddingAllToAllOp.make([*operands, out, comm, s0, s1], [], [Region(region)], mode=head.option("mode"), **options)
    lowering.emit(new)
    for move in after:
        move()
    lowering.buf[op.outputs[0]] = value
    return True

