"""canonicalize (xDSL's pass with distir's patterns) keeps the meaning."""

import pytest
from support.rewrites import check, UNEVEN_RANKS, uneven

SUM_OF_ALL_REDUCES = """
dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<16xf32, @world, [local]>, %y: !dist.tensor<16xf32, @world, [local]>) -> !dist.tensor<16xf32, @world, [replicated]> {
  %a = coll.all_reduce avg %x : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [replicated]>
  %b = coll.all_reduce avg %y : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [replicated]>
  %c = dist.map(%a, %b) : (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [replicated]>) -> !dist.tensor<16xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32):
    %z = arith.addf %p, %q : f32
    dist.yield %z : f32
  }
  func.return %c : !dist.tensor<16xf32, @world, [replicated]>
}
"""


def test_sum_of_all_reduces():
    after = check(SUM_OF_ALL_REDUCES, "canonicalize", contains=["coll.all_reduce avg %c_part"])
    assert sum(op.name == "coll.all_reduce" for op in after.walk()) == 1


def test_collective_pairs():
    # reduce_scatter ; all_gather  and  reduce ; broadcast  become all_reduces, the send
    # to the holder itself vanishes
    check("collectives", "canonicalize", contains=["%ag = coll.all_reduce avg %x"], absent=["coll.send"])


def test_split_then_canonicalize_is_the_original():
    from support.rewrites import program

    from distir.dialects.context import parse_module
    from distir.passes.pipeline import apply_pipeline

    text = program("matmul_all_reduce")
    after = apply_pipeline(parse_module(text), "split-allreduce,canonicalize")
    ops = [op.name for op in after.walk()]
    assert ops == [op.name for op in parse_module(text).walk()]


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('collectives', 'canonicalize', ['coll.all_reduce avg %x']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
