"""synthesis/semantics.py: Fig. 8's Hoare rules on boolean device states, Figures 3 and 4."""

import pytest

from distir.synthesis.hierarchy import SynthesisHierarchy, SynthesisLevel, synthesis_hierarchy
from distir.synthesis.language import parse_program
from distir.synthesis.matrices import DevicePlacement
from distir.synthesis.semantics import Invalid, accepts, collective, final_state, initial_state

FULL, D0, D1 = 0b1111, 0b0001, 0b0010


def apply(state, kind, group):
    out = list(state)
    bad = collective(state, kind, group, out)
    return bad if bad is not None else tuple(out)


def test_fig8_examples_on_devices_0_and_1_of_4():
    s = initial_state(4)
    assert s[0] == (D0,) * 4 and s[3] == (0b1000,) * 4
    ar = apply(s, "AllReduce", (0, 1))
    assert ar[0] == ar[1] == (D0 | D1,) * 4 and ar[2] == s[2]
    rs = apply(s, "ReduceScatter", (0, 1))
    assert rs[0] == (D0 | D1, D0 | D1, 0, 0) and rs[1] == (0, 0, D0 | D1, D0 | D1)
    assert apply(rs, "AllGather", (0, 1))[:2] == ar[:2]
    r = apply(s, "Reduce", (0, 1))
    assert r[0] == (D0 | D1,) * 4 and r[1] == (0,) * 4
    assert apply(r, "Broadcast", (0, 1))[:2] == ar[:2]


@pytest.mark.parametrize(
    "steps, reason",
    [
        ([("AllReduce", (0, 1)), ("AllReduce", (0, 1))], "the same data would be reduced twice"),
        ([("ReduceScatter", (0, 1)), ("AllReduce", (0, 1))], "data of different chunks would be reduced"),
        ([("AllReduce", (0, 1)), ("AllGather", (0, 1))], "two devices hold the same chunk"),
        ([("AllReduce", (0, 1)), ("Broadcast", (0, 1))], "no device gains data"),
        ([("Broadcast", (0, 1))], "device 1 holds data its root 0 lacks"),
        ([("ReduceScatter", (0, 1)), ("ReduceScatter", (2, 3)), ("AllGather", (1, 2))], "do not concatenate in group order"),
    ],
)
def test_fig8_rules_reject(steps, reason):
    s = initial_state(4)
    for kind, group in steps:
        s = apply(s, kind, group)
        if isinstance(s, Invalid):
            break
    assert isinstance(s, Invalid) and reason in str(s)


def test_reduce_scatter_needs_divisible_chunks():
    three_rows = ((D0, D0, D0, 0), (D1, D1, D1, 0), (0,) * 4, (0,) * 4)
    assert "3 chunks cannot be scattered over 2 devices" in str(apply(three_rows, "ReduceScatter", (0, 1)))


def test_final_state_of_a_hierarchy_with_a_non_reduction_level():
    h = SynthesisHierarchy((SynthesisLevel("root", 1), SynthesisLevel("a", 2, reduction=False), SynthesisLevel("b", 2)))
    assert final_state(h)[0] == (0b0011,) * 4 and final_state(h)[3] == (0b1100,) * 4


# Figure 2d's placement reducing the parameter shards (axis 1): hierarchy (d) is
# [(root, 1), (server, 2), (GPU, 2)]; A0 and A1 differ in the GPU factor, A0 and C0 in server's.
FIG2D = synthesis_hierarchy(
    DevicePlacement.standard(((1, 1, 2, 2), (1, 2, 1, 2)), (1, 2, 2, 4), ("rack", "server", "CPU", "GPU")), [1]
)


@pytest.mark.parametrize(
    "program, reason",
    [
        # Figure 4a: ReduceScatter over {A0, A1}, then AllReduce over {A0, A1}
        ("(server, InsideGroup, ReduceScatter) (server, InsideGroup, AllReduce)", "data of different chunks would be reduced"),
        # Figure 4b: AllReduce over S0 ({A0, C0}), then over everything: A0 and C0 twice
        ("(server, Parallel(root), AllReduce) (root, InsideGroup, AllReduce)", "the same data would be reduced twice"),
    ],
)
def test_figure4_programs_are_invalid(program, reason):
    ok, why = accepts(FIG2D, parse_program(FIG2D, program))
    assert not ok and "step 2" in why and reason in why


@pytest.mark.parametrize(
    "program",
    [
        "(root, InsideGroup, AllReduce)",  # 3a
        "(server, InsideGroup, AllReduce) (server, Parallel(root), AllReduce)",  # 3b
        "(server, InsideGroup, Reduce) (server, Master(root), AllReduce) (server, InsideGroup, Broadcast)",  # 3c, 10(i)
        "(server, InsideGroup, ReduceScatter) (server, Parallel(root), AllReduce) (server, InsideGroup, AllGather)",  # 10(ii)
    ],
)
def test_figure3_and_10_programs_are_valid(program):
    assert accepts(FIG2D, parse_program(FIG2D, program)) == (True, None)


def test_participation_rules():
    # Parallel after a Reduce: the groups of non-roots hold nothing (that is Master's job)
    ok, why = accepts(FIG2D, parse_program(FIG2D, "(server, InsideGroup, Reduce) (server, Parallel(root), AllReduce)"))
    assert not ok and "holds no data" in why
    # Master while the other devices still hold data
    ok, why = accepts(FIG2D, parse_program(FIG2D, "(server, InsideGroup, AllReduce) (server, Master(root), AllReduce)"))
    assert not ok and "outside the master groups still holds data" in why


def test_a_program_must_finish_the_reduction():
    ok, why = accepts(FIG2D, parse_program(FIG2D, "(server, InsideGroup, AllReduce)"))
    assert not ok and "ends before" in why
