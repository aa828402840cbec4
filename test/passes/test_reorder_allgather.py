"""reorder-allgather keeps the meaning: maps, dropout, reductions and matmuls run on
slices."""

from support.rewrites import check


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
