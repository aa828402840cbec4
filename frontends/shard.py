"""MLIR's ``shard`` dialect (called ``mesh`` until 2025; both spellings are read) into
``dist`` IR.

A shard program is one of two kinds, told apart by its ops:

* **annotated** (before MLIR's ``shard-partition``): global tensors with ``shard.shard``
  annotations. Annotations are constraints on the logical value: an argument annotated
  right away (``shard.shard %arg0 to %s``) takes that placement; a returned annotated
  value is a result placed so; every other annotation (``annotate_for_users`` or not) is
  kept where it is. ``partition`` places the rest.
* **per device** (after partitioning): any collective makes the function per device:
  arguments, results and every value are ``local`` on every grid axis (each device's own
  tensor, the per-device shape), and the collectives have their documented per-device
  meaning.

A sharding ``split_axes = [[0], [1, 2]]`` slices dim 0 by grid axis 0 and dim 1 by axes 1
(outer) and 2 (inner): ``[sliced<0>, sliced<1, 0>, sliced<1, 1>]``; ``partial = sum[a]``
(the ``mesh`` spelling) makes axis a ``local``; other axes are replicated. A dim the
shards do not divide is cut in blocks of ceil(s/n), nested over its axes (DESIGN §2);
``sharded_dims_offsets`` (``sharded_dims_sizes`` in the ``mesh`` spelling) are accepted
when they are those blocks, and written so by the exporter. Halo sizes are rejected.

=========================================  =========================================
shard op (``mesh`` spelling)               dist IR
=========================================  =========================================
``shard.grid @g(shape = 2x4)``             ``dist.mesh @g shape = [2, 4]``
(``mesh.mesh``)
``shard.sharding @g split_axes = [[..]]``  a sharding (``<@g, [[..]]>`` inline)
``shard.shard %x to %s [annotate_for_      the value placed so there (kept by
users]``                                   ``partition``)
``shard.all_reduce %x on @g grid_axes =    ``coll.all_reduce`` over the axes
[..] reduction = <sum|max|min|prod>``
``shard.all_gather .. gather_axis = d``    ``dist.from_local`` (sliced<d>),
                                           ``coll.all_gather``, ``dist.to_local``
``shard.reduce_scatter .. scatter_axis``   ``coll.reduce_scatter``, ``dist.to_local``
``shard.all_to_all .. split_axis = s       ``dist.from_local`` (sliced<c>),
concat_axis = c``                          ``coll.all_to_all dim s``, ``dist.to_local``
``shard.all_slice .. slice_axis = d``      ``dist.from_local`` (replicated), then
                                           ``dist.take_slice``: the group's values must
                                           agree (see ``_h_all_slice``: where they are
                                           not known to, the import is rejected)
``shard.broadcast .. root = [r]``          ``dist.from_local`` (at<r>),
                                           ``coll.broadcast``
``shard.gather`` / ``shard.reduce``        as all_gather / all_reduce (the result on
                                           non-root devices is undefined, so every
                                           device gets it)
``shard.scatter .. root = [r]``            broadcast from r, then ``dist.take_slice``
``shard.shift .. shift_axis = a offset =   ``coll.permute offset k axes [a]`` (rotate),
k [rotate]``                               ``pairs`` of the devices that have a source
                                           (zeros elsewhere: undefined in MLIR)
``shard.send .. destination = [d]`` then   ``coll.permute pairs [[s, d]]`` over the
``shard.recv .. source = [s]``             grid axes: a recv takes the earliest send
                                           before it
=========================================  =========================================

The computation may use the StableHLO subset of ``stablehlo.py`` and ``arith``/``math``
element-wise ops on tensors (``arith.addf %a, %b : tensor<4xf32>``, ``arith.cmpf``,
``arith.select``, ``arith.constant dense<c>``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, func
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Span

from distir.dialects import coll, dist, layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import LOCAL, REPLICATED, At, Placement, Replicated, Sliced, sliced
from distir.frontends import sdy, stablehlo, stablehlo_verify
from distir.frontends.mlir_text import ELEMENT_TYPES, Dense, Module, OpNode, Reader, TensorT, read_module
from distir.frontends.sdy import from_global, to_global
from distir.frontends.stablehlo import Translator, Val, shape_of

REDUCTIONS = {"sum": "sum", "max": "max", "min": "min", "prod": "prod"}
COLLECTIVES = ("all_reduce", "all_gather", "all_slice", "all_to_all", "reduce_scatter", "broadcast", "gather", "scatter", "reduce", "shift", "send", "recv")


# ======================================================================================
# Shardings
# ======================================================================================


@dataclass(frozen=True)
class ShardSharding:
    grid: str
    split: tuple[tuple[int, ...], ...]
    partial: tuple[int, ...]
    start: int
    end: int
    offsets: tuple[int, ...] = ()
    """``sharded_dims_offsets`` (flattened: per split dim, each shard's start and the
    end), or ``()``."""
    sizes: tuple[int, ...] = ()
    """``sharded_dims_sizes`` (the ``mesh`` spelling: per split dim, each shard's size),
    or ``()``."""


def _parse_sharding_attr(r: Reader) -> ShardSharding:
    """``<@grid, [[0], [1, 2]][, partial = sum[1]]>``."""
    start = r.peek().start
    r.expect("<", " to open a sharding")
    grid = r.symbol("the grid (@name)")
    r.expect(",")
    split = _split_axes(r)
    partial: tuple[int, ...] = ()
    if r.accept(","):
        r.keyword("partial")
        r.expect("=")
        kind = r.ident("a reduction (sum)")
        if kind != "sum":
            raise r.error(f"partial '{kind}' results are not supported (only sum)")
        partial = tuple(r.int_list("the partial axes"))
    end = r.expect(">").end
    return ShardSharding(grid, split, partial, start, end)


def _split_axes(r: Reader) -> tuple[tuple[int, ...], ...]:
    r.expect("[", " to open split_axes")
    out: list[tuple[int, ...]] = []
    if not r.accept("]"):
        while True:
            out.append(tuple(r.int_list("the axes of a dim")))
            if r.accept("]"):
                break
            r.expect(",", " or ']' in split_axes")
    return tuple(out)


def _grid(r: Reader, node: OpNode) -> None:
    """``shard.grid ["private"] @g(shape = 2x4) [{attrs}]`` (the visibility string, or
    ``{sym_visibility = ..}``, has no meaning for distir)."""
    if r.peek().kind == "string":
        t = r.peek()
        visibility = r.string()
        if visibility not in ("private", "public", "nested"):
            raise r.error(f"a grid's visibility is \"private\", \"public\" or \"nested\", got \"{visibility}\"", t.start, t.end)
    node.sym = r.symbol("the grid name")
    r.expect("(")
    r.keyword("shape")
    r.expect("=")
    start = r.peek().start
    text_end = r.text.find(")", start)
    if text_end < 0:
        raise r.error("expected ')' after the grid shape")
    shape_text = r.text[start:text_end].strip()
    dims = [d.strip() for d in shape_text.split("x")] if shape_text else []
    if not dims or any(not d.isdigit() or len(d) > 9 for d in dims):
        raise r.error("the grid shape must be static sizes such as 2x4 ('?' is not supported)", start, max(text_end, start + 1))
    r.pos = text_end
    r._tok = None  # noqa: SLF001 - resume after the shape, read as text
    r.expect(")")
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    node.attrs["shape"] = [int(d) for d in dims]


def _sharding_op(r: Reader, node: OpNode) -> None:
    start = r.peek().start
    grid = r.symbol("the grid (@name)")
    r.keyword("split_axes")
    r.expect("=")
    split = _split_axes(r)
    t = r.peek()
    offsets: tuple[int, ...] = ()
    shard_sizes: tuple[int, ...] = ()
    if t.kind == "ident" and t.text == "halo_sizes":
        raise r.error("'halo_sizes' is not supported (distir's blocks do not overlap)")
    if t.kind == "ident" and t.text in ("sharded_dims_offsets", "sharded_dims_sizes"):
        r.next()
        r.expect("=")
        values = tuple(r.int_list(f"the {t.text}"))
        if t.text == "sharded_dims_sizes":  # the mesh spelling: each shard's size
            shard_sizes = values
        else:
            offsets = values
    end = r.pos
    if r.at("{"):
        r.attr_dict()
    r.expect(":")
    node.out_types = [r.type()]
    node.attrs["sharding"] = ShardSharding(grid, split, (), start, end, offsets, shard_sizes)
    r.check_counts(node)


def _shard(r: Reader, node: OpNode) -> None:
    node.operands = [r.value()]
    r.keyword("to")
    if r.peek().kind == "ssa":
        node.operands.append(r.value())
    else:
        node.attrs["sharding"] = _parse_sharding_attr(r)
    if r.peek().text == "annotate_for_users":
        r.next()
        node.attrs["annotate_for_users"] = True
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    r.expect(":")
    t = r.type()
    node.in_types = [t] + ([stablehlo_sharding_type()] if len(node.operands) == 2 else [])
    node.out_types = [t]
    r.check_counts(node)


def stablehlo_sharding_type():
    from distir.frontends.mlir_text import OtherT

    return OtherT("!shard.sharding")


def _collective(r: Reader, node: OpNode) -> None:
    """``%x on @grid [grid_axes = [..]] (keyword = value | rotate)* : T -> U`` or
    ``: (T) -> U``."""
    node.operands = [r.value()]
    r.keyword("on")
    node.attrs["grid"] = r.symbol("the grid (@name)")
    while True:
        t = r.peek()
        if t.kind != "ident":
            break
        key = r.next().text
        if key == "rotate":
            node.attrs["rotate"] = True
            continue
        if key not in KEYWORDS:
            raise r.error(f"unknown keyword '{key}' in '{node.name}' (ShardOps.td's: {', '.join(sorted(KEYWORDS))})", t.start, t.end)
        key = SPELLINGS.get(key, key)
        r.expect("=", f" after '{key}'")
        if key in ("grid_axes", "mesh_axes", "root", "source", "destination"):
            if key in ("root", "source", "destination") and r.at("["):
                _static_device_index(r, node, key)
            node.attrs["axes" if key.endswith("_axes") else key] = r.int_list(f"the {key}")
        elif key == "reduction":
            if r.accept("<"):
                node.attrs["reduction"] = r.ident("a reduction")
                r.expect(">")
            else:
                node.attrs["reduction"] = r.ident("a reduction")
        else:
            node.attrs[key] = r.integer(f"the {key}")
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    r.expect(":")
    node.in_types, node.out_types = r.function_type()
    r.check_counts(node)


KEYWORDS = ("grid_axes", "mesh_axes", "root", "source", "destination", "reduction", "gather_axis", "scatter_axis", "scatter_dim", "slice_axis", "split_axis", "concat_axis", "shift_axis", "offset", "rotate")
"""The keywords of the collectives' assembly formats (ShardOps.td; ``mesh_axes`` in the
``mesh`` spelling)."""
SPELLINGS = {"scatter_dim": "scatter_axis"}
"""Newer spellings of ShardOps.td's keywords (``reduce_scatter``'s and ``scatter``'s
``scatter_axis`` is ``scatter_dim`` in MLIR's newest tests)."""


def _static_device_index(r: Reader, node: OpNode, key: str) -> None:
    """A ``root``/``source``/``destination`` given by SSA values (``[1, %arg1]``) is known
    only at run time: a diagnostic naming it (distir reads static device indices)."""
    save, tok = r.pos, r._tok
    r.expect("[")
    while not r.at("]") and r.peek().kind != "eof":
        t = r.next()
        if t.kind == "ssa":
            raise r.error(f"'{node.name}' with a {key} given at run time ({t.text}) is not supported: distir reads static device indices", t.start, t.end)
    r.pos, r._tok = save, tok


ARITH_BINARY = {
    "addf": arith.AddfOp, "subf": arith.SubfOp, "mulf": arith.MulfOp, "divf": arith.DivfOp,
    "maximumf": arith.MaximumfOp, "minimumf": arith.MinimumfOp, "maxnumf": arith.MaxnumfOp, "minnumf": arith.MinnumfOp,
    "addi": arith.AddiOp, "subi": arith.SubiOp, "muli": arith.MuliOp, "divsi": arith.DivSIOp, "remsi": arith.RemSIOp,
    "maxsi": arith.MaxSIOp, "minsi": arith.MinSIOp, "andi": arith.AndIOp, "ori": arith.OrIOp, "xori": arith.XOrIOp,
}  # fmt: skip
ARITH_UNARY = {"negf": arith.NegfOp}
MATH_UNARY = {
    "exp": xmath.ExpOp, "log": xmath.LogOp, "tanh": xmath.TanhOp, "sqrt": xmath.SqrtOp, "rsqrt": xmath.RsqrtOp,
    "absf": xmath.AbsFOp, "sin": xmath.SinOp, "cos": xmath.CosOp, "erf": xmath.ErfOp, "floor": xmath.FloorOp, "ceil": xmath.CeilOp,
}  # fmt: skip


def _arith_elementwise(r: Reader, node: OpNode) -> None:
    """``arith.addf %a, %b : T``, ``arith.cmpf olt, %a, %b : T``, ``arith.select %c, %a,
    %b : C, T``, ``arith.constant dense<..> : T``."""
    name = node.name
    if name == "arith.constant" and not (r.peek().kind == "ident" and r.peek().text == "dense"):
        # a scalar: `arith.constant 3 : i64`, `arith.constant 2 : index`, `arith.constant true`
        t = r.peek()
        if t.kind == "ident" and t.text in ("true", "false"):
            r.next()
            value: object = t.text == "true"
        else:
            value = r.number("a number or dense<..> after 'arith.constant'")
        ty = "i1"
        if r.accept(":"):
            tt = r.peek()
            ty = r.ident("a scalar type (i64, index, f32, ...)")
            if ty == "index":
                ty = "i64"  # an index as the integer it is
            elif ty not in ELEMENT_TYPES:
                raise r.error(f"element type '{ty}' is not supported", tt.start, tt.end)
        node.attrs["value"] = Dense(value, TensorT((), ty))
        node.out_types = [TensorT((), ty)]
        r.check_counts(node)
        return
    if name == "arith.constant":
        node.attrs["value"] = r.dense()
        d = node.attrs["value"]
        if d.type is None:
            raise r.error("expected ': tensor<...>' after the constant")
        node.out_types = [d.type]
        r.check_counts(node)
        return
    if name in ("arith.cmpf", "arith.cmpi"):
        node.attrs["predicate"] = r.ident("a predicate")
        r.expect(",")
    node.operands = r.values()
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    r.expect(":")
    types = [r.type()]
    while r.accept(","):
        types.append(r.type())
    if name == "arith.select":
        if len(types) != 2:
            raise r.error("expected ': COND_TYPE, TYPE' after 'arith.select'")
        node.in_types, node.out_types = [types[0], types[1], types[1]], [types[1]]
    elif name in ("arith.cmpf", "arith.cmpi"):
        t = types[0]
        node.in_types = [t, t]
        node.out_types = [TensorT(t.shape, "i1") if isinstance(t, TensorT) else t]
    else:
        node.in_types, node.out_types = [types[0]] * len(node.operands), [types[0]]
    r.check_counts(node)


HOOKS = dict(stablehlo.HOOKS)
for _p in ("shard", "mesh"):
    HOOKS[f"{_p}.grid" if _p == "shard" else "mesh.mesh"] = _grid
    HOOKS[f"{_p}.sharding"] = _sharding_op
    HOOKS[f"{_p}.shard"] = _shard
    for _c in COLLECTIVES:
        HOOKS[f"{_p}.{_c}"] = _collective
for _n in (*ARITH_BINARY, *ARITH_UNARY, "cmpf", "cmpi", "select", "constant"):
    HOOKS[f"arith.{_n}"] = _arith_elementwise
for _n in MATH_UNARY:
    HOOKS[f"math.{_n}"] = _arith_elementwise


def _kind(name: str) -> str:
    """``shard.all_reduce`` and ``mesh.all_reduce`` -> ``all_reduce``."""
    return name.split(".", 1)[1]


# ======================================================================================
# Import
# ======================================================================================


@dataclass
class Grid:
    name: str
    shape: list[int]
    span: Span


class ShardImport:
    def __init__(self, ast: Module):
        self.ast = ast
        self.grids: dict[str, Grid] = {}
        self.spans: dict[Operation, Span] = {}

    def error(self, msg: str, start: int, end: int) -> ParseError:
        return ParseError(Span(start, max(end, start + 1), self.ast.source), msg)

    def run(self) -> ModuleOp:
        out = ModuleOp([])
        for node in self.ast.ops:
            if node.name in ("shard.grid", "mesh.mesh"):
                if node.sym in self.grids:
                    raise self.error(f"grid @{node.sym} is defined twice", node.span.start, node.span.end)
                self.grids[node.sym or ""] = Grid(node.sym or "", node.attrs["shape"], node.span)
                op = dist.MeshOp.create_mesh(node.sym or "", node.attrs["shape"])
                out.body.block.add_op(op)
                self.spans[op] = node.span
            elif node.name != "func.func":
                raise self.error(f"unsupported op '{node.name}' at module level", node.span.start, node.span.end)
        if not self.grids:
            raise self.error("no shard.grid (or mesh.mesh) in this module", 0, 1)
        publics = [n for n in self.ast.ops if n.name == "func.func" and n.attrs.get("visibility") != "private"]
        if not publics:
            raise self.error("no public function to import", 0, 1)
        for n in publics:
            self.function(n, out)
        return out

    def grid_of(self, node: OpNode) -> Grid:
        names: set[str] = set()
        for op in _walk([node]):
            s = op.attrs.get("sharding")
            if isinstance(s, ShardSharding):
                names.add(s.grid)
            if "grid" in op.attrs and isinstance(op.attrs["grid"], str):
                names.add(op.attrs["grid"])
        unknown = sorted(n for n in names if n not in self.grids)
        if unknown:
            raise self.error(f"unknown grid @{unknown[0]}", node.span.start, node.span.end)
        if len(names) > 1:
            raise self.error(f"@{node.sym} uses several grids; one grid per function is supported", node.span.start, node.span.end)
        if names:
            return self.grids[names.pop()]
        if len(self.grids) == 1:
            return next(iter(self.grids.values()))
        raise self.error(f"@{node.sym} does not say which grid it runs on", node.span.start, node.span.end)

    def placements(self, g: Grid, s: ShardSharding, shape: Sequence[int]) -> list[Placement]:
        def error(msg: str) -> ParseError:
            return self.error(msg, s.start, s.end)

        if s.grid != g.name:
            raise error(f"sharding on grid @{s.grid} in a function on grid @{g.name}")
        if len(s.split) > len(shape):
            raise error(f"split_axes has {len(s.split)} entries for a tensor of rank {len(shape)}")
        out: list[Placement] = [REPLICATED] * len(g.shape)
        used: set[int] = set()
        given = list(s.offsets)
        shard_sizes = list(s.sizes)
        for d, axes in enumerate(s.split):
            for k, a in enumerate(axes):
                if not 0 <= a < len(g.shape):
                    raise error(f"grid axis {a} is out of range: grid @{g.name} has {len(g.shape)} axes")
                if a in used:
                    raise error(f"grid axis {a} is used twice in the sharding")
                used.add(a)
                out[a] = sliced(d, k) if len(axes) > 1 else sliced(d)
            if not axes or not (s.offsets or s.sizes):
                continue  # a dim the shards do not divide: blocks of ceil(s/n) (DESIGN §2)
            counts = [g.shape[a] for a in axes]
            n = math.prod(counts)
            want = [layout.dim_block(shape[d], counts, layout.at_digits(i, counts))[0] for i in range(n)] + [shape[d]]
            if s.offsets:
                got, given = given[: n + 1], given[n + 1 :]
                what = "sharded_dims_offsets"
            else:
                got, shard_sizes = shard_sizes[:n], shard_sizes[n:]
                want, what = [b - a for a, b in zip(want, want[1:])], "sharded_dims_sizes"
            if got != want:
                raise error(
                    f"{what} of dim {d} must be {want} (distir's blocks of ceil({shape[d]}/{n}), "
                    f"the last ones shorter or empty), got {got}"
                )
        if given or shard_sizes:
            raise error(f"sharded_dims_{'offsets' if given else 'sizes'} has {len(given or shard_sizes)} value(s) more than the split dims take")
        for a in s.partial:
            if not 0 <= a < len(g.shape):
                raise error(f"grid axis {a} is out of range: grid @{g.name} has {len(g.shape)} axes")
            if a in used:
                raise error(f"grid axis {a} is used twice in the sharding")
            used.add(a)
            out[a] = LOCAL
        return out

    def function(self, node: OpNode, out: ModuleOp) -> None:
        g = self.grid_of(node)
        per_device = any(op.name.split(".", 1)[0] in ("shard", "mesh") and _kind(op.name) in COLLECTIVES for op in _walk([node]))
        body = node.regions[0][0]
        if per_device:
            shards = [op for op in _walk([node]) if op.name in ("shard.shard", "mesh.shard")]
            if shards:
                raise self.error("a function with collectives is per device: it cannot also have shard.shard annotations", shards[0].span.start, shards[0].span.end)
        tr = ShardTranslator(self, g, node, per_device)
        block = Block()
        tr.block = block
        arg_types = []
        args: list[Val] = []
        annotated = _arg_annotations(body)
        for i, (v, t) in enumerate(body.args):
            tt = tr.tensor_t(t, f"argument %{v.name}", node)
            elt = tr.elt(tt.elt, node)
            if per_device:
                ty = TensorType(tt.shape, elt, g.name, [LOCAL] * len(g.shape))
            else:
                s = annotated.get(v.name)
                ps = self.placements(g, s, tt.shape) if s is not None else [REPLICATED] * len(g.shape)
                ty = TensorType(tt.shape, elt, g.name, ps)
            arg = block.insert_arg(ty, len(block.args))
            arg.name_hint = v.name if stablehlo._valid_hint(v.name) else f"arg{i}"
            arg_types.append(ty)
            tr.node = node
            args.append(arg if per_device else to_global(tr, arg))
        outs = tr.translate_body(body, args)
        if tr.sends:
            send = tr.sends[0][0]
            raise self.error(f"'{send.name}' has no 'recv' after it to take what it sends", send.span.start, send.span.end)
        tr.node = node
        results = []
        for i, o in enumerate(outs):
            x = tr.materialize(o)
            s = tr.result_sharding.get(id(o)) if not per_device else None
            if s is not None:
                x = from_global(tr, x, self.placements(g, s, shape_of(x)), f"result {i}")
            results.append(x)
        ret = func.ReturnOp(*results)
        block.add_op(ret)
        f = func.FuncOp(node.sym or "main", FunctionType.from_lists(arg_types, [r.type for r in results]), Region(block))
        out.body.block.add_op(f)
        self.spans[f] = self.spans[ret] = node.span


def _walk(nodes: list[OpNode]):
    for n in nodes:
        yield n
        for region in n.regions:
            for b in region:
                yield from _walk(b.ops)


def _arg_annotations(body) -> dict[str, ShardSharding]:
    """Arguments annotated by their own ``shard.shard`` (not for users): their placement."""
    shardings: dict[str, ShardSharding] = {}
    for op in body.ops:
        if op.name in ("shard.sharding", "mesh.sharding") and op.results:
            shardings[op.results[0].name] = op.attrs["sharding"]
    out: dict[str, ShardSharding] = {}
    args = {v.name for v, _ in body.args}
    for op in body.ops:
        if op.name in ("shard.shard", "mesh.shard") and not op.attrs.get("annotate_for_users") and op.operands[0].name in args:
            s = op.attrs.get("sharding") or (shardings.get(op.operands[1].name) if len(op.operands) > 1 else None)
            if s is not None:
                out.setdefault(op.operands[0].name, s)
    return out


class ShardTranslator(Translator):
    def __init__(self, imp: ShardImport, g: Grid, node: OpNode, per_device: bool):
        super().__init__(imp.ast, g.name, len(g.shape), imp.spans, SHARD_HANDLERS)
        self.imp = imp
        self.g = g
        self.per_device = per_device
        self.grid = layout.base_grid(g.name, g.shape)
        self.result_sharding: dict[int, ShardSharding] = {}
        self.sends: list[tuple[OpNode, SSAValue, list[int], int]] = []  # sends no recv has taken yet

    def fresh_type(self, shape: Sequence[int], elt) -> TensorType:
        if self.per_device:
            return TensorType(tuple(shape), elt, self.mesh, [LOCAL] * self.naxes)
        return self.global_type(shape, elt)

    def sizes(self):
        return tuple(self.g.shape)

    def axes(self, node: OpNode) -> list[int]:
        axes = list(node.attrs.get("axes", []))
        if node.attrs.get("grid") != self.g.name:
            raise self.error(f"'{node.name}' is on grid @{node.attrs.get('grid')}, the function on @{self.g.name}", node)
        if len(set(axes)) != len(axes) or any(not 0 <= a < self.naxes for a in axes):
            raise self.error(f"grid_axes {axes} are not distinct axes of grid @{self.g.name} ({self.naxes} axes)", node)
        return axes

    def lookup_sharding(self, node: OpNode) -> ShardSharding:
        s = node.attrs.get("sharding")
        if s is None and len(node.operands) > 1:
            s = self.env.get(node.operands[1].name)
        if not isinstance(s, ShardSharding):
            raise self.error("expected a sharding (shard.sharding result or <@grid, [[..]]>)", node)
        return s


SHARD_HANDLERS: dict[str, stablehlo.Handler] = {}


def _handles(*names: str):
    def deco(fn):
        for n in names:
            for p in ("shard", "mesh"):
                SHARD_HANDLERS[f"{p}.{n}"] = _alone_without_axes(fn) if n in GROUPED else fn
        return fn

    return deco


GROUPED = ("all_reduce", "all_gather", "all_slice", "all_to_all", "reduce_scatter", "broadcast", "gather", "scatter", "reduce")


def _alone_without_axes(fn):
    """A collective whose ``grid_axes`` are empty (or left out: ``ShardOps.td``'s default
    is ``[]``) groups each device alone, so it gives each device its own tensor (MLIR's
    canonicalizer erases it); the element type may change (the reductions' accumulator)."""

    def handler(tr: ShardTranslator, node: OpNode) -> list[Val]:
        if node.attrs.get("axes"):
            return fn(tr, node)
        x = _per_device_only(tr, node)
        tr.axes(node)
        res = node.out_types[0] if node.out_types else None
        xt = x.type
        assert isinstance(xt, TensorType)
        if isinstance(res, TensorT) and tuple(res.shape) != xt.get_shape():
            raise tr.error(f"'{node.name}' over no grid axes keeps each device's {xt.format_shape()} tensor, its type says {res}", node)
        if isinstance(res, TensorT) and tr.elt(res.elt, node) != xt.element_type:
            x = tr.emit(dist.CastOp.make([x], [xt.with_(element_type=tr.elt(res.elt, node))])).results[0]
        return [x]

    return handler


@_handles("sharding")
def _h_sharding(tr: ShardTranslator, node: OpNode) -> list:
    s = node.attrs["sharding"]
    if s.grid not in tr.imp.grids:
        raise tr.imp.error(f"unknown grid @{s.grid}", s.start, s.end)
    return [s]


@_handles("shard")
def _h_shard(tr: ShardTranslator, node: OpNode) -> list[Val]:
    s = tr.lookup_sharding(node)
    v = tr.operand(node, 0)
    x = tr.materialize(v)
    placed = from_global(tr, x, tr.imp.placements(tr.g, s, shape_of(x)), f"'{node.name}'")
    y = to_global(tr, placed)
    tr.result_sharding[id(y)] = s
    return [y]


def _per_device_only(tr: ShardTranslator, node: OpNode) -> SSAValue:
    if not tr.per_device:
        raise tr.error(f"'{node.name}' in an annotated (global) function", node)
    if len(node.operands) != 1:
        raise tr.error(f"'{node.name}' takes one tensor", node)
    return tr.materialize(tr.operand(node, 0))


def _to_local(tr: ShardTranslator, y: SSAValue, node: OpNode) -> SSAValue:
    t = y.type
    assert isinstance(t, TensorType)
    local = layout.local_shape(t.get_shape(), t.get_placements(), tuple(tr.g.shape))
    res = node.out_types[0] if node.out_types else None
    if isinstance(res, TensorT) and tuple(res.shape) != tuple(local):
        raise tr.error(f"'{node.name}' gives {stablehlo._fmt(local)} per device, its type says {res}", node)
    return tr.emit(dist.ToLocalOp.make([y], [t.with_(shape=local, placements=[LOCAL] * tr.naxes)])).results[0]


def _from_local(tr: ShardTranslator, x: SSAValue, axes: list[int], node: OpNode, dim: int | None = None, root: list[int] | None = None) -> SSAValue:
    t = x.type
    assert isinstance(t, TensorType)
    shape = list(t.get_shape())
    ps: list[Placement] = [LOCAL] * tr.naxes
    if dim is not None:
        if not 0 <= dim < t.rank:
            raise tr.error(f"axis {dim} is out of range for a tensor of rank {t.rank}", node)
        shape[dim] *= math.prod(tr.g.shape[a] for a in axes)
        for k, a in enumerate(axes):
            ps[a] = sliced(dim, k) if len(axes) > 1 else sliced(dim)
    elif root is not None:
        if len(root) != len(axes) or any(not 0 <= r < tr.g.shape[a] for r, a in zip(root, axes)):
            raise tr.error(f"root {root} is not a device of the group over grid axes {axes}", node)
        for r, a in zip(root, axes):
            ps[a] = At(r)
    else:
        for a in axes:
            ps[a] = REPLICATED
    return tr.emit(dist.FromLocalOp.make([x], [t.with_(shape=shape, placements=ps)])).results[0]


def _reduction(tr: ShardTranslator, node: OpNode) -> str:
    word = node.attrs.get("reduction", "sum")
    kind = REDUCTIONS.get(word)
    if kind is None:
        raise tr.error(f"reduction '{word}' is not supported (sum, max, min, prod)", node)
    return kind


@_handles("all_reduce", "reduce")
def _h_all_reduce(tr: ShardTranslator, node: OpNode) -> list[Val]:
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    kind = _reduction(tr, node)
    res = node.out_types[0]
    if isinstance(res, TensorT) and tr.elt(res.elt, node) != x.type.element_type:  # type: ignore[attr-defined]
        x = tr.emit(dist.CastOp.make([x], [x.type.with_(element_type=tr.elt(res.elt, node))])).results[0]  # type: ignore[attr-defined]
    y = tr.emit_checked(lambda: coll.AllReduceOp.of(x, op=kind, axes=axes)).results[0]
    return [_to_local(tr, y, node)]


@_handles("all_gather", "gather")
def _h_all_gather(tr: ShardTranslator, node: OpNode) -> list[Val]:
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    s = _from_local(tr, x, axes, node, dim=node.attrs.get("gather_axis", -1))
    y = tr.emit_checked(lambda: coll.AllGatherOp.of(s, axes=axes)).results[0]
    return [_to_local(tr, y, node)]


@_handles("reduce_scatter")
def _h_reduce_scatter(tr: ShardTranslator, node: OpNode) -> list[Val]:
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    kind = _reduction(tr, node)
    dim = node.attrs.get("scatter_axis", -1)
    y = tr.emit_checked(lambda: coll.ReduceScatterOp.of(x, op=kind, dim=dim, axes=axes)).results[0]
    return [_to_local(tr, y, node)]


@_handles("all_to_all")
def _h_all_to_all(tr: ShardTranslator, node: OpNode) -> list[Val]:
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    s = _from_local(tr, x, axes, node, dim=node.attrs.get("concat_axis", -1))
    split = node.attrs.get("split_axis", -1)
    y = tr.emit_checked(lambda: coll.AllToAllOp.of(s, dim=split, axes=axes)).results[0]
    return [_to_local(tr, y, node)]


@_handles("all_slice")
def _h_all_slice(tr: ShardTranslator, node: OpNode) -> list[Val]:
    """``ShardOps.td``: each device crops its own tensor to its block of the group, and
    the devices' tensors need not agree. distir has no op that crops each rank's own
    value (``dist.take_slice`` slices one replicated value), so the translation views
    the group's values as one replicated value: it holds only where they agree. Where
    the operand is not known to agree over the group (a function argument, a shift, a
    value of the devices' own blocks: ``_agrees``), the import is rejected with a
    diagnostic, so that no backend runs it (the interpreter used to reject such a run
    and ``local`` to compute it)."""
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    if not _agrees(x, axes):
        raise tr.error(
            f"'{node.name}' of a tensor the devices of grid axes {axes} may hold differently: distir slices one "
            "value the group agrees on (ShardOps.td lets each device crop its own); all_slice the result of an "
            "all_reduce, all_gather or broadcast over these axes, or a value computed from such results",
            node,
        )
    dim = node.attrs.get("slice_axis", -1)
    return [_to_local(tr, _slice_over(tr, _from_local(tr, x, axes, node), dim, axes), node)]


def _agrees(v: SSAValue, axes: Sequence[int]) -> bool:
    """Whether every device of each group over ``axes`` holds the same value ``v``: a
    view (``dist.to_local``) of a value replicated over them, or what ops that do not
    communicate compute from such values (function arguments, permutes and blocks of
    a sliced value may differ)."""
    seen: dict[SSAValue, bool] = {}
    todo = [v]
    while todo:
        x = todo[-1]
        if x in seen:
            todo.pop()
            continue
        t = x.type
        owner = x.owner
        if isinstance(t, TensorType) and all(isinstance(t.get_placements()[a], Replicated) for a in axes):
            seen[x] = True
        elif not isinstance(t, TensorType):
            seen[x] = True  # a scalar: the same on every device
        elif not isinstance(owner, Operation) or isinstance(owner, coll.CollectiveOp | coll.FusedCollectiveOp | coll.OverlapOp):
            seen[x] = False
        elif isinstance(owner, dist.ToLocalOp):
            src = owner.input.type
            seen[x] = isinstance(src, TensorType) and all(isinstance(src.get_placements()[a], Replicated) for a in axes)
        else:
            pending = [o for o in owner.operands if o not in seen]
            if pending:
                todo.extend(pending)
                continue
            seen[x] = all(seen[o] for o in owner.operands)
        todo.pop()
    return seen[v]


@_handles("broadcast", "scatter")
def _h_broadcast(tr: ShardTranslator, node: OpNode) -> list[Val]:
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    y = _from_local(tr, x, axes, node, root=list(node.attrs.get("root", [])))
    y = tr.emit_checked(lambda: coll.BroadcastOp.of(y, axes=axes)).results[0]
    if _kind(node.name) == "scatter":
        y = _slice_over(tr, y, node.attrs.get("scatter_axis", -1), axes)
    return [_to_local(tr, y, node)]


def _slice_over(tr: ShardTranslator, y: SSAValue, dim: int, axes: list[int]) -> SSAValue:
    """Each device keeps its block along ``dim`` over ``axes`` (outer first)."""
    for a in axes:
        y = tr.emit_checked(lambda: dist.TakeSliceOp.of(y, dim=dim, axis=a)).results[0]
    return y


@_handles("shift")
def _h_shift(tr: ShardTranslator, node: OpNode) -> list[Val]:
    """``ShardOps.td``: within each group of ``grid_axes``, the devices' tensors shift
    along grid axis ``shift_axis`` (one of the group's axes) by ``offset``: device i's
    tensor goes to device i + offset on that axis, the other coordinates kept (the doc's
    example, offset 2 of 4, reads the same either way; this is the direction of a shift
    of an array, ``np.roll``). With ``rotate`` the offset wraps around the axis
    (``coll.permute offset``); without it a device with no source gets zeros, where the
    doc leaves its result undefined (``coll.permute pairs``)."""
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    axis, offset = node.attrs.get("shift_axis"), node.attrs.get("offset")
    if not isinstance(axis, int) or not isinstance(offset, int):
        raise tr.error(f"'{node.name}' needs shift_axis = A and offset = K", node)
    if axis not in axes:
        raise tr.error(f"shift_axis {axis} is not one of the grid_axes {axes} of '{node.name}'", node)
    _same_type(tr, x, node)
    n = tr.g.shape[axis]
    if node.attrs.get("rotate"):
        options = sdy.permute_options({i: (i + offset) % n for i in range(n)}, n)
    else:
        options = sdy.permute_options({i: i + offset for i in range(n) if 0 <= i + offset < n}, n)
    if options.get("offset") == 0:
        return [x]
    return [tr.emit_checked(lambda: coll.PermuteOp.of(x, sizes=tr.sizes(), axes=[axis], **options)).results[0]]


@_handles("send")
def _h_send(tr: ShardTranslator, node: OpNode) -> list[Val]:
    """A send is half of a transfer: the first later ``recv`` on the same grid axes takes
    it (see ``_h_recv``). The sending devices keep their tensor: the result is the
    operand (``ShardOps.td`` says nothing of it)."""
    x = _per_device_only(tr, node)
    axes = tr.axes(node)
    _same_type(tr, x, node)
    tr.sends.append((node, x, axes, _in_group(tr, node, axes, "destination")))
    return [x]


@_handles("recv")
def _h_recv(tr: ShardTranslator, node: OpNode) -> list[Val]:
    """In an SPMD program with static devices, ``send %x destination = [d]`` and ``recv
    source = [s]`` (each run by every device of each group of ``grid_axes``) match in one
    transfer only: device s's send to d with d's receive from s. So a recv takes the
    earliest unmatched send before it: device d gets device s's operand of that send,
    within each group (``coll.permute pairs [[s, d]]``, the devices as their in-group
    multi-index, outer axis first); every other device's receive has no matching send
    and gets zeros (undefined in MLIR). The recv's operand is ignored, as documented."""
    _per_device_only(tr, node)
    axes = tr.axes(node)
    source = _in_group(tr, node, axes, "source")
    if not tr.sends:
        raise tr.error(f"'{node.name}' has no 'send' before it to receive from", node)
    send, x, send_axes, dest = tr.sends.pop(0)
    where = f"the '{send.name}' at line {send.span.get_location().line}"
    if send_axes != axes:
        raise tr.error(f"'{node.name}' on grid_axes {axes} matches {where}, on grid_axes {send_axes}", node)
    res = node.out_types[0] if node.out_types else None
    xt = x.type
    assert isinstance(xt, TensorType)
    if isinstance(res, TensorT) and (tuple(res.shape) != xt.get_shape() or tr.elt(res.elt, node) != xt.element_type):
        raise tr.error(f"'{node.name}' gives {res}, {where} sends {xt.format_shape()}x{xt.element_type}", node)
    if not axes:  # each device its own group: it receives what it sent
        return [x]
    return [tr.emit_checked(lambda: coll.PermuteOp.of(x, sizes=tr.sizes(), axes=axes, pairs=[(source, dest)])).results[0]]


def _in_group(tr: ShardTranslator, node: OpNode, axes: list[int], key: str) -> int:
    """The group rank (row-major over ``axes``) of the device whose in-group multi-index
    is the op's ``key`` attribute."""
    index = node.attrs.get(key)
    sizes = [tr.g.shape[a] for a in axes]
    if not isinstance(index, list) or len(index) != len(axes) or any(not 0 <= i < n for i, n in zip(index, sizes)):
        raise tr.error(f"{key} {index} is not a device of the group over grid axes {axes} (sizes {sizes})", node)
    rank = 0
    for i, n in zip(index, sizes):
        rank = rank * n + i
    return rank


def _same_type(tr: ShardTranslator, x: SSAValue, node: OpNode) -> None:
    res = node.out_types[0] if node.out_types else None
    xt = x.type
    assert isinstance(xt, TensorType)
    if isinstance(res, TensorT) and tuple(res.shape) != xt.get_shape():
        raise tr.error(f"'{node.name}' keeps its operand's shape {xt.format_shape()}, its type says {res}", node)


def _arith(tr: ShardTranslator, node: OpNode) -> list[Val]:
    kind = node.name.split(".", 1)[1]
    if kind == "constant":
        return stablehlo.HANDLERS["stablehlo.constant"](tr, node)
    if kind in ("cmpf", "cmpi"):
        pred = node.attrs["predicate"]
        cls = arith.CmpfOp if kind == "cmpf" else arith.CmpiOp
        return stablehlo.elementwise(tr, node, lambda a, e: [cls(a[0], a[1], pred)], out_elt=stablehlo.ELEMENT["i1"])
    if kind == "select":
        return stablehlo.elementwise(tr, node, lambda a, e: [arith.SelectOp(a[0], a[1], a[2])])
    cls = ARITH_BINARY.get(kind) or ARITH_UNARY.get(kind)
    if node.name.startswith("math."):
        cls = MATH_UNARY[kind]
    n = 1 if (kind in ARITH_UNARY or node.name.startswith("math.")) else 2
    if len(node.operands) != n:
        raise tr.error(f"'{node.name}' takes {n} operand(s)", node)
    return stablehlo.elementwise(tr, node, lambda a, e: [cls(*a)])


for _n in (*ARITH_BINARY, *ARITH_UNARY, "cmpf", "cmpi", "select", "constant"):
    SHARD_HANDLERS[f"arith.{_n}"] = _arith
for _n in MATH_UNARY:
    SHARD_HANDLERS[f"math.{_n}"] = _arith


def shard_import(text: str, name: str) -> tuple[ModuleOp, dict[Operation, Span]]:
    """Read MLIR shard (or mesh) text into a dist module (before ``partition``)."""
    ast = read_module(text, name, HOOKS)
    stablehlo_verify.verify(ast)
    imp = ShardImport(ast)
    module = imp.run()
    return module, imp.spans

