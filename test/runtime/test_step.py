"""The per-rank step API (``runtime/step.py``): a program compiled once and called
repeatedly by each rank on its own buffers, in place, in threads (``local``) and under
``mpiexec -n 2`` (``mpi``); equal to the reference interpreter; bad buffers rejected on
every rank without a hang."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.threads import on_threads

from distir.dialects.diagnostics import InputRejected
from distir.runtime import host, step
from distir.runtime.interpreter import interpret
from distir.runtime.mpi import mpiexec_path

ROOT = Path(__file__).resolve().parents[2]
ADAM = (ROOT / "examples" / "adam.mlir").read_text().replace("1048576", "4096")
FUSED = "fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m,v},fuse-allreduce{targets=avg_rs}"
SCALARS = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8)


def reference(g, p, m, v, steps: int, n: int):
    """``steps`` Adam steps of the program as written, by the interpreter."""
    for t in range(1, steps + 1):
        inputs = {"g": g, "p": p, "m": m, "v": v, "t": np.float32(t), **{k: np.float32(x) for k, x in SCALARS.items()}}
        p, m, v = interpret(ADAM, None, inputs, n)
    return p, m, v


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("pipeline", [None, FUSED], ids=["AR-Adam", "fuse(RS-Adam-AG)"])
def test_repeated_steps_equal_the_interpreter(n, pipeline):
    rng = np.random.default_rng(n)
    g = rng.standard_normal((n, 4096)).astype(np.float32)
    p0 = rng.standard_normal(4096).astype(np.float32)
    zeros = np.zeros(4096, np.float32)
    program = step.compile(ADAM, ranks=n, pipeline=pipeline)
    comms = step.local_comms(n)

    def rank(r):
        s = step.Step(program, comms[r])
        G, P, M, V = (s.empty(x) for x in "gpmv")
        G[...] = g[r]
        P[...] = p0
        for t in range(1, 4):
            s(G, P, M, V, *SCALARS.values(), float(t))
        return P.copy(), M.copy(), s

    outs = on_threads(n, rank)
    p, m, _ = reference(g, p0, zeros, zeros, 3, n)
    for r, (P, M, s) in enumerate(outs):
        np.testing.assert_allclose(P, p, rtol=1e-6, atol=1e-7)
        block = M.size
        np.testing.assert_allclose(M, m[r * block : (r + 1) * block] if block < 4096 else m, rtol=1e-6, atol=1e-7)
    if pipeline == FUSED:
        assert outs[0][2].argument("m").shape == (4096 // n,)  # the state is sliced (ZeRO-1)


def test_fused_step_runs_zero_copy_and_builds_once(monkeypatch):
    """The fused schedule runs as one zero-copy kernel per call; kernels and plans are
    made on the first call and reused."""
    calls = []
    real = host.HostDevice.zero_copy_fused

    def spy(self, *a, **k):
        done = real(self, *a, **k)
        calls.append(done)
        return done

    monkeypatch.setattr(host.HostDevice, "zero_copy_fused", spy)
    program = step.compile(ADAM, ranks=2, pipeline=FUSED)
    comms = step.local_comms(2)

    def rank(r):
        s = step.Step(program, comms[r])
        bufs = [s.empty(x) for x in "gpmv"]
        sizes = []
        for t in range(1, 5):
            s(*bufs, *SCALARS.values(), float(t))
            sizes.append((len(s.device._kernels), len(s.executor.persistent), len(s.executor.fused_plans)))
        return sizes

    for sizes in on_threads(2, rank):
        assert len(set(sizes)) == 1  # nothing new after the first call
    assert calls == [True] * 8


MIXED = """dist.mesh @world shape = [?]
func.func @sgd_mixed(%g: !dist.tensor<4096xbf16, @world, [local]>, %p: !dist.tensor<4096xbf16, @world, [replicated]>,
                     %w: !dist.tensor<4096xf32, @world, [replicated]>, %lr: f32)
    -> (!dist.tensor<4096xbf16, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<4096xf32, @world, [replicated]> {dist.inplace = 2 : i64}) {
  %avg = coll.all_reduce avg %g : !dist.tensor<4096xbf16, @world, [local]> -> !dist.tensor<4096xbf16, @world, [replicated]>
  %a = dist.cast %avg : !dist.tensor<4096xbf16, @world, [replicated]> -> !dist.tensor<4096xf32, @world, [replicated]>
  %w1 = dist.map(%w, %a, %lr) : (!dist.tensor<4096xf32, @world, [replicated]>, !dist.tensor<4096xf32, @world, [replicated]>, f32) -> !dist.tensor<4096xf32, @world, [replicated]> {
  ^bb0(%wi: f32, %gi: f32, %lri: f32):
    %s = arith.mulf %lri, %gi : f32
    %r = arith.subf %wi, %s : f32
    dist.yield %r : f32
  }
  %p1 = dist.cast %w1 : !dist.tensor<4096xf32, @world, [replicated]> -> !dist.tensor<4096xbf16, @world, [replicated]>
  func.return %p1, %w1 : !dist.tensor<4096xbf16, @world, [replicated]>, !dist.tensor<4096xf32, @world, [replicated]>
}
"""
MIXED_FUSED = "split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=w},fuse-allreduce{targets=avg_rs}"


@pytest.mark.parametrize("n", [1, 2, 4])
def test_mixed_precision_step_runs_zero_copy_and_equals_the_interpreter(n, monkeypatch):
    """CoCoNet's mixed precision: bf16 gradients averaged (in f32, rounded once to bf16),
    an f32 master slice updated and the bf16 parameters gathered, as one zero-copy kernel
    per rank (the kernel reads and writes bf16 in place as its bits), equal to the
    interpreter's AR form bit for bit."""
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    calls = []
    real = host.HostDevice.zero_copy_fused
    monkeypatch.setattr(host.HostDevice, "zero_copy_fused", lambda self, *a: calls.append(real(self, *a)) or calls[-1])
    rng = np.random.default_rng(n)
    g = rng.standard_normal((n, 4096)).astype(np.float32).astype(bf16)
    w0 = rng.standard_normal(4096).astype(np.float32)
    program = step.compile(MIXED, ranks=n, pipeline=MIXED_FUSED)
    comms = step.local_comms(n)

    def rank(r):
        s = step.Step(program, comms[r])
        G, P, W = (s.empty(x) for x in "gpw")
        G[...] = g[r]
        P[...] = w0.astype(bf16)
        W[...] = w0.reshape(max(n, 1), -1)[r] if W.size < 4096 else w0
        for _ in range(3):
            s(G, P, W, 0.25)
        return P.copy(), W.copy()

    p, w = w0.astype(bf16), w0
    for _ in range(3):
        p, w = interpret(MIXED, None, {"g": g, "p": p, "w": w, "lr": np.float32(0.25)}, n)
    for r, (P, W) in enumerate(on_threads(n, rank)):
        assert P.dtype == bf16
        np.testing.assert_array_equal(P.view(np.uint16), p.view(np.uint16))
        np.testing.assert_array_equal(W, w.reshape(n, -1)[r] if n > 1 else w)
    assert calls == [True] * 3 * n


def _unshared(monkeypatch):
    """Rank threads whose buffer exchange answers as an MPI window does for buffers
    outside it: None on every rank (after exchanging, as the real one does)."""
    from distir.runtime.local import LocalComm

    def peer_buffers(self, arrays):
        self._publish(arrays)
        self._sync()
        return None

    monkeypatch.setattr(LocalComm, "peer_buffers", peer_buffers)


def _fused_steps(program, calls: int = 2):
    """Each rank's fused Adam steps on its own buffers (or the exception it raised)."""
    comms = step.local_comms(2)
    rng = np.random.default_rng(7)
    g = rng.standard_normal((2, 4096)).astype(np.float32)

    def rank(r):
        s = step.Step(program, comms[r])
        G, P, M, V = (s.empty(x) for x in "gpmv")
        G[...] = g[r]
        for t in range(1, calls + 1):
            s(G, P, M, V, *SCALARS.values(), float(t))
        return P.copy()

    return g, on_threads(2, rank)


def test_a_zero_copy_group_over_buffers_its_peers_cannot_see_fails_unless_the_plan_falls_back(monkeypatch):
    """Planned for rank threads (``local``: every buffer is shared), the fused group is
    plain ``zero_copy``: a run whose buffers the peers cannot see fails on every rank with
    a diagnostic naming the op, it does not quietly run another way. Planned for processes
    sharing memory (``shared-memory``), the IR says ``else sequential``, and the same run
    runs the group's calls one by one, with the interpreter's results."""
    _unshared(monkeypatch)
    local = step.compile(ADAM, ranks=2, pipeline=FUSED)
    _, outs = _fused_steps(local)
    assert all(isinstance(o, Exception) for o in outs), outs  # no rank goes on (nor hangs)
    assert any(isinstance(o, step.ExecutionFailed) and "'rt.fused' is planned zero_copy without 'else sequential'" in str(o) for o in outs), outs
    assert "else sequential" not in str(local.module)

    shared = step.compile(ADAM, ranks=2, pipeline=FUSED)
    shared.ensure_planned("shared-memory")
    assert "rt.fused zero_copy reduce" in str(shared.module) and "else sequential" in str(shared.module)
    tried = []
    real = host.HostDevice.zero_copy_fused
    monkeypatch.setattr(host.HostDevice, "zero_copy_fused", lambda self, *a: tried.append(real(self, *a)) or tried[-1])
    g, outs = _fused_steps(shared)
    p, _, _ = reference(g, np.zeros(4096, np.float32), np.zeros(4096, np.float32), np.zeros(4096, np.float32), 2, 2)
    for P in outs:
        np.testing.assert_allclose(P, p, rtol=1e-6, atol=1e-7)
    assert tried == [False] * 4  # the zero-copy kernel was tried on every call and rank, and ran nothing


GEMV = (ROOT / "test" / "lowering" / "plan-execution-tiles.mlir").read_text()


def test_a_shared_tile_transport_over_buffers_its_peers_cannot_see_fails_unless_the_plan_falls_back(monkeypatch):
    """The same for a fused tile operator (GEMV + AllReduce): ``transport shared``
    planned for rank threads fails on buffers the peers cannot see; planned for
    processes sharing memory it is ``transport shared else messages`` and sends the
    tiles as messages, with the interpreter's result."""
    _unshared(monkeypatch)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    (want,) = interpret(GEMV, None, {"x": x, "w": w}, 2)

    def run(program):
        comms = step.local_comms(2)

        def rank(r):
            s = step.Step(program, comms[r])
            (y,) = s(np.ascontiguousarray(x[:, 32 * r : 32 * (r + 1)]), w[32 * r : 32 * (r + 1)].copy())
            return y.copy()

        return on_threads(2, rank)

    outs = run(step.compile(GEMV, ranks=2))
    assert all(isinstance(o, Exception) for o in outs), outs
    assert any(isinstance(o, step.ExecutionFailed) and "'transport shared' without 'else messages'" in str(o) for o in outs), outs
    shared = step.compile(GEMV, ranks=2)
    shared.ensure_planned("shared-memory")
    assert "transport shared else messages" in str(shared.module)
    for y in run(shared):
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_accepts_dlpack_and_buffer_protocol():
    torch = pytest.importorskip("torch")
    program = step.compile(ADAM, ranks=1)
    (comm,) = step.local_comms(1)
    s = step.Step(program, comm)
    g = torch.ones(4096)
    p = torch.zeros(4096)
    m = bytearray(4096 * 4)  # buffer protocol
    v = np.zeros(4096, np.float32)
    s(g, p, m, v, *SCALARS.values(), 1.0)
    assert torch.all(p < 0)  # updated in place, through DLPack
    assert np.frombuffer(m, np.float32)[0] == pytest.approx(0.1)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda G: G[:10], "must have shape [4096]"),
        (lambda G: G.astype(np.float64), "must hold float32"),
        (lambda G: np.zeros(8192, np.float32)[::2], "must be contiguous"),
        (lambda G: "g", "is not an array"),
    ],
    ids=["shape", "dtype", "strided", "not-an-array"],
)
def test_bad_buffer_on_one_rank_is_rejected_on_every_rank(bad, message):
    program = step.compile(ADAM, ranks=2, pipeline=FUSED)
    comms = step.local_comms(2)

    def rank(r):
        s = step.Step(program, comms[r])
        G, P, M, V = (s.empty(x) for x in "gpmv")
        s(G, P, M, V, *SCALARS.values(), 1.0)
        s(bad(G) if r == 1 else G, P, M, V, *SCALARS.values(), 2.0)

    for r, err in enumerate(on_threads(2, rank)):
        assert isinstance(err, InputRejected), (r, err)
        assert "rank 1:" in str(err) and message in str(err)


def test_rank_count_must_match_the_communicator():
    program = step.compile(ADAM, ranks=2)
    with pytest.raises(InputRejected, match="compiled for 2 ranks, the communicator has 4"):
        step.Step(program, step.local_comms(4)[0])


def test_bad_pipeline_is_a_diagnostic():
    with pytest.raises(InputRejected, match="pipeline"):
        step.compile(ADAM, ranks=2, pipeline="fuse-allreduce{targets=nothing}")


WORKER = r'''
import numpy as np
from distir.dialects.diagnostics import InputRejected
from distir.runtime import host, step
from distir.runtime.interpreter import interpret
import sys
text, pipeline = open(sys.argv[1]).read(), sys.argv[2]
fused = []
real = host.HostDevice.zero_copy_fused
host.HostDevice.zero_copy_fused = lambda self, *a: fused.append(real(self, *a)) or fused[-1]
comm = step.mpi_comm()
s = step.Step(step.compile(text, ranks=comm.size, pipeline=pipeline), comm)
G, P, M, V = (s.empty(x) for x in "gpmv")
rng = np.random.default_rng(0)
g = rng.standard_normal((comm.size, 4096)).astype(np.float32)
G[...] = g[comm.rank]
for t in range(1, 4):
    s(G, P, M, V, 1e-3, 0.9, 0.999, 1e-8, float(t))
p, m, v = np.zeros(4096, np.float32), np.zeros(4096, np.float32), np.zeros(4096, np.float32)
for t in range(1, 4):
    p, m, v = interpret(text, None, dict(g=g, p=p, m=m, v=v, lr=np.float32(1e-3), beta1=np.float32(0.9), beta2=np.float32(0.999), eps=np.float32(1e-8), t=np.float32(t)), comm.size)
assert np.allclose(P, p, rtol=1e-6, atol=1e-7), np.abs(P - p).max()
try:
    s(G[:5] if comm.rank == 0 else G, P, M, V, 1e-3, 0.9, 0.999, 1e-8, 4.0)
except InputRejected as e:
    print(f"rank {comm.rank} rejected: {e}")
print(f"rank {comm.rank} ok zero-copy {sum(fused)}/{len(fused)}")
'''


@pytest.mark.mpi
def test_under_mpiexec(tmp_path):
    (tmp_path / "adam.mlir").write_text(ADAM)
    (tmp_path / "worker.py").write_text(WORKER)
    proc = subprocess.run(
        [mpiexec_path(), "-n", "2", sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "adam.mlir"), FUSED],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        assert f"rank {r} ok zero-copy 3/3" in proc.stdout
        assert f"rank {r} rejected: rank 0: argument 'g' must have shape [4096]" in proc.stdout
