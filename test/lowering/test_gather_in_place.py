"""In-place all-gathers of kernel results (``lower-collectives``): the programs of
``gather-in-place.mlir`` and the unfused RS-Adam-AG schedules compute on the ``local``
backend what the reference interpreter computes, on 1, 2, 4 and 8 ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline
from distir.runtime.equivalence import compare_outputs
from distir.runtime.interpreter import interpret
from distir.runtime.local import LocalBackend

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LIT = (HERE / "gather-in-place.mlir").read_text()
ADAM = (ROOT / "examples" / "adam.mlir").read_text().replace("1048576", "64")


def _agree(module, func: str, ranks: int) -> None:
    want = interpret(module, func, None, ranks, seed=ranks)
    got = LocalBackend().run(module, func, {}, ranks, seed=ranks)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("func", ["gather_fresh", "rs_sgd_ag", "old_value_read_later", "combined_params"])
def test_lit_cases_run_as_interpreted(func, ranks):
    text = LIT.replace("16x", f"{16 * max(ranks, 4) // 4}x") if ranks > 4 else LIT
    _agree(parse_module(text), func, ranks)


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("pipeline", ["split-allreduce,reorder-allgather", "fuse-maps,split-allreduce,reorder-allgather"])
def test_rs_adam_ag_runs_as_interpreted(pipeline, ranks):
    _agree(apply_pipeline(parse_module(ADAM), pipeline), "adam", ranks)
