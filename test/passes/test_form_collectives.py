"""form-collectives keeps the meaning, including the fused collectives it recognises."""

import pytest
from support.rewrites import check, program, UNEVEN_RANKS, uneven

REDUCE_MAP_REPL = """
dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<16x8xf32, @world, [local]>, %b: !dist.tensor<8xf32, @world, [replicated]>) -> (!dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<16x8xf32, @world, [sliced<1>]>) {
  %r = dist.reduce sum %x : !dist.tensor<16x8xf32, @world, [local]> -> !dist.tensor<16x8xf32, @world, [unplaced]>
  %bd = dist.drop %b : !dist.tensor<8xf32, @world, [replicated]> -> !dist.tensor<8xf32, @world, [unplaced]>
  %m = dist.map(%r, %bd) : (!dist.tensor<16x8xf32, @world, [unplaced]>, !dist.tensor<8xf32, @world, [unplaced]>) -> !dist.tensor<16x8xf32, @world, [unplaced]> {
  ^bb0(%p: f32, %q: f32):
    %z = arith.mulf %p, %q : f32
    dist.yield %z : f32
  }
  %y = dist.repl %m : !dist.tensor<16x8xf32, @world, [unplaced]> -> !dist.tensor<16x8xf32, @world, [replicated]>
  %r2 = dist.reduce avg %x : !dist.tensor<16x8xf32, @world, [local]> -> !dist.tensor<16x8xf32, @world, [unplaced]>
  %m2 = dist.map(%r2) : (!dist.tensor<16x8xf32, @world, [unplaced]>) -> !dist.tensor<16x8xf32, @world, [unplaced]> {
  ^bb0(%p: f32):
    %z = arith.mulf %p, %p : f32
    dist.yield %z : f32
  }
  %s = dist.slice %m2 dim 1 : !dist.tensor<16x8xf32, @world, [unplaced]> -> !dist.tensor<16x8xf32, @world, [sliced<1>]>
  func.return %y, %s : !dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<16x8xf32, @world, [sliced<1>]>
}
"""


def test_fused_collectives_from_primitives():
    check(REDUCE_MAP_REPL, "form-collectives", contains=["coll.fused_all_reduce sum %x dim 0", "coll.fused_reduce_scatter avg %x dim 1"])


@pytest.mark.parametrize("name", ["collectives", "fused", "rs_computations_ag"])
def test_form_after_expand(name):
    check(program(name), "expand-collectives,form-collectives", contains=["coll."], changes=False)


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        (REDUCE_MAP_REPL, 'form-collectives', ['coll.fused_all_reduce sum %x dim 0', 'coll.fused_reduce_scatter avg %x dim 1']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
