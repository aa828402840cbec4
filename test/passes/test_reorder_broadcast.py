"""reorder-broadcast keeps the meaning: computations run on the root."""

from support.rewrites import check


def test_computations_run_on_the_root():
    check("broadcast", "reorder-broadcast", contains=["%y_s = dist.map", "%n_s = dist.reduce_tensor", "coll.broadcast %n_s"])


def test_after_a_reduce_broadcast_split():
    check("ar_then_computations", "split-allreduce{strategy=reduce-bcast},reorder-broadcast", contains=["%out_s = dist.map"])
