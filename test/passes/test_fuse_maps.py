"""fuse-maps keeps the meaning; multi-result maps included."""

import pytest
from support.rewrites import check


@pytest.mark.parametrize("name", ["ar_then_computations", "adam", "lamb"])
def test_fuse(name):
    after = check(name, "fuse-maps")
    assert sum(op.name == "dist.map" for op in after.walk()) >= 1


def test_fuse_after_reorder():
    after = check("adam", "split-allreduce,reorder-allgather,fuse-maps", contains=["coll.reduce_scatter"])
    assert sum(op.name == "dist.map" for op in after.walk()) == 1
