"""Export to StableHLO + Shardy (``sdy``), as ``jax.jit(shard_map(f))`` prints it.

Each function keeps its name and its signature in JAX's global view: every argument and
result is a tensor of its logical shape with ``#sdy.sharding`` saying how the devices
hold it; the body is one ``sdy.manual_computation`` over every mesh axis whose region is
the SPMD program of one device (``frontends/export.py``), with StableHLO's collectives in
the generic form JAX prints (``replica_groups`` of device ids, ``use_global_device_ids``).
The module's ``sdy.mesh`` is the root mesh (``mhlo.num_partitions`` = its device count);
a device's coordinates come from ``stablehlo.partition_id`` as JAX's ``axis_index``
computes them. XLA compiles and runs the result (``test/frontends/test_export_sdy.py``
runs it on 4 CPU devices and compares with the interpreter).

Placements at the boundary (the importer's mapping, read backwards)::

    sliced<d, k> on axis a    dim d's axis list {..} holds a at position k (outer first)
    replicated                a appears nowhere
    local                     a in unreduced={..} (each device its own value, JAX's
                              unreduced arrays: the npz convention stacks them)
    at<r>                     like replicated; a result held at<r> is broadcast first
                              (all_gather + slice of block r), so every device returns it

Op by op (``cdt``: f32 for f16/bf16 operands, whose arithmetic the interpreter runs in
f32 and rounds once):

=========================  ==============================================================
distir                     StableHLO
=========================  ==============================================================
``dist.map``               the body's ops elementwise on the device's blocks (operands
                           ``broadcast_in_dim`` to the result's shape), see ELEMENTWISE
``dist.matmul``            ``convert`` to cdt, ``dot_general``, ``convert`` back
``dist.reduce_tensor``     ``reduce`` in cdt (avg: sum ``divide`` count of the block)
``dist.cast``              ``convert``
``dist.dropout``           splitmix64 on ``iota`` + block offsets in i64 (wrapping ops, logical
                           shifts), ``select``
``dist.embedding_bag``     ``gather`` (table dim: batching dims), ``reduce`` over the bag;
                           a row-sliced table masks the rows other devices hold
``dist.scatter_add``       ``scatter`` (add, in cdt) of each update row once per position
                           of its bag into zeros; a row-sliced result adds into the rows
                           the device holds (other rows' updates are masked to zero)
``dist.sort``              ``sort`` with jnp.sort's comparator (stable, NaN last)
``dist.take_slice``        of an argument: the manual computation takes the argument once
                           more, sliced (as shard_map's ``in_specs``); of a computed
                           value: ``dynamic_slice`` at the device's block
``dist.transpose`` ...     ``transpose``, ``reshape``, ``slice``, ``concatenate`` of the
                           device's block; ``iota`` plus the block's offset
``coll.all_reduce``        ``all_reduce`` (avg: sum, ``divide`` by the group size)
``coll.reduce_scatter``    ``reduce_scatter``
``coll.all_gather``        ``all_gather``
``coll.reduce``            ``all_reduce`` (the root, like every member, gets the result)
``coll.broadcast``         ``all_gather`` along a new dim, ``slice`` of the root's block
``coll.all_to_all``        ``all_to_all`` (split = new sliced dim, concat = old one)
``coll.send``              ``collective_permute`` with one pair per group
``coll.permute``           ``collective_permute`` with the pairs of every group
=========================  ==============================================================

Dims the ranks do not divide are padded (docs/export.md): outside the manual computation
each argument with such a dim is laid out padded in the global view (``concatenate`` of
its blocks and zeros up to the largest block), the manual computation runs on equal
blocks, and each result is cut back (``slice``); inside, ``map``, ``matmul``, ``iota``,
``reduce_tensor`` and ``embedding_bag`` results are re-zeroed past the device's block
(``select`` on an ``iota`` below the block's size, computed from ``partition_id``), a
max/min/prod over such a dim reduces the identity in the padding, ``avg`` divides by s/n;
``reduce_scatter``, ``all_to_all`` and ``dynamic_slice`` pad their cut dim to equal
blocks, ``all_gather`` and ``all_to_all`` cut their joined dim; nested blocks that do
not sit at their padded positions are moved into equal slots before a cut and back
after a join (``spread``, ``gather_blocks``: static slices per outer block, a ``select``
on the device's outer block index); a row-sliced table or
scatter target takes the rows the device really holds (``rows_held``); a ``reshape``
keeps such dims whole. Refused: a ``reshape`` that merges or splits such a dim, and
``local`` (unreduced) arguments or results with such a dim (the global view has no
blocks to pad).

ELEMENTWISE (arith/math ops of map bodies, and of scalar code outside maps): add, sub,
mul, div, rem, max/min (maximumf/minimumf, maxsi/minsi), negf, and/or/xor, shifts,
sqrt, rsqrt, exp, expm1, exp2, log, log1p, log2, log10, powf, tanh, sin, cos, tan,
atan, atan2, cbrt, erf (``chlo.erf``), absf/absi, ceil, floor, trunc, round,
roundeven, fma, cmpf (every predicate), cmpi, select, constant, and the casts (extf,
truncf, sitofp, uitofp, fptosi, fptoui, extsi, extui, trunci). Anything else in a body
(``maxnumf``/``minnumf``, ``copysign``, ``divui``, ``remui``, ``maxui``, ``minui``,
``floordivsi``, ``ceildivsi``, ``ceildivui``) is rejected with a diagnostic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith, func
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import AnyFloat, FloatAttr, IntegerAttr, IntegerType
from xdsl.ir import Attribute, Operation

from distir.dialects import dist, layout, rng
from distir.dialects.dist import TensorType
from distir.dialects.placements import Local
from distir.frontends.export import Exporter, Placed, RootMesh, half, literal, reduction_identity, ttype

_SIMPLE: dict[type[Operation], str] = {
    arith.AddfOp: "add",
    arith.AddiOp: "add",
    arith.SubfOp: "subtract",
    arith.SubiOp: "subtract",
    arith.MulfOp: "multiply",
    arith.MuliOp: "multiply",
    arith.DivfOp: "divide",
    arith.DivSIOp: "divide",
    arith.RemSIOp: "remainder",
    arith.MaximumfOp: "maximum",
    arith.MinimumfOp: "minimum",
    arith.MaxSIOp: "maximum",
    arith.MinSIOp: "minimum",
    arith.NegfOp: "negate",
    arith.AndIOp: "and",
    arith.OrIOp: "or",
    arith.XOrIOp: "xor",
    arith.ShLIOp: "shift_left",
    arith.ShRSIOp: "shift_right_arithmetic",
    arith.ShRUIOp: "shift_right_logical",
    xmath.SqrtOp: "sqrt",
    xmath.RsqrtOp: "rsqrt",
    xmath.ExpOp: "exponential",
    xmath.ExpM1Op: "exponential_minus_one",
    xmath.LogOp: "log",
    xmath.Log1pOp: "log_plus_one",
    xmath.PowFOp: "power",
    xmath.TanhOp: "tanh",
    xmath.SinOp: "sine",
    xmath.CosOp: "cosine",
    xmath.TanOp: "tan",
    xmath.Atan2Op: "atan2",
    xmath.CbrtOp: "cbrt",
    xmath.AbsFOp: "abs",
    xmath.AbsIOp: "abs",
    xmath.CeilOp: "ceil",
    xmath.FloorOp: "floor",
    xmath.RoundOp: "round_nearest_afz",
    xmath.RoundEvenOp: "round_nearest_even",
}
"""arith/math ops that are one StableHLO op (same operands, elementwise)."""

_CASTS = (arith.ExtFOp, arith.TruncFOp, arith.SIToFPOp, arith.FPToSIOp, arith.ExtSIOp, arith.TruncIOp)
_UNSIGNED_CASTS = (arith.UIToFPOp, arith.FPToUIOp, arith.ExtUIOp)

# arith.cmpf predicate -> (StableHLO direction, negate the result, ordered check)
_CMPF = {
    "oeq": ("EQ", False), "ogt": ("GT", False), "oge": ("GE", False), "olt": ("LT", False),
    "ole": ("LE", False), "une": ("NE", False),
    "ueq": ("NE", True), "ugt": ("LE", True), "uge": ("LT", True), "ult": ("GE", True), "ule": ("GT", True),
}  # fmt: skip
_CMPI = {"eq": ("EQ", "SIGNED"), "ne": ("NE", "SIGNED"), "slt": ("LT", "SIGNED"), "sle": ("LE", "SIGNED"),
         "sgt": ("GT", "SIGNED"), "sge": ("GE", "SIGNED"), "ult": ("LT", "UNSIGNED"), "ule": ("LE", "UNSIGNED"),
         "ugt": ("GT", "UNSIGNED"), "uge": ("GE", "UNSIGNED")}  # fmt: skip

_REDUCER = {"sum": "add", "avg": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


def dense(rows: Sequence[Sequence[int]]) -> str:
    """``dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>``."""
    body = ", ".join("[" + ", ".join(map(str, r)) + "]" for r in rows)
    return f"dense<[{body}]> : tensor<{len(rows)}x{len(rows[0]) if rows else 0}xi64>"


class SdyExporter(Exporter):
    TARGET = "StableHLO + sdy"
    PADS = True

    # ------------------------------------------------------------------ module and functions
    def header(self, meshes: Sequence[RootMesh]) -> None:
        counts = {m.devices for m in meshes}
        attrs = f" attributes {{mhlo.num_partitions = {counts.pop()} : i32, mhlo.num_replicas = 1 : i32}}" if len(counts) == 1 else ""
        self.text.line(f"module @distir{attrs} {{")
        self.text.depth = 1
        for m in meshes:
            axes = ", ".join(f'"{n}"={s}' for n, s in zip(m.axis_names, m.sizes))
            self.text.line(f"sdy.mesh @{m.name} = <[{axes}]>")

    def run(self) -> str:
        out = super().run()
        return out + "}\n"

    def sharding(self, p: Placed | None, mesh: RootMesh) -> str:
        """``<@mesh, [{"x"}, {}], unreduced={"y"}>`` (``at<r>`` reads as replicated)."""
        if p is None:
            return f"<@{mesh.name}, []>"
        dims = ["{" + ", ".join(f'"{mesh.axis_names[a]}"' for a in p.slicing(d)) + "}" for d in range(len(p.shape))]
        out = f"<@{mesh.name}, [{', '.join(dims)}]"
        unreduced = p.axes_of(Local)
        if unreduced:
            out += ", unreduced={" + ", ".join(f'"{mesh.axis_names[a]}"' for a in unreduced) + "}"
        return out + ">"

    def function(self, f: func.FuncOp) -> None:
        self.check_boundary(f)
        self.coords: dict[int, str] = {}
        self.spans: dict[tuple[int, tuple[int, ...]], tuple[str, str]] = {}
        self.pid: str | None = None
        self.channel = 0
        mesh = self.function_meshes[f]
        block = f.body.block
        t = self.text
        in_types = list(f.function_type.inputs.data)
        out_types = list(f.function_type.outputs.data)
        if mesh is None:  # builtin scalars only: no devices to speak of
            args = [t.name(f"arg{i}") for i in range(len(in_types))]
            sig = ", ".join(f"{a}: {ttype((), ty)}" for a, ty in zip(args, in_types))
            t.line(f"func.func @{f.sym_name.data}({sig}) -> ({', '.join(ttype((), ty) for ty in out_types)}) {{")
            t.depth += 1
            self.bind(block.args, args)
            ys = self.emit_block(block)
            t.line(f"return {', '.join(ys)} : {', '.join(ttype((), ty) for ty in out_types)}")
            t.depth -= 1
            t.line("}")
            return
        in_placed = [self.placed_type(f, ty) if isinstance(ty, TensorType) else None for ty in in_types]
        out_placed = [self.placed_type(f, ty) if isinstance(ty, TensorType) else None for ty in out_types]
        for what, placed in (("argument", in_placed), ("result", out_placed)):
            for i, p in enumerate(placed):
                if p is not None and p.uneven and p.axes_of(Local):
                    self.fail(
                        f,
                        f"{what} {i} holds partial sums (local) on a dim the ranks do not divide "
                        f"({layout.describe_uneven(p.shape, p.placements, p.mesh.sizes, p.uneven[0])}): the export pads such "
                        f"dims in the global view, where an unreduced value has no per-device blocks to pad "
                        f"(all_reduce or reduce_scatter it inside the function first)",
                    )
        # results held at<r> are broadcast inside, so that every device returns them
        returned = [p if p is None else Placed(p.shape, p.element, p.mesh, tuple(dist.REPLICATED if a in dict(p.at) else q for a, q in enumerate(p.placements))) for p in out_placed]

        def global_type(ty: Attribute) -> str:
            return ttype(ty.get_shape(), ty.element_type) if isinstance(ty, TensorType) else ttype((), ty)

        def padded_type(ty: Attribute, p: Placed | None) -> str:
            return ttype(p.padded_shape, p.element) if p is not None else global_type(ty)

        def local_type(ty: Attribute, p: Placed | None) -> str:
            return ttype(p.local_shape, p.element) if p is not None else ttype((), ty)

        args = [t.name(f"arg{i}") for i in range(len(in_types))]
        sig = ", ".join(
            f"{a}: {global_type(ty)} {{sdy.sharding = #sdy.sharding{self.sharding(p, mesh)}}}" for a, ty, p in zip(args, in_types, in_placed)
        )
        res = ", ".join(f"{global_type(ty)} {{sdy.sharding = #sdy.sharding{self.sharding(p, mesh)}}}" for ty, p in zip(out_types, returned))
        gout = ", ".join(global_type(ty) for ty in out_types)
        t.line(f"func.func @{f.sym_name.data}({sig}) -> ({res}) {{")
        t.depth += 1
        # one device: the global view is the device's view (JAX emits no manual_computation)
        manual = mesh.devices > 1
        if manual:
            body_args = [t.name(a.name_hint or f"arg{i}") for i, a in enumerate(block.args)]
            # a take_slice of an argument: the device receives its block (in_shardings,
            # as shard_map's in_specs), no dynamic_slice at a computed offset
            blocks = self.argument_blocks(f)
            # a dim the ranks do not divide enters padded (shard_map's blocks are equal)
            block_placed = [self.placed(op.result) for op in blocks]
            operands = [self.pad_global(a, p) for a, p in zip(args, in_placed)]
            operands += [self.pad_global(args[block.args.index(op.input)], p) for op, p in zip(blocks, block_placed)]
            shardings = [self.sharding(p, mesh) for p in in_placed] + [self.sharding(self.placed(op.result), mesh) for op in blocks]
            block_names = [t.name(op.result.name_hint or "block") for op in blocks]
            region_args = [f"{b}: {local_type(ty, p)}" for b, ty, p in zip(body_args, in_types, in_placed)]
            region_args += [f"{b}: {local_type(op.result.type, self.placed(op.result))}" for b, op in zip(block_names, blocks)]
            results = t.name("manual") if out_types else None
            head = f"sdy.manual_computation({', '.join(operands)}) in_shardings=[{', '.join(shardings)}] "
            head += f"out_shardings=[{', '.join(self.sharding(p, mesh) for p in returned)}] "
            head += "manual_axes={" + ", ".join(f'"{n}"' for n in mesh.axis_names) + "} "
            head += "(" + ", ".join(region_args) + ") {"
            count = f":{len(out_types)}" if len(out_types) > 1 else ""
            t.line(f"{results}{count} = {head}" if results else head)
            t.depth += 1
            for op, name in zip(blocks, block_names):
                self.env[op.result] = name
            in_global = [padded_type(ty, p) for ty, p in zip(in_types, in_placed)] + [padded_type(op.input.type, p) for op, p in zip(blocks, block_placed)]
        else:
            body_args = args
        self.bind(block.args, body_args)
        ys = self.emit_block(block)
        ret = block.last_op
        assert ret is not None
        final = []
        for y, v, p in zip(ys, ret.operands, out_placed):
            if p is not None:
                y, _ = self.result_to_replicated(y, p, v.name_hint)
            final.append(y)
        if manual:
            local_out = [local_type(ty, p) for ty, p in zip(out_types, returned)]
            t.line(f"sdy.return {', '.join(final)} : {', '.join(local_out)}" if final else "sdy.return")
            t.depth -= 1
            gin = ", ".join(in_global)
            t.line(f"}} : ({gin}) -> ({', '.join(padded_type(ty, p) for ty, p in zip(out_types, returned))})")
            final = [f"{results}#{i}" for i in range(len(out_types))] if len(out_types) > 1 else ([results] if results else [])
            final = [self.unpad_global(y, p) for y, p in zip(final, returned)]
        t.line(f"return {', '.join(final)} : {gout}" if final else "return")
        t.depth -= 1
        t.line("}")

    def argument_blocks(self, f: func.FuncOp) -> list[dist.TakeSliceOp]:
        """The ``take_slice``s of ``f``'s arguments that slice over devices."""
        args = f.body.block.args
        return [
            op for op in f.walk()
            if isinstance(op, dist.TakeSliceOp) and op.input in args and self.root_axes(op, op.input.type, [op.option("axis")])  # type: ignore[arg-type]
        ]

    # ------------------------------------------------------------------ small helpers
    def const(self, value: float | int, shape: Sequence[int], elt: Attribute | str, hint: str = "cst") -> str:
        return self.text.op(hint, f"stablehlo.constant dense<{literal(value, elt)}> : {ttype(shape, elt)}")

    def convert(self, x: str, shape: Sequence[int], src: Attribute | str, dst: Attribute | str, hint: str | None = None) -> str:
        if str(src) == str(dst):
            return x
        return self.text.op(hint, f"stablehlo.convert {x} : ({ttype(shape, src)}) -> {ttype(shape, dst)}")

    def reshape_to(self, x: str, src: Sequence[int], dst: Sequence[int], elt: Attribute, hint: str | None = None) -> str:
        if tuple(src) == tuple(dst):
            return x
        return self.text.op(hint, f"stablehlo.reshape {x} : ({ttype(src, elt)}) -> {ttype(dst, elt)}")

    def broadcast_to(self, x: str, src: Sequence[int], dst: Sequence[int], elt: Attribute | str, hint: str | None = None) -> str:
        """numpy broadcasting of ``src`` (aligned to the right) to ``dst``."""
        if tuple(src) == tuple(dst):
            return x
        dims = list(range(len(dst) - len(src), len(dst)))
        return self.text.op(hint, f"stablehlo.broadcast_in_dim {x}, dims = [{', '.join(map(str, dims))}] : ({ttype(src, elt)}) -> {ttype(dst, elt)}")

    def binary(self, name: str, a: str, b: str, shape: Sequence[int], elt: Attribute | str, hint: str | None = None) -> str:
        return self.text.op(hint, f"stablehlo.{name} {a}, {b} : {ttype(shape, elt)}")

    def compare(self, direction: str, a: str, b: str, shape: Sequence[int], elt: Attribute | str, kind: str, hint: str | None = None) -> str:
        t = ttype(shape, elt)
        return self.text.op(hint, f"stablehlo.compare  {direction}, {a}, {b},  {kind} : ({t}, {t}) -> {ttype(shape, 'i1')}")

    def select(self, c: str, a: str, b: str, shape: Sequence[int], elt: Attribute | str, hint: str | None = None) -> str:
        return self.text.op(hint, f"stablehlo.select {c}, {a}, {b} : {ttype(shape, 'i1')}, {ttype(shape, elt)}")

    def coord(self, mesh: RootMesh, axis: int) -> str:
        """This device's coordinate on root ``axis`` (``tensor<i32>``), as JAX's axis_index."""
        if axis not in self.coords:
            if self.pid is None:
                self.pid = self.text.op("pid", "stablehlo.partition_id : tensor<ui32>")
            q = self.text.op("q", f"stablehlo.divide {self.pid}, {self.const(mesh.stride(axis), (), 'ui32')} : tensor<ui32>")
            r = self.text.op("r", f"stablehlo.remainder {q}, {self.const(mesh.sizes[axis], (), 'ui32')} : tensor<ui32>")
            self.coords[axis] = self.convert(r, (), "ui32", "i32", f"coord_{mesh.axis_names[axis]}")
        return self.coords[axis]

    def group_rank(self, mesh: RootMesh, axes: Sequence[int]) -> str:
        """This device's rank in its group over ``axes`` (row-major), ``tensor<i32>``."""
        rank = self.coord(mesh, axes[0])
        for a in axes[1:]:
            scaled = self.binary("multiply", rank, self.const(mesh.sizes[a], (), "i32"), (), "i32")
            rank = self.binary("add", scaled, self.coord(mesh, a), (), "i32", "rank")
        return rank

    def block_start(self, p: Placed, dim: int, extent: int, elt: str = "i32") -> str | None:
        """First logical index along ``dim`` of this device's block (None: not sliced)."""
        axes = [a for a in p.slicing(dim) if p.mesh.sizes[a] > 1]
        if not axes:
            return None
        if dim in p.uneven:
            return self.convert(self.span(p, dim)[0], (), "i32", elt)
        start = self.binary("multiply", self.group_rank(p.mesh, axes), self.const(extent, (), "i32"), (), "i32", "start")
        return self.convert(start, (), "i32", elt)

    # ------------------------------------------------------------------ padded dims
    def pieces(self, x: str, shape: Sequence[int], elt: Attribute, dim: int, parts: list[tuple[int, int] | int]) -> str:
        """Concatenate along ``dim`` the parts: (offset, size) of ``x`` or a count of zeros;
        touching parts of ``x`` are taken as one slice."""
        merged: list[tuple[int, int] | int] = []
        for part in parts:
            if (part[1] if isinstance(part, tuple) else part) == 0:
                continue
            last = merged[-1] if merged else None
            if isinstance(part, int) and isinstance(last, int):
                merged[-1] = last + part
            elif isinstance(part, tuple) and isinstance(last, tuple) and last[0] + last[1] == part[0]:
                merged[-1] = (last[0], last[1] + part[1])
            else:
                merged.append(part)
        if not merged:  # nothing on either side: an empty dim
            empty = list(shape)
            empty[dim] = 0
            return self.const(0, empty, elt, "empty")
        names, shapes = [], []
        for part in merged:
            piece = list(shape)
            if isinstance(part, int):
                piece[dim] = part
                names.append(self.const(0, piece, elt, "padding"))
            else:
                piece[dim] = part[1]
                if tuple(piece) == tuple(shape):
                    names.append(x)
                else:
                    bounds = [f"{part[0]}:{part[0] + part[1]}" if d == dim else f"0:{n}" for d, n in enumerate(shape)]
                    names.append(self.text.op(None, f"stablehlo.slice {x} [{', '.join(bounds)}] : ({ttype(shape, elt)}) -> {ttype(piece, elt)}"))
            shapes.append(piece)
        if len(names) == 1:
            return names[0]
        out = list(shape)
        out[dim] = sum(p[dim] for p in shapes)
        types = ", ".join(ttype(p, elt) for p in shapes)
        return self.text.op(None, f"stablehlo.concatenate {', '.join(names)}, dim = {dim} : ({types}) -> {ttype(out, elt)}")

    def pad_global(self, x: str, p: Placed | None) -> str:
        """A logical (global) tensor laid out padded: each block of each dim the ranks do not
        divide followed by zeros up to the largest block, as shard_map cuts equal blocks."""
        if p is None:
            return x
        shape = list(p.shape)
        for d in p.uneven:
            extent = p.local_shape[d]
            parts: list[tuple[int, int] | int] = []
            for lo, size in p.blocks(d):
                parts += [(lo, size), extent - size]
            x = self.pieces(x, shape, p.element, d, parts)
            shape[d] = p.padded_extent(d)
        return x

    def unpad_global(self, x: str, p: Placed | None) -> str:
        """``pad_global`` undone: the blocks of the padded global view, without padding."""
        if p is None:
            return x
        shape = list(p.padded_shape)
        for d in p.uneven:
            extent = p.local_shape[d]
            x = self.pieces(x, shape, p.element, d, [(i * extent, size) for i, (_, size) in enumerate(p.blocks(d))])
            shape[d] = p.shape[d]
        return x

    def pad_dim(self, x: str, shape: Sequence[int], elt: Attribute, dim: int, extent: int) -> str:
        """``x`` with zeros appended along ``dim`` up to ``extent``."""
        return self.pieces(x, shape, elt, dim, [(0, shape[dim]), extent - shape[dim]])

    def cut_dim(self, x: str, shape: Sequence[int], elt: Attribute, dim: int, extent: int) -> str:
        """The first ``extent`` elements of ``x`` along ``dim``."""
        return self.pieces(x, shape, elt, dim, [(0, extent)])

    def span(self, p: Placed, dim: int) -> tuple[str, str]:
        """(offset, size) of this device's block of ``dim`` (``tensor<i32>``): DESIGN §2's
        rule, one level per axis slicing the dim, in integer ops on its coordinates."""
        axes = tuple(p.slicing(dim))
        key = (p.shape[dim], axes)
        if key not in self.spans:
            i32 = "i32"
            offset: str | None = None
            size: int | str = p.shape[dim]
            for a in axes:
                n = p.mesh.sizes[a]
                if n == 1:
                    continue
                lo, size = self.cut(size, n, self.coord(p.mesh, a))
                offset = lo if offset is None else self.binary("add", offset, lo, (), i32, "offset")
            self.spans[key] = (offset or self.const(0, (), i32), size if isinstance(size, str) else self.const(size, (), i32))
        return self.spans[key]

    def cut(self, size: int | str, n: int, coord: str) -> tuple[str, str]:
        """One level of DESIGN §2's rule: (offset, size) of block ``coord`` of a block of
        ``size`` elements cut over ``n`` ranks (``tensor<i32>`` values)."""
        i32 = "i32"
        if isinstance(size, int):
            c = self.const(-(-size // n), (), i32)
            total = self.const(size, (), i32)
        else:
            total = size
            c = self.binary("divide", self.binary("add", size, self.const(n - 1, (), i32), (), i32), self.const(n, (), i32), (), i32)
        lo = self.binary("minimum", self.binary("multiply", coord, c, (), i32), total, (), i32, "lo")
        hi = self.binary("minimum", self.binary("add", lo, c, (), i32), total, (), i32, "hi")
        return lo, self.binary("subtract", hi, lo, (), i32, "size")

    def member_blocks(self, fine: Placed, coarse: Placed, dim: int, axes: list[int]) -> list[list[tuple[int, int]]]:
        """For each block of ``coarse`` along ``dim`` (row-major over the axes slicing it),
        the (offset within it, size) of each member's block of ``fine`` in a group over
        ``axes`` (group order): DESIGN §2's rule at the inner levels, static."""
        sizes = fine.mesh.sizes
        outer = [a for a in fine.slicing(dim) if a not in axes]
        inner = [a for a in fine.slicing(dim) if a in axes]
        out = []
        for i in range(math.prod(sizes[a] for a in outer)):
            _, size = layout.dim_block(fine.shape[dim], [sizes[a] for a in outer], layout.at_digits(i, [sizes[a] for a in outer]))
            members = []
            for j in range(fine.mesh.group_size(axes)):
                digits = dict(zip(axes, layout.at_digits(j, [sizes[a] for a in axes])))
                members.append(layout.dim_block(size, [sizes[a] for a in inner], [digits[a] for a in inner]))
            out.append(members)
        return out

    def per_block(self, fine: Placed, dim: int, axes: list[int], candidates: list[str], shape: Sequence[int], elt: Attribute) -> str:
        """This device's candidate, one per block of the coarse value along ``dim`` (as
        ``member_blocks`` lists them): a ``select`` on the block index, computed from
        ``partition_id`` (where the layout differs from block to block)."""
        out = candidates[0]
        outer = [a for a in fine.slicing(dim) if a not in axes]
        if all(c == out for c in candidates):
            return out
        index = self.broadcast_to(self.group_rank(fine.mesh, outer), (), shape, "i32")
        for i, cand in enumerate(candidates[1:], start=1):
            if cand == candidates[0]:  # the same layout as the first block's
                continue
            mine = self.compare("EQ", index, self.const(i, shape, "i32"), shape, "i32", "SIGNED", "block")
            out = self.select(mine, cand, out, shape, elt)
        return out

    def spread(self, x: str, fine: Placed, coarse: Placed, dim: int, axes: list[int]) -> tuple[str, list[int]]:
        """``x`` (this device's block of ``coarse``) laid out as the equal padded blocks of
        its group over ``axes`` (group order), each member's block of ``fine`` first in
        its slot, zeros after: what an equal-block cut (reduce_scatter, all_to_all, a
        slice at the group rank) needs where nested blocks do not sit at their padded
        positions. Static slices per block of ``coarse``, chosen per device."""
        extent = fine.local_shape[dim]
        shape = list(coarse.local_shape)
        out = list(shape)
        out[dim] = extent * fine.mesh.group_size(axes)
        candidates = []
        for members in self.member_blocks(fine, coarse, dim, axes):
            parts: list[tuple[int, int] | int] = []
            for lo, size in members:
                parts += [(lo, size), extent - size]
            candidates.append(self.pieces(x, shape, coarse.element, dim, parts))
        return self.per_block(fine, dim, axes, candidates, out, coarse.element), out

    def gather_blocks(self, y: str, shape: Sequence[int], fine: Placed, coarse: Placed, dim: int, axes: list[int]) -> str:
        """``y`` (the group's padded blocks of ``fine`` along ``dim``, in group order) as
        this device's padded block of ``coarse``: each member's elements at its offset,
        zeros after the last. Static slices per block of ``coarse``, chosen per device."""
        extent = fine.local_shape[dim]
        target = coarse.local_shape[dim]
        candidates = []
        for members in self.member_blocks(fine, coarse, dim, axes):
            order = sorted(range(len(members)), key=lambda j: members[j][0])
            parts: list[tuple[int, int] | int] = [(j * extent, members[j][1]) for j in order]
            parts.append(target - sum(size for _, size in members))
            candidates.append(self.pieces(y, shape, coarse.element, dim, parts))
        return self.per_block(fine, dim, axes, candidates, coarse.local_shape, coarse.element)

    def held(self, p: Placed) -> str | None:
        """``tensor<...xi1>`` of ``p``'s padded buffer: true where the element is the
        device's own (None: no padding)."""
        shape = p.local_shape
        mask = None
        for d in p.uneven:
            index = self.text.op("index", f"stablehlo.iota dim = {d} : {ttype(shape, 'i32')}")
            inside = self.compare("LT", index, self.broadcast_to(self.span(p, d)[1], (), shape, "i32"), shape, "i32", "SIGNED", "inside")
            mask = inside if mask is None else self.binary("and", mask, inside, shape, "i1", "held")
        return mask

    def rezero(self, x: str, p: Placed, hint: str | None = None) -> str:
        """``x`` (of ``p``'s padded buffer) with zeros in the padding again, after an op
        that may make zeros non-zero (exp, adding a replicated bias, an iota)."""
        mask = self.held(p)
        if mask is None:
            return x
        return self.select(mask, x, self.const(0, p.local_shape, p.element, "zeros"), p.local_shape, p.element, hint)

    def channel_attrs(self) -> str:
        self.channel += 1
        return f"channel_handle = #stablehlo.channel_handle<handle = {self.channel}, type = 1>"

    def region(self, reducer: str, elt: Attribute | str) -> None:
        t = self.text
        a, b = t.name("lhs"), t.name("rhs")
        t.line(f"^bb0({a}: {ttype((), elt)}, {b}: {ttype((), elt)}):")
        t.depth += 1
        c = t.op(None, f"stablehlo.{reducer} {a}, {b} : {ttype((), elt)}")
        t.line(f"stablehlo.return {c} : {ttype((), elt)}")
        t.depth -= 1

    # ------------------------------------------------------------------ elementwise ops
    def elementwise(self, op: Operation, xs: list[str], shape: Sequence[int], hint: str | None = None) -> list[str]:
        """One arith/math op on operands already of ``shape`` (its result named ``hint``,
        else as in distir)."""
        t = self.text
        hint = hint or (op.results[0].name_hint if op.results else None)
        out = op.results[0].type
        ins = [v.type for v in op.operands]
        cls = type(op)
        if cls in _SIMPLE:
            if len(xs) == 1:
                return [t.op(hint, f"stablehlo.{_SIMPLE[cls]} {xs[0]} : {ttype(shape, out)}")]
            return [self.binary(_SIMPLE[cls], xs[0], xs[1], shape, out, hint)]
        if isinstance(op, arith.ConstantOp):
            v = op.value
            if not isinstance(v, (FloatAttr, IntegerAttr)):
                self.fail(op, f"of {v} cannot be exported to {self.TARGET} (scalar constants only)")
            return [self.const(v.value.data, shape, out, hint or "cst")]
        if isinstance(op, _CASTS):
            x = xs[0]
            if str(ins[0]) == "i1" and isinstance(op, (arith.SIToFPOp, arith.ExtSIOp)):  # sign-extended: true is -1
                x = t.op(None, f"stablehlo.convert {x} : ({ttype(shape, 'i1')}) -> {ttype(shape, 'i32')}")
                x = t.op(None, f"stablehlo.negate {x} : {ttype(shape, 'i32')}")
                return [self.convert(x, shape, "i32", out, hint)]
            return [t.op(hint, f"stablehlo.convert {x} : ({ttype(shape, ins[0])}) -> {ttype(shape, out)}")]
        if isinstance(op, _UNSIGNED_CASTS):
            src, dst = ins[0], out
            x = xs[0]
            if isinstance(src, IntegerType) and str(src) != "i1":
                x = self.convert(x, shape, src, f"ui{src.width.data}")
                src = f"ui{src.width.data}"
            if isinstance(op, arith.FPToUIOp) and isinstance(dst, IntegerType):
                x = self.convert(x, shape, src, f"ui{dst.width.data}")
                src = f"ui{dst.width.data}"
            if isinstance(op, arith.ExtUIOp) and isinstance(dst, IntegerType):
                x = self.convert(x, shape, src, f"ui{dst.width.data}")
                src = f"ui{dst.width.data}"
            return [self.convert(x, shape, src, dst, hint) if str(src) != str(dst) else x]
        if isinstance(op, arith.CmpfOp):
            pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
            return [self.cmpf(pred, xs[0], xs[1], shape, ins[0], hint)]
        if isinstance(op, arith.CmpiOp):
            direction, kind = _CMPI[arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]]
            return [self.compare(direction, xs[0], xs[1], shape, ins[0], kind, hint)]
        if isinstance(op, arith.SelectOp):
            return [self.select(xs[0], xs[1], xs[2], shape, out, hint)]
        if isinstance(op, xmath.ErfOp):
            return [t.op(hint, f"chlo.erf {xs[0]} : {ttype(shape, out)} -> {ttype(shape, out)}")]
        if isinstance(op, (xmath.Exp2Op, xmath.Log2Op, xmath.Log10Op)):
            ln = self.const({xmath.Exp2Op: math.log(2), xmath.Log2Op: math.log(2), xmath.Log10Op: math.log(10)}[cls], shape, out, "ln")
            if isinstance(op, xmath.Exp2Op):
                return [t.op(hint, f"stablehlo.exponential {self.binary('multiply', xs[0], ln, shape, out)} : {ttype(shape, out)}")]
            lg = t.op(None, f"stablehlo.log {xs[0]} : {ttype(shape, out)}")
            return [self.binary("divide", lg, ln, shape, out, hint)]
        if isinstance(op, xmath.AtanOp):
            return [self.binary("atan2", xs[0], self.const(1.0, shape, out), shape, out, hint)]
        if isinstance(op, xmath.TruncOp):
            sign = t.op(None, f"stablehlo.sign {xs[0]} : {ttype(shape, out)}")
            mag = t.op(None, f"stablehlo.floor {t.op(None, f'stablehlo.abs {xs[0]} : {ttype(shape, out)}')} : {ttype(shape, out)}")
            return [self.binary("multiply", sign, mag, shape, out, hint)]
        if isinstance(op, xmath.FmaOp):
            wide = "f64" if str(out) == "f32" else out
            a, b, c = (self.convert(x, shape, out, wide) for x in xs)
            r = self.binary("add", self.binary("multiply", a, b, shape, wide), c, shape, wide)
            return [self.convert(r, shape, wide, out, hint)]
        self.fail(op, f"has no {self.TARGET} counterpart in this exporter")

    def cmpf(self, pred: str, a: str, b: str, shape: Sequence[int], elt: Attribute, hint: str | None) -> str:
        if pred in ("false", "true"):
            return self.const(pred == "true", shape, "i1", hint or "cmp")
        if pred in ("ord", "uno", "one"):
            ordered = self.binary(
                "and", self.compare("EQ", a, a, shape, elt, "FLOAT"), self.compare("EQ", b, b, shape, elt, "FLOAT"), shape, "i1"
            )
            if pred == "ord":
                return ordered
            if pred == "uno":
                return self.text.op(hint, f"stablehlo.not {ordered} : {ttype(shape, 'i1')}")
            return self.binary("and", ordered, self.compare("NE", a, b, shape, elt, "FLOAT"), shape, "i1", hint)
        direction, negate = _CMPF[pred]
        c = self.compare(direction, a, b, shape, elt, "FLOAT", None if negate else hint)
        return self.text.op(hint, f"stablehlo.not {c} : {ttype(shape, 'i1')}") if negate else c

    def scalar_op(self, op: Operation, operands: list[str]) -> list[str]:
        return self.elementwise(op, operands, ())

    # ------------------------------------------------------------------ local ops
    def map(self, op: dist.MapOp) -> None:
        res = self.placed(op.outputs[0])
        shape = res.local_shape
        block = op.body.block
        args = []
        for v in op.inputs:
            if isinstance(v.type, TensorType):
                p = self.placed(v)
                args.append(self.broadcast_to(self.value(v), p.local_shape, shape, p.element))
            else:
                args.append(self.broadcast_to(self.value(v), (), shape, v.type))
        env = dict(zip(block.args, args))
        term = block.last_op
        assert isinstance(term, dist.YieldOp)
        names = {v: r.name_hint for v, r in zip(term.values, op.outputs)}  # a yielded value is the map's result
        for inner in block.ops:
            if inner is term:
                self.bind(op.outputs, [self.rezero(env[v], self.placed(r), r.name_hint) for v, r in zip(inner.values, op.outputs)])
                return
            for v in inner.operands:
                if v not in env:
                    self.fail(inner, "uses a value from outside the dist.map body")
            hint = names.get(inner.results[0]) if inner.results else None
            env.update(zip(inner.results, self.elementwise(inner, [env[v] for v in inner.operands], shape, hint)))

    def matmul(self, op: dist.MatmulOp) -> None:
        a, b, r = self.placed(op.lhs), self.placed(op.rhs), self.placed(op.result)
        cdt = "f32" if half(r.element) else str(r.element)
        x = self.convert(self.value(op.lhs), a.local_shape, a.element, cdt)
        y = self.convert(self.value(op.rhs), b.local_shape, b.element, cdt)
        ra, rb = len(a.shape), len(b.shape)
        dims = f"contracting_dims = [{ra - 1}] x [{rb - 2}]"
        if rb > 2:
            batch = ", ".join(str(i) for i in range(rb - 2))
            dims = f"batching_dims = [{batch}] x [{batch}], " + dims
        hint = op.result.name_hint
        out = self.text.op(
            hint if cdt == str(r.element) else None,
            f"stablehlo.dot_general {x}, {y}, {dims} : ({ttype(a.local_shape, cdt)}, {ttype(b.local_shape, cdt)}) -> {ttype(r.local_shape, cdt)}",
        )
        self.bind(op.results, [self.rezero(self.convert(out, r.local_shape, cdt, r.element, hint), r, hint)])

    def reduce_over(self, x: str, shape: Sequence[int], elt: Attribute | str, kind: str, dims: Sequence[int], hint: str | None, count: float | None = None) -> str:
        """``kind`` over ``dims`` of a tensor of ``shape`` (in its own element type); avg
        divides by ``count`` (default: the elements reduced)."""
        keep = [d for i, d in enumerate(shape) if i not in dims]
        if not dims:
            return x
        z = self.const(reduction_identity(kind, elt), (), elt, "init")
        red = self.text.op(
            None if kind == "avg" else hint,
            f"stablehlo.reduce({x} init: {z}) applies stablehlo.{_REDUCER[kind]} across dimensions = [{', '.join(map(str, dims))}] : "
            f"({ttype(shape, elt)}, {ttype((), elt)}) -> {ttype(keep, elt)}",
        )
        if kind != "avg":
            return red
        if count is None:
            count = math.prod(shape[d] for d in dims)
        return self.binary("divide", red, self.const(count, keep, elt), keep, elt, hint)

    def reduce_tensor(self, op: dist.ReduceTensorOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        kind = op.option("op")
        cdt = "f32" if half(x.element) and kind not in ("max", "min") else str(x.element)
        dims = list(op.option("dims"))
        xc = self.convert(self.value(op.input), x.local_shape, x.element, cdt)
        if kind in ("max", "min", "prod") and set(dims) & set(x.uneven):  # padding must not win
            mask = self.held(x)
            assert mask is not None
            xc = self.select(mask, xc, self.const(reduction_identity(kind, cdt), x.local_shape, cdt, "identity"), x.local_shape, cdt)
        # avg: the interpreter's count, the dim's size over its ranks (layout.avg_count)
        count = float(layout.avg_count(x.shape, x.placements, x.mesh.sizes, dims))
        red = self.reduce_over(xc, x.local_shape, cdt, kind, dims, None if cdt != str(x.element) else op.result.name_hint, count)
        self.bind(op.results, [self.rezero(self.convert(red, r.local_shape, cdt, r.element, op.result.name_hint), r, op.result.name_hint)])

    def cast(self, op: dist.CastOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        self.bind(op.results, [self.convert(self.value(op.input), x.local_shape, x.element, r.element, op.result.name_hint)])

    def dropout(self, op: dist.DropoutOp) -> None:
        x = self.placed(op.input)
        shape, elt = x.local_shape, x.element
        p, seed = op.option("p"), op.option("seed")
        u = "i64"  # signless: multiplies and adds wrap as splitmix64 needs, shifts are logical
        # the logical flat index of every element of this device's block
        strides = [math.prod(x.shape[d + 1 :]) for d in range(len(x.shape))]
        index = None
        for d, extent in enumerate(shape):
            term = self.text.op("iota", f"stablehlo.iota dim = {d} : {ttype(shape, u)}")
            start = self.block_start(x, d, extent, u)
            if start is not None:
                term = self.binary("add", term, self.broadcast_to(start, (), shape, u), shape, u)
            if strides[d] != 1:
                term = self.binary("multiply", term, self.const(strides[d], shape, u), shape, u)
            index = term if index is None else self.binary("add", index, term, shape, u, "index")
        if index is None:
            index = self.const(0, shape, u)
        # splitmix64 (dialects/rng.py): z = index * GOLDEN + mix(seed), finalised
        z = self.binary("multiply", index, self.const(int(rng.GOLDEN), shape, u, "golden"), shape, u)
        z = self.binary("add", z, self.const(int(rng.seed_key(seed)), shape, u, "key"), shape, u)
        for shift, mult in ((30, int(rng._M1)), (27, int(rng._M2)), (31, None)):
            z = self.binary("xor", z, self.binary("shift_right_logical", z, self.const(shift, shape, u, f"shift{shift}"), shape, u), shape, u)
            if mult is not None:
                z = self.binary("multiply", z, self.const(mult, shape, u, "mix"), shape, u)
        bits = self.binary("shift_right_logical", z, self.const(64 - rng.BITS, shape, u, "shift"), shape, u, "bits")
        # the top BITS bits, shifted down, are non-negative: a signed compare (what XLA
        # allows on i64) is the unsigned one
        keep = self.compare("GE", bits, self.const(rng.keep_threshold(p), shape, u, "threshold"), shape, u, "SIGNED", "keep")
        cdt = "f32" if half(elt) else str(elt)
        xc = self.convert(self.value(op.input), shape, elt, cdt)
        scaled = self.binary("multiply", xc, self.const(1.0 / (1.0 - p), shape, cdt, "scale"), shape, cdt)
        out = self.select(keep, scaled, self.const(0.0, shape, cdt, "zero"), shape, cdt, op.result.name_hint if cdt == str(elt) else None)
        self.bind(op.results, [self.convert(out, shape, cdt, elt, op.result.name_hint)])

    def embedding_bag(self, op: dist.EmbeddingBagOp) -> None:
        tp, ip, r = self.placed(op.table), self.placed(op.indices), self.placed(op.result)
        ts, ishape = tp.local_shape, ip.local_shape
        lead = len(ts) - 2
        rows, width = ts[-2], ts[-1]
        mode = op.option("mode")
        idx = self.convert(self.value(op.indices), ishape, ip.element, "i64")
        row0 = self.block_start(tp, lead, rows, "i64")
        valid = None
        if row0 is not None:  # a row-sliced table: this device adds the rows it holds
            loc = self.binary("subtract", idx, self.broadcast_to(row0, (), ishape, "i64"), ishape, "i64", "row")
            lo = self.compare("GE", loc, self.const(0, ishape, "i64"), ishape, "i64", "SIGNED")
            hi = self.compare("LT", loc, self.rows_held(tp, lead, ishape), ishape, "i64", "SIGNED")
            valid = self.binary("and", lo, hi, ishape, "i1", "held")
            idx = self.select(valid, loc, self.const(0, ishape, "i64"), ishape, "i64")
        gshape = (*ishape, width)
        batch = "operand_batching_dims = [0], start_indices_batching_dims = [0], " if lead else ""
        numbers = (
            f"#stablehlo.gather<offset_dims = [{len(ishape)}], collapsed_slice_dims = [{lead}], {batch}"
            f"start_index_map = [{lead}], index_vector_dim = {len(ishape)}>"
        )
        sizes = ", ".join(["1"] * (lead + 1) + [str(width)])
        g = self.text.op(
            "rows",
            f'"stablehlo.gather"({self.value(op.table)}, {idx}) <{{dimension_numbers = {numbers}, indices_are_sorted = false, '
            f"slice_sizes = array<i64: {sizes}>}}> : ({ttype(ts, tp.element)}, {ttype(ishape, 'i64')}) -> {ttype(gshape, tp.element)}",
        )
        cdt = "f32" if half(r.element) and mode != "max" else str(r.element)
        g = self.convert(g, gshape, tp.element, cdt)
        if valid is not None:
            mask = self.text.op(
                None, f"stablehlo.broadcast_in_dim {valid}, dims = [{', '.join(map(str, range(len(ishape))))}] : ({ttype(ishape, 'i1')}) -> {ttype(gshape, 'i1')}"
            )
            g = self.select(mask, g, self.const(0.0, gshape, cdt), gshape, cdt)
        kind = {"sum": "sum", "mean": "avg", "max": "max"}[mode]
        red = self.reduce_over(g, gshape, cdt, kind, [len(ishape) - 1], None if cdt != str(r.element) else op.result.name_hint)
        # padded bags (index 0 gathers a real row) are re-zeroed
        self.bind(op.results, [self.rezero(self.convert(red, r.local_shape, cdt, r.element, op.result.name_hint), r, op.result.name_hint)])

    def scatter_add(self, op: dist.ScatterAddOp) -> None:
        ip, up, r = self.placed(op.indices), self.placed(op.updates), self.placed(op.result)
        ishape, ushape, rshape = ip.local_shape, up.local_shape, r.local_shape
        lead = len(ishape) - 2
        rows, width = rshape[-2], rshape[-1]
        cdt = "f32" if half(r.element) else str(r.element)
        idx = self.convert(self.value(op.indices), ishape, ip.element, "i64")
        row0 = self.block_start(r, lead, rows, "i64")
        if row0 is not None:  # a row-sliced result: this device adds into the rows it holds
            idx = self.binary("subtract", idx, self.broadcast_to(row0, (), ishape, "i64"), ishape, "i64", "row")
        # an index outside the rows held adds nothing: its update is zero, at row 0
        lo = self.compare("GE", idx, self.const(0, ishape, "i64"), ishape, "i64", "SIGNED")
        hi = self.compare("LT", idx, self.rows_held(r, lead, ishape), ishape, "i64", "SIGNED")
        held = self.binary("and", lo, hi, ishape, "i1", "held")
        idx = self.select(held, idx, self.const(0, ishape, "i64"), ishape, "i64")
        # each update row once per position of its bag
        full = (*ishape, width)
        u = self.convert(self.value(op.updates), ushape, up.element, cdt)
        keep = ", ".join(map(str, [*range(len(ishape) - 1), len(ishape)]))
        u = self.text.op(None, f"stablehlo.broadcast_in_dim {u}, dims = [{keep}] : ({ttype(ushape, cdt)}) -> {ttype(full, cdt)}")
        mask = self.text.op(None, f"stablehlo.broadcast_in_dim {held}, dims = [{', '.join(map(str, range(len(ishape))))}] : ({ttype(ishape, 'i1')}) -> {ttype(full, 'i1')}")
        u = self.select(mask, u, self.const(0, full, cdt), full, cdt)
        batch = "input_batching_dims = [0], scatter_indices_batching_dims = [0], " if lead else ""
        numbers = (
            f"#stablehlo.scatter<update_window_dims = [{len(ishape)}], inserted_window_dims = [{lead}], {batch}"
            f"scatter_dims_to_operand_dims = [{lead}], index_vector_dim = {len(ishape)}>"
        )
        t = self.text
        zeros = self.const(0, rshape, cdt, "zeros")
        out = t.name(op.result.name_hint if cdt == str(r.element) else None)
        t.line(f'{out} = "stablehlo.scatter"({zeros}, {idx}, {u}) <{{indices_are_sorted = false, scatter_dimension_numbers = {numbers}, unique_indices = false}}> ({{')
        self.region("add", cdt)
        t.line(f"}}) : ({ttype(rshape, cdt)}, {ttype(ishape, 'i64')}, {ttype(full, cdt)}) -> {ttype(rshape, cdt)}")
        self.bind(op.results, [self.convert(out, rshape, cdt, r.element, op.result.name_hint)])

    def rows_held(self, p: Placed, dim: int, shape: Sequence[int]) -> str:
        """The number of rows of ``dim`` this device holds, broadcast to ``shape`` (i64):
        the padded block's extent, or its own block's size where the dim is padded (an
        index into the padding names another device's row)."""
        if dim not in p.uneven:
            return self.const(p.local_shape[dim], shape, "i64")
        size = self.convert(self.span(p, dim)[1], (), "i32", "i64")
        return self.broadcast_to(size, (), shape, "i64")

    def sort(self, op: dist.SortOp) -> None:
        """``stablehlo.sort`` with jnp.sort's comparator (stable; floats canonicalised,
        -0.0 as +0.0 and every NaN as one NaN, then compared in TOTALORDER: NaN last)."""
        ps = [self.placed(v) for v in op.inputs]
        shape, key = ps[0].local_shape, ps[0].element
        t = self.text
        out = t.name(op.outputs[0].name_hint or "sort")
        count = f":{len(ps)}" if len(ps) > 1 else ""
        operands = ", ".join(self.value(v) for v in op.inputs)
        t.line(f'{out}{count} = "stablehlo.sort"({operands}) <{{dimension = {op.option("dim")} : i64, is_stable = true}}> ({{')
        args = [t.name("lhs" if k % 2 == 0 else "rhs") for k in range(2 * len(ps))]
        t.line("^bb0(" + ", ".join(f"{a}: {ttype((), ps[k // 2].element)}" for k, a in enumerate(args)) + "):")
        t.depth += 1
        a, b = args[0], args[1]
        if isinstance(key, AnyFloat):

            def canonical(x: str) -> str:
                zero = self.const(0.0, (), key)
                z = self.select(self.compare("EQ", x, zero, (), key, "FLOAT"), zero, x, (), key)
                return self.select(self.compare("NE", x, x, (), key, "FLOAT"), self.const(math.nan, (), key), z, (), key)

            lt = self.compare("LT", canonical(a), canonical(b), (), key, "TOTALORDER")
        else:
            lt = self.compare("LT", a, b, (), key, "SIGNED")
        t.line(f"stablehlo.return {lt} : {ttype((), 'i1')}")
        t.depth -= 1
        types = [ttype(shape, p.element) for p in ps]
        results = types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"
        t.line(f"}}) : ({', '.join(types)}) -> {results}")
        self.bind(op.outputs, [out] if len(ps) == 1 else [f"{out}#{k}" for k in range(len(ps))])

    # ------------------------------------------------------------------ layout ops
    def transpose(self, op: dist.TransposeOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        perm = ", ".join(map(str, op.option("perm")))
        self.bind(op.results, [self.text.op(
            op.result.name_hint,
            f"stablehlo.transpose {self.value(op.input)}, dims = [{perm}] : ({ttype(x.local_shape, x.element)}) -> {ttype(r.local_shape, r.element)}",
        )])

    def reshape(self, op: dist.ReshapeOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        self.padded_dims_kept(op, x, r)
        self.bind(op.results, [self.reshape_to(self.value(op.input), x.local_shape, r.local_shape, x.element, op.result.name_hint)])

    def iota(self, op: dist.IotaOp) -> None:
        r = self.placed(op.result)
        dim, shape, elt = op.option("dim"), r.local_shape, r.element
        start = self.block_start(r, dim, shape[dim], str(elt))
        y = self.text.op(None if start else op.result.name_hint, f"stablehlo.iota dim = {dim} : {ttype(shape, elt)}")
        if start is not None:
            y = self.binary("add", y, self.broadcast_to(start, (), shape, elt), shape, elt, op.result.name_hint)
        self.bind(op.results, [self.rezero(y, r, op.result.name_hint)])

    def slice_text(self, x: str, src: Placed, dst: Placed, offsets: list[int], strides: list[int]) -> str:
        bounds = [f"{o}:{o + (n - 1) * s + 1 if n else o}" + (f":{s}" if s != 1 else "") for o, s, n in zip(offsets, strides, dst.local_shape)]
        return f"stablehlo.slice {x} [{', '.join(bounds)}] : ({ttype(src.local_shape, src.element)}) -> {ttype(dst.local_shape, dst.element)}"

    def concat_text(self, names: list[str], ins: list[Placed], dst: Placed, dim: int) -> str:
        types = ", ".join(ttype(p.local_shape, p.element) for p in ins)
        return f"stablehlo.concatenate {', '.join(names)}, dim = {dim} : ({types}) -> {ttype(dst.local_shape, dst.element)}"

    # ------------------------------------------------------------------ blocks and collectives
    def slice_block(self, x: str, src: Placed, dst: Placed, axes: list[int], dim: int, hint: str | None) -> str:
        extent = dst.local_shape[dim]
        shape = list(src.local_shape)
        if not self.lined_up(dst, src, dim, axes):  # nested blocks: each member's moved into its slot
            x, shape = self.spread(x, dst, src, dim, axes)
        elif dim in dst.uneven:  # equal blocks of the padded dim
            padded = src.mesh.group_size(axes) * extent
            x = self.pad_dim(x, shape, src.element, dim, padded)
            shape[dim] = padded
        start = self.binary("multiply", self.group_rank(src.mesh, axes), self.const(extent, (), "i32"), (), "i32", "start")
        zero = self.const(0, (), "i32") if len(src.local_shape) > 1 else None
        starts = ", ".join(start if d == dim else zero for d in range(len(src.local_shape)))  # type: ignore[misc]
        idx_types = ", ".join(["tensor<i32>"] * len(src.local_shape))
        return self.text.op(
            hint,
            f"stablehlo.dynamic_slice {x}, {starts}, sizes = [{', '.join(map(str, dst.local_shape))}] : "
            f"({ttype(shape, src.element)}, {idx_types}) -> {ttype(dst.local_shape, dst.element)}",
        )

    def _reduction_collective(self, name: str, x: str, shape_in: Sequence[int], shape_out: Sequence[int], elt: Attribute, axes: list[int], mesh: RootMesh, kind: str, extra: str, hint: str | None) -> str:
        cdt = "f32" if half(elt) else str(elt)
        xc = self.convert(x, shape_in, elt, cdt)
        groups = mesh.groups(axes)
        attrs = f"{self.channel_attrs()}, replica_groups = {dense(groups)}{extra}, use_global_device_ids"
        t = self.text
        out = t.name(hint if kind != "avg" and cdt == str(elt) else f"{hint or name}_{cdt}" if cdt != str(elt) else f"{hint or name}_sum")
        t.line(f'{out} = "stablehlo.{name}"({xc}) <{{{attrs}}}> ({{')
        self.region(_REDUCER[kind], cdt)
        t.line(f"}}) : ({ttype(shape_in, cdt)}) -> {ttype(shape_out, cdt)}")
        if kind == "avg":
            out = self.binary("divide", out, self.const(len(groups[0]), shape_out, cdt), shape_out, cdt, hint if cdt == str(elt) else None)
        return self.convert(out, shape_out, cdt, elt, hint)

    def all_reduce(self, x: str, src: Placed, axes: list[int], kind: str, hint: str | None) -> str:
        s = src.local_shape
        return self._reduction_collective("all_reduce", x, s, s, src.element, axes, src.mesh, kind, "", hint)

    def reduce_scatter(self, x: str, src: Placed, dst: Placed, axes: list[int], kind: str, dim: int, hint: str | None) -> str:
        if dst.local_shape[dim] == 0:  # no elements to reduce (StableHLO has no empty scatter)
            return self.const(0, dst.local_shape, dst.element, hint or "empty")
        extra = f", scatter_dimension = {dim} : i64"
        shape = list(src.local_shape)
        if not self.lined_up(dst, src, dim, axes):  # nested blocks: each member's moved into its slot
            x, shape = self.spread(x, dst, src, dim, axes)
            return self._reduction_collective("reduce_scatter", x, shape, dst.local_shape, src.element, axes, src.mesh, kind, extra, hint)
        if dim in dst.uneven:  # equal blocks of the padded dim
            shape[dim] = src.mesh.group_size(axes) * dst.local_shape[dim]
            x = self.pad_dim(x, src.local_shape, src.element, dim, shape[dim])
        return self._reduction_collective("reduce_scatter", x, shape, dst.local_shape, src.element, axes, src.mesh, kind, extra, hint)

    def reduce(self, x: str, src: Placed, axes: list[int], kind: str, root: int, hint: str | None) -> str:
        return self.all_reduce(x, src, axes, kind, hint)

    def all_gather(self, x: str, src: Placed, dst: Placed, axes: list[int], dim: int, hint: str | None) -> str:
        if src.local_shape[dim] == 0:  # an empty dim gathers nothing (StableHLO has no empty gather)
            return self.const(0, dst.local_shape, dst.element, hint or "empty")
        groups = src.mesh.groups(axes)
        attrs = f"all_gather_dim = {dim} : i64, {self.channel_attrs()}, replica_groups = {dense(groups)}, use_global_device_ids"
        shape = list(dst.local_shape)
        shape[dim] = len(groups[0]) * src.local_shape[dim]  # padded blocks: cut the padding past the last one
        y = self.text.op(
            hint if tuple(shape) == dst.local_shape else None,
            f'"stablehlo.all_gather"({x}) <{{{attrs}}}> : ({ttype(src.local_shape, src.element)}) -> {ttype(shape, dst.element)}',
        )
        if not self.lined_up(src, dst, dim, axes):  # nested blocks: each member's moved to its offset
            return self.gather_blocks(y, shape, src, dst, dim, axes)
        return y if tuple(shape) == dst.local_shape else self.cut_dim(y, shape, dst.element, dim, dst.local_shape[dim])

    def broadcast(self, x: str, src: Placed, axes: list[int], root: int, hint: str | None) -> str:
        s = src.local_shape
        n = src.mesh.group_size(axes)
        one = self.reshape_to(x, s, (1, *s), src.element)
        stacked_shape = (n, *s)
        g = self.all_gather(one, Placed((1, *s), src.element, src.mesh, ()), Placed(stacked_shape, src.element, src.mesh, ()), axes, 0, None)
        bounds = ", ".join([f"{root}:{root + 1}"] + [f"0:{d}" for d in s])
        picked = self.text.op(None, f"stablehlo.slice {g} [{bounds}] : ({ttype(stacked_shape, src.element)}) -> {ttype((1, *s), src.element)}")
        return self.reshape_to(picked, (1, *s), s, src.element, hint)

    def all_to_all(self, x: str, src: Placed, dst: Placed, axes: list[int], split: int, concat: int, hint: str | None) -> str:
        groups = src.mesh.groups(axes)
        n = len(groups[0])
        attrs = (
            f"{self.channel_attrs()}, concat_dimension = {concat} : i64, replica_groups = {dense(groups)}, "
            f"split_count = {n} : i64, split_dimension = {split} : i64"
        )
        # padded dims: the split dim is padded to equal blocks, the joined one cut back
        shape_in = list(src.local_shape)
        shape_in[split] = n * dst.local_shape[split]
        if self.lined_up(dst, src, split, axes):
            x = self.pad_dim(x, src.local_shape, src.element, split, shape_in[split])
        else:  # nested blocks: each member's moved into its slot
            x, shape_in = self.spread(x, dst, src, split, axes)
        shape = list(dst.local_shape)
        shape[concat] = n * src.local_shape[concat]
        y = self.text.op(
            hint if tuple(shape) == dst.local_shape else None,
            f'"stablehlo.all_to_all"({x}) <{{{attrs}}}> : ({ttype(shape_in, src.element)}) -> {ttype(shape, dst.element)}',
        )
        if not self.lined_up(src, dst, concat, axes):
            return self.gather_blocks(y, shape, src, dst, concat, axes)
        return y if tuple(shape) == dst.local_shape else self.cut_dim(y, shape, dst.element, concat, dst.local_shape[concat])

    def permute(self, x: str, src: Placed, axes: list[int], pairs: list[tuple[int, int]], offset: int | None, hint: str | None) -> str:
        if not pairs:  # nobody receives: every rank's result is zeros
            return self.const(0, src.local_shape, src.element, hint or "zeros")
        devices = [[g[s], g[t]] for g in src.mesh.groups(axes) for s, t in pairs]
        t = ttype(src.local_shape, src.element)
        attrs = f"{self.channel_attrs()}, source_target_pairs = {dense(devices)}"
        return self.text.op(hint, f'"stablehlo.collective_permute"({x}) <{{{attrs}}}> : ({t}) -> {t}')

    def send(self, x: str, src: Placed, axes: list[int], source: int, to: int, hint: str | None) -> str:
        pairs = [[g[source], g[to]] for g in src.mesh.groups(axes)]
        t = ttype(src.local_shape, src.element)
        attrs = f"{self.channel_attrs()}, source_target_pairs = {dense(pairs)}"
        return self.text.op(hint, f'"stablehlo.collective_permute"({x}) <{{{attrs}}}> : ({t}) -> {t}')
