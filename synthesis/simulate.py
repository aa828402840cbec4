"""P²'s simulator (§5): the predicted time of a reduction program on a topology.

A program runs its instructions one after the other; each is one collective run at the
same time by all its device groups on the whole system (the groups of (d) repeated over
the non-reduction factor axes; Master's only where the factor axes below the slice are
0), timed by ``tuning/collectives.py`` (links shared between concurrent groups, ring or
tree). The buffer a rank holds shrinks by the group size at each ReduceScatter and grows
back at each AllGather; ``nbytes`` follows ``collective_time``'s convention (AllGather:
its output). Device r of the placement is device r of the topology (both row-major,
outermost level first).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from distir.dialects.diagnostics import InputRejected
from distir.synthesis.hierarchy import INSIDE, Form, Instruction, SynthesisHierarchy
from distir.synthesis.lower import instruction_axes
from distir.synthesis.matrices import DevicePlacement
from distir.tuning.collectives import collective_time
from distir.tuning.topology import Topology

KIND = {
    "AllReduce": "all_reduce",
    "ReduceScatter": "reduce_scatter",
    "AllGather": "all_gather",
    "Reduce": "reduce",
    "Broadcast": "broadcast",
}


@lru_cache(maxsize=65536)
def system_groups(placement: DevicePlacement, hierarchy: SynthesisHierarchy, slice_: int, form: Form) -> tuple[tuple[int, ...], ...]:
    """The device groups of ``(slice_, form)`` on the whole system (global device indices)."""
    group, inner = instruction_axes(hierarchy, Instruction(slice_, form, "AllReduce"))
    return tuple(placement.groups(group, inner))


def group_size(placement: DevicePlacement, hierarchy: SynthesisHierarchy, ins: Instruction) -> int:
    n = 1
    for k in instruction_axes(hierarchy, ins)[0]:
        n *= placement.factors[k].size
    return n


def check_topology(placement: DevicePlacement, topology: Topology) -> None:
    if placement.ranks != topology.ranks:
        raise InputRejected(
            f"the hierarchy {list(placement.hierarchy)} has {placement.ranks} devices but topology {topology.name!r} "
            f"has {topology.ranks} ({' x '.join(str(c) for c in topology.cardinalities)})"
        )


def step_times(
    placement: DevicePlacement,
    hierarchy: SynthesisHierarchy,
    program: Sequence[Instruction],
    topology: Topology,
    nbytes: float,
    algorithm: str = "ring",
) -> list[float]:
    """Seconds of each instruction of ``program`` reducing ``nbytes`` per device."""
    check_topology(placement, topology)
    out = []
    fraction = 1.0
    for ins in program:
        n = group_size(placement, hierarchy, ins)
        size = fraction * nbytes
        if ins.collective == "ReduceScatter":
            fraction /= n
        elif ins.collective == "AllGather":
            fraction *= n
            size = fraction * nbytes
        groups = system_groups(placement, hierarchy, ins.slice, ins.form)
        out.append(collective_time(topology, KIND[ins.collective], groups, size, algorithm))
    return out


def program_time(
    placement: DevicePlacement,
    hierarchy: SynthesisHierarchy,
    program: Sequence[Instruction],
    topology: Topology,
    nbytes: float,
    algorithm: str = "ring",
) -> float:
    """Predicted seconds of ``program`` (the sum of its steps)."""
    return sum(step_times(placement, hierarchy, program, topology, nbytes, algorithm))


def allreduce_program() -> tuple[Instruction, ...]:
    """The single AllReduce over every reduction level: ``(root, InsideGroup, AllReduce)``."""
    return (Instruction(0, Form(INSIDE), "AllReduce"),)
