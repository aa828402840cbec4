"""The topology cost model: the predicted time of one step of a *lowered* program.

``predict(prepared, sizes)`` walks the ``rt``/``nccl`` IR of a program lowered for N
ranks (``lowering/pipeline.py``) and returns its time on a ``Topology`` at every size.
One model, with no case for any schedule; a schedule's time comes out of the ops its
lowering emits:

* **kernels** (``rt.launch``, ``rt.copy``, ``rt.copy_blocks``, ``rt.matmul``,
  ``rt.reduce_tensor``, ``rt.embedding_bag``, ``rt.scatter_add``, ``rt.sort``) take ``max(bytes / memory bandwidth, flops / peak)``: bytes are
  the sizes of the buffers a kernel reads and writes, flops its arithmetic ops per
  element (``FLOPS`` weighs the expensive ones) times its iteration space, or 2·M·N·K
  for a matmul, at the device's peak for the element type;
* **NCCL calls** cost alpha + bytes · beta for the group they run on. beta is what
  ``tuning/collectives.py`` gives for the algorithm: the most loaded link over every
  group running the collective at the same time, so a hierarchical group pays each
  level it spans, and concurrent groups share a node's NIC. alpha follows NCCL's
  tuning model: a ring pays the latency of every hop a chunk crosses (2(n-1) hops for an
  AllReduce: intra-node hops at the intra-node latency, the few hops between nodes at
  the network latency), a tree 2·log2 of each level's fan-in (``collectives.py``).
  Each call picks, per size, the fastest protocol (``NCCL_PROTOCOLS``: LL's low
  latency at half the bandwidth for small buffers, LL128, Simple) and, for an
  AllReduce, the fastest algorithm, as NCCL's tuner does: small AllReduces run as
  trees with LL, large ones at full bandwidth. Point-to-point sends cost the link
  between the two devices, shared by every concurrent pair (``send_seconds``: a
  ``coll.all_to_all``'s group of sends, priced by the planner too);
* **streams and events** give the critical path: every op starts when its stream is
  free, after the events it waits for, and after the host issued it (``launch_s`` per
  call); collectives start when every participating rank is ready. An overlapped chain
  (``coll.overlap``, lowered to chunks on two streams) therefore costs a pipeline over
  its chunks;
* **fused computation-collective operators** (``rt.matmul_all_reduce``,
  ``rt.embedding_all_to_all``, ...) are the pipeline they run: the producer's work in
  one stage per tile, each remote tile's transfer (point to point) on the communication
  stream after its stage (``_Walker.tiled``);
* **fused collectives** (``rt.fused``) are one launch, and the buffer that passes from
  their first collective to their computation is never stored nor reloaded (the
  kernel's loads of it are free); their lowered IR has no other intermediate buffer.
  Planned ``zero_copy``, the collectives do not store that buffer either (nor read it
  first, on a machine that write-allocates) and the all-gathers do not read their
  inputs (the kernel stores the gathered elements itself).

Ranks with different roles (``scf.if`` on ``rt.holds``: pipeline stages, roots) are
simulated as classes of identical ranks; a collective or a transfer starts when every
class taking part is ready.

**Sizes without lowering again.** ``prepare`` lowers the program once, at a reference
size ``D_ref = L·q`` of the substituted dim, where ``q`` is a prime larger than every
other size in the program and ``L`` a multiple of every rank and chunk count. Every
buffer dimension that derives from the substituted dim is then the only one divisible
by ``q``, so each byte and flop count is a sum of monomials ``c · (s / D_ref)^k`` in the
size ``s`` (``k`` dims derived from it), and a size is valid for a schedule when it
divides into every derived dimension. ``predict`` evaluates all sizes at once (numpy).

**Calibrated machines** (``CalibratedTopology``, ``local`` after ``distir-tune
--calibrate``): their collectives cost the alpha and beta fitted per collective kind on
the backend (an in-place AllGather only the peers' blocks: the shared-memory backends
copy a rank's own block only out of place), a kernel only some of their ranks run gets
the bandwidth of a rank streaming alone, their stores to memory a kernel did not
read cost a read too (write-allocate; copies of ``runtime/bulk.py``'s streaming size
do not, and on ``local`` the AllGathers, Broadcasts and sends, which are such copies,
cost their beta per byte of a streamed copy: ``copy_traffic``), and their ``Runtime`` says how the host issues ops (the ``local`` backend
runs stream 0 on the rank's thread, a Python dispatch per op, a launch per kernel that
costs more per array argument, and its streams share the rank's core).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

from distir.dialects import layout, nccl, rt
from distir.dialects.diagnostics import InputRejected
from distir.dialects.dist import element_bytes, resolve_grids
from distir.dialects.fast import clone, walk
from distir.dialects.rt import TargetAttr
from distir.lowering.target import STREAM_FROM, get_target, planned_target
from distir.tuning.collectives import all_to_all_cost, collective_cost
from distir.tuning.topology import Topology

# ======================================================================================
# Constants of the model
# ======================================================================================


@dataclass(frozen=True)
class Protocol:
    """An NCCL protocol: factors on the links' per-message latency and bandwidth."""

    name: str
    latency: float
    bandwidth: float


NCCL_PROTOCOLS: tuple[Protocol, ...] = (
    # Ratios of NCCL's tuning tables (hop latency per protocol over Simple's; LL moves
    # 4 bytes of data per 8-byte store, LL128 120 of 128 bytes).
    Protocol("LL", 0.15, 0.5),
    Protocol("LL128", 0.5, 0.92),
    Protocol("Simple", 1.0, 1.0),
)

TREE_BUS_FACTOR = 0.92
"""NCCL's tuning model gives a tree 92% of the ring's bus bandwidth ..."""

TREE_CORRECTION: dict[str, tuple[float, ...]] = {
    # ... and corrects it per message size (powers of two from 64 B to 256 MB), because
    # trees do not reach the model's bandwidth at medium sizes (NCCL's
    # treeCorrectionFactor, per protocol).
    "LL": (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0),
    "Simple": (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9),
}


def tree_correction(protocol: str, nbytes: np.ndarray) -> np.ndarray:
    """The tree's bandwidth factor at each message size (``TREE_CORRECTION``)."""
    table = np.asarray(TREE_CORRECTION[protocol])
    idx = np.clip(np.floor(np.log2(np.maximum(nbytes, 1.0))).astype(int) - 6, 0, len(table) - 1)
    return TREE_BUS_FACTOR * table[idx]


FLOPS: dict[str, float] = {
    # flop-equivalents of the expensive scalar ops; every other arith/math op counts 1
    "arith.divf": 4.0,
    "math.sqrt": 4.0,
    "math.rsqrt": 4.0,
    "math.exp": 8.0,
    "math.log": 8.0,
    "math.tanh": 8.0,
    "math.powf": 16.0,
    "math.erf": 8.0,
}
FREE = ("arith.constant", "arith.index_cast", "memref.load", "memref.store")
_WORK = (rt.LaunchOp, rt.CopyOp, rt.CopyBlocksOp, rt.PadBlocksOp, rt.UnpadBlocksOp, rt.MatmulOp, rt.ReduceTensorOp, rt.EmbeddingBagOp, rt.ScatterAddOp, rt.SortOp)
_END = (func.ReturnOp, scf.YieldOp)
_OWN_STEP = (scf.IfOp, rt.FusedOp, rt.TiledCollectiveOp, rt.EventRecordOp, rt.StreamWaitOp, rt.StreamSyncOp, nccl.NcclOp, *_WORK)
"""Ops that are steps of their own (or hold them): no host dispatch is added for them."""
_INT_ARITH = {arith.AddiOp: np.add, arith.SubiOp: np.subtract, arith.MuliOp: np.multiply, arith.RemUIOp: np.remainder,
              arith.RemSIOp: np.remainder, arith.DivUIOp: np.floor_divide}
_INT_ARITH_OPS = tuple(_INT_ARITH)
_P2P = (nccl.SendOp, nccl.RecvOp)
_WALKED = (_END, _OWN_STEP, scf.IfOp, rt.StreamOp, rt.CommOp, rt.SpanOp, rt.PrefixOp, rt.GroupRankOp, arith.ConstantOp, _INT_ARITH_OPS,
           rt.EventRecordOp, rt.StreamWaitOp, rt.StreamSyncOp, rt.FusedOp, rt.TiledCollectiveOp, nccl.GroupStartOp, _P2P,
           nccl.GroupEndOp, nccl.NcclOp, _WORK)


@cache
def _kinds(cls: type) -> frozenset:
    """The classes (and tuples of classes) of ``_WALKED`` that ``cls`` is a subclass of:
    ``_Walker.op``'s ``isinstance`` questions, asked once per op class (op classes are
    abstract base classes, whose ``isinstance`` takes half a microsecond; the walk asked
    some twenty per op of a lowered model)."""
    return frozenset(k for k in _WALKED if issubclass(cls, k))


@dataclass(frozen=True)
class Runtime:
    """How a machine issues the ops of a lowered program.

    ``launch_s``: host time to issue a kernel, copy or communication call;
    ``dispatch_s``: host time for any other op (views, communicators, events);
    ``synchronous``: stream 0 runs on the host thread (the host waits for each op);
    ``concurrent_streams``: ops on different streams of a rank run at the same time
    (a GPU's copy engines and SMs) rather than one after the other (a CPU core);
    ``device_s``: device time of every kernel, copy or communication call besides its
    work (a CUDA launch's latency on the stream; a collective's synchronisation);
    ``step_s``: fixed host time of one step of a program (starting the rank threads);
    ``argument_s``: host time a kernel launch takes per array argument beyond two (the
    ``local`` backend's dispatch looks at every argument; ``extra_arguments``)."""

    launch_s: float
    dispatch_s: float = 0.0
    synchronous: bool = False
    concurrent_streams: bool = True
    device_s: float = 0.0
    step_s: float = 0.0
    argument_s: float = 0.0


GPU_RUNTIME = Runtime(launch_s=4e-6, device_s=3e-6)
"""A GPU with NCCL: about 4 us of host time to enqueue a kernel or a NCCL call, about
3 us between dependent kernels on a stream (CUDA's launch latency), streams and copy
engines concurrent."""


@dataclass(frozen=True)
class ModelOptions:
    """What the model may choose from (the defaults are NCCL's): ``protocols``, the
    AllReduce ``algorithms``, whether trees get NCCL's size correction, and the host
    ``runtime`` (None: the topology's: ``GPU_RUNTIME``, or a calibration's). Tests and
    studies narrow them to check the model by hand."""

    protocols: tuple[Protocol, ...] = NCCL_PROTOCOLS
    algorithms: tuple[str, ...] = ("ring", "tree")
    tree_correction: bool = True
    runtime: Runtime | None = None


DEFAULT_OPTIONS = ModelOptions()


@dataclass(frozen=True)
class CalibratedTopology(Topology):
    """A topology fitted by measurement on a backend: ``collectives`` maps a collective
    kind (``collectives.KINDS``) to (alpha seconds, beta seconds per byte, in the byte
    convention of ``collectives.py``); ``runtime`` is the host's behaviour;
    ``backend`` the backend it was measured on; ``peak_matmul`` the matmul rate per
    dtype in flop/s (BLAS on a CPU differs from its element-wise rate)."""

    collectives: tuple[tuple[str, float, float], ...] = ()
    runtime: Runtime = GPU_RUNTIME
    backend: str = "local"
    matmul_tflops: tuple[tuple[str, float], ...] = ()
    write_allocate: bool = False
    """A store to memory the kernel did not read first costs a read as well (CPU caches)."""
    fused_in_memory: bool = False
    """The backend runs ``rt.fused`` as one kernel in shared memory (the ``local``
    backend's zero-copy path), so its collectives' memory traffic for the buffers passed
    inside the fused op disappears too."""

    memory_bandwidth_alone_GBps: float | None = None
    """One rank's memory bandwidth while the other ranks do not stream (the device's
    ``memory_bandwidth_GBps`` is each rank's share when all do): the ranks of a
    shared-memory machine share its memory, so a kernel only some ranks run (a root's
    update) goes faster. Such a kernel is taken to run while the others wait."""

    def peak_matmul(self, dtype: str) -> float:
        """The matmul rate for ``dtype`` in flop/s (the device's peak when not measured)."""
        for d, v in self.matmul_tflops:
            if d == dtype:
                return v * 1e12
        return self.device.peak_tflops[dtype] * 1e12

    def alpha_beta(self, kind: str) -> tuple[float, float]:
        for k, a, b in self.collectives:
            if k == kind:
                return a, b
        raise InputRejected(f"topology {self.name!r} has no calibration of {kind} (run distir-tune --calibrate)")


# ======================================================================================
# Parametric quantities
# ======================================================================================


class Poly:
    """A sum of monomials ``c · r^k`` in the size ratio r = s / D_ref."""

    __slots__ = ("terms",)

    def __init__(self, terms: Mapping[int, float] | None = None):
        self.terms: dict[int, float] = {k: v for k, v in (terms or {}).items() if v}

    @staticmethod
    def mono(value: float, degree: int) -> Poly:
        return Poly({degree: float(value)})

    def __add__(self, other: Poly) -> Poly:
        out = dict(self.terms)
        for k, v in other.terms.items():
            out[k] = out.get(k, 0.0) + v
        return Poly(out)

    def scale(self, f: float) -> Poly:
        return Poly({k: v * f for k, v in self.terms.items()})

    def __call__(self, r: np.ndarray) -> np.ndarray:
        out = np.zeros_like(r)
        for k, v in self.terms.items():
            out = out + v * r**k
        return out

    def __repr__(self) -> str:
        return " + ".join(f"{v:g}*r^{k}" for k, v in sorted(self.terms.items())) or "0"


ZERO = Poly()


@dataclass(frozen=True)
class Scaling:
    """How the reference lowering relates to other sizes: buffer dims divisible by
    ``q`` derive from the substituted dim (``d_ref = D_ref / k``)."""

    d_ref: int
    q: int

    def degree(self, n: int) -> int:
        k = 0
        while n and n % self.q == 0:
            n //= self.q
            k += 1
        return k

    def count(self, shape: Sequence[int], factor: float = 1.0) -> Poly:
        """``prod(shape) · factor`` as a monomial."""
        deg = sum(1 for d in shape if d % self.q == 0)
        return Poly.mono(math.prod(shape) * factor, deg)


def reference_size(dims: Sequence[int], ranks: int, dim: int, max_chunks: int = 16) -> tuple[int, int]:
    """(D_ref, q) for a program whose dimensions are ``dims``: q is the smallest prime
    larger than every dimension, rank count and chunk count, and D_ref = L·q with L a
    multiple of ``dim``, the rank count and the chunk counts."""
    bound = max([*dims, ranks, max_chunks, 2]) + 1
    q = bound
    while not _is_prime(q):
        q += 1
    L = math.lcm(dim, ranks * math.lcm(*range(1, max_chunks + 1)))
    return L * q, q


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in range(2, int(math.isqrt(n)) + 1):
        if n % p == 0:
            return False
    return True


# ======================================================================================
# The prepared program: steps in program order
# ======================================================================================


@dataclass
class Step:
    """One op of the lowered program as the simulation sees it.

    ``kind``: ``work`` (a kernel or copy: ``cost`` seconds per size), ``collective``
    (every taking part starts together), ``send`` / ``recv`` (a transfer's two halves),
    ``record`` / ``wait`` (events), ``sync`` (the host waits for a stream), ``host``
    (host time only). ``classes``: the rank classes that execute it. ``label``: what
    it is for ``breakdown`` (``compute`` for a kernel or copy, the NCCL call's kind for
    a collective, ``send`` for point-to-point transfers)."""

    kind: str
    classes: tuple[int, ...]
    stream: int = 0
    cost: Callable[[np.ndarray], np.ndarray] | None = None
    host: float = 0.0
    event: int = -1
    label: str = ""


@dataclass
class Prepared:
    """A lowered program ready for ``predict``: its steps, the rank classes and the
    divisors every valid size must be a multiple of."""

    steps: list[Step]
    classes: int
    scaling: Scaling
    divisors: frozenset[int]
    runtime: Runtime = GPU_RUNTIME
    notes: list[str] = field(default_factory=list)


# ======================================================================================
# Building the steps
# ======================================================================================


class _Walker:
    """Turns a lowered function into steps (see the module doc)."""

    def __init__(self, module: ModuleOp, f: func.FuncOp, topology: Topology, ranks: int, scaling: Scaling, options: ModelOptions):
        self.module = module
        self.f = f
        self.topo = topology
        self.ranks = ranks
        self.scaling = scaling
        self.options = options
        self.runtime = runtime_of(topology, options)
        self.grids = resolve_grids(module, ranks)
        self._taking: dict[tuple, tuple[tuple[int, ...], ...]] = {}
        self._kernel_facts: dict[str, tuple] = {}
        self.coords = {name: layout.rank_coords(g) for name, g in self.grids.items()}
        target = planned_target(module)
        assert target is not None, "prepare plans the module"
        self.target: TargetAttr = target
        self.kernels = {k.kernel_name: k for k in module.ops if isinstance(k, rt.KernelOp)}
        self.env: dict[SSAValue, Any] = {}
        self.bounds: dict[SSAValue, tuple[int, ...]] = {}  # rt.prefix of a rank's count: its buffer's shape
        self.steps: list[Step] = []
        self.divisors: set[int] = set()
        self.events = 0
        self.pending = 0.0
        self.notes: list[str] = []
        self._classes()

    # -- rank classes ------------------------------------------------------------------
    def _classes(self) -> None:
        holds = [op for op in walk(self.f) if isinstance(op, rt.HoldsOp)]
        table = np.ones((self.ranks, max(1, len(holds))), dtype=bool)
        for j, op in enumerate(holds):
            coords = self.coords[op.mesh_name]
            table[:, j] = [layout.holds(op.placement_list(), coords[r]) for r in range(self.ranks)]
        rows, self.class_of = np.unique(table, axis=0, return_inverse=True)
        self.class_of = self.class_of.reshape(-1)
        self.n_classes = len(rows)
        for j, op in enumerate(holds):
            self.env[op.result] = rows[:, j]  # per class

    # -- values ------------------------------------------------------------------------
    def index(self, v: SSAValue) -> np.ndarray:
        """An index value on every rank."""
        got = self.env.get(v)
        if got is None:
            raise InputRejected(f"cost model: index {v.name_hint or ''} is not known")
        return got

    def _mem(self, v: SSAValue) -> MemRefType:
        t = v.type
        assert isinstance(t, MemRefType)
        return t

    def _shape(self, v: SSAValue) -> tuple[int, ...]:
        shape = self.bounds.get(v) or tuple(self._mem(v).get_shape())
        for d in shape:
            if d % self.scaling.q == 0:
                self.divisors.add(self.scaling.d_ref // d)
        return shape

    def _bytes(self, v: SSAValue) -> Poly:
        t = self._mem(v)
        return self.scaling.count(self._shape(v), _itemsize(t.element_type))

    # -- the walk ----------------------------------------------------------------------
    def run(self) -> None:
        everyone = tuple(range(self.n_classes))
        self.block(self.f.body.block, everyone)
        if self.pending:
            self.steps.append(Step("host", everyone, host=self.pending))

    def emit(self, step: Step) -> None:
        """Add a step; the host time of the ops before it that are no step is its too."""
        step.host += self.pending
        self.pending = 0.0
        self.steps.append(step)  # the one place steps are added

    def block(self, block: Block, classes: tuple[int, ...], fused: dict | None = None) -> None:
        for op in block.ops:
            if classes:
                self.op(op, classes, fused)

    def op(self, op: Operation, classes: tuple[int, ...], fused: dict | None) -> None:
        kinds = _kinds(type(op))
        if _END in kinds:
            return
        if _OWN_STEP not in kinds:
            self.pending += self.runtime.dispatch_s
        if scf.IfOp in kinds:
            cond = self.env.get(op.cond)
            if cond is None:
                self.notes.append("a branch on a value other than rt.holds is taken as executed by every rank")
                cond = np.ones(self.n_classes, dtype=bool)
            self.block(op.true_region.block, tuple(c for c in classes if cond[c]), fused)
            if op.false_region.blocks:
                self.block(op.false_region.block, tuple(c for c in classes if not cond[c]), fused)
            return
        if rt.StreamOp in kinds:
            self.env[op.result] = op.number
        elif rt.CommOp in kinds:
            self.env[op.result] = (op.mesh_name, op.axis_list)
        elif rt.SpanOp in kinds:
            grid = self.grids[op.mesh_name]
            counts = [grid.sizes[a] for a in op.axis_list]
            spans = [layout.dim_block(op.size_value, counts, [grid.coords(r)[a] for a in op.axis_list]) for r in range(self.ranks)]
            self.env[op.offset] = np.array([o for o, _ in spans], dtype=np.int64)
            self.env[op.length] = np.array([n for _, n in spans], dtype=np.int64)
        elif rt.PrefixOp in kinds and len(op.args) == 2:  # type: ignore[attr-defined]
            # a rank's part of a padded buffer: at most the buffer (the largest block)
            self.bounds[op.result] = self.bounds.get(op.args[0]) or tuple(self._mem(op.args[0]).get_shape())
        elif rt.GroupRankOp in kinds:
            grid = self.grids[op.mesh_name]
            vals = np.zeros(self.ranks, dtype=np.int64)
            for group in grid.groups(op.axis_list):
                n = len(group)
                for i, r in enumerate(group):
                    vals[r] = (i + op.shift_value) % n
            self.env[op.result] = vals
        elif arith.ConstantOp in kinds and isinstance(op.result.type, IndexType):  # type: ignore[attr-defined]
            self.env[op.result] = np.full(self.ranks, op.value.value.data, dtype=np.int64)  # type: ignore[attr-defined]
        elif _INT_ARITH_OPS in kinds and all(o in self.env for o in op.operands):
            a, b = (self.env[o] for o in op.operands)
            fn = _INT_ARITH[type(op)]
            self.env[op.result] = fn(a, b)
        elif rt.EventRecordOp in kinds:
            self.env[op.result] = self.events
            self.emit(Step("record", classes, self.env[op.args[0]], event=self.events, host=self.runtime.dispatch_s))
            self.events += 1
        elif rt.StreamWaitOp in kinds:
            self.emit(Step("wait", classes, self.env[op.args[0]], event=self.env[op.args[1]], host=self.runtime.dispatch_s))
        elif rt.StreamSyncOp in kinds:
            self.emit(Step("sync", classes, self.env[op.args[0]], host=self.runtime.dispatch_s))
        elif rt.FusedOp in kinds:
            self.fused(op, classes)
        elif rt.TiledCollectiveOp in kinds:
            self.tiled(op, classes)
        elif nccl.GroupStartOp in kinds:
            self.group = []
            self.pending += self.runtime.dispatch_s
        elif _P2P in kinds:
            self.group.append((op, classes))  # type: ignore[attr-defined]
            self.pending += self.runtime.dispatch_s
        elif nccl.GroupEndOp in kinds:
            self.p2p(self.group, classes)  # type: ignore[attr-defined]
        elif nccl.NcclOp in kinds:
            self.collective(op, classes, fused)
        elif _WORK in kinds:
            self.work(op, classes, fused)

    # -- computation -------------------------------------------------------------------
    def work(self, op: Operation, classes: tuple[int, ...], fused: dict | None) -> None:
        stream = self.env[op.operands[-1]]
        dev = self.topo.device
        bw = dev.memory_bandwidth_GBps * 1e9
        alone = self.topo.memory_bandwidth_alone_GBps if isinstance(self.topo, CalibratedTopology) else None
        if alone:
            active = int(np.isin(self.class_of, classes).sum())
            if 0 < active < self.ranks:
                bw = min(alone, dev.memory_bandwidth_GBps * self.ranks / active) * 1e9
        launch = self.runtime.launch_s + self.runtime.argument_s * extra_arguments(op)
        if isinstance(op, rt.LaunchOp):
            moved, flops, dtype = self.kernel_work(op, fused)
        elif isinstance(op, (rt.PadBlocksOp, rt.UnpadBlocksOp)):
            # the blocks of a short outer block moved between padded places
            src = op.args[0 if isinstance(op, rt.PadBlocksOp) else 1]
            moved, flops, dtype = self._copy_bytes(self._bytes(src), None), ZERO, _dtype(self._mem(src).element_type)
        elif isinstance(op, (rt.CopyOp, rt.CopyBlocksOp)):
            src = op.args[0]
            stream_from = op.option("stream_from") if isinstance(op, rt.CopyOp) else None
            moved, flops, dtype = self._copy_bytes(self._bytes(src), stream_from), ZERO, _dtype(self._mem(src).element_type)
            self._shape(op.args[1])
        elif isinstance(op, rt.MatmulOp):
            a, b, c = op.args[:3]
            moved, flops = self.matmul_work(a, b, self._shape(c))
            moved = moved + self._bytes(c)
            dtype = _dtype(self._mem(c).element_type)
        elif isinstance(op, rt.ReduceTensorOp):
            a, out = op.args[:2]
            moved = self._bytes(a) + self._bytes(out)
            flops = self.scaling.count(self._shape(a))
            dtype = _dtype(self._mem(a).element_type)
        elif isinstance(op, rt.SortOp):
            ins, outs = op.io()
            n = self._shape(ins[0])[op.option("dim")]
            moved = sum((self._bytes(x) for x in ins[1:]), self._bytes(ins[0])).scale(2.0)
            flops = self.scaling.count(self._shape(ins[0]), max(1.0, math.log2(max(n, 2))))
            dtype = _dtype(self._mem(outs[0]).element_type)
        elif isinstance(op, rt.ScatterAddOp):
            idx, upd, _, out = op.args[:4]
            bag = self._shape(idx)[-1]
            moved = self._bytes(idx) + self._bytes(upd).scale(bag) + self._bytes(out)
            flops = self.scaling.count(self._shape(upd), bag)
            dtype = _dtype(self._mem(out).element_type)
        else:  # rt.EmbeddingBagOp
            table, idx, _, out = op.args[:4]
            moved, flops = self.embedding_work(idx, self._shape(out), _itemsize(self._mem(out).element_type))
            dtype = _dtype(self._mem(table).element_type)
        peak = dev.peak_tflops[dtype] * 1e12
        if isinstance(op, rt.MatmulOp) and isinstance(self.topo, CalibratedTopology):
            peak = self.topo.peak_matmul(dtype)
        first = fused is None or not fused.get("launched")
        if fused is not None:
            fused["launched"] = True
        cost = _max_cost(moved.scale(1 / bw), flops.scale(1 / peak), self.runtime.device_s if first else 0.0)
        self.emit(Step("work", classes, stream, cost, host=launch if first else self.runtime.dispatch_s, label="compute"))

    def _copy_bytes(self, size: Poly, stream_from: int | None) -> Poly | Callable[[np.ndarray], np.ndarray]:
        """Memory traffic of a copy of ``size`` bytes: read and write, and on a calibrated
        CPU the write-allocate of the destination, except for the copies the program
        streams (``stream_from``, ``plan-execution``)."""
        if not (isinstance(self.topo, CalibratedTopology) and self.topo.write_allocate):
            return size.scale(2.0)
        return _Traffic(lambda r: size(r) * 2.0 * copy_traffic(size(r), stream_from))

    def matmul_work(self, a: SSAValue, b: SSAValue, result: Sequence[int]) -> tuple[Poly, Poly]:
        """Bytes read and flops of ``a @ b`` with a result of shape ``result``."""
        k = self._shape(a)[-1]
        self._shape(b)
        flops = self.scaling.count(result, 2.0)
        if k % self.scaling.q == 0:
            flops = Poly({d + 1: v * k for d, v in flops.terms.items()})
        else:
            flops = flops.scale(k)
        return self._bytes(a) + self._bytes(b), flops

    def embedding_work(self, idx: SSAValue, result: Sequence[int], item: int) -> tuple[Poly, Poly]:
        """Bytes moved and flops of an embedding bag pooling into ``result``: the
        indices, one row read per index and the pooled row written."""
        bag = self._shape(idx)[-1]
        return self._bytes(idx) + self.scaling.count(result, item * (bag + 1)), self.scaling.count(result, bag)

    def tiled(self, op: rt.TiledCollectiveOp, classes: tuple[int, ...]) -> None:
        """A fused computation-collective operator (``rt.matmul_all_reduce``, ...) as the
        pipeline it runs: its producer's work cut into one stage per tile of every
        destination block (``ranks x tiles`` stages, in the op's order: remote tiles
        first for ``remote_first`` and ``natural``, own tiles first for ``ring``), each
        remote stage followed on the communication stream by the transfer of its tile
        to its destination (point to point, the pairs at that distance in the group;
        for an AllReduce twice: the partial to its owner, the reduced tile back). The op
        is one launch, and it ends on the compute stream when its last transfer has."""
        s0, s1 = (self.env[s] for s in op.streams)
        groups = self._groups(self.env[op.comm], classes)
        n = max(1, op.ranks())
        tiles = op.option("tiles")
        result = op.producer_shape()
        self._shape(op.out)
        item = _itemsize(self._mem(op.out).element_type)
        if isinstance(op, rt.EmbeddingAllToAllOp):
            moved, flops = self.embedding_work(op.inputs[1], result, item)
            dtype = _dtype(self._mem(op.inputs[0]).element_type)
        else:
            a, b = op.inputs
            moved, flops = self.matmul_work(a, b, result)
            moved = moved + self.scaling.count(result, item)
            dtype = _dtype(self._mem(op.out).element_type)
        stages = n * tiles
        dev = self.topo.device
        peak = dev.peak_tflops[dtype] * 1e12
        if not isinstance(op, rt.EmbeddingAllToAllOp) and isinstance(self.topo, CalibratedTopology):
            peak = self.topo.peak_matmul(dtype)
        work = _max_cost(moved.scale(1 / (dev.memory_bandwidth_GBps * 1e9 * stages)), flops.scale(1 / (peak * stages)))
        tile_bytes = self.scaling.count(result, item / stages)
        trips = 2 if isinstance(op, rt.MatmulAllReduceOp) else 1
        skip = 0 if op.option("order") == "ring" else 1  # ring: the own block first
        for i in range(stages):
            distance = (i // tiles + skip) % n
            first = i == 0
            cost = work if not first else (lambda r, w=work: w(r) + self.runtime.device_s)
            self.emit(Step("work", classes, s0, cost, host=self.runtime.launch_s if first else 0.0, label="compute"))
            if distance == 0 or n < 2:
                continue
            pairs = [(g[j], g[(j + distance) % len(g)]) for g in groups for j in range(len(g)) if len(g) > 1]
            send = self._send_cost(pairs, tile_bytes, self._host_stream_from("send"))
            self.emit(Step("record", classes, s0, event=self.events))
            self.emit(Step("wait", classes, s1, event=self.events))
            self.events += 1
            self.emit(Step("collective", classes, s1, lambda r, c=send: trips * c(r), label="send"))
        self.emit(Step("record", classes, s1, event=self.events))
        self.emit(Step("wait", classes, s0, event=self.events))
        self.events += 1

    def kernel_work(self, op: rt.LaunchOp, fused: dict | None) -> tuple[Poly, Poly, str]:
        """Bytes moved, flops and element type of a kernel launch. Bytes: each buffer it
        loads and each it stores, once (and, where the machine write-allocates, a store
        to a buffer the kernel does not read costs its read too); a buffer passed inside a
        fused op is free. Flops: the ops that depend on the loaded elements or the index,
        per element of the space (the others are computed once, outside the loop)."""
        kernel = self.kernels[op.kernel_name]
        facts = self._kernel_facts.get(op.kernel_name)
        if facts is None:  # once per kernel: alike runs of every layer launch one kernel
            body = list(kernel.body.block.ops)
            loads = {o.memref for o in body if isinstance(o, memref.LoadOp)}
            stores = {o.memref for o in body if isinstance(o, memref.StoreOp)}
            facts = self._kernel_facts[op.kernel_name] = (list(kernel.params), loads, stores, element_flops(body, kernel.indices))
        params, loads, stores, per = facts
        args = list(op.args[:-1])
        free = set(fused.get("free", ())) if fused else set()
        write_allocate = isinstance(self.topo, CalibratedTopology) and self.topo.write_allocate
        loaded = {a for p, a in zip(params, args) if p in loads}
        moved = ZERO
        dtype = "f32"
        seen: set[tuple[SSAValue, bool]] = set()
        for p, a in zip(params, args):
            if not isinstance(a.type, MemRefType):
                continue
            if p in stores and (a, True) not in seen:
                seen.add((a, True))
                moved = moved + self._bytes(a).scale(2.0 if write_allocate and a not in loaded else 1.0)
                dtype = _dtype(a.type.element_type)
            if p in loads and (a, False) not in seen and a not in free:
                seen.add((a, False))
                moved = moved + self._bytes(a)
        flops = self.scaling.count(kernel.space, per)
        return moved, flops, dtype

    # -- communication -----------------------------------------------------------------
    def _groups(self, comm: tuple[str, tuple[int, ...]], classes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The device groups of a communicator that ranks of ``classes`` take part in
        (found once per communicator and classes: every layer's collectives ask)."""
        key = (comm, tuple(classes))
        got = self._taking.get(key)
        if got is None:
            mesh, axes = comm
            taking = set(np.flatnonzero(np.isin(self.class_of, classes)).tolist())
            got = self._taking[key] = tuple(tuple(g) for g in self.grids[mesh].groups(list(axes)) if taking.intersection(g))
        return got

    def collective(self, op: nccl.NcclOp, classes: tuple[int, ...], fused: dict | None) -> None:
        kind = op.name.removeprefix("nccl.")
        send, recv = op.buffers
        comm = self.env[op.args[op.BUFFERS]]
        stream = self.env[op.args[-1]]
        groups = self._groups(comm, classes)
        n = len(groups[0]) if groups else 1
        item = _itemsize(self._mem(send).element_type)
        self._shape(send)
        self._shape(recv)
        count = self.scaling.count((op.count,), item)
        if kind in ("reduce_scatter", "all_gather"):
            count = count.scale(n)
        if kind == "all_gather" and isinstance(self.topo, CalibratedTopology) and op.option("in_place"):
            # The shared-memory backends copy each rank's block into every output; in
            # place (the rank's input is its own block of the output) that block is not
            # copied: (n-1)/n of the bytes of the calibration's out-of-place AllGather.
            count = count.scale((n - 1) / n)
        traffic: Poly | _Traffic = count
        if kind in COPY_KINDS and self._host_copies(kind):
            # calibrated per byte of a streamed copy (``copy_traffic``); streamed as the
            # program says (``stream_from``: none on the gathers of a zero-copy group,
            # whose kernel stores the gathered elements one by one)
            block = self.scaling.count((op.count,), item)
            sf = op.option("stream_from")
            traffic = _Traffic(lambda r, b=block, c=count, sf=sf: c(r) * copy_traffic(b(r), sf))
        first = fused is None or not fused.get("launched")
        extra = self.runtime.device_s if first else 0.0
        cost = self.collective_cost(kind, groups, traffic, extra)
        if fused is not None and kind == "reduce_scatter":
            fused.setdefault("free", []).append(recv)
        if fused is not None and fused.get("zero_copy"):
            # the passed buffer is not stored (reduce-scatter output: nor first read, where
            # the machine write-allocates, as the calibrated reduce-scatter's output is) or
            # reloaded (all-gather input) by the collective either
            stored = 2.0 if kind == "reduce_scatter" and isinstance(self.topo, CalibratedTopology) and self.topo.write_allocate else 1.0
            saved = self._bytes(recv if kind == "reduce_scatter" else send).scale(stored / (self.topo.device.memory_bandwidth_GBps * 1e9))
            full = cost
            cost = lambda r, full=full, saved=saved: np.maximum(full(r) - saved(r), 0.0)  # noqa: E731
        if fused is not None:
            fused["launched"] = True
        host = self.runtime.launch_s if first else self.runtime.dispatch_s
        self.emit(Step("collective", classes, stream, cost, host=host, label=kind))

    def collective_cost(self, kind: str, groups, nbytes: Poly | _Traffic, extra: float) -> Callable[[np.ndarray], np.ndarray]:
        """Seconds of a collective per size (the fastest algorithm and protocol), plus
        ``extra`` fixed seconds."""
        seconds = collective_seconds(self.topo, kind, groups, self.options, extra)
        return lambda r: seconds(nbytes(r))

    def p2p(self, group: list[tuple[nccl.NcclOp, tuple[int, ...]]], classes: tuple[int, ...]) -> None:
        """A group of point-to-point calls; each call is issued by the rank classes given
        with it (a call under ``scf.if`` inside the group by fewer than the group's)."""
        calls = [c for c, _ in group]
        sends = [(c, issuing) for c, issuing in group if isinstance(c, nccl.SendOp)]
        recvs = [c for c in calls if isinstance(c, nccl.RecvOp)]
        pairs: list[tuple[int, int]] = []
        nbytes = ZERO
        for c, issuing in sends:
            taking = np.flatnonzero(np.isin(self.class_of, issuing))
            buf, peer, comm, stream = c.args
            nbytes = self._bytes(buf)
            mesh, axes = self.env[comm]
            peers = self.index(peer)
            member = {}
            for g in self.grids[mesh].groups(list(axes)):
                for r in g:
                    member[r] = g
            for r in taking:
                g = member[int(r)]
                dst = g[int(peers[r]) % len(g)]
                if dst != r:
                    pairs.append((int(r), int(dst)))
        for c in recvs:
            self._shape(c.args[0])
        stream = self.env[calls[0].args[-1]] if calls else 0
        launch = self.runtime.launch_s
        # the ranks that issue no call in the group do not wait for it
        classes = tuple(sorted({k for _, issuing in group for k in issuing})) or classes
        if sends and recvs:
            cost = self._send_cost(pairs, nbytes, self._p2p_stream_from(sends))
            self.emit(Step("collective", classes, stream, cost, host=launch, label="send"))
        elif sends:
            cost = self._send_cost(pairs, nbytes, self._p2p_stream_from(sends))
            self.emit(Step("send", classes, stream, cost, host=launch, label="send"))
        elif recvs:
            self.emit(Step("recv", classes, stream, host=launch))

    def _host_copies(self, kind: str) -> bool:
        """Whether the program's target copies ``kind``'s data on the host and the
        calibration charges such copies per byte of a streamed copy (``copy_traffic``)."""
        return isinstance(self.topo, CalibratedTopology) and self.topo.write_allocate and kind in self.target.host_copies

    def _host_stream_from(self, kind: str) -> int | None | bool:
        """``stream_from`` of host copies of ``kind`` that carry no op of their own (the
        tiles of a fused tile operator): the target's; False when not a host copy."""
        return self.target.stream_from if self._host_copies(kind) else False

    def _p2p_stream_from(self, sends: list[tuple[nccl.NcclOp, tuple[int, ...]]]) -> int | None | bool:
        """``stream_from`` of a group's sends as the program says; False when the
        target does not copy them on the host."""
        if not sends or not self._host_copies("send"):
            return False
        return sends[0][0].option("stream_from")

    def _send_cost(self, pairs: list[tuple[int, int]], nbytes: Poly, stream_from: int | None | bool) -> Callable[[np.ndarray], np.ndarray]:
        """``stream_from``: of a host copy (``copy_traffic``), False: no host copy."""
        if not pairs:
            return lambda r: np.zeros_like(r)
        seconds = send_seconds(self.topo, pairs, self.options, self.runtime.device_s, stream_from)
        return lambda r: seconds(nbytes(r))

    def fused(self, op: rt.FusedOp, classes: tuple[int, ...]) -> None:
        """A fused group: one kernel in shared memory when the program says ``zero_copy``
        (``plan-execution``), its calls one by one otherwise."""
        self.block(op.body.block, classes, {"launched": False, "zero_copy": op.mode == "zero_copy"})


def collective_seconds(
    topology: Topology, kind: str, groups: Sequence[Sequence[int]], options: ModelOptions = DEFAULT_OPTIONS, extra: float = 0.0
) -> Callable[[np.ndarray], np.ndarray]:
    """Seconds of a collective of ``kind`` (``collectives.KINDS``) that the device
    ``groups`` run at the same time, as a function of its ``nbytes`` (the convention of
    ``collectives.py``: an AllGather's output, a ReduceScatter's input per rank), plus
    ``extra`` fixed seconds: the fastest NCCL algorithm and protocol (module doc), or
    a calibration's alpha and beta. What the walker charges for every NCCL call, and
    what the planner (``planner/``) charges for a collective it considers. Made once
    per distinct question (a model's program asks the same one for every layer)."""
    key = (topology, kind, tuple(tuple(g) for g in groups), options, extra)
    try:
        got = _SECONDS.get(key)
    except TypeError:  # a topology that does not hash (a calibration's tables)
        return _collective_seconds(topology, kind, groups, options, extra)
    if got is None:
        if len(_SECONDS) >= 4096:
            _SECONDS.clear()
        got = _SECONDS[key] = _collective_seconds(topology, kind, groups, options, extra)
    return got


_SECONDS: dict = {}


def _collective_seconds(
    topology: Topology, kind: str, groups: Sequence[Sequence[int]], options: ModelOptions, extra: float
) -> Callable[[np.ndarray], np.ndarray]:
    if not groups or all(len(g) < 2 for g in groups):
        return lambda b: np.zeros_like(np.asarray(b, dtype=np.float64))
    if isinstance(topology, CalibratedTopology):
        a, beta = topology.alpha_beta(kind)
        return lambda b: a + extra + beta * np.asarray(b, dtype=np.float64)
    groups = tuple(tuple(g) for g in groups)
    choices = []
    algorithms = options.algorithms if kind == "all_reduce" else ("ring",)
    for alg in algorithms:
        lat, per_byte = collective_cost(topology, kind, groups, alg)
        if alg == "ring":
            lat = ring_latency(topology, kind, groups)
        corrected = alg == "tree" and options.tree_correction
        for p in options.protocols:
            choices.append((lat * p.latency, per_byte / p.bandwidth, p.name if corrected else None))

    def cost(nbytes: np.ndarray) -> np.ndarray:
        b = np.asarray(nbytes, dtype=np.float64)
        times = [lat + b * pb / (1.0 if tree is None else tree_correction(tree, b)) for lat, pb, tree in choices]
        return extra + np.min(np.stack(times), axis=0)

    return cost


def send_seconds(
    topology: Topology,
    pairs: Sequence[tuple[int, int]],
    options: ModelOptions = DEFAULT_OPTIONS,
    extra: float = 0.0,
    stream_from: int | None | bool = False,
) -> Callable[[np.ndarray], np.ndarray]:
    """Seconds of a group of point-to-point sends that run at once (``nccl.group_start``
    .. ``group_end``), one message of ``nbytes`` from each ``(source, destination)`` of
    ``pairs``, as a function of ``nbytes``, plus ``extra`` fixed seconds: the links the
    pairs share (``collectives.py``'s ``send``), at NCCL's fastest protocol, or a
    calibration's alpha and beta (per byte of ``copy_traffic`` where the target copies
    the messages on the host: ``stream_from``, False where it does not). What the
    walker charges for every group of sends, and the planner for an all-to-all
    (``all_to_all_seconds``)."""
    if not pairs:
        return lambda b: np.zeros_like(np.asarray(b, dtype=np.float64))
    if isinstance(topology, CalibratedTopology):
        a, beta = topology.alpha_beta("send")
        if stream_from is False:
            return lambda b: a + extra + beta * np.asarray(b, dtype=np.float64)
        return lambda b: a + extra + beta * np.asarray(b, dtype=np.float64) * copy_traffic(b, stream_from)
    return _fastest_protocol(*collective_cost(topology, "send", pairs, "ring"), options, extra)


def _fastest_protocol(lat: float, per_byte: float, options: ModelOptions, extra: float) -> Callable[[np.ndarray], np.ndarray]:
    """``extra`` plus the time of the fastest of NCCL's protocols for a transfer of
    ``lat + nbytes * per_byte`` at the simple protocol."""
    choices = [(lat * p.latency, per_byte / p.bandwidth) for p in options.protocols]

    def cost(nbytes: np.ndarray) -> np.ndarray:
        b = np.asarray(nbytes, dtype=np.float64)
        return extra + np.min(np.stack([lt + b * pb for lt, pb in choices]), axis=0)

    return cost


def all_to_all_seconds(
    topology: Topology, groups: Sequence[Sequence[int]], options: ModelOptions = DEFAULT_OPTIONS, extra: float = 0.0
) -> Callable[[np.ndarray], np.ndarray]:
    """Seconds of a ``coll.all_to_all`` that the device ``groups`` run at the same time,
    as a function of each rank's input bytes, as the walker prices its lowering
    (``dialects/collectives/all_to_all.py``): one group of sends in which every member
    sends each other member of its group its block (``nbytes / n``) at once
    (``send_seconds`` of all those pairs; the copy of a rank's own block is a kernel)."""
    key = tuple(tuple(int(d) for d in g) for g in groups)
    if not any(len(g) > 1 for g in key):
        return lambda b: np.zeros_like(np.asarray(b, dtype=np.float64))
    n = max(len(g) for g in key)
    if isinstance(topology, CalibratedTopology):
        seconds = send_seconds(topology, [(0, 1)], options, extra)  # alpha and beta: the pairs do not matter
    else:
        seconds = _fastest_protocol(*_all_to_all_cost(topology, key), options, extra)
    return lambda nbytes: seconds(np.asarray(nbytes, dtype=np.float64) / n)


@lru_cache(maxsize=4096)
def _all_to_all_cost(topology: Topology, groups: tuple[tuple[int, ...], ...]) -> tuple[float, float]:
    """``collective_cost`` of the sends of an all-to-all of ``groups`` (every ordered
    pair of each group), once per topology and groups: over 256 devices they are 65,280
    pairs, which a planner prices for every all-to-all it considers."""
    return all_to_all_cost(topology, groups)


def element_flops(ops: Sequence[Operation], varying: Sequence[SSAValue]) -> float:
    """Flop-equivalents per element of a kernel body (``FLOPS``): the ops that depend on
    a loaded element or on the ``varying`` values (the loop indices, a map's element
    arguments); the others are computed once, outside the loop."""
    seen: set[SSAValue] = set(varying)
    per = 0.0
    for o in ops:
        if isinstance(o, memref.LoadOp) or any(v in seen for v in o.operands):
            seen.update(o.results)
            if o.name not in FREE and not o.name.startswith(("rt.", "dist.")):
                per += FLOPS.get(o.name, 1.0)
    return per


def runtime_of(topology: Topology, options: ModelOptions = DEFAULT_OPTIONS) -> Runtime:
    """How ``topology``'s host issues a lowered program's ops: the options' runtime, a
    calibration's, or ``GPU_RUNTIME``."""
    return options.runtime or (topology.runtime if isinstance(topology, CalibratedTopology) else GPU_RUNTIME)


def work_seconds(topology: Topology, moved_bytes: float, flops: float, dtype: str, options: ModelOptions = DEFAULT_OPTIONS, matmul: bool = False) -> float:
    """Device seconds of one kernel that moves ``moved_bytes`` and computes ``flops`` of
    ``dtype``: ``max(bytes / memory bandwidth, flops / peak)`` plus the runtime's device
    time per kernel, as the walker charges a launch (``matmul``: at a calibration's
    matmul rate)."""
    runtime = runtime_of(topology, options)
    dev = topology.device
    peak = dev.peak_tflops[dtype] * 1e12
    if matmul and isinstance(topology, CalibratedTopology):
        peak = topology.peak_matmul(dtype)
    return runtime.device_s + max(moved_bytes / (dev.memory_bandwidth_GBps * 1e9), flops / peak)


def dist_op_work(op: Operation, operands: Sequence[tuple[tuple[int, ...], Attribute] | None], results: Sequence[tuple[tuple[int, ...], Attribute]]) -> tuple[float, float, str]:
    """Bytes moved, flops and element type of a dist-level op on one rank's blocks
    (``operands`` and ``results``: the block shape and element type of each tensor,
    None for a scalar), counted as the op's lowering is (``lower_to_kernels``) and the
    walker counts it: a ``dist.matmul`` reads both operands and writes its result, 2·M·N·K
    flops (``matmul_work``); a ``dist.map`` one kernel over its result, reading every
    tensor operand once (``kernel_work``, ``element_flops`` of its body); a
    ``dist.reduce_tensor`` its input and output, a flop per input element; a
    ``dist.embedding_bag`` its indices, a row per index and the pooled rows
    (``embedding_work``); ``dist.scatter_add`` its indices, an update row per index and
    its result; ``dist.sort`` its operands twice and n·log2(n) compares per row (as
    ``rt.sort``); a ``dist.reshape`` nothing (``lower-collectives`` makes it a view of
    its operand's block); any other op a copy of its operands into its results. What
    the planner charges for an op it considers (``work_seconds``)."""

    def nbytes(shape: tuple[int, ...], t: Attribute) -> float:
        return float(math.prod(shape)) * _itemsize(t)

    tensors = [x for x in operands if x is not None]
    out_bytes = sum(nbytes(s, t) for s, t in results)
    in_bytes = sum(nbytes(s, t) for s, t in tensors)
    dtype = _dtype(results[0][1]) if results else "f32"
    name = op.name
    if name == "dist.matmul":
        (sa, ta), (sb, _) = tensors[0], tensors[1]
        return in_bytes + out_bytes, 2.0 * math.prod(results[0][0]) * sa[-1], _dtype(ta)
    if name == "dist.map":
        body = list(op.regions[0].block.ops)
        per = element_flops(body, op.regions[0].block.args)
        return in_bytes + out_bytes, per * math.prod(results[0][0]), dtype
    if name == "dist.reduce_tensor":
        return in_bytes + out_bytes, float(math.prod(tensors[0][0])), _dtype(tensors[0][1])
    if name == "dist.embedding_bag":
        (st, tt), (si, ti) = tensors[0], tensors[1]
        (so, to) = results[0]
        bag = si[-1]
        return nbytes(si, ti) + math.prod(so) * _itemsize(to) * (bag + 1), float(math.prod(so) * bag), _dtype(tt)
    if name == "dist.scatter_add":
        (si, ti), (su, tu) = tensors[0], tensors[1]
        bag = si[-1]
        return nbytes(si, ti) + nbytes(su, tu) * bag + out_bytes, float(math.prod(su) * bag), dtype
    if name == "dist.reshape":
        return 0.0, 0.0, dtype
    if name == "dist.sort":
        n = tensors[0][0][op.option("dim")] if tensors[0][0] else 1  # type: ignore[attr-defined]
        return 2.0 * in_bytes, float(math.prod(tensors[0][0])) * max(1.0, math.log2(max(n, 2))), _dtype(tensors[0][1])
    return in_bytes + out_bytes, 0.0, dtype


def issues_work(op: Operation) -> bool:
    """Whether the host issues ``op`` as a kernel, copy or communication call
    (``Runtime.launch_s``) rather than dispatching it (``dispatch_s``): what the walker
    charges, outside fused groups."""
    if isinstance(op, (nccl.GroupStartOp, nccl.SendOp, nccl.RecvOp)):
        return False
    return isinstance(op, (*_WORK, rt.TiledCollectiveOp, nccl.NcclOp, nccl.GroupEndOp))


def extra_arguments(op: Operation) -> int:
    """Array arguments of a kernel launch beyond two (``Runtime.argument_s``)."""
    if not isinstance(op, rt.LaunchOp):
        return 0
    return max(0, sum(1 for a in op.args[:-1] if isinstance(a.type, MemRefType)) - 2)


COPY_KINDS = ("all_gather", "broadcast", "send")
"""The collectives a host communicator may run as copies (``#rt.target``'s
``host_copies``), each copy a block (all_gather) or the whole message; the ``mpi``
backend leaves them to MPI. Calibrated per byte of ``copy_traffic`` where they are."""


def copy_traffic(block: np.ndarray | float, stream_from: int | None = STREAM_FROM) -> np.ndarray:
    """Memory traffic of copies of ``block`` bytes, relative to a streamed copy's: a copy
    streams from ``stream_from`` bytes on (the program's ``stream_from``; None: never),
    read and write; below, the destination's lines are read first (write-allocate):
    1.5x. Calibrated copy collectives are fitted and charged per byte of this traffic."""
    if stream_from is None:
        return np.full(np.shape(block), 1.5)
    return np.where(np.asarray(block) >= stream_from, 1.0, 1.5)


def topology_target(topology: Topology) -> str:
    """The target (``lowering/target.py``) whose plan the cost model predicts on
    ``topology``: the calibrated backend's (``local``; ``mpi`` with the shared-memory
    fused path when the calibration measured one, messages otherwise), ``gpu`` for the
    built-in GPU topologies."""
    if not isinstance(topology, CalibratedTopology):
        return "gpu"
    if topology.backend == "local":
        return "local"
    return "shared-memory" if topology.fused_in_memory else "messages"


@lru_cache(maxsize=4096)
def ring_latency(topology: Topology, kind: str, groups: tuple[tuple[int, ...], ...]) -> float:
    """The latency of a ring collective as NCCL's tuning model counts it: a chunk crosses
    every hop of the ring (n-1 hops per phase; an AllReduce has two phases), each at the
    latency of the level the hop crosses, so the hops inside a node cost the intra-node
    latency and only the hops between nodes the network's (``collectives.py`` charges
    every step the outermost latency instead)."""
    worst = 0.0
    phases = 2 if kind == "all_reduce" else 1
    for g in groups:
        ring = sorted(g)
        n = len(ring)
        if n < 2:
            continue
        hops = [topology.levels[topology.first_difference(ring[i], ring[(i + 1) % n])].latency for i in range(n)]
        # a chunk travels n-1 of the n hops; as NCCL counts them, one fewer between
        # nodes than the ring has (nNodes-1 network steps per phase)
        worst = max(worst, phases * (sum(hops) - max(hops)))
    return worst


@dataclass(frozen=True)
class _Traffic:
    """Bytes per size that are no polynomial (a copy streamed from some size on)."""

    fn: Callable[[np.ndarray], np.ndarray]

    def __call__(self, r: np.ndarray) -> np.ndarray:
        return self.fn(r)

    def scale(self, f: float) -> _Traffic:
        return _Traffic(lambda r: self.fn(r) * f)


def _max_cost(a: Poly, b: Poly, fixed: float = 0.0) -> Callable[[np.ndarray], np.ndarray]:
    return lambda r: fixed + np.maximum(a(r), b(r))


def _itemsize(t: Attribute) -> int:
    return element_bytes(t)


def _dtype(t: Attribute) -> str:
    got = _DTYPES.get(t)
    if got is None:  # printed once per type
        name = str(t)
        got = _DTYPES[t] = name if name in ("f16", "bf16") else "f32"
    return got


_DTYPES: dict[Attribute, str] = {}


# ======================================================================================
# Preparing and predicting
# ======================================================================================


def prepare(
    lowered: ModuleOp, func_name: str, topology: Topology, ranks: int, scaling: Scaling, options: ModelOptions = DEFAULT_OPTIONS
) -> Prepared:
    """The steps of ``func_name`` in ``lowered`` (a module lowered for ``ranks`` ranks at
    the reference size of ``scaling``)."""
    f = next((o for o in lowered.ops if isinstance(o, func.FuncOp) and o.sym_name.data == func_name), None)
    if f is None:
        raise InputRejected(f"cost model: no function @{func_name}")
    if ranks > topology.ranks:
        raise InputRejected(f"--ranks {ranks} is more than the {topology.ranks} devices of {topology.describe()}")
    if planned_target(lowered) is None:
        from distir.lowering.plan_execution import plan

        lowered = clone(lowered)
        plan(lowered, get_target(topology_target(topology)))
        f = next(o for o in lowered.ops if isinstance(o, func.FuncOp) and o.sym_name.data == func_name)
    w = _Walker(lowered, f, topology, ranks, scaling, options)
    w.run()
    return Prepared(w.steps, w.n_classes, scaling, frozenset(w.divisors), w.runtime, w.notes)


def predict_program(
    module: ModuleOp,
    topology: Topology,
    ranks: int,
    sizes: Sequence[int],
    dim: int,
    options: ModelOptions = DEFAULT_OPTIONS,
    func_name: str | None = None,
) -> np.ndarray:
    """Seconds of one step of a dist-level program at each size (``dim`` replaced by the
    size), lowered once at the reference size; NaN where a size does not fit."""
    from distir.lowering.pipeline import lower
    from distir.tuning.sizes import at_size, program_dims

    f = next(o for o in module.ops if isinstance(o, func.FuncOp) and (func_name is None or o.sym_name.data == func_name))
    d_ref, q = reference_size(list(program_dims(module)), ranks, dim)
    lowered = lower(at_size(module, dim, d_ref), ranks)
    prepared = prepare(lowered, f.sym_name.data, topology, ranks, Scaling(d_ref, q), options)
    return predict(prepared, sizes)


def breakdown(prepared: Prepared, size: int) -> dict[str, float]:
    """Seconds of the work of each kind at ``size``, summed over the steps of the rank
    class that works most (``Step.label``: ``compute``, each collective kind, ``send``):
    what the step time is made of before overlap and the critical path (``predict``)
    combine it."""
    r = np.asarray([size], dtype=np.float64) / prepared.scaling.d_ref
    per: list[dict[str, float]] = [{} for _ in range(prepared.classes)]
    for st in prepared.steps:
        if st.cost is None or not st.label:
            continue
        t = float(st.cost(r)[0])
        for c in st.classes:
            per[c][st.label] = per[c].get(st.label, 0.0) + t
    return max(per, key=lambda d: sum(d.values())) if per else {}


def valid_sizes(prepared: Prepared, sizes: Sequence[int]) -> np.ndarray:
    """Which sizes divide into every buffer dimension derived from the substituted dim."""
    return np.array([all(s % k == 0 for k in prepared.divisors) for s in sizes], dtype=bool)


def predict(prepared: Prepared, sizes: Sequence[int]) -> np.ndarray:
    """Seconds of one step of the program at each size (NaN where the size does not fit
    the schedule): the latest host time of any rank class after the program's end."""
    runtime = prepared.runtime
    r = np.asarray(sizes, dtype=np.float64) / prepared.scaling.d_ref
    zero = np.zeros_like(r)
    n = prepared.classes
    host = [zero.copy() for _ in range(n)]
    clocks: list[dict[int, np.ndarray]] = [{} for _ in range(n)]
    events: dict[tuple[int, int], np.ndarray] = {}
    pending: list[tuple[np.ndarray, np.ndarray]] = []

    def ready(c: int, s: int) -> np.ndarray:
        clock = clocks[c]
        t = clock.get(s, zero)
        if not runtime.concurrent_streams and clock:
            t = np.maximum.reduce(list(clock.values()))
        return np.maximum(host[c], t)

    def finish(c: int, s: int, end: np.ndarray) -> None:
        clocks[c][s] = end
        if runtime.synchronous and s == 0:
            host[c] = end

    for st in prepared.steps:
        cs = st.classes
        for c in cs:
            host[c] = host[c] + st.host
        if st.kind == "work":
            dur = st.cost(r)  # type: ignore[misc]
            for c in cs:
                finish(c, st.stream, ready(c, st.stream) + dur)
        elif st.kind == "collective":
            dur = st.cost(r)  # type: ignore[misc]
            start = np.maximum.reduce([ready(c, st.stream) for c in cs])
            for c in cs:
                finish(c, st.stream, start + dur)
        elif st.kind == "send":
            dur = st.cost(r)  # type: ignore[misc]
            start = np.maximum.reduce([ready(c, st.stream) for c in cs])
            pending.append((start, dur))
            for c in cs:
                finish(c, st.stream, start + dur)
        elif st.kind == "recv":
            sent, dur = pending.pop(0) if pending else (zero, zero)
            start = np.maximum.reduce([ready(c, st.stream) for c in cs] + [sent])
            for c in cs:
                finish(c, st.stream, start + dur)
        elif st.kind == "record":
            for c in cs:
                events[(st.event, c)] = clocks[c].get(st.stream, zero)
        elif st.kind == "wait":
            for c in cs:
                clocks[c][st.stream] = np.maximum(clocks[c].get(st.stream, zero), events.get((st.event, c), zero))
        elif st.kind == "sync":
            for c in cs:
                host[c] = np.maximum(host[c], clocks[c].get(st.stream, zero))
    out = (np.maximum.reduce(host) if host else zero) + runtime.step_s
    out = np.where(valid_sizes(prepared, sizes), out, np.nan)
    return out
