"""P²'s semantics of collectives (Fig. 8): device states as boolean matrices, one Hoare
rule per collective.

With k devices the data is cut in k chunks; a device's state is a k x k boolean matrix
stored as k row masks: bit j of row i says that device j's original chunk i has been
added into what the device holds of chunk i. Initially device d holds all its own data
(column d full); finally every device holds every chunk with the contribution of every
device of its reduction group (``final_state``). Rules, for a group ``d_0 .. d_{n-1}``
(in device order; d_0 is the root of Reduce and Broadcast):

=============== =================================================================
AllReduce       all members hold the same chunks; the contributions to each chunk
                are disjoint (no data reduced twice); all get the sum
ReduceScatter   as AllReduce, and the number of chunks divides by n; member j gets
                block j of the summed chunks
AllGather       the members hold disjoint chunk sets of equal sizes; all get the union
Reduce          as AllReduce; d_0 gets the sum, the others are left empty
Broadcast       every member holds at most what d_0 holds, one strictly less
                (information increase); all get d_0's state
=============== =================================================================

distir makes three points precise that the figure leaves to the implementation, each the
meaning of the collective in distir's types (``lower.py`` checks that the two agree):

* an AllGather concatenates the members' chunks in group order, so member j's chunks
  must be block j of a contiguous range (the ``sliced`` nesting of distir, the buffer
  order of NCCL);
* every group of an instruction takes part (holds data): a collective among devices
  holding nothing is no reduction step, so ``InsideGroup`` and ``Parallel`` act on all
  their groups;
* ``Master(e)`` is the collective among the devices holding the value, the first ones
  (``at<0>``) of the levels below the slice: every other device must hold nothing.

A step that breaks a rule yields an ``Invalid`` saying which rule and where.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distir.synthesis.hierarchy import MASTER, Instruction, SynthesisHierarchy

DeviceState = tuple[int, ...]  # one bit mask (over contributing devices) per chunk
State = tuple[DeviceState, ...]

COLLECTIVES = ("AllReduce", "ReduceScatter", "AllGather", "Reduce", "Broadcast")


@dataclass(frozen=True)
class Invalid:
    """Why a step is not semantically valid (formatted only when read: the enumeration
    meets many invalid steps and never prints them)."""

    template: str
    args: tuple = ()

    @property
    def reason(self) -> str:
        return self.template.format(*self.args)

    def __str__(self) -> str:
        return self.reason


def initial_state(k: int) -> State:
    """Device d holds its own data in every chunk."""
    return tuple(tuple(1 << d for _ in range(k)) for d in range(k))


def final_state(hierarchy: SynthesisHierarchy) -> State:
    """Every device holds every chunk summed over its reduction group: the devices that
    share its digits on the non-reduction levels (all devices on hierarchy (d))."""
    k = hierarchy.devices
    cards = hierarchy.cardinalities
    keep = [j for j, lv in enumerate(hierarchy.levels) if not lv.reduction and lv.cardinality > 1]
    if not keep:
        full = (1 << k) - 1
        return tuple(tuple(full for _ in range(k)) for _ in range(k))
    strides = [1] * len(cards)
    for j in range(len(cards) - 2, -1, -1):
        strides[j] = strides[j + 1] * cards[j + 1]

    def key(d: int) -> tuple[int, ...]:
        return tuple((d // strides[j]) % cards[j] for j in keep)

    masks: dict[tuple[int, ...], int] = {}
    for d in range(k):
        masks[key(d)] = masks.get(key(d), 0) | (1 << d)
    return tuple(tuple(masks[key(d)] for _ in range(k)) for d in range(k))


_ROWS: dict[DeviceState, list[int]] = {}


def _rows(s: DeviceState) -> list[int]:
    """The chunks a device holds (memoized: few distinct device states occur)."""
    r = _ROWS.get(s)
    if r is None:
        if len(_ROWS) > 1 << 16:
            _ROWS.clear()
        r = _ROWS[s] = [i for i, m in enumerate(s) if m]
    return r


class _Group(tuple):
    """A device group, printed as ``{0, 1}`` in diagnostics."""

    def __format__(self, spec: str) -> str:
        return "{" + ", ".join(str(d) for d in self) + "}"


def collective(state: State, kind: str, group: Sequence[int], out: list[DeviceState]) -> Invalid | None:
    """Apply Fig. 8's rule for ``kind`` to ``group``: write the new device states into
    ``out`` (a copy of ``state``) or return why the rule does not hold."""
    ss = [state[d] for d in group]
    k = len(ss[0])
    if kind in ("AllReduce", "ReduceScatter", "Reduce"):
        rows = _rows(ss[0])
        for d, s in zip(group[1:], ss[1:]):
            if _rows(s) != rows:
                return Invalid(
                    "{} over {}: devices {} and {} hold different chunks ({} and {}): data of different chunks would be reduced",
                    (kind, _Group(group), group[0], d, rows, _rows(s)),
                )
        total = [0] * k
        for d, s in zip(group, ss):
            for i in rows:
                if total[i] & s[i]:
                    return Invalid(
                        "{} over {}: chunk {} of device {} repeats data already in the group: the same data would be reduced twice",
                        (kind, _Group(group), i, d),
                    )
                total[i] |= s[i]
        if kind == "AllReduce":
            t = tuple(total)
            for d in group:
                out[d] = t
        elif kind == "Reduce":
            out[group[0]] = tuple(total)
            for d in group[1:]:
                out[d] = (0,) * k
        else:
            n = len(group)
            if len(rows) % n:
                return Invalid("ReduceScatter over {}: {} chunks cannot be scattered over {} devices", (_Group(group), len(rows), n))
            b = len(rows) // n
            for j, d in enumerate(group):
                keep = set(rows[j * b : (j + 1) * b])
                out[d] = tuple(total[i] if i in keep else 0 for i in range(k))
        return None
    if kind == "AllGather":
        rows = [_rows(s) for s in ss]
        seq = [i for r in rows for i in r]
        if len(set(seq)) != len(seq):
            return Invalid("AllGather over {}: two devices hold the same chunk", (_Group(group),))
        if any(len(r) != len(rows[0]) for r in rows):
            return Invalid("AllGather over {}: the devices hold different numbers of chunks ({})", (_Group(group), [len(r) for r in rows]))
        if seq and seq != list(range(seq[0], seq[0] + len(seq))):
            return Invalid("AllGather over {}: the chunks {} do not concatenate in group order", (_Group(group), rows))
        total = [0] * k
        for r, s in zip(rows, ss):
            for i in r:
                total[i] = s[i]
        t = tuple(total)
        for d in group:
            out[d] = t
        return None
    if kind == "Broadcast":
        root = ss[0]
        grows = False
        for d, s in zip(group[1:], ss[1:]):
            if any(a & ~b for a, b in zip(s, root)):
                return Invalid("Broadcast over {}: device {} holds data its root {} lacks", (_Group(group), d, group[0]))
            grows = grows or s != root
        if not grows:
            return Invalid("Broadcast over {}: no device gains data (no information increase)", (_Group(group),))
        for d in group:
            out[d] = root
        return None
    raise ValueError(f"unknown collective {kind!r}")


def step(hierarchy: SynthesisHierarchy, state: State, instr: Instruction) -> State | Invalid:
    """The state after ``instr``, or why it is invalid (Fig. 8 applied to every group of the
    instruction, plus the participation rules of the module docstring)."""
    gs = hierarchy.groups(instr.slice, instr.form)
    return apply_groups(state, instr.collective, gs, outside(hierarchy, instr), hierarchy.names[instr.slice], hierarchy.form_name(instr.form))


def outside(hierarchy: SynthesisHierarchy, instr: Instruction) -> tuple[int, ...]:
    """Devices in no group of ``instr`` (Master's non-masters; none for the other forms)."""
    if instr.form.kind != MASTER:
        return ()
    inside = {d for g in hierarchy.groups(instr.slice, instr.form) for d in g}
    return tuple(d for d in range(hierarchy.devices) if d not in inside)


def apply_groups(state: State, kind: str, groups: Sequence[Sequence[int]], outside: Sequence[int] = (), slice_name: str = "", form_name: str = "") -> State | Invalid:
    """``step`` on precomputed groups (``outside``: the devices Master leaves out)."""
    for g in groups:
        if not any(any(state[d]) for d in g):
            return Invalid("group {} of ({}, {}) holds no data", (_Group(g), slice_name, form_name))
    for d in outside:
        if any(state[d]):
            return Invalid("Master: device {} outside the master groups still holds data", (d,))
    out = list(state)
    for g in groups:
        bad = collective(state, kind, g, out)
        if bad is not None:
            return bad
    return tuple(out)


def run(hierarchy: SynthesisHierarchy, program: Sequence[Instruction]) -> tuple[State | None, str | None]:
    """Run ``program`` from the initial state: ``(final state, None)`` when every step is
    valid, ``(None, "step i: why")`` otherwise."""
    state = initial_state(hierarchy.devices)
    for i, instr in enumerate(program):
        nxt = step(hierarchy, state, instr)
        if isinstance(nxt, Invalid):
            return None, f"step {i + 1}: {nxt}"
        state = nxt
    return state, None


def accepts(hierarchy: SynthesisHierarchy, program: Sequence[Instruction]) -> tuple[bool, str | None]:
    """Whether ``program`` is valid and ends in the final state (and why not)."""
    state, why = run(hierarchy, program)
    if state is None:
        return False, why
    if state != final_state(hierarchy):
        return False, "the program ends before every device holds the full reduction"
    return True, None
