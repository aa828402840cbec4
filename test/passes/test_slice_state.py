"""slice-state keeps the meaning (inputs and outputs are logical values) while the
state becomes sliced."""

import pytest
from support.rewrites import check


@pytest.mark.parametrize("targets", ["m,v", ""])
def test_adam_state(targets):
    pipeline = "split-allreduce,reorder-allgather,slice-state" + (f"{{targets={targets}}}" if targets else "")
    after = check("adam", pipeline, contains=["%m: !dist.tensor<64xf32, @world, [sliced<0>]>"])
    p_sliced = "%p: !dist.tensor<64xf32, @world, [sliced<0>]>" in str(after)
    assert p_sliced == (targets == "")  # no targets: the parameters too (ZeRO-3)


def test_lamb_state():
    check("lamb", "split-allreduce,reorder-allgather,slice-state{targets=m,v}", contains=["%v: !dist.tensor<64xf32, @world, [sliced<0>]>"])
