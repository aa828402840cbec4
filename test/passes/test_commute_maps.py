"""commute-maps keeps the meaning in both directions."""

import pytest
from support.rewrites import check, UNEVEN_RANKS, uneven


@pytest.mark.parametrize("name", ["ar_then_computations", "rs_computations_ag", "adam"])
def test_maps_move_up(name):
    check(name, "expand-collectives,commute-maps", contains=["_m = dist.map"])


@pytest.mark.parametrize("name", ["ar_then_computations", "adam"])
def test_maps_move_down(name):
    # after moving up, moving down puts the primitives back before the maps
    check(name, "expand-collectives,commute-maps,cancel-primitives,commute-maps{direction=down}")


def test_identities_give_the_allgather_reorder():
    # all_gather = repl . join: the map moves above both, the pairs cancel, and the
    # reduce ; map ; repl chain is a fused all-reduce running the map on slices
    check(
        "matmul_all_reduce",
        "split-allreduce,expand-collectives,commute-maps,cancel-primitives,form-collectives,cancel-primitives",
        contains=["coll.fused_all_reduce sum %layer dim 0"],
    )


def test_identities_on_adam_compute_on_the_logical_value():
    # with two maps reading the reduction, the maps stay on the unplaced logical value
    check("adam", "split-allreduce,expand-collectives,commute-maps,cancel-primitives", contains=["dist.reduce avg %g", "%p1 = dist.repl %p1_m"])


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('ar_then_computations', 'expand-collectives,commute-maps', ['_m = dist.map']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
