"""The host device: numpy buffers, kernels compiled with ``numba.njit`` and numpy/BLAS
library calls, queued on host streams (``streams.py``). Used by the ``local`` and
``mpi`` backends.

numba has no f16/bf16 arithmetic on the CPU and no bf16 arrays: a kernel takes an array
of those types as a uint16 view of its bits, no copy, and converts each element on load
and store (``numba_codegen.HALF_HELPERS``; it computes in f32, as the GPU kernels do). A
half scalar parameter is passed as an f32.
"""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import memref
from xdsl.dialects.builtin import IndexType, MemRefType

from distir.dialects import rt
from distir.lowering import numba_codegen as cg
from distir.runtime import bulk, interpreter
from distir.runtime.buffers import new_buffer
from distir.runtime.scattered import ScatteredArray, bucket_table, copy_into
from distir.runtime.streams import SyncStream, ThreadStream
from distir.runtime.values import is_half, numpy_dtype, reduce_arrays

_F32 = np.dtype(np.float32)


class KernelInfo:
    """A compiled CPU kernel and what its parameters are."""

    def __init__(self, kernel: rt.KernelOp, parallel: bool):
        self.kernel = kernel
        self.source = cg.cpu_source(kernel)
        self.fn = cg.compile_cpu(self.source, parallel=parallel)
        params = list(kernel.params)
        loads = {op.memref for op in kernel.body.block.ops if isinstance(op, memref.LoadOp)}
        stores = {op.memref for op in kernel.body.block.ops if isinstance(op, memref.StoreOp)}
        self.kinds: list[tuple[str, Any, bool, bool, bool]] = []
        for p in params:
            t = p.type
            if isinstance(t, MemRefType):
                dt = numpy_dtype(t.element_type)
                self.kinds.append(("array", dt, p in loads, p in stores, len(t.get_shape()) == 0))
            elif isinstance(t, IndexType):
                self.kinds.append(("index", np.dtype(np.int64), False, False, False))
            else:
                self.kinds.append(("scalar", numpy_dtype(t), False, False, False))
        self.zero_copy: dict[tuple, Any] = {}


class HostDevice:
    """Buffers and compute of one process's ranks (shared by the rank threads of the
    ``local`` backend)."""

    target = "cpu"

    def __init__(self, parallel: bool = False, abort: threading.Event | None = None, on_error=None, blas_threads: int = 1):
        self.parallel = parallel
        self.blas_threads = blas_threads
        self.abort = abort
        self.on_error = on_error
        self._kernels: dict[int, KernelInfo] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ buffers
    def alloc(self, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
        return new_buffer(shape, dtype)

    def from_host(self, a: np.ndarray) -> np.ndarray:
        return a

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def block(self, buf: np.ndarray, index: int, dim: int, count: int) -> np.ndarray:
        step = buf.shape[dim] // count
        return buf[(slice(None),) * dim + (slice(index * step, (index + 1) * step),)]

    def span(self, buf: np.ndarray, dim: int, lo: int, n: int) -> np.ndarray:
        """Elements ``lo .. lo + n`` of ``buf`` along ``dim`` (a view)."""
        return buf[(slice(None),) * dim + (slice(lo, lo + n),)]

    def copy(self, src: np.ndarray, dst: np.ndarray, stream, stream_from: int | None = None) -> None:
        """``rt.copy`` (streaming stores from ``stream_from`` bytes on: the program's
        ``stream_from``)."""
        if isinstance(src, ScatteredArray) or isinstance(dst, ScatteredArray):
            stream.submit(lambda: copy_into(dst.reshape(-1), src.reshape(-1), stream_from))
            return
        stream.submit(lambda: _copy(src, dst, stream_from))

    def copy_blocks(self, src: np.ndarray, dst: np.ndarray, src_dim: int, dst_dim: int, count: int, stream) -> None:
        """``rt.copy_blocks``: one numpy copy between views of both buffers as ``count``
        blocks (a buffer passed in pieces: block by block)."""
        if isinstance(src, ScatteredArray) or isinstance(dst, ScatteredArray):
            for j in range(count):
                self.copy(self.block(src, j, src_dim, count), self.block(dst, j, dst_dim, count), stream)
            return
        stream.submit(lambda: _copy_blocks(src, dst, src_dim, dst_dim, count))

    # ------------------------------------------------------------------ streams
    def stream(self, index: int):
        if index == 0:
            return SyncStream(0)
        stream = ThreadStream(index, f"stream{index}", self.abort, self.on_error)
        stream.submit(lambda: limit_blas_threads(self.blas_threads))
        return stream

    # ------------------------------------------------------------------ kernels
    def kernel(self, kernel: rt.KernelOp) -> KernelInfo:
        info = self._kernels.get(id(kernel))
        if info is None:
            with self._lock:
                info = self._kernels.get(id(kernel))
                if info is None:
                    info = self._kernels[id(kernel)] = KernelInfo(kernel, self.parallel)
        return info

    def launch(self, kernel: rt.KernelOp, args: Sequence[Any], stream) -> None:
        if any(isinstance(a, ScatteredArray) for a in args):
            self.launch_bucketed(kernel, args, stream)
            return
        info = self.kernel(kernel)
        aliases = _aliases(info, args)
        fn = info.fn if not aliases else self._variant(info, ("alias", aliases), lambda: cg.cpu_source(kernel, aliases=aliases))

        def run():
            fn(*_call_args(info, args))

        stream.submit(run)

    def _variant(self, info: KernelInfo, key: tuple, source):
        fn = info.zero_copy.get(key)
        if fn is None:
            with self._lock:
                fn = info.zero_copy.get(key)
                if fn is None:
                    fn = info.zero_copy[key] = cg.compile_cpu(source(), parallel=self.parallel)
        return fn

    def launch_bucketed(self, kernel: rt.KernelOp, args: Sequence[Any], stream) -> None:
        """A kernel over scattered tensors: the bucket-table variant, each scattered
        argument passed as the tuple of its pieces (no packing)."""
        info = self.kernel(kernel)
        scattered = tuple(i for i, a in enumerate(args) if isinstance(a, ScatteredArray))
        lengths = {args[i].lengths for i in scattered}
        if len(lengths) != 1:
            raise RuntimeError(f"kernel @{kernel.kernel_name}: scattered arguments with different pieces {sorted(lengths)}")
        key = ("bucketed", scattered)
        fn = info.zero_copy.get(key)
        if fn is None:
            with self._lock:
                fn = info.zero_copy.get(key)
                if fn is None:
                    fn = info.zero_copy[key] = cg.compile_cpu(cg.cpu_source(kernel, cg.Bucketed(scattered)), parallel=self.parallel)
        table = bucket_table(next(iter(lengths)))

        def run():
            plain = [np.zeros(1, np.float32) if i in scattered else a for i, a in enumerate(args)]
            call = _call_args(info, plain)
            for i in scattered:
                call[i] = tuple(_bits(p) for p in args[i].pieces)
            fn(*call, table)

        stream.submit(run)

    # ------------------------------------------------------------------ library calls
    @staticmethod
    def _no_scattered(op: str, *bufs) -> None:
        if any(isinstance(b, ScatteredArray) for b in bufs):
            raise RuntimeError(f"{op} does not take scattered tensors (only element-wise kernels and collectives do)")

    def matmul(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, stream) -> None:
        self._no_scattered("rt.matmul", a, b, c)
        stream.submit(lambda: _matmul(a, b, c))

    def reduce_tensor(self, kind: str, a: np.ndarray, out: np.ndarray, dims: Sequence[int], stream, count: float | None = None) -> None:
        self._no_scattered("rt.reduce_tensor", a, out)
        stream.submit(lambda: _assign(out, interpreter.reduce_tensor(a, kind, dims, count)))

    def embedding_bag(self, table, indices, row0: int, out, mode: str, stream) -> None:
        self._no_scattered("rt.embedding_bag", table, indices, out)
        stream.submit(lambda: embedding_into(table, indices, row0, out, mode))

    def scatter_add(self, indices, updates, row0: int, out, stream) -> None:
        self._no_scattered("rt.scatter_add", indices, updates, out)
        held = out.shape[-2]
        stream.submit(lambda: _assign(out, interpreter.scatter_add(indices, updates, row0, held, out.dtype)))

    def sort(self, ins, outs, dim: int, stream) -> None:
        self._no_scattered("rt.sort", *ins, *outs)

        def run() -> None:
            for out, y in zip(outs, interpreter.sort_along(ins, dim)):
                _assign(out, y)

        stream.submit(run)

    # ------------------------------------------------------------------ fused tile operators
    # Synchronous pieces of the fused computation-collective operators (runtime/tiles.py):
    # each computes one tile straight into a view (which may be a peer's buffer).
    def matmul_into(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        matmul_into(a, b, out)

    def embedding_into(self, table, indices, row0: int, out, mode: str) -> None:
        embedding_into(table, indices, row0, out, mode)

    def reduce_tile(self, kind: str, terms: Sequence[np.ndarray], out: np.ndarray, stream) -> None:
        """``out = kind(terms)`` element-wise, in list order (``values.reduce_arrays``)."""
        stream.submit(lambda: _assign(out, reduce_arrays(list(terms), kind, out.dtype)))

    # ------------------------------------------------------------------ zero-copy fused collectives
    def zero_copy_fused(self, comm, kernel, args, reduce_param, gather_params, send, fulls, op, count, stream) -> bool:
        """Run a fused all-reduce planned ``zero_copy`` (``rt.fused``) as one kernel over
        this rank's block: reduce straight from the peers' send buffers into parameter
        ``reduce_param``, write the outputs ``gather_params`` straight into every peer's
        gathered buffer (``fulls``). The plan guarantees the shape, the types and the
        stream; what it cannot know is where the buffers a run is given live: when a peer
        cannot see one of them (a step's caller's buffer outside the shared memory) it
        returns False on every rank of the group, having run nothing, and the executor
        does what the plan says for that case (``else sequential``: the group's ops as
        they read; otherwise it fails)."""
        exchange = getattr(comm, "peer_buffers", None)
        if exchange is None:
            raise RuntimeError("'rt.fused' is planned zero_copy, but this communicator does not share buffers between ranks")
        if any(isinstance(a, ScatteredArray) for a in (send, *fulls, *args)):
            raise RuntimeError("'rt.fused' is planned zero_copy over a scattered buffer (plan the program with its scattered arguments)")
        info = self.kernel(kernel)
        call = _call_args(info, args)
        # Parameters that are this rank's block of a gathered buffer are read through
        # that buffer (one pointer for the in-place read and write: the loop vectorises).
        base = comm.rank * count
        own = []
        for p, a in enumerate(args):
            if not isinstance(a, np.ndarray) or p in gather_params or a.ndim == 0 or not a.flags.c_contiguous:
                continue
            for g, full in zip(gather_params, fulls):
                if a.size == count and a.dtype == full.dtype and _ptr(a) == _ptr(full) + base * full.itemsize:
                    own.append((p, g))
        aliases = _aliases(info, args)
        variant = cg.ZeroCopy(comm.size, op, reduce_param, gather_params, tuple(own), comm.rank)
        fn = self._variant(info, (variant, aliases), lambda: cg.cpu_source(kernel, variant, aliases))
        peers = exchange([send.reshape(-1), *[f.reshape(-1) for f in fulls]])
        if peers is None:
            return False
        try:
            flat_sends = [_bits(p[0]) for p in peers]
            flat_fulls = [[_bits(p[1 + k]) for p in peers] for k in range(len(fulls))]
            extra = flat_sends + [a for fs in flat_fulls for a in fs] + [np.int64(base)]
            fn(*call, *extra)
        finally:
            comm.peer_barrier()
        return True


_BLAS_SETTER: Any = None


def limit_blas_threads(n: int) -> None:
    """Let BLAS calls of the calling thread use at most ``n`` threads (numpy's OpenBLAS;
    no-op elsewhere). Rank threads sharing the cores keep BLAS from oversubscribing."""
    global _BLAS_SETTER
    if _BLAS_SETTER is None:
        import ctypes
        import glob
        import os

        _BLAS_SETTER = False
        libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
        for path in glob.glob(os.path.join(libdir, "*openblas*")):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            fn = getattr(lib, "openblas_set_num_threads_local", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                _BLAS_SETTER = fn
                break
    if _BLAS_SETTER:
        _BLAS_SETTER(int(n))


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _aliases(info: KernelInfo, args: Sequence[Any]) -> tuple[tuple[int, int], ...]:
    """(parameter, earlier parameter) pairs of array arguments that are the same buffer
    (same address, shape and strides)."""
    seen: dict[tuple, int] = {}
    out = []
    for p, ((kind, *_), a) in enumerate(zip(info.kinds, args)):
        if kind != "array" or not isinstance(a, np.ndarray):
            continue
        key = (_ptr(a), a.shape, a.strides, a.dtype.str)
        if key in seen:
            out.append((p, seen[key]))
        else:
            seen[key] = p
    return tuple(out)


def _copy(src: np.ndarray, dst: np.ndarray, stream_from: int | None) -> None:
    if stream_from is not None and src.flags.c_contiguous and dst.flags.c_contiguous:
        bulk.copy(dst.reshape(-1), src.reshape(-1), stream_from)
        return
    dst[...] = src.reshape(dst.shape)


def blocks_view(a: np.ndarray, dim: int, count: int) -> np.ndarray:
    """A view of ``a`` as ``count`` blocks along ``dim``, stacked first: ``[count,
    *block shape]`` (writes go to ``a``)."""
    step = a.shape[dim] // count
    shape = (count, *a.shape[:dim], step, *a.shape[dim + 1 :])
    strides = (a.strides[dim] * step, *a.strides[:dim], a.strides[dim], *a.strides[dim + 1 :])
    return np.lib.stride_tricks.as_strided(a, shape, strides, writeable=True)


def _copy_blocks(src: np.ndarray, dst: np.ndarray, src_dim: int, dst_dim: int, count: int) -> None:
    out = blocks_view(dst, dst_dim, count)
    out[...] = blocks_view(src, src_dim, count).reshape(out.shape)


def _assign(out: np.ndarray, value: np.ndarray) -> None:
    out[...] = np.asarray(value).reshape(out.shape)


def _matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    if a.dtype in (np.float32, np.float64):
        # BLAS wants contiguous operands (numpy's matmul of strided stacks does not use it).
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        out = c if c.flags.c_contiguous else np.empty(c.shape, c.dtype)
        if b.ndim == 2 and a.ndim > 2:
            rows = int(np.prod(a.shape[:-1], dtype=np.int64))  # (not -1: a dim may be 0)
            np.matmul(a.reshape(rows, a.shape[-1]), b, out=out.reshape(rows, out.shape[-1]))
        else:
            np.matmul(a, b, out=out)
        if out is not c:
            c[...] = out
        return
    c[...] = interpreter.matmul(a, b, c.dtype)


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b`` (``b`` 2-d or batched like ``a``) written straight into ``out``,
    which may be a strided view (a block of another rank's buffer): one BLAS call per
    2-d slab, each reading and writing its operands in place."""
    if a.dtype not in (np.float32, np.float64) or out.dtype != a.dtype or b.dtype != a.dtype:
        out[...] = interpreter.matmul(a, b, out.dtype)
        return
    lead = a.shape[:-2]
    if not lead:
        np.matmul(a, b, out=out)
        return
    for idx in np.ndindex(*lead):
        np.matmul(a[idx], b if b.ndim == 2 else b[idx], out=out[idx])


_EMBEDDING: dict[str, Any] = {}


def _embedding_kernel(mode: str):
    """A numba loop pooling bags of table rows (3-d views: tables, bags, features)
    straight into ``out``: the rows of a bag are added one after the other (as
    ``interpreter.embedding_bag`` does, in the table's precision), each row a
    vectorised pass over the features; rows outside this rank's block count as 0."""
    fn = _EMBEDDING.get(mode)
    if fn is not None:
        return fn
    if mode == "max":
        init = "-np.inf"
        step = "v = row[d]\na = o[d]\nif a == a and (v != v or v > a):\n    o[d] = v"
        zero = "a = o[d]\nif a == a and a < 0:\n    o[d] = 0"
    else:
        init = "0"
        step = "o[d] += row[d]"
        zero = "pass"
    step, zero = (textwrap.indent(x, " " * 24) for x in (step, zero))
    value = "o[d] / bag" if mode == "mean" else "o[d]"
    # The bag accumulates in a small contiguous buffer (vectorised even when ``out`` is
    # a strided view, e.g. a block of a peer's buffer), stored into ``out`` once.
    src = f"""import numpy as np


def pool(table, indices, row0, out):
    t_n, b_n, d_n = out.shape
    held = table.shape[1]
    bag = indices.shape[2]
    o = np.empty(d_n, dtype=table.dtype)
    for t in range(t_n):
        for b in range(b_n):
            for d in range(d_n):
                o[d] = {init}
            for l in range(bag):
                r = indices[t, b, l] - row0
                if r >= 0 and r < held:
                    row = table[t, r]
                    for d in range(d_n):
{step}
                else:
                    for d in range(d_n):
{zero}
            dst = out[t, b]
            for d in range(d_n):
                dst[d] = {value}
"""
    fn = _EMBEDDING[mode] = cg.compile_cpu(cg.KernelSource("pool", src, "cpu", []))
    return fn


def embedding_into(table: np.ndarray, indices: np.ndarray, row0: int, out: np.ndarray, mode: str) -> None:
    """Bags of rows of ``table`` (this rank's rows ``row0 ..``) pooled straight into
    ``out`` (any view): a numba loop for f32/f64 tables, ``interpreter.embedding_bag``
    otherwise. The same code serves ``rt.embedding_bag`` and the fused embedding +
    All-to-All, so that the two differ only in where the rows go."""
    if table.dtype not in (np.float32, np.float64) or out.dtype != table.dtype:
        _assign(out, interpreter.embedding_bag(table, indices, mode, row0, table.shape[-2], out.dtype))
        return
    if table.ndim == 2:
        table, indices, out = table[None], indices[None], out[None]
    _embedding_kernel(mode)(table, indices, np.int64(row0), out)


def _bits(a: Any) -> Any:
    """A half-precision array as the uint16 view of its bits (how kernels take it)."""
    return a.view(np.uint16) if isinstance(a, np.ndarray) and is_half(a.dtype) else a


def _call_args(info: KernelInfo, args: Sequence[Any]) -> list[Any]:
    """The kernel's arguments: half arrays as their bits (no copy), half scalars as f32."""
    call: list[Any] = []
    for (kind, dt, _loaded, _stored, zero_d), a in zip(info.kinds, args):
        if kind == "array":
            arr = a.reshape(1) if zero_d else a
            call.append(_bits(arr))
        else:
            call.append(_F32.type(a) if is_half(dt) else dt.type(a))
    return call
