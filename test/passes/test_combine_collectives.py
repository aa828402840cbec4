"""combine-collectives keeps the meaning: combined all_reduces (group size known),
combined fused all-reduces (the fused CoCoNet schedule per tensor), and the other kinds,
on 1, 2, 4 and 8 ranks; and the lowering runs the combined step as one collective."""

import pytest
from support.rewrites import RANKS, check, UNEVEN_RANKS, uneven

from distir.dialects.context import parse_module
from distir.examples.optimizer_step import optimizer_step
from distir.passes.pipeline import apply_pipeline
from distir.runtime import equivalent

PARAMS = [("a", (16,)), ("b", (8, 4)), ("c", (24,))]
FUSED = "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce"


@pytest.mark.parametrize("ranks", RANKS)
def test_combined_all_reduces(ranks):
    text = optimizer_step("adam", PARAMS, mixed=True).replace("shape = [?]", f"shape = [{ranks}]")
    module = apply_pipeline(parse_module(text), "combine-collectives")
    printed = str(module)
    assert printed.count("coll.fused_all_reduce avg") == 1 and "coll.all_reduce" not in printed
    assert equivalent(parse_module(text), module, ranks=ranks)


def test_combined_fused_all_reduces():
    text = optimizer_step("sgd", PARAMS)
    module = check(text, f"{FUSED},combine-collectives", contains=["coll.fused_all_reduce avg %g_a, %g_b, %g_c dim 0"])
    assert str(module).count("coll.fused_all_reduce") == 1


KINDS = """
dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<16xf32, @world, [local]>, %y: !dist.tensor<8x8xf32, @world, [local]>,
             %s: !dist.tensor<16xf32, @world, [sliced<0>]>, %t: !dist.tensor<8x8xf32, @world, [sliced<0>]>)
    -> (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<8x8xf32, @world, [sliced<0>]>,
        !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<8x8xf32, @world, [replicated]>,
        !dist.tensor<16xf32, @world, [at<0>]>, !dist.tensor<8x8xf32, @world, [at<0>]>) {
  %rx = coll.reduce_scatter sum %x dim 0 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %ry = coll.reduce_scatter sum %y dim 0 : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
  %gs = coll.all_gather %s : !dist.tensor<16xf32, @world, [sliced<0>]> -> !dist.tensor<16xf32, @world, [replicated]>
  %gt = coll.all_gather %t : !dist.tensor<8x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x8xf32, @world, [replicated]>
  %dx = coll.reduce max %x root 0 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [at<0>]>
  %dy = coll.reduce max %y root 0 : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [at<0>]>
  func.return %rx, %ry, %gs, %gt, %dx, %dy : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<8x8xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<8x8xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [at<0>]>, !dist.tensor<8x8xf32, @world, [at<0>]>
}
"""


def test_combined_kinds():
    check(
        KINDS,
        "combine-collectives",
        contains=["coll.fused_reduce_scatter sum %x, %y dim 0", "coll.fused_all_gather %s, %t", "coll.fused_reduce max %x, %y root 0"],
        absent=["coll.reduce_scatter", "coll.all_gather ", "coll.reduce "],
    )


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('adam', 'split-allreduce,reorder-allgather,fuse-allreduce,combine-collectives', ['coll.fused_all_reduce']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)


# All-reduces over dp of operands also sliced over tp (issue 27): on a 2-D mesh of every
# rank count, the pass keeps the meaning, and the default lowering (which runs it) computes
# what the interpreter does.
GRID_SHAPES = {1: "[1, 1]", 2: "[2, 1]", 4: "[2, 2]", 8: "[2, 4]"}
SLICED_ON_TP = """
dist.mesh @grid shape = SHAPE axes = ["dp", "tp"]
func.func @f(%a: !dist.tensor<32x4x8xf32, @grid, [local, sliced<1>]>, %b: !dist.tensor<4x8x32xf32, @grid, [local, sliced<0>]>,
             %c: !dist.tensor<16x8x8xf32, @grid, [local, sliced<1>]>, %d: !dist.tensor<8x8x16xf32, @grid, [local, sliced<0>]>,
             %x: !dist.tensor<8xf32, @grid, [local, at<0>]>, %y: !dist.tensor<8xf32, @grid, [local, replicated]>)
    -> (!dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>,
        !dist.tensor<16x8x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<8x8x16xf32, @grid, [replicated, sliced<0>]>,
        !dist.tensor<8xf32, @grid, [replicated, at<0>]>, !dist.tensor<8xf32, @grid, [replicated, replicated]>) {
  %0 = coll.all_reduce sum %a : !dist.tensor<32x4x8xf32, @grid, [local, sliced<1>]> -> !dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>
  %1 = coll.all_reduce sum %b : !dist.tensor<4x8x32xf32, @grid, [local, sliced<0>]> -> !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>
  %2 = coll.all_reduce sum %c : !dist.tensor<16x8x8xf32, @grid, [local, sliced<1>]> -> !dist.tensor<16x8x8xf32, @grid, [replicated, sliced<1>]>
  %3 = coll.all_reduce sum %d : !dist.tensor<8x8x16xf32, @grid, [local, sliced<0>]> -> !dist.tensor<8x8x16xf32, @grid, [replicated, sliced<0>]>
  %4 = coll.all_reduce sum %x : !dist.tensor<8xf32, @grid, [local, at<0>]> -> !dist.tensor<8xf32, @grid, [replicated, at<0>]>
  %5 = coll.all_reduce sum %y : !dist.tensor<8xf32, @grid, [local, replicated]> -> !dist.tensor<8xf32, @grid, [replicated, replicated]>
  func.return %0, %1, %2, %3, %4, %5 : !dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>, !dist.tensor<16x8x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<8x8x16xf32, @grid, [replicated, sliced<0>]>, !dist.tensor<8xf32, @grid, [replicated, at<0>]>, !dist.tensor<8xf32, @grid, [replicated, replicated]>
}
"""


@pytest.mark.parametrize("ranks", RANKS)
def test_all_reduces_over_one_axis_of_operands_sliced_over_another(ranks):
    from support.runs import agree_on_local

    text = SLICED_ON_TP.replace("SHAPE", GRID_SHAPES[ranks])
    module = apply_pipeline(parse_module(text), f"fix-mesh-sizes{{ranks={ranks}}},combine-collectives")
    printed = str(module)
    # a, c and y along dim 0, b with d along dim 1 (dp divides both), x alone (tp 0 only)
    assert "coll.fused_all_reduce sum %a, %c, %y dim 0" in printed and "coll.fused_all_reduce sum %b, %d dim 1" in printed
    assert "coll.all_reduce sum %x" in printed
    assert equivalent(parse_module(text), module, ranks=ranks)
    agree_on_local(parse_module(text), "f", ranks)
