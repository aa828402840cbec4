"""Random well-typed distir programs, as a hypothesis strategy.

API
---
``programs(max_ops=8, meshes=MESHES, kinds=None, elements=ELEMENTS, free_dims=False)``
is a hypothesis strategy of ``Program`` values::

    from hypothesis import given, settings
    from support.programs import programs

    @settings(max_examples=200, deadline=None)
    @given(programs())
    def test_my_pass_keeps_meaning(prog):
        module = prog.module()                 # a fresh, verified ModuleOp
        ...                                    # run a pass pipeline on it
        assert equivalent(prog.text, module, prog.ranks, func_a=prog.func)

``Program`` is a named tuple ``(text, func, ranks)``: the module's text (custom
syntax, parses and verifies), the name of its function, and the rank count its meshes
need (all mesh sizes are fixed by the program, though a 1-D mesh may be written
``[?]``). ``Program.module()`` parses the text again (passes mutate modules in place, so
take a fresh one per pipeline); ``Program.mesh_sizes`` gives the sizes of the main mesh.

Each program has one function ``@f`` over one mesh: 1-D (``@world``, 1 to 4 ranks) or
2-D (``@grid``, e.g. 2x2 or 2x3) with sometimes a 1-D view ``@flat`` of it. Its
arguments are tensors of rank 1 to 3 whose dims are multiples of the rank count (so any
slicing divides; with ``free_dims`` a dim is any of ``FREE_SIZES``: primes, ones and
zero, which the ranks seldom divide, sliced or not: blocks of ceil(s/n), some empty),
placed ``replicated``, ``sliced<d>`` (several axes may slice one dim,
in either nesting order), ``local`` or ``at<r>`` per axis, plus builtin scalars. Its
body chains up to ``max_ops`` ops drawn from ``kinds`` (default: all of ``KINDS``;
repeat a kind to draw it more often):

* functional primitives: ``reduce slice join repl drop store load``
* collectives (over one or several axes, in any order): ``all_reduce reduce_scatter
  all_gather reduce broadcast all_to_all send permute``; when no value fits, a new argument
  placed to fit is added
* local ops: ``map`` (arith/math bodies, broadcast and scalar operands, one or two
  results), ``matmul``, ``reduce_tensor``, ``cast``, ``take_slice``, ``dropout``,
  ``embedding_bag``, ``remesh``
* ``fused_all_reduce`` (a map in the region, gather flags) and ``overlap`` (a local op
  and the collective consuming it).

Every op is built with the dialect builders (``Op.of`` infers result types) and the
module is verified, so a program that fails to verify is a generator bug. The function
returns one to three of the newest values, made ``replicated`` where they were
``unplaced`` (a function never returns an unplaced value). Element types are drawn from
``elements`` (f32 mostly, also f64, f16, bf16 and i32); map bodies avoid division, logs
and exponentials so that values stay finite.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from hypothesis import strategies as st
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    FunctionType,
    IntegerType,
    ModuleOp,
    bf16,
    f16,
    f32,
    f64,
    i32,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from distir.dialects import coll, dist, layout
from distir.dialects.dist import MeshOp, TensorType
from distir.dialects.placements import (
    LOCAL,
    REPLICATED,
    UNPLACED,
    At,
    Local,
    Placement,
    Replicated,
    Sliced,
    Unplaced,
)


def examples(n: int) -> int:
    """How many random programs a property test draws: ``n`` (sized for CI) times
    ``DISTIR_RANDOM_SCALE`` (default 1; ``DISTIR_RANDOM_SCALE=10`` for a long run)."""
    return max(1, round(n * float(os.environ.get("DISTIR_RANDOM_SCALE", "1"))))


PRIMITIVES = ("reduce", "slice", "join", "repl", "drop", "store", "load")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "reduce", "broadcast", "all_to_all", "send", "permute")
LOCAL_OPS = ("map", "matmul", "reduce_tensor", "cast", "take_slice", "dropout", "embedding_bag", "remesh")
COMPOUND = ("fused_all_reduce", "overlap")
KINDS = tuple(f"prim.{k}" for k in PRIMITIVES) + tuple(f"coll.{k}" for k in COLLECTIVES) + LOCAL_OPS + COMPOUND
"""Op kinds the generator draws from (primitives and collectives are prefixed)."""

MESHES: tuple[tuple[int, ...], ...] = ((1,), (2,), (3,), (4,), (2, 2), (2, 3), (3, 2), (1, 2), (2, 1))
"""Mesh shapes drawn from."""

ELEMENTS: tuple[Attribute, ...] = (f32, f32, f32, f64, f16, bf16, i32)
"""Element types drawn from (repeats weight the draw)."""

REDUCTIONS = ("sum", "prod", "max", "min", "avg")

FREE_SIZES = (1, 2, 3, 5, 7, 11, 13, 1, 0)
"""Dim sizes drawn with ``free_dims``: primes, ones and zero, which the ranks seldom
divide (blocks of ceil(s/n) of different sizes, ranks holding nothing when the dim is
smaller than their count)."""

UNEVEN_MESHES: tuple[tuple[int, ...], ...] = ((1,), (2,), (3,), (5,), (6,), (7,), (8,), (2, 3), (3, 2), (2, 4), (4, 2))
"""Meshes of 1, 2, 3, 5, 6, 7 and 8 ranks (the uneven property tests)."""


class Program(NamedTuple):
    """A random program: module text, function name, rank count."""

    text: str
    func: str
    ranks: int

    def module(self) -> ModuleOp:
        from distir.dialects.context import parse_module

        return parse_module(self.text)

    @property
    def mesh_sizes(self) -> tuple[int, ...]:
        for op in self.module().ops:
            if isinstance(op, MeshOp) and op.view is None:
                return op.grid(self.ranks).sizes
        raise ValueError("no mesh")


def is_float(t: Attribute) -> bool:
    return isinstance(t, (Float16Type, BFloat16Type, Float32Type, Float64Type))


@dataclass
class _Gen:
    """Builds one function body op by op from hypothesis draws."""

    draw: Callable
    mesh: str
    sizes: tuple[int, ...]
    view: tuple[str, tuple[int, ...]] | None
    elements: tuple[Attribute, ...]
    block: Block = field(default_factory=Block)
    pool: list[SSAValue] = field(default_factory=list)
    matmuls: int = 0
    names: int = 0
    free_dims: bool = False

    # ------------------------------------------------------------ helpers
    @property
    def ranks(self) -> int:
        return math.prod(self.sizes)

    def pick(self, options: Sequence):
        return self.draw(st.sampled_from(list(options)))

    def name(self, v: SSAValue, prefix: str = "v") -> SSAValue:
        v.name_hint = f"{prefix}{self.names}"
        self.names += 1
        return v

    def arg(self, t: Attribute) -> SSAValue:
        return self.name(self.block.insert_arg(t, len(self.block.args)), "a")

    def add(self, op: Operation) -> Operation | None:
        self.block.add_op(op)
        for r in op.results:
            self.name(r)
            if isinstance(r.type, TensorType):
                self.pool.append(r)
        return op

    def sizes_of(self, t: TensorType) -> tuple[int, ...]:
        if self.view is not None and t.mesh_name == self.view[0]:
            return self.view[1]
        return self.sizes

    def dim_size(self) -> int:
        if self.free_dims:
            return self.pick(FREE_SIZES)
        return self.ranks * self.pick([1, 2])

    def tensor_type(self, rank: int | None = None, elt: Attribute | None = None) -> TensorType:
        rank = self.pick([1, 2, 2, 3]) if rank is None else rank
        shape = [self.dim_size() for _ in range(rank)]
        elt = self.pick(self.elements) if elt is None else elt
        placements: list[Placement] = []
        for a, s in enumerate(self.sizes):
            options = ["replicated", "local", "at"] + (["sliced"] * 2 if rank else [])
            word = self.pick(options)
            if word == "replicated":
                placements.append(REPLICATED)
            elif word == "local":
                placements.append(LOCAL)
            elif word == "at":
                placements.append(At(self.draw(st.integers(0, s - 1))))
            else:
                placements.append(Sliced(self.draw(st.integers(0, rank - 1))))
        orders = {}
        for d in layout.sliced_dims(placements):
            axes = layout.slicing_axes(placements, d)
            if len(axes) > 1 and self.draw(st.booleans()):
                orders[d] = list(reversed(axes))
        return TensorType(shape, elt, self.mesh, layout.with_orders(placements, orders))

    def candidates(self, ok: Callable[[TensorType], bool]) -> list[SSAValue]:
        return [v for v in self.pool if isinstance(v.type, TensorType) and ok(v.type)]

    def operand(self, ok: Callable[[TensorType], bool]) -> SSAValue | None:
        c = self.candidates(ok)
        return self.pick(c) if c else None

    def source(self, ok: Callable[[TensorType], bool], word: str) -> SSAValue:
        """A pool value satisfying ``ok`` or (always when there is none, sometimes
        anyway) a new argument placed ``word`` (local, sliced or at) on some axes."""
        c = self.candidates(ok)
        if c and self.draw(st.integers(0, 2)) > 0:
            return self.pick(c)
        t = self.tensor_type()
        pl = [Sliced(p.dim.data) if isinstance(p, Sliced) else p for p in t.get_placements()]
        dim = self.draw(st.integers(0, t.rank - 1))
        for a in self.subset(range(len(self.sizes))):
            if word == "local":
                pl[a] = LOCAL
            elif word == "sliced":
                pl[a] = Sliced(dim)
            else:
                pl[a] = At(self.draw(st.integers(0, self.sizes[a] - 1)))
        v = self.arg(t.with_(placements=layout.tidy(pl)))
        self.pool.append(v)
        return v

    def axes_where(self, t: TensorType, kind: type) -> list[int]:
        return [a for a, p in enumerate(t.get_placements()) if isinstance(p, kind)]

    def subset(self, axes: Sequence[int]) -> list[int]:
        """A non-empty subset of ``axes`` in random order (all of them half the time)."""
        if self.draw(st.booleans()):
            return list(self.draw(st.permutations(list(axes))))
        return self.draw(st.lists(st.sampled_from(list(axes)), min_size=1, max_size=len(axes), unique=True))

    def of(self, cls, *operands: SSAValue, **options) -> Operation | None:
        try:
            return self.add(cls.of(*operands, sizes=self.sizes_of(operands[0].type), **options))
        except VerifyException:
            return None

    # ------------------------------------------------------------ functional primitives
    def prim_reduce(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, Local)))
        if x is None:
            return False
        axis = self.pick(self.axes_where(x.type, Local))
        return self.of(dist.ReduceOp, x, op=self.pick(REDUCTIONS), axis=axis) is not None

    def prim_slice(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, Unplaced)) and t.rank > 0)
        if x is None:
            return False
        axis = self.pick(self.axes_where(x.type, Unplaced))
        return self.of(dist.SliceOp, x, dim=self.draw(st.integers(0, x.type.rank - 1)), axis=axis) is not None

    def prim_join(self) -> bool:
        def axes(t: TensorType) -> list[int]:
            return [a for a in self.axes_where(t, Sliced) if layout.innermost_slicing(t.get_placements(), [a]) is not None]

        x = self.operand(lambda t: bool(axes(t)))
        if x is None:
            return False
        return self.of(dist.JoinOp, x, axis=self.pick(axes(x.type))) is not None

    def prim_repl(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, Unplaced)))
        if x is None:
            return False
        return self.of(dist.ReplOp, x, axis=self.pick(self.axes_where(x.type, Unplaced))) is not None

    def prim_drop(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, Replicated)))
        if x is None:
            return False
        return self.of(dist.DropOp, x, axis=self.pick(self.axes_where(x.type, Replicated))) is not None

    def prim_store(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, Unplaced)))
        if x is None:
            return False
        axis = self.pick(self.axes_where(x.type, Unplaced))
        rank = self.draw(st.integers(0, self.sizes_of(x.type)[axis] - 1))
        return self.of(dist.StoreOp, x, rank=rank, axis=axis) is not None

    def prim_load(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, At)))
        if x is None:
            return False
        return self.of(dist.LoadOp, x, axis=self.pick(self.axes_where(x.type, At))) is not None

    # ------------------------------------------------------------ collectives
    def _gather_options(self, t: TensorType) -> list[list[int]]:
        out = []
        for d in layout.sliced_dims(t.get_placements()):
            order = layout.slicing_axes(t.get_placements(), d)
            out.extend(order[len(order) - k :] for k in range(1, len(order) + 1))
        return out

    def coll_all_reduce(self) -> bool:
        x = self.source(lambda t: bool(self.axes_where(t, Local)), "local")
        return self.of(coll.AllReduceOp, x, op=self.pick(REDUCTIONS), axes=self.subset(self.axes_where(x.type, Local))) is not None

    def coll_reduce_scatter(self) -> bool:
        x = self.source(lambda t: bool(self.axes_where(t, Local)) and t.rank > 0, "local")
        axes = self.subset(self.axes_where(x.type, Local))
        dim = self.draw(st.integers(0, x.type.rank - 1))
        return self.of(coll.ReduceScatterOp, x, op=self.pick(REDUCTIONS), dim=dim, axes=axes) is not None

    def coll_all_gather(self) -> bool:
        x = self.source(lambda t: bool(self._gather_options(t)), "sliced")
        return self.of(coll.AllGatherOp, x, axes=self.pick(self._gather_options(x.type))) is not None

    def coll_reduce(self) -> bool:
        x = self.source(lambda t: bool(self.axes_where(t, Local)), "local")
        axes = self.subset(self.axes_where(x.type, Local))
        n = math.prod(self.sizes_of(x.type)[a] for a in axes)
        return self.of(coll.ReduceOp, x, op=self.pick(REDUCTIONS), root=self.draw(st.integers(0, n - 1)), axes=axes) is not None

    def coll_broadcast(self) -> bool:
        x = self.source(lambda t: bool(self.axes_where(t, At)), "at")
        return self.of(coll.BroadcastOp, x, axes=self.subset(self.axes_where(x.type, At))) is not None

    def coll_all_to_all(self) -> bool:
        x = self.source(lambda t: bool(self._gather_options(t)), "sliced")
        axes = self.pick(self._gather_options(x.type))
        return self.of(coll.AllToAllOp, x, dim=self.draw(st.integers(0, x.type.rank - 1)), axes=axes) is not None

    def coll_send(self) -> bool:
        x = self.source(lambda t: bool(self.axes_where(t, At)), "at")
        axes = self.subset(self.axes_where(x.type, At))
        n = math.prod(self.sizes_of(x.type)[a] for a in axes)
        return self.of(coll.SendOp, x, to=self.draw(st.integers(0, n - 1)), axes=axes) is not None

    def coll_permute(self) -> bool:
        # an offset (any sign, past n too) or pairs: a random partial permutation
        x = self.source(lambda t: bool(self.axes_where(t, Local)), "local")
        axes = self.subset(self.axes_where(x.type, Local))
        n = math.prod(self.sizes_of(x.type)[a] for a in axes)
        if self.draw(st.booleans()):
            return self.of(coll.PermuteOp, x, offset=self.draw(st.integers(-n - 1, n + 1)), axes=axes) is not None
        sources, targets = self.draw(st.permutations(range(n))), self.draw(st.permutations(range(n)))
        pairs = list(zip(sources, targets))[: self.draw(st.integers(0, n))]
        return self.of(coll.PermuteOp, x, pairs=pairs, axes=axes) is not None

    # ------------------------------------------------------------ local ops
    def _body(self, elts: Sequence[Attribute], out_elt: Attribute, results: int) -> Region:
        # All operands share the element type ``out_elt`` (the map keeps it).
        block = Block(arg_types=list(elts))
        vals: list[SSAValue] = list(block.args)
        floats = is_float(out_elt)
        binary = (arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.MaximumfOp, arith.MinimumfOp) if floats else (
            arith.AddiOp,
            arith.SubiOp,
            arith.MuliOp,
            arith.MaxSIOp,
            arith.MinSIOp,
            arith.XOrIOp,
        )
        unary = (arith.NegfOp, xmath.AbsFOp, xmath.TanhOp) if floats else ()
        for _ in range(self.draw(st.integers(1, 3))):
            if unary and self.draw(st.integers(0, 3)) == 0:
                op = self.pick(unary)(self.pick(vals))
            else:
                op = self.pick(binary)(self.pick(vals), self.pick(vals))
            block.add_op(op)
            vals.append(op.results[0])
        yields = [vals[-1]] + [self.pick(vals) for _ in range(results - 1)]
        block.add_op(dist.YieldOp.build(operands=[yields]))
        return Region(block)

    def map(self) -> bool:
        x = self.operand(lambda t: True)
        if x is None:
            return False
        t: TensorType = x.type  # type: ignore[assignment]
        operands: list[SSAValue] = [x]
        for _ in range(self.draw(st.integers(0, 2))):
            choice = self.pick(["same", "scalar", "broadcast"])
            if choice == "same":
                same = self.candidates(
                    lambda u: u.get_shape() == t.get_shape()
                    and u.element_type == t.element_type
                    and u.mesh_name == t.mesh_name
                    and layout.same_layout(u.get_placements(), t.get_placements())
                )
                if same:
                    operands.append(self.pick(same))
            elif choice == "scalar":
                operands.append(self.arg(t.element_type))
            else:
                k = self.draw(st.integers(0, t.rank))
                shape = t.get_shape()[t.rank - k :]
                pl = dist.operand_placements(t, shape)
                if not any(isinstance(p, Unplaced) for p in pl):
                    operands.append(self.arg(TensorType(shape, t.element_type, t.mesh, pl)))
        results = self.pick([1, 1, 2])
        elts = [o.type.element_type if isinstance(o.type, TensorType) else o.type for o in operands]
        region = self._body(elts, t.element_type, results)
        return self.add(dist.MapOp.make(operands, [t] * results, [region])) is not None

    def matmul(self) -> bool:
        if self.matmuls >= 2:
            return False
        x = self.operand(lambda u: u.rank >= 2 and not self.axes_where(u, Unplaced))
        if x is None:
            return False
        a: TensorType = x.type  # type: ignore[assignment]
        ra = a.rank
        k = a.get_shape()[-1]
        pl: list[Placement] = []
        for p in a.get_placements():
            if isinstance(p, Sliced) and p.dim.data == ra - 1:
                pl.append(Sliced(0))
            elif isinstance(p, Sliced):
                pl.append(REPLICATED)
            elif isinstance(p, Replicated):
                pl.append(self.pick([REPLICATED, Sliced(1)]))
            elif isinstance(p, Local):
                pl.append(REPLICATED)
            else:
                pl.append(p)
        orders = {}
        k_axes = layout.slicing_axes(a.get_placements(), ra - 1)
        if k_axes:
            orders[0] = k_axes
        n_axes = [i for i, p in enumerate(pl) if isinstance(p, Sliced) and p.dim.data == 1]
        if n_axes:
            orders[1] = n_axes
        w = self.arg(TensorType([k, self.dim_size()], a.element_type, a.mesh, layout.with_orders(pl, orders)))
        if self.of(dist.MatmulOp, x, w) is None:
            return False
        self.matmuls += 1
        return True

    def reduce_tensor(self) -> bool:
        x = self.operand(lambda t: t.rank >= 1)
        if x is None:
            return False
        dims = sorted(self.subset(range(x.type.rank)))
        return self.of(dist.ReduceTensorOp, x, op=self.pick(("sum", "max", "min", "avg")), dims=dims) is not None

    def cast(self) -> bool:
        x = self.operand(lambda t: True)
        if x is None:
            return False
        t: TensorType = x.type  # type: ignore[assignment]
        targets = [e for e in (f32, f64, f16, bf16, i32) if e != t.element_type]
        if isinstance(t.element_type, IntegerType):
            targets = [f32, f64]
        return self.add(dist.CastOp.make([x], [t.with_(element_type=self.pick(targets))])) is not None

    def take_slice(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, Replicated)) and t.rank > 0)
        if x is None:
            return False
        axis = self.pick(self.axes_where(x.type, Replicated))
        return self.of(dist.TakeSliceOp, x, dim=self.draw(st.integers(0, x.type.rank - 1)), axis=axis) is not None

    def dropout(self) -> bool:
        x = self.operand(lambda t: is_float(t.element_type))
        if x is None:
            return False
        return self.of(dist.DropoutOp, x, p=self.pick([0.0, 0.25, 0.5]), seed=self.draw(st.integers(0, 1000))) is not None

    def embedding_bag(self) -> bool:
        # a table of 0 rows has no valid index (no input runs it): at least one row
        rows, width, bags = max(1, self.dim_size()), self.dim_size(), self.dim_size()
        elt = self.pick([e for e in self.elements if is_float(e)] or [f32])
        tp: list[Placement] = []
        ip: list[Placement] = []
        for s in self.sizes:
            choice = self.pick(["rep", "bags", "rows", "local", "at"])
            if choice == "rep":
                tp.append(REPLICATED), ip.append(REPLICATED)
            elif choice == "bags":
                tp.append(REPLICATED), ip.append(Sliced(0))
            elif choice == "rows":
                tp.append(Sliced(0)), ip.append(REPLICATED)
            elif choice == "local":
                tp.append(LOCAL), ip.append(LOCAL)
            else:
                r = At(self.draw(st.integers(0, s - 1)))
                tp.append(r), ip.append(r)
        mode = "sum" if any(isinstance(p, Sliced) for p in tp) else self.pick(["sum", "mean", "max"])
        table = self.arg(TensorType([rows, width], elt, self.mesh, tp))
        idx = self.arg(TensorType([bags, self.pick([1, 2, 3])], i32, self.mesh, ip))
        return self.of(dist.EmbeddingBagOp, table, idx, mode=mode) is not None

    def remesh(self) -> bool:
        if self.view is None:
            return False
        view = self.view[0]
        x = self.operand(lambda t: True)
        if x is None:
            return False
        t: TensorType = x.type  # type: ignore[assignment]
        target = _to_view(t.get_placements(), self.sizes) if t.mesh_name == self.mesh else _from_view(t.get_placements()[0], self.sizes)
        if target is None:
            return False
        mesh = view if t.mesh_name == self.mesh else self.mesh
        return self.add(dist.RemeshOp.make([x], [TensorType(t.get_shape(), t.element_type, mesh, target)])) is not None

    # ------------------------------------------------------------ fused and overlap
    def fused_all_reduce(self) -> bool:
        x = self.operand(lambda t: bool(self.axes_where(t, Local)) and t.rank > 0 and t.mesh_name == self.mesh)
        if x is None:
            return False
        t: TensorType = x.type  # type: ignore[assignment]
        axes = self.subset(self.axes_where(t, Local))
        dim = self.draw(st.integers(0, t.rank - 1))
        kind = self.pick(REDUCTIONS)
        try:
            (arg_t,) = coll.ReduceScatterOp.infer([t], self.sizes, {"op": kind, "dim": dim, "axes": axes})
        except dist.RuleError:
            return False
        block = Block(arg_types=[arg_t])
        self.name(block.args[0], "b")
        results = self.pick([1, 2])
        m = dist.MapOp.make([block.args[0]], [arg_t] * results, [self._body([t.element_type], t.element_type, results)])
        block.add_op(m)
        block.add_op(coll.YieldOp.build(operands=[list(m.results)]))
        flags = [self.draw(st.booleans()) for _ in range(results)]
        types = [coll.AllGatherOp.infer([arg_t], self.sizes, {"axes": axes})[0] if g else arg_t for g in flags]
        op = coll.FusedAllReduceOp.make([x], types, [Region(block)], op=kind, dim=dim, axes=axes, gather=flags)
        return self.add(op) is not None

    def overlap(self) -> bool:
        # A local op and a collective consuming it, wrapped in coll.overlap.
        before = len(self.block.ops)
        if not self.pick([self.matmul, self.map, self.reduce_tensor])():
            return False
        producer = self.block.last_op
        assert producer is not None
        y = producer.results[0]
        t: TensorType = y.type  # type: ignore[assignment]
        local_axes = self.axes_where(t, Local)
        gather = self._gather_options(t)
        try:
            if local_axes:
                cop = coll.AllReduceOp.of(y, op="sum", axes=self.subset(local_axes), sizes=self.sizes_of(t))
            elif gather:
                cop = coll.AllGatherOp.of(y, axes=self.pick(gather), sizes=self.sizes_of(t))
            else:
                return len(self.block.ops) > before
        except VerifyException:
            return True
        producer.detach()
        self.pool = [v for v in self.pool if v.owner is not producer]
        body = Block()
        body.add_op(producer)
        body.add_op(cop)
        body.add_op(coll.YieldOp.build(operands=[[cop.result]]))
        self.name(cop.result)
        return self.add(coll.OverlapOp.make([], [cop.result.type], [Region(body)], chunks=self.pick([1, 2, 4]), order=self.pick(coll.ORDERS))) is not None


def _to_view(pl: Sequence[Placement], sizes: Sequence[int]) -> list[Placement] | None:
    """Placements on the 1-D view [[0, 1, ...]] of the same layout, if one exists."""
    if all(isinstance(p, Local) for p in pl):
        return [LOCAL]
    if all(isinstance(p, Replicated) for p in pl):
        return [REPLICATED]
    if all(isinstance(p, Unplaced) for p in pl):
        return [UNPLACED]
    if all(isinstance(p, At) for p in pl):
        r = 0
        for p, s in zip(pl, sizes):
            r = r * s + p.rank.data  # type: ignore[union-attr]
        return [At(r)]
    dims = {p.dim.data for p in pl if isinstance(p, Sliced)}
    if len(dims) == 1 and all(isinstance(p, Sliced) for p in pl):
        (d,) = dims
        if layout.slicing_axes(pl, d) == list(range(len(pl))):
            return [Sliced(d)]
    return None


def _from_view(p: Placement, sizes: Sequence[int]) -> list[Placement]:
    if isinstance(p, At):
        return [At(x) for x in layout.at_digits(p.rank.data, sizes)]
    if isinstance(p, Sliced):
        return [Sliced(p.dim.data)] * len(sizes)
    return [p] * len(sizes)


_GENERATORS = {
    **{f"prim.{k}": f"prim_{k}" for k in PRIMITIVES},
    **{f"coll.{k}": f"coll_{k}" for k in COLLECTIVES},
    **{k: k for k in LOCAL_OPS + COMPOUND},
}


@st.composite
def programs(
    draw,
    max_ops: int = 8,
    meshes: Sequence[tuple[int, ...]] = MESHES,
    kinds: Collection[str] | None = None,
    elements: Sequence[Attribute] = ELEMENTS,
    free_dims: bool = False,
) -> Program:
    """A hypothesis strategy of random well-typed programs (see the module doc)."""
    kinds = tuple(KINDS if kinds is None else kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown op kinds {sorted(unknown)} (choose from {KINDS})")
    sizes = draw(st.sampled_from(list(meshes)))
    ops: list[Operation] = []
    if len(sizes) == 1:
        name = "world"
        dynamic = draw(st.booleans())
        ops.append(MeshOp.create_mesh(name, [None] if dynamic else list(sizes)))
        view = None
    else:
        name = "grid"
        ops.append(MeshOp.create_mesh(name, list(sizes), [f"ax{i}" for i in range(len(sizes))]))
        view = None
        if draw(st.booleans()):
            view = ("flat", (math.prod(sizes),))
            ops.append(MeshOp.create_mesh("flat", [math.prod(sizes)], None, name, [list(range(len(sizes)))]))
    g = _Gen(draw, name, tuple(sizes), view, tuple(elements), free_dims=free_dims)
    for _ in range(draw(st.integers(1, 3))):
        t = g.tensor_type()
        g.pool.append(g.arg(t))
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(kinds))
        getattr(g, _GENERATORS[kind])()
    results: list[SSAValue] = []
    for v in reversed(g.pool[-3:]):
        if len(results) == draw(st.integers(1, 3)):
            break
        t: TensorType = v.type  # type: ignore[assignment]
        for a, p in enumerate(t.get_placements()):
            if isinstance(p, Unplaced):
                op = dist.ReplOp.of(v, axis=a, sizes=g.sizes_of(t))
                g.add(op)
                v = op.result
                t = v.type  # type: ignore[assignment]
        results.append(v)
    g.block.add_op(ReturnOp(*results))
    fn = FuncOp("f", FunctionType.from_lists([a.type for a in g.block.args], [r.type for r in results]), Region(g.block))
    module = ModuleOp([*ops, fn])
    module.verify()
    return Program(str(module), "f", g.ranks)


# --------------------------------------------------------------------------------------
# Programs as the front ends produce them
# --------------------------------------------------------------------------------------

FRONTEND_MESHES: tuple[tuple[int, ...], ...] = ((2, 2), (2, 4), (4, 2), (1, 4), (2, 1), (1, 1), (2, 2, 2), (2, 1, 2), (1, 2, 2))
"""Mesh shapes of ``training_steps``: data-parallel axes, then a tensor-parallel axis."""


@dataclass
class _Step:
    """One training step of a chain of linear layers, built on a ``_Gen`` (see
    ``training_steps``). ``tp`` is the tensor-parallel axis (the last), ``batch`` the
    data-parallel axes slicing the batch."""

    g: _Gen
    tp: int
    batch: list[int]

    def tensor(self, shape: Sequence[int], batch_dim: int | None, tp: Placement) -> TensorType:
        pl = [Sliced(batch_dim) if a in self.batch and batch_dim is not None else REPLICATED for a in range(self.tp)] + [tp]
        return TensorType(list(shape), f32, self.g.mesh, pl)

    def sliced_on_tp(self, v: SSAValue) -> bool:
        return isinstance(v.type.get_placements()[self.tp], Sliced)  # type: ignore[attr-defined]

    def on_tp(self, v: SSAValue, sliced: bool) -> SSAValue:
        """``v`` (an activation: dim 1 is the hidden dim) replicated over tp, or sliced on
        dim 1 over it: an all_gather or a take_slice when it is not already."""
        if self.sliced_on_tp(v) == sliced:
            return v
        if sliced:
            return self.must(dist.TakeSliceOp, v, dim=1, axis=self.tp)
        return self.must(coll.AllGatherOp, v, axes=[self.tp])

    def must(self, cls, *operands: SSAValue, **options) -> SSAValue:
        op = self.g.of(cls, *operands, **options)
        assert op is not None, f"{cls.name} {options} of {[o.type for o in operands]}"
        return op.results[0]

    def map(self, body: str, *operands: SSAValue) -> SSAValue:
        """A map with one of a few bodies (few distinct kernels to compile):
        ``act`` h*(0.5h+1), ``dact`` d*(h+1), ``diff`` a-b, ``sgd`` w-lr*g."""
        t = operands[0].type
        block = Block(arg_types=[o.type.element_type if isinstance(o.type, TensorType) else o.type for o in operands])
        a = block.args
        if body == "act":
            half = arith.ConstantOp(FloatAttr(0.5, f32))
            one = arith.ConstantOp(FloatAttr(1.0, f32))
            ops = [half, one, arith.MulfOp(half.result, a[0])]
            ops += [arith.AddfOp(ops[-1].results[0], one.result)]
            ops += [arith.MulfOp(a[0], ops[-1].results[0])]
        elif body == "dact":
            one = arith.ConstantOp(FloatAttr(1.0, f32))
            ops = [one, arith.AddfOp(a[1], one.result)]
            ops += [arith.MulfOp(a[0], ops[-1].results[0])]
        elif body == "diff":
            ops = [arith.SubfOp(a[0], a[1])]
        else:  # sgd
            ops = [arith.MulfOp(a[2], a[1])]
            ops += [arith.SubfOp(a[0], ops[-1].results[0])]
        block.add_ops([*ops, dist.YieldOp.build(operands=[[ops[-1].results[0]]])])
        op = self.g.add(dist.MapOp.make(list(operands), [t], [Region(block)]))
        assert op is not None
        return op.results[0]

    def reduce_grad(self, dw: SSAValue) -> SSAValue:
        """A weight's gradient (``local`` over the batch axes) summed or averaged over
        them: an all_reduce, or a reduce_scatter (ZeRO) when a dim fits."""
        kind = self.g.pick(["sum", "avg"])
        if self.g.draw(st.integers(0, 2)) == 0:
            op = self.fitting(coll.ReduceScatterOp, dw, op=kind, dim=self.g.draw(st.integers(0, 1)), axes=self.batch)
            if op is not None:
                return op
        return self.must(coll.AllReduceOp, dw, op=kind, axes=self.batch)

    def fitting(self, cls, *operands: SSAValue, **options) -> SSAValue | None:
        """The op, added, when it verifies (any dim over any number of ranks: uneven
        blocks are valid); else None."""
        try:
            op = cls.of(*operands, sizes=self.g.sizes, **options)
        except VerifyException:
            return None
        self.g.add(op)
        return op.results[0]

    def update(self, w: SSAValue, grad: SSAValue, lr: SSAValue) -> SSAValue:
        """SGD of ``w`` by ``grad``: on the whole weight after an all_reduce; on this
        rank's slice, all-gathered after, after a reduce_scatter (when the slice of
        ``w`` can be taken alike; else the gradient itself)."""
        gt: TensorType = grad.type  # type: ignore[assignment]
        if layout.same_layout(gt.get_placements(), w.type.get_placements()):  # type: ignore[attr-defined]
            return self.map("sgd", w, grad, lr)
        ws = w
        for a in self.batch:
            p = gt.get_placements()[a]
            if not isinstance(p, Sliced):
                return grad
            taken = self.fitting(dist.TakeSliceOp, ws, dim=p.dim.data, axis=a)
            if taken is None:
                return grad
            ws = taken
        if not layout.same_layout(ws.type.get_placements(), gt.get_placements()):  # type: ignore[attr-defined]
            return grad
        new = self.map("sgd", ws, grad, lr)
        return self.fitting(coll.AllGatherOp, new, axes=list(reversed(self.batch))) or new


@st.composite
def training_steps(draw, meshes: Sequence[tuple[int, ...]] = FRONTEND_MESHES, max_layers: int = 3) -> Program:
    """A hypothesis strategy of programs that look like what the front ends make of a
    JAX training step (``jax.value_and_grad`` of a chain of linear layers, partitioned):
    a mesh of data-parallel axes and a tensor-parallel axis (2-D or 3-D); the batch
    sliced over some data axes; each layer column-parallel (weight sliced on dim 1 over
    tp) or row-parallel (dim 0, its output partial over tp, all-reduced or
    reduce-scattered), with an activation between layers; then the gradients of a
    squared-error loss back through the chain (``dist.transpose`` and matmuls, partial
    sums over tp all-reduced), each weight's gradient partial over the batch axes and
    sliced over tp (all-reduced or reduce-scattered over the batch axes: collectives
    over several axes, of operands sliced over another), and an SGD update. Hidden dims
    are small multiples of tp (a block per rank may be a single row), f32 throughout."""
    sizes = tuple(draw(st.sampled_from(list(meshes))))
    axis_names = ["dp", "tp"] if len(sizes) == 2 else ["dp", "fsdp", "tp"]
    mesh = MeshOp.create_mesh("mesh", list(sizes), axis_names)
    g = _Gen(draw, "mesh", sizes, None, (f32,))
    tp = len(sizes) - 1
    s = _Step(g, tp, sorted(g.subset(range(tp))))
    width = [sizes[tp] * draw(st.integers(1, 3)) for _ in range(max_layers + 1)]
    rows = math.prod(sizes[a] for a in s.batch) * draw(st.integers(1, 2))
    x = g.arg(s.tensor([rows, width[0]], 0, REPLICATED))
    lr = g.arg(f32)
    layers = []  # (kind, input as multiplied, weight, pre-activation)
    a = x
    for i in range(draw(st.integers(1, max_layers))):
        column = g.pick([True, True, False] if not s.sliced_on_tp(a) else [True, False, False])
        a = s.on_tp(a, sliced=not column)
        w = g.arg(s.tensor([width[i], width[i + 1]], None, Sliced(1) if column else Sliced(0)))
        h = s.must(dist.MatmulOp, a, w)
        if not column:  # partial over tp
            scattered = s.fitting(coll.ReduceScatterOp, h, op="sum", dim=1, axes=[tp]) if draw(st.integers(0, 3)) == 0 else None
            h = scattered or s.must(coll.AllReduceOp, h, op="sum", axes=[tp])
        layers.append((column, a, w, h))
        a = s.map("act", h)
    target = g.arg(a.type)
    d = s.map("diff", a, target)
    results: list[SSAValue] = []
    for column, a_in, w, h in reversed(layers):
        d = s.on_tp(d, sliced=s.sliced_on_tp(h))
        dh = s.map("dact", d, h)
        dh = s.on_tp(dh, sliced=column)
        a_t = s.must(dist.TransposeOp, a_in, perm=[1, 0])
        grad = s.reduce_grad(s.must(dist.MatmulOp, a_t, dh))
        w_t = s.must(dist.TransposeOp, w, perm=[1, 0])
        da = s.must(dist.MatmulOp, dh, w_t)
        if column:  # partial over tp
            da = s.must(coll.AllReduceOp, da, op="sum", axes=[tp])
        results.append(s.update(w, grad, lr) if draw(st.booleans()) else grad)
        d = da
    results = results[: draw(st.integers(1, len(results)))] + [d]
    g.block.add_op(ReturnOp(*results))
    fn = FuncOp("f", FunctionType.from_lists([v.type for v in g.block.args], [r.type for r in results]), Region(g.block))
    module = ModuleOp([mesh, fn])
    module.verify()
    return Program(str(module), "f", g.ranks)
