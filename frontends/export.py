"""Export of dist/coll programs: StableHLO + Shardy (``sdy``) and MLIR 19's ``mesh``
dialect, written as text (``distir-opt --emit sdy|mesh``).

Both targets get the program in **SPMD form**: the code one device runs, on the blocks it
holds, with one collective of the target per distir collective. That is distir's own
per-rank semantics, so the translation is op by op and keeps the schedule the program
was given (the collectives, their order, what is sliced where). The two targets share
this module: the walk over a function, the per-device view of each value (its shape on
one device, its placements on the root mesh), how a collective's view-mesh axes become
root-mesh axes, and the expansion of the ops that are compositions of others.

Meshes. Each root mesh (a mesh that is no view) becomes one target mesh with the same
name, axis names (or ``x``, ``y``, ``z``, ``axis3``, ... for an unnamed mesh) and sizes,
which must be static (``-p 'fix-mesh-sizes{ranks=N}'`` fixes ``?``). A value on a view
mesh is seen on its root mesh (``dist.remesh`` moves no data): a collective over view
axes runs over the root axes they are the product of, in the same group order.

What each op becomes (the targets' docstrings give the exact ops):

===============================  =========================================================
distir                           exported as
===============================  =========================================================
``dist.map``                     the body's arith/math ops, elementwise (sdy: StableHLO
                                 ops on the device's blocks; mesh: one ``linalg.generic``)
``dist.matmul``                  ``dot_general`` / ``linalg`` contraction (f16/bf16
                                 accumulate in f32, rounded once, as the interpreter)
``dist.reduce_tensor``           ``reduce`` / ``linalg.reduce`` (avg = sum / count)
``dist.cast``                    ``convert`` / ``arith`` casts
``dist.dropout``                 the counter-based generator of ``dialects/rng.py`` in
                                 integer ops at logical indices: the same mask, bit for bit
``dist.embedding_bag``           ``gather`` + ``reduce`` / ``linalg.generic`` with
                                 ``tensor.extract`` (a row-sliced table adds its own rows)
``dist.scatter_add``             ``scatter`` / ``linalg.generic`` summing, for each row
                                 held, the updates whose index names it (bag order)
``dist.sort``                    ``sort`` with jnp.sort's comparator / two
                                 ``linalg.generic``: each element's stable rank, then
                                 the element of each rank (MLIR 19 has no sort op)
``dist.take_slice``              the device's block (``dynamic_slice`` / ``mesh.all_slice``)
``dist.remesh``, ``to_local``,   nothing (same buffers)
``from_local``
``dist.transpose``, ``reshape``,  the same on the device's block (a sliced dim is whole
``extract_slice``, ``concat``     or the outermost of its group where these ops touch it)
``dist.iota``                    the block's indices: local iota + the block's offset
collectives                      the target's collective over the root axes (see below);
                                 ``coll.permute``: StableHLO's ``collective_permute``,
                                 MLIR's ``mesh.shift`` (a ring step on one axis) or
                                 ``mesh.send``/``mesh.recv``
fused collectives                unfused: FIRST collective, the region, FINISH collective
``coll.overlap``                 its chain (chunking is a schedule, not a meaning)
functional primitives            ``unplaced`` values are held in full by every device:
                                 reduce = all_reduce, join = all_gather, load = broadcast,
                                 slice = take_slice, repl/drop/store = nothing
arith/math on scalars            the same ops on 0-d values
``func.call``, ``rt``/``nccl``   rejected with a diagnostic (export dist/coll-level
                                 functions without calls)
===============================  =========================================================

A sliced dim the ranks do not divide (blocks of ceil(s/n), the last ones shorter or
empty) is exported by a target that pads (``Exporter.PADS``: sdy): every device holds a
buffer of the largest block (``Placed.local_shape``), zeros past its own elements; the
target pads the arguments and cuts the results at the boundary, keeps the padding zero
in between, and its collectives move equal blocks: where a collective joins or cuts a
level of such a dim whose blocks do not sit at their group rank times the padded block
(``Exporter.lined_up``; nested blocks may not), the target moves them into place around
it. A reshape must keep the padding where padding is (``Exporter.padded_dims_kept``). MLIR 19's mesh does not pad:
such a dim is a diagnostic (``Exporter.UNEVEN``).

An ``at<r>`` value exists on every device of the exported program and is meaningful on
rank r of its axes (the convention of MLIR's ``mesh.reduce``); ``dist.map`` and friends
compute on the other devices too and nobody reads those results. What a target cannot
say is rejected with a diagnostic at the op that needs it, naming the op (exit 1).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import ClassVar, NoReturn

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from distir.dialects import coll, dist, layout
from distir.dialects.collectives.permute import targets as permute_targets
from distir.dialects.dist import MeshOp, TensorType
from distir.dialects.placements import REPLICATED, At, Placement, Unplaced
from distir.dialects.verifier import Spans, located

TARGETS: dict[str, tuple[str, str]] = {
    "sdy": ("distir.frontends.export_sdy", "SdyExporter"),
    "mesh": ("distir.frontends.export_mesh", "MeshExporter"),
}
"""``--emit`` name -> (module, exporter class), imported when used."""

UNNAMED_AXES = ("x", "y", "z")


def export_module(module: ModuleOp, target: str, spans: Spans | None = None, line_offset: int = 0) -> str:
    """The text of ``module`` (a verified dist/coll-level module) in ``target`` (``sdy``
    or ``mesh``). Raises ``DiagnosticException`` with a located diagnostic naming the op
    that cannot be exported."""
    if target not in TARGETS:
        raise DiagnosticException(f"unknown export target '{target}' (choose from {', '.join(TARGETS)})")
    mod, cls = TARGETS[target]
    exporter: Exporter = getattr(import_module(mod), cls)(module, spans, line_offset)
    return exporter.run()


# ======================================================================================
# Meshes and per-device views of values
# ======================================================================================


@dataclass(frozen=True)
class RootMesh:
    """A mesh that is no view, with static sizes: what a target declares."""

    name: str
    sizes: tuple[int, ...]
    axis_names: tuple[str, ...]

    @functools.cached_property
    def grid(self) -> layout.MeshGrid:
        return layout.base_grid(self.name, self.sizes)

    @property
    def devices(self) -> int:
        return math.prod(self.sizes)

    def stride(self, axis: int) -> int:
        """Distance between device ids of neighbours along ``axis`` (row-major ids)."""
        return math.prod(self.sizes[axis + 1 :])

    def groups(self, axes: Sequence[int]) -> list[list[int]]:
        """Device groups of a collective over ``axes`` (row-major over ``axes`` as listed)."""
        return self.grid.groups(list(axes))

    def group_size(self, axes: Sequence[int]) -> int:
        return math.prod(self.sizes[a] for a in axes)

    def digits(self, rank: int, axes: Sequence[int]) -> list[int]:
        """Coordinates on ``axes`` of group rank ``rank``."""
        return layout.at_digits(rank, [self.sizes[a] for a in axes])


@dataclass(frozen=True)
class Placed:
    """A distributed value as one device of the exported program holds it: the logical
    shape, the element type and the placements on the root mesh."""

    shape: tuple[int, ...]
    element: Attribute
    mesh: RootMesh
    placements: tuple[Placement, ...]

    @functools.cached_property
    def local_shape(self) -> tuple[int, ...]:
        return layout.local_shape(self.shape, self.placements, self.mesh.sizes)

    def slicing(self, dim: int) -> list[int]:
        """Root axes slicing ``dim``, outermost block index first."""
        return layout.slicing_axes(self.placements, dim)

    @functools.cached_property
    def uneven(self) -> list[int]:
        """The sliced dims the ranks do not divide: a padded target holds them in buffers
        of the largest block, zeros past the device's own block."""
        return layout.uneven_dims(self.shape, self.placements, self.mesh.sizes)

    def counts(self, dim: int) -> list[int]:
        """The group sizes slicing ``dim``, outermost first."""
        return layout.slicing_counts(self.placements, self.mesh.sizes, dim)

    def padded_extent(self, dim: int) -> int:
        """``dim``'s extent in the padded global view: one largest block per block index."""
        return math.prod(self.counts(dim)) * self.local_shape[dim]

    @property
    def padded_shape(self) -> tuple[int, ...]:
        return tuple(self.padded_extent(d) for d in range(len(self.shape)))

    def blocks(self, dim: int) -> list[tuple[int, int]]:
        """(offset, size) of each block of ``dim`` in row-major order of its block index,
        the order of the padded global view."""
        counts = self.counts(dim)
        return [layout.dim_block(self.shape[dim], counts, layout.at_digits(i, counts)) for i in range(math.prod(counts))]

    def axes_of(self, kind: type[Placement]) -> list[int]:
        return [a for a, p in enumerate(self.placements) if isinstance(p, kind)]

    @property
    def at(self) -> list[tuple[int, int]]:
        """(root axis, rank) of each ``at<r>`` placement."""
        return [(a, p.rank.data) for a, p in enumerate(self.placements) if isinstance(p, At)]


# ======================================================================================
# Text
# ======================================================================================


class Text:
    """Lines of MLIR text with unique SSA names taken from distir's name hints."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self._taken: set[str] = set()

    def name(self, hint: str | None = None) -> str:
        base = re.sub(r"[^A-Za-z0-9_$.]", "_", hint or "") or "v"
        if base[0].isdigit():
            base = "v" + base
        name, k = base, 0
        while name in self._taken:
            k += 1
            name = f"{base}_{k}"
        self._taken.add(name)
        return "%" + name

    def new_scope(self) -> None:
        """Names are unique per function: forget the names taken so far."""
        self._taken = set()

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def op(self, hint: str | None, text: str) -> str:
        """``%name = text``; returns the name."""
        n = self.name(hint)
        self.line(f"{n} = {text}")
        return n

    def ops(self, hint: str | None, count: int, text: str) -> list[str]:
        """``%name:count = text``; returns the names of the results."""
        if count == 1:
            return [self.op(hint, text)]
        n = self.name(hint)
        self.line(f"{n}:{count} = {text}")
        return [f"{n}#{i}" for i in range(count)]

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"


# ======================================================================================
# The exporter
# ======================================================================================

SCALAR_DIALECTS = ("arith.", "math.")


@dataclass
class Exporter:
    """Walks each function of a module and asks the target for the text of each op.

    The target (a subclass) writes the function around the walk (``function``) and the
    ops: the local computations (``map``, ``matmul``, ...), the collectives over root
    axes (``all_reduce``, ...), the device's block (``slice_block``) and the scalar ops.
    Values are the target's SSA names; ``placed`` gives a value's per-device view."""

    module: ModuleOp
    spans: Spans | None = None
    line_offset: int = 0
    text: Text = field(default_factory=Text)
    env: dict[SSAValue, str] = field(default_factory=dict)

    TARGET: ClassVar[str] = ""
    """The target's name in diagnostics (``StableHLO + sdy``, ``MLIR mesh``)."""
    UNEVEN: ClassVar[str] = "the exported program is SPMD, one static shape per device, and the ranks' blocks differ"
    """Why a sliced dim the ranks do not divide (blocks of different sizes) cannot be
    exported (a target that does not pad them)."""
    PADS: ClassVar[bool] = False
    """Whether the target exports a dim the ranks do not divide padded: every device holds
    a buffer of the largest block (``Placed.local_shape``) whose elements past its own
    block are zeros; the target pads the arguments and cuts the results at the boundary
    and keeps the padding zero in between (``Placed.uneven``)."""

    def run(self) -> str:
        self.meshes = self._root_meshes()
        functions = [op for op in self.module.ops if isinstance(op, func.FuncOp)]
        for op in self.module.ops:
            if not isinstance(op, (func.FuncOp, MeshOp)):
                self.fail(op, f"cannot be exported to {self.TARGET}: only meshes and functions can")
        for f in functions:
            if f.is_declaration:
                self.fail(f, "is a declaration: only functions with a body are exported")
        self.function_meshes = {f: self._function_mesh(f) for f in functions}
        used = {m.name for m in self.function_meshes.values() if m is not None}
        self.header([m for m in self.meshes.values() if m.name in used])
        for f in functions:
            self.env = {}
            self.text.new_scope()
            self.function(f)
        return self.text.render()

    # ------------------------------------------------------------------ diagnostics
    def fail(self, op: Operation, msg: str) -> NoReturn:
        raise DiagnosticException(located(op, f"'{op.name}' op {msg}", self.spans, self.line_offset))

    # ------------------------------------------------------------------ meshes
    def _root_meshes(self) -> dict[str, RootMesh]:
        out: dict[str, RootMesh] = {}
        for op in self.module.ops:
            if not isinstance(op, MeshOp) or op.view is not None:
                continue
            sizes = op.sizes()
            if any(s is None for s in sizes):
                self.fail(
                    op,
                    f"mesh @{op.mesh_name} has shape {layout.format_sizes(sizes)}: {self.TARGET} needs static mesh "
                    f"sizes (fix them with -p 'fix-mesh-sizes{{ranks=N}}')",
                )
            names = op.axis_names or tuple(UNNAMED_AXES[a] if len(sizes) <= 3 else f"axis{a}" for a in range(len(sizes)))
            out[op.mesh_name] = RootMesh(op.mesh_name, tuple(sizes), names)  # type: ignore[arg-type]
        return out

    def _mesh_op(self, op: Operation, t: TensorType) -> MeshOp:
        return dist.lookup_mesh(op, t)

    def placed_type(self, op: Operation, t: TensorType) -> Placed:
        """``t`` as one device sees it, on its root mesh."""
        mesh = self._mesh_op(op, t)
        root = mesh.root()
        try:
            placements = mesh.to_root(t.get_placements())
        except layout.LayoutError as e:
            self.fail(op, str(e))
        sizes = self.meshes[root.mesh_name].sizes
        if not self.PADS:
            for d in layout.uneven_dims(t.get_shape(), placements, sizes):
                self.fail(op, f"cannot be exported to {self.TARGET}: {layout.describe_uneven(t.get_shape(), placements, sizes, d)}: {self.UNEVEN}")
        return Placed(t.get_shape(), t.element_type, self.meshes[root.mesh_name], tuple(placements))

    def placed(self, value: SSAValue) -> Placed:
        t = value.type
        assert isinstance(t, TensorType)
        owner = value.owner if isinstance(value.owner, Operation) else value.owner.parent_op()
        assert owner is not None
        return self.placed_type(owner, t)

    def root_axes(self, op: Operation, t: TensorType, axes: Sequence[int]) -> list[int]:
        """The root-mesh axes, in group order, of a collective over ``axes`` of ``t``'s
        mesh, without those of size 1 (they change no group): none when every group is
        one device, and the collective moves nothing."""
        mesh = self._mesh_op(op, t)
        roots = list(axes) if mesh.view is None else [r for a in axes for r in mesh.factor_lists[a]]
        sizes = self.meshes[mesh.root().mesh_name].sizes
        return [r for r in roots if sizes[r] > 1]

    def _function_mesh(self, f: func.FuncOp) -> RootMesh | None:
        """The one root mesh the values of ``f`` live on (None: no distributed values)."""
        roots: dict[str, RootMesh] = {}

        def see(op: Operation, t: Attribute) -> None:
            if isinstance(t, TensorType):
                m = self.placed_type(op, t).mesh
                roots.setdefault(m.name, m)
                if len(roots) > 1:
                    self.fail(op, f"uses meshes {', '.join('@' + n for n in sorted(roots))}: {self.TARGET} exports a function on one root mesh")

        for t in [*f.function_type.inputs.data, *f.function_type.outputs.data]:
            see(f, t)
        for op in f.walk():
            for v in op.results:
                see(op, v.type)
        return next(iter(roots.values()), None)

    # ------------------------------------------------------------------ the walk
    def value(self, v: SSAValue) -> str:
        return self.env[v]

    def bind(self, results: Sequence[SSAValue], names: Sequence[str]) -> None:
        for r, n in zip(results, names, strict=True):
            self.env[r] = n

    def emit_block(self, block: Block) -> list[str]:
        """Emit ``block``'s ops (its arguments bound already); the names its terminator
        passes on."""
        for op in block.ops:
            if isinstance(op, (func.ReturnOp, coll.YieldOp)):
                return [self.value(v) for v in op.operands]
            self.emit_op(op)
        return []

    def emit_op(self, op: Operation) -> None:
        handler = _HANDLERS.get(type(op))
        if handler is not None:
            handler(self, op)
            return
        if op.name.startswith(SCALAR_DIALECTS):
            if any(isinstance(v.type, TensorType) for v in op.operands):
                self.fail(op, "on !dist.tensor values must be inside a dist.map body")
            self.bind(op.results, self.scalar_op(op, [self.value(v) for v in op.operands]))
            return
        if isinstance(op, func.CallOp):
            self.fail(op, f"cannot be exported to {self.TARGET}: inline the callee first")
        self.fail(op, f"cannot be exported to {self.TARGET}: export works on dist/coll-level programs")

    # ------------------------------------------------------------------ what a target writes
    def header(self, meshes: Sequence[RootMesh]) -> None:
        raise NotImplementedError

    def function(self, f: func.FuncOp) -> None:
        raise NotImplementedError

    def scalar_op(self, op: Operation, operands: list[str]) -> list[str]:
        """An arith/math op on builtin scalars (outside a dist.map)."""
        raise NotImplementedError

    # local ops: each binds the op's results
    def map(self, op: dist.MapOp) -> None:
        raise NotImplementedError

    def matmul(self, op: dist.MatmulOp) -> None:
        raise NotImplementedError

    def reduce_tensor(self, op: dist.ReduceTensorOp) -> None:
        raise NotImplementedError

    def cast(self, op: dist.CastOp) -> None:
        raise NotImplementedError

    def dropout(self, op: dist.DropoutOp) -> None:
        raise NotImplementedError

    def embedding_bag(self, op: dist.EmbeddingBagOp) -> None:
        raise NotImplementedError

    def scatter_add(self, op: dist.ScatterAddOp) -> None:
        raise NotImplementedError

    def sort(self, op: dist.SortOp) -> None:
        raise NotImplementedError

    def transpose(self, op: dist.TransposeOp) -> None:
        raise NotImplementedError

    def reshape(self, op: dist.ReshapeOp) -> None:
        raise NotImplementedError

    def iota(self, op: dist.IotaOp) -> None:
        raise NotImplementedError

    def extract_slice(self, op: dist.ExtractSliceOp) -> None:
        """The slice of the device's block: a sliced dim is taken whole."""
        x, r = self.placed(op.input), self.placed(op.result)
        offsets, strides = list(op.option("offsets")), list(op.option("strides"))
        for d in layout.sliced_dims(x.placements):
            offsets[d], strides[d] = 0, 1
        self.bind(op.results, [self.text.op(op.result.name_hint, self.slice_text(self.value(op.input), x, r, offsets, strides))])

    def concat(self, op: dist.ConcatOp) -> None:
        ins = [self.placed(v) for v in op.inputs]
        text = self.concat_text([self.value(v) for v in op.inputs], ins, self.placed(op.result), op.option("dim"))
        self.bind(op.results, [self.text.op(op.result.name_hint, text)])

    def slice_text(self, x: str, src: Placed, dst: Placed, offsets: list[int], strides: list[int]) -> str:
        """The target's op taking ``dst.local_shape`` elements of ``x`` from ``offsets``."""
        raise NotImplementedError

    def concat_text(self, names: list[str], ins: list[Placed], dst: Placed, dim: int) -> str:
        raise NotImplementedError

    # the device's block and the collectives, over root axes; each returns the result
    def slice_block(self, x: str, src: Placed, dst: Placed, axes: list[int], dim: int, hint: str | None) -> str:
        """Keep this device's block along ``dim`` of its buffer (no communication)."""
        raise NotImplementedError

    def all_reduce(self, x: str, src: Placed, axes: list[int], kind: str, hint: str | None) -> str:
        raise NotImplementedError

    def reduce_scatter(self, x: str, src: Placed, dst: Placed, axes: list[int], kind: str, dim: int, hint: str | None) -> str:
        raise NotImplementedError

    def all_gather(self, x: str, src: Placed, dst: Placed, axes: list[int], dim: int, hint: str | None) -> str:
        raise NotImplementedError

    def reduce(self, x: str, src: Placed, axes: list[int], kind: str, root: int, hint: str | None) -> str:
        raise NotImplementedError

    def broadcast(self, x: str, src: Placed, axes: list[int], root: int, hint: str | None) -> str:
        raise NotImplementedError

    def all_to_all(self, x: str, src: Placed, dst: Placed, axes: list[int], split: int, concat: int, hint: str | None) -> str:
        raise NotImplementedError

    def send(self, x: str, src: Placed, axes: list[int], source: int, to: int, hint: str | None) -> str:
        raise NotImplementedError

    def permute(self, x: str, src: Placed, axes: list[int], pairs: list[tuple[int, int]], offset: int | None, hint: str | None) -> str:
        """Group rank s's value to group rank t for each (s, t) of ``pairs``; a rank no
        pair targets gets zeros (``offset``: the pairs are a ring step by it)."""
        raise NotImplementedError

    @staticmethod
    def lined_up(fine: Placed, coarse: Placed, dim: int, axes: Sequence[int]) -> bool:
        """Whether cutting the padded dim ``dim`` further over ``axes`` (from ``coarse`` to
        ``fine``) puts each device's block at its group rank times the padded block within
        the coarse block (``_lined_up``, cached: a model's collectives repeat a few layouts)."""
        return _lined_up(fine, coarse, dim, tuple(axes))

    def padded_dims_kept(self, op: Operation, x: Placed, r: Placed) -> None:
        """Check that reshaping the padded block of ``x`` gives the padded block of ``r``,
        padding where padding is: each padded dim is kept whole at the same place in
        row-major order (the same size after the same number of elements) and cut the same
        way, or each side has one padded dim with only dims of one element before it in
        the block (the device's elements are a prefix of its block on both sides: 5 rows
        of 2 over 3 ranks as 10 elements, blocks of 4, 4, 2)."""
        if not self.PADS or not (x.uneven or r.uneven):
            return

        def prefix(p: Placed) -> bool:
            return len(p.uneven) == 1 and all(n == 1 for n in p.local_shape[: p.uneven[0]])

        if prefix(x) and prefix(r) and math.prod(x.local_shape) == math.prod(r.local_shape):
            return
        for a, b in ((x, r), (r, x)):
            for d in a.uneven:
                before = math.prod(a.shape[:d])
                kept = [e for e in range(len(b.shape)) if b.shape[e] == a.shape[d] and math.prod(b.shape[:e]) == before]
                if not kept or b.counts(kept[0]) != a.counts(d):
                    self.fail(
                        op,
                        f"cannot be exported to {self.TARGET}: it merges or splits a dim the ranks do not divide "
                        f"({layout.describe_uneven(a.shape, a.placements, a.mesh.sizes, d)}), and a reshape of the padded "
                        f"block would mix padding into real elements (gather the dim first)",
                    )

    # ------------------------------------------------------------------ shared handlers
    def _collective(self, op: Operation, cls: type[coll.CollectiveOp], x: SSAValue, result_type: Attribute, options: dict, hint: str | None) -> str:
        """``cls`` (a plain collective, or a fused one's FIRST/FINISH) on ``x``."""
        t = x.type
        assert isinstance(t, TensorType) and isinstance(result_type, TensorType)
        src, dst = self.placed_type(op, t), self.placed_type(op, result_type)
        axes = self.root_axes(op, t, options.get("axes", (0,)))
        name = self.value(x)
        if cls is coll.PermuteOp:
            pairs = permute_targets(options, src.mesh.group_size(axes))
            if sorted(pairs) == [(i, i) for i in range(src.mesh.group_size(axes))]:
                return name  # every rank keeps its value
            return self.permute(name, src, axes, pairs, options.get("offset"), hint)
        if not axes:  # groups of one device: a reduction, gather or move of one value is that value
            return name
        if cls is coll.AllReduceOp:
            return self.all_reduce(name, src, axes, options["op"], hint)
        if cls is coll.ReduceScatterOp:
            return self.reduce_scatter(name, src, dst, axes, options["op"], options["dim"], hint)
        if cls is coll.AllGatherOp:
            return self.all_gather(name, src, dst, axes, _joined_dim(src, axes), hint)
        if cls is coll.ReduceOp:
            return self.reduce(name, src, axes, options["op"], options["root"], hint)
        if cls is coll.BroadcastOp:
            return self.broadcast(name, src, axes, _at_rank(src, axes), hint)
        if cls is coll.AllToAllOp:
            d = _joined_dim(src, axes)
            if d == options["dim"]:  # re-slicing the same dim: every device keeps its block
                return name
            return self.all_to_all(name, src, dst, axes, options["dim"], d, hint)
        if cls is coll.SendOp:
            source = _at_rank(src, axes)
            return name if source == options["to"] else self.send(name, src, axes, source, options["to"], hint)
        self.fail(op, f"cannot be exported to {self.TARGET}")

    def emit_collective(self, op: coll.CollectiveOp) -> None:
        self.bind(op.results, [self._collective(op, type(op), op.input, op.result.type, op.options(), op.result.name_hint)])

    def emit_fused(self, op: coll.FusedCollectiveOp) -> None:
        # unfused: FIRST on each operand, the region, FINISH on the flagged results
        block = op.body.block
        args = []
        for x, a in zip(op.inputs, block.args):
            if op.FIRST is None:
                args.append(self.value(x))
            else:
                args.append(self._collective(op, op.FIRST, x, a.type, op.first_options(), a.name_hint or x.name_hint))
        self.bind(block.args, args)
        term = block.last_op
        assert isinstance(term, coll.YieldOp)
        ys = self.emit_block(block)
        out = []
        for y, v, r, flag in zip(ys, term.values, op.outputs, op.gather_flags()):
            if flag:
                assert op.FINISH is not None
                y = self._collective(op, op.FINISH, v, r.type, {"axes": op.option("axes")}, r.name_hint)
            out.append(y)
        self.bind(op.outputs, out)

    def emit_overlap(self, op: coll.OverlapOp) -> None:
        self.bind(op.outputs, self.emit_block(op.body.block))

    def emit_take_slice(self, op: dist.TakeSliceOp | dist.SliceOp) -> None:
        if op.result in self.env:  # the target gave the device its block on entry
            return
        t = op.input.type
        assert isinstance(t, TensorType)
        axes = self.root_axes(op, t, [op.option("axis")])
        if not axes:
            return self.emit_same(op)
        src, dst = self.placed(op.input), self.placed(op.result)
        self.bind(op.results, [self.slice_block(self.value(op.input), src, dst, axes, op.option("dim"), op.result.name_hint)])

    def emit_same(self, op: Operation) -> None:
        """An op that moves no data on any device (remesh, to_local, from_local; repl,
        drop, store of a value every device holds)."""
        self.bind(op.results, [self.value(op.operands[0])])

    def emit_primitive(self, op: dist.PrimitiveOp) -> None:
        t = op.operands[0].type
        assert isinstance(t, TensorType)
        cls = {dist.ReduceOp: coll.AllReduceOp, dist.JoinOp: coll.AllGatherOp, dist.LoadOp: coll.BroadcastOp}[type(op)]
        opts = {"axes": (op.option("axis"),)}
        if isinstance(op, dist.ReduceOp):
            opts["op"] = op.option("op")
        self.bind(op.results, [self._collective(op, cls, op.operands[0], op.results[0].type, opts, op.results[0].name_hint)])

    # ------------------------------------------------------------------ function boundary
    def check_boundary(self, f: func.FuncOp) -> None:
        for i, t in enumerate(f.function_type.inputs.data):
            if isinstance(t, TensorType) and any(isinstance(p, Unplaced) for p in t.get_placements()):
                self.fail(f, f"argument {i} is unplaced: unplaced values exist only between functional primitives")
        ret = f.body.block.last_op
        for i, t in enumerate(f.function_type.outputs.data):
            if isinstance(t, TensorType) and any(isinstance(p, Unplaced) for p in t.get_placements()):
                self.fail(ret or f, f"result {i} is unplaced: unplaced values exist only between functional primitives")

    def result_to_replicated(self, name: str, p: Placed, hint: str | None) -> tuple[str, Placed]:
        """A result held ``at<r>`` on some axes, broadcast over those axes so that every
        device holds it (the targets' function results have no single-holder form)."""
        for axis, rank in p.at:
            if p.mesh.sizes[axis] > 1:
                name = self.broadcast(name, p, [axis], rank, hint)
            placements = list(p.placements)
            placements[axis] = REPLICATED
            p = Placed(p.shape, p.element, p.mesh, tuple(placements))
        return name, p


@functools.lru_cache(maxsize=4096)
def _lined_up(fine: Placed, coarse: Placed, dim: int, axes: tuple[int, ...]) -> bool:
    """Whether cutting the padded dim ``dim`` further over ``axes`` (from ``coarse`` to
    ``fine``) puts each device's block at its group rank times the padded block within
    the coarse block, so that the target's equal-sized collective (or slice) moves
    exactly the padded blocks; blocks cut level by level may not (a dim of 10 over 3
    then 2 ranks: the last block of 2 is cut in 1 + 1, the second 1 element in, not
    at the padded block's 2)."""
    if dim not in fine.uneven and dim not in coarse.uneven:
        return True
    mesh = fine.mesh
    extent = fine.local_shape[dim]
    for coords in layout.rank_coords(mesh.grid):
        lo, size = layout.block_span(fine.shape, fine.placements, mesh.sizes, coords, dim)
        base, _ = layout.block_span(coarse.shape, coarse.placements, mesh.sizes, coords, dim)
        j = layout.digits_rank([coords[a] for a in axes], [mesh.sizes[a] for a in axes])
        if size and lo - base != j * extent:
            return False
    return True


def _joined_dim(src: Placed, axes: Sequence[int]) -> int:
    d = layout.innermost_slicing(src.placements, list(axes))
    assert d is not None, "verified: the gathered axes slice one dim innermost"
    return d


def _at_rank(src: Placed, axes: Sequence[int]) -> int:
    """Group rank (row-major over ``axes``) of the device holding an ``at<>`` value."""
    digits = [p.rank.data for a in axes if isinstance(p := src.placements[a], At)]
    return int(np.ravel_multi_index(digits, [src.mesh.sizes[a] for a in axes]))


_HANDLERS: dict[type[Operation], Callable[[Exporter, Operation], None]] = {
    dist.MapOp: lambda e, op: e.map(op),  # type: ignore[arg-type]
    dist.MatmulOp: lambda e, op: e.matmul(op),  # type: ignore[arg-type]
    dist.ReduceTensorOp: lambda e, op: e.reduce_tensor(op),  # type: ignore[arg-type]
    dist.CastOp: lambda e, op: e.cast(op),  # type: ignore[arg-type]
    dist.DropoutOp: lambda e, op: e.dropout(op),  # type: ignore[arg-type]
    dist.EmbeddingBagOp: lambda e, op: e.embedding_bag(op),  # type: ignore[arg-type]
    dist.ScatterAddOp: lambda e, op: e.scatter_add(op),  # type: ignore[arg-type]
    dist.SortOp: lambda e, op: e.sort(op),  # type: ignore[arg-type]
    dist.TransposeOp: lambda e, op: e.transpose(op),  # type: ignore[arg-type]
    dist.ReshapeOp: lambda e, op: e.reshape(op),  # type: ignore[arg-type]
    dist.IotaOp: lambda e, op: e.iota(op),  # type: ignore[arg-type]
    dist.ExtractSliceOp: lambda e, op: e.extract_slice(op),  # type: ignore[arg-type]
    dist.ConcatOp: lambda e, op: e.concat(op),  # type: ignore[arg-type]
    dist.ToLocalOp: Exporter.emit_same,
    dist.FromLocalOp: Exporter.emit_same,
    dist.TakeSliceOp: Exporter.emit_take_slice,  # type: ignore[dict-item]
    dist.SliceOp: Exporter.emit_take_slice,  # type: ignore[dict-item]
    dist.RemeshOp: Exporter.emit_same,
    dist.ReplOp: Exporter.emit_same,
    dist.DropOp: Exporter.emit_same,
    dist.StoreOp: Exporter.emit_same,
    dist.ReduceOp: Exporter.emit_primitive,  # type: ignore[dict-item]
    dist.JoinOp: Exporter.emit_primitive,  # type: ignore[dict-item]
    dist.LoadOp: Exporter.emit_primitive,  # type: ignore[dict-item]
    **{cls: Exporter.emit_collective for cls in (  # type: ignore[misc]
        coll.AllReduceOp, coll.ReduceScatterOp, coll.AllGatherOp, coll.ReduceOp,
        coll.BroadcastOp, coll.AllToAllOp, coll.SendOp, coll.PermuteOp,
    )},
    **{cls: Exporter.emit_fused for cls in (  # type: ignore[misc]
        coll.FusedAllReduceOp, coll.FusedReduceScatterOp, coll.FusedAllGatherOp,
        coll.FusedReduceOp, coll.FusedBroadcastOp, coll.FusedAllToAllOp,
    )},
    coll.OverlapOp: Exporter.emit_overlap,  # type: ignore[dict-item]
}
"""What the walk does with each distir op (arith/math scalar ops: ``scalar_op``)."""


# ======================================================================================
# Shared facts
# ======================================================================================


def reduction_identity(kind: str, elt: Attribute | str) -> float | int:
    """The initial value of a reduction ``kind`` (sum, avg, prod, max, min) of ``elt``."""
    e = str(elt)
    if e.startswith("i"):
        width = int(e[1:])
        if kind == "max":
            return 0 if width == 1 else -(1 << (width - 1))
        if kind == "min":
            return 1 if width == 1 else (1 << (width - 1)) - 1
        return 1 if kind == "prod" else 0
    return {"sum": 0.0, "avg": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}[kind]


def half(elt: Attribute | str) -> bool:
    """f16 and bf16, whose arithmetic the interpreter runs in f32 and rounds once."""
    return str(elt) in ("f16", "bf16")


# Text of types and constants, as MLIR reads them


def ttype(shape: Sequence[int], elt: Attribute | str) -> str:
    """``tensor<4x8xf32>``; ``tensor<f32>`` for a 0-d tensor."""
    return "tensor<" + "".join(f"{d}x" for d in shape) + f"{elt}>"


def float_literal(value: float, elt: Attribute | str) -> str:
    """A float constant as MLIR parses it for ``elt`` (hex bits for inf and nan)."""
    if math.isfinite(value):
        return repr(float(value))
    bits = {"f16": (16, 5), "bf16": (16, 8), "f32": (32, 8), "f64": (64, 11)}[str(elt)]
    width, exp = bits
    mantissa = width - 1 - exp
    pattern = ((1 << exp) - 1) << mantissa
    if math.isnan(value):
        pattern |= 1 << (mantissa - 1)
    elif value < 0:
        pattern |= 1 << (width - 1)
    return f"0x{pattern:0{width // 4}X}"


def literal(value: float | int | bool, elt: Attribute | str) -> str:
    """A constant as MLIR reads it for ``elt``: signless integers wrap to their signed
    range (the bits of ``2**64 - 1`` as an i64 are ``-1``), floats as ``float_literal``."""
    e = str(elt)
    if e == "i1":
        return "true" if value else "false"
    if e.startswith("ui") or e == "index":
        return str(int(value))
    if e.startswith("i"):
        width = int(e[1:])
        v = int(value) & ((1 << width) - 1)
        return str(v - (1 << width) if v >> (width - 1) else v)
    return float_literal(float(value), e)
