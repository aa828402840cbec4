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
