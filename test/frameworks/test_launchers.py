"""Real multi-process jobs: ``torchrun --nproc-per-node N`` (gloo) and ``mpiexec -n N``
train the tiny GPT for 30 steps with DDP + ``torch.optim`` (or the reference LAMB) and
with distir's optimizers (over the ``torch.distributed`` process group under torchrun,
over MPI under mpiexec); losses at every step and the final parameters agree within 1e-5.
The models people train (``support/torch_features.py``: frozen and tied weights, bf16
with fp32 master weights, f16 with loss scaling and an inf, clipping, accumulation)
agree with torch.optim on averaged gradients under ``mpiexec -n 2``, ``-n 4`` and
``torchrun --nproc-per-node 2``, one job each for all the cases and the comparison with
DDP above (a launch per launcher and rank count, each starting torch once). A
``torch.distributed.checkpoint`` written at 4 ranks (the mpiexec job) loads at 2 (the
torchrun job) and training goes on with the losses of the run without the restart. ``examples/pytorch/train_gpt.py`` runs under
both launchers, prints the optimizer state per rank (1/N of torch's) and no warning."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import torch_checkpoint as tc
from support import torch_features as tf
from support import torch_training as tt

from distir.runtime.mpi import mpiexec_path

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "test" / "support" / "torch_training.py"
FEATURES = ROOT / "test" / "support" / "torch_features.py"
TRAIN = ROOT / "examples" / "pytorch" / "train_gpt.py"
BIN = Path(sys.executable).parent
STEPS = 30
"""Steps of each launched job: the launch path (process groups, MPI, gloo) agreeing step
by step; the long runs (200 steps, every algorithm) are test_optimizers_threads.py's."""


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
"""The optimizers compared with DDP under each launcher (in the launch of the feature
job where there is one: ``feature_job``)."""


@pytest.mark.mpi
@pytest.mark.parametrize("launcher, ranks, algorithms", JOBS, ids=[f"{a}-{b}" for a, b, _ in JOBS])
def test_distir_equals_ddp_under_the_launcher(launcher, ranks, algorithms, feature_job):
    report = json.loads(feature_job(launcher, ranks)[3].read_text())
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


FEATURE_JOBS = [("mpiexec", 2), ("mpiexec", 4), ("torchrun", 2)]
CHECKPOINT_STEP = {("mpiexec", 4): "save", ("torchrun", 2): "resume"}
"""The feature jobs also write a DCP checkpoint at 4 ranks and resume it at 2, and
compare the optimizers with DDP (``JOBS``): four launches in all (each starts torch and
the process group on every rank), not nine."""


@pytest.fixture(scope="module")
def feature_job(tmp_path_factory):
    """(launcher, ranks) -> (reports of every rank, references, checkpoint folder, the
    optimizers' comparison) of the job that ran every case (and its step of the
    checkpoint, and ``JOBS``' comparison), launched once; ``torchrun`` at 4 ranks runs
    the comparison only."""
    base = tmp_path_factory.mktemp("features")
    ckpt = base / "ckpt"
    done: dict = {}

    def job(launcher: str, ranks: int):
        if (launcher, ranks) not in done:
            if CHECKPOINT_STEP.get((launcher, ranks)) == "resume":
                job("mpiexec", 4)  # the checkpoint it resumes
            out, training = base / f"{launcher}-{ranks}.json", base / f"{launcher}-{ranks}.training.json"
            train = [str(training), next(a for lc, n, a in JOBS if (lc, n) == (launcher, ranks)), str(STEPS)]
            if (launcher, ranks) not in FEATURE_JOBS:
                launch(launcher, ranks, [str(WORKER), *train])
                done[(launcher, ranks)] = ([], {}, ckpt, training)
                return done[(launcher, ranks)]
            cases = [c for c in tf.CASES if c != "autocast"]  # autocast: nothing launcher-specific (thread tests)
            extra = [CHECKPOINT_STEP[(launcher, ranks)], str(ckpt)] if (launcher, ranks) in CHECKPOINT_STEP else []
            launch(launcher, ranks, [str(FEATURES), str(out), ",".join(cases), *extra, "train", *train])
            reports = [rep for r in range(ranks) for rep in json.loads(Path(f"{out}.{r}").read_text())]
            done[(launcher, ranks)] = (reports, json.loads(Path(f"{out}.ref").read_text()), ckpt, training)
        return done[(launcher, ranks)]

    return job


@pytest.mark.mpi
@pytest.mark.parametrize("launcher, ranks", FEATURE_JOBS, ids=[f"{a}-{n}" for a, n in FEATURE_JOBS])
def test_models_people_train_under_the_launcher(feature_job, launcher, ranks):
    reports, refs, _, _ = feature_job(launcher, ranks)
    assert {r["rank"] for r in reports} == set(range(ranks))
    for report in reports:
        tf.check(report, refs[report["case"]])


@pytest.mark.mpi
def test_dcp_checkpoint_written_at_4_ranks_resumes_at_2(feature_job):
    """Written by the 4-rank job under mpiexec, read by the 2-rank job under torchrun:
    every rank wrote its slice (4 files share the optimizer state), the 2-rank job read
    it re-sliced and its losses are those of the run without the restart."""
    from torch.distributed.checkpoint import FileSystemReader

    _, _, ckpt, _ = feature_job("torchrun", 2)
    losses = json.loads((ckpt / "save.json").read_text())["losses"] + json.loads((ckpt / "resume.json").read_text())["losses"]
    want = tc.reference(4, 2)
    rel = np.abs(np.array(losses) - want) / np.abs(want)
    assert rel.max() <= 1e-5, (losses, want)
    md = FileSystemReader(str(ckpt)).read_metadata()
    files = {info.relative_path for index, info in md.storage_data.items() if index.fqn.startswith("optim.state.") and not index.fqn.endswith(".step")}
    assert len(files) == 4, files
    sizes = [f.stat().st_size for f in ckpt.glob("*.distcp")]
    assert max(sizes) < 0.5 * sum(sizes), sizes  # no rank wrote the whole state
