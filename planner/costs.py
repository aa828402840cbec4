"""What each strategy and each resharding costs on a mesh, from the cost model.

Every number comes from ``tuning/cost_model.py`` (the model that predicts lowered
programs), never from a copy of it:

* an op on a strategy runs on each rank's blocks: ``cost_model.dist_op_work`` counts
  its bytes and flops as its lowering does, ``cost_model.work_seconds`` times them on
  the topology's device;
* a resharding is the partitioner's transition table (``partition.reshard_steps``: the
  collectives that turn one layout into another), each collective timed by
  ``cost_model.collective_seconds`` on the device groups of the mesh axes it runs over
  (NCCL's fastest algorithm and protocol, concurrent groups sharing links). A
  ``coll.all_to_all`` is charged as the ring AllGather of its input, which moves what
  its point-to-point exchange moves per link ((n-1)/n of each rank's input). A
  ``dist.take_slice`` moves nothing (a view).

The planner ranks its leading candidates again on the whole program, lowered
(``evaluate.py``); these per-op costs are what the integer program adds up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from distir.dialects import layout as dlayout
from distir.dialects.dist import TensorType, element_bytes
from distir.frontends.partition import ReshardError, ReshardStep, reshard_steps
from distir.planner.graph import Graph, Node
from distir.planner.meshes import Mesh
from distir.planner.strategies import Layout, Strategy
from distir.tuning.cost_model import DEFAULT_OPTIONS, ModelOptions, collective_seconds, dist_op_work, work_seconds
from distir.tuning.topology import Topology

INFEASIBLE = 1e9
"""The cost of a resharding no sequence of collectives does (e.g. into partial sums)."""

COLLECTIVE_KIND = {"all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather", "broadcast": "broadcast"}


@dataclass(frozen=True)
class Charge:
    """One collective of a resharding: its kind, the mesh axes and the bytes per rank
    in the convention of ``collectives.py`` (an AllGather's output, a ReduceScatter's
    input)."""

    kind: str
    axes: tuple[int, ...]
    nbytes: float


@dataclass
class ShapeCosts:
    """What does not depend on where the mesh's axes lie, for one mesh shape on one
    topology: the seconds of each op's work under a strategy, and the collectives of
    each resharding (cached per value shape and layout pair)."""

    graph: Graph
    sizes: tuple[int, ...]
    topology: Topology
    options: ModelOptions = DEFAULT_OPTIONS
    _reshard: dict = field(default_factory=dict)
    _work: dict = field(default_factory=dict)

    @property
    def naxes(self) -> int:
        return len(self.sizes)

    def charges(self, shape: tuple[int, ...], element_type, src: Layout, dst: Layout) -> tuple[Charge, ...] | None:
        """The collectives that turn a value laid out as ``src`` into ``dst`` (None: no
        sequence does)."""
        if src == dst:
            return ()
        key = (shape, element_type, src, dst)
        got = self._reshard.get(key, False)
        if got is not False:
            return got
        got = _steps(shape, element_type, src, dst, self.naxes, self.sizes)
        self._reshard[key] = got
        return got

    def bytes_moved(self, shape: tuple[int, ...], element_type, src: Layout, dst: Layout) -> float:
        got = self.charges(shape, element_type, src, dst)
        return INFEASIBLE if got is None else sum(c.nbytes for c in got)

    def op(self, node: Node, s: Strategy) -> float:
        """Seconds of an op node's work on each rank under strategy ``s``."""
        if node.is_arg:
            return 0.0
        key = (self.graph.kind[node.id] if self.graph.kind else node.id, s.assign)  # alike ops cost alike
        got = self._work.get(key)
        if got is not None:
            return got
        g = self.graph
        operands = []
        for x, lay in zip(node.operands, s.operands):
            if x is None or lay is None:
                operands.append(None)
            else:
                v = g.values[x]
                operands.append((lay.local_shape(v.shape, self.sizes), v.element_type))
        results = [(lay.local_shape(g.values[r].shape, self.sizes), g.values[r].element_type) for r, lay in zip(node.results, s.results)]
        assert node.op is not None
        moved, flops, dtype = dist_op_work(node.op, operands, results)
        got = work_seconds(self.topology, moved, flops, dtype, self.options, matmul=node.op.name == "dist.matmul")
        self._work[key] = got
        return got

    def local_bytes(self, value: int, lay: Layout) -> int:
        v = self.graph.values[value]
        return _count(lay.local_shape(v.shape, self.sizes)) * element_bytes(v.element_type)


_STEPS: dict = {}


def _plan(rank: int, src: Layout, dst: Layout, naxes: int):
    """``partition.reshard_steps`` of ``src`` into ``dst`` for a tensor of ``rank`` dims
    (the steps depend on the layouts only), as (input type, steps), or None."""
    key = (rank, src, dst, naxes)
    got = _STEPS.get(key, False)
    if got is False:
        from xdsl.dialects.builtin import f32

        t = TensorType((1,) * rank, f32, "m", src.placements(naxes))
        try:
            got = (t, reshard_steps(t, dst.placements(naxes), dict(src.partial)))
        except ReshardError:
            got = None
        _STEPS[key] = got
    return got


def _steps(shape, element_type, src: Layout, dst: Layout, naxes: int, sizes) -> tuple[Charge, ...] | None:
    """The partitioner's resharding of ``src`` into ``dst`` as charges."""
    planned = _plan(len(shape), src, dst, naxes)
    if planned is None:
        return None
    before, out = planned[0].get_placements(), []
    item = element_bytes(element_type)
    for st in planned[1]:
        after = st.result.get_placements()
        kind = st.kind
        if kind in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"):
            n_in = float(_count(dlayout.local_shape(shape, before, sizes))) * item
            n_out = float(_count(dlayout.local_shape(shape, after, sizes))) * item
            out.append(Charge(kind, tuple(st.axes), n_out if kind == "all_gather" else n_in))
        before = after
    return tuple(out)


@dataclass
class Costs:
    """The costs on one mesh: ``ShapeCosts`` of its shape and the time of collectives on
    its placement (cached per collective kind and axes)."""

    shape: ShapeCosts
    mesh: Mesh
    _curves: dict = field(default_factory=dict)

    @property
    def topology(self) -> Topology:
        return self.shape.topology

    def curve(self, kind: str, axes: tuple[int, ...]):
        """Seconds of a collective of ``kind`` over ``axes`` per bytes (numpy arrays)."""
        key = (kind, axes)
        curve = self._curves.get(key)
        if curve is None:
            curve = _curve(self.shape.topology, kind, self.mesh.groups(axes), self.shape.options)
            self._curves[key] = curve
        return curve

    def collective(self, kind: str, axes: tuple[int, ...], nbytes: float) -> float:
        return float(self.curve(kind, axes)(nbytes))

    def seconds(self, charges: tuple[Charge, ...] | None) -> float:
        if charges is None:
            return INFEASIBLE
        return sum(self.collective(c.kind, c.axes, c.nbytes) for c in charges)

    def reshard(self, shape: tuple[int, ...], element_type, src: Layout, dst: Layout) -> float:
        return self.seconds(self.shape.charges(shape, element_type, src, dst))


_CURVES: dict = {}


def _curve(topology: Topology, kind: str, groups: tuple[tuple[int, ...], ...], options: ModelOptions):
    """Seconds of a collective as a function of its bytes (cached per groups: meshes
    share axes)."""
    key = (topology, kind, groups, options)
    got = _CURVES.get(key)
    if got is not None:
        return got
    if kind == "all_to_all":
        # every rank sends each peer of its group its block: (n-1)/n of its input out
        # and in, which is what a ring AllGather of the input moves per link
        got = collective_seconds(topology, "all_gather", groups, options)
    else:
        got = collective_seconds(topology, COLLECTIVE_KIND[kind], groups, options)
    _CURVES[key] = got
    return got


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
