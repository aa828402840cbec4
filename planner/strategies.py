"""The strategies of a node on a mesh, from the partitioner's factor rules.

A **layout** is how a value lies on the mesh: the mesh axes slicing each of its dims
(outermost first; several axes slicing one dim nest in axis order) and the axes on
which it holds partial results (``local``, with the reduction that completes them).

A **strategy of an op** gives each mesh axis to at most one of the op's factors
(``partition.factors``: the batch, M, N and contracted K of a ``dist.matmul``; one per
dim of a ``dist.map``; the kept and reduced dims of a ``dist.reduce_tensor``; ...). An
axis given to a factor slices every dim of that factor on every value of the op (the
operands are resharded to that, the results come out so); an axis given to a factor
that reaches no result (a contracted or reduced dim) leaves the results partial there;
an axis given to no factor replicates the op's work. An op without factors runs on
replicated operands. A dim must be divisible by the axes that slice it.

A **strategy of an argument** is its layout: each axis replicates it or slices one of
its dims (a fixed argument has one: its placement).

``op_strategies`` and ``arg_strategies`` list them; each ``Strategy`` holds the layout
of every result and the layout every tensor operand must have.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from distir.dialects import layout as dlayout
from distir.dialects.dist import TensorType
from distir.dialects.placements import LOCAL, REPLICATED, Local, Placement, Replicated, Sliced, sliced
from distir.frontends.partition import Lay
from distir.planner.graph import Fixed, Graph, Node, PlanError

MAX_STRATEGIES = 64
"""Strategies kept per node (the most parallel first): a rank-6 map on two axes has 49,
a matmul with two batch dims 36."""


class Layout(NamedTuple):
    """Axes slicing each dim (outermost first) and the (axis, reduction) of partial sums.

    A named tuple: layouts key every cache of the search (each shape's reshardings and
    groups, hundreds of thousands of lookups for a model), and a tuple's hash and
    equality run in C (a frozen dataclass's in Python: a fifth of ``ilp.build``)."""

    dims: tuple[tuple[int, ...], ...]
    partial: tuple[tuple[int, str], ...] = ()

    @staticmethod
    def replicated(rank: int) -> Layout:
        return Layout(((),) * rank)

    def placements(self, naxes: int) -> list[Placement]:
        out: list[Placement] = [REPLICATED] * naxes
        for d, axes in enumerate(self.dims):
            for k, a in enumerate(axes):
                out[a] = sliced(d, k) if len(axes) > 1 else sliced(d)
        for a, _ in self.partial:
            out[a] = LOCAL
        return out

    def lay(self) -> Lay:
        return Lay(list(self.dims), dict(self.partial))

    def local_shape(self, shape: Sequence[int], sizes: Sequence[int]) -> tuple[int, ...]:
        return tuple(-(-s // math.prod(sizes[a] for a in axes)) if axes else s for s, axes in zip(shape, self.dims))

    def whole(self) -> Layout:
        """The layout with its partial sums completed (replicated there)."""
        return Layout(self.dims)

    @property
    def sliced(self) -> bool:
        return any(self.dims)

    def describe(self, names: Sequence[str]) -> str:
        """``[p0, -]`` (dim 0 on p0), ``partial(p1)``: what slices each dim."""
        dims = ",".join("*".join(names[a] for a in axes) if axes else "-" for axes in self.dims)
        part = f" partial({','.join(names[a] for a, _ in self.partial)})" if self.partial else ""
        return f"[{dims}]{part}"


@dataclass(frozen=True)
class Strategy:
    """``assign[a]``: the factor mesh axis a is given to (-1: none), for an op; the
    layouts of the results and those the tensor operands need (None: a scalar)."""

    assign: tuple[int, ...]
    results: tuple[Layout, ...]
    operands: tuple[Layout | None, ...]

    def op_axes(self) -> dict[int, int]:
        return {a: f for a, f in enumerate(self.assign) if f >= 0}


def _divides(shape: Sequence[int], dim: int, axes: Sequence[int], sizes: Sequence[int], uneven: bool) -> bool:
    n = math.prod(sizes[a] for a in axes)
    return shape[dim] % n == 0 if not uneven else shape[dim] >= n


def op_strategies(g: Graph, node: Node, sizes: Sequence[int], uneven: bool = False) -> list[Strategy]:
    """The strategies of an op node on a mesh of ``sizes`` (module doc), the replicated
    one first."""
    naxes = len(sizes)
    results = [g.values[r] for r in node.results]
    if not node.factors:
        return [Strategy((-1,) * naxes, tuple(Layout.replicated(len(v.shape)) for v in results),
                         tuple(None if x is None else Layout.replicated(len(g.values[x].shape)) for x in node.operands))]
    fs = node.factors
    out: list[Strategy] = []
    for assign in itertools.product(range(-1, len(fs)), repeat=naxes):
        axes_of: dict[int, tuple[int, ...]] = {}
        for a, f in enumerate(assign):
            if f >= 0:
                axes_of[f] = axes_of.get(f, ()) + (a,)
        ok = True
        for f, axes in axes_of.items():
            for v, d in fs[f][0]:
                if not _divides(g.values[v].shape, d, axes, sizes, uneven):
                    ok = False
                    break
            if not ok:
                break
        if not ok:
            continue
        dims: dict[int, list[tuple[int, ...]]] = {}
        for v in {*node.results, *(x for x in node.operands if x is not None)}:
            dims[v] = [()] * len(g.values[v].shape)
        for f, axes in axes_of.items():
            for v, d in fs[f][0]:
                if v in dims:
                    dims[v][d] = axes
        partial = tuple(sorted((a, fs[f][1] or "sum") for f, axes in axes_of.items() if fs[f][1] is not None for a in axes))
        res = tuple(Layout(tuple(dims[r]), partial) for r in node.results)
        ops = tuple(None if x is None else Layout(tuple(dims[x])) for x in node.operands)
        out.append(Strategy(tuple(assign), res, ops))
    out.sort(key=lambda s: (0 if all(f < 0 for f in s.assign) else 1, -sum(1 for f in s.assign if f >= 0)))
    return _keep(out)


def _keep(out: list[Strategy]) -> list[Strategy]:
    if len(out) <= MAX_STRATEGIES:
        return out
    return out[:MAX_STRATEGIES]


def arg_strategies(g: Graph, node: Node, sizes: Sequence[int], uneven: bool = False) -> list[Strategy]:
    """The layouts of an argument: fixed, or every way of giving each axis to one dim or
    to none (replicated first)."""
    v = g.values[node.results[0]]
    naxes = len(sizes)
    if node.fixed is not None:
        return [Strategy((-1,) * naxes, (fixed_layout(g, node.fixed, len(v.shape), naxes, f"argument %{v.name}"),), ())]
    out = []
    for assign in itertools.product(range(-1, len(v.shape)), repeat=naxes):
        dims: list[tuple[int, ...]] = [()] * len(v.shape)
        for a, d in enumerate(assign):
            if d >= 0:
                dims[d] = dims[d] + (a,)
        if all(_divides(v.shape, d, axes, sizes, uneven) for d, axes in enumerate(dims) if axes):
            out.append(Strategy(tuple(assign), (Layout(tuple(dims)),), ()))
    return out


def fixed_layout(g: Graph, fixed: Fixed, rank: int, naxes: int, what: str) -> Layout:
    """A fixed placement on the program's own mesh as a layout on a mesh of ``naxes``
    axes (``graph.py``: over every axis when the program's mesh has one axis)."""
    ps = fixed.placements
    if len(ps) == 1 and naxes >= 1:
        p = ps[0]
        kind = fixed.kinds.get(0, "sum")
        if isinstance(p, Replicated):
            return Layout.replicated(rank)
        if isinstance(p, Sliced):
            dims = [()] * rank
            dims[p.dim.data] = tuple(range(naxes))
            return Layout(tuple(dims))
        if isinstance(p, Local):
            return Layout(((),) * rank, tuple((a, kind) for a in range(naxes)))
        raise PlanError(f"distir-plan: {what}: placement {p} cannot be kept on the meshes the planner tries")
    if len(ps) != naxes:
        raise PlanError(f"distir-plan: {what}: its placements name {len(ps)} axes, the mesh has {naxes}")
    dims = [()] * rank
    for d in range(rank):
        dims[d] = tuple(dlayout.slicing_axes(list(ps), d))
    partial = tuple((a, fixed.kinds.get(a, "sum")) for a, p in enumerate(ps) if isinstance(p, Local))
    for a, p in enumerate(ps):
        if not isinstance(p, (Replicated, Sliced, Local)):
            raise PlanError(f"distir-plan: {what}: placement {p} cannot be kept by the planner")
    return Layout(tuple(dims), partial)


def tensor_type(shape: Sequence[int], element_type, lay: Layout, naxes: int, mesh: str = "m") -> TensorType:
    return TensorType(tuple(shape), element_type, mesh, lay.placements(naxes))


def is_local(p: Placement) -> bool:
    return isinstance(p, Local)
