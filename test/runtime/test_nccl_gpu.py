"""The ``nccl`` backend on real GPUs (one process per GPU under mpiexec). Runs only where
a CUDA GPU and driver exist; elsewhere the device code is covered by the simulator and
PTX tests and the call sequences by the recording tests."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.lowered import schedules

pytestmark = pytest.mark.gpu


def gpu_count() -> int:
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return 0  # numba's CUDA simulator is not a GPU
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
    # distir-run as a module: where distir is installed with pip --target (the GPU
    # machine, bench/gpu_check.py) there is no console script beside this Python; one
    # rank needs no mpiexec
    cmd = [sys.executable, "-m", "distir.tools.run", str(src), "--ranks", str(ranks), "--backend", "nccl", "--compare-backend", "interpret"]
    if ranks > 1:
        cmd = [mpiexec_path(), "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "results agree" in proc.stdout
