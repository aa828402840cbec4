"""Real multi-process jobs: ``torchrun --nproc-per-node N`` (gloo) and ``mpiexec -n N``
train the tiny GPT for 200 steps with DDP + ``torch.optim`` (or the reference LAMB) and
with distir's optimizers (over the ``torch.distributed`` process group under torchrun,
over MPI under mpiexec); losses at every step and the final parameters agree within 1e-5.
``examples/pytorch/train_gpt.py`` runs under both launchers, prints the optimizer state
per rank (1/N of torch's) and no warning."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import torch_training as tt

from distir.runtime.mpi import mpiexec_path

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "test" / "support" / "torch_training.py"
TRAIN = ROOT / "examples" / "pytorch" / "train_gpt.py"
BIN = Path(sys.executable).parent
STEPS = 200


def launch(launcher: str, ranks: int, args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "test")}
    if launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--nproc-per-node", str(ranks), "--standalone", *args]
    else:
        cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    return proc


JOBS = [("torchrun", 2, "adamw,sgd,lamb"), ("torchrun", 4, "adamw"), ("mpiexec", 2, "adamw,sgd,lamb"), ("mpiexec", 4, "adamw")]


@pytest.mark.mpi
@pytest.mark.parametrize("launcher, ranks, algorithms", JOBS, ids=[f"{a}-{b}" for a, b, _ in JOBS])
def test_distir_equals_ddp_under_the_launcher(launcher, ranks, algorithms, tmp_path):
    out = tmp_path / "report.json"
    launch(launcher, ranks, [str(WORKER), str(out), algorithms, str(STEPS)])
    report = json.loads(out.read_text())
    for a in algorithms.split(","):
        tt.compare(report, a)
        torch_bytes, distir_bytes = report[f"{a}-ddp"]["state_bytes"], report[f"{a}-distir"]["state_bytes"]
        assert torch_bytes / ranks <= distir_bytes <= torch_bytes / ranks * 1.1, (torch_bytes, distir_bytes)


@pytest.mark.mpi
@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
def test_train_gpt_prints_loss_time_and_sliced_state(launcher, tmp_path):
    tiny = ["--layers", "1", "--width", "32", "--heads", "2", "--context", "16", "--batch", "2", "--steps", "5", "--quiet"]
    state, losses = {}, {}
    for opt in ("ddp", "distir"):
        proc = launch(launcher, 2, [str(TRAIN), "--optimizer", opt, *tiny, "--json", str(tmp_path / f"{opt}.json")])
        m = re.search(r"final loss ([\d.]+)\s+step time ([\d.]+) ms .*optimizer state (\d+) bytes", proc.stdout)
        assert m, proc.stdout
        assert "Warning" not in proc.stderr, proc.stderr[-3000:]  # distir's calls warn nothing (the torch API it uses is current)
        state[opt] = int(m.group(3))
        written = json.loads((tmp_path / f"{opt}.json").read_text())
        assert written["state_bytes"] == state[opt]
        losses[opt] = np.array(written["losses"])
    assert state["ddp"] / 2 <= state["distir"] <= state["ddp"] / 2 * 1.1
    # train_gpt.py's own DDP (gloo's all-reduce of the gradients) and distir's AdamW train alike
    rel = np.abs(losses["distir"] - losses["ddp"]) / np.abs(losses["ddp"])
    assert rel.max() <= 1e-5, (losses["ddp"], losses["distir"])
