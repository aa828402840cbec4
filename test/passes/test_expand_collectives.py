"""expand-collectives keeps the meaning (interpreter, 1-8 ranks); form-collectives
turns the expansion back into the same collectives."""

import pytest
from support.rewrites import check, program, UNEVEN_RANKS, uneven

from distir.dialects.context import parse_module


@pytest.mark.parametrize("name", ["collectives", "fused", "adam"])
def test_expansion_keeps_meaning(name):
    after = check(name, "expand-collectives", contains=["dist.reduce", "dist.repl"], absent=["coll.all_reduce"])
    assert not any(op.name.startswith("coll.") for op in after.walk())


def test_round_trip_through_primitives():
    text = program("collectives")
    after = check(text, "expand-collectives,form-collectives", changes=False)
    # the same ops as the original, in the same order
    assert [op.name for op in after.walk()] == [op.name for op in parse_module(text).walk()]


@pytest.mark.parametrize(
    "name,pipeline,contains",
    [
        ('collectives', 'expand-collectives', ['dist.reduce', 'dist.slice']),
        ('fused', 'expand-collectives', ['dist.reduce']),
    ],
)
def test_uneven_blocks(name, pipeline, contains):
    """The same programs on prime dims that no rank count of UNEVEN_RANKS divides
    (blocks of ceil(s/n), some ranks holding fewer elements or none)."""
    check(uneven(name), pipeline, contains=contains, ranks=UNEVEN_RANKS)
