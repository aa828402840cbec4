"""split-allreduce keeps the meaning with both strategies; a refused request leaves the
module as it was."""

import pytest
from support.rewrites import check, program, UNEVEN_RANKS, uneven
from xdsl.utils.exceptions import PassFailedException

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline

CASES = [
    (name, pipeline)
    for name in ["ar_then_computations", "matmul_all_reduce", "adam"]
    for pipeline in ["split-allreduce", "split-allreduce{strategy=reduce-bcast}", "split-allreduce{strategy=reduce-bcast root=0}"]
] + [("ar_then_computations", "split-allreduce{dim=1}"), ("matmul_all_reduce", "split-allreduce{dim=1}")]


@pytest.mark.parametrize("name,pipeline", CASES)
def test_split(name, pipeline):
    first = "coll.reduce " if "reduce-bcast" in pipeline else "coll.reduce_scatter"
    check(name, pipeline, contains=[first], absent=["coll.all_reduce"])


def test_pipeline_stage_axis():
    check("pipeline", "split-allreduce{dim=1}", contains=["coll.reduce_scatter sum %in dim 1 axes [1]"], ranks=(2, 4, 8))


def test_refused_request_leaves_the_module_unchanged():
    module = parse_module(program("ar_then_computations"))
    before = str(module)
    with pytest.raises(PassFailedException, match="target %biased: is not the result of a coll.all_reduce"):
        apply_pipeline(module, "split-allreduce{targets=sum,biased}")
    assert str(module) == before


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('ar_then_computations', 'split-allreduce', ['coll.reduce_scatter']),
        ('matmul_all_reduce', 'split-allreduce{dim=1}', ['dim 1']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
