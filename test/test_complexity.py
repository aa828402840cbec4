"""Compile time grows linearly with program size: every rewrite pass, canonicalize,
the lowering passes, the default lowering and the interpreter do at most ~4x the work on a program with
4x the tensors. Work is counted, never timed: the number of Python function calls the
pass makes (``sys.setprofile``), which a rescan of the block per candidate (the
quadratic pattern) multiplies by the program size."""

import sys

import pytest

from distir.dialects.context import make_context, parse_module
from distir.examples.optimizer_step import megatron_mlp_stack, optimizer_step, pipeline_layers, uniform_parameters
from distir.lowering.pipeline import lower
from distir.passes.pipeline import parse_pipeline
from distir.runtime.interpreter import interpret

FUSED = "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce"
SMALL, LARGE = 12, 48
GROWTH = 4.6  # 4x the tensors: linear work grows 4x (plus slack for constant costs)

# (pass or pipeline, program, prefix pipeline)
CASES = [
    ("split-allreduce", "sgd", ""),
    ("reorder-allgather", "sgd", "split-allreduce"),
    ("fuse-maps", "sgd", "split-allreduce,reorder-allgather"),
    ("fuse-allreduce", "sgd", "split-allreduce,reorder-allgather,fuse-maps"),
    ("fuse-collectives", "sgd", "split-allreduce,reorder-allgather"),
    ("reorder-broadcast", "sgd", "split-allreduce{strategy=reduce-bcast}"),
    ("slice-state", "adam", "fuse-maps,split-allreduce,reorder-allgather"),
    ("canonicalize", "sgd", "split-allreduce"),
    ("expand-collectives", "sgd", ""),
    ("form-collectives", "sgd", "expand-collectives"),
    ("commute-maps", "sgd", "expand-collectives"),
    ("cancel-primitives", "sgd", "expand-collectives,commute-maps"),
    ("overlap", "mlp", ""),
    ("reorder-send", "pipe", "split-allreduce{dim=1}"),
    ("combine-collectives", "sgd", "fix-mesh-sizes{ranks=2}"),
    ("combine-collectives", "sgd", f"{FUSED},fix-mesh-sizes{{ranks=2}}"),
    ("lower-buckets", "adam", "fix-mesh-sizes{ranks=2},combine-collectives"),
    ("lower-overlap", "mlp", "overlap,fix-mesh-sizes{ranks=2}"),
    ("lower-to-kernels", "sgd", "fix-mesh-sizes{ranks=2}"),
    ("lower-collectives", "sgd", "fix-mesh-sizes{ranks=2},lower-to-kernels"),
    ("lower", "sgd", ""),
    ("lower", "adam", FUSED),
    ("lower", "mlp", ""),
    ("interpret", "sgd", ""),
]


def program(kind: str, n: int) -> str:
    if kind == "mlp":
        return megatron_mlp_stack(n)
    if kind == "pipe":
        return pipeline_layers(n)
    return optimizer_step(kind, uniform_parameters(n, 64), mixed=kind == "adam")


def calls(kind: str, n: int, prefix: str, timed: str) -> int:
    """Python function calls made by ``timed`` on the size-``n`` program after ``prefix``."""
    module = parse_module(program(kind, n))
    ctx = make_context()
    for p in parse_pipeline(prefix) if prefix else ():
        p.apply(ctx, module)
    passes = () if timed in ("lower", "interpret") else parse_pipeline(timed)
    count = 0

    def counter(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(counter)
    try:
        if timed == "lower":
            lower(module, 2)
        elif timed == "interpret":
            interpret(module, None, {}, ranks=2)
        else:
            for p in passes:
                p.apply(ctx, module)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("timed,kind,prefix", CASES, ids=[f"{c[0]}-after-{c[2] or 'nothing'}" for c in CASES])
def test_work_grows_linearly(timed, kind, prefix):
    small = calls(kind, SMALL, prefix, timed)
    large = calls(kind, LARGE, prefix, timed)
    assert large <= GROWTH * small, f"{timed}: {large} calls for {LARGE} units vs {small} for {SMALL} ({large / small:.1f}x)"


def test_the_count_sees_quadratic_work():
    def quadratic(n):
        items = list(range(n))
        return sum(items.index(i) for i in items if isinstance(i, int) and callable(abs))

    def count(n):
        c = 0

        def counter(frame, event, arg):
            nonlocal c
            c += event == "call"

        sys.setprofile(counter)
        try:
            [quadratic(k) for k in range(n)]
        finally:
            sys.setprofile(None)
        return c

    assert count(4 * SMALL) > GROWTH * count(SMALL)
