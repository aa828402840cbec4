"""The ``nccl`` backend's device code without a GPU: every example and schedule runs with
the CUDA device in numba's CUDA simulator (generated element-wise kernels, the tiled
matmul, copies, reductions, embedding bags), exchanging data through a recording
communicator. Its outputs must equal the interpreter's and its NCCL call sequence the
host run's. Each batch runs in a subprocess: the simulator must be chosen before
numba.cuda is first imported, and this process may import the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.lowered import all_cases, schedules
from support.uneven_programs import PROGRAMS as UNEVEN

from distir.dialects.context import parse_module
from distir.runtime.executor import LoweredProgram

pytest.importorskip("numba.cuda", reason="the GPU extra (numba-cuda) is not installed")

HERE = Path(__file__).parent
CASES = [c for c in all_cases() if c[3] == 2] + [c for c in all_cases() if c[3] == 4 and c[0] in ("adam", "pipeline_layer", "dlrm_embedding")]
BATCHES = 2


def case_id(case) -> str:
    return "-".join(map(str, case))


@pytest.fixture(scope="session")
def sim_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("cudasim")
    jobs = [{"id": case_id(c), "text": dict(schedules(c[0]))[c[1]], "func": c[2], "ranks": c[3], "seed": 4} for c in CASES]
    jobs += [{"id": f"uneven-{name}", "text": UNEVEN[name], "func": None, "ranks": 3, "seed": 4} for name in UNEVEN_CASES]
    jobs += [{"id": f"uneven-{name}-{r}", "text": UNEVEN[name], "func": None, "ranks": r, "seed": 4} for name, r in UNEVEN_MORE_RANKS]
    jobs, same = distinct(jobs)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONWARNINGS="ignore")
    procs = []
    for b in range(BATCHES):
        (d / f"jobs{b}.json").write_text(json.dumps(jobs[b::BATCHES]))
        cmd = [sys.executable, str(HERE / "cuda_sim_batch.py"), str(d / f"jobs{b}.json"), str(d / f"report{b}.json")]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    report: dict[str, dict] = {}
    for b, p in enumerate(procs):
        _, err = p.communicate(timeout=900)
        out = d / f"report{b}.json"
        if out.exists():
            report.update(json.loads(out.read_text()))
        else:
            report[f"batch {b}"] = {"ok": False, "message": err[-2000:]}
    for job, ran in same.items():
        if ran in report:
            report[job] = report[ran]
    return report


def distinct(jobs: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """The jobs whose lowered programs differ, and for each other job the one it repeats:
    schedules whose options the lowering does not use on a program (a ``ring`` order of an
    overlap that is not a matmul and its reduction) lower to the same text, and the same
    program on the same inputs runs the same (12 of the 96 cases; ~10 s of simulation)."""
    first: dict[tuple, str] = {}
    out, same = [], {}
    for job in jobs:
        try:
            lowered = LoweredProgram.build(parse_module(job["text"]), job["func"], job["ranks"])
        except Exception:  # noqa: BLE001 - the batch runs it and reports why it fails
            out.append(job)
            continue
        key = (str(lowered.module), job["func"], job["ranks"], job["seed"])
        if key in first:
            same[job["id"]] = first[key]
        else:
            first[key] = job["id"]
            out.append(job)
    return out, same


UNEVEN_CASES = ("ag", "rs", "ops", "fused", "tiles", "tiles_rs", "tiles_emb", "tiles_moe", "tiles_cols")
"""Programs of ``test_uneven_backends.py`` (dims 3 ranks do not divide: padded buffers,
the rank's part of a padded block, reductions with a count, every fused tile operator
with a ragged last block) on the simulated device."""

UNEVEN_MORE_RANKS = (("tiles_rs", 5), ("tiles_emb", 7))
"""On more ranks: a GEMM + ReduceScatter whose last rank holds none of the contracted
dim (11 over 5: 3, 3, 3, 2, 0; the tiled matmul kernel with an empty contraction) and an
embedding + All-to-All of 7 tables and 10 bags over 7 ranks (blocks of 2 bags, the
last ranks' empty)."""


@pytest.mark.parametrize("name", UNEVEN_CASES)
def test_simulated_cuda_device_runs_uneven_blocks(sim_report, name):
    entry = sim_report.get(f"uneven-{name}")
    assert entry is not None, f"not run: {sim_report}"
    assert entry["ok"], entry["message"]


@pytest.mark.parametrize("name,ranks", UNEVEN_MORE_RANKS)
def test_simulated_cuda_device_runs_uneven_tiles_on_more_ranks(sim_report, name, ranks):
    entry = sim_report.get(f"uneven-{name}-{ranks}")
    assert entry is not None, f"not run: {sim_report}"
    assert entry["ok"], entry["message"]


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_simulated_cuda_device_equals_interpreter(sim_report, case):
    entry = sim_report.get(case_id(case))
    assert entry is not None, f"not run: {sim_report}"
    assert entry["ok"], entry["message"]
