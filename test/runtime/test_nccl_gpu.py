"""The ``nccl`` backend on real GPUs (one process per GPU under mpiexec). Runs only where
a CUDA GPU and driver exist; elsewhere the device code is covered by the simulator and
PTX tests and the call sequences by the recording tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.lowered import schedules

pytestmark = pytest.mark.gpu


def gpu_count() -> int:
    try:
        from numba import cuda

        return len(cuda.gpus) if cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no extra, no driver
        return 0


GPUS = gpu_count()
needs_gpu = pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU and driver (none here)")


@needs_gpu
@pytest.mark.parametrize("example,schedule", [("adam", "fuse(RS-C-AG)+sliced-state"), ("megatron_attention", "fuse(RS-C-AG)")])
def test_nccl_backend_equals_interpreter(tmp_path, example, schedule):
    from distir.runtime.mpi import mpiexec_path

    ranks = min(GPUS, 2)
    src = tmp_path / "prog.mlir"
    src.write_text(dict(schedules(example))[schedule])
    run = str(Path(sys.executable).parent / "distir-run")
    proc = subprocess.run(
        [mpiexec_path(), "-n", str(ranks), run, str(src), "--ranks", str(ranks), "--backend", "nccl", "--compare-backend", "interpret"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "results agree" in proc.stdout
