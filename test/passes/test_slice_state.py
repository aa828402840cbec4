"""slice-state keeps the meaning (inputs and outputs are logical values) while the
state becomes sliced."""

import pytest
from support.rewrites import check, UNEVEN_RANKS, uneven


@pytest.mark.parametrize("targets", ["m,v", ""])
def test_adam_state(targets):
    pipeline = "split-allreduce,reorder-allgather,slice-state" + (f"{{targets={targets}}}" if targets else "")
    after = check("adam", pipeline, contains=["%m: !dist.tensor<64xf32, @world, [sliced<0>]>"])
    p_sliced = "%p: !dist.tensor<64xf32, @world, [sliced<0>]>" in str(after)
    assert p_sliced == (targets == "")  # no targets: the parameters too (ZeRO-3)


def test_lamb_state():
    check("lamb", "split-allreduce,reorder-allgather,slice-state{targets=m,v}", contains=["%v: !dist.tensor<64xf32, @world, [sliced<0>]>"])


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('adam', 'split-allreduce,reorder-allgather,slice-state{targets=m,v},fuse-allreduce', ['%m: !dist.tensor<61xf32, @world, [sliced<0>]>']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)


CONSTANTS = """dist.mesh @world shape = [?]
func.func @step(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %a: f32, %c: !dist.tensor<64xi8, @world, [replicated]>)
    -> (!dist.tensor<64xf32, @world, [sliced<0>]> {dist.inplace = 0 : i64}) {
  %c_s = dist.take_slice %c dim 0 : !dist.tensor<64xi8, @world, [replicated]> -> !dist.tensor<64xi8, @world, [sliced<0>]>
  %y = dist.map(%x, %c_s, %a) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xi8, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%e: f32, %k: i8, %s: f32):
    %zero = arith.constant 0 : i8
    %first = arith.cmpi eq, %k, %zero : i8
    %m = arith.mulf %e, %s : f32
    %r = arith.select %first, %e, %m : f32
    dist.yield %r : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [sliced<0>]>
}
"""


def test_read_only_constants():
    """A read-only argument read through take_slice only (which group each element of an
    optimizer's arena belongs to) is kept sliced when named, with the same results."""
    check(CONSTANTS, "slice-state{targets=c}", contains=["%c: !dist.tensor<64xi8, @world, [sliced<0>]>"], absent=["dist.take_slice"])
