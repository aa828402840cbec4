"""P²'s reduction language and its syntax-guided enumeration (§3.3, §3.5).

    program     ::= [instruction]
    instruction ::= (slice, form, collective)
    form        ::= InsideGroup | Parallel(e) | Master(e)
    collective  ::= AllReduce | ReduceScatter | AllGather | Reduce | Broadcast

``enumerate_programs(hierarchy, size_limit)`` lists, in increasing size (then in the
order of ``hierarchy.slice_forms`` x ``COLLECTIVES``), every program of at most
``size_limit`` instructions that the semantics accepts and that reaches the final state.
The search is breadth-first over device states: programs that reach the same state share
the work of extending it, and a step is only kept when Fig. 8's rule holds for it.

The program set depends only on the shape of the hierarchy (which levels exist), not on
the levels' sizes; enumeration therefore runs on ``shape_of(hierarchy)`` (every level of
size 2, at most 2^levels devices) unless ``exact=True``, and is cached per shape. The
tests check this on hierarchies of other sizes.

Notation: ``(node, InsideGroup, Reduce) (node, Master(root), AllReduce) (node,
InsideGroup, Broadcast)``, short name ``Reduce-AllReduce-Broadcast`` (P²'s Figure 10).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from distir.dialects.diagnostics import InputRejected
from distir.synthesis.hierarchy import (
    INSIDE,
    MASTER,
    PARALLEL,
    Form,
    Instruction,
    SynthesisHierarchy,
    shape_of,
    slice_forms,
)
from distir.synthesis.semantics import COLLECTIVES, Invalid, apply_groups, final_state, initial_state, outside

Program = tuple[Instruction, ...]


def instructions(hierarchy: SynthesisHierarchy, prune: bool = True) -> tuple[Instruction, ...]:
    """Every instruction of the language on ``hierarchy`` (after the pruning of
    ``hierarchy.slice_forms``), in enumeration order."""
    return tuple(Instruction(s, f, c) for s, f in slice_forms(hierarchy, prune) for c in COLLECTIVES)


def enumerate_programs(hierarchy: SynthesisHierarchy, size_limit: int = 5, exact: bool = False, prune: bool = True) -> tuple[Program, ...]:
    """Valid programs reaching the final state, of at most ``size_limit`` instructions."""
    if isinstance(size_limit, bool) or not isinstance(size_limit, int) or size_limit < 1:
        raise InputRejected(f"the size limit must be a positive integer, got {size_limit!r}")
    return _enumerate(hierarchy if exact else shape_of(hierarchy), size_limit, prune)


@lru_cache(maxsize=256)
def _enumerate(hierarchy: SynthesisHierarchy, size_limit: int, prune: bool) -> tuple[Program, ...]:
    stats = SearchStats()
    return _search(hierarchy, size_limit, prune, stats)


@dataclass
class SearchStats:
    """Work done by one enumeration (for ``bench/`` and complexity tests)."""

    states: int = 0
    steps_tried: int = 0


MAX_SEARCH_WORK = 12_000_000
"""The most work one enumeration may do, in steps tried x devices of the hierarchy's shape
(each step updates one device-state matrix): about 5 s on the 2-core machines where it
was set. P²'s systems take at most 3% of it (a 5-level hierarchy with size limit 5
takes 85%); a 6-level hierarchy passes it from size limit 4 (10^8 at size limit
5, 26 s) and is refused with a diagnostic rather than left running."""


def _search(hierarchy: SynthesisHierarchy, size_limit: int, prune: bool, stats: SearchStats) -> tuple[Program, ...]:
    budget = MAX_SEARCH_WORK // max(1, hierarchy.devices)
    order = instructions(hierarchy, prune)
    index = {ins: i for i, ins in enumerate(order)}
    plans = [(ins, hierarchy.groups(ins.slice, ins.form), outside(hierarchy, ins)) for ins in order]
    final = final_state(hierarchy)
    frontier: dict = {initial_state(hierarchy.devices): [()]}
    found: list[Program] = []
    for _ in range(size_limit):
        nxt: dict = {}
        for state, prefixes in frontier.items():
            stats.states += 1
            if stats.steps_tried > budget:
                raise InputRejected(
                    f"the synthesis hierarchy {hierarchy.describe()} has too many programs of at most {size_limit} instructions "
                    f"to enumerate (more than {MAX_SEARCH_WORK:,} steps x devices, the limit): give a smaller --size-limit "
                    f"or a hierarchy of fewer levels"
                )
            for ins, groups, left_out in plans:
                stats.steps_tried += 1
                new = apply_groups(state, ins.collective, groups, left_out)
                if isinstance(new, Invalid):
                    continue
                progs = [p + (ins,) for p in prefixes]
                if new == final:
                    found.extend(progs)  # the final state admits no further valid step
                else:
                    nxt.setdefault(new, []).extend(progs)
        frontier = nxt
        if not frontier:
            break
    return tuple(sorted(found, key=lambda p: (len(p), [index[i] for i in p])))


def search_stats(hierarchy: SynthesisHierarchy, size_limit: int = 5, exact: bool = False) -> SearchStats:
    """The work of one uncached enumeration (states expanded, steps tried)."""
    stats = SearchStats()
    _search(hierarchy if exact else shape_of(hierarchy), size_limit, True, stats)
    return stats


# -- notation -------------------------------------------------------------------------------------
def instruction_text(hierarchy: SynthesisHierarchy, ins: Instruction) -> tuple[str, str, str]:
    """``(slice, form, collective)`` as P² writes them."""
    return hierarchy.names[ins.slice], hierarchy.form_name(ins.form), ins.collective


def notation(hierarchy: SynthesisHierarchy, program: Sequence[Instruction]) -> str:
    return " ".join("(" + ", ".join(instruction_text(hierarchy, i)) + ")" for i in program)


def short_name(program: Sequence[Instruction]) -> str:
    return "-".join(i.collective for i in program)


_INSTR = re.compile(r"\(\s*(\w+)\s*,\s*(InsideGroup|Parallel|Master)\s*(?:\(\s*(\w+)\s*\))?\s*,\s*(\w+)\s*\)")


def parse_program(hierarchy: SynthesisHierarchy, text: str) -> Program:
    """Read ``notation``'s format back (level names of ``hierarchy``)."""
    names = hierarchy.names
    out = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _INSTR.match(text, pos)
        if not m:
            raise InputRejected(f"cannot read a (slice, form, collective) instruction at {text[pos:]!r}")
        sl, kind, e, coll = m.groups()
        for name in (sl, e) if e else (sl,):
            if name not in names:
                raise InputRejected(f"unknown level {name!r} (levels: {', '.join(names)})")
        if coll not in COLLECTIVES:
            raise InputRejected(f"unknown collective {coll!r} (expected {', '.join(COLLECTIVES)})")
        if (kind == INSIDE) != (e is None):
            raise InputRejected(f"{kind} {'takes no level' if kind == INSIDE else 'needs a level: ' + kind + '(e)'}")
        form = Form(kind, names.index(e) if e else None)
        if kind in (PARALLEL, MASTER) and not form.level < names.index(sl):
            raise InputRejected(f"{kind}({e}) needs {e} above the slice {sl}")
        out.append(Instruction(names.index(sl), form, coll))
        pos = m.end()
        while pos < len(text) and text[pos] in " ,;\n\t":
            pos += 1
    return tuple(out)
