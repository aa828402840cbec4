"""Imported programs under ``mpiexec -n 4``: ``distir-run --backend mpi`` of JAX's files
(every JAX-oracle program: MLP, attention, LayerNorm, embedding lookups, shard_map,
permutes, the constructs of ``jax_constructs.py``; as written and after a fused schedule)
computes JAX's results, and Shardy's and MLIR shard's collectives hold device by device.

Every run is one ``distir-run`` command line; they run in one ``mpiexec -n 4`` job
(``mpi_batch.py``, one start-up of the processes for all of them), the one-device
programs (1 rank) in one process of ``mpi_batch.py``, and each test checks its run's
outputs."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle import assert_matches, load
from test_jax_constructs import NAMES as CONSTRUCTS
from test_jax_constructs import is_exact, ranks_of
from test_shard import per_device_model, permute_model

from distir.frontends.program import import_program
from distir.passes.pipeline import apply_pipeline

pytestmark = pytest.mark.mpi

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
MPIEXEC = str(BIN / "mpiexec")
HARD_TIMEOUT = 600
JAX_PROGRAMS = ["tp_mlp_4", "attention", "layernorm", "embedding", "take_rows", "shard_map", "ppermute_partial", "ppermute_2d", "ring_matmul"]
LOOPS = {"scan_grad": 4, "cond_data": 4, "switch_data": 4, "partial_tp": 4, "pipeline_4": 4, "pipeline_8": 8, "gpt_step_1": 1, "gpt_step_4": 4, "gpt_step_8": 8}
"""Loops, branches, manual computations over some of the axes and the GPT training step
(test_loops.py, test_partly_manual.py, test_whole_programs.py), with the ranks each runs
on."""
FUSED = "fuse-maps,split-allreduce{strategy=rs-ag},reorder-allgather,fuse-maps,fuse-allreduce"


@functools.lru_cache(maxsize=None)
def fused_adam(text: str):
    """JAX's data-parallel Adam after CoCoNet's fuse(RS-C-AG)."""
    return apply_pipeline(import_program(text, "dp_adam.mlir").module, FUSED)


def sdy_inputs() -> dict[str, np.ndarray]:
    t = np.arange(32, dtype=np.float32).reshape(4, 8)
    parts = np.stack([np.stack([t * (1 + 2 * x + y) for y in range(2)]) for x in range(2)])
    partial_y = np.stack([t * 10**y for y in range(2)])
    return {"arg0": parts, "arg1": partial_y}


def shard_x() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((2, 2, 4, 8)).astype(np.float32)


def permute_x() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((4, 4)).astype(np.float32)


def device_order_t() -> np.ndarray:
    return np.arange(16, dtype=np.float32).reshape(8, 2)


def jobs(jax_dir: Path, work: Path) -> dict[str, tuple[Path, str, dict[str, np.ndarray], int]]:
    """Every run of this file: id -> (program file, function, inputs, ranks)."""
    out = {}
    for name in JAX_PROGRAMS + CONSTRUCTS:
        text, inputs, _ = load(jax_dir, name)
        (work / f"{name}.mlir").write_text(text)
        out[name] = (work / f"{name}.mlir", "main", inputs, ranks_of(name))
    for name, ranks in LOOPS.items():
        text, inputs, _ = load(jax_dir, name)
        (work / f"{name}.mlir").write_text(text)
        out[name] = (work / f"{name}.mlir", "main", inputs, ranks)
    text, inputs, _ = load(jax_dir, "dp_adam")
    (work / "dp_adam_fused.mlir").write_text(str(fused_adam(text)))
    out["dp_adam_fused"] = (work / "dp_adam_fused.mlir", "main", inputs, 4)
    out["sdy_chain"] = (HERE / "sdy-collectives.mlir", "chain", sdy_inputs(), 4)
    out["shard_per_device"] = (HERE / "shard-per-device.mlir", "per_device", {"x": shard_x()}, 4)
    out["send_recv"] = (HERE / "shard-permute.mlir", "send_recv", {"x": permute_x().reshape(2, 2, 4)}, 4)
    out["shift_grid"] = (HERE / "shard-permute.mlir", "shift_grid", {"x": permute_x().reshape(2, 2, 4)[..., :3]}, 4)
    out["reversed"] = (HERE / "sdy-device-order.mlir", "reversed", {"arg0": device_order_t()}, 4)
    return out


def _batch(work: Path, listed: list[dict], processes: int) -> tuple[dict[str, int], subprocess.CompletedProcess]:
    """The exit code of each job of ``listed``, run by ``mpi_batch.py`` in one MPI job of
    ``processes`` processes (one process: no mpiexec, MPI's singleton start)."""
    jobs_path, report_path = work / f"jobs{processes}.json", work / f"report{processes}.json"
    jobs_path.write_text(json.dumps(listed))
    cmd = [sys.executable, str(HERE / "mpi_batch.py"), str(jobs_path), str(report_path)]
    if processes > 1:
        cmd = [MPIEXEC, "-n", str(processes), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HARD_TIMEOUT, cwd=work)
    return (json.loads(report_path.read_text()) if report_path.exists() else {}), proc


@pytest.fixture(scope="module")
def mpi_runs(jax_dir, tmp_path_factory) -> dict[str, list[np.ndarray] | str]:
    """Every job's outputs, or why it has none: the jobs of each rank count from one
    ``mpiexec -n RANKS`` of ``mpi_batch.py`` (4, and 8 for the 8-device programs), the
    one-device programs from one process of it."""
    work = tmp_path_factory.mktemp("mpi")
    listed: dict[int, list[dict]] = {}
    for id_, (path, func, inputs, ranks) in jobs(jax_dir, work).items():
        np.savez(work / f"{id_}.in.npz", **inputs)
        argv = [str(path), "--ranks", str(ranks), "--backend", "mpi", "--func", func, "--inputs", str(work / f"{id_}.in.npz"), "--outputs", str(work / f"{id_}.out.npz")]
        listed.setdefault(ranks, []).append({"id": id_, "argv": argv})
    out: dict[str, list[np.ndarray] | str] = {}
    for processes, batch in listed.items():
        report, proc = _batch(work, batch, processes)
        for job in batch:
            code = report.get(job["id"])
            if code == 0:
                with np.load(work / f"{job['id']}.out.npz") as f:
                    out[job["id"]] = [f[f"result{i}"] for i in range(len(f.files))]
            else:
                why = "ended the MPI job" if code is None else f"exited with {code}"
                out[job["id"]] = f"distir-run of {job['id']} {why} (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return out


def outputs(mpi_runs, id_: str) -> list[np.ndarray]:
    got = mpi_runs[id_]
    if isinstance(got, str):
        pytest.fail(got)
    return got


@pytest.mark.parametrize("name", JAX_PROGRAMS + CONSTRUCTS)
def test_jax_program_on_mpi(jax_dir, mpi_runs, name):
    _, _, want = load(jax_dir, name)
    assert_matches(outputs(mpi_runs, name), want, f"{name} on mpi", exact=is_exact(name))


@pytest.mark.parametrize("name", list(LOOPS))
def test_loops_manual_computations_and_training_steps_on_mpi(jax_dir, mpi_runs, name):
    _, _, want = load(jax_dir, name)
    assert_matches(outputs(mpi_runs, name), want, f"{name} on mpi ({LOOPS[name]} ranks)")


def test_fused_schedule_of_jax_adam_on_mpi(jax_dir, mpi_runs):
    """CoCoNet's fuse(RS-C-AG) of JAX's data-parallel Adam, under mpiexec."""
    text, _, want = load(jax_dir, "dp_adam")
    fused = fused_adam(text)
    assert any(op.name == "coll.fused_reduce_scatter" or op.name == "coll.fused_all_reduce" for op in fused.walk())
    assert_matches(outputs(mpi_runs, "dp_adam_fused"), want, "fused dp_adam on mpi")


def test_sdy_collectives_on_mpi(mpi_runs):
    """Every Shardy collective (sdy-collectives.mlir's @chain) under mpiexec."""
    inputs = sdy_inputs()
    got = outputs(mpi_runs, "sdy_chain")
    np.testing.assert_array_equal(got[0], inputs["arg0"].sum((0, 1)))
    np.testing.assert_array_equal(got[1], inputs["arg1"].sum(0))


def test_shard_collectives_per_device_on_mpi(mpi_runs):
    want = per_device_model(shard_x())
    got = outputs(mpi_runs, "shard_per_device")[0]  # stacked per device [i, j]
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(got[i, j], want[2 * i + j], rtol=1e-6)


def test_shard_shift_send_recv_per_device_on_mpi(mpi_runs):
    """shard.shift, send and recv (coll.permute) under mpiexec, device by device."""
    x = permute_x()
    got = outputs(mpi_runs, "send_recv")[0].reshape(4, 4)
    for d, want in enumerate(permute_model("send_recv", x)[0]):
        np.testing.assert_allclose(got[d], want, rtol=1e-6, err_msg=f"device {d}")
    got = outputs(mpi_runs, "shift_grid")[0].reshape(4, 3)
    for d, want in enumerate(permute_model("shift_grid", x[:, :3])[0]):
        np.testing.assert_allclose(got[d], want, rtol=1e-6, err_msg=f"device {d}")


def test_reversed_device_order_on_mpi(mpi_runs):
    """A manual computation on a mesh with device_ids [3, 2, 1, 0] (partition_id, a ring
    permute and a gather over device ids) under mpiexec (test_device_order.py)."""
    t = device_order_t()
    blocks = [t[2 * p : 2 * p + 2] + (3 - p) for p in range(4)]
    got = outputs(mpi_runs, "reversed")
    np.testing.assert_array_equal(got[0], np.concatenate([blocks[(p + 1) % 4] for p in range(4)]))
    np.testing.assert_array_equal(got[1], np.concatenate([t[4:6]] * 4))
