"""The papers' schedules (``PAPER_SCHEDULES``): the Python API and ``distir-opt`` give the
same program, ``examples/schedules/`` holds it, each schedule keeps the program's meaning
on 1, 2, 4 and 8 ranks (interpreter, shrunk shapes), and slice-state Adam holds its
optimizer state in 1/N of the memory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import tools

from distir.dialects.context import parse_module
from distir.runtime import equivalent, run_function
from distir.tuning.schedule import PAPER_SCHEDULES, Schedule, render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Shapes small enough for the interpreter that keep every sliced dim divisible by 8
# (the tensor-parallel axis of the pipeline has at most 4 ranks).
SHRINK: dict[str, list[tuple[str, str]]] = {
    "adam.mlir": [("1048576", "64")],
    "lamb.mlir": [("1048576", "64")],
    "sgd.mlir": [("1048576", "64")],
    "megatron_attention.mlir": [("8x1024x3072", "8x4x16"), ("3072x3072", "16x16"), ("3072xf16", "16xf16")],
    "megatron_mlp.mlir": [
        ("4x512x4096", "2x8x32"),
        ("4x512x1024", "2x8x16"),
        ("1024x4096", "16x32"),
        ("4096x1024", "32x16"),
        ("4096xf32", "32xf32"),
        ("1024xf32", "16xf32"),
    ],
    "pipeline_layer.mlir": [("2x2048x12288", "2x8x16"), ("12288xf16", "16xf16")],
    "transformer_decode.mlir": [("8192", "64"), ("2048", "16")],
    "dlrm_embedding.mlir": [("4096", "32"), ("1024x", "16x"), ("x256xf32", "x8xf32"), ("x8xi32", "x4xi32")],
    "moe.mlir": [("8x256x1024", "8x16x16"), ("8x256x512", "8x16x8"), ("8x512x1024", "8x8x16"), ("8x256x1", "8x16x1"), ("256x1024", "16x16")],
}
RANKS: dict[str, tuple[int, ...]] = {"pipeline_layer.mlir": (2, 4, 8)}


def small(example: str) -> str:
    text = (EXAMPLES / example).read_text()
    for old, new in SHRINK[example]:
        assert old in text, f"{example} no longer holds {old}"
        text = text.replace(old, new)
    return text


def ids(ps) -> str:
    return f"{ps.example.removesuffix('.mlir')}:{ps.name}"


@pytest.mark.parametrize("ps", PAPER_SCHEDULES, ids=ids)
def test_example_file_is_the_api_output(ps):
    path = EXAMPLES / "schedules" / ps.output
    assert path.read_text() == render(ps), f"{path} is stale: python -m distir.tuning.schedule examples/schedules"


@pytest.mark.parametrize("ps", PAPER_SCHEDULES, ids=ids)
def test_distir_opt_gives_the_api_output(ps):
    s = ps.run()
    out = subprocess.run(
        [tools.path("distir-opt"), str(EXAMPLES / ps.example), "-p", s.pipeline()], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == s.text().strip()


@pytest.mark.parametrize("ps", PAPER_SCHEDULES, ids=ids)
def test_schedule_keeps_the_meaning(ps):
    text = small(ps.example)
    s = ps.run(program=text)
    for ranks in RANKS.get(ps.example, (1, 2, 4, 8)):
        report = equivalent(parse_module(text), s.module, ranks, trials=2, seed=ranks)
        assert report, f"{ps.name} on {ranks} ranks: {report.message}"


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_sliced_state_uses_a_rank_share_of_memory(ranks):
    """fuse(RS-Adam-AG) with m, v sliced: each rank holds 1/ranks of m and v."""
    text = small("adam.mlir")
    fused = next(ps for ps in PAPER_SCHEDULES if ps.name == "fuse(RS-Adam-AG)").run(program=text)
    base = run_function(parse_module(text), "adam", None, ranks)
    sliced = run_function(fused.module, "adam", dict(base.inputs), ranks)
    full = 64 * 4  # 64 f32 elements
    for name in ("m", "v"):
        assert base.allocated_bytes[name] == [full] * ranks
        assert sliced.allocated_bytes[name] == [full // ranks] * ranks
    # the parameters stay replicated; the logical results agree
    assert sliced.allocated_bytes["p"] == base.allocated_bytes["p"]
    assert equivalent(parse_module(text), fused.module, ranks)


def test_schedule_api_records_a_pipeline_distir_opt_reproduces(tmp_path):
    s = Schedule.load(EXAMPLES / "adam.mlir")
    rs, ag = s.split("avg")
    assert (rs, ag) == ("avg_rs", "avg_ag")
    s.reorder(ag).as_slice("m", "v").fuse(rs, policy="allreduce")
    assert s.pipeline() == (
        "split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m,v},fuse-allreduce{targets=avg_rs}"
    )
    assert "coll.fused_all_reduce avg %g dim 0 gather [true, false, false]" in s.text()
