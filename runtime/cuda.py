"""The CUDA device of the ``nccl`` backend: numba-cuda device arrays, generated CUDA
kernels (``numba_codegen.cuda_source``), the fixed kernels of ``cuda_kernels.py`` and
CUDA streams and events. It runs in numba's CUDA simulator too (``NUMBA_ENABLE_CUDASIM=1``
set before numba.cuda is first imported), where every launch completes at once; there
``host_view`` gives the numpy array behind a device array, and a block's threads meet
at a barrier instead of numba's polling (``_adapt_simulator``).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import IndexType, MemRefType

from distir.dialects import rt
from distir.lowering import numba_codegen as cg
from distir.runtime import cuda_kernels as ck
from distir.runtime.values import BFLOAT16, numpy_dtype

THREADS = 256
MAX_BLOCKS = 4096

if not hasattr(np, "row_stack"):
    # numba-cuda 0.30 types np.row_stack, which numpy 2.5 removed, when it first compiles a
    # kernel: AttributeError on the GPU machine's image (numpy 2.5.2, numba-cuda 0.30.4).
    # numpy's own alias until 2.5 keeps it working.
    np.row_stack = np.vstack  # type: ignore[attr-defined]


def _cuda():
    from numba import cuda

    try:  # small grids are distir's choice (one block per tile); numba warns at each launch
        from numba.cuda.core import config

        config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    except ImportError:
        pass
    return cuda


_SIMULATOR_LOCK = threading.Lock()
_NUMBA_SHARED_ARRAY: Any = None
"""numba's ``FakeCUDAShared.array``, once ``_adapt_simulator`` replaced it (it still
gives dynamic shared memory)."""


def _adapt_simulator() -> None:
    """Two changes to numba-cuda's CUDA simulator (once per process, by the first
    simulated ``CudaDevice``: every launch is the device's), where distir's
    kernels run without a GPU (every GPU thread a Python thread):

    - A block's threads meet at ``syncthreads`` at a barrier (``_BlockBarrier``), and
      the launching thread joins them. numba's block manager polls every thread in a
      loop that holds the interpreter lock until the 5 ms switch interval takes it
      away: most of a launch was that loop (the Megatron MLP's four matmul launches of
      16 x 16 threads: 3.8 s, 1.5 s at the barrier). As there, a thread that has
      returned no longer counts at the barrier, and a thread's exception is raised by
      the launch (once the block's other threads are done).
    - ``cuda.shared.array`` (``_shared_array``)."""
    from numba.cuda.simulator import kernel, kernelapi

    global _NUMBA_SHARED_ARRAY
    with _SIMULATOR_LOCK:  # rank threads may make their devices at once
        if _NUMBA_SHARED_ARRAY is not None:
            return
        _NUMBA_SHARED_ARRAY = kernelapi.FakeCUDAShared.array
        kernel.BlockManager.run = _run_block
        kernel.BlockThread.syncthreads = _syncthreads
        kernelapi.FakeCUDAShared.array = _shared_array


class _BlockBarrier:
    """``syncthreads`` for the threads of one simulated block, of which ``leave`` takes
    one that returned."""

    def __init__(self, parties: int):
        self.cond = threading.Condition()
        self.parties = parties
        self.waiting = 0
        self.generation = 0

    def wait(self) -> None:
        with self.cond:
            generation = self.generation
            self.waiting += 1
            if self.waiting == self.parties:
                self._release()
            else:
                while generation == self.generation:
                    self.cond.wait()

    def leave(self) -> None:
        with self.cond:
            self.parties -= 1
            if self.parties and self.waiting == self.parties:
                self._release()

    def _release(self) -> None:
        self.waiting = 0
        self.generation += 1
        self.cond.notify_all()


def _run_block(manager, grid_point, *args) -> None:
    """``BlockManager.run``: the block's threads, meeting at a ``_BlockBarrier``."""
    from numba.cuda.simulator.kernel import BlockThread

    barrier = _BlockBarrier(math.prod(manager._block_dim))

    def thread_body() -> None:
        try:
            manager._f(*args)
        finally:
            barrier.leave()

    threads = []
    for block_point in np.ndindex(*manager._block_dim):
        t = BlockThread(thread_body, manager, grid_point, block_point, manager._debug)
        t.block_barrier = barrier
        threads.append(t)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def _syncthreads(thread) -> None:
    thread.block_barrier.wait()


def _shared_array(shared, shape, dtype, alignment=None):
    """``FakeCUDAShared.array``: a block's threads get one array per call site (file and
    line), looked up in a dict and stored when missing; numba's own did both without a
    lock, and two threads switched between them each got an array of their own (the
    tiled matmul then read tiles its block never wrote: wrong results, seen when the
    threads switch often). Here under a lock, the caller found from its frame (numba
    formats the whole stack to find it: 15% of a simulated matmul launch)."""
    from numba.cuda.simulator import kernelapi

    if shape == 0 or alignment is not None:  # dynamic shared memory, or numba's error
        return _NUMBA_SHARED_ARRAY(shared, shape, dtype, alignment)
    if isinstance(dtype, kernelapi.types.Type):
        dtype = kernelapi.numpy_support.as_dtype(dtype)
    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno)
    with _SIMULATOR_LOCK:
        got = shared._allocations.get(key)
        if got is None:
            got = shared._allocations[key] = np.empty(shape, dtype)
    return got


def simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


class CudaStream:
    """A ``numba.cuda`` stream with the host streams' interface."""

    def __init__(self, index: int):
        self.index = index
        self.stream = _cuda().stream()

    def record(self):
        ev = _cuda().event()
        ev.record(self.stream)
        return ev

    def wait_event(self, event) -> None:
        event.wait(self.stream)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def submit(self, fn) -> None:
        # Host work on a CUDA stream: wait for the stream first (only the simulator's
        # communication and tests use this).
        self.stream.synchronize()
        fn()

    def poll(self) -> None:
        pass

    def close(self) -> None:
        pass


SIMULATED_BLOCKS = 2
"""The simulator runs every GPU thread as a Python thread: there a launch has at most
2 blocks of 32, and the kernels' grid-stride loops cover the rest (which also exercises
them on every launch)."""


def grid_for(total: int) -> tuple[int, int]:
    if simulated():
        return max(1, min(SIMULATED_BLOCKS, math.ceil(total / 32))), 32
    return max(1, min(MAX_BLOCKS, math.ceil(total / THREADS))), THREADS


def _address(a) -> int:
    """Device address of an array's first element (the simulator's numpy address)."""
    ary = getattr(a, "_ary", None)
    if ary is not None:
        return ary.__array_interface__["data"][0]
    return a.__cuda_array_interface__["data"][0]


class CudaDevice:
    """Buffers and compute on one GPU (see the module doc). In the simulator, launches
    from several rank threads are serialised (the simulator is not thread-safe).

    bf16 buffers are stored as their 16 bits (uint16 device arrays, numba has no bf16
    arrays); the device remembers which allocations hold bf16, and kernels convert on
    load and store (``numba_codegen.BF16_HELPERS``: ``numba.cuda.bf16`` on a GPU)."""

    target = "cuda"

    def __init__(self):
        self._kernels: dict[int, tuple[Any, list[tuple[str, Any, bool]]]] = {}
        self.simulated = simulated()
        if self.simulated:
            _adapt_simulator()
        self._sim_lock = threading.RLock()
        self._bf16: list[tuple[int, int]] = []
        self._temps: dict[tuple, Any] = {}

    # ------------------------------------------------------------------ bf16 bookkeeping
    def _mark_bf16(self, a) -> None:
        start = _address(a)
        self._bf16.append((start, start + 2 * max(1, math.prod(a.shape))))

    def is_bf16(self, a) -> bool:
        if getattr(a, "dtype", None) != np.uint16 or not self._bf16:
            return False
        at = _address(a)
        return any(lo <= at < hi for lo, hi in self._bf16)

    def dtype_name(self, a) -> str:
        """The element type a kernel sees in ``a`` ("bfloat16" for bf16 buffers)."""
        return "bfloat16" if self.is_bf16(a) else a.dtype.name

    def _run(self, kernel, blocks, threads, stream, *args) -> None:
        if self.simulated:
            with self._sim_lock:
                kernel[blocks, threads, stream.stream](*args)
        else:
            kernel[blocks, threads, stream.stream](*args)

    # ------------------------------------------------------------------ buffers
    def alloc(self, shape: Sequence[int], dtype: np.dtype):
        if dtype == BFLOAT16:
            a = _cuda().to_device(np.zeros(shape, dtype=np.uint16))
            self._mark_bf16(a)
            return a
        return _cuda().to_device(np.zeros(shape, dtype=dtype))

    def from_host(self, a: np.ndarray):
        if a.dtype == BFLOAT16:
            d = _cuda().to_device(np.ascontiguousarray(a).view(np.uint16))
            self._mark_bf16(d)
            return d
        return _cuda().to_device(np.ascontiguousarray(a))

    def to_host(self, a: Any) -> np.ndarray:
        if isinstance(a, np.ndarray) or np.isscalar(a):
            return np.asarray(a)
        host = a.copy_to_host()
        return host.view(BFLOAT16) if self.is_bf16(a) else host

    def host_view(self, a: Any) -> np.ndarray:
        """The numpy array behind a simulator device array (simulator only)."""
        host = a._ary if hasattr(a, "_ary") else np.asarray(a)
        return host.view(BFLOAT16) if self.is_bf16(a) else host

    def block(self, buf, index: int, dim: int, count: int):
        step = buf.shape[dim] // count
        return buf[(slice(None),) * dim + (slice(index * step, (index + 1) * step),)]

    def span(self, buf, dim: int, lo: int, n: int):
        """Elements ``lo .. lo + n`` of ``buf`` along ``dim`` (a view)."""
        return buf[(slice(None),) * dim + (slice(lo, lo + n),)]

    def copy(self, src, dst, stream) -> None:
        total = math.prod(dst.shape)
        if total == 0:
            return
        src_k = src if src.ndim else src.reshape(1)
        dst_k = dst if dst.ndim else dst.reshape(1)
        blocks, threads = grid_for(total)
        self._run(ck.copy_kernel(src_k.ndim, dst_k.ndim), blocks, threads, stream, src_k, dst_k, total)

    def copy_blocks(self, src, dst, src_dim: int, dst_dim: int, count: int, stream) -> None:
        total = math.prod(dst.shape)
        if total == 0:
            return
        blocks, threads = grid_for(total)
        self._run(ck.copy_blocks_kernel(src.ndim, dst.ndim, src_dim, dst_dim), blocks, threads, stream, src, dst, total, count)

    # ------------------------------------------------------------------ streams
    def stream(self, index: int) -> CudaStream:
        return CudaStream(index)

    # ------------------------------------------------------------------ kernels
    def kernel(self, kernel: rt.KernelOp):
        hit = self._kernels.get(id(kernel))
        if hit is None:
            fn = cg.compile_cuda(cg.cuda_source(kernel))
            kinds = []
            for p in kernel.params:
                t = p.type
                if isinstance(t, MemRefType):
                    kinds.append(("array", None, len(t.get_shape()) == 0))
                elif isinstance(t, IndexType):
                    kinds.append(("index", np.dtype(np.int64), False))
                else:
                    dt = numpy_dtype(t)
                    kinds.append(("scalar", np.dtype(np.float32) if dt == BFLOAT16 else dt, False))
            hit = self._kernels[id(kernel)] = (fn, kinds)
        return hit

    def launch(self, kernel: rt.KernelOp, args: Sequence[Any], stream: CudaStream) -> None:
        fn, kinds = self.kernel(kernel)
        call = []
        for (kind, dt, zero_d), a in zip(kinds, args):
            if kind == "array":
                call.append(a.reshape(1) if zero_d else a)
            else:
                call.append(dt.type(a))
        blocks, threads = grid_for(math.prod(kernel.space) or 1)
        self._run(fn, blocks, threads, stream, *call)

    # ------------------------------------------------------------------ library calls
    def contiguous(self, a, stream):
        if a.is_c_contiguous():
            return a
        tmp = self.alloc(a.shape, a.dtype)
        self.copy(a, tmp, stream)
        return tmp

    def matmul(self, a, b, c, stream, order=None, flags=None, flag_axes: tuple[int, ...] | None = None) -> None:
        """``c = a @ b`` by the tiled kernel; tiles in ``order`` (default: row-major),
        finished elements counted in ``flags`` per ready flag as ``flag_axes`` = (w1, d1,
        m1, s1, mult, w2, d2, m2, s2) say (``cuda_kernels.MATMUL``; default: one flag)."""
        cuda = _cuda()
        a3 = self.contiguous(a, stream)
        b3 = self.contiguous(b, stream)
        sa, sb = tuple(a3.shape), tuple(b3.shape)
        m, k, n = sa[len(sa) - 2], sa[len(sa) - 1], sb[len(sb) - 1]
        batch = math.prod(sa[:-2])  # not size / (m * k): a rank's contracted part may be empty
        a3 = a3.reshape(batch, m, k)
        b3 = b3.reshape(math.prod(sb[:-2]), k, n)
        c3 = c.reshape(batch, m, n) if c.is_c_contiguous() else self.alloc((batch, m, n), c.dtype)
        tile = ck.TILE
        tiles = batch * math.ceil(m / tile) * math.ceil(n / tile)
        if order is None:
            order = cuda.to_device(np.arange(tiles, dtype=np.int64), stream=stream.stream)
        if flags is None:
            flags = cuda.to_device(np.zeros(1, dtype=np.int64), stream=stream.stream)
        axes = flag_axes if flag_axes is not None else (1, 1, 1, 1 << 62, 0, 1, 1, 1, 1 << 62)
        self._run(ck.matmul_kernel(self.dtype_name(c), tile), tiles, (tile, tile), stream, a3, b3, c3, order, flags, *axes)
        if not c.is_c_contiguous():
            self.copy(c3.reshape(*tuple(c.shape)), c, stream)

    def reduce_tensor(self, kind: str, a, out, dims: Sequence[int], stream, count: float | None = None) -> None:
        cuda = _cuda()
        x = self.contiguous(a, stream)
        shape = list(a.shape)
        strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
        kept = [d for d in range(len(shape)) if d not in dims]
        arr = lambda v: cuda.to_device(np.array(v or [1], dtype=np.int64), stream=stream.stream)  # noqa: E731
        total_out = math.prod(shape[d] for d in kept)
        total_red = math.prod(shape[d] for d in dims)
        flat_out = self.contiguous(out, stream)
        blocks, threads = grid_for(total_out)
        self._run(ck.reduce_kernel(kind, self.dtype_name(out)), blocks, threads, stream,
            x.reshape(-1),
            flat_out.reshape(-1),
            total_out,
            total_red,
            arr([shape[d] for d in kept]),
            arr([strides[d] for d in kept] if kept else [0]),
            arr([shape[d] for d in dims]),
            arr([strides[d] for d in dims] if dims else [0]),
            np.float64(count if count is not None else max(total_red, 1)),
        )
        if flat_out is not out:
            self.copy(flat_out, out, stream)

    def embedding_bag(self, table, indices, row0: int, out, mode: str, stream) -> None:
        t = self.contiguous(table, stream)
        i = self.contiguous(indices, stream)
        o = self.contiguous(out, stream)
        if t.ndim == 2:
            t, i, o3 = t.reshape(1, *tuple(t.shape)), i.reshape(1, *tuple(i.shape)), o.reshape(1, *tuple(o.shape))
        else:
            o3 = o
        blocks, threads = grid_for(math.prod(o3.shape))
        self._run(ck.embedding_kernel(mode, self.dtype_name(out)), blocks, threads, stream, t, i, o3, np.int64(row0))
        if o is not out:
            self.copy(o, out, stream)

    def scatter_add(self, indices, updates, row0: int, out, stream) -> None:
        i = self.contiguous(indices, stream)
        u = self.contiguous(updates, stream)
        o = self.contiguous(out, stream)
        if i.ndim == 2:
            i, u, o3 = i.reshape(1, *tuple(i.shape)), u.reshape(1, *tuple(u.shape)), o.reshape(1, *tuple(o.shape))
        else:
            o3 = o
        t_n, _, d_n = tuple(o3.shape)
        blocks, threads = grid_for(t_n * d_n)
        self._run(ck.scatter_add_kernel(self.dtype_name(out)), blocks, threads, stream, i, u, o3, np.int64(row0))
        if o is not out:
            self.copy(o, out, stream)

    def sort(self, ins, outs, dim: int, stream) -> None:
        """``rt.sort``: one thread per column along ``dim`` (a stable insertion sort:
        quadratic in the sorted dim's length, meant for rows of up to a few thousand)."""
        shape = tuple(ins[0].shape)
        outer, n, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1 :])
        xs = [self.contiguous(x, stream).reshape(outer, n, inner) for x in ins]
        flat = [self.contiguous(y, stream) for y in outs]
        ys = [y.reshape(outer, n, inner) for y in flat]
        blocks, threads = grid_for(outer * inner)
        self._run(ck.sort_kernel(len(ins), self.dtype_name(ins[0])), blocks, threads, stream, *xs, *ys, outer, n, inner)
        for y, out in zip(flat, outs):
            if y is not out:
                self.copy(y, out, stream)

    def wait_flag(self, flags, index: int, target: int, stream: CudaStream) -> None:
        """Queue on ``stream`` a wait until ``flags[index] >= target``."""
        self._run(ck.wait_flag_kernel(), 1, 1, stream, flags, index, target)

    # ------------------------------------------------------------------ fused tile operators
    def tiled_matmul(self, a, b, c, plan, flags, stream: CudaStream) -> None:
        """``c = a @ b`` by one kernel whose output tiles run in ``plan``'s order (tiles
        bound for other ranks first) and count their finished elements per fused-
        operator tile in ``flags`` (``runtime/tiles.py``)."""
        from distir.runtime import tiles

        shape = tuple(c.shape)  # (the simulator's shapes take no negative indices)
        batch, m, n = shape[:-2], shape[-2], shape[-1]
        key = ("order", id(plan))
        order = self._temps.get(key)
        if order is None:
            host = tiles.kernel_tile_order(plan, batch, m, n, ck.TILE)
            order = self._temps[key] = _cuda().to_device(host, stream=stream.stream)
        self.matmul(a, b, c, stream, order=order, flags=flags, flag_axes=tiles.flag_axes(plan, tiles.matmul_axis(plan, batch)))

    def tiled_embedding(self, table, indices, row0: int, out, mode: str, plan, flags, stream: CudaStream) -> None:
        """Embedding bags pooled by one kernel in ``plan``'s order (bags bound for other
        ranks first), each bag counting its finished elements per tile in ``flags``."""
        from distir.runtime import tiles

        t = self.contiguous(table, stream)
        i = self.contiguous(indices, stream)
        o3 = out
        if t.ndim == 2:
            t, i, o3 = t.reshape(1, *tuple(t.shape)), i.reshape(1, *tuple(i.shape)), out.reshape(1, *tuple(out.shape))
        key = ("bags", id(plan))
        order = self._temps.get(key)
        if order is None:
            order = self._temps[key] = _cuda().to_device(tiles.bag_order(plan), stream=stream.stream)
        axes = tiles.flag_axes(plan, tiles.embedding_axis(plan))
        threads = min(THREADS, max(32, -(-o3.shape[2] // 32) * 32)) if not self.simulated else 8
        bags = o3.shape[0] * o3.shape[1]
        self._run(ck.embedding_tiled_kernel(mode, self.dtype_name(out)), bags, threads, stream, t, i, o3, np.int64(row0), order, flags, *axes)

    def reduce_tile(self, kind: str, terms, out, stream: CudaStream) -> None:
        """``out = kind(terms)`` element-wise in list order (``out`` may be a term)."""
        if len(terms) == 1:
            if terms[0] is not out:
                self.copy(terms[0], out, stream)
            return
        # one accumulator per stream (rank threads share a simulated device)
        key = ("acc", id(stream), tuple(out.shape), out.dtype.str, self.is_bf16(out))
        acc = self._temps.get(key)
        if acc is None:
            acc = self._temps[key] = self.alloc(tuple(out.shape), BFLOAT16 if self.is_bf16(out) else out.dtype)
        self.copy(terms[0], acc, stream)
        name = self.dtype_name(out)
        nd = max(1, len(out.shape))
        total = math.prod(out.shape)
        blocks, threads = grid_for(total)
        acc_k = acc if acc.ndim else acc.reshape(1)
        for j, term in enumerate(terms[1:]):
            scale = 1.0 / len(terms) if kind == "avg" and j == len(terms) - 2 else 0.0
            t = term if term.ndim else term.reshape(1)
            self._run(ck.combine_kernel(kind, name, nd), blocks, threads, stream, t, acc_k, total, scale)
        self.copy(acc, out, stream)
