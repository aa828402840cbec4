"""lower-buckets (default lowering): combined steps run on the ``local`` backend equal to
the interpreter on 1, 2, 4 and 8 ranks; the lowered step is one collective (or one
fused collective) and one kernel per repeated map, over arenas of the arguments."""

import collections

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.examples.optimizer_step import optimizer_step
from distir.lowering.pipeline import lower
from distir.passes.pipeline import apply_pipeline
from distir.runtime.interpreter import interpret
from distir.runtime.local import run_local

PARAMS = [("a", (16,)), ("b", (8, 4)), ("c", (24,)), ("d", (40,))]
FUSED = "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce"
CASES = [("sgd", "", False), ("adam", "", True), ("sgd", FUSED, False), ("adam", FUSED, True)]


def _program(optimizer, pipeline, mixed):
    text = optimizer_step(optimizer, PARAMS, mixed=mixed)
    module = parse_module(text)
    if pipeline:
        apply_pipeline(module, pipeline)
    return text, module


RUNS = [(*case, ranks) for case in CASES for ranks in ([1, 2, 4, 8] if case[0] == "adam" else [2])]


@pytest.mark.parametrize("optimizer,pipeline,mixed,ranks", RUNS)
def test_combined_step_equals_interpreter(optimizer, pipeline, mixed, ranks):
    text, module = _program(optimizer, pipeline, mixed)
    got = run_local(module, None, {}, ranks=ranks, seed=1)
    want = interpret(parse_module(text), None, {}, ranks=ranks, seed=1)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer,pipeline,mixed", CASES)
def test_lowered_step_is_one_collective(optimizer, pipeline, mixed):
    _, module = _program(optimizer, pipeline, mixed)
    lowered = lower(module, 2)
    (f,) = [o for o in lowered.ops if o.name == "func.func"]
    counts = collections.Counter(o.name for o in f.walk())
    assert counts["nccl.all_reduce"] + counts["nccl.reduce_scatter"] == 1
    assert counts["rt.launch"] <= (1 if pipeline else 3)
    assert "rt.copy" not in counts  # arguments are laid out in arenas: nothing is packed by copying
    assert len(f.attributes["rt.arenas"].data) >= 2
