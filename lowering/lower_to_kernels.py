"""``lower-to-kernels``: every maximal run of consecutive element-wise local computations
(``dist.map``, ``dist.cast``, ``dist.dropout``) over one iteration space becomes one
kernel.

The run is outlined into an ``rt.kernel`` (a ``gpu.func``-style kernel over the rank's
local block: memref parameters, an element-wise body of ``memref.load``, ``arith``/
``math`` and ``memref.store``) and replaced by an ``rt.call`` of it on the distributed
values. Values used only inside the run stay in registers; values used after it are
stored, one output parameter each. Operands broadcast along a dim are loaded with
index 0 there (or without that dim). ``dist.dropout`` draws from the generator of
``dialects/rng.py`` (``rt.random``) keyed by the element's logical index, so a kernel on a
block takes the block's offsets as ``index`` parameters (``rt.group_rank`` times the
block extent). The iteration space is the run's common result type (shape and
placements); a map over another space starts a new kernel.

    %m1 = dist.map(%m, %g, %b1) : (...) -> T { ^bb0(%x, %y, %b): ... }
    %v1 = dist.map(%v, %g, %b2) : (...) -> T { ... }

becomes::

    rt.kernel @k0 shape [1024] {
    ^bb0(%m: memref<1024xf32>, %g: memref<1024xf32>, %b1: f32, %v: memref<1024xf32>, %b2: f32,
         %o0: memref<1024xf32>, %o1: memref<1024xf32>, %i0: index):
      %0 = memref.load %m[%i0] : memref<1024xf32>
      ...
      memref.store %e, %o0[%i0] : memref<1024xf32>
      memref.store %f, %o1[%i0] : memref<1024xf32>
    }
    %m1, %v1 = rt.call @k0(%m, %g, %b1, %v, %b2) : (...) -> (T, T)

Needs static mesh sizes (``fix-mesh-sizes``). Runs inside the regions of fused
collectives and ``coll.overlap`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll, dist, layout, rng, rt
from distir.dialects.dist import TensorType
from distir.dialects.fast import Kinds, walk
from distir.lowering.common import buffer_type, fail, local_shape, meshes, static_sizes
from distir.lowering.lower_buckets import attributes_key, body_key
from distir.passes.support import gc_paused, returns_split

PASS = "lower-to-kernels"
ELEMENTWISE = (dist.MapOp, dist.CastOp, dist.DropoutOp)
INDEXED = (dist.TransposeOp, dist.IotaOp, dist.ExtractSliceOp, dist.ConcatOp)
_ELEMENTWISE, _INDEXED = Kinds(*ELEMENTWISE), Kinds(*INDEXED)
"""Ops whose element comes from other indices of their operands (or from its own index):
a kernel of their own, whose loads compute the operand index."""
INDEX = IndexType()


def space_key(op: Operation) -> tuple:
    t = op.results[0].type
    assert isinstance(t, TensorType)
    return (t.get_shape(), layout.canonical(t.get_placements()), t.mesh_name, op.attributes.get("rt.stream"))


def float_width(t: Attribute) -> int:
    return t.bitwidth if isinstance(t, AnyFloat) else 0  # type: ignore[attr-defined]


def convert(value: SSAValue, to: Attribute, emit) -> SSAValue:
    """Emit the arith conversion of ``value`` to type ``to`` (numpy's astype semantics)."""
    src = value.type
    if src == to:
        return value
    if isinstance(src, AnyFloat) and isinstance(to, AnyFloat):
        cls = arith.ExtFOp if float_width(to) > float_width(src) else arith.TruncFOp
        return emit(cls(value, to)).results[0]
    if isinstance(src, IntegerType) and isinstance(to, AnyFloat):
        cls = arith.UIToFPOp if src.width.data == 1 else arith.SIToFPOp
        return emit(cls(value, to)).results[0]
    if isinstance(src, AnyFloat) and isinstance(to, IntegerType):
        if to.width.data == 1:
            zero = emit(arith.ConstantOp(FloatAttr(0.0, src))).results[0]
            return emit(arith.CmpfOp(value, zero, "une")).results[0]
        return emit(arith.FPToSIOp(value, to)).results[0]
    if isinstance(src, IntegerType) and isinstance(to, IntegerType):
        if to.width.data == 1:
            zero = emit(arith.ConstantOp(IntegerAttr(0, src))).results[0]
            return emit(arith.CmpiOp(value, zero, "ne")).results[0]
        if to.width.data > src.width.data:
            cls = arith.ExtUIOp if src.width.data == 1 else arith.ExtSIOp
            return emit(cls(value, to)).results[0]
        return emit(arith.TruncIOp(value, to)).results[0]
    raise ValueError(f"no conversion from {src} to {to}")


class KernelBuilder:
    """Builds the ``rt.kernel`` of one run of element-wise ops."""

    def __init__(self, run: list[Operation], sizes: tuple[int, ...]):
        self.run = run
        self.sizes = sizes
        self.space: TensorType = run[0].results[0].type  # type: ignore[assignment]
        self.local = local_shape(self.space, sizes)
        in_run = set(run)
        produced = {r for op in run for r in op.results}
        self.externals: list[SSAValue] = []
        for op in run:
            for v in op.operands:
                if v not in produced and v not in self.externals:
                    self.externals.append(v)
        self.escaping = [r for op in run for r in op.results if any(_top_user(u.operation, op) not in in_run for u in r.uses)]
        self.has_dropout = any(isinstance(op, (dist.DropoutOp, dist.IotaOp)) for op in run)
        # A chunk of a coll.overlap chain (lower-overlap): (dim, chunk index, chunks).
        self.chunk: tuple[int, int, int] | None = None
        for op in run:
            attr = op.attributes.get("rt.chunk")
            if isinstance(op, dist.DropoutOp) and attr is not None:
                self.chunk = tuple(a.value.data for a in attr.data)  # type: ignore[attr-defined]
        self.offset_dims = (
            [
                d
                for d in range(len(self.local))
                if layout.slicing_axes(self.space.get_placements(), d) or (self.chunk is not None and d == self.chunk[0])
            ]
            if self.has_dropout
            else []
        )

    def build(self, name: str) -> rt.KernelOp:
        param_types = [buffer_type(v.type, self.sizes) for v in self.externals]
        param_types += [INDEX] * len(self.offset_dims)
        param_types += [buffer_type(r.type, self.sizes) for r in self.escaping]
        block = Block(arg_types=[*param_types, *([INDEX] * len(self.local))])
        self.block = block
        args = list(block.args)
        n_ext, n_off = len(self.externals), len(self.offset_dims)
        self.ext_arg = dict(zip(self.externals, args[:n_ext]))
        self.off_arg = dict(zip(self.offset_dims, args[n_ext : n_ext + n_off]))
        out_args = args[n_ext + n_off : n_ext + n_off + len(self.escaping)]
        self.idx = args[len(args) - len(self.local) :]
        self.elem: dict[SSAValue, SSAValue] = {}
        self._zero: SSAValue | None = None
        self._linear: SSAValue | None = None
        for op in self.run:
            if isinstance(op, dist.MapOp):
                self._map(op)
            elif isinstance(op, dist.CastOp):
                self.elem[op.result] = convert(self.value(op.input), op.result.type.element_type, self.emit)  # type: ignore[attr-defined]
            elif isinstance(op, dist.DropoutOp):
                self._dropout(op)
            else:
                self._indexed(op)
        for r, out in zip(self.escaping, out_args):
            self.emit(memref.StoreOp.get(self.elem[r], out, self.idx))
        for arg, v in zip(args, self.externals):
            if v.name_hint:
                arg.name_hint = v.name_hint
        for arg, r in zip(out_args, self.escaping):
            arg.name_hint = f"{r.name_hint}_out" if r.name_hint else "out"
        for k, a in enumerate(self.idx):
            a.name_hint = f"i{k}"
        return rt.KernelOp.get(name, self.local, Region(block))

    def emit(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def zero(self) -> SSAValue:
        if self._zero is None:
            self._zero = self.emit(arith.ConstantOp.from_int_and_width(0, INDEX)).results[0]
        return self._zero

    def value(self, v: SSAValue) -> SSAValue:
        """The element of ``v`` at the current index: a group value, a load of an
        external tensor (broadcast as ``dist.map`` does), or a scalar parameter."""
        if v in self.elem:
            return self.elem[v]
        arg = self.ext_arg[v]
        if not isinstance(v.type, TensorType):
            self.elem[v] = arg
            return arg
        shape, rshape = v.type.get_shape(), self.space.get_shape()
        shift = len(rshape) - len(shape)
        indices = [self.zero() if shape[j] == 1 and rshape[j + shift] != 1 else self.idx[j + shift] for j in range(len(shape))]
        loaded = self.emit(memref.LoadOp.get(arg, indices)).results[0]
        if v.name_hint:
            loaded.name_hint = v.name_hint
        self.elem[v] = loaded
        return loaded

    def _map(self, op: dist.MapOp) -> None:
        body = op.body.block
        mapping: dict[SSAValue, SSAValue] = {a: self.value(v) for a, v in zip(body.args, op.inputs)}
        for inner in body.ops:
            if isinstance(inner, dist.YieldOp):
                for r, y in zip(op.outputs, inner.values):
                    self.elem[r] = mapping.get(y, y)
                continue
            new = inner.clone(value_mapper=mapping)
            self.emit(new)
            for a, b in zip(inner.results, new.results):
                mapping[a] = b

    # ------------------------------------------------------------------ indexed ops
    def const_index(self, n: int) -> SSAValue:
        return self.emit(arith.ConstantOp.from_int_and_width(n, INDEX)).results[0]

    def load(self, v: SSAValue, indices: list[SSAValue]) -> SSAValue:
        loaded = self.emit(memref.LoadOp.get(self.ext_arg[v], indices)).results[0]
        if v.name_hint:
            loaded.name_hint = v.name_hint
        return loaded

    def _indexed(self, op: Operation) -> None:
        """transpose: result index k is operand index perm[k]; extract_slice: operand
        index offset + stride * i (a dim sliced across ranks is taken whole); iota: the
        element's logical index along dim; concat: the element of the operand whose range
        along dim holds the index (every operand is read at a clamped index and a select
        picks)."""
        r = op.results[0]
        if isinstance(op, dist.TransposeOp):
            perm = op.option("perm")
            ind: list[SSAValue] = [self.zero()] * len(perm)
            for k, p in enumerate(perm):
                ind[p] = self.idx[k]
            self.elem[r] = self.load(op.input, ind)
        elif isinstance(op, dist.ExtractSliceOp):
            sliced = layout.sliced_dims(self.space.get_placements())
            ind = []
            for d, (o, st) in enumerate(zip(op.option("offsets"), op.option("strides"))):
                i = self.idx[d]
                if d not in sliced:
                    if st != 1:
                        i = self.emit(arith.MuliOp(i, self.const_index(st))).results[0]
                    if o:
                        i = self.emit(arith.AddiOp(i, self.const_index(o))).results[0]
                ind.append(i)
            self.elem[r] = self.load(op.input, ind)
        elif isinstance(op, dist.IotaOp):
            d = op.option("dim")
            i = self.idx[d]
            if d in self.off_arg:
                i = self.emit(arith.AddiOp(i, self.off_arg[d])).results[0]
            wide = self.emit(arith.IndexCastOp(i, i64)).results[0]
            self.elem[r] = convert(wide, self.space.element_type, self.emit)
        else:
            assert isinstance(op, dist.ConcatOp)
            d = op.option("dim")
            i = self.idx[d]
            start = 0
            picked: SSAValue | None = None
            for x in op.inputs:
                n = x.type.get_shape()[d]  # type: ignore[attr-defined]
                j = self.emit(arith.SubiOp(i, self.const_index(start))).results[0] if start else i
                j = self.emit(arith.MaxSIOp(j, self.zero())).results[0]
                j = self.emit(arith.MinSIOp(j, self.const_index(n - 1))).results[0]
                ind = list(self.idx)
                ind[d] = j
                val = self.load(x, ind)
                if picked is None:
                    picked = val
                else:
                    inside = self.emit(arith.CmpiOp(i, self.const_index(start), "sge")).results[0]
                    picked = self.emit(arith.SelectOp(inside, val, picked)).results[0]
                start += n
            assert picked is not None
            self.elem[r] = picked

    def linear(self) -> SSAValue:
        """The element's flat logical index (i64), for the random generator."""
        if self._linear is not None:
            return self._linear
        shape = list(self.space.get_shape())
        if self.chunk is not None:  # strides of the whole tensor the chunk was cut from
            shape[self.chunk[0]] *= self.chunk[2]
        acc: SSAValue | None = None
        stride = 1
        for d in reversed(range(len(shape))):
            i = self.idx[d]
            if d in self.off_arg:
                i = self.emit(arith.AddiOp(i, self.off_arg[d])).results[0]
            if stride != 1:
                c = self.emit(arith.ConstantOp.from_int_and_width(stride, INDEX)).results[0]
                i = self.emit(arith.MuliOp(i, c)).results[0]
            acc = i if acc is None else self.emit(arith.AddiOp(acc, i)).results[0]
            stride *= shape[d]
        if acc is None:
            acc = self.zero()
        self._linear = self.emit(arith.IndexCastOp(acc, i64)).results[0]
        self._linear.name_hint = "lin"
        return self._linear

    def _dropout(self, op: dist.DropoutOp) -> None:
        x = self.value(op.input)
        p, seed = op.option("p"), op.option("seed")
        elt = x.type
        cdt = elt if float_width(elt) >= 32 else dist_f32()
        wide = convert(x, cdt, self.emit)
        scale = self.emit(arith.ConstantOp(FloatAttr(1.0 / (1.0 - p), cdt))).results[0]
        scaled = self.emit(arith.MulfOp(wide, scale)).results[0]
        seed_c = self.emit(arith.ConstantOp.from_int_and_width(seed % (1 << 63), i64)).results[0]
        bits = self.emit(rt.RandomOp.make([seed_c, self.linear()], [i32])).results[0]
        thr = self.emit(arith.ConstantOp.from_int_and_width(rng.keep_threshold(p), i32)).results[0]
        keep = self.emit(arith.CmpiOp(bits, thr, "uge")).results[0]
        zero = self.emit(arith.ConstantOp(FloatAttr(0.0, cdt))).results[0]
        picked = self.emit(arith.SelectOp(keep, scaled, zero)).results[0]
        self.elem[op.result] = convert(picked, elt, self.emit)


def dist_f32() -> Attribute:
    from xdsl.dialects.builtin import f32

    return f32


def _top_user(user: Operation, sibling: Operation) -> Operation:
    """The ancestor of ``user`` in ``sibling``'s block (or ``user`` itself)."""
    block = sibling.parent_block()
    op: Operation | None = user
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()
    return op if op is not None else user


VIEWS = (dist.TakeSliceOp, dist.RemeshOp)
_VIEWS = Kinds(*VIEWS)
_HOLDS_BLOCKS = Kinds(func.FuncOp, coll.FusedCollectiveOp, coll.OverlapOp)


def run_key(builder: KernelBuilder) -> tuple | None:
    """What the kernel of a run is made of, before it is built: equal for runs whose
    kernels are equal (the same ops, attributes, types and operand wiring over the same
    space and sizes; externals by position). None for a run whose ops nest regions
    deeper than a map's body (not described: built every time)."""
    ids: dict[SSAValue, tuple] = {v: ("e", i, v.type) for i, v in enumerate(builder.externals)}
    ops = []
    for j, op in enumerate(builder.run):
        bodies = []
        for r in op.regions:
            for b in r.blocks:
                if any(o.regions for o in b.ops):
                    return None
                bodies.append(body_key(b))
        ops.append((op.name, attributes_key(op), tuple(r.type for r in op.results), tuple(ids[v] for v in op.operands), tuple(bodies)))
        for k, r in enumerate(op.results):
            ids[r] = ("r", j, k)
    return (builder.space, builder.sizes, tuple(builder.offset_dims), tuple(ids[r] for r in builder.escaping), tuple(ops))


def _runs(block: Block) -> list[tuple[list[Operation], list[Operation]]]:
    """Maximal runs of consecutive element-wise ops over one iteration space, each with
    the view ops (take_slice, remesh of values from before the run) found between its
    members: those move before the run, so that they do not split it."""
    runs: list[tuple[list[Operation], list[Operation]]] = []
    current: list[Operation] = []
    views: list[Operation] = []
    produced: set[SSAValue] = set()
    for op in block.ops:
        if _INDEXED(op):
            if current:
                runs.append((current, views))
            runs.append(([op], []))
            current, views, produced = [], [], set()
            continue
        if _ELEMENTWISE(op) and current and space_key(op) == space_key(current[0]):
            current.append(op)
            produced.update(op.results)
            continue
        if current and _VIEWS(op) and op.operands[0] not in produced:
            views.append(op)
            continue
        if current:
            runs.append((current, views))
        current, views = ([op], []) if _ELEMENTWISE(op) else ([], [])
        produced = set(op.results) if current else set()
    if current:
        runs.append((current, views))
    return runs


def _blocks(module: ModuleOp) -> list[Block]:
    """Blocks holding distributed computations: function bodies and the regions of fused
    collectives and ``coll.overlap``."""
    out = []
    for op in walk(module):
        if _HOLDS_BLOCKS(op):
            out.extend(b for r in op.regions for b in r.blocks)
    return out


@dataclass(frozen=True)
class LowerToKernelsPass(ModulePass):
    name = "lower-to-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        with gc_paused(), returns_split(op):
            self._apply(ctx, op)

    def _apply(self, ctx: Context, op: ModuleOp) -> None:
        mesh_ops = meshes(op)
        names = {k.kernel_name for k in op.ops if isinstance(k, rt.KernelOp)}
        counter = 0
        built: dict[tuple, str] = {}
        seen: dict[tuple, str] = {}
        for block in _blocks(op):
            for run, views in _runs(block):
                space: TensorType = run[0].results[0].type  # type: ignore[assignment]
                mesh = mesh_ops.get(space.mesh_name)
                if mesh is None:
                    fail(PASS, f"unknown mesh @{space.mesh_name}", run[0])
                sizes = static_sizes(PASS, mesh)
                builder = KernelBuilder(run, sizes)
                if not builder.escaping:
                    for dead in reversed(run):
                        block.erase_op(dead)
                    continue
                # a run alike to one lowered before (a model's layers) calls its
                # kernel, not built again
                alike = run_key(builder)
                name = seen.get(alike) if alike is not None else None  # (one hash of the key)
                if name is None:
                    while f"k{counter}" in names:
                        counter += 1
                    name = f"k{counter}"
                    try:
                        kernel = builder.build(name)
                    except ValueError as e:
                        fail(PASS, str(e), run[0])
                    # kernels computing alike over the same space are one kernel
                    key = (tuple(kernel.space), body_key(kernel.body.block))
                    if key in built:
                        name = built[key]
                    else:
                        built[key] = name
                        names.add(name)
                        op.body.block.add_op(kernel)
                    if alike is not None:
                        seen[alike] = name
                for view in views:
                    view.detach()
                    block.insert_op_before(view, run[0])
                offsets = self._offsets(builder, run[0], block)
                call = rt.CallOp.get(name, [*builder.externals, *offsets], [r.type for r in builder.escaping])
                if "rt.stream" in run[0].attributes:
                    call.attributes["rt.stream"] = run[0].attributes["rt.stream"]
                block.insert_op_before(call, run[0])
                for old, new in zip(builder.escaping, call.outputs):
                    new.name_hint = old.name_hint
                    old.replace_all_uses_with(new)
                for dead in reversed(run):
                    block.erase_op(dead)

    @staticmethod
    def _offsets(builder: KernelBuilder, before: Operation, block: Block) -> list[SSAValue]:
        """The logical index of the block's first element along each offset dim (dropout):
        ``rt.group_rank`` x block extent for a sliced dim, plus the chunk's position for
        the cut dim of a ``coll.overlap`` chunk. A chunk is rank-major (``rt.chunk =
        [dim, k, n]``: chunk k of this rank's block) or, when the chain slices the cut dim
        itself, chunk-major (``[dim, k, n, 1]``: this rank's block of chunk k)."""
        out = []
        t = builder.space
        for d in builder.offset_dims:
            axes = layout.slicing_axes(t.get_placements(), d)
            extent = builder.local[d]
            new: list[Operation] = []
            chunk = builder.chunk if builder.chunk is not None and builder.chunk[0] == d else None
            chunk_major = chunk is not None and len(chunk) > 3 and chunk[3] == 1
            if chunk is not None and not chunk_major:
                extent *= chunk[2]
            if axes and chunk is None and d in layout.uneven_dims(t.get_shape(), t.get_placements(), builder.sizes):
                new.append(rt.SpanOp.get(t.mesh_name, axes, t.get_shape()[d]))  # blocks of different sizes
            elif axes:
                g = rt.GroupRankOp.get(t.mesh_name, axes)
                c = arith.ConstantOp.from_int_and_width(extent, INDEX)
                new += [g, c, arith.MuliOp(g, c)]
            if chunk is not None:
                chunk_extent = t.get_shape()[d] if chunk_major else builder.local[d]
                new.append(arith.ConstantOp.from_int_and_width(chunk[1] * chunk_extent, INDEX))
                if axes:
                    new.append(arith.AddiOp(new[2], new[3]))
            for o in new:
                block.insert_op_before(o, before)
            new[-1].results[0].name_hint = f"off{d}"
            out.append(new[-1].results[0])
        return out
