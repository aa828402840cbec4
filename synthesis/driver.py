"""The whole of P²: for a hierarchy, parallelism axes and reduction axes, every
parallelism matrix, its valid reduction programs and their predicted times
(``distir-synth``; DESIGN §5).

``synthesize(...)`` plans nothing it does not report: it returns a ``SynthesisResult``
with, per matrix, the synthesis hierarchy, the programs (in enumeration order: the single
AllReduce first), each program's predicted time, the AllReduce's, and the best program;
``to_json()`` gives DESIGN §5's format. Synthesis (matrices, hierarchies, enumeration)
and simulation are timed separately (``synthesis_s``, ``simulation_s``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from distir.dialects.diagnostics import InputRejected
from distir.synthesis.hierarchy import SynthesisHierarchy, synthesis_hierarchy
from distir.synthesis.language import Program, enumerate_programs, instruction_text, notation, short_name
from distir.synthesis.matrices import DevicePlacement, Matrix, default_level_names, format_matrix, parallelism_matrices
from distir.synthesis.simulate import allreduce_program, check_topology, program_time
from distir.tuning.collectives import ALGORITHMS
from distir.tuning.topology import Topology

DEFAULT_SIZE_LIMIT = 5
ELEMENT_BYTES = 4  # float32, as P² reduces

MAX_DEVICES = 1 << 24
"""The most devices a hierarchy may have (16,777,216; synthesis itself only sees the
hierarchy's shape, but the matrices factor its sizes and the simulation visits every
device)."""

MAX_SIMULATION_WORK = 500_000
"""The most work one simulation may do, in collectives timed x devices (the simulator
follows every device's transfers): 3 to 10 s on the 2-core machines where it was set.
P²'s Table 4 takes at most 1% of it; ``--hierarchy 2,65536`` (131,072 devices) passes
it and is refused with a diagnostic rather than left running."""


@dataclass
class MatrixResult:
    """One parallelism matrix: its placement, synthesis hierarchy, programs and times."""

    matrix: Matrix
    placement: DevicePlacement
    hierarchy: SynthesisHierarchy
    programs: tuple[Program, ...]
    times: list[float] | None = None
    allreduce_s: float | None = None

    @property
    def best(self) -> int | None:
        """Index of the fastest program (the earliest among equals), None without times."""
        if not self.times:
            return None
        return min(range(len(self.times)), key=lambda i: (self.times[i], i))

    @property
    def beating_allreduce(self) -> int:
        """How many programs are predicted faster than the single AllReduce."""
        if not self.times or self.allreduce_s is None:
            return 0
        return sum(1 for t in self.times if t < self.allreduce_s * (1 - 1e-9))

    def steps(self, i: int) -> list[list[str]]:
        return [list(instruction_text(self.hierarchy, ins)) for ins in self.programs[i]]

    def notation(self, i: int) -> str:
        return notation(self.hierarchy, self.programs[i])

    def short_name(self, i: int) -> str:
        return short_name(self.programs[i])


@dataclass
class SynthesisResult:
    hierarchy: tuple[int, ...]
    axes: tuple[int, ...]
    reduce_axes: tuple[int, ...]
    size_limit: int
    topology: Topology | None
    algorithm: str
    elements: int | None
    matrices: list[MatrixResult] = field(default_factory=list)
    synthesis_s: float = 0.0
    simulation_s: float = 0.0

    @property
    def programs_total(self) -> int:
        """Semantically valid programs over all matrices."""
        return sum(len(m.programs) for m in self.matrices)

    def to_json(self) -> dict:
        """DESIGN §5's ``--json`` format (plus the topology, algorithm, elements and timings
        it was computed with); ``best`` indexes ``programs``."""
        return {
            "hierarchy": list(self.hierarchy),
            "axes": list(self.axes),
            "reduce_axes": list(self.reduce_axes),
            "size_limit": self.size_limit,
            "matrices": [
                {
                    "matrix": [list(r) for r in m.matrix],
                    "programs": [
                        {"steps": m.steps(i), "predicted_s": None if m.times is None else m.times[i]} for i in range(len(m.programs))
                    ],
                    "allreduce_predicted_s": m.allreduce_s,
                    "best": m.best,
                }
                for m in self.matrices
            ],
            "programs_total": self.programs_total,
            "topology": None if self.topology is None else self.topology.name,
            "nodes": None if self.topology is None else self.topology.cardinalities[0],
            "algorithm": self.algorithm,
            "elements": self.elements,
            "synthesis_s": self.synthesis_s,
            "simulation_s": self.simulation_s,
        }


def level_names_for(hierarchy: Sequence[int], topology: Topology | None) -> tuple[str, ...]:
    """Names of the hierarchy's levels: the topology's where the hierarchy's levels are
    runs of the topology's levels (merged names joined by ``_``: ``domain_gpu``), else
    ``default_level_names``."""
    if topology is None:
        return default_level_names(len(hierarchy))
    cards = topology.cardinalities
    names, j = [], 0
    for h in hierarchy:
        run, prod = [], 1
        while j < len(cards) and prod < h:
            prod *= cards[j]
            run.append(topology.levels[j].name)
            j += 1
        if prod != h or not run:
            return default_level_names(len(hierarchy))
        names.append("_".join(run))
    return tuple(names) if j == len(cards) else default_level_names(len(hierarchy))


def check_request(hierarchy: Sequence[int], axes: Sequence[int], reduce_axes: Sequence[int], size_limit: int) -> None:
    for what, values in (("hierarchy", hierarchy), ("axes", axes)):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise InputRejected(f"--{what} must be a comma-separated list of positive integers, got {','.join(map(str, values)) or 'nothing'}")
    for i, p in enumerate(axes):
        if p < 2:
            raise InputRejected(f"--axes: axis {i} has size {p}; a parallelism axis needs at least 2 devices")
    if not reduce_axes:
        raise InputRejected("--reduce-axes must name at least one axis")
    for a in reduce_axes:
        if not 0 <= a < len(axes):
            raise InputRejected(f"--reduce-axes: axis {a} is out of range for {len(axes)} parallelism axes (0..{len(axes) - 1})")
    if len(set(reduce_axes)) != len(reduce_axes):
        raise InputRejected(f"--reduce-axes names an axis twice: {','.join(map(str, reduce_axes))}")
    if isinstance(size_limit, bool) or not isinstance(size_limit, int) or size_limit < 1:
        raise InputRejected(f"--size-limit must be a positive integer, got {size_limit}")
    if math.prod(hierarchy) > MAX_DEVICES:
        raise InputRejected(
            f"the hierarchy {','.join(map(str, hierarchy))} has {math.prod(hierarchy):,} devices, more than the {MAX_DEVICES:,} "
            f"distir-synth takes"
        )
    if math.prod(hierarchy) != math.prod(axes):
        raise InputRejected(
            f"the axes {','.join(map(str, axes))} hold {math.prod(axes)} devices but the hierarchy "
            f"{','.join(map(str, hierarchy))} has {math.prod(hierarchy)}"
        )


def synthesize(
    hierarchy: Sequence[int],
    axes: Sequence[int],
    reduce_axes: Sequence[int],
    topology: Topology | None = None,
    algorithm: str = "ring",
    elements: int | None = None,
    size_limit: int = DEFAULT_SIZE_LIMIT,
    progress: Callable[[int, int], None] | None = None,
) -> SynthesisResult:
    """Run P² (module docstring). ``elements`` float32 per device are reduced (default:
    P²'s 2^29 x the number of nodes, the topology's outermost level); ``progress(done,
    total)`` is called as matrices are simulated."""
    hierarchy, axes, reduce_axes = tuple(hierarchy), tuple(axes), tuple(sorted(reduce_axes))
    check_request(hierarchy, axes, reduce_axes, size_limit)
    if algorithm not in ALGORITHMS:
        raise InputRejected(f"--algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if elements is not None and (isinstance(elements, bool) or not isinstance(elements, int) or elements < 1):
        raise InputRejected(f"--elements must be a positive integer, got {elements}")
    names = level_names_for(hierarchy, topology)
    t0 = time.perf_counter()
    result = SynthesisResult(hierarchy, axes, reduce_axes, size_limit, topology, algorithm, elements)
    for matrix in parallelism_matrices(hierarchy, axes):
        placement = DevicePlacement.standard(matrix, hierarchy, names)
        sh = synthesis_hierarchy(placement, reduce_axes)
        result.matrices.append(MatrixResult(matrix, placement, sh, enumerate_programs(sh, size_limit)))
    result.synthesis_s = time.perf_counter() - t0
    if topology is not None:
        check_topology(result.matrices[0].placement, topology)
        check_simulation_work(result, topology)
        if elements is None:
            result.elements = elements = 2**29 * topology.cardinalities[0]
        nbytes = ELEMENT_BYTES * elements
        t1 = time.perf_counter()
        for done, m in enumerate(result.matrices, start=1):
            m.times = [program_time(m.placement, m.hierarchy, p, topology, nbytes, algorithm) for p in m.programs]
            m.allreduce_s = program_time(m.placement, m.hierarchy, allreduce_program(), topology, nbytes, algorithm)
            if progress:
                progress(done, len(result.matrices))
        result.simulation_s = time.perf_counter() - t1
    return result


def check_simulation_work(result: SynthesisResult, topology: Topology) -> None:
    """Refuse a simulation above ``MAX_SIMULATION_WORK`` (before it starts)."""
    collectives = sum(len({ins for p in m.programs for ins in p}) + 1 for m in result.matrices)
    if collectives * topology.ranks > MAX_SIMULATION_WORK:
        raise InputRejected(
            f"timing the {result.programs_total} programs of {len(result.matrices)} matrices would simulate {collectives} collectives "
            f"on {topology.ranks:,} devices each, more than the limit of {MAX_SIMULATION_WORK:,} collectives x devices: "
            f"give a hierarchy of fewer devices, fewer parallelism axes or a smaller --size-limit"
        )


def describe_matrix(m: MatrixResult) -> str:
    return format_matrix(m.matrix)
