"""The fixed CUDA kernels of the runtime, run in numba's CUDA simulator against numpy: the
tiled matmul in a permuted tile order with its per-chunk ready flags, the flag wait,
strided copies, tensor reductions and embedding bags. Each check runs in a subprocess
(the simulator must be chosen before numba.cuda is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba.cuda", reason="the GPU extra (numba-cuda) is not installed")

PRELUDE = """
import warnings
warnings.simplefilter("ignore")
import numpy as np
from numba import cuda
from distir.runtime.cuda import CudaDevice, CudaStream
from distir.runtime import cuda_kernels as ck
dev = CudaDevice()
s = CudaStream(0)
rng = np.random.default_rng(0)
"""


def simulate(code: str) -> None:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK"), proc.stdout


def test_matmul_in_tile_order_with_ready_flags():
    """Tiles computed in a permuted order (ring: start at the last chunk) give the same
    product, and each chunk's flag counts the tiles of its rows."""
    simulate(
        """
        a = rng.random((2, 40, 24), dtype=np.float32)
        b = rng.random((24, 20), dtype=np.float32)
        c = dev.alloc((2, 40, 20), np.float32)
        tiles_m, tiles_n = 3, 2                   # ceil(40/16), ceil(20/16)
        per_chunk = 3                             # row tiles per chunk: one chunk per batch
        order = np.concatenate([np.arange(6, 12), np.arange(0, 6)])  # batch 1 first
        flags = cuda.to_device(np.zeros(2, np.int32))
        dev.matmul(dev.from_host(a), dev.from_host(b), c, s, order=cuda.to_device(order), flags=flags, rows_per_chunk=per_chunk)
        got = dev.to_host(c)
        assert np.allclose(got, a @ b, rtol=1e-5), abs(got - a @ b).max()
        assert list(flags.copy_to_host()) == [tiles_m * tiles_n, tiles_m * tiles_n]
        dev.wait_flag(flags, 1, tiles_m * tiles_n, s)   # returns: the flag is set
        print("OK")
        """
    )


def test_matmul_half_and_batched_rhs():
    simulate(
        """
        a = rng.random((3, 5, 7)).astype(np.float16)
        b = rng.random((3, 7, 4)).astype(np.float16)
        c = dev.alloc((3, 5, 4), np.float16)
        dev.matmul(dev.from_host(a), dev.from_host(b), c, s)
        want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
        assert np.allclose(dev.to_host(c).astype(np.float32), want.astype(np.float32), rtol=1e-2)
        print("OK")
        """
    )


def test_strided_copies():
    simulate(
        """
        x = rng.random((4, 6), dtype=np.float32)
        src = dev.from_host(x)
        dst = dev.alloc((2, 4, 3), np.float32)
        dev.copy(dev.block(src, 1, 1, 2), dev.block(dst, 1, 0, 2), s)   # columns 3..5 into dst[1]
        got = dev.to_host(dst)
        assert np.array_equal(got[1], x[:, 3:6]) and not got[0].any()
        print("OK")
        """
    )


@pytest.mark.parametrize("kind", ["sum", "avg", "prod", "max", "min"])
def test_reductions(kind):
    simulate(
        f"""
        from distir.runtime.interpreter import reduce_tensor
        for dt in (np.float32, np.int32):
            x = (rng.random((3, 4, 5)) * 4).astype(dt)
            out = dev.alloc((4,), dt)
            dev.reduce_tensor("{kind}", dev.from_host(x), out, [0, 2], s)
            want = reduce_tensor(x, "{kind}", [0, 2])
            assert np.allclose(dev.to_host(out), want, rtol=1e-5), (dev.to_host(out), want)
        print("OK")
        """
    )


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bags(mode):
    simulate(
        f"""
        from distir.runtime.interpreter import embedding_bag
        table = rng.random((2, 10, 3), dtype=np.float32)
        idx = rng.integers(0, 20, size=(2, 4, 3)).astype(np.int32)
        out = dev.alloc((2, 4, 3), np.float32)
        row0 = 10 if "{mode}" == "sum" else 0
        if row0 == 0:
            idx %= 10
        dev.embedding_bag(dev.from_host(table), dev.from_host(idx), row0, out, "{mode}", s)
        want = embedding_bag(table, idx, "{mode}", row0, 20, np.dtype(np.float32))
        assert np.allclose(dev.to_host(out), want, rtol=1e-5)
        print("OK")
        """
    )
