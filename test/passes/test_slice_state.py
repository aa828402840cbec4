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
