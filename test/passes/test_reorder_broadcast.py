"""reorder-broadcast keeps the meaning: computations run on the root."""

import pytest
from support.rewrites import check, UNEVEN_RANKS, uneven


def test_computations_run_on_the_root():
    check("broadcast", "reorder-broadcast", contains=["%y_s = dist.map", "%n_s = dist.reduce_tensor", "coll.broadcast %n_s"])


def test_after_a_reduce_broadcast_split():
    check("ar_then_computations", "split-allreduce{strategy=reduce-bcast},reorder-broadcast", contains=["%out_s = dist.map"])


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('broadcast', 'reorder-broadcast', ['%y_s = dist.map']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
