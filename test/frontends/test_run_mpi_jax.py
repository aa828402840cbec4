"""Imported programs under ``mpiexec -n 4``: ``distir-run --backend mpi`` of JAX's files
(every JAX-oracle program: MLP, attention, LayerNorm, embedding lookups, shard_map,
permutes; as written and after a fused schedule) computes JAX's results, and Shardy's and
MLIR shard's collectives hold device by device."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle import assert_matches, load
from test_shard import per_device_model, permute_model

from distir.frontends.program import import_program
from distir.passes.pipeline import apply_pipeline

pytestmark = pytest.mark.mpi

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
MPIEXEC = str(BIN / "mpiexec")
RUN = str(BIN / "distir-run")
HARD_TIMEOUT = 300


def mpirun(path: Path, func: str, inputs: dict[str, np.ndarray], tmp_path: Path) -> list[np.ndarray]:
    np.savez(tmp_path / "in.npz", **inputs)
    out = tmp_path / "out.npz"
    cmd = [MPIEXEC, "-n", "4", RUN, str(path), "--ranks", "4", "--backend", "mpi", "--func", func, "--inputs", str(tmp_path / "in.npz"), "--outputs", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HARD_TIMEOUT, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with np.load(out) as f:
        return [f[f"result{i}"] for i in range(len(f.files))]


@pytest.mark.parametrize("name", ["tp_mlp_4", "attention", "layernorm", "embedding", "take_rows", "shard_map", "ppermute_partial", "ppermute_2d", "ring_matmul"])
def test_jax_program_on_mpi(jax_dir, tmp_path, name):
    text, inputs, want = load(jax_dir, name)
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    assert_matches(mpirun(path, "main", inputs, tmp_path), want, f"{name} on mpi")


def test_fused_schedule_of_jax_adam_on_mpi(jax_dir, tmp_path):
    """CoCoNet's fuse(RS-C-AG) of JAX's data-parallel Adam, under mpiexec."""
    text, inputs, want = load(jax_dir, "dp_adam")
    module = import_program(text, "dp_adam.mlir").module
    fused = apply_pipeline(module, "fuse-maps,split-allreduce{strategy=rs-ag},reorder-allgather,fuse-maps,fuse-allreduce")
    assert any(op.name == "coll.fused_reduce_scatter" or op.name == "coll.fused_all_reduce" for op in fused.walk())
    path = tmp_path / "dp_adam_fused.mlir"
    path.write_text(str(fused))
    assert_matches(mpirun(path, "main", inputs, tmp_path), want, "fused dp_adam on mpi")


def test_sdy_collectives_on_mpi(tmp_path):
    """Every Shardy collective (sdy-collectives.mlir's @chain) under mpiexec."""
    t = np.arange(32, dtype=np.float32).reshape(4, 8)
    parts = np.stack([np.stack([t * (1 + 2 * x + y) for y in range(2)]) for x in range(2)])
    partial_y = np.stack([t * 10**y for y in range(2)])
    got = mpirun(HERE / "sdy-collectives.mlir", "chain", {"arg0": parts, "arg1": partial_y}, tmp_path)
    np.testing.assert_array_equal(got[0], parts.sum((0, 1)))
    np.testing.assert_array_equal(got[1], partial_y.sum(0))


def test_shard_collectives_per_device_on_mpi(tmp_path):
    x = np.random.default_rng(7).standard_normal((2, 2, 4, 8)).astype(np.float32)
    want = per_device_model(x)
    got = mpirun(HERE / "shard-per-device.mlir", "per_device", {"x": x}, tmp_path)[0]  # stacked per device [i, j]
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(got[i, j], want[2 * i + j], rtol=1e-6)


def test_shard_shift_send_recv_per_device_on_mpi(tmp_path):
    """shard.shift, send and recv (coll.permute) under mpiexec, device by device."""
    x = np.random.default_rng(7).standard_normal((4, 4)).astype(np.float32)
    got = mpirun(HERE / "shard-permute.mlir", "send_recv", {"x": x.reshape(2, 2, 4)}, tmp_path)[0].reshape(4, 4)
    for d, want in enumerate(permute_model("send_recv", x)[0]):
        np.testing.assert_allclose(got[d], want, rtol=1e-6, err_msg=f"device {d}")
    got = mpirun(HERE / "shard-permute.mlir", "shift_grid", {"x": x.reshape(2, 2, 4)[..., :3]}, tmp_path)[0].reshape(4, 3)
    for d, want in enumerate(permute_model("shift_grid", x[:, :3])[0]):
        np.testing.assert_allclose(got[d], want, rtol=1e-6, err_msg=f"device {d}")


def test_reversed_device_order_on_mpi(tmp_path):
    """A manual computation on a mesh with device_ids [3, 2, 1, 0] (partition_id, a ring
    permute and a gather over device ids) under mpiexec (test_device_order.py)."""
    t = np.arange(16, dtype=np.float32).reshape(8, 2)
    blocks = [t[2 * p : 2 * p + 2] + (3 - p) for p in range(4)]
    got = mpirun(HERE / "sdy-device-order.mlir", "reversed", {"arg0": t}, tmp_path)
    np.testing.assert_array_equal(got[0], np.concatenate([blocks[(p + 1) % 4] for p in range(4)]))
    np.testing.assert_array_equal(got[1], np.concatenate([t[4:6]] * 4))
