"""reorder-allgather keeps the meaning: maps, dropout, reductions and matmuls run on
slices."""

import pytest
from support.rewrites import check, UNEVEN_RANKS, uneven


def test_every_computation_moves():
    after = check(
        "ar_then_computations",
        "split-allreduce,reorder-allgather",
        contains=["%out_s = dist.map", "%drop_s = dist.dropout", "%norm_part = dist.reduce_tensor", "%proj_s = dist.matmul"],
    )
    # the only gathers left are those of the results
    assert sum(op.name == "coll.all_gather" for op in after.walk()) == 3


def test_named_computation_moves_alone():
    after = check("ar_then_computations", "split-allreduce,reorder-allgather{targets=biased}", contains=["%biased_s, %scaled_s = dist.map"])
    assert "%drop_s" not in str(after)


def test_adam_and_lamb():
    check("adam", "split-allreduce,reorder-allgather", contains=["%p1_s = dist.map"])
    check("lamb", "split-allreduce,reorder-allgather", contains=["%pn2_part = dist.reduce_tensor", "coll.all_reduce sum %pn2_part"])


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('ar_then_computations', 'split-allreduce,reorder-allgather', ['dist.map']),
        ('lamb', 'split-allreduce,reorder-allgather', ['%pn2_part = dist.reduce_tensor']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
