"""Parallelism matrices (P² §3.1) and the placements they describe.

A system hierarchy ``H = [h_0 ... h_n]`` (outermost level first) and parallelism axes
``P = [p_0 ... p_m]`` admit the integer matrices ``X`` with ``prod_i X[i][j] = h_j`` (a
column splits a level between the axes) and ``prod_j X[i][j] = p_i`` (a row factors an
axis over the levels). For ``H = [4, 16]`` and ``P = [4, 16]`` they are
``[[1,4],[4,4]]``, ``[[2,2],[2,8]]`` and ``[[4,1],[1,16]]``.

A matrix is a placement: the hardware hierarchy split into one *factor axis* per entry
greater than 1, level by level (outermost level first) and, inside a level, axis by axis
(axis 0 outermost). Device r's digits over the factor axes, row-major, give its position
on every logical axis (DESIGN §2: the logical mesh is a view of the factor axes). For
``[[2,2],[2,8]]`` on ``[4, 16]`` the factor axes are ``node_p0(2) node_p1(2) gpu_p0(2)
gpu_p1(8)``; logical axis 0 is ``node_p0 x gpu_p0``, axis 1 ``node_p1 x gpu_p1``.

``DevicePlacement`` (not the dialect's ``placements.Placement``) holds that split for any
ordering of the factor axes inside a level (a view
mesh written by hand may order them differently); ``DevicePlacement.standard`` is P²'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from distir.dialects.diagnostics import InputRejected
from distir.dialects.layout import at_digits, digits_rank

Matrix = tuple[tuple[int, ...], ...]


@lru_cache(maxsize=4096)
def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (trial division up to its square root)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


MAX_MATRICES = 20_000
"""The most parallelism matrices ``parallelism_matrices`` lists (P²'s largest case has
4; 6 axes of 2 on 6 levels of 2 have 720): beyond, every matrix would be synthesized and
simulated for minutes, so the request is refused with a diagnostic."""


def parallelism_matrices(hierarchy: Sequence[int], axes: Sequence[int], limit: int = MAX_MATRICES) -> list[Matrix]:
    """Every parallelism matrix for ``hierarchy`` and ``axes`` (rows = axes, columns =
    levels), in lexicographic order of their rows; more than ``limit`` is an
    ``InputRejected``."""
    _check_positive(hierarchy, "hierarchy")
    _check_positive(axes, "axes")
    if math.prod(hierarchy) != math.prod(axes):
        raise InputRejected(
            f"no parallelism matrix: the axes {list(axes)} hold {math.prod(axes)} devices but the hierarchy "
            f"{list(hierarchy)} has {math.prod(hierarchy)}"
        )
    m, n = len(axes), len(hierarchy)
    out: list[Matrix] = []

    def columns(j: int, remaining: tuple[int, ...]) -> Iterator[list[tuple[int, ...]]]:
        if j == n:
            if all(r == 1 for r in remaining):
                yield []
            return
        for col in _splits(hierarchy[j], remaining):
            rest = tuple(r // c for r, c in zip(remaining, col))
            for tail in columns(j + 1, rest):
                yield [col] + tail

    for cols in columns(0, tuple(axes)):
        out.append(tuple(tuple(cols[j][i] for j in range(n)) for i in range(m)))
        if len(out) > limit:
            raise InputRejected(
                f"the axes {list(axes)} have more than {limit:,} parallelism matrices on the hierarchy {list(hierarchy)} "
                f"(the limit): give fewer axes or a hierarchy of fewer levels"
            )
    return sorted(out)


def _splits(h: int, remaining: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Ordered factorizations of ``h`` into ``len(remaining)`` factors, factor i dividing
    ``remaining[i]``."""
    if len(remaining) == 1:
        if remaining[0] % h == 0:
            yield (h,)
        return
    for d in divisors(h):
        if remaining[0] % d == 0:
            for rest in _splits(h // d, remaining[1:]):
                yield (d,) + rest


def _check_positive(values: Sequence[int], what: str) -> None:
    if not values:
        raise InputRejected(f"{what} must list at least one size")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputRejected(f"{what} sizes must be positive integers, got {list(values)}")


def check_matrix(matrix: Sequence[Sequence[int]], hierarchy: Sequence[int], axes: Sequence[int]) -> Matrix:
    """``matrix`` as a tuple, after checking that it places ``axes`` on ``hierarchy``."""
    mat = tuple(tuple(row) for row in matrix)
    if len(mat) != len(axes) or any(len(row) != len(hierarchy) for row in mat):
        raise InputRejected(f"matrix {[list(r) for r in mat]} must have {len(axes)} rows of {len(hierarchy)} entries")
    for j, h in enumerate(hierarchy):
        if math.prod(row[j] for row in mat) != h:
            raise InputRejected(f"matrix {[list(r) for r in mat]}: column {j} multiplies to {math.prod(row[j] for row in mat)}, not the level's {h}")
    for i, p in enumerate(axes):
        if math.prod(mat[i]) != p:
            raise InputRejected(f"matrix {[list(r) for r in mat]}: row {i} multiplies to {math.prod(mat[i])}, not axis {i}'s {p}")
    return mat


def format_matrix(matrix: Matrix) -> str:
    """``[[1,4],[4,4]]``, as P² writes matrices in text."""
    return "[" + ",".join("[" + ",".join(str(x) for x in row) + "]" for row in matrix) + "]"


@dataclass(frozen=True)
class FactorAxis:
    """One axis of the split hardware mesh: ``size`` units of hierarchy level ``level``
    given to logical axis ``axis``."""

    level: int
    axis: int
    size: int
    name: str


@dataclass(frozen=True)
class DevicePlacement:
    """A hardware hierarchy split into factor axes (in the order of the hardware mesh's
    axes: level by level, outermost first) and the logical axes as a view of them."""

    hierarchy: tuple[int, ...]
    level_names: tuple[str, ...]
    axes: tuple[int, ...]
    factors: tuple[FactorAxis, ...]

    @staticmethod
    def standard(matrix: Matrix, hierarchy: Sequence[int], level_names: Sequence[str] | None = None) -> DevicePlacement:
        """P²'s placement of ``matrix``: inside each level, axis 0's factor outermost."""
        hierarchy = tuple(hierarchy)
        axes = tuple(math.prod(row) for row in matrix)
        check_matrix(matrix, hierarchy, axes)
        names = tuple(level_names) if level_names else default_level_names(len(hierarchy))
        factors = tuple(
            FactorAxis(j, i, matrix[i][j], f"{names[j]}_p{i}")
            for j in range(len(hierarchy))
            for i in range(len(axes))
            if matrix[i][j] > 1
        )
        return DevicePlacement(hierarchy, names, axes, factors)

    @staticmethod
    def from_view(
        parent_sizes: Sequence[int],
        views: Sequence[Sequence[int]],
        hierarchy: Sequence[int],
        level_names: Sequence[str] | None = None,
        parent_names: Sequence[str] | None = None,
    ) -> DevicePlacement | None:
        """The placement a view mesh describes: ``views[i]`` lists the parent (hardware)
        axes of logical axis i. None when a parent axis straddles two levels of
        ``hierarchy`` or belongs to no logical axis (the view is no P² placement)."""
        hierarchy = tuple(hierarchy)
        names = tuple(level_names) if level_names else default_level_names(len(hierarchy))
        axis_of = {}
        for i, v in enumerate(views):
            for a in v:
                axis_of[a] = i
        levels, j, acc = [], 0, 1
        for s in parent_sizes:
            while j < len(hierarchy) and hierarchy[j] == 1 and acc == 1:
                j += 1
            if j == len(hierarchy):
                return None
            acc *= s
            levels.append(j)
            if acc == hierarchy[j]:
                j, acc = j + 1, 1
            elif hierarchy[j] % acc:
                return None
        while j < len(hierarchy) and hierarchy[j] == 1:
            j += 1
        if j != len(hierarchy) or acc != 1 or set(axis_of) != set(range(len(parent_sizes))):
            return None
        axes = tuple(math.prod(parent_sizes[a] for a in v) for v in views)
        factors = tuple(
            FactorAxis(levels[a], axis_of[a], s, parent_names[a] if parent_names else f"{names[levels[a]]}_p{axis_of[a]}")
            for a, s in enumerate(parent_sizes)
        )
        return DevicePlacement(hierarchy, names, axes, factors)

    @property
    def matrix(self) -> Matrix:
        rows = [[1] * len(self.hierarchy) for _ in self.axes]
        for f in self.factors:
            rows[f.axis][f.level] *= f.size
        return tuple(tuple(r) for r in rows)

    @property
    def ranks(self) -> int:
        return math.prod(self.hierarchy)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Sizes of the factor axes (the hardware mesh's shape)."""
        return tuple(f.size for f in self.factors)

    def axis_factors(self, axis: int) -> tuple[int, ...]:
        """Indices of the factor axes of logical axis ``axis``, outermost first."""
        return tuple(k for k, f in enumerate(self.factors) if f.axis == axis)

    def digits(self, rank: int) -> tuple[int, ...]:
        """Rank ``rank``'s digits over the factor axes (row-major)."""
        return tuple(at_digits(rank, self.sizes))

    def rank_of(self, digits: Sequence[int]) -> int:
        return digits_rank(digits, self.sizes)

    def groups(self, varying: Sequence[int], fixed_zero: Sequence[int] = ()) -> list[tuple[int, ...]]:
        """Groups of ranks that differ only on the factor axes ``varying`` (each ordered
        row-major over ``varying`` as listed), keeping only ranks whose digits on
        ``fixed_zero`` are 0; groups in increasing order of their first rank."""
        varying = list(varying)
        others = [k for k in range(len(self.factors)) if k not in varying]
        out = []
        ranges_other = [range(1) if k in fixed_zero else range(self.factors[k].size) for k in others]
        ranges_vary = [range(self.factors[k].size) for k in varying]
        for fixed in product(*ranges_other):
            digits = [0] * len(self.factors)
            for k, d in zip(others, fixed):
                digits[k] = d
            group = []
            for var in product(*ranges_vary):
                for k, d in zip(varying, var):
                    digits[k] = d
                group.append(self.rank_of(digits))
            out.append(tuple(group))
        return sorted(out)

    def describe(self) -> str:
        return " ".join(f"{f.name}({f.size})" for f in self.factors)


def default_level_names(n: int) -> tuple[str, ...]:
    """Level names when no topology names them: ``node, gpu`` for two levels, else
    ``l0, l1, ...``."""
    return ("node", "gpu") if n == 2 else tuple(f"l{j}" for j in range(n))
