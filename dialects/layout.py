"""Placement arithmetic shared by the verifiers, the interpreter, the passes and lowering.

A tensor type gives one placement per mesh axis. This module answers, for a list of
placements: which mesh axes slice a dim and in which nesting order, what shape a rank's
buffer has, which block of the logical tensor a rank holds, and whether two placement
lists describe the same layout. It knows nothing about IR operations.

Nesting order: when several mesh axes slice the same dim, the first in mesh-axis order
gives the outermost block index, unless the placements say otherwise with
``sliced<d, k>`` (k = 0 is outermost). A rank's block index along that dim is then the
mixed-radix number whose digits are the rank's coordinates on those axes, outermost first.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from distir.dialects.placements import UNPLACED, At, Placement, Sliced, Unplaced, sliced

if TYPE_CHECKING:
    import numpy as np  # imported where a grid is built: parsing and printing need no numpy

Sizes = Sequence[int | None]
"""Mesh axis sizes; None is a size fixed only when the program runs (`?`)."""


class LayoutError(Exception):
    """A placement list that no rank assignment can realise (message says why)."""


# --------------------------------------------------------------------------------------
# Nesting order of sliced dims
# --------------------------------------------------------------------------------------


# ``type(p) is Sliced`` below is ``isinstance(p, Sliced)``: placement classes are final
# (xDSL's attribute definitions), and an abstract base class's isinstance takes half a
# microsecond (these run for every value of every program the planner prices)


def sliced_dims(placements: Sequence[Placement]) -> set[int]:
    return {p.dim.data for p in placements if type(p) is Sliced}


def slicing_axes(placements: Sequence[Placement], dim: int) -> list[int]:
    """Mesh axes slicing ``dim``, outermost block index first."""
    axes = [a for a, p in enumerate(placements) if type(p) is Sliced and p.dim.data == dim]
    explicit = [a for a in axes if placements[a].order.data >= 0]  # type: ignore[union-attr]
    if not explicit:
        return axes
    return sorted(axes, key=lambda a: (placements[a].order.data, a))  # type: ignore[union-attr]


def check_orders(placements: Sequence[Placement]) -> str | None:
    """Return why the explicit nesting orders are inconsistent, or None."""
    for d in sorted(sliced_dims(placements)):
        axes = [a for a, p in enumerate(placements) if type(p) is Sliced and p.dim.data == d]
        orders = [placements[a].order.data for a in axes]  # type: ignore[union-attr]
        given = [o for o in orders if o >= 0]
        if not given:
            continue
        if len(given) != len(orders):
            return f"dim {d} is sliced by axes {_axes_str(axes)}: give the nesting order on all of them or none"
        if sorted(given) != list(range(len(axes))):
            return f"nesting orders of dim {d} must be 0..{len(axes) - 1}, got {', '.join(map(str, orders))}"
    return None


def with_orders(placements: Sequence[Placement], orders: dict[int, list[int]]) -> list[Placement]:
    """Placements with the nesting order of each dim in ``orders`` (axes, outermost first),
    written in the shortest form: plain ``sliced<d>`` where the order is the default."""
    out = list(placements)
    for dim, axes in orders.items():
        default = sorted(axes) == axes
        for k, a in enumerate(axes):
            out[a] = sliced(dim, -1 if default else k)
    return out


def tidy(placements: Sequence[Placement]) -> list[Placement]:
    """The shortest spelling of the same layout."""
    return with_orders(placements, {d: slicing_axes(placements, d) for d in sliced_dims(placements)})


def canonical(placements: Sequence[Placement]) -> tuple[tuple[str | int, ...], ...]:
    """A hashable key equal for two placement lists exactly when they mean the same layout."""
    key: list[tuple[str | int, ...]] = []
    for axis, p in enumerate(placements):
        if type(p) is Sliced:
            d = p.dim.data
            key.append(("sliced", d, slicing_axes(placements, d).index(axis)))
        elif type(p) is At:
            key.append(("at", p.rank.data))
        else:
            key.append((p.word,))
    return tuple(key)


def same_layout(a: Sequence[Placement], b: Sequence[Placement]) -> bool:
    if len(a) != len(b):
        return False
    return tuple(a) == tuple(b) or canonical(a) == canonical(b)  # the same placements: the same layout


def format_placements(placements: Sequence[Placement]) -> str:
    return "[" + ", ".join(str(p) for p in placements) + "]"


def _axes_str(axes: Sequence[int]) -> str:
    return ", ".join(str(a) for a in axes)


# --------------------------------------------------------------------------------------
# Placement transitions used by the collectives' rules (each collective's module under
# dialects/collectives/ states its row of DTensor's transition table: ``TRANSITION``)
# --------------------------------------------------------------------------------------


def add_slicing(placements: Sequence[Placement], dim: int, axes: Sequence[int]) -> list[Placement]:
    """Slice ``dim`` along ``axes`` (group order = order listed), nested inside any axes that
    already slice it."""
    order = slicing_axes(placements, dim) + list(axes)
    out = list(placements)
    for a in axes:
        out[a] = sliced(dim)
    return with_orders(out, {dim: order})


def innermost_slicing(placements: Sequence[Placement], axes: Sequence[int]) -> int | None:
    """If ``axes`` all slice one dim and are its innermost slicing axes in the listed
    order, return that dim; else None."""
    if not axes or not all(isinstance(placements[a], Sliced) for a in axes):
        return None
    dims = {placements[a].dim.data for a in axes}  # type: ignore[union-attr]
    if len(dims) != 1:
        return None
    (dim,) = dims
    order = slicing_axes(placements, dim)
    if order[len(order) - len(axes):] != list(axes):
        return None
    return dim


def replace_axes(placements: Sequence[Placement], axes: Sequence[int], new: Placement) -> list[Placement]:
    """Set ``axes`` to ``new`` and keep the remaining slicing orders consistent."""
    out = list(placements)
    orders = {d: [a for a in slicing_axes(placements, d) if a not in axes] for d in sliced_dims(placements)}
    for a in axes:
        out[a] = new
    return with_orders(out, {d: o for d, o in orders.items() if o})


def at_digits(rank: int, sizes: Sequence[int]) -> list[int]:
    """Row-major digits of a group rank over axes of the given sizes (the one rank ->
    coordinates conversion: mesh grids, hardware levels, P²'s factor axes)."""
    digits = []
    for s in reversed(sizes):
        digits.append(rank % s)
        rank //= s
    return digits[::-1]


def digits_rank(digits: Sequence[int], sizes: Sequence[int]) -> int:
    """The rank with these row-major digits over axes of the given sizes (inverse of
    ``at_digits``)."""
    r = 0
    for d, s in zip(digits, sizes):
        r = r * s + d
    return r


def group_size(sizes: Sizes, axes: Sequence[int]) -> int | None:
    vals = [sizes[a] for a in axes]
    if any(v is None for v in vals):
        return None
    return math.prod(vals)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Shapes and blocks
# --------------------------------------------------------------------------------------


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def dim_block(size: int, counts: Sequence[int], digits: Sequence[int]) -> tuple[int, int]:
    """(offset, size) of the block at ``digits`` of a dim of ``size`` elements sliced
    over nested groups of ``counts`` ranks (outermost first): the one rule of DESIGN §2,
    applied once per level. Over n ranks a dim of size s is cut in blocks of
    c = ceil(s/n) and rank i holds ``[i*c, min((i+1)*c, s))``: the last ranks may hold
    fewer elements, or none (DTensor's ``torch.chunk`` and XLA's block sizes). A nested
    level cuts the block the outer levels left, by the same rule."""
    offset = 0
    for n, i in zip(counts, digits):
        c = ceil_div(size, n)
        lo = min(i * c, size)
        hi = min(lo + c, size)
        offset += lo
        size = hi - lo
    return offset, size


def max_block(size: int, counts: Sequence[int]) -> int:
    """The largest block of ``dim_block`` (rank 0's): the block a padded buffer holds."""
    return dim_block(size, counts, [0] * len(counts))[1]


def dim_blocks(size: int, n: int) -> list[tuple[int, int]]:
    """(offset, size) of each of the n blocks of one level of ``dim_block``."""
    return [dim_block(size, [n], [i]) for i in range(n)]


def padded_extent(size: int, outer: Sequence[int], counts: Sequence[int]) -> int:
    """Elements along a dim of ``size`` elements, already cut over the groups ``outer``
    (outermost first), that one equal block per member of a group over axes of
    ``counts`` ranks takes: ``prod(counts)`` times the largest block (the buffer a
    collective cuts, laid out padded where the ranks do not divide the dim)."""
    return math.prod(counts) * max_block(size, [*outer, *counts])


def slicing_counts(placements: Sequence[Placement], sizes: Sequence[int], dim: int) -> list[int]:
    """The group sizes slicing ``dim``, outermost first."""
    return [sizes[a] for a in slicing_axes(placements, dim)]


def block_span(shape: Sequence[int], placements: Sequence[Placement], sizes: Sequence[int], coords: Sequence[int], dim: int) -> tuple[int, int]:
    """(offset, size) of the rank at ``coords``'s block of tensor dim ``dim``: every layer
    asks this function (``dim_block`` over the axes slicing the dim)."""
    axes = slicing_axes(placements, dim)
    return dim_block(shape[dim], [sizes[a] for a in axes], [coords[a] for a in axes])


def uneven_dims(shape: Sequence[int], placements: Sequence[Placement], sizes: Sizes) -> list[int]:
    """The sliced dims whose blocks differ across ranks (the ranks slicing them do not
    divide them); dims sliced on an axis of unknown size (``?``) are not listed."""
    out = []
    for d in sorted(sliced_dims(placements)):
        if d >= len(shape):
            continue
        n = group_size(sizes, slicing_axes(placements, d))
        if n is not None and shape[d] % n:
            out.append(d)
    return out


def divisibility_error(shape: Sequence[int], placements: Sequence[Placement], sizes: Sizes) -> str | None:
    """Why a sliced dim is not divisible by the ranks slicing it, or None (a preference of
    the passes that choose among dims, not a rule of the types)."""
    for d in uneven_dims(shape, placements, sizes):
        axes = slicing_axes(placements, d)
        n = group_size(sizes, axes)
        what = f"axis {axes[0]}" if len(axes) == 1 else f"axes {_axes_str(sorted(axes))}"
        return f"dim {d} of size {shape[d]} is not divisible by the {n} ranks of {what}"
    return None


def describe_uneven(shape: Sequence[int], placements: Sequence[Placement], sizes: Sequence[int], dim: int) -> str:
    """``dim 0 of size 10 over the 4 ranks of axis 0: blocks of 3, 3, 3, 1`` (for
    diagnostics and remarks)."""
    axes = slicing_axes(placements, dim)
    what = f"axis {axes[0]}" if len(axes) == 1 else f"axes {_axes_str(axes)}"
    counts = [sizes[a] for a in axes]
    spans = [dim_block(shape[dim], counts, at_digits(r, counts))[1] for r in range(math.prod(counts))]
    return f"dim {dim} of size {shape[dim]} over the {math.prod(counts)} ranks of {what}: blocks of {', '.join(map(str, spans))}"


def avg_count(shape: Sequence[int], placements: Sequence[Placement], sizes: Sequence[int], dims: Sequence[int]) -> Fraction:
    """What ``reduce_tensor avg`` over ``dims`` divides a rank's sum by: the product over
    the reduced dims of the dim's size divided by the ranks slicing it. Where the ranks
    divide the dim that is the block's extent (the block's mean); where they do not, the
    all-reduce avg of the partials is still the mean of the whole tensor."""
    count = Fraction(1)
    for d in dims:
        count *= Fraction(shape[d], math.prod(slicing_counts(placements, sizes, d)))
    return count


def local_shape(shape: Sequence[int], placements: Sequence[Placement], sizes: Sequence[int], coords: Sequence[int] | None = None) -> tuple[int, ...]:
    """Shape of the buffer of the rank at ``coords``: every sliced dim replaced by the
    size of that rank's block (``block_span``). Without ``coords``: the largest block
    (rank 0's), the shape of a buffer padded to hold any rank's block; it is every
    rank's shape where the ranks divide the sliced dims."""
    return _local_shape(tuple(shape), tuple(placements), tuple(sizes), None if coords is None else tuple(coords))


@functools.lru_cache(maxsize=1 << 16)
def _local_shape(shape: tuple[int, ...], placements: tuple[Placement, ...], sizes: tuple[int, ...], coords: tuple[int, ...] | None) -> tuple[int, ...]:
    """``local_shape``, once per arguments (the interpreter asks it per value and rank)."""
    out = list(shape)
    for d in sliced_dims(placements):
        counts = slicing_counts(placements, sizes, d)
        out[d] = max_block(shape[d], counts) if coords is None else block_span(shape, placements, sizes, coords, d)[1]
    return tuple(out)


def block_index(placements: Sequence[Placement], sizes: Sequence[int], coords: Sequence[int], dim: int) -> tuple[int, int]:
    """(block index, number of blocks) of the rank at ``coords`` along ``dim``."""
    idx, n = 0, 1
    for a in slicing_axes(placements, dim):
        idx = idx * sizes[a] + coords[a]
        n *= sizes[a]
    return idx, n


def block(shape: Sequence[int], placements: Sequence[Placement], sizes: Sequence[int], coords: Sequence[int]) -> tuple[slice, ...]:
    """Index of the block of the logical tensor held by the rank at ``coords``."""
    index = []
    for d in range(len(shape)):
        lo, n = block_span(shape, placements, sizes, coords, d)
        index.append(slice(lo, lo + n))
    return tuple(index)


def block_key(placements: Sequence[Placement], sizes: Sequence[int], coords: Sequence[int]) -> tuple[int, ...]:
    """Which block a rank holds, as one block index per sliced dim (ranks holding empty
    blocks still hold different blocks)."""
    return tuple(block_index(placements, sizes, coords, d)[0] for d in sorted(sliced_dims(placements)))


def holds(placements: Sequence[Placement], coords: Sequence[int]) -> bool:
    """Whether the rank at ``coords`` holds a buffer of a value with these placements."""
    for a, p in enumerate(placements):
        if isinstance(p, Unplaced):
            return False
        if isinstance(p, At) and coords[a] != p.rank.data:
            return False
    return True


# --------------------------------------------------------------------------------------
# Meshes and views
# --------------------------------------------------------------------------------------


def resolve_sizes(sizes: Sizes, ranks: int) -> tuple[int, ...]:
    """Fix the `?` sizes of a mesh for a run on ``ranks`` ranks."""
    known = math.prod(s for s in sizes if s is not None)
    unknown = [a for a, s in enumerate(sizes) if s is None]
    if not unknown:
        if known != ranks:
            raise LayoutError(f"the mesh has {known} ranks, the run has {ranks}")
        return tuple(sizes)  # type: ignore[arg-type]
    if len(unknown) > 1:
        raise LayoutError("a mesh may leave only one axis size as '?'")
    if ranks % known:
        raise LayoutError(f"{ranks} ranks do not fill a mesh of shape {format_sizes(sizes)}")
    return tuple(ranks // known if s is None else s for s in sizes)


def format_sizes(sizes: Sizes) -> str:
    return "[" + ", ".join("?" if s is None else str(s) for s in sizes) + "]"


@dataclass(frozen=True)
class MeshGrid:
    """A mesh with fixed sizes: ``grid[coords]`` is the global rank at those coordinates."""

    name: str
    sizes: tuple[int, ...]
    grid: np.ndarray

    @property
    def ranks(self) -> int:
        return int(self.grid.size)

    def coords(self, rank: int) -> tuple[int, ...]:
        """The coordinates of global rank ``rank`` (``rank_coords``)."""
        return rank_coords(self)[rank]

    def groups(self, axes: Sequence[int]) -> list[list[int]]:
        """Rank groups that differ only on ``axes``; inside a group ranks are ordered
        row-major over ``axes`` in the order listed."""
        others = [a for a in range(len(self.sizes)) if a not in axes]
        g = self.grid.transpose(others + list(axes))
        return [list(map(int, row)) for row in g.reshape(-1, group_size(self.sizes, axes) or 1)]


_COORDS: dict[int, tuple[MeshGrid, list[tuple[int, ...]]]] = {}


def rank_coords(grid: MeshGrid) -> list[tuple[int, ...]]:
    """``rank_coords(grid)[r]`` = coordinates of global rank r (cached per grid)."""
    hit = _COORDS.get(id(grid))
    if hit is not None and hit[0] is grid:
        return hit[1]
    import numpy as np

    order = np.argsort(grid.grid.ravel(), kind="stable")
    cols = np.unravel_index(order, grid.sizes)
    coords = [tuple(int(c[r]) for c in cols) for r in range(grid.ranks)]
    if len(_COORDS) > 4096:
        _COORDS.clear()
    _COORDS[id(grid)] = (grid, coords)
    return coords


def base_grid(name: str, sizes: Sequence[int]) -> MeshGrid:
    import numpy as np

    n = math.prod(sizes)
    return MeshGrid(name, tuple(sizes), np.arange(n).reshape(tuple(sizes)))


def view_grid(name: str, parent: MeshGrid, factors: Sequence[Sequence[int]]) -> MeshGrid:
    """A view whose axis i is the row-major product of parent axes ``factors[i]``."""
    perm = [a for f in factors for a in f]
    sizes = tuple(math.prod(parent.sizes[a] for a in f) for f in factors)
    return MeshGrid(name, sizes, parent.grid.transpose(perm).reshape(sizes))


def view_to_parent(placements: Sequence[Placement], factors: Sequence[Sequence[int]], parent_sizes: Sizes, parent_rank: int) -> list[Placement]:
    """Placements on the parent mesh of a value placed so on a view of it (`dist.remesh`):
    local, replicated and unplaced hold on every factor, sliced<d> becomes sliced<d> on
    each factor (the first factor is the outer block index), at<r> becomes at<> on each
    factor at the digits of r."""
    out: list[Placement] = [UNPLACED] * parent_rank
    for i, p in enumerate(placements):
        f = factors[i]
        if isinstance(p, At):
            fs = [parent_sizes[a] for a in f]
            if any(s is None for s in fs):
                raise LayoutError(f"at<{p.rank.data}> on a view axis needs static factor sizes")
            for a, digit in zip(f, at_digits(p.rank.data, fs)):  # type: ignore[arg-type]
                out[a] = At(digit)
        elif isinstance(p, Sliced):
            for a in f:
                out[a] = sliced(p.dim.data)
        else:
            for a in f:
                out[a] = p
    orders = {}
    for d in sliced_dims(placements):
        orders[d] = [a for i in slicing_axes(placements, d) for a in factors[i]]
    return with_orders(out, orders)

