"""fuse-allreduce keeps the meaning: gathered and sliced results, inner all-reduces."""

import pytest
from support.rewrites import check


def test_fuse_with_sliced_and_gathered_results():
    check("rs_computations_ag", "fuse-allreduce", contains=["coll.fused_all_reduce avg %g dim 0 gather [true, false]"])


@pytest.mark.parametrize("name", ["ar_then_computations", "adam", "lamb"])
def test_after_split_and_reorder(name):
    check(name, "split-allreduce,reorder-allgather,fuse-allreduce", contains=["coll.fused_all_reduce"], absent=["coll.reduce_scatter"])


def test_zero_style_adam():
    check("adam", "split-allreduce,reorder-allgather,slice-state{targets=m,v},fuse-allreduce", contains=["gather [true, false, false]"])
