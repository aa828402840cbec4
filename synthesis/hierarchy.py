"""Synthesis hierarchies and the device groups of P²'s reduction instructions (§2.5, §3.3,
§3.4, Table 2).

A synthesis hierarchy is a list of levels, outermost first, headed by ``(root, 1)``; its
devices are numbered row-major over the levels. P² synthesizes over hierarchy (d): the
reduction axes' parallelism factors, those of one hardware level collapsed into one level
(Table 1: ``[1 2 3 | 7 8 9]`` becomes ``[7 16 27]``), levels of size 1 left out (they form
no groups), ``(root, 1)`` prepended. Every level of (d) is a reduction level. Each level
knows the factor axes of the placement it stands for, which is how a program over (d) is
lowered to the whole system (``lower.py``, ``simulate.py``).

An instruction ``(slice, form, collective)`` picks device groups (``groups``):

* ``(s, InsideGroup)``: the devices under one unit of level s (they differ below s);
* ``(s, Parallel(e))``, e above s: the devices that differ only on the levels between e
  (exclusive) and s (inclusive): the first devices of the s-groups of one e-unit form a
  group, the second devices another, and so on;
* ``(s, Master(e))``: the groups of ``Parallel(e)`` made of the first device of each
  s-group (digit 0 on every level below s): one group per e-unit.

For the system ``[(rack,1),(server,2),(CPU,2),(GPU,4)]`` with GPUs named A0..D3 (CPU A,
B in server 0) this gives Table 2, e.g. ``(CPU, Parallel(server))`` = {A0,B0}, {A1,B1},
..., {C3,D3} and ``(CPU, Master(rack))`` = {A0,B0,C0,D0}.

``instructions`` lists the (slice, form) pairs that can be valid, pruned as P²'s appendix
proves safe: a pair whose groups are single devices, or repeat the groups of an earlier
pair, is dropped; on hierarchies with non-reduction levels, ``(x_i, Parallel(x_j))``
needs x_{j+1..i} to be reduction levels (Corollary B.4), ``(x_i, InsideGroup)`` needs
x_{i+1..n} (Lemma B.5) and ``(x_i, Master(x_j))`` needs x_{j+1..n} (Lemma B.6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from distir.dialects.diagnostics import InputRejected
from distir.synthesis.matrices import DevicePlacement

INSIDE, PARALLEL, MASTER = "InsideGroup", "Parallel", "Master"


@dataclass(frozen=True)
class Form:
    """``InsideGroup``, ``Parallel(e)`` or ``Master(e)`` (``level`` is e's index)."""

    kind: str
    level: int | None = None


@dataclass(frozen=True)
class SynthesisLevel:
    """A level of a synthesis hierarchy: ``cardinality`` units per unit of the level above;
    ``factors`` are the placement's factor axes it stands for (outermost first);
    ``reduction`` says whether they belong to reduction axes."""

    name: str
    cardinality: int
    factors: tuple[int, ...] = ()
    reduction: bool = True


@dataclass(frozen=True)
class SynthesisHierarchy:
    levels: tuple[SynthesisLevel, ...]

    @property
    def cardinalities(self) -> tuple[int, ...]:
        return tuple(lv.cardinality for lv in self.levels)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.levels)

    @property
    def devices(self) -> int:
        return math.prod(self.cardinalities)

    def form_name(self, form: Form) -> str:
        return form.kind if form.level is None else f"{form.kind}({self.levels[form.level].name})"

    def groups(self, slice_: int, form: Form) -> tuple[tuple[int, ...], ...]:
        """The device groups of ``(slice_, form)`` (module docstring)."""
        return groups(self.cardinalities, slice_, form)

    def varying_levels(self, slice_: int, form: Form) -> tuple[int, ...]:
        """The levels on which the devices of one group differ."""
        n = len(self.levels)
        if form.kind == INSIDE:
            return tuple(range(slice_ + 1, n))
        return tuple(range(form.level + 1, slice_ + 1))

    def inner_levels(self, slice_: int, form: Form) -> tuple[int, ...]:
        """Levels fixed to digit 0 by ``Master`` (those below the slice)."""
        return tuple(range(slice_ + 1, len(self.levels))) if form.kind == MASTER else ()

    def describe(self) -> str:
        return "[" + ", ".join(f"({lv.name}, {lv.cardinality})" for lv in self.levels) + "]"


@lru_cache(maxsize=4096)
def groups(cards: tuple[int, ...], slice_: int, form: Form) -> tuple[tuple[int, ...], ...]:
    """Device groups of ``(slice_, form)`` on the hierarchy with cardinalities ``cards``
    (devices row-major over the levels), each in increasing order, groups in increasing
    order of their first device."""
    n = len(cards)
    if not 0 <= slice_ < n:
        raise InputRejected(f"slice level {slice_} out of range for a hierarchy of {n} levels")
    if form.kind == INSIDE:
        vary = set(range(slice_ + 1, n))
    else:
        if form.level is None or not 0 <= form.level < slice_:
            raise InputRejected(f"{form.kind}(e) needs a level e above the slice level {slice_}, got {form.level}")
        vary = set(range(form.level + 1, slice_ + 1))
    zero = set(range(slice_ + 1, n)) if form.kind == MASTER else set()
    strides = [math.prod(cards[j + 1 :]) for j in range(n)]
    keys: dict[tuple[int, ...], list[int]] = {}
    for digits in product(*(range(c) for c in cards)):
        if any(digits[j] for j in zero):
            continue
        key = tuple(d for j, d in enumerate(digits) if j not in vary)
        keys.setdefault(key, []).append(sum(d * s for d, s in zip(digits, strides)))
    return tuple(sorted(tuple(g) for g in keys.values()))


@dataclass(frozen=True)
class Instruction:
    """P²'s ``(slice, form, collective)``."""

    slice: int
    form: Form
    collective: str


def forms(n_levels: int, slice_: int) -> list[Form]:
    return [Form(INSIDE)] + [Form(kind, e) for e in range(slice_) for kind in (PARALLEL, MASTER)]


@lru_cache(maxsize=1024)
def slice_forms(hierarchy: SynthesisHierarchy, prune: bool = True) -> tuple[tuple[int, Form], ...]:
    """The (slice, form) pairs worth trying on ``hierarchy``, in a fixed order (slices
    outermost first; InsideGroup, then Parallel/Master by e)."""
    cards = hierarchy.cardinalities
    red = [lv.reduction or lv.cardinality == 1 for lv in hierarchy.levels]
    n = len(cards)
    out = []
    seen = set()
    for s in range(n):
        for form in forms(n, s):
            gs = groups(cards, s, form)
            if all(len(g) == 1 for g in gs):
                continue
            key = gs  # equal groups mean equal instructions (a Master covering every device is a Parallel)
            if key in seen:
                continue
            if prune:
                if form.kind == INSIDE and not all(red[s + 1 :]):  # Lemma B.5
                    continue
                if form.kind == PARALLEL and not all(red[form.level + 1 : s + 1]):  # Corollary B.4
                    continue
                if form.kind == MASTER and not all(red[form.level + 1 :]):  # Lemma B.6
                    continue
            seen.add(key)
            out.append((s, form))
    return tuple(out)


def synthesis_hierarchy(placement: DevicePlacement, reduce_axes: Sequence[int]) -> SynthesisHierarchy:
    """Hierarchy (d) of ``placement`` for ``reduce_axes`` (module docstring)."""
    reduce_axes = set(reduce_axes)
    levels = [SynthesisLevel("root", 1)]
    for j, name in enumerate(placement.level_names):
        factors = tuple(k for k, f in enumerate(placement.factors) if f.level == j and f.axis in reduce_axes)
        size = math.prod(placement.factors[k].size for k in factors)
        if size > 1:
            levels.append(SynthesisLevel(name, size, factors))
    return SynthesisHierarchy(tuple(levels))


def row_hierarchy(placement: DevicePlacement, reduce_axes: Sequence[int]) -> SynthesisHierarchy:
    """Hierarchy (c) of ``placement``: every factor axis, axis by axis (row-wise), levels
    of non-reduction axes included (marked ``reduction=False``), ``(root, 1)`` first."""
    levels = [SynthesisLevel("root", 1)]
    for axis in range(len(placement.axes)):
        for k in placement.axis_factors(axis):
            f = placement.factors[k]
            levels.append(SynthesisLevel(f.name, f.size, (k,), f.axis in set(reduce_axes)))
    return SynthesisHierarchy(tuple(levels))


def shape_of(hierarchy: SynthesisHierarchy) -> SynthesisHierarchy:
    """The same hierarchy with every level of (d) of size 2: the program set depends only
    on which levels exist, not on their sizes (checked in the tests), so enumeration runs
    on the smallest equivalent hierarchy."""
    return SynthesisHierarchy(
        tuple(
            SynthesisLevel(lv.name if j == 0 else f"x{j}", lv.cardinality if lv.cardinality == 1 else 2, (), lv.reduction)
            for j, lv in enumerate(hierarchy.levels)
        )
    )
