"""Export to MLIR's ``mesh`` dialect as MLIR 19 spells it (``mlir-opt-19`` parses and
verifies the result), in SPMD form.

A function keeps its name; its arguments and results are the blocks one device holds
(per-device shapes; builtin scalars stay scalars), each annotated with
``mesh.sharding = #mesh.shard<@mesh, [[axes of dim 0], ...]>``: how the blocks make the
logical tensor (``split_axes``, outer axis first, as ``sliced<d, k>`` orders them). A
``local`` or ``at<r>`` placement, which a mesh sharding cannot say, is spelled out in
``distir.placements = "[local, ...]"``. The body is the device's program
(``frontends/export.py``): computation in ``linalg``/``arith``/``math``/``tensor`` on
tensors, communication in the ``mesh`` collectives over the root mesh's axes
(``mesh_axes`` in group order, outer first, which is distir's group order). An ``at<r>``
value is a tensor on every device, meaningful on rank r (MLIR's convention for
``mesh.reduce``); results are returned as each device holds them.

A sliced dim the ranks do not divide is refused (``UNEVEN``): the signature holds the
device's own blocks, one static shape per device, and MLIR 19's mesh cuts a dim only
into equal parts (no ``sharded_dims_offsets``); padding the blocks would change the
function's types. The sdy export pads such dims instead.

=========================  ==============================================================
distir                     MLIR 19
=========================  ==============================================================
``dist.map``               one ``linalg.generic`` (broadcasts in its indexing maps, the
                           body's arith/math ops verbatim, ``linalg.yield``)
``dist.matmul``            ``linalg.generic`` contraction into a ``linalg.fill``-ed
                           accumulator (f16/bf16: ``arith.extf`` in the body, f32
                           accumulator, ``arith.truncf`` of the result)
``dist.reduce_tensor``     ``linalg.reduce`` (avg: then ``arith.divf``/``divsi`` by count)
``dist.cast``              ``arith`` casts on tensors
``dist.dropout``           ``linalg.generic``: splitmix64 (``dialects/rng.py``) on
                           ``linalg.index`` + the block offset, in i64 arith ops
``dist.embedding_bag``     ``linalg.generic`` over (bags, width, bag items) with
                           ``tensor.extract`` of table rows (a row-sliced table adds the
                           rows it holds)
``dist.scatter_add``       ``linalg.generic`` over (..., rows held, width) summing the
                           updates whose index names the row (bag order)
``dist.sort``              two ``linalg.generic`` (stable ranks, then the element of each
                           rank): MLIR 19 has no sort op
``dist.take_slice``        ``mesh.all_slice``
``dist.transpose`` ...     ``linalg.transpose``, ``tensor.reshape``, ``tensor.extract_slice``,
                           ``tensor.concat`` of the device's block; ``dist.iota``: a
                           ``linalg.generic`` of ``linalg.index`` plus the block's offset
``coll.all_reduce``        ``mesh.all_reduce`` (avg: sum, then divide by the group size;
                           f16/bf16 accumulate in f32, as the interpreter)
``coll.reduce_scatter``    ``mesh.reduce_scatter``
``coll.all_gather``        ``mesh.all_gather``
``coll.reduce``            ``mesh.reduce`` with ``root`` = the root's coordinates
``coll.broadcast``         ``mesh.broadcast``
``coll.all_to_all``        ``mesh.all_to_all`` (split = new sliced dim, concat = old one)
``coll.send``              ``scf.if`` on ``mesh.process_multi_index``: the source runs
                           ``mesh.send``, the target ``mesh.recv`` (0-d values travel
                           as 1-element tensors)
``coll.permute``           ``offset`` over one axis: ``mesh.shift ... rotate`` (read as
                           device i's value going to device i + offset, as ``np.roll``);
                           otherwise ``mesh.send``/``mesh.recv`` per pair under ``scf.if``,
                           zeros where no pair arrives
=========================  ==============================================================

Map bodies and scalar code keep their ``arith``/``math`` ops as they are (every op
distir's interpreter runs has the same name and meaning in MLIR 19).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith, func
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import AnyFloat, FloatAttr, IntegerAttr
from xdsl.ir import Attribute, Operation

from distir.dialects import dist, layout, rng
from distir.dialects.dist import TensorType
from distir.dialects.placements import Local
from distir.frontends.export import Exporter, Placed, RootMesh, half, literal, reduction_identity, ttype

_KIND = {"sum": "sum", "avg": "sum", "prod": "product", "max": "max", "min": "min"}
_FLOAT_COMBINE = {"sum": "arith.addf", "avg": "arith.addf", "prod": "arith.mulf", "max": "arith.maximumf", "min": "arith.minimumf"}
_INT_COMBINE = {"sum": "arith.addi", "avg": "arith.addi", "prod": "arith.muli", "max": "arith.maxsi", "min": "arith.minsi"}
_CASTS = (
    arith.ExtFOp, arith.TruncFOp, arith.SIToFPOp, arith.UIToFPOp, arith.FPToSIOp, arith.FPToUIOp,
    arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp,
)  # fmt: skip


def affine(n: int, exprs: Sequence[str]) -> str:
    dims = ", ".join(f"d{i}" for i in range(n))
    return f"affine_map<({dims}) -> ({', '.join(exprs)})>"


def is_float(elt: Attribute | str) -> bool:
    return isinstance(elt, AnyFloat) or str(elt) in ("f16", "bf16", "f32", "f64")


class MeshExporter(Exporter):
    TARGET = "MLIR mesh"
    UNEVEN = "the export is SPMD with one static shape per device (MLIR 19's mesh has no sharded_dims_offsets)"

    # ------------------------------------------------------------------ module and functions
    def header(self, meshes: Sequence[RootMesh]) -> None:
        self.text.line("module {")
        self.text.depth = 1
        for m in meshes:
            self.text.line(f"mesh.mesh @{m.name}(shape = {'x'.join(map(str, m.sizes))})")

    def run(self) -> str:
        return super().run() + "}\n"

    def annotation(self, p: Placed | None) -> str:
        if p is None:
            return ""
        split = ", ".join("[" + ", ".join(map(str, p.slicing(d))) + "]" for d in range(max(len(p.shape), 1)))
        out = f"mesh.sharding = #mesh.shard<@{p.mesh.name}, [{split}]>"
        if p.at or p.axes_of(Local):
            out += f', distir.placements = "{layout.format_placements(p.placements)}"'
        return f" {{{out}}}"

    def function(self, f: func.FuncOp) -> None:
        self.check_boundary(f)
        self.coords: dict[int, str] = {}
        t = self.text
        block = f.body.block
        in_types, out_types = list(f.function_type.inputs.data), list(f.function_type.outputs.data)
        in_placed = [self.placed_type(f, ty) if isinstance(ty, TensorType) else None for ty in in_types]
        out_placed = [self.placed_type(f, ty) if isinstance(ty, TensorType) else None for ty in out_types]

        def local(ty: Attribute, p: Placed | None) -> str:
            return ttype(p.local_shape, p.element) if p is not None else str(ty)

        args = [t.name(a.name_hint or f"arg{i}") for i, a in enumerate(block.args)]
        sig = ", ".join(f"{a}: {local(ty, p)}{self.annotation(p)}" for a, ty, p in zip(args, in_types, in_placed))
        res = ", ".join(f"{local(ty, p)}{self.annotation(p)}" for ty, p in zip(out_types, out_placed))
        t.line(f"func.func @{f.sym_name.data}({sig}) -> ({res}) {{")
        t.depth += 1
        self.bind(block.args, args)
        ys = self.emit_block(block)
        types = ", ".join(local(ty, p) for ty, p in zip(out_types, out_placed))
        t.line(f"return {', '.join(ys)} : {types}" if ys else "return")
        t.depth -= 1
        t.line("}")

    # ------------------------------------------------------------------ small helpers
    def const(self, value: float | int, elt: Attribute | str, shape: Sequence[int] | None = None, hint: str = "cst") -> str:
        """A scalar constant, or a splat tensor constant of ``shape``."""
        lit = literal(value, elt)
        if shape is None:
            return self.text.op(hint, f"arith.constant {lit} : {elt}")
        return self.text.op(hint, f"arith.constant dense<{lit}> : {ttype(shape, elt)}")

    def empty(self, shape: Sequence[int], elt: Attribute | str) -> str:
        return self.text.op("init", f"tensor.empty() : {ttype(shape, elt)}")

    def filled(self, value: float | int, shape: Sequence[int], elt: Attribute | str) -> str:
        e = self.empty(shape, elt)
        v = self.const(value, elt)
        return self.text.op("acc", f"linalg.fill ins({v} : {elt}) outs({e} : {ttype(shape, elt)}) -> {ttype(shape, elt)}")

    def cast_tensor(self, x: str, shape: Sequence[int], src: Attribute | str, dst: Attribute | str, hint: str | None = None) -> str:
        """``x`` converted elementwise as numpy's ``astype`` does (``dist.cast``)."""
        s, d = str(src), str(dst)
        if s == d:
            return x
        if d == "i1":  # to bool: nonzero (NaN too)
            zero = self.const(0.0 if is_float(s) else 0, s, shape, "zero")
            cmp = "arith.cmpf une" if is_float(s) else "arith.cmpi ne"
            return self.text.op(hint, f"{cmp}, {x}, {zero} : {ttype(shape, s)}")
        op = self.cast_name(s, d)
        if op is None:  # f16 <-> bf16: through f32, which holds both exactly
            wide = self.text.op(None, f"arith.extf {x} : {ttype(shape, s)} to {ttype(shape, 'f32')}")
            return self.text.op(hint, f"arith.truncf {wide} : {ttype(shape, 'f32')} to {ttype(shape, d)}")
        return self.text.op(hint, f"{op} {x} : {ttype(shape, s)} to {ttype(shape, d)}")

    @staticmethod
    def cast_name(s: str, d: str) -> str | None:
        """The one arith cast from ``s`` to ``d`` (not i1) with numpy's ``astype``
        meaning; None for f16 <-> bf16 (two casts through f32)."""
        fs, fd = is_float(s), is_float(d)
        if fs and fd:
            widths = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
            if widths[s] == widths[d]:
                return None
            return "arith.extf" if widths[d] > widths[s] else "arith.truncf"
        if not fs and fd:
            return "arith.uitofp" if s == "i1" else "arith.sitofp"
        if fs and not fd:
            return "arith.fptosi"
        ws, wd = int(s[1:]), int(d[1:])
        if wd > ws:
            return "arith.extui" if s == "i1" else "arith.extsi"
        return "arith.trunci"

    def coord(self, mesh: RootMesh, axis: int) -> str:
        """This device's coordinate on root ``axis`` (``index``)."""
        if axis not in self.coords:
            self.coords[axis] = self.text.op(
                f"coord_{mesh.axis_names[axis]}", f"mesh.process_multi_index on @{mesh.name} axes = [{axis}] : index"
            )
        return self.coords[axis]

    def group_rank(self, mesh: RootMesh, axes: Sequence[int]) -> str:
        rank = self.coord(mesh, axes[0])
        for a in axes[1:]:
            scaled = self.text.op(None, f"arith.muli {rank}, {self.const(mesh.sizes[a], 'index')} : index")
            rank = self.text.op("rank", f"arith.addi {scaled}, {self.coord(mesh, a)} : index")
        return rank

    def block_start(self, p: Placed, dim: int, extent: int) -> str | None:
        """First logical index along ``dim`` of this device's block (``index``)."""
        axes = [a for a in p.slicing(dim) if p.mesh.sizes[a] > 1]
        if not axes:
            return None
        return self.text.op("start", f"arith.muli {self.group_rank(p.mesh, axes)}, {self.const(extent, 'index')} : index")

    def axes(self, axes: Sequence[int]) -> str:
        return f"mesh_axes = [{', '.join(map(str, axes))}]"

    # ------------------------------------------------------------------ scalar ops
    def scalar(self, op: Operation, xs: list[str], hint: str | None = None) -> str:
        """One arith/math op on scalars, in MLIR 19's syntax."""
        t = self.text
        hint = hint or (op.results[0].name_hint if op.results else None)
        if isinstance(op, arith.ConstantOp):
            v = op.value
            if not isinstance(v, (FloatAttr, IntegerAttr)):
                self.fail(op, f"of {v} cannot be exported to {self.TARGET} (scalar constants only)")
            return self.const(v.value.data, op.results[0].type, hint=hint or "cst")
        out = op.results[0].type
        if isinstance(op, (arith.CmpfOp, arith.CmpiOp)):
            words = arith.CMPF_COMPARISON_OPERATIONS if isinstance(op, arith.CmpfOp) else arith.CMPI_COMPARISON_OPERATIONS
            return t.op(hint, f"{op.name} {words[op.predicate.value.data]}, {xs[0]}, {xs[1]} : {op.operands[0].type}")
        if isinstance(op, arith.SelectOp):
            return t.op(hint, f"arith.select {xs[0]}, {xs[1]}, {xs[2]} : {out}")
        if isinstance(op, _CASTS):
            return t.op(hint, f"{op.name} {xs[0]} : {op.operands[0].type} to {out}")
        if op.name.startswith(("arith.", "math.")) and len(op.results) == 1 and all(v.type == out for v in op.operands):
            return t.op(hint, f"{op.name} {', '.join(xs)} : {out}")
        if isinstance(op, (xmath.FPowIOp, xmath.IPowIOp)):
            return t.op(hint, f"{op.name} {', '.join(xs)} : {out}, {op.operands[1].type}")
        self.fail(op, f"has no {self.TARGET} spelling in this exporter")

    def scalar_op(self, op: Operation, operands: list[str]) -> list[str]:
        return [self.scalar(op, operands)]

    def generic(
        self, hint: str | None, ins: Sequence[tuple[str, str, str]], outs: Sequence[tuple[str, str]], loops: Sequence[str], result_types: Sequence[str]
    ) -> tuple[list[str], list[str]]:
        """Open a ``linalg.generic``: ``ins`` are (value, type, indexing map), ``outs``
        (value, type) with the identity map over the parallel loops. Returns the result
        names and the block argument names; the caller writes the body and ``close``s."""
        t = self.text
        n = len(loops)
        parallel = [f"d{i}" for i, k in enumerate(loops) if k == "parallel"]
        maps = [m for _, _, m in ins] + [affine(n, parallel)] * len(outs)
        iters = ", ".join(f'"{k}"' for k in loops)
        ins_text = f"ins({', '.join(v for v, _, _ in ins)} : {', '.join(ty for _, ty, _ in ins)}) " if ins else ""
        outs_text = f"outs({', '.join(v for v, _ in outs)} : {', '.join(ty for _, ty in outs)})"
        names = t.ops(hint, len(outs), f"linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}]}} {ins_text}{outs_text} {{")
        # the ops line ended with '{': the body follows
        args = [t.name("in") for _ in ins] + [t.name("out") for _ in outs]
        elts = [_element(ty) for _, ty, _ in ins] + [_element(ty) for _, ty in outs]
        t.line("^bb0(" + ", ".join(f"{a}: {e}" for a, e in zip(args, elts)) + "):")
        t.depth += 1
        self._closing = " -> " + (result_types[0] if len(result_types) == 1 else "(" + ", ".join(result_types) + ")")
        return names, args

    def close(self, values: Sequence[str], types: Sequence[str]) -> None:
        t = self.text
        t.line(f"linalg.yield {', '.join(values)} : {', '.join(types)}")
        t.depth -= 1
        t.line("}" + self._closing)

    def operand_map(self, shape: Sequence[int], target: Sequence[int], loops: int | None = None) -> str:
        """Indexing map reading an operand of ``shape`` broadcast (numpy) to ``target``."""
        n = len(target) if loops is None else loops
        off = len(target) - len(shape)
        exprs = ["0" if s == 1 and target[off + i] != 1 else f"d{off + i}" for i, s in enumerate(shape)]
        return affine(n, exprs)

    # ------------------------------------------------------------------ local ops
    def map(self, op: dist.MapOp) -> None:
        res = self.placed(op.outputs[0])
        shape = res.local_shape
        ins = []
        for v in op.inputs:
            if isinstance(v.type, TensorType):
                p = self.placed(v)
                ins.append((self.value(v), ttype(p.local_shape, p.element), self.operand_map(p.local_shape, shape)))
            else:
                ins.append((self.value(v), str(v.type), affine(len(shape), [])))
        rtypes = [ttype(shape, r.type.element_type) for r in op.outputs]  # type: ignore[attr-defined]
        outs = [(self.empty(shape, r.type.element_type), ty) for r, ty in zip(op.outputs, rtypes)]  # type: ignore[attr-defined]
        hint = op.outputs[0].name_hint if len(op.outputs) == 1 else (op.outputs[0].name_hint or "map")
        names, args = self.generic(hint, ins, outs, ["parallel"] * len(shape), rtypes)
        block = op.body.block
        env = dict(zip(block.args, args))
        for inner in block.ops:
            if isinstance(inner, dist.YieldOp):
                self.close([env[v] for v in inner.values], [str(v.type) for v in inner.values])
                break
            for v in inner.operands:
                if v not in env:
                    self.fail(inner, "uses a value from outside the dist.map body")
            env[inner.results[0]] = self.scalar(inner, [env[v] for v in inner.operands])
        self.bind(op.outputs, names)

    def matmul(self, op: dist.MatmulOp) -> None:
        a, b, r = self.placed(op.lhs), self.placed(op.rhs), self.placed(op.result)
        elt = str(r.element)
        float_ = is_float(elt)
        acc_elt = "f32" if half(elt) else elt
        rank = len(r.local_shape)
        k = f"d{rank}"
        lhs = [f"d{i}" for i in range(rank - 1)] + [k]
        rhs = [f"d{i}" for i in range(rank - 2)] + [k, f"d{rank - 1}"] if len(b.shape) > 2 else [k, f"d{rank - 1}"]
        acc = self.filled(0.0 if float_ else 0, r.local_shape, acc_elt)
        ins = [
            (self.value(op.lhs), ttype(a.local_shape, a.element), affine(rank + 1, lhs)),
            (self.value(op.rhs), ttype(b.local_shape, b.element), affine(rank + 1, rhs)),
        ]
        out_t = ttype(r.local_shape, acc_elt)
        hint = op.result.name_hint if acc_elt == elt else None
        (y,), (x1, x2, s) = self.generic(hint, ins, [(acc, out_t)], ["parallel"] * rank + ["reduction"], [out_t])
        if acc_elt != elt:
            x1 = self.text.op(None, f"arith.extf {x1} : {elt} to {acc_elt}")
            x2 = self.text.op(None, f"arith.extf {x2} : {elt} to {acc_elt}")
        p = self.text.op(None, f"{'arith.mulf' if float_ else 'arith.muli'} {x1}, {x2} : {acc_elt}")
        total = self.text.op(None, f"{'arith.addf' if float_ else 'arith.addi'} {s}, {p} : {acc_elt}")
        self.close([total], [acc_elt])
        self.bind(op.results, [self.cast_tensor(y, r.local_shape, acc_elt, elt, op.result.name_hint)])

    def reduce_over(self, x: str, shape: Sequence[int], elt: str, kind: str, dims: Sequence[int], hint: str | None) -> str:
        if not dims:
            return x
        keep = [d for i, d in enumerate(shape) if i not in dims]
        float_ = is_float(elt)
        acc = self.filled(reduction_identity(kind, elt), keep, elt)
        t = self.text
        red = t.op(
            None if kind == "avg" else hint,
            f"linalg.reduce ins({x} : {ttype(shape, elt)}) outs({acc} : {ttype(keep, elt)}) dimensions = [{', '.join(map(str, dims))}]",
        )
        t.depth += 2
        a, b = t.name("in"), t.name("acc")
        t.line(f"({a}: {elt}, {b}: {elt}) {{")
        t.depth += 1
        combine = (_FLOAT_COMBINE if float_ else _INT_COMBINE)[kind]
        c = t.op(None, f"{combine} {a}, {b} : {elt}")
        t.line(f"linalg.yield {c} : {elt}")
        t.depth -= 1
        t.line("}")
        t.depth -= 2
        if kind != "avg":
            return red
        count = self.const(math.prod(shape[d] for d in dims), elt, keep)
        return t.op(hint, f"{'arith.divf' if float_ else 'arith.divsi'} {red}, {count} : {ttype(keep, elt)}")

    def reduce_tensor(self, op: dist.ReduceTensorOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        kind = op.option("op")
        elt = str(x.element)
        cdt = "f32" if half(elt) and kind not in ("max", "min") else elt
        xc = self.cast_tensor(self.value(op.input), x.local_shape, elt, cdt)
        red = self.reduce_over(xc, x.local_shape, cdt, kind, list(op.option("dims")), op.result.name_hint if cdt == elt else None)
        self.bind(op.results, [self.cast_tensor(red, r.local_shape, cdt, elt, op.result.name_hint)])

    def cast(self, op: dist.CastOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        self.bind(op.results, [self.cast_tensor(self.value(op.input), x.local_shape, x.element, r.element, op.result.name_hint)])

    def dropout(self, op: dist.DropoutOp) -> None:
        x = self.placed(op.input)
        shape, elt = x.local_shape, str(x.element)
        p, seed = op.option("p"), op.option("seed")
        starts = [self.block_start(x, d, extent) for d, extent in enumerate(shape)]
        strides = [math.prod(x.shape[d + 1 :]) for d in range(len(x.shape))]
        cdt = "f32" if half(elt) else elt
        consts = {
            "golden": self.const(int(rng.GOLDEN), "i64", hint="golden"),
            "key": self.const(int(rng.seed_key(seed)), "i64", hint="key"),
            "m1": self.const(int(rng._M1), "i64", hint="m1"),
            "m2": self.const(int(rng._M2), "i64", hint="m2"),
            **{f"s{s}": self.const(s, "i64", hint=f"shift{s}") for s in (30, 27, 31, 64 - rng.BITS)},
            "threshold": self.const(rng.keep_threshold(p), "i64", hint="threshold"),
            "scale": self.const(1.0 / (1.0 - p), cdt, hint="scale"),
            "zero": self.const(0.0, cdt, hint="zero"),
            **{f"stride{d}": self.const(s, "index", hint=f"stride{d}") for d, s in enumerate(strides) if s != 1},
        }
        ty = ttype(shape, elt)
        (y,), (xi, _) = self.generic(op.result.name_hint, [(self.value(op.input), ty, affine(len(shape), [f"d{i}" for i in range(len(shape))]))], [(self.empty(shape, elt), ty)], ["parallel"] * len(shape), [ty])
        t = self.text
        index = None
        for d in range(len(shape)):
            i = t.op(None, f"linalg.index {d} : index")
            if starts[d] is not None:
                i = t.op(None, f"arith.addi {i}, {starts[d]} : index")
            if strides[d] != 1:
                i = t.op(None, f"arith.muli {i}, {consts[f'stride{d}']} : index")
            index = i if index is None else t.op(None, f"arith.addi {index}, {i} : index")
        z = t.op(None, f"arith.index_cast {index} : index to i64") if index is not None else self.const(0, "i64")
        z = t.op(None, f"arith.muli {z}, {consts['golden']} : i64")
        z = t.op(None, f"arith.addi {z}, {consts['key']} : i64")
        for shift, mult in ((30, "m1"), (27, "m2"), (31, None)):
            s = t.op(None, f"arith.shrui {z}, {consts[f's{shift}']} : i64")
            z = t.op(None, f"arith.xori {z}, {s} : i64")
            if mult is not None:
                z = t.op(None, f"arith.muli {z}, {consts[mult]} : i64")
        bits = t.op("bits", f"arith.shrui {z}, {consts[f's{64 - rng.BITS}']} : i64")
        keep = t.op("keep", f"arith.cmpi uge, {bits}, {consts['threshold']} : i64")
        v = t.op(None, f"arith.extf {xi} : {elt} to {cdt}") if cdt != elt else xi
        v = t.op(None, f"arith.mulf {v}, {consts['scale']} : {cdt}")
        v = t.op(None, f"arith.select {keep}, {v}, {consts['zero']} : {cdt}")
        if cdt != elt:
            v = t.op(None, f"arith.truncf {v} : {cdt} to {elt}")
        self.close([v], [elt])
        self.bind(op.results, [y])

    def embedding_bag(self, op: dist.EmbeddingBagOp) -> None:
        tp, ip, r = self.placed(op.table), self.placed(op.indices), self.placed(op.result)
        ts, ishape = tp.local_shape, ip.local_shape
        lead = len(ts) - 2
        rows = ts[-2]
        mode = op.option("mode")
        elt = str(r.element)
        cdt = "f32" if half(elt) and mode != "max" else elt
        row0 = self.block_start(tp, lead, rows)
        kind = {"sum": "sum", "mean": "avg", "max": "max"}[mode]
        float_ = is_float(elt)
        out_shape = r.local_shape
        acc = self.filled(reduction_identity(kind, cdt), out_shape, cdt)
        rows_c = self.const(rows, "index") if row0 is not None else None
        zero_i = self.const(0, "index") if row0 is not None else None
        zero_v = self.const(0.0 if float_ else 0, cdt) if row0 is not None else None
        # loops: result dims (..., bag, width) then the bag item (reduction)
        n = len(out_shape) + 1
        idx_map = affine(n, [f"d{i}" for i in range(lead + 1)] + [f"d{n - 1}"])
        out_t = ttype(out_shape, cdt)
        hint = op.result.name_hint if cdt == elt and kind != "avg" else None
        (y,), (ix, s) = self.generic(hint, [(self.value(op.indices), ttype(ishape, ip.element), idx_map)], [(acc, out_t)], ["parallel"] * (n - 1) + ["reduction"], [out_t])
        t = self.text
        row = t.op("row", f"arith.index_cast {ix} : {ip.element} to index")
        held = None
        if row0 is not None:  # a row-sliced table: rows other devices hold count as 0
            row = t.op(None, f"arith.subi {row}, {row0} : index")
            lo = t.op(None, f"arith.cmpi sge, {row}, {zero_i} : index")
            hi = t.op(None, f"arith.cmpi slt, {row}, {rows_c} : index")
            held = t.op("held", f"arith.andi {lo}, {hi} : i1")
            row = t.op(None, f"arith.select {held}, {row}, {zero_i} : index")
        coords = [t.op(None, f"linalg.index {i} : index") for i in range(lead)] + [row, t.op(None, f"linalg.index {n - 2} : index")]
        v = t.op(None, f"tensor.extract {self.value(op.table)}[{', '.join(coords)}] : {ttype(ts, tp.element)}")
        if cdt != elt:
            v = t.op(None, f"arith.extf {v} : {elt} to {cdt}")
        if held is not None:
            v = t.op(None, f"arith.select {held}, {v}, {zero_v} : {cdt}")
        combine = (_FLOAT_COMBINE if float_ else _INT_COMBINE)[kind]
        self.close([t.op(None, f"{combine} {s}, {v} : {cdt}")], [cdt])
        if kind == "avg":
            count = self.const(ishape[-1], cdt, out_shape)
            y = t.op(op.result.name_hint if cdt == elt else None, f"{'arith.divf' if float_ else 'arith.divsi'} {y}, {count} : {out_t}")
        self.bind(op.results, [self.cast_tensor(y, out_shape, cdt, elt, op.result.name_hint)])

    def scatter_add(self, op: dist.ScatterAddOp) -> None:
        ip, up, r = self.placed(op.indices), self.placed(op.updates), self.placed(op.result)
        ishape, ushape, rshape = ip.local_shape, up.local_shape, r.local_shape
        lead = len(ishape) - 2
        elt = str(r.element)
        cdt = "f32" if half(elt) else elt
        float_ = is_float(elt)
        row0 = self.block_start(r, lead, rshape[-2])
        zero = self.const(0.0 if float_ else 0, cdt)
        acc = self.filled(0.0 if float_ else 0, rshape, cdt)
        # loops: the result's dims (..., row, width), then the bag and its positions
        # (reductions, in order): each row held sums the updates whose index names it
        n = len(rshape) + 2
        table = ["d0"] if lead else []
        idx_map = affine(n, [*table, f"d{n - 2}", f"d{n - 1}"])
        upd_map = affine(n, [*table, f"d{n - 2}", f"d{lead + 1}"])
        out_t = ttype(rshape, cdt)
        hint = op.result.name_hint if cdt == elt else None
        ins = [(self.value(op.indices), ttype(ishape, ip.element), idx_map), (self.value(op.updates), ttype(ushape, up.element), upd_map)]
        (y,), (ix, u, s) = self.generic(hint, ins, [(acc, out_t)], ["parallel"] * (n - 2) + ["reduction"] * 2, [out_t])
        t = self.text
        row = t.op("row", f"arith.index_cast {ix} : {ip.element} to index")
        if row0 is not None:  # a row-sliced result: this device adds into the rows it holds
            row = t.op(None, f"arith.subi {row}, {row0} : index")
        hit = t.op("hit", f"arith.cmpi eq, {row}, {t.op(None, f'linalg.index {lead} : index')} : index")
        if cdt != elt:
            u = t.op(None, f"arith.extf {u} : {elt} to {cdt}")
        v = t.op(None, f"arith.select {hit}, {u}, {zero} : {cdt}")
        self.close([t.op(None, f"{'arith.addf' if float_ else 'arith.addi'} {s}, {v} : {cdt}")], [cdt])
        self.bind(op.results, [self.cast_tensor(y, rshape, cdt, elt, op.result.name_hint)])

    def sort(self, op: dist.SortOp) -> None:
        """MLIR 19 has no sort: each element's stable rank along the dim (the elements
        before it in jnp.sort's order: smaller keys, NaN last and equal to NaN, -0.0 equal
        to +0.0; equal keys earlier in the dim), then each output position takes the
        element of its rank. Two ``linalg.generic`` per operand, quadratic in the dim."""
        ps = [self.placed(v) for v in op.inputs]
        shape, key = ps[0].local_shape, str(ps[0].element)
        dim, r = op.option("dim"), len(ps[0].local_shape)
        t = self.text
        own = affine(r + 1, [f"d{i}" for i in range(r)])
        other = affine(r + 1, [f"d{r}" if i == dim else f"d{i}" for i in range(r)])  # element j of the dim
        rank_t, key_t = ttype(shape, "i64"), ttype(shape, key)
        keys = self.value(op.inputs[0])
        loops = ["parallel"] * r + ["reduction"]
        (rank,), (a, b, s) = self.generic("rank", [(keys, key_t, own), (keys, key_t, other)], [(self.filled(0, shape, "i64"), rank_t)], loops, [rank_t])
        if is_float(key):
            a_nan, b_nan = (t.op(None, f"arith.cmpf une, {x}, {x} : {key}") for x in (a, b))
            b_num = t.op(None, f"arith.cmpf oeq, {b}, {b} : {key}")
            less = t.op(None, f"arith.ori {t.op(None, f'arith.cmpf olt, {b}, {a} : {key}')}, {t.op(None, f'arith.andi {b_num}, {a_nan} : i1')} : i1")
            same = t.op(None, f"arith.ori {t.op(None, f'arith.cmpf oeq, {b}, {a} : {key}')}, {t.op(None, f'arith.andi {b_nan}, {a_nan} : i1')} : i1")
        else:
            less = t.op(None, f"arith.cmpi slt, {b}, {a} : {key}")
            same = t.op(None, f"arith.cmpi eq, {b}, {a} : {key}")
        i, j = t.op(None, f"linalg.index {dim} : index"), t.op(None, f"linalg.index {r} : index")
        earlier = t.op(None, f"arith.andi {same}, {t.op(None, f'arith.cmpi slt, {j}, {i} : index')} : i1")
        before = t.op("before", f"arith.ori {less}, {earlier} : i1")
        self.close([t.op(None, f"arith.addi {s}, {t.op(None, f'arith.extui {before} : i1 to i64')} : i64")], ["i64"])
        outs = []
        for v, p in zip(op.outputs, ps):
            ty = ttype(shape, p.element)
            init = self.filled(0.0 if is_float(p.element) else 0, shape, p.element)
            ins = [(rank, rank_t, other), (self.value(op.inputs[len(outs)]), ty, other)]
            (y,), (k, x, acc) = self.generic(v.name_hint, ins, [(init, ty)], loops, [ty])
            at = t.op(None, f"arith.index_cast {k} : i64 to index")
            hit = t.op(None, f"arith.cmpi eq, {at}, {t.op(None, f'linalg.index {dim} : index')} : index")
            self.close([t.op(None, f"arith.select {hit}, {x}, {acc} : {p.element}")], [str(p.element)])
            outs.append(y)
        self.bind(op.outputs, outs)

    # ------------------------------------------------------------------ layout ops
    def transpose(self, op: dist.TransposeOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        out = self.empty(r.local_shape, r.element)
        perm = ", ".join(map(str, op.option("perm")))
        self.bind(op.results, [self.text.op(
            op.result.name_hint,
            f"linalg.transpose ins({self.value(op.input)} : {ttype(x.local_shape, x.element)}) outs({out} : {ttype(r.local_shape, r.element)}) permutation = [{perm}]",
        )])

    def reshape(self, op: dist.ReshapeOp) -> None:
        x, r = self.placed(op.input), self.placed(op.result)
        dims = r.local_shape
        shape = self.text.op("shape", f"arith.constant dense<[{', '.join(map(str, dims))}]> : tensor<{len(dims)}xi64>" if dims else "arith.constant dense<> : tensor<0xi64>")
        self.bind(op.results, [self.text.op(
            op.result.name_hint,
            f"tensor.reshape {self.value(op.input)}({shape}) : ({ttype(x.local_shape, x.element)}, tensor<{len(dims)}xi64>) -> {ttype(dims, r.element)}",
        )])

    def iota(self, op: dist.IotaOp) -> None:
        r = self.placed(op.result)
        dim, shape, elt = op.option("dim"), r.local_shape, str(r.element)
        start = self.block_start(r, dim, shape[dim])
        ty = ttype(shape, elt)
        (y,), (_,) = self.generic(op.result.name_hint, [], [(self.empty(shape, elt), ty)], ["parallel"] * len(shape), [ty])
        t = self.text
        i = t.op(None, f"linalg.index {dim} : index")
        if start is not None:
            i = t.op(None, f"arith.addi {i}, {start} : index")
        if is_float(elt):
            i = t.op(None, f"arith.sitofp {t.op(None, f'arith.index_cast {i} : index to i64')} : i64 to {elt}")
        else:
            i = t.op(None, f"arith.index_cast {i} : index to {elt}")
        self.close([i], [elt])
        self.bind(op.results, [y])

    def slice_text(self, x: str, src: Placed, dst: Placed, offsets: list[int], strides: list[int]) -> str:
        return (
            f"tensor.extract_slice {x}[{', '.join(map(str, offsets))}] [{', '.join(map(str, dst.local_shape))}] "
            f"[{', '.join(map(str, strides))}] : {ttype(src.local_shape, src.element)} to {ttype(dst.local_shape, dst.element)}"
        )

    def concat_text(self, names: list[str], ins: list[Placed], dst: Placed, dim: int) -> str:
        types = ", ".join(ttype(p.local_shape, p.element) for p in ins)
        return f"tensor.concat dim({dim}) {', '.join(names)} : ({types}) -> {ttype(dst.local_shape, dst.element)}"

    # ------------------------------------------------------------------ blocks and collectives
    def slice_block(self, x: str, src: Placed, dst: Placed, axes: list[int], dim: int, hint: str | None) -> str:
        return self.text.op(
            hint,
            f"mesh.all_slice {x} on @{src.mesh.name} {self.axes(axes)} slice_axis = {dim} : "
            f"{ttype(src.local_shape, src.element)} -> {ttype(dst.local_shape, dst.element)}",
        )

    def _reducing(self, name: str, x: str, src: Placed, shape_out: Sequence[int], axes: list[int], kind: str, extra: str, root: str, hint: str | None) -> str:
        elt = str(src.element)
        acc = "f32" if half(elt) and kind not in ("max", "min") else elt
        t = self.text
        reduction = "" if _KIND[kind] == "sum" else f" reduction = <{_KIND[kind]}>"
        types = f"({ttype(src.local_shape, elt)}) -> {ttype(shape_out, acc)}" if root else f"{ttype(src.local_shape, elt)} -> {ttype(shape_out, acc)}"
        y = t.op(hint if kind != "avg" and acc == elt else f"{hint or name}_{acc}" if acc != elt else f"{hint or name}_sum", f"mesh.{name} {x} on @{src.mesh.name} {self.axes(axes)}{reduction}{extra}{root} : {types}")
        if kind == "avg":
            n = self.const(src.mesh.group_size(axes), acc, shape_out)
            y = t.op(hint if acc == elt else None, f"{'arith.divf' if is_float(acc) else 'arith.divsi'} {y}, {n} : {ttype(shape_out, acc)}")
        return self.cast_tensor(y, shape_out, acc, elt, hint)

    def all_reduce(self, x: str, src: Placed, axes: list[int], kind: str, hint: str | None) -> str:
        return self._reducing("all_reduce", x, src, src.local_shape, axes, kind, "", "", hint)

    def reduce_scatter(self, x: str, src: Placed, dst: Placed, axes: list[int], kind: str, dim: int, hint: str | None) -> str:
        return self._reducing("reduce_scatter", x, src, dst.local_shape, axes, kind, f" scatter_axis = {dim}", "", hint)

    def reduce(self, x: str, src: Placed, axes: list[int], kind: str, root: int, hint: str | None) -> str:
        digits = ", ".join(map(str, src.mesh.digits(root, axes)))
        return self._reducing("reduce", x, src, src.local_shape, axes, kind, "", f" root = [{digits}]", hint)

    def all_gather(self, x: str, src: Placed, dst: Placed, axes: list[int], dim: int, hint: str | None) -> str:
        return self.text.op(
            hint,
            f"mesh.all_gather {x} on @{src.mesh.name} {self.axes(axes)} gather_axis = {dim} : "
            f"{ttype(src.local_shape, src.element)} -> {ttype(dst.local_shape, dst.element)}",
        )

    def broadcast(self, x: str, src: Placed, axes: list[int], root: int, hint: str | None) -> str:
        digits = ", ".join(map(str, src.mesh.digits(root, axes)))
        ty = ttype(src.local_shape, src.element)
        return self.text.op(hint, f"mesh.broadcast {x} on @{src.mesh.name} {self.axes(axes)} root = [{digits}] : ({ty}) -> {ty}")

    def all_to_all(self, x: str, src: Placed, dst: Placed, axes: list[int], split: int, concat: int, hint: str | None) -> str:
        return self.text.op(
            hint,
            f"mesh.all_to_all {x} on @{src.mesh.name} {self.axes(axes)} split_axis = {split} concat_axis = {concat} : "
            f"{ttype(src.local_shape, src.element)} -> {ttype(dst.local_shape, dst.element)}",
        )

    def is_group_rank(self, mesh: RootMesh, axes: Sequence[int], rank: int) -> str:
        """An ``i1``: whether this device is group rank ``rank`` over ``axes``."""
        t = self.text
        out = None
        for a, digit in zip(axes, mesh.digits(rank, axes)):
            eq = t.op("is_rank", f"arith.cmpi eq, {self.coord(mesh, a)}, {self.const(digit, 'index')} : index")
            out = eq if out is None else t.op(None, f"arith.andi {out}, {eq} : i1")
        assert out is not None
        return out

    def permute(self, x: str, src: Placed, axes: list[int], pairs: list[tuple[int, int]], offset: int | None, hint: str | None) -> str:
        m, t = src.mesh, self.text
        ty = ttype(src.local_shape, src.element)
        if offset is not None and len(axes) == 1 and src.local_shape:
            # a ring step along one axis: device i's value to device i + offset
            return t.op(hint, f"mesh.shift {x} on @{m.name} {self.axes(axes)} shift_axis = {axes[0]} offset = {offset} rotate : {ty} -> {ty}")
        shape, elt = src.local_shape, src.element
        scalar = not shape
        if scalar:  # mesh.send/recv take tensors of rank >= 1
            x = t.op(None, f"tensor.expand_shape {x} [] output_shape [1] : {ttype((), elt)} into {ttype((1,), elt)}")
            shape = (1,)
            ty = ttype(shape, elt)
        for s, d in pairs:  # the sources send ...
            if s != d:
                t.line(f"scf.if {self.is_group_rank(m, axes, s)} {{")
                t.depth += 1
                t.op("sent", f"mesh.send {x} on @{m.name} {self.axes(axes)} destination = [{', '.join(map(str, m.digits(d, axes)))}] : ({ty}) -> {ty}")
                t.depth -= 1
                t.line("}")
        y = self.filled(0.0 if is_float(elt) else 0, shape, elt)  # ... a rank no pair targets keeps zeros
        for i, (s, d) in enumerate(pairs):  # ... and each target takes its source's value
            is_target = self.is_group_rank(m, axes, d)
            last = i == len(pairs) - 1 and not scalar
            y_next = t.op(hint if last else None, f"scf.if {is_target} -> ({ty}) {{")
            t.depth += 1
            got = x if s == d else t.op("received", f"mesh.recv {x} on @{m.name} {self.axes(axes)} source = [{', '.join(map(str, m.digits(s, axes)))}] : ({ty}) -> {ty}")
            t.line(f"scf.yield {got} : {ty}")
            t.depth -= 1
            t.line("} else {")
            t.depth += 1
            t.line(f"scf.yield {y} : {ty}")
            t.depth -= 1
            t.line("}")
            y = y_next
        if scalar:
            y = t.op(hint, f"tensor.collapse_shape {y} [] : {ty} into {ttype((), elt)}")
        return y

    def send(self, x: str, src: Placed, axes: list[int], source: int, to: int, hint: str | None) -> str:
        t = self.text
        m = src.mesh
        shape, elt = src.local_shape, src.element
        scalar = not shape
        if scalar:  # mesh.send/recv take tensors of rank >= 1
            x = t.op(None, f"tensor.expand_shape {x} [] output_shape [1] : {ttype((), elt)} into {ttype((1,), elt)}")
            shape = (1,)
        ty = ttype(shape, elt)
        is_src, is_dst = self.is_group_rank(m, axes, source), self.is_group_rank(m, axes, to)
        dest = ", ".join(map(str, m.digits(to, axes)))
        origin = ", ".join(map(str, m.digits(source, axes)))
        t.line(f"scf.if {is_src} {{")
        t.depth += 1
        t.op("sent", f"mesh.send {x} on @{m.name} {self.axes(axes)} destination = [{dest}] : ({ty}) -> {ty}")
        t.depth -= 1
        t.line("}")
        y = t.op(None if scalar else hint, f"scf.if {is_dst} -> ({ty}) {{")
        t.depth += 1
        got = t.op("received", f"mesh.recv {x} on @{m.name} {self.axes(axes)} source = [{origin}] : ({ty}) -> {ty}")
        t.line(f"scf.yield {got} : {ty}")
        t.depth -= 1
        t.line("} else {")
        t.depth += 1
        t.line(f"scf.yield {x} : {ty}")
        t.depth -= 1
        t.line("}")
        if scalar:
            y = t.op(hint, f"tensor.collapse_shape {y} [] : {ty} into {ttype((), elt)}")
        return y


def _element(ty: str) -> str:
    """The element type of a tensor type's text (a scalar type stays itself)."""
    if not ty.startswith("tensor<"):
        return ty
    return ty[len("tensor<") : -1].split("x")[-1]
