"""Plans under ``mpiexec``: distir-plan's programs of the MLP forward and the MLP
training step at 4 and 8 ranks, run by ``distir-run --backend mpi`` on the one-device
program's inputs, give its results. The runs of each rank count are one ``mpiexec``
job (``test/frontends/mpi_batch.py``: the processes start once for all of them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.planner.plan import plan
from distir.runtime import npz
from distir.runtime.backend import get_backend
from distir.tuning.topology import load_topology

pytestmark = pytest.mark.mpi

HERE = Path(__file__).parent
INPUTS = HERE / "inputs"
BIN = Path(sys.executable).parent
BATCH = HERE.parent / "frontends" / "mpi_batch.py"
PROGRAMS = ["mlp.mlir", "mlp_sgd.mlir"]
RANKS = [4, 8]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, int], tuple[list[np.ndarray], list[np.ndarray] | str]]:
    """(program, ranks) -> (the one-device program's results, the plan's under mpi or
    why there are none)."""
    work = tmp_path_factory.mktemp("plan_mpi")
    slow = load_topology(HERE / "slow.toml")
    out: dict = {}
    for ranks in RANKS:
        jobs = []
        for name in PROGRAMS:
            module = parse_module((INPUTS / name).read_text())
            best = plan(module, ranks, slow, top=1).best.module
            f = npz.select_function(module, None, "func")
            inputs = npz.prepare_inputs(module, f, 1, None, 5, grids=npz.resolve_grids(module, 1), bounds=npz.index_bounds(f))
            want = get_backend("interpret").run(module, f.sym_name.data, inputs, 1, 5)
            stem = f"{name.removesuffix('.mlir')}_{ranks}"
            (work / f"{stem}.mlir").write_text(str(best))
            np.savez(work / f"{stem}.in.npz", **inputs)
            jobs.append({"id": stem, "argv": [str(work / f"{stem}.mlir"), "--ranks", str(ranks), "--backend", "mpi", "--inputs", str(work / f"{stem}.in.npz"),
                                              "--outputs", str(work / f"{stem}.out.npz")]})
            out[(name, ranks)] = (want, stem)
        (work / f"jobs{ranks}.json").write_text(json.dumps(jobs))
        cmd = [str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, str(BATCH), str(work / f"jobs{ranks}.json"), str(work / f"report{ranks}.json")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=work)
        report = json.loads((work / f"report{ranks}.json").read_text()) if (work / f"report{ranks}.json").exists() else {}
        for name in PROGRAMS:
            want, stem = out[(name, ranks)]
            if report.get(stem) == 0:
                with np.load(work / f"{stem}.out.npz") as f:
                    out[(name, ranks)] = (want, [f[f"result{i}"] for i in range(len(f.files))])
            else:
                out[(name, ranks)] = (want, f"{stem}: exit {report.get(stem)} (mpiexec {proc.returncode}):\n{proc.stderr[-3000:]}")
    return out


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_the_plan_under_mpi_gives_the_one_device_result(runs, name, ranks):
    want, got = runs[(name, ranks)]
    if isinstance(got, str):
        pytest.fail(got)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(b).max())))
