"""fuse-collectives keeps the meaning for every fused collective it makes."""

import pytest
from support.rewrites import PIPELINE_RANKS, check, UNEVEN_RANKS, uneven


def test_first_and_finish_fusions():
    check(
        "rs_computations_ag",
        "fuse-collectives",
        contains=["coll.fused_reduce_scatter avg %g dim 0", "coll.fused_reduce_scatter sum %g dim 1"],
    )


def test_reduce():
    check("broadcast", "fuse-collectives", contains=["coll.fused_reduce sum %x root 0"])


def test_broadcast():
    check("broadcast", "fuse-collectives{targets=bc}", contains=["%bc = coll.fused_broadcast %red"])


def test_gather_after_reorder():
    check("ar_then_computations", "split-allreduce{strategy=reduce-bcast},reorder-broadcast,fuse-collectives", contains=["coll.fused_reduce"])


def test_pipeline_fused_send():
    check(
        "pipeline",
        "split-allreduce{dim=1},reorder-send,reorder-allgather,fuse-collectives",
        contains=["coll.fused_all_gather %sum_rs axes [1]"],
        ranks=PIPELINE_RANKS,
    )


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('broadcast', 'fuse-collectives', ['coll.fused_reduce sum %x root 0']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
