"""In-place all-gathers of kernel results (``lower-collectives``): the programs of
``gather-in-place.mlir`` and the unfused RS-Adam-AG schedules compute on the ``local``
backend what the reference interpreter computes, on 1, 2, 4 and 8 ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.runs import agree_on_local

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LIT = (HERE / "gather-in-place.mlir").read_text()
ADAM = (ROOT / "examples" / "adam.mlir").read_text().replace("1048576", "64")


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("func", ["gather_fresh", "rs_sgd_ag", "old_value_read_later", "combined_params"])
def test_lit_cases_run_as_interpreted(func, ranks):
    text = LIT.replace("16x", f"{16 * max(ranks, 4) // 4}x") if ranks > 4 else LIT
    agree_on_local(parse_module(text), func, ranks)


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("pipeline", ["split-allreduce,reorder-allgather", "fuse-maps,split-allreduce,reorder-allgather"])
def test_rs_adam_ag_runs_as_interpreted(pipeline, ranks):
    agree_on_local(apply_pipeline(parse_module(ADAM), pipeline), "adam", ranks)
