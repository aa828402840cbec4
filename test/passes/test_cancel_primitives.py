"""cancel-primitives keeps the meaning: expansions whose inverse pairs it removes."""

import pytest
from support.rewrites import check, UNEVEN_RANKS, uneven


@pytest.mark.parametrize("name", ["ar_then_computations", "rs_computations_ag", "collectives"])
def test_cancel_after_moving_maps(name):
    # moving maps across primitives leaves pairs such as repl(drop(x)) behind
    check(name, "expand-collectives,commute-maps,cancel-primitives", absent=[])


def test_gather_of_scatter_cancels_to_nothing_but_the_reduction():
    text = """
dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<16xf32, @world, [local]>) -> !dist.tensor<16xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter sum %x dim 0 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %ag = coll.all_gather %rs : !dist.tensor<16xf32, @world, [sliced<0>]> -> !dist.tensor<16xf32, @world, [replicated]>
  func.return %ag : !dist.tensor<16xf32, @world, [replicated]>
}
"""
    # reduce ; slice ; join ; repl  ->  reduce ; repl  ->  all_reduce
    after = check(text, "expand-collectives,cancel-primitives,form-collectives", contains=["coll.all_reduce sum %x"])
    assert "dist.slice" not in str(after)


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('ar_then_computations', 'expand-collectives,commute-maps,cancel-primitives', []),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
