"""Executes lowered programs (the ``rt``/``nccl`` level): one ``RankExecutor`` per rank
walks the lowered function and performs each op on a ``Device`` (host or CUDA buffers,
kernels, library calls), with a ``Comm`` for communication and the device's streams.

``LoweredProgram`` is the unit the backends run: the lowered module (lowered once for a
rank count), its function, the dist-level signature (for the npz conventions) and the
mesh grids. Buffers from ``rt.alloc`` and communicators from ``rt.comm`` are created on
a rank's first run and reused by later runs (a benchmark loop allocates nothing).

The program says how it executes (``plan-execution``, ``docs/planning.md``) and the
executor does exactly that: a fused group (``rt.fused``) planned ``zero_copy`` runs as
one kernel over this rank's slice (``zero_copy_fused`` of a host device), one planned
``sequential`` runs its ops one by one; copies and collectives get the program's
``stream_from`` and ``in_place``. A runner plans a program that is not planned yet for
its own target (``LoweredProgram.ensure_planned``) and rejects one whose plan it cannot
execute; nothing is decided here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    FunctionType,
    IndexType,
    IntegerType,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from distir.dialects import layout, nccl, rt
from distir.dialects.diagnostics import ExecutionFailed, InputRejected
from distir.dialects.dist import TensorType
from distir.lowering.lower_collectives import DIST_TYPE
from distir.runtime import npz
from distir.runtime.buffers import new_buffer
from distir.runtime.comm import P2P
from distir.runtime.values import numpy_dtype, rank_coords, stores

_PLANNING = threading.Lock()


# ======================================================================================
# Programs
# ======================================================================================


@dataclass
class LoweredProgram:
    """A lowered function ready to run on ``ranks`` ranks."""

    module: ModuleOp
    func: func.FuncOp
    ranks: int
    grids: dict[str, layout.MeshGrid]
    kernels: dict[str, rt.KernelOp]
    scattered: tuple[str, ...] = ()
    """The arguments a run passes as lists of pieces (``plan-execution`` plans for them)."""

    @classmethod
    def build(cls, module: ModuleOp, func_name: str | None, ranks: int, target: str | None = None, scattered: Sequence[str] = ()) -> LoweredProgram:
        """Lower ``module`` for ``ranks`` ranks (unless it is lowered already: then a copy)
        and pick the function (the only one when ``func_name`` is None); with a
        ``target``, plan it for that target. Without one, the runner that binds the
        program plans it for its own (``ensure_planned``). ``scattered``: the arguments a
        run passes in pieces."""
        from distir.lowering.common import LoweringError
        from distir.lowering.pipeline import is_lowered, lower

        f0 = npz.select_function(module, func_name)
        npz.check_sizes(f0, npz.resolve_grids(module, ranks), ranks)  # a diagnostic, not a lowering failure
        if is_lowered(module):
            from distir.dialects.verifier import verified_clone

            module = verified_clone(module)  # verified: nothing runs that does not
        try:
            lowered = lower(module, ranks, target=target, scattered=scattered)
        except LoweringError as e:
            raise InputRejected(str(e)) from None
        f = npz.select_function(lowered, f0.sym_name.data)
        grids = npz.resolve_grids(lowered, ranks)
        kernels = {k.kernel_name: k for k in lowered.ops if isinstance(k, rt.KernelOp)}
        return cls(lowered, f, ranks, grids, kernels, tuple(scattered))

    def ensure_planned(self, target: str) -> None:
        """Plan this program for ``target`` in place (``plan-execution``) unless it is
        planned already, and check that a runner of ``target`` can execute its plan
        (``InputRejected`` naming the op otherwise). Every ``RankExecutor`` calls it when
        it binds the program (the rank threads of one program at once: serialised)."""
        from distir.lowering.common import LoweringError
        from distir.lowering.plan_execution import plan

        with _PLANNING:
            try:
                plan(self.module, target, self.scattered)
            except LoweringError as e:
                raise InputRejected(str(e)) from None

    @property
    def target(self):
        """The ``#rt.target`` the program is planned for (None: not planned yet)."""
        from distir.lowering.target import planned_target

        return planned_target(self.module)

    @property
    def dist_type(self) -> FunctionType:
        t = self.func.attributes.get(DIST_TYPE)
        assert isinstance(t, FunctionType)
        return t

    def signature(self) -> npz.Signature:
        return list(zip(npz.argument_names(self.func), self.dist_type.inputs.data))

    def result_types(self) -> list[Attribute]:
        return list(self.dist_type.outputs.data)

    def inplace(self) -> dict[int, int]:
        return npz.inplace_results(self.func)

    @cached_property
    def entry(self) -> tuple[list[tuple[int, SSAValue]], list[tuple[int, SSAValue | None]]]:
        """How a step binds its arguments and collects its results: the arguments some
        op reads (index, block argument), and per result the index of the argument it
        returns as is (with None) or the value to look up (index -1). A model-scale step
        takes and returns thousands of in-place buffers that no op names (they live in
        arenas); binding and looking each up by SSA value (xDSL hashes values in
        Python) cost ~2.5 ms a step at 1,000 tensors."""
        block = self.func.body.block
        ret = block.last_op
        assert isinstance(ret, func.ReturnOp)
        used = [(i, a) for i, a in enumerate(block.args) if any(u.operation is not ret for u in a.uses)]
        results: list[tuple[int, SSAValue | None]] = [
            (v.index, None) if isinstance(v, BlockArgument) and v.block is block else (-1, v) for v in ret.arguments
        ]
        return used, results

    def grid(self, t: TensorType) -> layout.MeshGrid:
        return self.grids[t.mesh_name]

    # ------------------------------------------------------------------ npz conventions
    def prepare_inputs(self, given: Mapping[str, np.ndarray] | None, seed: int) -> dict[str, np.ndarray]:
        sig = self.signature()
        for name, t in sig:
            if isinstance(t, TensorType):
                self.grid(t)
        inputs = npz.check_inputs(sig, self.grids, given or {}, "inputs")
        missing = [n for n, _ in sig if n not in inputs]
        if missing:
            inputs.update(npz.random_inputs(sig, self.grids, seed, missing, self._index_bounds()))
        return {n: inputs[n] for n, _ in sig}

    def _index_bounds(self) -> dict[str, int]:
        """Embedding indices are drawn below the table's row count."""
        bounds: dict[str, int] = {}
        names = npz.argument_names(self.func)
        args = list(self.func.body.block.args)
        for op in self.func.walk():
            if isinstance(op, (rt.EmbeddingBagOp, rt.EmbeddingAllToAllOp)):
                table_t, idx = op.args[0], op.args[1]
                if idx in args:
                    i = args.index(idx)
                    t = self.dist_type.inputs.data[args.index(table_t)] if table_t in args else None
                    rows = t.get_shape()[-2] if isinstance(t, TensorType) else table_t.type.get_shape()[-2]  # type: ignore[attr-defined]
                    bounds[names[i]] = rows
        return bounds

    def rank_args(self, inputs: Mapping[str, np.ndarray], rank: int, device, scatter: Mapping[str, Sequence[np.ndarray]] | None = None) -> list[Any]:
        """The arguments of ``rank``: its writable buffers (zeros where it holds nothing)
        and the scalars; an argument in ``scatter`` (its pieces) gets a scattered buffer
        (``scattered.py``)."""
        from distir.runtime.scattered import ScatteredArray, rank_buffer

        hosts: list[Any] = []
        device_side: list[bool] = []  # a plain tensor buffer, to put on the device
        for (name, t), new_t in zip(self.signature(), self.func.function_type.inputs.data):
            device_side.append(isinstance(t, TensorType) and not (scatter and name in scatter))
            a = inputs[name]
            if scatter and name in scatter:
                assert isinstance(t, TensorType)
                grid = self.grid(t)
                hosts.append(rank_buffer(t, scatter[name], grid, rank_coords(grid)[rank]))
                continue
            if isinstance(t, TensorType):
                grid = self.grid(t)
                bufs = npz.distribute(a, t, grid)
                assert isinstance(bufs, dict)
                coords = rank_coords(grid)[rank]
                host = new_buffer(new_t.get_shape(), numpy_dtype(t.element_type))  # type: ignore[attr-defined]
                if rank in bufs and stores(t.get_placements(), coords):
                    # the rank's block at the start of its buffer (padded where the ranks'
                    # blocks differ, or where the lowering pads the argument: padding.py)
                    block = bufs[rank]
                    host[tuple(slice(0, n) for n in block.shape)] = block
                hosts.append(host)
            else:
                hosts.append(np.array(a, dtype=numpy_dtype(t))[()])
        # Arenas (``lower-buckets``): the arguments of each are laid out side by side in
        # one buffer, an extra argument; each of them is a view of its part.
        out: list[Any] = [None] * len(hosts)
        extra: list[Any] = []
        arena_types = self.func.function_type.inputs.data[len(hosts) :]
        for members, arena_t in zip(self.arenas(), arena_types):
            parts = [hosts[i] for i in members]
            if any(isinstance(p, ScatteredArray) for p in parts):
                pieces = [q for p in parts for q in (p.pieces if isinstance(p, ScatteredArray) else [p.reshape(-1)])]
                extra.append(ScatteredArray(pieces))
                continue
            flat = new_buffer(tuple(arena_t.get_shape()), parts[0].dtype)  # type: ignore[attr-defined]  (padded: padding.py)
            at = 0
            spans = []
            for p in parts:
                flat[at : at + p.size] = p.reshape(-1)
                spans.append((at, at + p.size, p.shape))
                at += p.size
            dev = device.from_host(flat)
            for i, (lo, hi, shape) in zip(members, spans):
                out[i] = dev[lo:hi].reshape(shape)
            extra.append(dev)
        for i, h in enumerate(hosts):
            if out[i] is None:
                out[i] = device.from_host(h) if device_side[i] else h
        return out + extra

    def arenas(self) -> list[list[int]]:
        """Per arena (extra trailing argument of the lowered function), the indices of
        the arguments laid out in it."""
        from distir.lowering.lower_collectives import ARENAS

        attr = self.func.attributes.get(ARENAS)
        if attr is None:
            return []
        return [list(a.get_values()) for a in attr.data]  # type: ignore[attr-defined]

    def collect(self, per_rank: Sequence[Sequence[Any]], to_host: Callable[[Any], np.ndarray]) -> list[np.ndarray]:
        """Logical outputs (out.npz convention) from every rank's results."""
        from distir.runtime.scattered import ScatteredArray

        plain = to_host
        to_host = lambda b: b.gather() if isinstance(b, ScatteredArray) else plain(b)  # noqa: E731
        outs = []
        for i, t in enumerate(self.result_types()):
            if isinstance(t, TensorType):
                grid = self.grid(t)
                coords = rank_coords(grid)
                bufs = {r: _block_of(to_host(per_rank[r][i]), t, grid, coords[r]) for r in range(self.ranks) if stores(t.get_placements(), coords[r])}
                outs.append(npz.collect(t, grid, bufs, f"result{i}"))
            else:
                outs.append(np.asarray(to_host(per_rank[0][i])))
        return outs


def _block_of(buf: np.ndarray, t: TensorType, grid: layout.MeshGrid, coords: Sequence[int]) -> np.ndarray:
    """The rank's block of a value: the start of its (maybe padded) buffer."""
    shape = layout.local_shape(t.get_shape(), t.get_placements(), grid.sizes, coords)
    if tuple(buf.shape) == shape:
        return buf
    return buf[tuple(slice(0, n) for n in shape)]


# ======================================================================================
# Execution of one rank
# ======================================================================================


Handler = Callable[["RankExecutor", Operation], None]
HANDLERS: dict[type[Operation], Handler] = {}


def handles(*classes: type[Operation]):
    def deco(fn: Handler) -> Handler:
        for c in classes:
            HANDLERS[c] = fn
        return fn

    return deco


class RankExecutor:
    """Runs a lowered program as one rank: ``run(args)`` returns the function's results
    (device buffers and scalars)."""

    def __init__(self, program: LoweredProgram, rank: int, world, device):
        self.program = program
        self.rank = rank
        self.world = world
        self.device = device
        self.env: dict[SSAValue, Any] = {}
        self.persistent: dict[Operation, Any] = {}
        self.streams: dict[int, Any] = {}
        self.group: list[tuple[Any, P2P, Any]] | None = None
        self.fused_plans: dict[Operation, ZeroCopyGroup] = {}
        program.ensure_planned(runner_target(world, device))

    # ------------------------------------------------------------------ driver
    def run(self, args: Sequence[Any]) -> list[Any]:
        used, results = self.program.entry
        self.env = {a: args[i] for i, a in used}
        self.block(self.program.func.body.block)
        env = self.env
        return [args[i] if v is None else env[v] for i, v in results]

    def block(self, block: Block) -> list[Any]:
        for op in block.ops:
            if isinstance(op, func.ReturnOp):
                return []  # the function's results: ``run``
            if isinstance(op, scf.YieldOp):
                return []
            handler = HANDLERS.get(type(op))
            if handler is None:
                if op.dialect_name() == "arith":
                    self.arith(op)
                    continue
                raise ExecutionFailed(f"rank {self.rank}: '{op.name}' cannot be executed by the runtime")
            handler(self, op)
        return []

    def v(self, value: SSAValue) -> Any:
        return self.env[value]

    def stream(self, value: SSAValue):
        return self.env[value]

    def grid_of(self, mesh: str) -> layout.MeshGrid:
        return self.program.grids[mesh]

    def coords(self, mesh: str) -> tuple[int, ...]:
        return rank_coords(self.grid_of(mesh))[self.rank]

    def arith(self, op: Operation) -> None:
        if isinstance(op, arith.ConstantOp):
            val = op.value.value.data  # type: ignore[attr-defined]
            t = op.result.type
            self.env[op.result] = int(val) if isinstance(t, (IndexType, IntegerType)) else val
            return
        from distir.runtime.arith import eval_op

        args = [np.asarray(self.env[a], dtype=np.int64 if isinstance(a.type, IndexType) else None) for a in op.operands]
        if any(isinstance(a.type, IndexType) for a in (*op.operands, *op.results)):
            # index arithmetic: compute in Python integers.
            res = _index_op(op, [int(a) for a in args])
            self.env[op.results[0]] = res
            return
        for r, y in zip(op.results, eval_op(op, args)):
            self.env[r] = np.asarray(y)[()]


def _index_op(op: Operation, args: list[int]) -> int:
    table: dict[type, Callable[..., int]] = {
        arith.AddiOp: lambda a, b: a + b,
        arith.SubiOp: lambda a, b: a - b,
        arith.MuliOp: lambda a, b: a * b,
        arith.DivUIOp: lambda a, b: a // b,
        arith.DivSIOp: lambda a, b: int(a / b),
        arith.RemUIOp: lambda a, b: a % b,
        arith.RemSIOp: lambda a, b: a - int(a / b) * b,
        arith.IndexCastOp: lambda a: a,
    }
    fn = table.get(type(op))
    if fn is None:
        raise ExecutionFailed(f"'{op.name}' on indices is not supported by the runtime")
    return fn(*args)


# ------------------------------------------------------------------ where a rank is


def group_of(ex: RankExecutor, mesh: str, axes: Sequence[int]) -> tuple[int, int, int]:
    """(color, key, size) of this rank's group over ``axes``: color = row-major index on
    the other axes, key = row-major index on ``axes`` in the order listed."""
    grid = ex.grid_of(mesh)
    c = ex.coords(mesh)
    others = [a for a in range(len(grid.sizes)) if a not in axes]
    color = 0
    for a in others:
        color = color * grid.sizes[a] + c[a]
    key = 0
    for a in axes:
        key = key * grid.sizes[a] + c[a]
    return color, key, math.prod(grid.sizes[a] for a in axes)


@handles(rt.CommOp)
def _comm(ex: RankExecutor, op: rt.CommOp) -> None:
    if op not in ex.persistent:
        color, key, _ = group_of(ex, op.mesh_name, op.axis_list)
        ex.persistent[op] = ex.world.split(color, key)
    ex.env[op.result] = ex.persistent[op]


@handles(rt.GroupRankOp)
def _group_rank(ex: RankExecutor, op: rt.GroupRankOp) -> None:
    _, key, size = group_of(ex, op.mesh_name, op.axis_list)
    ex.env[op.result] = (key + op.shift_value) % size


@handles(rt.HoldsOp)
def _holds(ex: RankExecutor, op: rt.HoldsOp) -> None:
    ex.env[op.result] = layout.holds(op.placement_list(), ex.coords(op.mesh_name))


@handles(scf.IfOp)
def _if(ex: RankExecutor, op: scf.IfOp) -> None:
    if ex.env[op.cond]:
        ex.block(op.true_region.block)
    elif op.false_region.blocks:
        ex.block(op.false_region.block)


# ------------------------------------------------------------------ streams


@handles(rt.StreamOp)
def _stream(ex: RankExecutor, op: rt.StreamOp) -> None:
    n = op.number
    if n not in ex.streams:
        ex.streams[n] = ex.device.stream(n)
    ex.env[op.result] = ex.streams[n]


@handles(rt.EventRecordOp)
def _event_record(ex: RankExecutor, op: rt.EventRecordOp) -> None:
    ex.env[op.result] = ex.v(op.args[0]).record()


@handles(rt.StreamWaitOp)
def _stream_wait(ex: RankExecutor, op: rt.StreamWaitOp) -> None:
    ex.v(op.args[0]).wait_event(ex.v(op.args[1]))


@handles(rt.StreamSyncOp)
def _stream_sync(ex: RankExecutor, op: rt.StreamSyncOp) -> None:
    ex.v(op.args[0]).synchronize()


# ------------------------------------------------------------------ buffers and compute


@handles(rt.AllocOp)
def _alloc(ex: RankExecutor, op: rt.AllocOp) -> None:
    buf = ex.persistent.get(op)
    if buf is None:
        t = op.result.type
        assert isinstance(t, MemRefType)
        buf = ex.persistent[op] = ex.device.alloc(tuple(t.get_shape()), numpy_dtype(t.element_type))
    ex.env[op.result] = buf


@handles(rt.BlockOp)
def _block(ex: RankExecutor, op: rt.BlockOp) -> None:
    buf, i = ex.v(op.args[0]), ex.v(op.args[1])
    ex.env[op.result] = ex.device.block(buf, int(i), op.option("dim"), op.option("count"))


@handles(rt.SpanOp)
def _span(ex: RankExecutor, op: rt.SpanOp) -> None:
    grid, c = ex.grid_of(op.mesh_name), ex.coords(op.mesh_name)
    axes = op.axis_list
    ex.env[op.offset], ex.env[op.length] = layout.dim_block(op.size_value, [grid.sizes[a] for a in axes], [c[a] for a in axes])


@handles(rt.PrefixOp)
def _prefix(ex: RankExecutor, op: rt.PrefixOp) -> None:
    buf = ex.v(op.args[0])
    d = op.option("dim")
    n = int(ex.v(op.args[1])) if len(op.args) == 2 else op.result.type.get_shape()[d]  # type: ignore[attr-defined]
    ex.env[op.result] = ex.device.span(buf, d, 0, n)


@handles(rt.PadBlocksOp, rt.UnpadBlocksOp)
def _pad_blocks(ex: RankExecutor, op: rt.PadBlocksOp | rt.UnpadBlocksOp) -> None:
    src, dst, extent, s = (ex.v(x) for x in op.args)
    d, counts = op.option("dim"), list(op.option("counts"))
    n = math.prod(counts)
    dev = ex.device
    for j in range(n):
        lo, size = layout.dim_block(int(extent), counts, layout.at_digits(j, counts))
        if size == 0:
            continue
        if isinstance(op, rt.PadBlocksOp):
            dev.copy(dev.span(src, d, lo, size), dev.span(dev.block(dst, j, d, n), d, 0, size), s)
        else:
            dev.copy(dev.span(dev.block(src, j, d, n), d, 0, size), dev.span(dst, d, lo, size), s)


@handles(rt.ViewOp)
def _view(ex: RankExecutor, op: rt.ViewOp) -> None:
    buf = ex.v(op.buffer)
    t = op.result.type
    assert isinstance(t, MemRefType)
    shape = tuple(t.get_shape())
    n = math.prod(shape)
    lo = op.offset_value
    flat = buf.reshape(-1)
    ex.env[op.result] = flat[lo : lo + n].reshape(shape) if shape else flat[lo : lo + 1].reshape(())


@handles(rt.CopyOp)
def _copy(ex: RankExecutor, op: rt.CopyOp) -> None:
    src, dst, s = (ex.v(a) for a in op.args)
    stream_from = op.option("stream_from")
    if stream_from is None:
        ex.device.copy(src, dst, s)
    else:  # a host device (``plan-execution`` writes it for host targets only)
        ex.device.copy(src, dst, s, stream_from)


@handles(rt.CopyBlocksOp)
def _copy_blocks(ex: RankExecutor, op: rt.CopyBlocksOp) -> None:
    src, dst, s = (ex.v(a) for a in op.args)
    ex.device.copy_blocks(src, dst, op.option("from"), op.option("to"), op.option("count"), s)


@handles(rt.LaunchOp)
def _launch(ex: RankExecutor, op: rt.LaunchOp) -> None:
    args = [ex.v(a) for a in op.args]
    ex.device.launch(ex.program.kernels[op.kernel_name], args[:-1], args[-1])


@handles(rt.MatmulOp)
def _matmul(ex: RankExecutor, op: rt.MatmulOp) -> None:
    a, b, c, s = (ex.v(x) for x in op.args)
    ex.device.matmul(a, b, c, s)


@handles(rt.ReduceTensorOp)
def _reduce_tensor(ex: RankExecutor, op: rt.ReduceTensorOp) -> None:
    a, out, s = (ex.v(x) for x in op.args)
    if op.option("count") is None:
        ex.device.reduce_tensor(op.option("op"), a, out, op.option("dims"), s)
    else:
        ex.device.reduce_tensor(op.option("op"), a, out, op.option("dims"), s, op.option("count"))


@handles(rt.EmbeddingBagOp)
def _embedding_bag(ex: RankExecutor, op: rt.EmbeddingBagOp) -> None:
    t, i, row0, out, s = (ex.v(x) for x in op.args)
    ex.device.embedding_bag(t, i, int(row0), out, op.option("mode"), s)


@handles(rt.ScatterAddOp)
def _scatter_add(ex: RankExecutor, op: rt.ScatterAddOp) -> None:
    i, u, row0, out, s = (ex.v(x) for x in op.args)
    ex.device.scatter_add(i, u, int(row0), out, s)


@handles(rt.SortOp)
def _sort(ex: RankExecutor, op: rt.SortOp) -> None:
    ins, outs = op.io()
    ex.device.sort([ex.v(x) for x in ins], [ex.v(x) for x in outs], op.option("dim"), ex.v(op.args[-1]))


# ------------------------------------------------------------------ communication


@handles(nccl.AllReduceOp)
def _all_reduce(ex: RankExecutor, op: nccl.AllReduceOp) -> None:
    send, recv, comm, s = (ex.v(x) for x in op.args)
    comm.all_reduce(send, recv, op.count, op.option("op"), s)


@handles(nccl.ReduceScatterOp)
def _reduce_scatter(ex: RankExecutor, op: nccl.ReduceScatterOp) -> None:
    send, recv, comm, s = (ex.v(x) for x in op.args)
    comm.reduce_scatter(send, recv, op.count, op.option("op"), s)


@handles(nccl.AllGatherOp)
def _all_gather(ex: RankExecutor, op: nccl.AllGatherOp) -> None:
    send, recv, comm, s = (ex.v(x) for x in op.args)
    comm.all_gather(send, recv, op.count, s, **_decisions(op))


@handles(nccl.ReduceOp)
def _reduce(ex: RankExecutor, op: nccl.ReduceOp) -> None:
    send, recv, comm, s = (ex.v(x) for x in op.args)
    comm.reduce(send, recv, op.count, op.option("op"), op.option("root"), s)


@handles(nccl.BroadcastOp)
def _broadcast(ex: RankExecutor, op: nccl.BroadcastOp) -> None:
    send, recv, comm, s = (ex.v(x) for x in op.args)
    comm.broadcast(send, recv, op.count, op.option("root"), s, **_decisions(op))


def _decisions(op: nccl.NcclOp) -> dict[str, Any]:
    """The plan's keywords of a collective call, only those the program gives
    (``comm.py``): ``in_place``, ``stream_from``."""
    kw: dict[str, Any] = {}
    if isinstance(op, nccl.AllGatherOp) and op.option("in_place"):
        kw["in_place"] = True
    stream_from = op.option("stream_from")
    if stream_from is not None:
        kw["stream_from"] = stream_from
    return kw


@handles(nccl.GroupStartOp)
def _group_start(ex: RankExecutor, op: Operation) -> None:
    if ex.group is not None:
        raise ExecutionFailed(f"rank {ex.rank}: nested nccl.group_start")
    ex.group = []


@handles(nccl.GroupEndOp)
def _group_end(ex: RankExecutor, op: Operation) -> None:
    calls, ex.group = ex.group, None
    if calls is None:
        raise ExecutionFailed(f"rank {ex.rank}: nccl.group_end without group_start")
    by_comm: dict[int, tuple[Any, list[P2P], Any]] = {}
    for comm, call, s in calls:
        entry = by_comm.setdefault(id(comm), (comm, [], s))
        entry[1].append(call)
    for comm, group, s in by_comm.values():
        comm.group(group, s)


@handles(nccl.SendOp, nccl.RecvOp)
def _p2p(ex: RankExecutor, op: nccl.NcclOp) -> None:
    buf, peer, comm, s = (ex.v(x) for x in op.args)
    call = P2P("send" if isinstance(op, nccl.SendOp) else "recv", buf, op.count, int(peer), op.option("stream_from"))
    if ex.group is not None:
        ex.group.append((comm, call, s))
    else:
        comm.group([call], s)


# ------------------------------------------------------------------ fused tile operators


@handles(rt.MatmulAllReduceOp, rt.MatmulReduceScatterOp, rt.MatmulAllToAllOp, rt.EmbeddingAllToAllOp)
def _tiled(ex: RankExecutor, op: rt.TiledCollectiveOp) -> None:
    from distir.runtime import tiles

    tiles.run(ex, op)


# ------------------------------------------------------------------ fused collectives


def runner_target(comm, device) -> str:
    """The target (``lowering/target.py``) a rank with ``comm`` on ``device`` executes:
    ``gpu`` on a CUDA device (``nccl``; numba's simulator); the communicator's own
    (``PLAN_TARGET``: ``local`` for the rank threads' ``LocalComm``); ``shared-memory``
    for a communicator that can share buffers (``peer_buffers``: MPI with a node window,
    a step's shared-memory communicator); ``messages`` otherwise (a recording wrapper)."""
    if getattr(device, "target", "cpu") == "cuda":
        return "gpu"
    named = getattr(comm, "PLAN_TARGET", None)
    if named is not None:
        return named
    return "shared-memory" if getattr(comm, "peer_buffers", None) is not None else "messages"


@dataclass
class ZeroCopyGroup:
    """The parts of a ``rt.fused zero_copy`` group (read once per op from the IR)."""

    prelude: list[Operation]
    rs: nccl.ReduceScatterOp
    launch: rt.LaunchOp
    gathers: list[nccl.AllGatherOp]

    @classmethod
    def of(cls, op: rt.FusedOp) -> ZeroCopyGroup:
        ops = list(op.body.block.ops)
        at = next(i for i, o in enumerate(ops) if isinstance(o, rt.LaunchOp))
        return cls(ops[1:at], ops[0], ops[at], ops[at + 1 :])  # type: ignore[arg-type]


@handles(rt.FusedOp)
def _fused(ex: RankExecutor, op: rt.FusedOp) -> None:
    if op.mode != "zero_copy":
        ex.block(op.body.block)
        return
    group = ex.fused_plans.get(op)
    if group is None:
        group = ex.fused_plans[op] = ZeroCopyGroup.of(op)
    run = getattr(ex.device, "zero_copy_fused", None)
    if run is None:
        raise ExecutionFailed(f"rank {ex.rank}: 'rt.fused' is planned zero_copy, which this device does not run (a host device does)")
    for inner in group.prelude:
        ex.block_op(inner)
    send, _, comm, s = (ex.v(x) for x in group.rs.args)
    args = [ex.v(a) for a in group.launch.args[:-1]]
    fulls = [ex.v(g.buffers[1]) for g in group.gathers]
    kernel = ex.program.kernels[group.launch.kernel_name]
    if not run(comm, kernel, args, op.reduce_param, op.gather_params, send, fulls, group.rs.option("op"), group.rs.count, s):
        # the buffers of this run are not all where the peers see them (a step's caller's
        # arrays outside the shared memory; every rank of the group learns it alike)
        if not op.falls_back:
            raise ExecutionFailed(
                f"rank {ex.rank}: 'rt.fused' is planned zero_copy without 'else sequential', but a buffer it touches is not "
                "where its peers see it (allocate the step's buffers with Step.empty / Step.empty_together, or plan the "
                "program for a target whose groups fall back)"
            )
        ex.block(op.body.block)  # the plan's 'else sequential': the group's ops, as they read


def _block_op(self: RankExecutor, op: Operation) -> None:
    handler = HANDLERS.get(type(op))
    if handler is None:
        self.arith(op)
    else:
        handler(self, op)


RankExecutor.block_op = _block_op  # type: ignore[attr-defined]
