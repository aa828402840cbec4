"""Large copies use streaming stores (``runtime/bulk.py``), and the local backend's
element-wise reductions compile to vector loops (``runtime/local.py``): the two things
that decide how fast a collective of the shared-memory runtime moves a large buffer."""

from __future__ import annotations

import re
import threading

import numba
import numpy as np
import pytest

from distir.lowering.numba_codegen import DEFAULT_FASTMATH
from distir.runtime import bulk
from distir.runtime.local import _reducer, reduce_into
from distir.runtime.scattered import copy_into


@pytest.fixture
def small_threshold(monkeypatch):
    """Stream from 1 KiB, so that odd sizes and offsets are cheap to cover."""
    monkeypatch.setattr(bulk, "STREAM_FROM", 1024)


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64, np.int64])
@pytest.mark.parametrize("dst_offset", [0, 1, 3, 8])
@pytest.mark.parametrize("src_offset", [0, 5])
def test_streamed_copy_writes_exactly_the_destination(small_threshold, dtype, dst_offset, src_offset):
    n = 1000 + 7  # not a multiple of the 32-byte vector: a tail is left over
    src = np.arange(n + src_offset, dtype=np.int64).astype(dtype)[src_offset:]
    dst = np.zeros(n + dst_offset + 5, dtype)
    bulk.copy(dst[dst_offset : dst_offset + n], src)
    assert np.array_equal(dst[dst_offset : dst_offset + n], src)
    assert not dst[:dst_offset].any() and not dst[dst_offset + n :].any()  # nothing outside


def test_copies_that_cannot_stream_fall_back_to_numpy(small_threshold):
    src = np.arange(4096, dtype=np.float64)
    cast = np.zeros(4096, np.float32)
    bulk.copy(cast, src)  # dtypes differ: numpy converts
    assert np.array_equal(cast, src.astype(np.float32))
    strided = np.zeros(8192, np.float64)[::2]
    bulk.copy(strided, src)  # not contiguous
    assert np.array_equal(strided, src)
    tiny = np.zeros(3, np.float64)
    bulk.copy(tiny, src[:3])  # below the threshold
    assert np.array_equal(tiny, src[:3])


def test_streamed_copy_emits_nontemporal_stores_and_a_fence(small_threshold):
    src = np.arange(2048, dtype=np.float32)
    bulk.copy(np.zeros_like(src), src)
    # a fresh compilation of the same function (numba does not show cached code)
    fresh = numba.njit(nogil=True)(bulk._compiled().py_func)
    fresh(np.zeros(64, np.uint8), np.ones(64, np.uint8))
    (llvm,) = fresh.inspect_llvm().values()
    assert "!nontemporal" in llvm
    assert "fence seq_cst" in llvm


def test_copy_into_streams_large_buffers_between_threads(small_threshold):
    """Two threads copy into each other's buffers (an all-gather's pattern) and read
    them after a barrier: every byte is there (the stores were fenced)."""
    n = 1 << 16
    bufs = [np.zeros(2 * n, np.float32) for _ in range(2)]
    for r in range(2):
        bufs[r][r * n : (r + 1) * n] = np.arange(n, dtype=np.float32) + r * n
    barrier = threading.Barrier(2)
    seen: list[np.ndarray] = [None, None]  # type: ignore[list-item]

    def rank(r: int) -> None:
        copy_into(bufs[1 - r][r * n : (r + 1) * n], bufs[r][r * n : (r + 1) * n])
        barrier.wait()
        seen[r] = bufs[r].copy()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = np.arange(2 * n, dtype=np.float32)
    assert all(np.array_equal(s, expected) for s in seen)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduction_loop_is_vectorised(dtype):
    """The reduction over peers' buffers runs between arbitrary bounds; with a signed
    start numba's negative-index fix-up kept LLVM from vectorising it (6x slower)."""
    fn = _reducer(2, 2, "avg")
    a, b = np.arange(100, dtype=dtype), np.ones(100, dtype)
    out = [np.zeros(100, dtype), np.zeros(100, dtype)]
    reduce_into("avg", [a, b], out, 10, 90)
    assert np.array_equal(out[0][10:90], ((a + b) / 2)[10:90]) and np.array_equal(out[1], out[0])
    assert not out[0][:10].any() and not out[0][90:].any()
    fresh = numba.njit(error_model="numpy", fastmath=set(DEFAULT_FASTMATH))(fn.py_func)  # not cached: inspectable
    fresh(a, b, *out, 10, 90)
    (llvm,) = fresh.inspect_llvm().values()
    scalar = "float" if dtype == np.float32 else "double"
    assert re.search(rf"load <\d+ x {scalar}>", llvm), "the reduction loop loads no vectors"
