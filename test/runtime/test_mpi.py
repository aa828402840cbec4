"""The ``mpi`` backend (one process per rank under ``mpiexec``) equals the reference
interpreter on every example and every schedule, on 2 and 4 ranks (8 for the
hierarchical example); distir-run drives it under mpiexec and from a single process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.lowered import all_cases, schedules, small_example
from support.runs import run_mpi_batch

from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected
from distir.examples.optimizer_step import optimizer_step, uniform_parameters
from distir.passes.pipeline import apply_pipeline
from distir.runtime.equivalence import compare_outputs
from distir.runtime.interpreter import interpret
from distir.runtime.mpi import MpiBackend, mpiexec_path

FUSED = "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce"

pytestmark = pytest.mark.mpi

HERE = Path(__file__).parent
CASES = all_cases()
DISTIR_RUN = str(Path(sys.executable).parent / "distir-run")


def case_id(case) -> str:
    return "-".join(map(str, case))


@pytest.fixture(scope="session")
def mpi_report(tmp_path_factory):
    """Every case, run in one mpiexec job per rank count."""
    d = tmp_path_factory.mktemp("mpi")
    jobs = [
        {"id": case_id(c), "text": dict(schedules(c[0]))[c[1]], "func": c[2], "ranks": c[3], "seed": 2}
        for c in CASES
    ]
    jobs += [{"id": f"paths-{k}", "text": t, "func": None, "ranks": 2, "seed": 2, "shared_memory": shared} for k, (t, shared) in PATH_JOBS.items()]
    jobs += [{"id": f"step-{k}", "text": t, "func": None, "ranks": 2, "seed": 2} for k, t in STEP_JOBS.items()]
    return run_mpi_batch(jobs, d)


PATH_JOBS = {
    "tiles-shared": (dict(schedules("moe"))["fused tiles"], True),
    "tiles-messages": (dict(schedules("moe"))["fused tiles"], False),
    "fused-shared": (dict(schedules("adam"))["fuse(RS-C-AG)+sliced-state"], True),
    "fused-messages": (dict(schedules("adam"))["fuse(RS-C-AG)+sliced-state"], False),
}


STEP_JOBS = {
    # many tensors: the lowering combines them into arenas, so most arguments are read by
    # no op and come back as they are (the executor returns them by index)
    "sgd-arena": optimizer_step("sgd", uniform_parameters(5, 64)),
    "adam-arena-fused": str(apply_pipeline(parse_module(optimizer_step("adam", uniform_parameters(5, 64))), FUSED)),
}


@pytest.mark.parametrize("name", sorted(STEP_JOBS))
def test_model_scale_steps_equal_interpreter(mpi_report, name):
    entry = mpi_report[f"step-{name}"]
    assert entry["ok"], entry["message"]


@pytest.mark.parametrize("shared", [True, False])
def test_fused_operators_are_zero_copy_within_a_node(mpi_report, shared):
    """Ranks of one node share their buffers through an MPI-3 shared-memory window: the
    fused tile operators store tiles straight into their destinations and fuse(RS-C-AG)
    runs as one zero-copy kernel; without shared memory (as across nodes) both take the
    message paths, with the same results."""
    for name in ("tiles", "fused"):
        entry = mpi_report[f"paths-{name}-{'shared' if shared else 'messages'}"]
        assert entry["ok"], entry["message"]
        want = "zero-copy" if shared else "other"
        assert entry["paths"] == {f"{name} {want}": 1}, entry["paths"]


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_mpi_equals_interpreter(mpi_report, case):
    entry = mpi_report.get(case_id(case))
    assert entry is not None, f"not run: {mpi_report}"
    assert entry["ok"], entry["message"]


def test_distir_run_under_mpiexec_compares_with_interpreter(tmp_path):
    src = tmp_path / "adam_fused.mlir"
    src.write_text(dict(schedules("adam"))["fuse(RS-C-AG)+sliced-state"])
    out = tmp_path / "out.npz"
    proc = subprocess.run(
        [mpiexec_path(), "-n", "2", DISTIR_RUN, str(src), "--ranks", "2", "--backend", "mpi", "--compare-backend", "interpret", "--outputs", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    # Only rank 0 reports.
    assert proc.stdout.count("results agree") == 1, proc.stdout
    assert "on mpi vs @adam on interpret" in proc.stdout
    assert out.exists()


def test_rank_count_defaults_to_the_mpiexec_process_count(tmp_path):
    src = tmp_path / "sgd.mlir"
    src.write_text(small_example("sgd"))
    proc = subprocess.run(
        [mpiexec_path(), "-n", "2", DISTIR_RUN, str(src), "--backend", "mpi", "--compare-backend", "interpret"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "on 2 rank(s), backend mpi" in proc.stdout
    assert proc.stdout.count("results agree") == 1, proc.stdout


def test_mpi_backend_starts_mpiexec_from_one_process():
    module = parse_module(small_example("moe"))
    got = MpiBackend().run(module, None, {}, 4, 5)
    want = interpret(module, None, None, 4, 5)
    c = compare_outputs(want, got, "interpret", "mpi")
    assert c.ok, c.message


def test_wrong_process_count_is_rejected(tmp_path):
    src = tmp_path / "adam.mlir"
    src.write_text(small_example("adam"))
    proc = subprocess.run(
        [mpiexec_path(), "-n", "2", DISTIR_RUN, str(src), "--ranks", "4", "--backend", "mpi"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "start 4 processes (mpiexec -n 4), not 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_errors_from_spawned_ranks_are_diagnostics():
    with pytest.raises(InputRejected, match="does not fit mesh"):
        MpiBackend().run(parse_module(small_example("primitives")), "all_reduce", {}, 2, 0)


def test_ranks_outnumbering_the_cores_sleep_while_they_wait(monkeypatch):
    """distir's own mpiexec jobs (distir-run, distir-tune's timing) with more ranks than
    cores ask MPICH to sleep between polls (``YIELD``); with as many ranks as cores, or a
    value the user set, the environment is left as it is."""
    from distir.runtime import mpi

    monkeypatch.setattr(mpi, "_cores", lambda: 2)
    monkeypatch.delenv(mpi.YIELD, raising=False)
    assert mpi.mpiexec_env(2) is None
    assert mpi.mpiexec_env(4)[mpi.YIELD] == "1"
    assert mpi.mpiexec_env(4, {"A": "b"}) == {"A": "b", mpi.YIELD: "1"}
    monkeypatch.setenv(mpi.YIELD, "0")
    assert mpi.mpiexec_env(8) is None
