"""The guide's worked example (docs/plan.md, docs/tools/distir-plan.md): the 1.3 B-parameter
GPT-3 XL training step written by ``python -m distir.examples.gpt_training_step``, planned
for 16 V100s of one DGX-2 with 16 GiB each. Pure data parallelism does not fit (each rank
would hold every parameter, its gradient and Adam's two moments); the plan distir-plan
writes fits, says what it slices, and is written with its JSON report."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
GIB = 1 << 30
ARG = re.compile(r"%(\w+): !dist\.tensor<([0-9x]+)xf32")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    work = tmp_path_factory.mktemp("gpt13b")
    gen = subprocess.run([sys.executable, "-m", "distir.examples.gpt_training_step", "--model", "gpt3-xl", "-o", "gpt13b.mlir"],
                         cwd=work, capture_output=True, text=True, timeout=600)
    assert gen.returncode == 0, gen.stderr
    r = subprocess.run([str(BIN / "distir-plan"), "gpt13b.mlir", "--ranks", "16", "--model", "dgx2", "--memory", "16GiB",
                        "--explain", "--json", "plan.json", "-o", "plan.mlir"], cwd=work, capture_output=True, text=True, timeout=900)
    return work, r


def test_pure_data_parallelism_does_not_fit(planned):
    work, _ = planned
    sizes = {name: math.prod(int(d) for d in shape.split("x")) for name, shape in ARG.findall((work / "gpt13b.mlir").read_text())}
    params = [n for n in sizes if f"m_{n}" in sizes and f"v_{n}" in sizes]  # the tensors AdamW updates
    assert len(params) > 24 * 4
    replicated = 4 * 4 * sum(sizes[n] for n in params)  # f32 parameter, gradient and two moments on every rank
    assert replicated > 16 * GIB


def test_the_plan_fits_16_gib_and_names_what_it_slices(planned):
    work, r = planned
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    report = json.loads((work / "plan.json").read_text())
    assert report["memory_limit_bytes"] == 16 * GIB and report["plans"]
    for p in report["plans"]:
        assert 0 < p["memory_bytes"] <= 16 * GIB, p["mesh"]
        assert math.prod(p["mesh"]["shape"]) == 16
    best = report["plans"][0]
    assert best["predicted_s"] == min(p["predicted_s"] for p in report["plans"])
    # the report names the sliced arguments: the table's column and the list of the largest
    listed = r.stdout.split("largest arguments", 1)[1].split("Memory per rank", 1)[0]
    sliced = [line for line in listed.splitlines() if re.search(r"\[[^\]]*p\d", line)]
    assert sliced, r.stdout[-3000:]
    assert "Memory per rank: " in r.stdout and "Why " in r.stdout  # --explain
    # the written program is the best plan, placed on its mesh
    text = (work / "plan.mlir").read_text()
    assert text.startswith("// distir-plan: the best plan of")
    assert f"shape = [{', '.join(map(str, best['mesh']['shape']))}]" in text
