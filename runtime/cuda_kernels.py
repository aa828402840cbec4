"""The fixed CUDA kernels of the GPU runtime (the generated element-wise kernels come from
``lowering/numba_codegen.py``): a tiled matmul that emits its output tiles in a given
order and counts finished tiles per chunk in ready flags (``coll.overlap``: CoCoNet's
MatMul that produces chunks in the order the AllReduce consumes them, with a spin-lock
on a memory buffer), a kernel that waits for such a flag, strided copies, tensor
reductions and embedding bags.

Each kernel is written as source specialised by element/accumulator type and compiled
once (``numba_codegen``'s module cache), so that it can run in the CUDA simulator,
compile to PTX for any compute capability and be assembled by ``ptxas``.
"""

from __future__ import annotations

import textwrap
import threading
from typing import Any

from distir.lowering import numba_codegen as cg

TILE = 16
"""Square tile edge of the matmul (TILE x TILE threads per block)."""

FLAGS = """

@cuda.jit(device=True, inline=True)
def _flag(c_last, c_mid, c_batch, w1, d1, m1, s1, mult, w2, d2, m2, s2):
    # The ready flag of an element: (c1 // s1) * mult + c2 // s2, each coordinate its
    # last-dim (w 2), second-last-dim (w 1) or batch coordinate ((c_batch // d) % m, w 0).
    c1 = c_last if w1 == 2 else (c_mid if w1 == 1 else (c_batch // d1) % m1)
    c2 = c_last if w2 == 2 else (c_mid if w2 == 1 else (c_batch // d2) % m2)
    return (c1 // s1) * mult + c2 // s2


@cuda.jit(device=True, inline=True)
def _tally(flags, f, last, count):
    # Count one finished element for flag f; the running count of the previous flag is
    # added to it (atomically) when the flag changes (f = -2 flushes).
    if f != last:
        if count > 0:
            cuda.atomic.add(flags, last, count)
        return f, 1
    return last, count + 1

"""
"""Device functions of the kernels that count finished elements per ready flag."""

_LOCK = threading.Lock()
_CACHE: dict[tuple, Any] = {}

MATMUL = """
import numba
import numpy as np
from numba import cuda
{flags}
TILE = {tile}


def matmul(a, b, c, order, flags, w1, d1, m1, s1, mult, w2, d2, m2, s2):
    # a: [B, M, K], b: [1 or B, K, N], c: [B, M, N]; block i computes tile order[i].
    # A tile is (batch, row tile, column tile) in row-major order. After its stores,
    # each finished element counts 1 in its ready flag (c1 // s1) * mult + c2 // s2,
    # where c1, c2 are its column (w 2), row (w 1) or (batch // d) % m (w 0): the
    # per-tile flags of the fused tile operators (a single flag when s1, s2 are large).
    sa = cuda.shared.array((TILE, TILE), numba.{acc})
    sb = cuda.shared.array((TILE, TILE), numba.{acc})
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    nb, m, k = a.shape
    n = c.shape[2]
    tiles_m = (m + TILE - 1) // TILE
    tiles_n = (n + TILE - 1) // TILE
    tile = order[cuda.blockIdx.x]
    bat = tile // (tiles_m * tiles_n)
    rest = tile % (tiles_m * tiles_n)
    ti = rest // tiles_n
    tj = rest % tiles_n
    bb = bat if b.shape[0] > 1 else 0
    row = ti * TILE + ty
    col = tj * TILE + tx
    acc = numba.{acc}(0)
    for k0 in range(0, k, TILE):
        if row < m and k0 + tx < k:
            sa[ty, tx] = {load}(a[bat, row, k0 + tx])
        else:
            sa[ty, tx] = numba.{acc}(0)
        if col < n and k0 + ty < k:
            sb[ty, tx] = {load}(b[bb, k0 + ty, col])
        else:
            sb[ty, tx] = numba.{acc}(0)
        cuda.syncthreads()
        for kk in range(TILE):
            acc += sa[ty, kk] * sb[kk, tx]
        cuda.syncthreads()
    if row < m and col < n:
        c[bat, row, col] = {cast}(acc)
    cuda.threadfence()
    cuda.syncthreads()
    # one thread per row of the tile counts the row's finished elements per flag
    if tx == 0 and row < m:
        last = -1
        count = 0
        for cc in range(TILE):
            cidx = tj * TILE + cc
            if cidx < n:
                f = _flag(cidx, row, bat, w1, d1, m1, s1, mult, w2, d2, m2, s2)
                last, count = _tally(flags, f, last, count)
        _tally(flags, -2, last, count)
"""

WAIT_FLAG = """
from numba import cuda


def wait_flag(flags, index, target):
    # One thread spins until flags[index] >= target (an atomic read: add 0).
    if cuda.grid(1) == 0:
        while cuda.atomic.add(flags, index, 0) < target:
            pass
"""

COPY = """
from numba import cuda


def copy(src, dst, total):
    for g in range(cuda.grid(1), total, cuda.gridsize(1)):
{body}
"""

COPY_BLOCKS = """
from numba import cuda


def copy_blocks(src, dst, total, count):
    per = total // count
    for flat in range(cuda.grid(1), total, cuda.gridsize(1)):
        j = flat // per
        g = flat % per
{body}
"""

REDUCE = """
import math
import numba
import numpy as np
from numba import cuda


def reduce(x, out, total_out, total_red, kept_shape, kept_strides, red_shape, red_strides, divisor):
    # x: flat contiguous input; out: flat output; one thread per output element.
    for o in range(cuda.grid(1), total_out, cuda.gridsize(1)):
        base = 0
        rest = o
        for d in range(kept_shape.shape[0] - 1, -1, -1):
            base += (rest % kept_shape[d]) * kept_strides[d]
            rest //= kept_shape[d]
        acc = {init}
        for r in range(total_red):
            off = base
            rest = r
            for d in range(red_shape.shape[0] - 1, -1, -1):
                off += (rest % red_shape[d]) * red_strides[d]
                rest //= red_shape[d]
            v = {load}(x[off])
            {combine}
        {finish}
        out[o] = {cast}(acc)
"""

EMBEDDING = """
import numba
import numpy as np
from numba import cuda


def embedding_bag(table, indices, out, row0):
    # table [T, R, D], indices [T, B, L], out [T, B, D]; one thread per output element.
    t_n, b_n, d_n = out.shape
    rows = table.shape[1]
    bag = indices.shape[2]
    total = t_n * b_n * d_n
    for g in range(cuda.grid(1), total, cuda.gridsize(1)):
        d = g % d_n
        b = (g // d_n) % b_n
        t = g // (d_n * b_n)
{pool}
"""


SCATTER_ADD = """
import numba
import numpy as np
from numba import cuda


def scatter_add(indices, updates, out, row0):
    # indices [T, B, L], updates [T, B, D], out [T, R, D] (rows row0 ..); one thread per
    # (t, d) walks the (b, l) pairs in order: the sums are deterministic.
    t_n, r_n, d_n = out.shape
    b_n, bag = indices.shape[1], indices.shape[2]
    for g in range(cuda.grid(1), t_n * d_n, cuda.gridsize(1)):
        d = g % d_n
        t = g // d_n
        for r in range(r_n):
            out[t, r, d] = {cast}(0)
        for b in range(b_n):
            v = {load}(updates[t, b, d])
            for l in range(bag):
                r = indices[t, b, l] - row0
                if r >= 0 and r < r_n:
                    out[t, r, d] = {cast}({load}(out[t, r, d]) + v)
"""


EMBEDDING_TILED = """
import numba
import numpy as np
from numba import cuda
{flags}

def embedding_tiled(table, indices, out, row0, order, flags, w1, d1, m1, s1, mult, w2, d2, m2, s2):
    # table [T, R, D], indices [T, B, L], out [T, B, D]; block i pools bag order[i]
    # (flat t * B + b), its threads over d. Then thread 0 counts the bag's finished
    # elements per ready flag (c1 // s1) * mult + c2 // s2, where c1, c2 are the
    # element's feature (w 2), bag (w 1) or (t // d) % m (w 0).
    t_n, b_n, d_n = out.shape
    rows = table.shape[1]
    bag = indices.shape[2]
    item = order[cuda.blockIdx.x]
    t = item // b_n
    b = item % b_n
    for d in range(cuda.threadIdx.x, d_n, cuda.blockDim.x):
{pool}
    cuda.threadfence()
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        last = -1
        count = 0
        for d in range(d_n):
            last, count = _tally(flags, _flag(d, b, t, w1, d1, m1, s1, mult, w2, d2, m2, s2), last, count)
        _tally(flags, -2, last, count)
"""

COMBINE = """
import numba
import numpy as np
from numba import cuda


def combine(src, dst, total, scale):
    # dst = dst (op) src element-wise over same-shaped arrays (any strides); scale != 0
    # multiplies the result (an average's 1/n).
    for g in range(cuda.grid(1), total, cuda.gridsize(1)):
{body}
"""


def _compile(key: tuple, source: str, name: str):
    from numba import cuda

    with _LOCK:
        fn = _CACHE.get(key)
        if fn is None:
            mod = cg._load_module(source, "cuda-rt")
            fn = _CACHE[key] = cuda.jit(getattr(mod, name))
    return fn


def cast(dtype_name: str) -> str:
    """The conversion to an element type in a kernel (numpy's for float16; bf16 is
    stored as its 16 bits)."""
    if dtype_name == "bfloat16":
        return "_bf16_store"
    return f"np.{dtype_name}" if dtype_name == "float16" else f"numba.{dtype_name}"


def acc_type(dtype_name: str) -> str:
    """Accumulator of an element type: f32 for f16/bf16/f32, f64 for f64, int64 for ints."""
    if dtype_name in ("float16", "float32", "bfloat16"):
        return "float32"
    if dtype_name == "float64":
        return "float64"
    return "int64"


def load(dtype_name: str) -> str:
    """The conversion of an element read from an array to the accumulator type."""
    if dtype_name == "bfloat16":
        return "_bf16_load"
    return f"numba.{acc_type(dtype_name)}"


def matmul_source(dtype_name: str, tile: int = TILE) -> str:
    return _with_bf16(dtype_name, MATMUL.format(tile=tile, acc=acc_type(dtype_name), cast=cast(dtype_name), load=load(dtype_name), flags=FLAGS))


def matmul_kernel(dtype_name: str, tile: int = TILE):
    return _compile(("matmul", dtype_name, tile), matmul_source(dtype_name, tile), "matmul")


def wait_flag_kernel():
    return _compile(("wait_flag",), WAIT_FLAG, "wait_flag")


def copy_source(src_ndim: int, dst_ndim: int) -> str:
    body = []

    def unravel(prefix: str, ndim: int, arr: str) -> str:
        if ndim == 0:
            return "0"
        body.extend(f"        {x}" for x in cg.unravel(ndim, lambda d: f"{arr}.shape[{d}]", prefix, f"{prefix}r"))
        return ", ".join(f"{prefix}{d}" for d in range(ndim))

    si = unravel("s", src_ndim, "src")
    di = unravel("d", dst_ndim, "dst")
    body.append(f"        dst[{di}] = src[{si}]")
    return COPY.format(body="\n".join(body))


def copy_kernel(src_ndim: int, dst_ndim: int):
    return _compile(("copy", src_ndim, dst_ndim), copy_source(src_ndim, dst_ndim), "copy")


def copy_blocks_source(src_ndim: int, dst_ndim: int, src_dim: int, dst_dim: int) -> str:
    """``rt.copy_blocks``: thread element ``g`` of block ``j`` reads the ``g``-th element of
    block ``j`` of ``src`` along ``src_dim`` and writes it to the same of ``dst``."""
    body = []

    def unravel(prefix: str, ndim: int, arr: str, dim: int) -> str:
        def extent(d: int) -> str:
            return f"({arr}.shape[{d}] // count)" if d == dim else f"{arr}.shape[{d}]"

        body.extend(f"        {x}" for x in cg.unravel(ndim, extent, prefix, f"{prefix}r"))
        body.append(f"        {prefix}{dim} += j * {extent(dim)}")
        return ", ".join(f"{prefix}{d}" for d in range(ndim))

    si = unravel("s", src_ndim, "src", src_dim)
    di = unravel("d", dst_ndim, "dst", dst_dim)
    body.append(f"        dst[{di}] = src[{si}]")
    return COPY_BLOCKS.format(body="\n".join(body))


def copy_blocks_kernel(src_ndim: int, dst_ndim: int, src_dim: int, dst_dim: int):
    return _compile(("copy_blocks", src_ndim, dst_ndim, src_dim, dst_dim), copy_blocks_source(src_ndim, dst_ndim, src_dim, dst_dim), "copy_blocks")


_REDUCTIONS = {
    "sum": ("numba.{acc}(0)", "acc += v", ""),
    "avg": ("numba.{acc}(0)", "acc += v", "acc = acc / divisor"),
    "prod": ("numba.{acc}(1)", "acc *= v", ""),
    "max": ("numba.{acc}(-math.inf)", "acc = v if v > acc or v != v else acc", ""),
    "min": ("numba.{acc}(math.inf)", "acc = v if v < acc or v != v else acc", ""),
}


def reduce_source(kind: str, dtype_name: str) -> str:
    acc = acc_type(dtype_name)
    init, combine, finish = _REDUCTIONS[kind]
    if acc == "int64" and kind in ("max", "min"):
        init = "numba.int64(-(2**62))" if kind == "max" else "numba.int64(2**62)"
        combine = "acc = v if v > acc else acc" if kind == "max" else "acc = v if v < acc else acc"
    if acc == "int64" and kind == "avg":
        finish = "acc = numba.int64(abs(acc) // divisor) * (1 if acc >= 0 else -1)"
    src = REDUCE.format(init=init.format(acc=acc), combine=combine, finish=finish or "pass", acc=acc, cast=cast(dtype_name), load=load(dtype_name))
    return _with_bf16(dtype_name, src)


def reduce_kernel(kind: str, dtype_name: str):
    return _compile(("reduce", kind, dtype_name), reduce_source(kind, dtype_name), "reduce")


POOL = """acc = {init}
for l in range(bag):
    r = indices[t, b, l] - row0
    if r >= 0 and r < rows:
        v = {load}(table[t, r, d])
    else:
        v = numba.{acc}(0)
    {combine}
{finish}
out[t, b, d] = {cast}(acc)"""
"""One output element (t, b, d) of an embedding bag, pooled (both embedding kernels)."""


def _pool(mode: str, dtype_name: str) -> str:
    acc = acc_type(dtype_name)
    init, combine, finish = _pooling(mode, acc)
    body = POOL.format(init=init, combine=combine, finish=finish, acc=acc, cast=cast(dtype_name), load=load(dtype_name))
    return textwrap.indent(body, " " * 8)


def _pooling(mode: str, acc: str) -> tuple[str, str, str]:
    if mode == "max":
        return f"numba.{acc}(-math.inf)", "acc = v if v > acc else acc", "pass"
    return f"numba.{acc}(0)", "acc += v", "acc = acc / bag" if mode == "mean" else "pass"


def embedding_source(mode: str, dtype_name: str) -> str:
    src = EMBEDDING.format(pool=_pool(mode, dtype_name))
    return _with_bf16(dtype_name, "import math\n" + src)


def embedding_tiled_source(mode: str, dtype_name: str) -> str:
    src = EMBEDDING_TILED.format(pool=_pool(mode, dtype_name), flags=FLAGS)
    return _with_bf16(dtype_name, "import math\n" + src)


def embedding_tiled_kernel(mode: str, dtype_name: str):
    return _compile(("embedding_tiled", mode, dtype_name), embedding_tiled_source(mode, dtype_name), "embedding_tiled")


_COMBINE_OPS = {
    "sum": "a + b",
    "avg": "a + b",
    "prod": "a * b",
    "max": "a if a > b or a != a else b",
    "min": "a if a < b or a != a else b",
}


def combine_source(kind: str, dtype_name: str, ndim: int) -> str:
    """``dst = dst (kind) src`` element-wise over ``ndim``-d arrays, computed in the
    accumulator type (``scale`` != 0 multiplies the result)."""
    acc = acc_type(dtype_name)
    lines = [f"        {x}" for x in cg.unravel(ndim, lambda d: f"dst.shape[{d}]")]
    idx = ", ".join(f"i{d}" for d in range(ndim))
    ld = load(dtype_name)
    lines.append(f"        a = {ld}(dst[{idx}])")
    lines.append(f"        b = {ld}(src[{idx}])")
    lines.append(f"        v = {_COMBINE_OPS[kind]}")
    lines.append("        if scale != 0:")
    lines.append(f"            v = v * numba.{acc}(scale)")
    lines.append(f"        dst[{idx}] = {cast(dtype_name)}(v)")
    return _with_bf16(dtype_name, COMBINE.format(body="\n".join(lines)))


def combine_kernel(kind: str, dtype_name: str, ndim: int):
    return _compile(("combine", kind, dtype_name, ndim), combine_source(kind, dtype_name, ndim), "combine")


def _with_bf16(dtype_name: str, source: str) -> str:
    """bf16 elements are stored as their 16 bits (uint16 arrays); kernels over them
    convert with the helpers of ``numba_codegen.BF16_HELPERS``."""
    if dtype_name != "bfloat16":
        return source
    return source.replace("from numba import cuda\n", "from numba import cuda\n" + cg.BF16_HELPERS, 1)


def scatter_add_source(dtype_name: str) -> str:
    return _with_bf16(dtype_name, SCATTER_ADD.format(cast=cast(dtype_name), load=load(dtype_name)))


def scatter_add_kernel(dtype_name: str):
    return _compile(("scatter_add", dtype_name), scatter_add_source(dtype_name), "scatter_add")


SORT = """
import numba
import numpy as np
from numba import cuda


@cuda.jit(device=True, inline=True)
def _before(a, b):
    # a strictly before b: NaN after everything (and equal to NaN), -0.0 equal to +0.0
    if a != a:
        return False
    if b != b:
        return True
    return a < b


def sort({params}, outer, n, inner):
    # arrays viewed as [outer, n, inner]; one thread per (o, i) sorts its column of the
    # keys y0 (a stable insertion sort), moving the other operands alike.
    for g in range(cuda.grid(1), outer * inner, cuda.gridsize(1)):
        o = g // inner
        i = g % inner
        for j in range(n):
{copy}
        for j in range(1, n):
{hold}
            m = j - 1
            while m >= 0 and _before({key}, {key_at_m}):
{shift}
                m -= 1
{place}
"""


def sort_source(count: int, key_dtype: str) -> str:
    """The sort kernel of ``count`` operands (``x0 ..`` in, ``y0 ..`` out) whose keys
    have element type ``key_dtype`` (bf16 keys are compared as floats)."""
    xs, ys = [f"x{k}" for k in range(count)], [f"y{k}" for k in range(count)]
    load = "_bf16_load" if key_dtype == "bfloat16" else ""
    copy = "\n".join(f"            {y}[o, j, i] = {x}[o, j, i]" for x, y in zip(xs, ys))
    hold = "\n".join(f"            h{k} = {y}[o, j, i]" for k, y in enumerate(ys))
    shift = "\n".join(f"                {y}[o, m + 1, i] = {y}[o, m, i]" for y in ys)
    place = "\n".join(f"            {y}[o, m + 1, i] = h{k}" for k, y in enumerate(ys))
    src = SORT.format(params=", ".join(xs + ys), copy=copy, hold=hold, shift=shift, place=place, key=f"{load}(h0)", key_at_m=f"{load}(y0[o, m, i])")
    return _with_bf16(key_dtype, src)


def sort_kernel(count: int, key_dtype: str):
    return _compile(("sort", count, key_dtype), sort_source(count, key_dtype), "sort")


def embedding_kernel(mode: str, dtype_name: str):
    return _compile(("embedding", mode, dtype_name), embedding_source(mode, dtype_name), "embedding_bag")
