"""The fused computation-collective operators at run time (``rt.matmul_all_reduce``,
``rt.matmul_reduce_scatter``, ``rt.matmul_all_to_all``, ``rt.embedding_all_to_all``; the
fused-operator paper): a producer (matmul or embedding bag) computed tile by tile, each
tile sent to the rank that needs it as soon as it is computed.

Planning is separate from executing: ``TilePlan`` says, for this rank, which region of
the producer's result each tile is, where it goes and in which order tiles are
computed (``rt.tile_order``); three executions follow it, one per kind of backend:

* **shared memory** (``local``: rank threads; ``mpi``: ranks of one node through MPI-3
  shared-memory windows): every rank publishes its output (and reduction) buffer to its
  group once per call (``comm.peer_buffers``, which also synchronises), then computes
  the tiles bound for other ranks first, each *straight into the destination rank's
  buffer* (All-to-All: the destination's output; AllReduce/ReduceScatter: the owner's
  reduction buffer, slot of the sending rank) and sets that tile's ready flag in the
  destination (``comm.tile_flags``: per-tile flags holding the call's epoch, so that
  nothing is reset); own tiles last, into its own output. It then waits for the flags
  it needs. An AllReduce owner reduces each tile of its block as soon as all partials
  of it are in (own partial + reduction buffer slots, in rank order, as the
  interpreter does) and stores the reduced tile straight into every peer's output,
  with a flag. No intermediate buffer, no collective call: tiles are the unit of both
  computation and communication. Ranks only ever *write* into peers' buffers.

* **messages** (``mpi`` across nodes or without shared memory, and any communicator
  without shared buffers): tile by tile on the compute stream into a small staging
  buffer, then a point-to-point exchange on the communication stream (``comm.group``:
  non-blocking ``Isend``/``Irecv`` requests on ``mpi``, progressed while later tiles
  compute), received tiles unpacked where they belong. Remote-first and ring orders
  pair each step's send to ``me+s`` with a receive from ``me-s``; natural order has
  every rank send destination j's tiles at step j, which rank j receives.

* **GPU** (``nccl``): one kernel computes every tile on the compute stream in the
  tile order, counting finished elements per tile in ready flags; the communication
  stream waits for each tile's flag (a spinning one-thread kernel) and sends it with
  NCCL send/recv, in exactly the message schedule above (so a recording communicator
  sees the same calls from the host and the GPU device).

In every case the result is complete on the compute stream when the op returns.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distir.dialects import rt
from distir.runtime.comm import P2P, CommError

Box = tuple[slice, ...]


# ======================================================================================
# Planning
# ======================================================================================


@dataclass
class TilePlan:
    """Where the tiles of one fused operator go, seen from group rank ``me`` of ``n``.

    The producer's result (``shape``) is cut along ``dim`` into one block per
    destination; each block is cut into ``tiles`` tiles along ``tile_dim`` (``dim``
    itself, or another dim whose extent the tiles divide). Tile (dest, k) is computed
    at its place in ``steps()``: destination-major in ``order`` when the tiles cut
    ``dim`` (all tiles bound for other ranks first, under ``remote_first``); tile-
    major when they cut another dim, so that the tiles sharing producer inputs (a
    group of embedding tables, an expert's weights) run back to back for every
    destination, remote destinations first."""

    kind: str  # "reduce" (AllReduce / ReduceScatter) or "all_to_all"
    order_name: str
    n: int
    me: int
    tiles: int
    dim: int  # the dim cut into destination blocks
    concat: int | None  # all_to_all: the dim the received blocks are stacked along
    gather: bool  # reduce: AllReduce (True) or ReduceScatter (False)
    reduction: str | None
    shape: tuple[int, ...]  # this rank's producer result
    order: list[int]  # destination ranks in computation order
    tile_dim: int = -1  # the dim blocks are cut into tiles along (-1: dim)

    def __post_init__(self) -> None:
        if self.tile_dim < 0:
            self.tile_dim = self.dim

    @classmethod
    def of(cls, op: rt.TiledCollectiveOp, n: int, me: int) -> TilePlan:
        a2a = isinstance(op, rt.TiledAllToAllOp)
        return cls(
            kind="all_to_all" if a2a else "reduce",
            order_name=op.option("order"),
            n=n,
            me=me,
            tiles=op.option("tiles"),
            dim=op.option("dim"),
            concat=op.option("concat") if a2a else None,
            gather=isinstance(op, rt.MatmulAllReduceOp),
            reduction=None if a2a else op.option("op"),
            shape=tuple(op.producer_shape()),
            order=rt.tile_order(op.option("order"), n, me),
            tile_dim=op.tile_dim(),
        )

    @property
    def along_dim(self) -> bool:
        """Whether the tiles cut the destination dim itself."""
        return self.tile_dim == self.dim

    @property
    def block(self) -> int:
        """Extent along ``dim`` of one destination's block."""
        return self.shape[self.dim] // self.n

    @property
    def tile(self) -> int:
        """Extent along ``tile_dim`` of one tile."""
        full = self.block if self.along_dim else self.shape[self.tile_dim]
        return full // self.tiles

    @property
    def tile_shape(self) -> tuple[int, ...]:
        s = list(self.shape)
        s[self.dim] = self.block
        s[self.tile_dim] = self.tile
        return tuple(s)

    def steps(self) -> list[tuple[int, int]]:
        """(destination, tile) in computation order (see the class doc)."""
        if self.along_dim:
            return [(dest, k) for dest in self.order for k in range(self.tiles)]
        return [(dest, k) for k in range(self.tiles) for dest in self.order]

    def _box(self, ranges: dict[int, tuple[int, int]]) -> Box:
        return tuple(slice(*ranges[d]) if d in ranges else slice(None) for d in range(len(self.shape)))

    def _ranges(self, dim_start: int, k: int, extra: dict[int, tuple[int, int]] | None = None) -> dict[int, tuple[int, int]]:
        """Ranges of tile k of the block starting at ``dim_start`` along ``dim``."""
        r = dict(extra or {})
        if self.along_dim:
            start = dim_start + k * self.tile
            r[self.dim] = (start, start + self.tile)
        else:
            r[self.dim] = (dim_start, dim_start + self.block)
            base = r[self.tile_dim][0] if self.tile_dim in r else 0
            r[self.tile_dim] = (base + k * self.tile, base + (k + 1) * self.tile)
        return r

    def source(self, dest: int, k: int) -> Box:
        """Tile k of ``dest``'s block in this rank's producer result."""
        return self._box(self._ranges(dest * self.block, k))

    def arrival(self, src: int, k: int) -> Box:
        """All-to-All: where tile k from rank ``src`` lands in the receiver's output
        (block ``src`` along ``concat``; the receiver's slice along ``dim``)."""
        assert self.concat is not None
        c = self.shape[self.concat]
        return self._box(self._ranges(0, k, {self.concat: (src * c, (src + 1) * c)}))

    def result_tile(self, owner: int, k: int) -> Box:
        """Reduce: tile k of ``owner``'s block in an output (AllReduce: the full result;
        ReduceScatter: the block itself, so the owner is implied)."""
        return self._box(self._ranges(owner * self.block if self.gather else 0, k))

    def partial_slot(self, src: int, k: int) -> Box:
        """Reduce: where ``src``'s partial of tile k sits in an owner's reduction buffer."""
        return (slice(src, src + 1), *self._box(self._ranges(0, k)))

    def peers(self) -> list[int]:
        return [r for r in range(self.n) if r != self.me]

    # ---- the message schedule (the same on every device)
    def exchanges(self) -> list[tuple[int, int, list[int], list[int]]]:
        """``(dest, k, send_to, recv_from)`` per tile in computation order: the tile (dest,
        k) is computed, then one group sends it to ``send_to`` and receives tile k from
        each of ``recv_from``. Shift orders pair me+s with me-s; natural order has all
        ranks send to j at step j."""
        out = []
        shifted = self.order_name != "natural"
        for dest, k in self.steps():
            if shifted:
                s = (dest - self.me) % self.n
                out.append((dest, k, [dest] if s else [], [(self.me - s) % self.n] if s else []))
            elif dest != self.me:
                out.append((dest, k, [dest], []))
            else:
                out.append((dest, k, [], self.peers()))
        return out


def tile_count(plan: TilePlan) -> int:
    return math.prod(plan.tile_shape)


# ======================================================================================
# Producers: the region of the result a tile covers, computed into any view
# ======================================================================================


class Producer:
    def compute(self, device, box: Box, out) -> None:
        """Compute the producer's result over ``box`` into ``out`` (synchronously)."""
        raise NotImplementedError


class MatmulProducer(Producer):
    def __init__(self, a, b):
        self.a, self.b = a, b

    def views(self, box: Box):
        a = self.a[(*box[:-1], slice(None))]
        b = self.b[:, box[-1]] if self.b.ndim == 2 else self.b[(*box[:-2], slice(None), box[-1])]
        return a, b

    def compute(self, device, box: Box, out) -> None:
        device.matmul_into(*self.views(box), out)


class EmbeddingProducer(Producer):
    def __init__(self, table, indices, row0: int, mode: str):
        self.table, self.indices, self.row0, self.mode = table, indices, row0, mode

    def views(self, box: Box):
        table = self.table[(*box[:-2], slice(None), box[-1])]
        indices = self.indices[(*box[:-1], slice(None))]
        return table, indices

    def compute(self, device, box: Box, out) -> None:
        table, indices = self.views(box)
        device.embedding_into(table, indices, self.row0, out, self.mode)


def producer_of(ex, op: rt.TiledCollectiveOp) -> Producer:
    vals = [ex.v(a) for a in op.inputs]
    if isinstance(op, rt.EmbeddingAllToAllOp):
        return EmbeddingProducer(vals[0], vals[1], int(vals[2]), op.option("mode"))
    return MatmulProducer(vals[0], vals[1])


# ======================================================================================
# Execution
# ======================================================================================


def _contiguous(a) -> bool:
    if isinstance(a, np.ndarray):
        return a.flags.c_contiguous
    return bool(a.is_c_contiguous())


def _epilogue(ex, op: rt.TiledCollectiveOp, view, stream=None) -> None:
    """Run the op's epilogue region on a finished tile (in place); ``stream`` replaces
    the compute stream its launches name (the GPU path runs them on the
    communication stream, after the tile's flag)."""
    if not isinstance(op, rt.TiledAllToAllOp):
        return
    block = op.body.block
    ops = list(block.ops)
    if not ops:
        return
    s0 = op.streams[0]
    saved = ex.env.get(s0)
    ex.env[block.args[0]] = view
    if stream is not None:
        ex.env[s0] = stream
    try:
        for inner in ops:
            ex.block_op(inner)
    finally:
        ex.env[s0] = saved


class TileState:
    """What one rank keeps per fused op between calls: the plan, the call count (the
    epoch the ready flags hold), the shared flags, the staging buffers."""

    def __init__(self, plan: TilePlan):
        self.plan = plan
        self.epoch = 0
        self.flags: Any = None
        self.stages: dict[Any, Any] = {}
        self.device_flags: Any = None


def run(ex, op: rt.TiledCollectiveOp) -> None:
    """Execute a fused tile operator on rank ``ex`` (see the module doc)."""
    comm = ex.v(op.comm)
    s0, s1 = (ex.v(s) for s in op.streams)
    key = (op, "tiles")
    state = ex.persistent.get(key)
    if state is None:
        n = op.ranks()
        if comm.size != n:
            from distir.dialects.diagnostics import ExecutionFailed

            raise ExecutionFailed(f"rank {ex.rank}: '{op.name}' expects a group of {n} ranks, its communicator has {comm.size}")
        state = ex.persistent[key] = TileState(TilePlan.of(op, n, comm.rank))
    state.epoch += 1
    producer = producer_of(ex, op)
    out = ex.v(op.out)
    red = ex.v(op.red) if op.red is not None else None
    device = ex.device
    if getattr(device, "target", "cpu") == "cuda":
        run_gpu(ex, op, state, producer, comm, out, red, s0, s1)
        return
    s0.synchronize()
    if op.option("transport") == "shared":
        if run_shared(ex, op, state, producer, comm, out, red):
            return
        if op.option("else") != "messages":
            from distir.dialects.diagnostics import ExecutionFailed

            raise ExecutionFailed(
                f"rank {ex.rank}: '{op.name}' is planned 'transport shared' without 'else messages', but its buffers or "
                "tile flags are not where its peers see them (allocate the step's buffers with Step.empty, or plan the "
                "program for a target whose operators fall back)"
            )
    run_messages(ex, op, state, producer, comm, out, red, s0, s1)


# -------------------------------------------------------------------------- shared memory


def run_shared(ex, op, state: TileState, producer: Producer, comm, out, red) -> bool:
    """The zero-copy execution (module doc); False when the communicator cannot share
    these buffers (every rank of the group learns it alike; the plan says what then:
    ``else messages``, the message path, or a failure)."""
    share = getattr(comm, "peer_buffers", None)
    flags_of = getattr(comm, "tile_flags", None)
    if share is None or flags_of is None:
        return False
    plan = state.plan
    n, me, tiles = plan.n, plan.me, plan.tiles
    if state.flags is None:
        state.flags = flags_of(2 * n * tiles) or False  # collective, once per op
    flags = state.flags
    if flags is False:
        return False
    peers = share([out] if red is None else [out, red])
    if peers is None:
        return False
    epoch = state.epoch
    device = ex.device
    gather_base = n * tiles
    for dest, k in plan.steps():
        box = plan.source(dest, k)
        if plan.kind == "all_to_all":
            view = peers[dest][0][plan.arrival(me, k)]
            producer.compute(device, box, view)
            _epilogue(ex, op, view)
        elif dest == me:
            view = out[plan.result_tile(me, k)]
            producer.compute(device, box, view)
        else:
            view = peers[dest][1][plan.partial_slot(me, k)][0]
            producer.compute(device, box, view)
        if dest != me:
            flags.signal(dest, me * tiles + k, epoch)
    others = plan.peers()
    if plan.kind == "all_to_all":
        flags.wait([s * tiles + k for s in others for k in range(tiles)], epoch)
        return True
    for k in range(tiles):
        flags.wait([s * tiles + k for s in others], epoch)
        mine = out[plan.result_tile(me, k)]
        terms = [mine if s == me else red[plan.partial_slot(s, k)][0] for s in range(n)]
        mine[...] = _reduce(terms, plan.reduction, mine.dtype)
        if plan.gather:
            for j in others:
                peers[j][0][plan.result_tile(me, k)] = mine
                flags.signal(j, gather_base + me * tiles + k, epoch)
    if plan.gather:
        flags.wait([gather_base + s * tiles + k for s in others for k in range(tiles)], epoch)
    return True


def _reduce(terms, kind, dtype):
    from distir.runtime.values import reduce_arrays

    return reduce_arrays(terms, kind, dtype)


class ThreadFlags:
    """The per-tile ready flags of a group of rank threads (``local``): one row of
    ``count`` epochs per rank, a condition variable to wait on; waits stop when a rank
    of the run fails (``abort``). ``watch(rank, started)`` is called while rank waits (it
    may fail the run: ``local.LocalWorld.watch``)."""

    def __init__(self, ranks: int, count: int, abort, watch=None):
        self.values = np.zeros((ranks, count), np.int64)
        self.cond = threading.Condition()
        self.abort = abort
        self.watch = watch

    def handle(self, rank: int) -> RankFlags:
        return RankFlags(self, rank)


class RankFlags:
    """One rank's handle on ``ThreadFlags``."""

    def __init__(self, flags: ThreadFlags, rank: int):
        self.flags = flags
        self.rank = rank

    def signal(self, dest: int, index: int, value: int) -> None:
        f = self.flags
        with f.cond:
            f.values[dest, index] = value
            f.cond.notify_all()

    def wait(self, indices: Sequence[int], value: int) -> None:
        f = self.flags
        row = f.values[self.rank]
        idx = np.asarray(indices, dtype=np.int64)
        started = time.monotonic()
        with f.cond:
            while (row[idx] < value).any():
                if f.abort is not None and f.abort.is_set():
                    raise CommError("a peer failed while this rank waited for its tiles")
                f.cond.wait(0.05)
                if f.watch is not None and (row[idx] < value).any():
                    f.watch(self.rank, started)


class SharedFlags:
    """Per-tile ready flags in shared memory across processes (``mpi`` within a node):
    ``mine`` is this rank's row, ``rows[r]`` rank r's (views of MPI-3 shared-memory
    window segments). A flag is written by one rank only and read by its owner, which
    spins (yielding the core) until it holds the epoch it waits for; x86 keeps stores
    in order, so a tile's data is visible before its flag."""

    def __init__(self, mine: np.ndarray, rows: Sequence[np.ndarray]):
        self.mine = mine
        self.rows = list(rows)

    def signal(self, dest: int, index: int, value: int) -> None:
        self.rows[dest][index] = value

    def wait(self, indices: Sequence[int], value: int) -> None:
        idx = np.asarray(indices, dtype=np.int64)
        spins = 0
        while (self.mine[idx] < value).any():
            spins += 1
            if spins < 200:
                os.sched_yield()
            else:
                time.sleep(5e-5)


# -------------------------------------------------------------------------- messages


def _stage(state: TileState, device, key, shape, dtype):
    buf = state.stages.get(key)
    if buf is None:
        buf = state.stages[key] = device.alloc(tuple(shape), dtype)
    return buf


def _recv_target(state: TileState, device, key, view):
    """The buffer a tile is received into: ``view`` itself when contiguous, else a
    staging buffer (unpacked into ``view`` after)."""
    if _contiguous(view):
        return view, None
    tmp = _stage(state, device, key, view.shape, view.dtype)
    return tmp, view


def run_messages(ex, op, state: TileState, producer: Producer, comm, out, red, s0, s1, computed=None) -> None:
    """The message execution (module doc). ``computed(dest, k)``, when given, returns
    the view of an already computed tile and the stream to wait for (GPU path);
    otherwise each tile is computed on the compute stream right before it is sent."""
    plan = state.plan
    device = ex.device
    me, tiles = plan.me, plan.tiles
    count = tile_count(plan)
    dtype = out.dtype
    unpack: list[tuple[Any, Any]] = []

    def ready_tile(dest: int, k: int):
        """The finished tile (dest, k), ready on the communication stream."""
        if computed is not None:
            return computed(dest, k)
        if dest == me:
            view = out[plan.arrival(me, k)] if plan.kind == "all_to_all" else out[plan.result_tile(me, k)]
        else:
            view = _stage(state, device, ("send", dest, k), plan.tile_shape, dtype)
        producer.compute(device, plan.source(dest, k), view)
        _epilogue(ex, op, view)
        s1.wait_event(s0.record())
        return view

    for dest, k, send_to, recv_from in plan.exchanges():
        view = ready_tile(dest, k)
        if dest == me and computed is not None:
            target = out[plan.arrival(me, k)] if plan.kind == "all_to_all" else out[plan.result_tile(me, k)]
            device.copy(view, target, s1)
        calls = []
        for to in send_to:
            src = view
            if not _contiguous(src):
                src = _stage(state, device, ("sendc", dest, k), plan.tile_shape, dtype)
                device.copy(view, src, s1)
            calls.append(P2P("send", src, count, to))
        for frm in recv_from:
            where = out[plan.arrival(frm, k)] if plan.kind == "all_to_all" else red[plan.partial_slot(frm, k)][0]
            buf, later = _recv_target(state, device, ("recv", frm, k), where)
            calls.append(P2P("recv", buf, count, frm))
            if later is not None:
                unpack.append((buf, later))
        if calls:
            comm.group(calls, s1)
        s1.poll()
    for buf, view in unpack:
        device.copy(buf, view, s1)
    unpack.clear()
    if plan.kind == "reduce":
        for k in range(tiles):
            mine = out[plan.result_tile(me, k)]
            terms = [mine if s == me else red[plan.partial_slot(s, k)][0] for s in range(plan.n)]
            device.reduce_tile(plan.reduction, terms, mine, s1)
        if plan.gather and plan.n > 1:
            for k in range(tiles):
                mine = out[plan.result_tile(me, k)]
                src = mine
                if not _contiguous(src):
                    src = _stage(state, device, ("gather", k), plan.tile_shape, dtype)
                    device.copy(mine, src, s1)
                calls = [P2P("send", src, count, j) for j in plan.peers()]
                for j in plan.peers():
                    buf, later = _recv_target(state, device, ("gathered", j, k), out[plan.result_tile(j, k)])
                    calls.append(P2P("recv", buf, count, j))
                    if later is not None:
                        unpack.append((buf, later))
                comm.group(calls, s1)
            for buf, view in unpack:
                device.copy(buf, view, s1)
    s0.wait_event(s1.record())


# -------------------------------------------------------------------------- GPU


def run_gpu(ex, op, state: TileState, producer: Producer, comm, out, red, s0, s1) -> None:
    """One kernel computes every tile in order with per-tile flags on the compute
    stream; the communication stream waits for each tile's flag, runs the epilogue on
    it and exchanges it (the message schedule)."""
    plan = state.plan
    device = ex.device
    scratch = _stage(state, device, "result", plan.shape, out.dtype)
    if state.device_flags is None:
        state.device_flags = device.alloc((plan.n * plan.tiles,), np.dtype(np.int64))
    flags = state.device_flags
    if isinstance(producer, MatmulProducer):
        device.tiled_matmul(producer.a, producer.b, scratch, plan, flags, s0)
    else:
        assert isinstance(producer, EmbeddingProducer)
        device.tiled_embedding(producer.table, producer.indices, producer.row0, scratch, producer.mode, plan, flags, s0)
    target = state.epoch * tile_count(plan)

    def computed(dest: int, k: int):
        device.wait_flag(flags, dest * plan.tiles + k, target, s1)
        view = scratch[plan.source(dest, k)]
        _epilogue(ex, op, view, s1)
        return view

    run_messages(ex, op, state, producer, comm, out, red, s0, s1, computed)


HUGE = 1 << 62


def flag_axes(plan: TilePlan, axis_of) -> tuple[int, ...]:
    """How a GPU kernel finds the ready flag (dest * tiles + k) of a result element
    from two of its coordinates: flag = (c1 // s1) * mult + c2 // s2, where each
    coordinate is named by ``axis_of(dim)`` = (which, div, mod) (see the kernels)."""
    a1 = axis_of(plan.dim)
    if plan.along_dim:
        return (*a1, plan.tile, 1, *a1, HUGE)
    return (*a1, plan.block, plan.tiles, *axis_of(plan.tile_dim), plan.tile)


def matmul_axis(plan: TilePlan, batch: Sequence[int]):
    """(which, div, mod) of a matmul result dim: 2 the columns, 1 the rows, 0 a batch
    dim (coordinate = (flat batch index // div) % mod)."""
    r = len(plan.shape)

    def axis(d: int) -> tuple[int, int, int]:
        if d == r - 1:
            return 2, 1, 1
        if d == r - 2:
            return 1, 1, 1
        return 0, math.prod(batch[d + 1 :]), batch[d]

    return axis


def _flag_of(axes: tuple[int, ...], coords: dict[int, int], flat_batch: int = 0) -> int:
    w1, d1, m1, s1, mult, w2, d2, m2, s2 = axes

    def c(which, div, mod):
        return coords[which] if which else (flat_batch // div) % mod

    return (c(w1, d1, m1) // s1) * mult + c(w2, d2, m2) // s2


def kernel_tile_order(plan: TilePlan, batch: Sequence[int], m: int, n: int, edge: int) -> np.ndarray:
    """The order in which a tiled matmul kernel computes its ``edge`` x ``edge`` output
    tiles (row-major ids over flattened batch, row tiles, column tiles): by the place
    in ``plan.steps()`` of the fused-operator tile holding the tile's first element."""
    tm, tn = -(-m // edge), -(-n // edge)
    place = {step: i for i, step in enumerate(plan.steps())}
    axes = flag_axes(plan, matmul_axis(plan, batch))
    keys = []
    for t in range(math.prod(batch) * tm * tn):
        bat, rest = divmod(t, tm * tn)
        ti, tj = divmod(rest, tn)
        f = _flag_of(axes, {1: ti * edge, 2: tj * edge}, bat)
        keys.append((place[divmod(f, plan.tiles)], t))
    keys.sort()
    return np.array([t for _, t in keys], dtype=np.int64)


def embedding_axis(plan: TilePlan):
    """(which, div, mod) of an embedding result dim: 0 the table, 1 the bag, 2 the
    feature (a 2-d result has no table dim)."""
    lead = len(plan.shape) - 2

    def axis(d: int) -> tuple[int, int, int]:
        return (d + 1 - lead, 1, 1) if d >= lead else (0, 1, 1 << 62)

    return axis


def bag_order(plan: TilePlan) -> np.ndarray:
    """The order in which the tiled embedding kernel pools its bags (flat (table, bag)
    ids): by the place in ``plan.steps()`` of the tile holding the bag's first element."""
    shape = plan.shape
    t_n = shape[0] if len(shape) == 3 else 1
    b_n = shape[-2]
    place = {step: i for i, step in enumerate(plan.steps())}
    axes = flag_axes(plan, embedding_axis(plan))
    keys = []
    for t, b in itertools.product(range(t_n), range(b_n)):
        f = _flag_of(axes, {1: b, 2: 0}, t)
        keys.append((place[divmod(f, plan.tiles)], t * b_n + b))
    keys.sort()
    return np.array([i for _, i in keys], dtype=np.int64)
