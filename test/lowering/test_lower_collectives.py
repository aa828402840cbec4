"""``lower-collectives`` executed: the fused all-reduces of ``lower-collectives.mlir``
whose region yields one value for several results (a kernel result, the reduce-scatter's
result, a value from outside), and the one fuse-allreduce makes of a value both gathered
and read as slices (``fuse-allreduce.mlir``'s ``@gathered_and_sliced``), compute on the
``local`` backend what the reference interpreter computes, on 1, 2, 4 and 8 ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.rewrites import lit_function
from support.runs import agree_on_local

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline

HERE = Path(__file__).resolve().parent
LIT = (HERE / "lower-collectives.mlir").read_text()


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("func", ["yield_twice", "yield_twice_kept_first", "yield_twice_inplace", "yield_block_arg", "yield_outer", "fused_sgd"])
def test_yielded_values_run_as_interpreted(func, ranks):
    agree_on_local(parse_module(LIT), func, ranks)


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_gathered_and_sliced_after_fuse_allreduce(ranks):
    module = apply_pipeline(parse_module(lit_function(HERE.parent / "passes" / "fuse-allreduce.mlir", "gathered_and_sliced")), "fuse-allreduce")
    assert "coll.yield %t_1, %t_1" in str(module)
    agree_on_local(module, "gathered_and_sliced", ranks)
