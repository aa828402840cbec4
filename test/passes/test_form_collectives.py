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


DROPPED_ON_BOTH_AXES = """
dist.mesh @grid shape = SHAPE
func.func @f(%g: !dist.tensor<8x4xf32, @grid, [local, local]>, %w: !dist.tensor<8x4xf32, @grid, [replicated, replicated]>) -> !dist.tensor<8x4xf32, @grid, [replicated, replicated]> {
  %r0 = dist.reduce sum %g : !dist.tensor<8x4xf32, @grid, [local, local]> -> !dist.tensor<8x4xf32, @grid, [unplaced, local]>
  %r = dist.reduce sum %r0 axis 1 : !dist.tensor<8x4xf32, @grid, [unplaced, local]> -> !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>
  %w1 = dist.drop %w axis 1 : !dist.tensor<8x4xf32, @grid, [replicated, replicated]> -> !dist.tensor<8x4xf32, @grid, [replicated, unplaced]>
  %w0 = dist.drop %w1 : !dist.tensor<8x4xf32, @grid, [replicated, unplaced]> -> !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>
  %m = dist.map(%w0, %r) : (!dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>, !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>) -> !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]> {
  ^bb0(%a: f32, %b: f32):
    %d = arith.subf %a, %b : f32
    dist.yield %d : f32
  }
  %y0 = dist.repl %m : !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]> -> !dist.tensor<8x4xf32, @grid, [replicated, unplaced]>
  %y = dist.repl %y0 axis 1 : !dist.tensor<8x4xf32, @grid, [replicated, unplaced]> -> !dist.tensor<8x4xf32, @grid, [replicated, replicated]>
  func.return %y : !dist.tensor<8x4xf32, @grid, [replicated, replicated]>
}
"""


@pytest.mark.parametrize("ranks, shape", [(1, "[1, 1]"), (2, "[2, 1]"), (4, "[2, 2]"), (8, "[2, 4]")])
def test_an_operand_dropped_on_both_axes_is_taken_sliced_in_the_region(ranks, shape):
    """The fused all-reduce over two axes takes its slices of the dropped weight (no
    unplaced value in its region), on the interpreter and through the default lowering."""
    from support.runs import agree_on_local

    from distir.dialects.context import parse_module

    text = DROPPED_ON_BOTH_AXES.replace("SHAPE", shape)
    module = check(text, "form-collectives", contains=["coll.fused_all_reduce sum %g dim 0 axes [0, 1]", "dist.take_slice %w dim 0"], absent=["dist.drop", "dist.slice"], ranks=[ranks])
    assert "unplaced" not in str(module)
    agree_on_local(parse_module(text), "f", ranks)
