"""The meshes the planner tries: the factorizations of N ranks into logical axes and,
for each, the placements of those axes on the topology's hierarchy (P²'s parallelism
matrices, ``synthesis/matrices.py``).

The hierarchy is the topology's levels cut to N devices, innermost first (16 ranks of
``p2-a100`` are ``[1, 16]``: one node; 64 are ``[4, 16]``). A logical mesh of one axis
is the whole hierarchy; a mesh of two axes ``a x b`` (``a, b >= 2``) is placed by every
parallelism matrix of ``(a, b)`` on the hierarchy (``DevicePlacement.standard``: inside
a level, axis 0's factor outermost). Two placements whose axes group the ranks alike
(the same groups per axis, up to the order of the axes) are one mesh: ``2 x 8`` and
``8 x 2`` with their rows swapped are the same machine. ``MAX_AXES`` bounds the axes
(Alpa's and AutoParallel's 2-d meshes: every strategy of an op gives each axis to one
of its factors, so an axis more multiplies the strategies).

By default a mesh of two axes keeps one of them within one level (``Mesh.pure``: the
GPUs of a node, or whole nodes): an axis that slices tensors wants the fastest links
of one level, and an axis spread over several levels only ever reduces (data
parallelism), which the one-axis mesh does with P²'s synthesized hierarchical
reductions. Of the 23 meshes of 256 ranks on 16 ``dgx2`` nodes, 14 are kept
(``mixed=True``, ``distir-plan --all-meshes``, tries all).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from distir.synthesis.matrices import DevicePlacement, divisors, format_matrix, parallelism_matrices
from distir.tuning.topology import Topology

MAX_AXES = 2


@dataclass(frozen=True)
class Mesh:
    """A logical mesh placed on the hardware: axis sizes and the P² placement."""

    sizes: tuple[int, ...]
    placement: DevicePlacement
    _groups: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def ranks(self) -> int:
        return math.prod(self.sizes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"p{i}" for i in range(len(self.sizes)))

    def groups(self, axes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The device groups of a collective over the logical ``axes`` (global device
        numbers, row-major over the hierarchy, as the topology numbers them)."""
        got = self._groups.get(axes)
        if got is None:
            factors = [k for a in axes for k in self.placement.axis_factors(a)]
            got = tuple(self.placement.groups(factors)) if factors else tuple((r,) for r in range(self.ranks))
            self._groups[axes] = got
        return got

    @cached_property
    def key(self) -> tuple:
        """The same for placements that group the ranks alike (module doc)."""
        return tuple(sorted((s, self.groups((a,))) for a, s in enumerate(self.sizes)))

    def pure(self, axis: int) -> bool:
        """Whether the axis lies within one level of the hierarchy."""
        return len({f.level for f in self.placement.factors if f.axis == axis}) == 1

    def levels(self, axis: int) -> str:
        """The hierarchy levels an axis spans, with its share of each: ``node 2 x gpu 8``."""
        parts = [f"{self.placement.level_names[f.level]} {f.size}" for f in self.placement.factors if f.axis == axis]
        return " x ".join(parts) or "1"

    def describe(self) -> str:
        """``16x16 [[16,1],[1,16]]``: the shape and the P² matrix."""
        return f"{'x'.join(map(str, self.sizes))} {format_matrix(self.placement.matrix)}"

    def spans(self) -> str:
        """``p0 = node 16, p1 = gpu 16``."""
        return ", ".join(f"{n} = {self.levels(a)}" for a, n in enumerate(self.names))


def hierarchy(topology: Topology, ranks: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The topology's hierarchy cut to ``ranks`` devices (innermost levels filled first)
    and the level names; ``ValueError`` when the ranks are no such cut."""
    cards = list(topology.cardinalities)
    out = [1] * len(cards)
    left = ranks
    for j in range(len(cards) - 1, 0, -1):
        if left % cards[j] == 0:
            out[j] = cards[j]
        elif cards[j] % left == 0:
            out[j] = left
        else:
            raise ValueError(f"{ranks} ranks are not whole units of the {topology.levels[j].name} level ({cards[j]} each)")
        left //= out[j]
    if left > cards[0]:
        raise ValueError(f"{ranks} ranks are more than the {topology.ranks} devices of {topology.describe()}")
    out[0] = left
    return tuple(out), tuple(lv.name for lv in topology.levels)


def meshes(topology: Topology, ranks: int, max_axes: int = MAX_AXES, shape: tuple[int, ...] | None = None, mixed: bool = False) -> list[Mesh]:
    """Every mesh of ``ranks`` ranks on ``topology`` (module doc), one-axis first;
    ``shape`` restricts them to one logical shape. Unless ``mixed``, a mesh of several
    axes keeps at least one axis within one level of the hierarchy (``pure``)."""
    h, names = hierarchy(topology, ranks)
    shapes: list[tuple[int, ...]]
    if shape is not None:
        shapes = [tuple(shape)]
    else:
        shapes = [(ranks,)]
        if max_axes >= 2:
            shapes += [(a, ranks // a) for a in divisors(ranks) if 1 < a < ranks]
    out: list[Mesh] = []
    seen: set = set()
    for sizes in shapes:
        for matrix in parallelism_matrices(h, sizes):
            m = Mesh(sizes, DevicePlacement.standard(matrix, h, names))
            if m.key in seen or not (mixed or len(sizes) == 1 or any(m.pure(a) for a in range(len(sizes)))):
                continue
            seen.add(m.key)
            out.append(m)
    return out
