"""The StableHLO + sdy export means what the program means. Every example and every case
of ``export-cases.mlir`` (meshes fixed for 1, 2, 4 and 8 ranks), every schedule of
``examples/schedules`` (a rearrangement of an example's ops: at the fewest and the most
ranks it fits) and 30 random programs (``support/programs.py``, at their own rank
counts), the JAX, Shardy and shard programs of the front-end tests as distir-import
reads them, the programs of ``export-uneven.mlir`` (dims the ranks do not divide, at
3, 5, 6 and 7 ranks: the export pads them) and 40 random programs on such dims are
exported, parsed and verified with jaxlib's MLIR (StableHLO and Shardy
registered), compiled by XLA for as many host devices and run; the outputs must agree
with the interpreter's on the same inputs (``runtime/equivalence.py``'s tolerances: rtol
1e-5 for f32). The runs happen in one subprocess (``xla_batch.py``): jax fixes its device
count when it is first imported. An argument or result with an uneven dim is fed and read
as the compiled executable holds it (``support/xla.py``): jax.Array refuses uneven
shardings, and XLA turns them into ones it divides."""

import json
import os
import subprocess
import sys

import pytest
from export_programs import HERE, PROGRAMS, UNEVEN_RANDOM, UNEVEN_RANKS, refusal, runs, text_of
import numpy as np
from support.xla import DEVICES, no_farther

from distir.dialects.context import parse_module
from distir.frontends.export import export_module
from distir.frontends.export_sdy import SdyExporter


def _xla_runs() -> list[tuple[str, str, int]]:
    out = []
    for name, func, ranks in runs():
        if name.startswith("schedules/"):
            counts = [r for n, f, r in runs() if (n, f) == (name, func)]
            if ranks not in (min(counts), max(counts)):
                continue
        out.append((name, func, ranks))
    return out + [(n, f, r) for n, (_, f, r) in UNEVEN_RANDOM.items()]


RUNS = _xla_runs()


@pytest.fixture(scope="module")
def xla_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("xla")
    jobs = [{"id": f"{name}:{func}:{ranks}", "text": text_of(name), "func": func, "ranks": ranks, "seed": 5, "refusal": refusal(name, ranks, SdyExporter)} for name, func, ranks in RUNS]
    (d / "jobs.json").write_text(json.dumps(jobs))
    # XLA's optimizations of its own code are not what this checks: unoptimized, its
    # compiles of 265 small programs take a sixth less CPU
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES} --xla_backend_optimization_level=0"}
    proc = subprocess.run(
        [sys.executable, str(HERE / "xla_batch.py"), str(d / "jobs.json"), str(d / "report.json")],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert (d / "report.json").exists(), proc.stderr[-3000:]
    return json.loads((d / "report.json").read_text())


def test_every_program_runs_at_several_rank_counts():
    for name in PROGRAMS:
        counts = {r for n, _, r in RUNS if n == name}
        assert counts, f"{name} fits no rank count"
    assert {1, 2, 4, 8} <= {r for _, _, r in RUNS}
    assert any(n.startswith("imported/jax-") for n, _, _ in RUNS)
    uneven = {r for n, _, r in RUNS if n.startswith("uneven/")}
    assert uneven == set(UNEVEN_RANKS), f"the uneven programs run at {sorted(uneven)} ranks"
    assert ("case/mm_rs_ag", 8) in {(n, r) for n, _, r in RUNS}, "the reduce_scatter of a dim of 4 over 8 ranks is no longer run"


@pytest.mark.parametrize("name,func,ranks", RUNS, ids=[f"{n}:{f}:{r}" for n, f, r in RUNS])
def test_xla_agrees_with_the_interpreter(xla_report, name, func, ranks):
    entry = xla_report[f"{name}:{func}:{ranks}"]
    assert entry["ok"], entry["message"]


def test_export_is_deterministic():
    module = parse_module(PROGRAMS["case/two_axes"].replace("[2, ?]", "[2, 2]"))
    assert export_module(module, "sdy") == export_module(module, "sdy")


def test_a_wrong_result_is_farther_from_the_float64_one_than_f32_rounding():
    """The float64 tie-break of xla_batch.py: XLA's f32 outputs may differ from the
    interpreter's by as much as the interpreter's own error (a saturated tanh's gradient),
    never by an error of the export's making (one element off by a dropped term)."""
    rng = np.random.default_rng(0)
    exact = rng.uniform(-10, 10, (16, 16))
    ref = (exact + rng.uniform(-3e-5, 3e-5, exact.shape)).astype(np.float32)
    got = (exact + rng.uniform(-3e-5, 3e-5, exact.shape)).astype(np.float32)
    assert no_farther([exact], [ref], [got]) is None
    wrong = got.copy()
    wrong[3, 5] += 1e-3
    assert "result0 at [3, 5]" in no_farther([exact], [ref], [wrong])
