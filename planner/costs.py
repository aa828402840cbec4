"""What each strategy and each resharding costs on a mesh, from the cost model.

Every number comes from ``tuning/cost_model.py`` (the model that predicts lowered
programs), never from a copy of it:

* an op on a strategy runs on each rank's blocks: ``cost_model.dist_op_work`` counts
  its bytes and flops as its lowering does, ``cost_model.work_seconds`` times them on
  the topology's device (a ``dist.reshape``, a view, nothing); an op of a run of
  element-wise ops that ``lower-to-kernels`` makes one kernel is charged without the
  bytes that kernel does not move (``ilp._kernel_runs``: its operands loaded before in
  the run or kept in registers, its results used only inside the run);
* a resharding is the partitioner's transition table (``partition.reshard_steps``: the
  collectives that turn one layout into another), each collective timed by
  ``cost_model.collective_seconds`` on the device groups of the mesh axes it runs over
  (NCCL's fastest algorithm and protocol, concurrent groups sharing links), plus the
  device seconds of a call (``Runtime.device_s``, as the walker charges every call). A
  ``coll.all_to_all`` is timed as the model times its lowering
  (``cost_model.all_to_all_seconds``): one group of sends, every member sending each
  other member of its group its block at once, so that on a machine of several nodes
  most pairs cross the network together (the time of the walker's ``send_seconds``
  for those pairs, not a ring's). A ``dist.take_slice`` moves nothing (a view). A collective that cuts its buffer into
  blocks along a dim with larger dims before it (blocks that are not contiguous) also
  pays the copy ``lower-collectives`` makes of its buffer into or out of one block per
  rank (a ``Charge`` of kind ``copy``: a kernel reading and writing its bytes,
  ``work_seconds``);
* AllReduces the lowering runs as one call over one bucket (``Charge.share``:
  ``ilp.build`` decides which, as ``combine-collectives`` and ``lower-buckets`` do)
  share that call's latency and bandwidth: each member pays the bytes of the tangent of
  ``collective_seconds`` at the bucket's size (``tangent``) and its share of one call's
  latency per ``bucket_bytes``, the group (the integer program) the latency once. The
  model's curve is concave, a minimum of affine pieces: the tangent lies above it, so
  the bucket costs at most that. Where P²'s synthesis rewrites each AllReduce first
  (``ShapeCosts.reductions``), they are priced one by one. Other collectives the
  lowering combines run as one launch of one call each (``rt.fused``): their latency
  is not shared, and the planner, like the walker's bandwidth terms, prices them one
  by one.

The planner ranks its leading candidates again on the whole program, lowered
(``evaluate.py``); these per-op costs are what the integer program adds up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from distir.dialects import layout as dlayout
from distir.dialects.collectives.base import is_contiguous_block
from distir.dialects.dist import TensorType, element_bytes
from distir.frontends.partition import ReshardError, ReshardStep, reshard_steps
from distir.lowering.lower_buckets import packable
from distir.passes.combine_collectives import DEFAULT_BUCKET_BYTES as BUCKET_BYTES
from distir.planner.graph import Graph, Node
from distir.planner.meshes import Mesh
from distir.planner.strategies import Layout, Strategy
from distir.tuning.cost_model import DEFAULT_OPTIONS, ModelOptions, all_to_all_seconds, collective_seconds, dist_op_work, runtime_of, work_seconds
from distir.tuning.topology import Topology

INFEASIBLE = 1e9
"""The cost of a resharding no sequence of collectives does (e.g. into partial sums)."""

COLLECTIVE_KIND = {"all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather", "broadcast": "broadcast"}


@dataclass(frozen=True)
class Charge:
    """One collective of a resharding: its kind, the mesh axes and the bytes per rank
    in the convention of ``collectives.py`` (an AllGather's output, a ReduceScatter's
    input); ``bucket``: what else ``combine-collectives`` requires of collectives it
    combines (element type, reduction, dim) and, for an AllReduce, whether
    ``lower-buckets`` can run it in a bucket (``lower_buckets.packable``: no dim sliced
    by another axis); ``share`` and ``size``: how the integer program prices it
    (module doc): ``""`` alone (a call of its own), ``"bucket"`` an AllReduce in a
    bucket of about ``size`` bytes with others."""

    kind: str
    axes: tuple[int, ...]
    nbytes: float
    bucket: tuple = ()
    share: str = ""
    size: float = 0.0

    @property
    def group(self) -> tuple:
        """What collectives the lowering may combine with this one have alike."""
        return (self.kind, self.axes, self.bucket)

    @property
    def in_bucket(self) -> bool:
        """Whether ``lower-buckets`` runs it with the others of its group as one call."""
        return self.kind == "all_reduce" and bool(self.bucket) and bool(self.bucket[-1])


@dataclass
class ShapeCosts:
    """What does not depend on where the mesh's axes lie, for one mesh shape on one
    topology: the seconds of each op's work under a strategy, and the collectives of
    each resharding (cached per value shape and layout pair)."""

    graph: Graph
    sizes: tuple[int, ...]
    topology: Topology
    options: ModelOptions = DEFAULT_OPTIONS
    reductions: bool = False
    """Whether P²'s reduction programs replace the AllReduces over several levels of a
    machine of several nodes (``plan.schedule`` with a topology name): those run as a
    program of several collectives each (``synthesize-reductions`` runs before the
    lowering combines collectives), never in one bucket (``Costs.bucketed``)."""
    _reshard: dict = field(default_factory=dict)
    _work: dict = field(default_factory=dict)

    @property
    def naxes(self) -> int:
        return len(self.sizes)

    @property
    def launch_s(self) -> float:
        """Device seconds of a kernel or a collective call besides its work
        (``Runtime.device_s``): what ops the lowering runs as one launch share."""
        return runtime_of(self.topology, self.options).device_s

    @property
    def kernel_s(self) -> float:
        """The least a kernel takes in a step: its device seconds besides its work, or
        the host's time to issue it (``Runtime.launch_s``) when that is more: the walker
        starts each op once the host has issued it, so small kernels go at the host's
        pace (``op``)."""
        runtime = runtime_of(self.topology, self.options)
        return max(runtime.device_s, runtime.launch_s)

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

    def op(self, node: Node, s: Strategy, loaded: frozenset = frozenset(), kept: frozenset = frozenset(), run: str = "") -> float:
        """Seconds of an op node's work on each rank under strategy ``s``: one kernel's
        (``work_seconds``), at least the host's time to issue it (``kernel_s``). In a
        run of element-wise ops that ``lower-to-kernels`` makes one kernel (``run``: what
        bounds that kernel, ``"memory"`` or ``"compute"``: ``run_bound``), what the op
        adds to the kernel: the seconds of its bytes or of its flops, without its operand
        slots ``loaded`` (in registers, or loaded before by the run) and its results
        ``kept`` (not stored: used only inside the run); the kernel's launch is the
        run's (``launch_s``)."""
        if node.is_arg:
            return 0.0
        key = (self.graph.kind[node.id] if self.graph.kind else node.id, s.assign, loaded, kept, run)  # alike ops cost alike
        got = self._work.get(key)
        if got is not None:
            return got
        g = self.graph
        shapes = [None if x is None or lay is None else lay.local_shape(g.values[x].shape, self.sizes) for x, lay in zip(node.operands, s.operands)]
        moved, flops, dtype = self._work_of(node, shapes, [lay.local_shape(g.values[r].shape, self.sizes) for r, lay in zip(node.results, s.results)], loaded, kept)
        if moved == 0.0 and flops == 0.0:
            got = 0.0  # a view (``dist_op_work``): no kernel
        elif run:
            got = work_seconds(self.topology, moved if run == "memory" else 0.0, flops if run == "compute" else 0.0, dtype, self.options) - self.launch_s
        else:
            got = max(self.kernel_s, work_seconds(self.topology, moved, flops, dtype, self.options, matmul=node.op.name == "dist.matmul"))  # type: ignore[union-attr]
        self._work[key] = got
        return got

    def _work_of(self, node: Node, operands: list, results: list, loaded: frozenset, kept: frozenset) -> tuple[float, float, str]:
        """``dist_op_work`` of ``node`` on blocks of those shapes, less the bytes of its
        operand slots ``loaded`` and results ``kept`` (``op``)."""
        g = self.graph
        ins = [None if sh is None else (sh, g.values[x].element_type) for sh, x in zip(operands, node.operands)]  # type: ignore[arg-type]
        outs = [(sh, g.values[r].element_type) for sh, r in zip(results, node.results)]
        assert node.op is not None
        moved, flops, dtype = dist_op_work(node.op, ins, outs)
        free = sum(_count(ins[k][0]) * element_bytes(ins[k][1]) for k in loaded if ins[k] is not None)  # type: ignore[index]
        free += sum(_count(outs[j][0]) * element_bytes(outs[j][1]) for j in kept)
        return max(0.0, moved - free), flops, dtype

    def run_bound(self, run: Sequence[tuple[Node, frozenset, frozenset]]) -> str:
        """What bounds the kernel of a run of element-wise ops (each op with what the
        kernel does not move for it, ``op``): ``"memory"`` when its bytes take longer
        than its flops (``work_seconds``' max), else ``"compute"``; the same on any
        layout the run's ops share (their blocks scale alike), so found on the whole
        values."""
        g = self.graph
        key = ("run", *((g.kind[node.id] if g.kind else node.id, loaded, kept) for node, loaded, kept in run))  # alike runs: the layers'
        got = self._work.get(key)
        if got is not None:
            return got
        mem = comp = 0.0
        for node, loaded, kept in run:
            shapes = [None if x is None else g.values[x].shape for x in node.operands]
            moved, flops, dtype = self._work_of(node, shapes, [g.values[r].shape for r in node.results], loaded, kept)
            mem += work_seconds(self.topology, moved, 0.0, dtype, self.options)
            comp += work_seconds(self.topology, 0.0, flops, dtype, self.options)
        got = self._work[key] = "memory" if mem >= comp else "compute"
        return got

    def local_bytes(self, value: int, lay: Layout) -> int:
        v = self.graph.values[value]
        return _count(lay.local_shape(v.shape, self.sizes)) * element_bytes(v.element_type)


_STEPS: dict = {}


def _plan(rank: int, src: Layout, dst: Layout, naxes: int):
    """``partition.reshard_steps`` of ``src`` into ``dst`` for a tensor of ``rank`` dims
    (the steps depend on the layouts only), as what ``_steps`` prices of each
    collective step, whatever the tensor's shape and the mesh's sizes: its kind and
    axes, the placements before and after it, its reduction and dim, whether it can run
    in a bucket (``lower_buckets.packable``) and the dims it cuts into blocks, of its
    input and of its output (``cut_dims``); None when no sequence does it."""
    key = (rank, src, dst, naxes)
    got = _STEPS.get(key, False)
    if got is False:
        from xdsl.dialects.builtin import f32

        t = TensorType((1,) * rank, f32, "m", src.placements(naxes))
        try:
            steps = reshard_steps(t, dst.placements(naxes), dict(src.partial))
        except ReshardError:
            steps = None
        if steps is not None:
            got = []
            before = t.get_placements()
            for st in steps:
                after = st.result.get_placements()
                if st.kind in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"):
                    send, recv = st.cls.cut_dims(t, st.options, st.axes)
                    got.append((st.kind, tuple(st.axes), tuple(before), tuple(after), st.options.get("op"), st.options.get("dim"),
                                st.kind == "all_reduce" and rank > 0 and packable([t]), tuple(send), tuple(recv)))
                before, t = after, st.result
            got = tuple(got)
        else:
            got = None
        _STEPS[key] = got
    return got


def _steps(shape, element_type, src: Layout, dst: Layout, naxes: int, sizes) -> tuple[Charge, ...] | None:
    """The partitioner's resharding of ``src`` into ``dst`` as charges."""
    planned = _plan(len(shape), src, dst, naxes)
    if planned is None:
        return None
    out = []
    item = element_bytes(element_type)
    for kind, axes, before, after, op, dim, pack, send, recv in planned:
        local_in, local_out = dlayout.local_shape(shape, before, sizes), dlayout.local_shape(shape, after, sizes)
        n_in = float(_count(local_in)) * item
        n_out = float(_count(local_out)) * item
        # a 0-d AllReduce is never combined (``combine_collectives.candidate``)
        out.append(Charge(kind, axes, n_out if kind == "all_gather" else n_in, (element_type, op, dim, pack)))
        # the blocks a collective cuts its buffers into along a dim that is not the
        # outermost (non-contiguous blocks) are copied into place first or after
        # (``lower-collectives``' pack and unpack, one ``rt.copy_blocks`` each)
        copied = sum(n for dims, local, n in ((send, local_in, n_in), (recv, local_out, n_out)) for d in dims if not is_contiguous_block(local, d))
        if copied:
            out.append(Charge("copy", (), copied))
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

    def tangent(self, kind: str, axes: tuple[int, ...], size: float) -> tuple[float, float]:
        """(seconds, seconds per byte) of the affine piece of the collective's curve at
        ``size`` bytes (the protocol and algorithm the model picks there): a line above
        the curve everywhere, exact at ``size`` (``Charge.share`` ``"bucket"``)."""
        key = ("tangent", kind, axes, size)
        got = self._curves.get(key)
        if got is None:
            curve = self.curve(kind, axes)
            at, half = (float(v) for v in curve(np.array([size, size / 2])))
            per_byte = max(0.0, (at - half) / (size / 2)) if size > 0 else 0.0
            got = self._curves[key] = (max(0.0, at - per_byte * size), per_byte)
        return got

    def bucketed(self, kind: str, axes: tuple[int, ...]) -> bool:
        """Whether AllReduces over ``axes`` the lowering combines run as one call over one
        bucket: not where P²'s synthesis may first rewrite each into a program of its
        own (``ShapeCosts.reductions``: the axes span several levels of the hierarchy)."""
        if kind != "all_reduce":
            return False
        if not self.shape.reductions or self.mesh.placement.hierarchy[0] <= 1:
            return True
        key = ("bucketed", axes)
        got = self._curves.get(key)
        if got is None:
            from distir.synthesis.hierarchy import synthesis_hierarchy

            got = self._curves[key] = len(synthesis_hierarchy(self.mesh.placement, axes).levels) <= 2
        return got

    def charged(self, kind: str, axes: tuple[int, ...], share: str, size: float, nbytes: np.ndarray) -> np.ndarray:
        """Seconds the integer program charges each of collectives of ``kind`` over
        ``axes`` of ``nbytes`` shared as ``share`` (``Charge``; the module doc): alone,
        its curve; an AllReduce in a bucket of about ``size`` bytes, the tangent's bytes
        and its share of a call's latency per ``BUCKET_BYTES`` (the group pays the
        latency once: ``shared``)."""
        if kind == "copy":  # a copy kernel: read and write (``work_seconds``, as the walker's ``_copy_bytes``), issued by the host
            return np.array([max(self.shape.kernel_s, work_seconds(self.topology, 2.0 * b, 0.0, "f32", self.shape.options)) for b in np.asarray(nbytes, dtype=np.float64)])
        if share == "bucket" and self.bucketed(kind, axes):
            alpha, beta = self.tangent(kind, axes, size)
            return nbytes * (beta + alpha / BUCKET_BYTES)
        return self.curve(kind, axes)(nbytes)

    def shared(self, charge: Charge) -> float:
        """What a bucket of AllReduces like ``charge`` pays once: its call's latency
        (``charged``; nothing where they are not run in a bucket here)."""
        if charge.share == "bucket" and self.bucketed(charge.kind, charge.axes):
            return self.tangent(charge.kind, charge.axes, charge.size)[0]
        return 0.0

    def charge_seconds(self, c: Charge) -> float:
        return float(self.charged(c.kind, c.axes, c.share, c.size, np.array([c.nbytes]))[0])

    def seconds(self, charges: tuple[Charge, ...] | None) -> float:
        if charges is None:
            return INFEASIBLE
        return sum(self.charge_seconds(c) for c in charges)

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
    # each call's device seconds besides its transfer, as the walker charges them
    # (``Runtime.device_s``, a kernel's too: ``work_seconds``)
    extra = runtime_of(topology, options).device_s
    if kind == "all_to_all":
        # its lowering: one group of sends, each member's block to every other member at once
        got = all_to_all_seconds(topology, groups, options, extra)
    else:
        got = collective_seconds(topology, COLLECTIVE_KIND[kind], groups, options, extra)
    _CURVES[key] = got
    return got


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
