"""``synthesize-reductions{topology=p2-a100 nodes=0 algorithm=ring hierarchy= size-limit=5}``:
replace each ``coll.all_reduce`` over a view mesh with the fastest reduction program P²
synthesizes for its placement.

The view mesh is a parallelism placement (DESIGN §2): its parent is the hardware mesh,
split into factor axes that group into the levels of the hierarchy (``hierarchy``,
default the topology's levels), and each logical axis is the product of some factor
axes. For an all_reduce over logical axes ``A``, the pass forms P²'s synthesis
hierarchy from the factor axes of ``A``, enumerates the valid programs, predicts each
one's time on ``topology`` (a built-in name or a TOML file, ``nodes`` units at its
outermost level, 0 = as many as the mesh needs) for the operand's per-rank size with
NCCL's ``algorithm``, and, unless the single AllReduce is already the fastest, rewrites
the op into ``dist.remesh`` to the hardware mesh, the program's ``coll`` ops over factor
axes, and ``dist.remesh`` back. The rewrite keeps the meaning: every synthesized
program equals the all_reduce (P²'s semantics; distir's types agree, and the
interpreter confirms it in the tests). Example, 4 nodes x 16 GPUs of p2-a100, data
parallelism across nodes::

    dist.mesh @hw shape = [4, 16] axes = ["node", "gpu"]
    dist.mesh @dp_tp shape = [4, 16] axes = ["dp", "tp"] view @hw [[0], [1]]
    %g = coll.all_reduce sum %x axes [0] : !dist.tensor<1024xf32, @dp_tp, [local, local]> -> ... [replicated, local]

stays an all_reduce over the nodes (one GPU per node in each group: no level to split),
whereas with ``view @hw [[0, 1]]`` (one 64-way axis) it becomes
ReduceScatter(gpu) -> AllReduce(node) -> AllGather(gpu) for large buffers.

All-reduces that are not over a view mesh, whose view does not split into the
hierarchy's levels, whose meshes have dynamic sizes, that sit inside a fused collective
or an overlap, that average integers (truncation does not compose), or that reduce a scalar (a 0-d tensor:
no dim to reduce-scatter) are left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.passes import ModulePass

from distir.dialects import coll, dist
from distir.dialects.diagnostics import InputRejected
from distir.dialects.fast import walk
from distir.dialects.placements import Sliced
from distir.passes.support import apply_all_or_nothing, fail, inside_fused_or_overlap
from distir.synthesis.driver import level_names_for
from distir.synthesis.hierarchy import synthesis_hierarchy
from distir.synthesis.language import enumerate_programs
from distir.synthesis.lower import emit_program
from distir.synthesis.matrices import DevicePlacement
from distir.synthesis.simulate import program_time
from distir.tuning.collectives import ALGORITHMS
from distir.tuning.topology import Topology, get_topology


def _bytes_per_rank(t: dist.TensorType, sizes) -> float:
    n = math.prod(t.get_shape())
    for a, p in enumerate(t.get_placements()):
        if isinstance(p, Sliced):
            n /= sizes[a]
    width = getattr(t.element_type, "bitwidth", None) or getattr(t.element_type, "width", None)
    width = width.data if hasattr(width, "data") else width
    return n * (width or 32) / 8


@dataclass(frozen=True)
class SynthesizeReductionsPass(ModulePass):
    """Replace AllReduces over view meshes with the fastest P²-synthesized program.

    See the module docstring."""

    name = "synthesize-reductions"

    topology: str = "p2-a100"
    nodes: int = 0
    algorithm: str = "ring"
    hierarchy: tuple[int, ...] = ()
    size_limit: int = 5

    def _topology(self, ranks: int) -> tuple[Topology, tuple[int, ...]]:
        try:
            topo = get_topology(self.topology)
        except InputRejected as e:
            fail(self.name, str(e))
        nodes = self.nodes
        per_node = topo.ranks // topo.cardinalities[0]
        if nodes == 0:
            if ranks % per_node:
                fail(self.name, f"a mesh of {ranks} ranks is not a whole number of {self.topology!r} nodes ({per_node} ranks each); set nodes=")
            nodes = ranks // per_node
        if nodes < 1:
            fail(self.name, f"nodes must be positive, got {nodes}")
        topo = topo.with_nodes(nodes)
        hierarchy = tuple(self.hierarchy) or topo.cardinalities
        if math.prod(hierarchy) != topo.ranks:
            fail(self.name, f"hierarchy {list(hierarchy)} has {math.prod(hierarchy)} devices, topology {topo.name!r} with {topo.cardinalities[0]} nodes {topo.ranks}")
        if topo.ranks != ranks:
            fail(self.name, f"topology {topo.name!r} with {topo.cardinalities[0]} nodes has {topo.ranks} devices, the mesh has {ranks}")
        return topo, hierarchy

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.algorithm not in ALGORITHMS:
            fail(self.name, f"algorithm must be one of {', '.join(ALGORITHMS)}, got '{self.algorithm}'")
        if self.size_limit < 1:
            fail(self.name, f"size-limit must be positive, got {self.size_limit}")

        def run(module: ModuleOp) -> None:
            machines: dict[int, tuple[Topology, tuple[int, ...]]] = {}  # by rank count: read a topology file once
            best: dict[tuple, tuple] = {}  # (placement, reduction axes, bytes) -> (hierarchy, program): decided once
            for ar in [o for o in walk(module) if isinstance(o, coll.AllReduceOp)]:
                if inside_fused_or_overlap(ar):
                    continue
                self._rewrite(ar, machines, best)

        apply_all_or_nothing(op, run)

    def _best(self, placement: DevicePlacement, axes: tuple[int, ...], nbytes: float, topo: Topology):
        """(synthesis hierarchy, the programs faster than the single AllReduce (always
        program 0), fastest first): empty when there is nothing to split."""
        sh = synthesis_hierarchy(placement, axes)
        if len(sh.levels) == 1:
            return sh, []
        programs = enumerate_programs(sh, self.size_limit)
        times = [program_time(placement, sh, p, topo, nbytes, self.algorithm) for p in programs]
        order = sorted(range(len(programs)), key=lambda i: (times[i], i))
        return sh, [programs[i] for i in order[: order.index(0)]]

    def _rewrite(self, ar: coll.AllReduceOp, machines: dict[int, tuple[Topology, tuple[int, ...]]], best: dict[tuple, tuple]) -> None:
        t = ar.input.type
        assert isinstance(t, dist.TensorType)
        mesh = dist.lookup_mesh(ar, t)
        parent = mesh.parent_mesh()
        if parent is None or any(s is None for s in parent.sizes()) or any(s is None for s in mesh.sizes()):
            return
        kind = ar.option("op")
        if kind == "avg" and isinstance(t.element_type, IntegerType):
            return
        if t.rank == 0:  # a scalar has no dim 0 to reduce-scatter: the AllReduce it is
            return
        psizes = tuple(parent.sizes())
        ranks = math.prod(psizes)
        if ranks not in machines:
            machines[ranks] = self._topology(ranks)
        topo, hierarchy = machines[ranks]
        placement = DevicePlacement.from_view(psizes, mesh.factor_lists, hierarchy, level_names_for(hierarchy, topo), parent.axis_names)
        if placement is None:
            return
        key = (placement, tuple(ar.axes), _bytes_per_rank(t, mesh.sizes()))
        if key not in best:
            best[key] = self._best(placement, tuple(ar.axes), key[2], topo)
        sh, programs = best[key]
        base = ar.result.name_hint or "r"
        to_hw = dist.RemeshOp.make([ar.input], [t.with_(mesh=parent.mesh_name, placements=mesh.to_root(t.get_placements()))])
        to_hw.result.name_hint = f"{base}_hw"
        emitted: tuple | str | None = None
        for program in programs:
            # the fastest program whose collectives this tensor's shape admits (a
            # ReduceScatter needs its dim 0 divisible by its group: P²'s semantics do
            # not see shapes)
            emitted = emit_program(placement, sh, program, to_hw.result, kind, f"{base}_s")
            if not isinstance(emitted, str):
                break
        if emitted is None or isinstance(emitted, str):
            to_hw.erase()
            return
        ops, value = emitted
        back = dist.RemeshOp.make([value], [ar.result.type])
        block = ar.parent_block()
        assert block is not None
        block.insert_ops_before([to_hw, *ops, back], ar)
        ar.result.replace_all_uses_with(back.result)
        back.result.name_hint = ar.result.name_hint
        ar.detach()
        ar.erase()
