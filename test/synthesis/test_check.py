"""synthesis/check.py: synthesized programs equal one all_reduce when run (interpreter on
8 and 16 ranks, local backend on 16 ranks). CI runs every program of the two-level
shapes and a fixed sample of the three-level one; ``python bench/synthesis.py --check``
runs every program of every shape on both backends."""

import pytest

from distir.synthesis.check import check_programs
from distir.synthesis.hierarchy import synthesis_hierarchy
from distir.synthesis.language import enumerate_programs, notation
from distir.synthesis.matrices import DevicePlacement


def programs_of(hierarchy, matrix, reduce_axes):
    p = DevicePlacement.standard(matrix, hierarchy)
    h = synthesis_hierarchy(p, reduce_axes)
    return p, h, enumerate_programs(h)


@pytest.mark.parametrize(
    "hierarchy, matrix, reduce_axes",
    [
        ((2, 4), ((1, 2), (2, 2)), (1,)),  # 8 ranks, two levels
        ((4, 4), ((2, 2), (2, 2)), (0,)),  # 16 ranks, two levels
        ((2, 8), ((2, 2), (1, 2), (1, 2)), (0, 2)),  # 16 ranks, two reduction axes collapsed
        ((4, 4), ((4, 1), (1, 4)), (1,)),  # 16 ranks, one level
    ],
)
def test_every_program_equals_all_reduce_on_the_interpreter(hierarchy, matrix, reduce_axes):
    p, h, progs = programs_of(hierarchy, matrix, reduce_axes)
    assert check_programs(p, h, progs, reduce_axes) == []


def test_three_level_programs_sample_on_8_ranks():
    p, h, progs = programs_of((2, 2, 2), ((2, 2, 2),), (0,))
    assert len(progs) == 658
    sample = progs[:7] + progs[7::11]  # 66 programs of every size, fixed
    assert {len(q) for q in sample} == {1, 2, 3, 4, 5}
    assert check_programs(p, h, sample, (0,)) == []


def test_programs_run_on_the_local_backend_with_16_ranks():
    p, h, progs = programs_of((4, 4), ((2, 2), (2, 2)), (0,))
    names = {
        "(root, InsideGroup, AllReduce)",
        "(node, InsideGroup, Reduce) (node, Master(root), AllReduce) (node, InsideGroup, Broadcast)",
        "(node, InsideGroup, ReduceScatter) (node, Parallel(root), AllReduce) (node, InsideGroup, AllGather)",
        "(root, InsideGroup, Reduce) (node, Master(root), Broadcast) (root, InsideGroup, Broadcast)",
        "(node, InsideGroup, ReduceScatter) (node, Parallel(root), ReduceScatter) (node, Parallel(root), AllGather) (node, InsideGroup, AllGather)",
    }
    chosen = [q for q in progs if notation(h, q) in names]
    assert len(chosen) == len(names)
    assert check_programs(p, h, chosen, (0,), backend="local") == []


def test_a_wrong_program_is_reported():
    p, h, progs = programs_of((2, 4), ((1, 2), (2, 2)), (1,))
    # the reduce-scatter alone leaves slices: it does not even lower to the all_reduce's type
    bad = check_programs(p, h, [progs[1][:1]], (1,))
    assert len(bad) == 1 and "does not lower" in bad[0].detail
