"""synthesis/language.py: enumeration of valid reduction programs, program totals of
P²'s Table 4, notation."""

import pytest

from distir.dialects.diagnostics import InputRejected
from distir.synthesis.driver import synthesize
from distir.synthesis.hierarchy import SynthesisHierarchy, SynthesisLevel
from distir.synthesis.language import enumerate_programs, notation, parse_program, search_stats, short_name


def hierarchy(*cards):
    names = ["node", "gpu"] if len(cards) == 2 else [f"l{i}" for i in range(len(cards))]
    return SynthesisHierarchy((SynthesisLevel("root", 1), *(SynthesisLevel(n, c) for n, c in zip(names, cards))))


def test_program_counts_per_hierarchy_shape():
    assert len(enumerate_programs(hierarchy(16))) == 3  # AllReduce, RS-AG, Reduce-Broadcast
    assert len(enumerate_programs(hierarchy(4, 16))) == 47
    assert len(enumerate_programs(hierarchy(2, 4, 2))) == 658


@pytest.mark.parametrize("cards", [(2, 3), (3, 2), (4, 4), (3,)])
def test_programs_do_not_depend_on_level_sizes(cards):
    h = hierarchy(*cards)
    assert enumerate_programs(h, exact=True) == enumerate_programs(h)


def test_programs_come_in_increasing_size_and_reach_the_reduction():
    h = hierarchy(4, 16)
    progs = enumerate_programs(h)
    assert [len(p) for p in progs] == sorted(len(p) for p in progs)
    assert notation(h, progs[0]) == "(root, InsideGroup, AllReduce)"
    names = {notation(h, p) for p in progs}
    # P²'s two common optimal programs (Figure 10)
    assert "(node, InsideGroup, Reduce) (node, Master(root), AllReduce) (node, InsideGroup, Broadcast)" in names
    assert "(node, InsideGroup, ReduceScatter) (node, Parallel(root), AllReduce) (node, InsideGroup, AllGather)" in names
    assert max(len(p) for p in enumerate_programs(h, size_limit=9)) == 4  # nothing longer exists
    assert len(enumerate_programs(h, size_limit=3)) == 24


def test_search_work_stays_small():
    work = search_stats(hierarchy(4, 16))
    assert work.states == 24 and work.steps_tried == 24 * 20


# P²'s Table 4: programs summed over the matrices of each row.
# distir matches G, J, K and L. F: the paper's 47 is F2's alone (F1 has 3 more: AllReduce,
# RS-AG, Reduce-Broadcast inside a node); no rule gives F 47 and G 53 = 3 + 47 + 3 together.
# H and I: 4 matrices whose hierarchies (d) have two levels, like K's, 4 x 47 = 188; the
# paper's 235 = 5 x 47 cannot come from the sizes (programs do not depend on them).
@pytest.mark.parametrize(
    "name, hierarchy_, axes, reduce_axes, total",
    [
        ("F", (2, 16), (8, 4), (0,), 50),
        ("G", (4, 16), (4, 16), (0,), 53),
        ("H", (4, 16), (16, 2, 2), (0, 2), 188),
        ("I", (4, 16), (2, 2, 16), (0, 2), 188),
        ("J", (4, 16), (64,), (0,), 47),
        ("K", (4, 8), (8, 2, 2), (0, 2), 188),
        ("L", (4, 8), (32,), (0,), 47),
    ],
)
def test_table4_program_totals(name, hierarchy_, axes, reduce_axes, total):
    assert synthesize(hierarchy_, axes, reduce_axes).programs_total == total


def test_notation_round_trip_and_errors():
    h = hierarchy(4, 16)
    for p in enumerate_programs(h):
        assert parse_program(h, notation(h, p)) == p
    assert short_name(enumerate_programs(h)[2]) == "Reduce-Broadcast"
    with pytest.raises(InputRejected, match="unknown level 'rack'"):
        parse_program(h, "(rack, InsideGroup, AllReduce)")
    with pytest.raises(InputRejected, match="needs root above the slice"):
        parse_program(h, "(root, Parallel(root), AllReduce)")
    with pytest.raises(InputRejected, match="size limit must be a positive integer"):
        enumerate_programs(h, size_limit=0)
