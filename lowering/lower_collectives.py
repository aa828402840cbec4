"""``lower-collectives``: leave the dist/coll level. Every function becomes one SPMD
program over rank-local buffers: ``!dist.tensor`` values become ``memref`` buffers of
the rank's local shape, collectives become ``nccl.*`` calls, kernels (``rt.call``, from
``lower-to-kernels``) become ``rt.launch`` with output buffers, and the other local ops
become library calls (``rt.matmul``, ``rt.reduce_tensor``, ``rt.embedding_bag``).

Communicators: one per (mesh, axes) group kind, ``rt.comm @mesh axes [..]`` (NCCL's
``ncclCommSplit``, color = index on the other axes, key = index on the axes); a
collective over several axes, or over the factor axes of a view mesh, gets its own.
``dist.remesh``, ``dist.to_local``, ``dist.from_local`` and ``dist.take_slice`` move no
data (the same buffer; a block view); ``dist.reshape`` is an ``rt.view`` of the block.

Collectives: each one's descriptor (``dialects/collectives/``) emits its calls on the
buffers of one group through this lowering (``lower``, written against the ``Lowering``
interface of ``dialects/collectives/base.py``), e.g. ``coll.all_reduce`` becomes
``nccl.all_reduce`` and ``coll.all_to_all`` ``nccl.group_start``, N-1 send/recv pairs
and ``nccl.group_end`` (+ a copy to self). A result NCCL cannot write in place (a
strided buffer) is received into a contiguous one and copied, unless the descriptor
writes strided buffers itself (``LOWERS_INTO_VIEWS``).

Fused collectives become ``rt.fused { FIRST collective; region on this rank's values;
FINISH collective of the gathered results }``; a gathered result is computed straight
into this rank's block of the result buffer and all-gathered in place, a sliced result
stays where it was computed. Ops on values placed ``at<r>`` on some axis run under
``scf.if`` of ``rt.holds``. A result ``{dist.inplace = N}`` is written into argument N's
buffer: computed there directly when no later op reads argument N, copied at the end
otherwise; a kernel result that an all-gather gathers (plain, or a member of combined
all-gathers from ``combine-collectives``) is computed into this rank's block of the
gathered buffer, so the all-gather runs in place. ``coll.overlap`` chains run chunk by
chunk (see ``overlap_p2p.py``).

Blocks of different sizes (a sliced dim the ranks do not divide): buffers hold the
largest block, and a value whose dim a collective cuts into one block per member lives
in a padded buffer (``padding.py``): collectives run on equal blocks; reductions over
the dim, a matmul contracting it and an embedding's rows take the rank's part
(``rt.span``, ``rt.prefix``).

The lowered function keeps its dist-level signature in the attribute ``rt.dist_type``
(the runtime reads it to distribute inputs and assemble outputs; an argument's buffer
may be padded beyond its block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IndexType,
    MemRefType,
    ModuleOp,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, OpResult, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll, dist, layout, nccl, rt
from distir.dialects.collectives.base import Call, count, element, is_contiguous_block, shape
from distir.dialects.dist import TensorType
from distir.dialects.fast import walk
from distir.dialects.placements import REPLICATED, At, Placement
from distir.lowering.common import (
    buffer_type,
    fail,
    group_size,
    local_shape,
    meshes,
    static_sizes,
)
from distir.lowering.padding import cut, padding_plan
from distir.passes.support import gc_paused

PASS = "lower-collectives"
INDEX = IndexType()
DIST_TYPE = "rt.dist_type"
"""Function attribute holding the dist-level signature of a lowered function."""
ARENAS = "rt.arenas"
"""Function attribute listing, per extra trailing argument (an arena), the indices of the
arguments the runtime lays out side by side in it (``lower-buckets``' packs)."""

PRIMITIVES = (dist.ReduceOp, dist.SliceOp, dist.JoinOp, dist.ReplOp, dist.DropOp, dist.StoreOp, dist.LoadOp)


class FuncLowering:
    """Lowers one function (see the module doc)."""

    def __init__(self, module: ModuleOp, f: func.FuncOp):
        self.module = module
        self.f = f
        self.meshes = meshes(module)
        self._sizes: dict[str, tuple[int, ...]] = {}
        self._memrefs: dict[Attribute, Attribute] = {}
        self.buf: dict[SSAValue, SSAValue] = {}
        self.contig: dict[SSAValue, bool] = {}
        self.dest: dict[SSAValue, SSAValue] = {}
        self.cache: dict[Any, SSAValue] = {}
        self.blocks: list[Block] = []
        self.streams: dict[int, SSAValue] = {}
        self.on_stream: dict[SSAValue, SSAValue] = {}
        self.synced: set[tuple[SSAValue, SSAValue]] = set()
        self.assembled: dict[Operation, SSAValue] = {}
        self.assembled_of: dict[SSAValue, SSAValue] = {}
        self.extra_kernels: set[str] = {k.kernel_name for k in module.ops if isinstance(k, rt.KernelOp)}
        self.handlers: dict[type[Operation], Callable[[Any], None]] = {
            rt.CallOp: self._call,
            dist.MatmulOp: self._matmul,
            dist.ReduceTensorOp: self._reduce_tensor,
            dist.EmbeddingBagOp: self._embedding_bag,
            dist.ScatterAddOp: self._scatter_add,
            dist.SortOp: self._sort,
            dist.TakeSliceOp: self._take_slice,
            dist.RemeshOp: self._remesh,
            dist.ToLocalOp: self._remesh,
            dist.FromLocalOp: self._remesh,
            dist.ReshapeOp: self._reshape,
            coll.OverlapOp: self._overlap,
            rt.ChunkOp: self._chunk,
            rt.AssembleOp: self._assemble,
            rt.PackOp: self._pack,
            rt.UnpackOp: self._unpack,
            dist.ReduceOp: self._primitive,
            dist.SliceOp: self._primitive,
            dist.JoinOp: self._primitive,
            dist.ReplOp: self._primitive,
            dist.DropOp: self._primitive,
            dist.StoreOp: self._primitive,
            dist.LoadOp: self._primitive,
        }
        for cls in coll.collectives():
            self.handlers[cls] = self._collective_op
        for cls in coll.fused_collectives():
            self.handlers[cls] = self._fused

    # ------------------------------------------------------------------ utilities
    def fail(self, msg: str, op: Operation | None = None):
        fail(PASS, msg, op)

    def sizes(self, t: TensorType, op: Operation | None = None) -> tuple[int, ...]:
        got = self._sizes.get(t.mesh_name)  # the meshes stay as they are while the pass runs
        if got is None:
            mesh = self.meshes.get(t.mesh_name)
            if mesh is None:
                self.fail(f"unknown mesh @{t.mesh_name}", op)
            got = self._sizes[t.mesh_name] = static_sizes(PASS, mesh)
        return got

    def memref(self, t: Attribute) -> Attribute:
        got = self._memrefs.get(t)  # once per type: a model's layers repeat them
        if got is None:
            got = self._memrefs[t] = buffer_type(t, self.sizes(t) if isinstance(t, TensorType) else None)
        return got

    def emit(self, op: Operation) -> Operation:
        self.blocks[-1].add_op(op)
        return op

    def emit_entry(self, op: Operation) -> Operation:
        """Emit in the entry block (allocations, communicators, group ranks, constants),
        before whatever region is being built."""
        self.entry.add_op(op)
        return op

    def cached(self, key, make: Callable[[], Operation]) -> SSAValue:
        if key not in self.cache:
            self.cache[key] = self.emit_entry(make()).results[0]
        return self.cache[key]

    def const(self, n: int) -> SSAValue:
        return self.cached(("const", n), lambda: arith.ConstantOp.from_int_and_width(n, INDEX))

    def comm(self, mesh: str, axes: Sequence[int]) -> SSAValue:
        return self.cached(("comm", mesh, tuple(axes)), lambda: rt.CommOp.get(mesh, axes))

    def group_rank(self, mesh: str, axes: Sequence[int], shift: int = 0) -> SSAValue:
        n = group_size(static_sizes(PASS, self.meshes[mesh]), axes)
        shift %= n
        return self.cached(("grank", mesh, tuple(axes), shift), lambda: rt.GroupRankOp.get(mesh, axes, shift))

    def alloc(self, t: Attribute, hint: str | None = None) -> SSAValue:
        v = self.emit_entry(rt.AllocOp.make([], [t])).results[0]
        if hint:
            v.name_hint = hint
        self.contig[v] = True
        return v

    # ------------------------------------------------------------------ padded buffers
    def alloc_value(self, v: SSAValue, hint: str | None = None) -> SSAValue:
        """A new buffer for value ``v``: laid out padded where the padding plan says so
        (``padding.py``; the value is then the padded buffer's prefix)."""
        t = self.memref(v.type)
        pads = self.pads.get(v)
        if not pads:
            return self.alloc(t, hint)
        assert isinstance(t, MemRefType)
        padded = list(t.get_shape())
        for d, e in pads.items():
            padded[d] = e
        parent = self.alloc(MemRefType(t.element_type, padded), f"{hint}_padded" if hint else None)
        return self.prefix_view(parent, t.get_shape(), entry=True)

    def prefix_view(self, buf: SSAValue, dims: Sequence[int], entry: bool = False) -> SSAValue:
        """The view of ``buf``'s leading ``dims`` elements (``rt.prefix`` per cut dim);
        remembers ``buf`` as the view's padded buffer."""
        view = buf
        for d, (have, want) in enumerate(zip(shape(buf), dims)):
            if have == want:
                continue
            new = list(shape(view))
            new[d] = want
            op = rt.PrefixOp.make([view], [MemRefType(element(buf), new)], dim=d)
            nxt = (self.emit_entry(op) if entry else self.emit(op)).results[0]
            self.contig[nxt] = self.contig.get(view, True) and all(x == 1 for x in new[:d])
            view = nxt
        if view is not buf:
            self.padded_of[view] = buf
        return view

    def padded_parent(self, buf: SSAValue, dim: int, extent: int) -> SSAValue | None:
        """The padded buffer ``buf`` is the prefix of, when it differs from ``buf`` only
        in holding ``extent`` elements along ``dim``."""
        p = self.padded_of.get(buf)
        if p is None:
            return None
        a, b = shape(p), shape(buf)
        if a[dim] != extent or any(x != y for k, (x, y) in enumerate(zip(a, b)) if k != dim):
            return None
        return p

    def span(self, t: TensorType, dim: int) -> tuple[SSAValue, SSAValue]:
        """(offset, count) of this rank's block of ``t``'s dim ``dim`` (``rt.span``)."""
        axes = layout.slicing_axes(t.get_placements(), dim)
        size = t.get_shape()[dim]
        if not axes:
            return self.const(0), self.const(size)
        key = ("span", t.mesh_name, tuple(axes), size)
        if key not in self.cache:
            op = self.emit_entry(rt.SpanOp.get(t.mesh_name, axes, size))
            self.cache[key] = op.results[0]
            self.cache[key + ("len",)] = op.results[1]
        return self.cache[key], self.cache[key + ("len",)]

    def valid(self, buf: SSAValue, t: TensorType, dim: int) -> SSAValue:
        """This rank's part of its padded buffer of ``t`` along ``dim`` (a ``?`` dim)
        where the ranks do not divide the dim, else ``buf``."""
        if dim not in layout.uneven_dims(t.get_shape(), t.get_placements(), self.sizes(t)):
            return buf
        new = list(shape(buf))
        new[dim] = rt.DYNAMIC
        v = self.emit(rt.PrefixOp.make([buf, self.span(t, dim)[1]], [MemRefType(element(buf), new)], dim=dim)).results[0]
        self.contig[v] = self.contig.get(buf, True) and all(x == 1 for x in new[:dim])
        return v

    def laid_out(self, buf: SSAValue, t: TensorType, dim: int, counts: Sequence[int]) -> SSAValue:
        """``buf`` (a value of type ``t``) as a buffer of one equal block per member of a
        group over axes of ``counts`` ranks along ``dim``, each holding the member's
        block: itself where the ranks divide it, its padded buffer, else a padded copy."""
        extent, ok = cut(t, dim, self.sizes(t), counts)
        if ok and shape(buf)[dim] == extent:  # not aligned: blocks move even when the extents agree
            return buf
        if ok:
            parent = self.padded_parent(buf, dim, extent)
            if parent is not None:
                return parent
        padded = list(shape(buf))
        padded[dim] = extent
        tmp = self.alloc(MemRefType(element(buf), padded))
        if ok:
            self.copy(buf, self.prefix_view(tmp, shape(buf), entry=True))
        else:
            self.emit(rt.PadBlocksOp.make([buf, tmp, self.span(t, dim)[1], self.stream], [], dim=dim, counts=list(counts)))
        return tmp

    def receiving(self, buf: SSAValue, t: TensorType, dim: int, counts: Sequence[int], after: list[Callable[[], None]]) -> SSAValue:
        """The buffer a collective over a group of ``counts`` ranks per axis writes one
        equal block per member along ``dim`` into, for a result of type ``t`` whose
        buffer is ``buf``: ``buf`` itself, its padded buffer, else a padded one whose
        blocks ``after`` moves into ``buf``."""
        extent, ok = cut(t, dim, self.sizes(t), counts)
        if ok and shape(buf)[dim] == extent:  # not aligned: blocks move even when the extents agree
            return buf
        if ok:
            parent = self.padded_parent(buf, dim, extent)
            if parent is not None:
                return parent
        padded = list(shape(buf))
        padded[dim] = extent
        tmp = self.alloc(MemRefType(element(buf), padded))
        if ok:
            view = self.prefix_view(tmp, shape(buf), entry=True)
            after.append(lambda: self.copy(view, buf))
        else:
            length = self.span(t, dim)[1]
            after.append(lambda: self.emit(rt.UnpadBlocksOp.make([tmp, buf, length, self.stream], [], dim=dim, counts=list(counts))))
        return tmp

    def gather_slot(self, recv: SSAValue, t: TensorType, axes: Sequence[int], dim: int) -> SSAValue | None:
        """This rank's block of the buffer an all-gather over ``axes`` writes (result
        ``recv`` of type ``t``, gathered along ``dim``), where a kernel can compute its
        block in place: None when that buffer is not ``recv``'s own (padded) one or its
        blocks are not contiguous."""
        n = group_size(self.sizes(t), axes)
        extent, ok = cut(t, dim, self.sizes(t), [self.sizes(t)[a] for a in axes])
        base = (recv if shape(recv)[dim] == extent else self.padded_parent(recv, dim, extent)) if ok else None
        if base is None or not is_contiguous_block(shape(base), dim) or not self.contig.get(base, True):
            return None
        return self.block(base, self.group_rank(t.mesh_name, axes), dim, n)

    def block(self, buf: SSAValue, index: SSAValue, dim: int, count: int) -> SSAValue:
        key = ("block", id(self.blocks[-1]), buf, index, dim, count)
        if key in self.cache:
            return self.cache[key]
        t = buf.type
        assert isinstance(t, MemRefType)
        shape = list(t.get_shape())
        shape[dim] //= count
        v = self.emit(rt.BlockOp.make([buf, index], [MemRefType(t.element_type, shape)], dim=dim, count=count)).results[0]
        self.contig[v] = self.contig.get(buf, True) and is_contiguous_block(t.get_shape(), dim)
        self.cache[key] = v
        return v

    def copy(self, src: SSAValue, dst: SSAValue) -> None:
        self.emit(rt.CopyOp.make([src, dst, self.stream], []))

    def is_contiguous(self, buf: SSAValue) -> bool:
        return self.contig.get(buf, True)

    def kernel(self, name: str, make: Callable[[], Operation]) -> str:
        """The kernel ``@name`` that ``make`` builds, added to the module once."""
        if name not in self.extra_kernels:
            self.module.body.block.add_op(make())
            self.extra_kernels.add(name)
        return name

    def contiguous(self, buf: SSAValue) -> SSAValue:
        """``buf`` itself when contiguous, else a contiguous copy of it."""
        if self.contig.get(buf, True):
            return buf
        tmp = self.alloc(buf.type)
        self.copy(buf, tmp)
        return tmp

    def input(self, v: SSAValue) -> SSAValue:
        if v not in self.buf:
            self.fail(f"value {v.name_hint or ''} has no buffer (it is defined by an op that cannot be lowered)")
        return self.buf[v]

    def out(self, v: SSAValue, hint: str | None = None) -> SSAValue:
        """The buffer a result is computed into: its pre-assigned destination, its block
        of an ``rt.assemble``'s buffer, or a new one."""
        if v in self.dest:
            return self.dest.pop(v)
        for use in v.uses:
            if isinstance(use.operation, rt.AssembleOp):
                view = self.assembled_block(use.operation, use.index)
                self.assembled_of[v] = view
                return view
        return self.alloc_value(v, hint or v.name_hint)

    def assembled_block(self, asm: rt.AssembleOp, index: int) -> SSAValue:
        if asm not in self.assembled:
            self.assembled[asm] = self.out(asm.result)
        full = self.assembled[asm]
        return self.block(full, self.const(index), asm.dim.value.data, len(asm.chunks))

    def guard_placements(self, t: TensorType, skip: Sequence[int] = ()) -> list[Placement] | None:
        # Only at<r> decides who holds a value at run time (an unplaced value is the
        # logical value, present on every rank), so every other axis guards as replicated.
        ps = [p if isinstance(p, At) and a not in skip else REPLICATED for a, p in enumerate(t.get_placements())]
        return ps if any(isinstance(p, At) for p in ps) else None

    def guarded(self, t: Attribute, body: Callable[[], None], skip: Sequence[int] = ()) -> None:
        """Run ``body``'s emission under ``scf.if`` on the ranks holding values placed
        like ``t`` (ignoring ``skip`` axes), or directly when ``t`` has no ``at<r>``."""
        ps = self.guard_placements(t, skip) if isinstance(t, TensorType) else None
        if ps is None:
            body()
            return
        key = ("holds", t.mesh_name, layout.canonical(ps))  # type: ignore[union-attr]
        cond = self.cached(key, lambda: rt.HoldsOp.get(t.mesh_name, ps))  # type: ignore[union-attr]
        inner = Block()
        self.blocks.append(inner)
        body()
        self.blocks.pop()
        inner.add_op(scf.YieldOp())
        self.emit(scf.IfOp(cond, [], Region(inner)))

    def stream_n(self, n: int) -> SSAValue:
        if n not in self.streams:
            s = self.emit_entry(rt.StreamOp.get(n)).results[0]
            s.name_hint = "s" if n == 0 else f"s{n}"
            self.streams[n] = s
        return self.streams[n]

    def order_streams(self, values) -> None:
        """Make the current stream wait (one event per stream) for the streams that
        produced ``values``."""
        sources: list[SSAValue] = []
        for v in values:
            src = self.on_stream.get(v)
            if src is None or src is self.stream or (v, self.stream) in self.synced:
                continue
            self.synced.add((v, self.stream))
            if src not in sources:
                sources.append(src)
        for src in sources:
            e = self.emit(rt.EventRecordOp.make([src], [rt.EVENT])).results[0]
            self.emit(rt.StreamWaitOp.make([self.stream, e], []))

    # ------------------------------------------------------------------ driver
    def run(self) -> func.FuncOp:
        f = self.f
        old_block = f.body.block
        self.pads = padding_plan(f, self.sizes)
        self.padded_of: dict[SSAValue, SSAValue] = {}
        arg_types = [self.memref(a.type) for a in old_block.args]
        logical = list(arg_types)
        for k, a in enumerate(old_block.args):
            if a in self.pads:
                t = arg_types[k]
                assert isinstance(t, MemRefType)
                padded = list(t.get_shape())
                for d, e in self.pads[a].items():
                    padded[d] = e
                arg_types[k] = MemRefType(t.element_type, padded)
        res_types = [self.memref(t) for t in f.function_type.outputs.data]
        arenas = self._arenas(old_block)
        arena_types = [self.memref(p.result.type) for p, _ in arenas]
        arena_logical = list(arena_types)
        for k, (p, _) in enumerate(arenas):
            if p.result in self.pads:  # one dim (a bucket is 1-d)
                arena_types[k] = MemRefType(arena_types[k].element_type, [self.pads[p.result][0]])  # type: ignore[attr-defined]
        self.entry = Block(arg_types=[*arg_types, *arena_types])
        self.blocks = [self.entry]
        for old, new, t in zip(old_block.args, self.entry.args, logical):
            new.name_hint = old.name_hint
            self.contig[new] = True
            self.buf[old] = new if new.type == t else self.prefix_view(new, t.get_shape(), entry=True)  # type: ignore[attr-defined]
        self.arena_members: dict[SSAValue, list[int]] = {}
        self.arena_of: dict[tuple[int, ...], tuple[SSAValue, SSAValue]] = {}
        for k, (p, idx) in enumerate(arenas):
            a = self.entry.args[len(arg_types) + k]
            a.name_hint = f"arena{k}"
            self.contig[a] = True
            self.buf[p.result] = a if a.type == arena_logical[k] else self.prefix_view(a, arena_logical[k].get_shape(), entry=True)  # type: ignore[attr-defined]
            self.arena_members[self.buf[p.result]] = idx
            self.arena_of[tuple(idx)] = (self.buf[p.result], p.result)
        self.stream = self.stream_n(0)
        self.inplace = self._inplace_results()
        self._assign_inplace_dests()
        self._assign_gather_dests()
        for op in list(old_block.ops):
            if isinstance(op, func.ReturnOp):
                self._return(op, res_types)
            else:
                self.lower_op(op)
        arg_attrs = f.arg_attrs
        if arenas and arg_attrs is not None:
            arg_attrs = ArrayAttr([*arg_attrs.data, *(DictionaryAttr({}) for _ in arenas)])
        new = func.FuncOp(
            f.sym_name.data,
            ([*arg_types, *arena_types], res_types),
            Region(self.entry),
            f.sym_visibility,
            arg_attrs=arg_attrs,
            res_attrs=f.res_attrs,
        )
        new.attributes[DIST_TYPE] = f.function_type
        if arenas:
            new.attributes[ARENAS] = ArrayAttr([DenseArrayBase.from_list(i64, idx) for _, idx in arenas])
        for k, v in f.attributes.items():
            new.attributes.setdefault(k, v)
        return new

    def lower_op(self, op: Operation) -> None:
        attr = op.attributes.get("rt.stream")
        if attr is None:
            self._lower_op(op)
            return
        saved = self.stream
        self.stream = self.stream_n(attr.value.data)  # type: ignore[attr-defined]
        try:
            self._lower_op(op)
        finally:
            self.stream = saved

    def _lower_op(self, op: Operation) -> None:
        self.order_streams([v for inner in (walk(op) if op.regions else (op,)) for v in inner.operands])
        handler = self.handlers.get(type(op))
        if handler is not None:
            handler(op)
            for r in op.results:
                self.on_stream.setdefault(r, self.stream)
            return
        if isinstance(op, (dist.MapOp, dist.CastOp, dist.DropoutOp)):
            self.fail("run 'lower-to-kernels' first (the default lowering pipeline does)", op)
        if any(isinstance(v.type, TensorType) for v in (*op.operands, *op.results)) or op.regions:
            self.fail("cannot be lowered to the runtime", op)
        # Scalar and index computations (rt.group_rank, arith on scalars): keep them.
        new = op.clone(value_mapper=dict(self.buf))
        self.emit(new)
        for a, b in zip(op.results, new.results):
            self.buf[a] = b

    # ------------------------------------------------------------------ in-place results
    def _inplace_results(self) -> dict[int, int]:
        out = {}
        if self.f.res_attrs is None:
            return out
        for i, attrs in enumerate(self.f.res_attrs.data):
            a = attrs.data.get("dist.inplace")  # type: ignore[union-attr]
            if a is not None:
                out[i] = a.value.data  # type: ignore[attr-defined]
        return out

    def _arenas(self, block: Block) -> list[tuple[rt.PackOp, list[int]]]:
        """Packs of distinct function arguments (``lower-buckets``): each becomes one
        buffer the runtime lays those arguments out in (an extra function argument; the
        ``rt.arenas`` attribute lists its members), so that packing them copies nothing."""
        out: list[tuple[rt.PackOp, list[int]]] = []
        claimed: set[int] = set()
        for op in block.ops:
            if not isinstance(op, rt.PackOp):
                continue
            members = list(op.members)
            if not all(isinstance(v, BlockArgument) and v.owner is block for v in members):
                continue
            idx = [v.index for v in members]  # type: ignore[attr-defined]
            if len(set(idx)) != len(idx) or claimed & set(idx):
                continue
            claimed.update(idx)
            out.append((op, idx))
        return out

    def _assign_inplace_dests(self) -> None:
        block = self.f.body.block
        ret = block.last_op
        assert isinstance(ret, func.ReturnOp)
        order = {op: k for k, op in enumerate(block.ops)}
        returned = list(ret.arguments)  # (each access to an op's named operands builds the list)
        self._assign_bucket_dests(block, returned, order)
        for i, n in self.inplace.items():
            v = returned[i]
            arg = block.args[n]
            producer = v.owner
            if not isinstance(producer, Operation) or producer.parent_block() is not block:
                continue
            if not isinstance(producer, (rt.CallOp, coll.FusedCollectiveOp, coll.CollectiveOp)):
                continue
            if self._safe_inplace(arg, v, producer, order):
                self.dest[v] = self.buf[arg]

    def _assign_bucket_dests(self, block: Block, returned: list[SSAValue], order: dict[Operation, int]) -> None:
        """A bucket whose members are all results written in place into the arguments of
        one arena is computed straight into that arena (when that is safe, as for one
        value)."""
        by_unpack: dict[rt.UnpackOp, dict[int, int]] = {}
        for i, n in self.inplace.items():
            v = returned[i]
            u = v.owner
            if isinstance(u, rt.UnpackOp) and u.parent_block() is block:
                by_unpack.setdefault(u, {})[v.index] = n  # type: ignore[attr-defined]
        for u, members in by_unpack.items():
            if len(members) != len(u.members):
                continue
            idx = tuple(members[k] for k in range(len(u.members)))
            arena = self.arena_of.get(idx)
            if arena is None:
                continue
            a, packed = arena
            if any(block.args[n].get_unique_use() is None for n in idx):
                continue  # an argument read elsewhere too
            b = u.input
            producer = b.owner
            if not isinstance(producer, (rt.CallOp, coll.FusedCollectiveOp, coll.CollectiveOp)) or producer.parent_block() is not block:
                continue
            if self._safe_inplace(packed, b, producer, order):
                self.dest[b] = a

    def _safe_inplace(self, arg: SSAValue, v: SSAValue, producer: Operation, order: dict[Operation, int]) -> bool:
        """Whether ``v`` can be computed straight into ``arg``'s buffer: no op after its
        producer reads ``arg``, and the producer reads it element by element at the
        positions it writes, before it writes them."""
        inner_uses = []
        for use in arg.uses:
            top = use.operation
            while top.parent_op() is not self.f:
                top = top.parent_op()  # type: ignore[assignment]
            if top is producer:
                inner_uses.append(use.operation)
            elif isinstance(top, func.ReturnOp) or order[top] > order[producer]:
                return False
            elif isinstance(top, (dist.TakeSliceOp, dist.RemeshOp)) and self._view_read_after(top, producer, order):
                return False
        if isinstance(producer, rt.CallOp):
            return all(_same_space(producer, arg) for _ in inner_uses)
        if isinstance(producer, coll.CollectiveOp):
            # A collective writes its whole result: only when it does not read arg.
            return not inner_uses
        if not isinstance(producer, coll.FusedCollectiveOp):
            return False
        if _passed_through(producer, v) is not None:
            # a member of combined plain collectives (``combine-collectives``): written
            # whole by its collective, as a plain one
            return not inner_uses
        region = producer.body.block
        term = region.last_op
        assert isinstance(term, coll.YieldOp)
        y = term.values[list(producer.outputs).index(v)]
        writer = y.owner
        if not isinstance(writer, rt.CallOp) or writer.parent_block() is not region:
            return False
        pos = {op: k for k, op in enumerate(region.ops)}
        for user in inner_uses:
            if user.parent_block() is not region:
                return False
            if isinstance(user, rt.CallOp):
                if pos[user] > pos[writer] or not _same_space(user, arg):
                    return False
            elif isinstance(user, dist.TakeSliceOp) and producer.FINISH is coll.AllGatherOp:
                for u in user.result.uses:
                    call = u.operation
                    if not isinstance(call, rt.CallOp) or call.parent_block() is not region:
                        return False
                    if pos[call] > pos[writer] or not _same_space(call, user.result):
                        return False
            else:
                return False
        return True

    def _view_read_after(self, view: Operation, producer: Operation, order: dict[Operation, int]) -> bool:
        """Whether a view of an argument (``take_slice``, ``remesh``: the same buffer) is
        read after ``producer`` or returned, so that the argument's old contents are still
        needed after it."""
        pending = list(view.results[0].uses)
        while pending:
            user = pending.pop().operation
            top = user
            while top.parent_op() is not self.f:
                top = top.parent_op()  # type: ignore[assignment]
            if top is producer:
                continue
            if isinstance(top, func.ReturnOp) or order[top] > order[producer]:
                return True
            if isinstance(top, (dist.TakeSliceOp, dist.RemeshOp)):
                pending += list(top.results[0].uses)
        return False

    def _assign_gather_dests(self) -> None:
        """A kernel result that a ``coll.all_gather`` of the same block gathers is computed
        straight into this rank's block of the all-gather's buffer, so the all-gather runs
        in place and copies nothing to this rank itself (as the gathered results of a
        fused collective are). When that buffer is an argument's (an in-place result), no
        op but the kernel may read the argument after the kernel's position, and the
        kernel only at the positions it writes."""
        block = self.f.body.block
        order = {op: k for k, op in enumerate(block.ops)}
        for x, result, axes in self._gathers(block):
            call = x.owner
            xt = x.type
            if not isinstance(call, rt.CallOp) or call.parent_block() is not block or x in self.dest:
                continue
            assert isinstance(xt, TensorType)
            if self.guard_placements(xt) is not None:
                continue
            d = layout.innermost_slicing(xt.get_placements(), axes)
            recv_t = self.memref(result.type)
            if d is None or not is_contiguous_block(recv_t.get_shape(), d):  # type: ignore[attr-defined]
                continue
            recv = self.dest.get(result)
            if recv is not None:
                arg = next((a for a, b in self.buf.items() if b is recv and isinstance(a, BlockArgument)), None)
                if arg is None or not self._only_read_in_place(arg, call, axes, d, order):
                    continue
            else:
                recv = self.alloc_value(result, result.name_hint)
                self.dest[result] = recv
            slot = self.gather_slot(recv, result.type, axes, d)  # type: ignore[arg-type]
            if slot is not None:
                self.dest[x] = slot

    @staticmethod
    def _gathers(block: Block) -> list[tuple[SSAValue, SSAValue, list[int]]]:
        """(input, result, axes) of every all-gather of ``block``: the plain ones and the
        members of combined all-gathers (``combine-collectives``)."""
        out = []
        for op in block.ops:
            if isinstance(op, coll.AllGatherOp):
                out.append((op.input, op.result, list(op.axes)))
            elif isinstance(op, coll.FusedAllGatherOp):
                axes = list(op.option("axes") or (0,))
                for res in op.outputs:
                    x = _passed_through(op, res)
                    if x is not None:
                        out.append((x, res, axes))
        return out

    def _only_read_in_place(self, arg: SSAValue, call: rt.CallOp, axes: list[int], dim: int, order: dict[Operation, int]) -> bool:
        """Whether, from ``call`` on, only ``call`` reads ``arg`` (through views too), and
        only through ``dist.take_slice`` blocks over ``axes`` along ``dim`` at the
        positions it writes."""
        pending = [(use, arg) for use in arg.uses]
        while pending:
            use, value = pending.pop()
            user = use.operation
            if isinstance(user, (dist.TakeSliceOp, dist.RemeshOp)):
                pending += [(u, user.result) for u in user.result.uses]
                continue
            top = user
            while top.parent_op() is not self.f:
                top = top.parent_op()  # type: ignore[assignment]
            if top is call:
                view = value.owner
                if not (
                    isinstance(view, dist.TakeSliceOp)
                    and view.input is arg
                    and [view.option("axis")] == axes
                    and view.option("dim") == dim
                    and _same_space(call, value)
                ):
                    return False
            elif isinstance(top, (func.ReturnOp, coll.OverlapOp)) or order[top] >= order[call]:
                return False
        return True

    def _return(self, op: func.ReturnOp, res_types: list[Attribute]) -> None:
        values = []
        for i, v in enumerate(op.arguments):
            b = self.input(v)
            if i in self.inplace:
                arg = self.buf[self.f.body.block.args[self.inplace[i]]]
                if b is not arg:
                    self.guarded(v.type, lambda b=b, arg=arg: self.copy(b, arg))
                b = arg
            values.append(b)
        for n in sorted(self.streams):
            self.emit(rt.StreamSyncOp.make([self.streams[n]], []))
        self.emit(func.ReturnOp(*values))

    # ------------------------------------------------------------------ local ops
    def _call(self, op: rt.CallOp) -> None:
        args = [self.input(v) for v in op.args]
        outs = [self.out(r) for r in op.outputs]
        t = op.outputs[0].type if op.outputs else None
        self.guarded(t, lambda: self.emit(rt.LaunchOp.get(op.kernel_name, [*args, *outs, self.stream])))
        for r, b in zip(op.outputs, outs):
            self.buf[r] = b

    def _matmul(self, op: dist.MatmulOp) -> None:
        a, b = self.input(op.lhs), self.input(op.rhs)
        at, bt = op.lhs.type, op.rhs.type
        assert isinstance(at, TensorType) and isinstance(bt, TensorType)
        a, b = self.valid(a, at, at.rank - 1), self.valid(b, bt, bt.rank - 2)  # a contracted dim: no padding
        c = self.out(op.result)
        self.guarded(op.result.type, lambda: self.emit(rt.MatmulOp.make([a, b, c, self.stream], [])))
        self.buf[op.result] = c

    def _reduce_tensor(self, op: dist.ReduceTensorOp) -> None:
        a = self.input(op.input)
        t = op.input.type
        assert isinstance(t, TensorType)
        dims = op.option("dims")
        options = {"op": op.option("op"), "dims": dims}
        uneven = [d for d in dims if d in layout.uneven_dims(t.get_shape(), t.get_placements(), self.sizes(t))]
        for d in uneven:  # a reduced dim: no padding
            a = self.valid(a, t, d)
        if uneven and op.option("op") == "avg":
            options["count"] = float(layout.avg_count(t.get_shape(), t.get_placements(), self.sizes(t), dims))
        c = self.out(op.result)
        self.guarded(op.result.type, lambda: self.emit(rt.ReduceTensorOp.make([a, c, self.stream], [], **options)))
        self.buf[op.result] = c

    def embedding_row0(self, op: dist.EmbeddingBagOp) -> SSAValue:
        """The global number of the first table row this rank holds."""
        table_t: TensorType = op.table.type  # type: ignore[assignment]
        row_dim = table_t.rank - 2
        axes = layout.slicing_axes(table_t.get_placements(), row_dim)
        if not axes:
            return self.const(0)
        if row_dim in layout.uneven_dims(table_t.get_shape(), table_t.get_placements(), self.sizes(table_t)):
            return self.span(table_t, row_dim)[0]
        rows = local_shape(table_t, self.sizes(table_t))[row_dim]
        g = self.group_rank(table_t.mesh_name, axes)
        return self.cached(("row0", g, rows), lambda: arith.MuliOp(g, self.const(rows)))

    def _embedding_bag(self, op: dist.EmbeddingBagOp) -> None:
        t, i = self.input(op.table), self.input(op.indices)
        tt = op.table.type
        assert isinstance(tt, TensorType)
        t = self.valid(t, tt, tt.rank - 2)  # rows past this rank's block are not its rows
        c = self.out(op.result)
        row0 = self.embedding_row0(op)
        self.guarded(
            op.result.type,
            lambda: self.emit(rt.EmbeddingBagOp.make([t, i, row0, c, self.stream], [], mode=op.option("mode"))),
        )
        self.buf[op.result] = c

    def _scatter_add(self, op: dist.ScatterAddOp) -> None:
        """``rt.scatter_add`` into this rank's block of the result, whose first row is
        global row ``row0`` (0 unless the result is sliced on its rows)."""
        i, u = self.input(op.indices), self.input(op.updates)
        c = self.out(op.result)
        t: TensorType = op.result.type  # type: ignore[assignment]
        row_dim = t.rank - 2
        axes = layout.slicing_axes(t.get_placements(), row_dim)
        rows_of = c
        if axes and row_dim in layout.uneven_dims(t.get_shape(), t.get_placements(), self.sizes(t)):
            row0 = self.span(t, row_dim)[0]
            rows_of = self.valid(c, t, row_dim)  # the padding's rows are other ranks' (nested) or none
        elif axes:
            rows = local_shape(t, self.sizes(t))[row_dim]
            g = self.group_rank(t.mesh_name, axes)
            row0 = self.cached(("row0", g, rows), lambda: arith.MuliOp(g, self.const(rows)))
        else:
            row0 = self.const(0)
        self.guarded(t, lambda: self.emit(rt.ScatterAddOp.make([i, u, row0, rows_of, self.stream], [])))
        self.buf[op.result] = c

    def _sort(self, op: dist.SortOp) -> None:
        ins = [self.input(x) for x in op.inputs]
        outs = [self.out(r) for r in op.outputs]
        self.guarded(op.outputs[0].type, lambda: self.emit(rt.SortOp.make([*ins, *outs, self.stream], [], dim=op.option("dim"))))
        for r, b in zip(op.outputs, outs):
            self.buf[r] = b

    def _take_slice(self, op: dist.TakeSliceOp) -> None:
        t: TensorType = op.input.type  # type: ignore[assignment]
        axis, dim = op.option("axis"), op.option("dim")
        n = self.sizes(t)[axis]
        base = self.laid_out(self.input(op.input), t, dim, [n])
        self.buf[op.result] = self.block(base, self.group_rank(t.mesh_name, [axis]), dim, n)

    def _pack(self, op: rt.PackOp) -> None:
        """A bucket: the arena of its arguments, else a new buffer the members are
        copied into."""
        if op.result in self.buf:
            return
        full = self.out(op.result)
        for m, off in zip(op.members, op.offsets()):
            self.copy(self.input(m), self.emit(rt.ViewOp.get(full, off, self.memref(m.type))).results[0])
        self.buf[op.result] = full

    def _unpack(self, op: rt.UnpackOp) -> None:
        """Members of a bucket: the arguments laid out in it (an arena), else views."""
        full = self.input(op.input)
        args = self.arena_members.get(full)
        for k, (m, off) in enumerate(zip(op.members, op.offsets())):
            if not m.uses:
                continue
            if args is not None:
                self.buf[m] = self.entry.args[args[k]]
            else:
                self.buf[m] = self.emit(rt.ViewOp.get(full, off, self.memref(m.type))).results[0]
            self.contig[self.buf[m]] = True

    def _remesh(self, op: dist.RemeshOp | dist.ToLocalOp | dist.FromLocalOp) -> None:
        """No data moves: the result is the operand's buffer (same per-rank shape)."""
        self.buf[op.result] = self.input(op.input)

    def _reshape(self, op: dist.ReshapeOp) -> None:
        """Each rank's block in the new shape: a view of it (of a contiguous copy when the
        block is a strided view)."""
        src = self.contiguous(self.input(op.input))
        view = self.emit(rt.ViewOp.get(src, 0, self.memref(op.result.type))).results[0]
        self.contig[view] = True
        self.buf[op.result] = view

    def _chunk(self, op: rt.ChunkOp) -> None:
        x, k = op.input
        self.buf[op.result] = self.block(self.input(x), self.input(k), op.dim.value.data, op.count.value.data)
        if x in self.on_stream:
            self.on_stream[op.result] = self.on_stream[x]

    def _assemble(self, op: rt.AssembleOp) -> None:
        if op not in self.assembled:
            self.assembled[op] = self.out(op.result)
        full = self.assembled[op]
        for i, c in enumerate(op.chunks):
            if self.input(c) is self.assembled_of.get(c):
                continue
            self.order_streams([c])
            self.copy(self.input(c), self.block(full, self.const(i), op.dim.value.data, len(op.chunks)))
        self.buf[op.result] = full
        streams = {self.on_stream.get(c) for c in op.chunks} - {None}
        self.on_stream[op.result] = streams.pop() if len(streams) == 1 else self.stream

    def _primitive(self, op: dist.PrimitiveOp) -> None:
        """Functional primitives left after ``form-collectives``. An ``unplaced`` value is
        kept as the logical value on every rank (as the interpreter files it), so: drop,
        repl and store move nothing, slice takes this rank's block, reduce is an
        all-reduce, join an all-gather and load a broadcast on the primitive's axis."""
        x = op.input
        axis = op.option("axis")
        t: TensorType = x.type  # type: ignore[assignment]
        if isinstance(op, (dist.DropOp, dist.ReplOp, dist.StoreOp)):
            self.buf[op.result] = self.input(x)
        elif isinstance(op, dist.SliceOp):
            n = self.sizes(t)[axis]
            base = self.laid_out(self.input(x), t, op.option("dim"), [n])
            self.buf[op.result] = self.block(base, self.group_rank(t.mesh_name, [axis]), op.option("dim"), n)
        else:
            cls = {dist.ReduceOp: coll.AllReduceOp, dist.JoinOp: coll.AllGatherOp, dist.LoadOp: coll.BroadcastOp}[type(op)]
            options = {"axes": [axis], "op": op.option("op") if isinstance(op, dist.ReduceOp) else None}
            self.buf[op.result] = self.collective(cls, x, op.result.type, options, self.out(op.result), op)

    # ------------------------------------------------------------------ collectives
    def _collective_op(self, op: coll.CollectiveOp) -> None:
        self.buf[op.result] = self.collective(type(op), op.input, op.result.type, op.options(), self.out(op.result), op)

    def collective(
        self, cls: type[coll.CollectiveOp], x: SSAValue, rtype: Attribute, options: dict[str, Any], recv: SSAValue, op: Operation
    ) -> SSAValue:
        """Emit the calls of collective ``cls`` from ``x``'s buffer into ``recv``; returns
        the result buffer (``recv``, or the operand's buffer when nothing moves). NCCL
        writes contiguous buffers: a strided ``recv`` gets the result through a copy."""
        if self.contig.get(recv, True) or cls.LOWERS_INTO_VIEWS:
            return self._collective(cls, x, rtype, options, recv, op)
        tmp = self.alloc(recv.type)
        got = self._collective(cls, x, rtype, options, tmp, op)
        if got is tmp:
            self.guarded(rtype, lambda: self.copy(tmp, recv))
            return recv
        return got

    def _collective(
        self, cls: type[coll.CollectiveOp], x: SSAValue, rtype: Attribute, options: dict[str, Any], recv: SSAValue, op: Operation
    ) -> SSAValue:
        xt: TensorType = x.type  # type: ignore[assignment]
        axes = list(options.get("axes") or (0,))
        sizes = self.sizes(xt, op)
        n = group_size(sizes, axes)
        # Dims cut into one block per member: equal blocks of a padded buffer where the
        # ranks do not divide them (``padding.py``).
        cut_send, cut_recv = cls.cut_dims(xt, options, axes)
        counts = [sizes[a] for a in axes]
        send = self.input(x)
        for d in cut_send:
            send = self.laid_out(send, xt, d, counts)
        after: list[Callable[[], None]] = []
        into = recv
        for d in cut_recv:
            into = self.receiving(into, rtype, d, counts, after)  # type: ignore[arg-type]
        call = Call(op, xt, rtype, options, axes, sizes, n, send, into, self.comm(xt.mesh_name, axes))  # type: ignore[arg-type]
        got = cls.lower(self, call)
        if got is into and into is not recv:
            for move in after:
                self.guarded(rtype, move)
            return recv
        return got

    def gather_block(self, send: SSAValue, recv: SSAValue, dim: int, n: int, comm: SSAValue) -> None:
        """All-gather this rank's block ``send`` along ``dim`` into ``recv``."""
        s = self.contiguous(send)
        if self.contig.get(recv, True) and is_contiguous_block(shape(recv), dim):
            self.emit(nccl.AllGatherOp.make([s, recv, comm, self.stream], [], count=count(s)))
            return
        tmp = self.alloc(MemRefType(element(recv), [n, *shape(send)]))
        self.emit(nccl.AllGatherOp.make([s, tmp, comm, self.stream], [], count=count(s)))
        self.unpack(tmp, recv, dim, n)

    def pack(self, buf: SSAValue, dim: int, n: int) -> SSAValue:
        """A contiguous copy of ``buf`` whose block j is block j of ``buf`` along ``dim``
        (one ``rt.copy_blocks``, whatever ``n``)."""
        dims = list(shape(buf))
        dims[dim] //= n
        tmp = self.alloc(MemRefType(element(buf), [n, *dims]))
        self.emit(rt.CopyBlocksOp.make([buf, tmp, self.stream], [], **{"from": dim, "to": 0, "count": n}))
        return tmp

    def unpack(self, tmp: SSAValue, buf: SSAValue, dim: int, n: int) -> None:
        """Block j of ``tmp`` (along dim 0) into block j of ``buf`` along ``dim``."""
        self.emit(rt.CopyBlocksOp.make([tmp, buf, self.stream], [], **{"from": 0, "to": dim, "count": n}))

    # ------------------------------------------------------------------ fused collectives
    def _fused(self, op: coll.FusedCollectiveOp) -> None:
        self.fused(op)

    def fused(self, op: coll.FusedCollectiveOp, first: Sequence[SSAValue] | None = None) -> None:
        """Lower a fused collective; ``first`` gives the buffers of the block arguments
        when the first collective has been done already (``overlap_p2p.py``)."""
        inner = Block()
        self.blocks.append(inner)
        region = op.body.block
        for i, (x, arg, at) in enumerate(zip(op.inputs, region.args, op.block_arg_types())):
            if first is not None:
                self.buf[arg] = first[i]
            elif op.FIRST is None:
                self.buf[arg] = self.input(x)
            else:
                self.buf[arg] = self.collective(op.FIRST, x, at, op.first_options(), self.alloc_value(arg, arg.name_hint), op)
        term = region.last_op
        assert isinstance(term, coll.YieldOp)
        flags = op.gather_flags()
        axes = list(op.option("axes") or (0,))
        finish: list[tuple[int, SSAValue, SSAValue]] = []
        slots: dict[SSAValue, tuple[SSAValue, TensorType, int, SSAValue]] = {}
        for i, (res, y, g) in enumerate(zip(op.outputs, term.values, flags)):
            if not g:
                if res in self.dest and y not in self.dest and isinstance(y.owner, rt.CallOp):
                    self.dest[y] = self.dest.pop(res)
                continue
            recv = self.out(res)
            finish.append((i, y, recv))
            yt: TensorType = y.type  # type: ignore[assignment]
            if op.FINISH is coll.AllGatherOp:
                d = layout.innermost_slicing(yt.get_placements(), axes)
                if d is not None and is_contiguous_block(shape(recv), d) and y not in self.dest and isinstance(y.owner, rt.CallOp):
                    view = self.gather_slot(recv, res.type, axes, d)  # type: ignore[arg-type]
                    if view is not None:
                        self.dest[y] = view
                        slots[y] = (recv, res.type, d, view)  # type: ignore[assignment]
            elif op.FINISH is coll.BroadcastOp and y not in self.dest and isinstance(y.owner, rt.CallOp):
                self.dest[y] = recv
        for inner_op in region.ops:
            if inner_op is not term:
                self.lower_op(inner_op)
        # A result that is not gathered is the buffer of the value it yields where that
        # buffer is the region's own, visible after the group, and no other result's (a
        # gathered result's buffer or its block, another result yielding the same
        # value); else a copy of it into the result's own buffer, taken after the group
        # (a gathered value from its block of the gathered buffer, which holds it).
        given = {recv for _, _, recv in finish} | {slot[3] for slot in slots.values()}
        copies: list[tuple[SSAValue, SSAValue]] = []
        for res, y, g in zip(op.outputs, term.values, flags):
            if g:
                continue
            b = self.input(y)
            if _region_owns(op, y) and b not in given and not _made_in(b, inner):
                self.buf[res] = b
                given.add(b)
            else:
                copies.append((res, y))
        for i, y, recv in finish:
            self.dest.pop(y, None)
            assert op.FINISH is not None
            self.buf[op.outputs[i]] = self.collective(op.FINISH, y, op.outputs[i].type, {"axes": axes}, recv, op)
        after: list[tuple[SSAValue, SSAValue]] = []
        for res, y in copies:
            if y not in slots and _made_in(self.input(y), inner):
                self.buf[res] = self.out(res)
                self.copy(self.input(y), self.buf[res])  # a view the group made: copied in it
            else:
                after.append((res, y))
        self.blocks.pop()
        self.emit(rt.FusedOp.build(regions=[Region(inner)]))
        for res, y in after:
            if y in slots:
                recv, t, d, _ = slots[y]
                src = self.gather_slot(recv, t, axes, d)
                assert src is not None
            else:
                src = self.input(y)
            self.buf[res] = self.out(res)
            self.copy(src, self.buf[res])

    # ------------------------------------------------------------------ overlap
    def _overlap(self, op: coll.OverlapOp) -> None:
        from distir.lowering.overlap_p2p import lower_overlap

        lower_overlap(self, op)


def _passed_through(op: coll.FusedCollectiveOp, result: SSAValue) -> SSAValue | None:
    """The operand whose block argument ``op``'s region yields unchanged for ``result``
    (a member of combined plain collectives, when ``op`` has no first collective)."""
    if op.FIRST is not None:
        return None
    region = op.body.block
    term = region.last_op
    assert isinstance(term, coll.YieldOp)
    y = term.values[list(op.outputs).index(result)]
    if not isinstance(y, BlockArgument) or y.owner is not region:
        return None
    return op.inputs[y.index]


def _region_owns(op: coll.FusedCollectiveOp, y: SSAValue) -> bool:
    """Whether the buffer of ``y`` (yielded by ``op``'s region) is one the lowering of
    ``op`` made: the first collective's result or a value computed in the region; not a
    value from outside, nor (without a first collective) an input's own buffer."""
    region = op.body.block
    if isinstance(y, BlockArgument):
        return y.owner is region and op.FIRST is not None
    return isinstance(y, OpResult) and y.op.parent_block() is region


def _made_in(buf: SSAValue, block: Block) -> bool:
    """Whether ``buf`` is defined inside ``block`` (not visible after its op)."""
    return isinstance(buf, OpResult) and block.is_ancestor(buf.op)


def _same_space(call: rt.CallOp, operand: SSAValue) -> bool:
    """Whether a kernel call reads ``operand`` at the index it writes (same shape)."""
    return bool(call.outputs) and operand.type.get_shape() == call.outputs[0].type.get_shape()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class LowerCollectivesPass(ModulePass):
    name = "lower-collectives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        with gc_paused():
            self._apply(ctx, op)

    def _apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in [f for f in op.ops if isinstance(f, func.FuncOp)]:
            if DIST_TYPE in f.attributes:
                continue
            new = FuncLowering(op, f).run()
            op.body.block.insert_op_before(new, f)
            op.body.block.erase_op(f, safe_erase=False)
