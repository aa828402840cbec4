"""Padded buffers: how the lowering lays out blocks of different sizes.

Where the ranks do not divide a sliced dim (DESIGN §2: blocks of c = ceil(s/n), the
last ranks hold fewer elements or none), every rank's buffer of the value has the
largest block's shape (``layout.local_shape`` without coordinates): the rank's block at
the start, padding after it. Kernels compute over the whole buffer (the padding's
results are never read), so one SPMD program serves every rank, and a collective that
cuts a buffer into one block per group member (NCCL's equal counts) cuts a buffer of
``n * c`` elements along that dim into equal blocks of ``c``: block j holds rank j's
block at its start.

The lowering decides which buffers are laid out padded so: a value whose dim a
collective scatters (reduce-scatter's operand, all-to-all's operand along its new
dim), gathers (all-gather's and all-to-all's results) or a ``take_slice`` cuts gets a
buffer of ``n * c`` elements along that dim, and the value itself is its
``rt.prefix`` (no copy: the collective reads or writes the padded buffer, everything
else sees the value). A function argument so laid out has the padded shape in the
lowered signature (``rt.dist_type`` keeps the logical one): the runtime, or the caller
of a step, gives a buffer of that shape with the rank's block at its start. Where the
plan could not lay a buffer out padded (a value some other op made), the collective
copies it into a padded buffer of its own.

Nested slicing cuts the block the outer axes left (``layout.dim_block``), whose size may
differ between outer blocks: then the inner blocks of a short outer block do not start
at multiples of the padded block (``aligned`` says whether they do), and the lowering
moves them with ``rt.pad_blocks``/``rt.unpad_blocks`` (each rank's outer extent from
``rt.span``) instead of viewing a prefix.

``padding_plan`` computes, for every value of a function, the dims to lay out padded
and their padded extents (``{value: {dim: extent}}``), from the ops that cut them and
back through the ops that keep the buffer (``remesh``, ``to_local``, ``from_local``) and
through results written in place into an argument.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from distir.dialects import coll, dist, layout
from distir.dialects.dist import TensorType
from distir.dialects.fast import walk


def padded_block(size: int, outer: Sequence[int], counts: Sequence[int]) -> int:
    """The largest block of a dim of ``size`` elements cut over the groups ``outer``
    then ``counts`` (outermost first): the padded block a group member's buffer holds."""
    return layout.max_block(size, [*outer, *counts])


def aligned(size: int, outer: Sequence[int], counts: Sequence[int]) -> bool:
    """Whether, in every block the ``outer`` groups leave of a dim of ``size`` elements,
    the blocks of the group over ``counts`` (nested, in group order) start at multiples
    of the padded block, so that the buffer of ``prod(counts)`` equal padded blocks
    holds them at their places; true when ``outer`` is empty and the group is one axis,
    or the ranks divide the dim."""
    if size % (math.prod(outer) * math.prod(counts)) == 0:
        return True  # equal blocks at every level
    return _aligned(size, tuple(outer), tuple(counts))


@functools.lru_cache(maxsize=4096)
def _aligned(size: int, outer: tuple[int, ...], counts: tuple[int, ...]) -> bool:
    """``aligned`` of a dim the ranks do not divide: every block visited (once per
    size and groups: a model's program asks for the same few many times)."""
    padded = padded_block(size, outer, counts)
    n = math.prod(counts)
    for r in range(math.prod(outer)):
        b0 = layout.dim_block(size, outer, layout.at_digits(r, outer))[1]
        for k in range(n):
            off, length = layout.dim_block(b0, counts, layout.at_digits(k, counts))
            if length and off != k * padded:
                return False
    return True


def cut(t: TensorType, dim: int, sizes: Sequence[int], counts: Sequence[int]) -> tuple[int, bool]:
    """(padded extent, aligned) of dim ``dim`` of a value of type ``t`` cut over a group
    of ``counts`` ranks per axis, nested inside the axes slicing it in ``t``."""
    outer = layout.slicing_counts(t.get_placements(), sizes, dim)
    s = t.get_shape()[dim]
    return layout.padded_extent(s, outer, counts), aligned(s, outer, counts)


Sizes = Callable[[TensorType], Sequence[int]]


def padding_plan(f: func.FuncOp, sizes_of: Sizes) -> dict[SSAValue, dict[int, int]]:
    """``{value: {dim: padded extent}}``: the values of ``f`` (arguments included) whose
    buffer the lowering lays out padded (module doc). Only dims the group does not
    divide and whose blocks are aligned are listed (the others need no padding, or a
    copy either way)."""
    plan: dict[SSAValue, dict[int, int]] = {}

    def need(v: SSAValue, t: TensorType, dim: int, counts: Sequence[int]) -> None:
        extent, ok = cut(t, dim, sizes_of(t), counts)
        if ok and extent != layout.max_block(t.get_shape()[dim], layout.slicing_counts(t.get_placements(), sizes_of(t), dim)):
            plan.setdefault(v, {}).setdefault(dim, extent)

    views: list[Operation] = []
    for op in walk(f):
        if isinstance(op, (dist.RemeshOp, dist.ToLocalOp, dist.FromLocalOp)):
            views.append(op)
        elif isinstance(op, coll.CollectiveOp):
            _collective_needs(op, type(op), op.input, op.result, op.options(), sizes_of, need)
        elif isinstance(op, coll.FusedCollectiveOp):
            axes = list(op.option("axes") or (0,))
            if op.FIRST is not None:
                opts = {**op.first_options(), "axes": axes}
                for x, a in zip(op.inputs, op.body.block.args):
                    _collective_needs(op, op.FIRST, x, a, opts, sizes_of, need)
            if op.FINISH is not None:
                term = op.body.block.last_op
                assert term is not None
                for y, res, g in zip(term.operands, op.outputs, op.gather_flags()):
                    if g:
                        _collective_needs(op, op.FINISH, y, res, {"axes": axes}, sizes_of, need)
        elif isinstance(op, coll.OverlapOp) and op.option("granularity") == "tile":
            _tile_needs(op, sizes_of, need)
        elif isinstance(op, (dist.TakeSliceOp, dist.SliceOp)):
            t = op.input.type
            assert isinstance(t, TensorType)
            need(op.input, t, op.option("dim"), [sizes_of(t)[op.option("axis")]])
    # Back through the ops that keep the buffer, and from in-place results to arguments.
    for op in reversed(views):
        got = plan.get(op.results[0])
        if got:
            for d, e in got.items():
                plan.setdefault(op.operands[0], {}).setdefault(d, e)
    ret = f.body.block.last_op
    if isinstance(ret, func.ReturnOp) and f.res_attrs is not None:
        for i, attrs in enumerate(f.res_attrs.data):
            a = attrs.data.get("dist.inplace")  # type: ignore[union-attr]
            got = plan.get(ret.operands[i]) if a is not None else None
            if got:
                for d, e in got.items():
                    plan.setdefault(f.body.block.args[a.value.data], {}).setdefault(d, e)  # type: ignore[attr-defined]
    return plan


def _tile_needs(op: Operation, sizes_of: Sizes, need) -> None:
    """A tile operator cut along a dim the group does not divide, or whose all-to-all
    gathers along such a dim (``fused_ops.tile_layout``): the operands carrying the cut
    dim and the result."""
    from distir.lowering.fused_ops import tile_layout

    ops = [o for o in op.regions[0].block.ops if not isinstance(o, coll.YieldOp)]
    if len(ops) < 2 or not isinstance(ops[0], (dist.MatmulOp, dist.EmbeddingBagOp)):
        return
    if not isinstance(ops[-1], (coll.AllReduceOp, coll.ReduceScatterOp, coll.AllToAllOp)):
        return
    lay = tile_layout(ops, sizes_of)
    if lay is None:
        return
    n = math.prod(sizes_of(ops[0].results[0].type)[a] for a in (ops[-1].option("axes") or (0,)))  # type: ignore[attr-defined]
    for v, dim in lay.padded:
        need(v, v.type, dim, [n])
    if lay.out_dim is not None:
        need(op.results[0], op.results[0].type, lay.out_dim, [n])


def _collective_needs(op: Operation, cls: type[coll.CollectiveOp], x: SSAValue, y: SSAValue, options: dict, sizes_of: Sizes, need) -> None:
    xt, yt = x.type, y.type
    if not isinstance(xt, TensorType) or not isinstance(yt, TensorType):
        return
    axes = list(options.get("axes") or (0,))
    counts = [sizes_of(xt)[a] for a in axes]
    send, recv = cls.cut_dims(xt, options, axes)
    for d in send:
        need(x, xt, d, counts)
    for d in recv:
        need(y, yt, d, counts)


def padding_moved(module, ranks: int) -> list[tuple[str, str, int]]:
    """The collectives of ``module`` (plain, and the collectives of fused ones) that move
    padding on ``ranks`` ranks: (schedule token of the collective, ``%`` name of its
    operand, padding bytes per rank: ``CollectiveOp.padding`` times the element size),
    in program order. Empty when the ranks divide every dim a collective cuts."""
    from distir.dialects.dist import element_bytes, resolve_grids

    grids = resolve_grids(module, ranks)
    out: list[tuple[str, str, int]] = []

    def add(cls, x: SSAValue, y: SSAValue, options: dict) -> None:
        xt, yt = x.type, y.type
        if not isinstance(xt, TensorType) or not isinstance(yt, TensorType) or xt.mesh_name not in grids:
            return
        pad = cls.padding(xt, yt, options, grids[xt.mesh_name].sizes)
        if pad:
            out.append((cls.TOKEN, f"%{x.name_hint}" if x.name_hint else "a value", pad * element_bytes(xt.element_type)))

    for op in walk(module):
        if isinstance(op, coll.CollectiveOp):
            add(type(op), op.input, op.result, op.options())
        elif isinstance(op, coll.FusedCollectiveOp):
            axes = list(op.option("axes") or (0,))
            if op.FIRST is not None:
                for x, a in zip(op.inputs, op.body.block.args):
                    add(op.FIRST, x, a, {**op.first_options(), "axes": axes})
            term = op.body.block.last_op
            if op.FINISH is not None and term is not None:
                for y, r, g in zip(term.operands, op.outputs, op.gather_flags()):
                    if g:
                        add(op.FINISH, y, r, {"axes": axes})
    return out


def format_padding(moved: list[tuple[str, str, int]]) -> str:
    """``RS %g 8 B, AG %p_s 8 B`` (``-`` when nothing moves padding)."""
    return ", ".join(f"{token} {name} {n} B" for token, name, n in moved) or "-"
