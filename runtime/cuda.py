"""The CUDA device of the ``nccl`` backend: numba-cuda device arrays, generated CUDA
kernels (``numba_codegen.cuda_source``), the fixed kernels of ``cuda_kernels.py`` and
CUDA streams and events. It runs in numba's CUDA simulator too (``NUMBA_ENABLE_CUDASIM=1``
set before numba.cuda is first imported), where every launch completes at once; there
``host_view`` gives the numpy array behind a device array.
"""

from __future__ import annotations

import math
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


def _cuda():
    from numba import cuda

    return cuda


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


def grid_for(total: int) -> tuple[int, int]:
    threads = 32 if simulated() else THREADS
    return max(1, min(MAX_BLOCKS, math.ceil(total / threads))), threads


class CudaDevice:
    """Buffers and compute on one GPU (see the module doc). In the simulator, launches
    from several rank threads are serialised (the simulator is not thread-safe)."""

    target = "cuda"

    def __init__(self):
        self._kernels: dict[int, tuple[Any, list[tuple[str, Any, bool]]]] = {}
        self.simulated = simulated()
        self._sim_lock = threading.RLock()

    def _run(self, kernel, blocks, threads, stream, *args) -> None:
        if self.simulated:
            with self._sim_lock:
                kernel[blocks, threads, stream.stream](*args)
        else:
            kernel[blocks, threads, stream.stream](*args)

    # ------------------------------------------------------------------ buffers
    def alloc(self, shape: Sequence[int], dtype: np.dtype):
        if dtype == BFLOAT16:
            raise RuntimeError("bf16 buffers are not supported on the GPU")
        return _cuda().to_device(np.zeros(shape, dtype=dtype))

    def from_host(self, a: np.ndarray):
        if a.dtype == BFLOAT16:
            raise RuntimeError("bf16 buffers are not supported on the GPU")
        return _cuda().to_device(np.ascontiguousarray(a))

    def to_host(self, a: Any) -> np.ndarray:
        if isinstance(a, np.ndarray) or np.isscalar(a):
            return np.asarray(a)
        return a.copy_to_host()

    def host_view(self, a: Any) -> np.ndarray:
        """The numpy array behind a simulator device array (simulator only)."""
        return a._ary if hasattr(a, "_ary") else np.asarray(a)

    def block(self, buf, index: int, dim: int, count: int):
        step = buf.shape[dim] // count
        return buf[(slice(None),) * dim + (slice(index * step, (index + 1) * step),)]

    def copy(self, src, dst, stream) -> None:
        total = math.prod(dst.shape)
        if total == 0:
            return
        src_k = src if src.ndim else src.reshape(1)
        dst_k = dst if dst.ndim else dst.reshape(1)
        blocks, threads = grid_for(total)
        self._run(ck.copy_kernel(src_k.ndim, dst_k.ndim), blocks, threads, stream, src_k, dst_k, total)

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
                    kinds.append(("scalar", numpy_dtype(t), False))
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

    def matmul(self, a, b, c, stream, order=None, flags=None, rows_per_chunk: int = 1 << 30) -> None:
        """``c = a @ b`` by the tiled kernel; tiles in ``order`` (default: row-major),
        finished tiles counted per chunk of row tiles in ``flags``."""
        cuda = _cuda()
        a3 = self.contiguous(a, stream)
        b3 = self.contiguous(b, stream)
        sa, sb = tuple(a3.shape), tuple(b3.shape)
        m, k, n = sa[len(sa) - 2], sa[len(sa) - 1], sb[len(sb) - 1]
        batch = math.prod(sa) // (m * k)
        a3 = a3.reshape(batch, m, k)
        b3 = b3.reshape(math.prod(sb) // (k * n), k, n)
        c3 = c.reshape(batch, m, n) if c.is_c_contiguous() else self.alloc((batch, m, n), c.dtype)
        tile = ck.TILE
        tiles = batch * math.ceil(m / tile) * math.ceil(n / tile)
        if order is None:
            order = cuda.to_device(np.arange(tiles, dtype=np.int64), stream=stream.stream)
        if flags is None:
            flags = cuda.to_device(np.zeros(max(1, tiles), dtype=np.int32), stream=stream.stream)
        self._run(ck.matmul_kernel(c.dtype.name, tile), tiles, (tile, tile), stream, a3, b3, c3, order, flags, rows_per_chunk)
        if not c.is_c_contiguous():
            self.copy(c3.reshape(*tuple(c.shape)), c, stream)

    def reduce_tensor(self, kind: str, a, out, dims: Sequence[int], stream) -> None:
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
        self._run(ck.reduce_kernel(kind, out.dtype.name), blocks, threads, stream,
            x.reshape(-1),
            flat_out.reshape(-1),
            total_out,
            total_red,
            arr([shape[d] for d in kept]),
            arr([strides[d] for d in kept] if kept else [0]),
            arr([shape[d] for d in dims]),
            arr([strides[d] for d in dims] if dims else [0]),
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
        self._run(ck.embedding_kernel(mode, out.dtype.name), blocks, threads, stream, t, i, o3, np.int64(row0))
        if o is not out:
            self.copy(o, out, stream)

    def wait_flag(self, flags, index: int, target: int, stream: CudaStream) -> None:
        """Queue on ``stream`` a wait until ``flags[index] >= target``."""
        self._run(ck.wait_flag_kernel(), 1, 1, stream, flags, index, target)
