"""overlap keeps the meaning: the region means exactly its chain."""

import pytest
from support.rewrites import PIPELINE_RANKS, check, UNEVEN_RANKS, uneven


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


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('matmul_all_reduce', 'overlap{chunks=4 order=ring}', ['coll.overlap chunks 4 order ring']),
        ('matmul_all_reduce', 'overlap{order=remote_first granularity=tile}', ['granularity tile']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
