"""fuse-allreduce keeps the meaning: gathered and sliced results, inner all-reduces."""

from pathlib import Path

import pytest
from support.rewrites import check, lit_function, UNEVEN_RANKS, uneven


def test_fuse_with_sliced_and_gathered_results():
    check("rs_computations_ag", "fuse-allreduce", contains=["coll.fused_all_reduce avg %g dim 0 gather [true, false]"])


@pytest.mark.parametrize("name", ["ar_then_computations", "adam", "lamb"])
def test_after_split_and_reorder(name):
    check(name, "split-allreduce,reorder-allgather,fuse-allreduce", contains=["coll.fused_all_reduce"], absent=["coll.reduce_scatter"])


def test_value_gathered_and_read_sliced_after():
    """The region yields one value for a gathered and a sliced result (fuse-allreduce.mlir's
    @gathered_and_sliced, on 1, 2, 4 and 8 ranks)."""
    text = lit_function(Path(__file__).resolve().parent / "fuse-allreduce.mlir", "gathered_and_sliced")
    check(text, "fuse-allreduce", contains=["gather [true, false]", "coll.yield %t_1, %t_1 :"])


def test_zero_style_adam():
    check("adam", "split-allreduce,reorder-allgather,slice-state{targets=m,v},fuse-allreduce", contains=["gather [true, false, false]"])


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('rs_computations_ag', 'fuse-allreduce', ['coll.fused_all_reduce avg %g dim 0 gather [true, false]']),
        ('lamb', 'split-allreduce,reorder-allgather,fuse-allreduce', ['coll.fused_all_reduce']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
