"""fuse-maps keeps the meaning; multi-result maps included."""

import pytest
from support.rewrites import check, UNEVEN_RANKS, uneven


@pytest.mark.parametrize("name", ["ar_then_computations", "adam", "lamb"])
def test_fuse(name):
    after = check(name, "fuse-maps")
    assert sum(op.name == "dist.map" for op in after.walk()) >= 1


def test_fuse_after_reorder():
    after = check("adam", "split-allreduce,reorder-allgather,fuse-maps", contains=["coll.reduce_scatter"])
    assert sum(op.name == "dist.map" for op in after.walk()) == 1


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('adam', 'split-allreduce,reorder-allgather,fuse-maps', ['coll.reduce_scatter']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
