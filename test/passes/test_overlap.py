"""overlap keeps the meaning: the region means exactly its chain."""

from support.rewrites import PIPELINE_RANKS, check


def test_matmul_all_reduce():
    check("matmul_all_reduce", "overlap{chunks=4 order=ring}", contains=["coll.overlap chunks 4 order ring"])


def test_matmul_fused_all_reduce():
    check(
        "matmul_all_reduce",
        "split-allreduce,reorder-allgather,fuse-allreduce,overlap{order=remote_first targets=layer,out}",
        contains=["coll.overlap chunks 4 order remote_first", "coll.fused_all_reduce"],
    )


def test_pipeline_chain():
    check("pipeline", "split-allreduce{dim=1},reorder-send,reorder-allgather,overlap{chunks=2}", contains=["coll.overlap chunks 2"], ranks=PIPELINE_RANKS)
