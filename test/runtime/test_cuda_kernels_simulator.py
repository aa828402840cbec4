"""The fixed CUDA kernels of the runtime, run in numba's CUDA simulator against numpy: the
tiled matmul in a permuted tile order with its per-chunk ready flags, the flag wait,
strided copies, block copies (``rt.copy_blocks``), tensor reductions and embedding bags.
The checks run in a subprocess (the simulator must be chosen before numba.cuda is
imported), one for the file: each check is a fresh namespace there (its own device,
stream and generator); starting Python, numba and the simulator took ~1 s of CPU per
check when each had its own."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
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


SERVER = """
import contextlib, io, json, sys, traceback
interval = sys.getswitchinterval()
for line in sys.stdin:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(json.loads(line), "<check>", "exec"), {"__name__": "__check__"})
        error = None
    except BaseException:
        error = traceback.format_exc()
    sys.setswitchinterval(interval)  # a check may change it
    print(json.dumps({"out": out.getvalue(), "error": error}), flush=True)
"""
"""The simulator's process: runs each check it reads (a JSON string per line) in a fresh
namespace and answers what it printed and the traceback of what it raised."""

TIMEOUT = 600
_server: dict = {}


@pytest.fixture(scope="module", autouse=True)
def simulator_process():
    """The file's simulator process, ended with the file."""
    yield
    if "proc" in _server:
        proc = _server.pop("proc")
        proc.stdin.close()
        proc.wait(timeout=60)
        _server.pop("stderr").close()


def simulate(code: str) -> None:
    """Run ``PRELUDE`` + ``code`` in the simulator's process; it must print ``OK``."""
    if "proc" not in _server:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        _server["stderr"] = tempfile.TemporaryFile("w+")  # read when a check fails (a pipe could fill)
        _server["proc"] = subprocess.Popen(
            [sys.executable, "-c", SERVER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=_server["stderr"], text=True
        )
    proc = _server["proc"]
    proc.stdin.write(json.dumps(PRELUDE + textwrap.dedent(code)) + "\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
    line = proc.stdout.readline() if ready else ""
    if not line:  # ended, or hung: the next check starts a new process
        proc.kill()
        _server.pop("proc")
        err = _server.pop("stderr")
        err.seek(0)
        pytest.fail(f"the simulator's process {'ended' if ready else f'did not answer in {TIMEOUT} s'}:\n{err.read()[-3000:]}")
    reply = json.loads(line)
    assert reply["error"] is None, reply["error"][-3000:]
    assert reply["out"].strip().endswith("OK"), reply["out"]


def test_a_simulated_block_meets_at_syncthreads_without_its_returned_threads():
    """The simulator's blocks meet at a barrier (``runtime/cuda.py``): threads that
    returned do not hold the others at ``syncthreads``, ``syncthreads_count`` counts
    the threads that meet, every block of the grid runs, and a thread's exception
    (here before the barrier the others wait at) is raised by the launch, naming the
    thread."""
    simulate(
        """
        import numba

        @cuda.jit
        def rotate(out):
            t = cuda.threadIdx.x
            b = cuda.blockIdx.x
            if t >= 8:
                return
            sh = cuda.shared.array(8, numba.float32)
            sh[t] = t + 10 * b
            cuda.syncthreads()
            out[b, t] = sh[(t + 1) % 8]
            out[b, 8 + t] = cuda.syncthreads_count(t % 2)

        out = np.zeros((3, 16), np.float32)
        rotate[3, 16](out)
        want = np.array([[(t + 1) % 8 + 10 * b for t in range(8)] + [4] * 8 for b in range(3)], np.float32)
        assert (out == want).all(), out

        @cuda.jit
        def fails(out):
            t = cuda.threadIdx.x
            if t == 3:
                raise ValueError("thread three")
            cuda.syncthreads()
            out[t] = 1

        try:
            fails[1, 8](np.zeros(8, np.float32))
        except ValueError as e:
            assert "thread three" in str(e) and "tid=[3, 0, 0]" in str(e), e
        else:
            raise AssertionError("the launch did not raise")
        print("OK")
        """
    )


def test_a_blocks_threads_share_each_shared_array():
    """In the simulator, every thread of a block that calls ``cuda.shared.array`` at one
    line gets the same array, even when threads switch at every few instructions
    (numba-cuda's lookup-then-store gave some threads arrays of their own: 4 blocks of
    100 here, wrong tiled products in the suite); two lines give two arrays."""
    simulate(
        """
        import sys, threading
        from numba.cuda.simulator import kernelapi
        sys.setswitchinterval(1e-6)
        split = 0
        for block in range(300):
            shared = kernelapi.FakeCUDAShared(0)
            got = []
            start = threading.Barrier(16)
            def thread():
                start.wait()
                got.append(id(shared.array((16, 16), np.float32)))
            threads = [threading.Thread(target=thread) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            split += len(set(got)) != 1
        assert split == 0, f"{split} of 300 blocks' threads got arrays of their own"
        a = shared.array((2,), np.float32)
        b = shared.array((2,), np.float32)
        again = [shared.array((3,), np.float32) for _ in range(2)]
        assert a is not b and again[0] is again[1]
        print("OK")
        """
    )


def test_matmul_in_tile_order_with_ready_flags():
    """Tiles computed in a permuted order (batch 1 first) give the same product, and the
    ready flags count finished elements per batch (which 0), per row block (which 1) or
    per column block (which 2)."""
    simulate(
        """
        a = rng.random((2, 40, 24), dtype=np.float32)
        b = rng.random((24, 20), dtype=np.float32)
        order = np.concatenate([np.arange(6, 12), np.arange(0, 6)])  # 3 x 2 tiles per batch
        huge = 1 << 62
        for which, div, mod, span, want in [(0, 1, 2, 1, [800, 800]), (1, 1, 1, 8, [320] * 5), (2, 1, 1, 5, [400] * 4)]:
            c = dev.alloc((2, 40, 20), np.float32)
            flags = cuda.to_device(np.zeros(len(want), np.int64))
            dev.matmul(dev.from_host(a), dev.from_host(b), c, s, order=cuda.to_device(order), flags=flags, flag_axes=(which, div, mod, span, 1, which, div, mod, huge))
            got = dev.to_host(c)
            assert np.allclose(got, a @ b, rtol=1e-5), abs(got - a @ b).max()
            assert list(flags.copy_to_host()) == want, (which, list(flags.copy_to_host()))
            dev.wait_flag(flags, len(want) - 1, want[-1], s)   # returns: the flag is set
        print("OK")
        """
    )


def test_tiled_kernels_of_the_fused_operators():
    """The GPU side of the fused tile operators: the matmul in remote-first tile order and
    the embedding bags in remote-first bag order, each counting finished elements per
    fused-operator tile; the reduction of tiles (avg) over strided views."""
    simulate(
        """
        from distir.runtime import tiles
        from distir.runtime.interpreter import embedding_bag
        from distir.dialects.rt import tile_order
        # rank 1 of 2, result [4, 32] cut along dim 1 into 2 blocks of 2 tiles
        plan = tiles.TilePlan("reduce", "remote_first", 2, 1, 2, 1, None, True, "sum", (4, 32), tile_order("remote_first", 2, 1))
        a = rng.random((4, 16), dtype=np.float32)
        b = rng.random((16, 32), dtype=np.float32)
        c = dev.alloc((4, 32), np.float32)
        flags = dev.alloc((4,), np.int64)
        dev.tiled_matmul(dev.from_host(a), dev.from_host(b), c, plan, flags, s)
        assert np.allclose(dev.to_host(c), a @ b, rtol=1e-5)
        assert list(flags.copy_to_host()) == [32] * 4
        order = tiles.kernel_tile_order(plan, (), 4, 32, ck.TILE)
        assert list(order) == [0, 1]   # column tiles 0-15 (rank 0's block) first
        # embedding bags [T=2, B=8, D=4] cut along the bag dim for rank 0 of 2
        eplan = tiles.TilePlan("all_to_all", "remote_first", 2, 0, 2, 1, 0, False, None, (2, 8, 4), tile_order("remote_first", 2, 0))
        bags = tiles.bag_order(eplan)
        assert sorted(bags) == list(range(16)) and all(b % 8 >= 4 for b in bags[:8])
        table = rng.random((2, 10, 4), dtype=np.float32)
        idx = rng.integers(0, 10, size=(2, 8, 3)).astype(np.int32)
        out = dev.alloc((2, 8, 4), np.float32)
        eflags = dev.alloc((4,), np.int64)
        dev.tiled_embedding(dev.from_host(table), dev.from_host(idx), 0, out, "sum", eplan, eflags, s)
        want = embedding_bag(table, idx, "sum", 0, 10, np.dtype(np.float32))
        assert np.allclose(dev.to_host(out), want, rtol=1e-5)
        assert list(eflags.copy_to_host()) == [16] * 4
        # reduce tiles (strided column blocks) in list order, averaged
        x = rng.random((3, 4, 8), dtype=np.float32)
        bufs = [dev.from_host(x[i]) for i in range(3)]
        terms = [bb[:, 2:6] for bb in bufs]
        dev.reduce_tile("avg", terms, terms[1], s)
        assert np.allclose(dev.to_host(bufs[1])[:, 2:6], x[:, :, 2:6].mean(axis=0), rtol=1e-5)
        assert np.array_equal(dev.to_host(bufs[1])[:, :2], x[1][:, :2])
        print("OK")
        """
    )


BF16_PROGRAM = """dist.mesh @world shape = [1]
func.func @f(%x: !dist.tensor<6x8xbf16, @world, [replicated]>, %y: !dist.tensor<6x8xbf16, @world, [replicated]>, %k: bf16) -> !dist.tensor<6x8xbf16, @world, [replicated]> {
  %z = dist.map(%x, %y, %k) : (!dist.tensor<6x8xbf16, @world, [replicated]>, !dist.tensor<6x8xbf16, @world, [replicated]>, bf16) -> !dist.tensor<6x8xbf16, @world, [replicated]> {
  ^bb0(%a: bf16, %b: bf16, %c: bf16):
    %m = arith.mulf %a, %c : bf16
    %r = arith.addf %m, %b : bf16
    dist.yield %r : bf16
  }
  func.return %z : !dist.tensor<6x8xbf16, @world, [replicated]>
}"""


def test_bf16_buffers_and_kernels():
    """bf16 buffers hold their bits on the device; generated kernels and the matmul,
    reduction and embedding kernels convert on load and store (round to nearest even)."""
    simulate(
        f"""
        import ml_dtypes
        from distir.dialects.context import parse_module
        from distir.runtime.executor import LoweredProgram
        from distir.runtime.interpreter import embedding_bag
        bf16 = np.dtype(ml_dtypes.bfloat16)
        x = (rng.random((6, 8)) * 4 - 2).astype(bf16)
        d = dev.from_host(x)
        assert dev.is_bf16(d) and dev.is_bf16(d[2:4]) and np.array_equal(dev.to_host(d), x)
        a = rng.random((3, 5, 7)).astype(bf16)
        b = rng.random((7, 4)).astype(bf16)
        c = dev.alloc((3, 5, 4), bf16)
        dev.matmul(dev.from_host(a), dev.from_host(b), c, s)
        want = (a.astype(np.float32) @ b.astype(np.float32)).astype(bf16)
        got = dev.to_host(c).astype(np.float32)
        assert np.allclose(got, want.astype(np.float32), rtol=1e-2), abs(got - want.astype(np.float32)).max()
        out = dev.alloc((8,), bf16)
        dev.reduce_tensor("sum", d, out, [0], s)
        assert np.allclose(dev.to_host(out).astype(np.float32), x.astype(np.float32).sum(axis=0), rtol=1e-2)
        table = rng.random((2, 10, 4)).astype(bf16)
        idx = rng.integers(0, 10, size=(2, 5, 3)).astype(np.int32)
        pooled = dev.alloc((2, 5, 4), bf16)
        dev.embedding_bag(dev.from_host(table), dev.from_host(idx), 0, pooled, "sum", s)
        want = embedding_bag(table, idx, "sum", 0, 10, bf16)
        assert np.allclose(dev.to_host(pooled).astype(np.float32), want.astype(np.float32), rtol=1e-2)
        program = LoweredProgram.build(parse_module({BF16_PROGRAM!r}), None, 1)
        (kernel,) = program.kernels.values()
        y = rng.random((6, 8)).astype(bf16)
        z = dev.alloc((6, 8), bf16)
        dev.launch(kernel, [d, dev.from_host(y), np.array(1.5, bf16)[()], z], s)
        want = (x.astype(np.float32) * np.float32(1.5) + y.astype(np.float32)).astype(bf16)
        assert np.array_equal(dev.to_host(z), want), (dev.to_host(z), want)
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


def test_copy_blocks():
    """``rt.copy_blocks``: pack the blocks along dim 1 of a buffer side by side, spread
    them back into a strided view (one kernel each)."""
    simulate(
        """
        x = rng.random((6, 8), dtype=np.float32)
        packed = dev.alloc((4, 6, 2), np.float32)
        dev.copy_blocks(dev.from_host(x), packed, 1, 0, 4, s)
        want = np.stack(np.split(x, 4, axis=1))
        assert np.array_equal(dev.to_host(packed), want)
        wide = dev.alloc((6, 16), np.float32)
        dev.copy_blocks(packed, wide[:, ::2], 0, 1, 4, s)
        got = dev.to_host(wide)
        assert np.array_equal(got[:, ::2], x) and not got[:, 1::2].any()
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
