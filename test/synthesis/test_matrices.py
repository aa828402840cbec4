"""synthesis/matrices.py: parallelism matrices (P² §3.1) and placements."""

import pytest

from distir.dialects.diagnostics import InputRejected
from distir.synthesis.matrices import DevicePlacement, format_matrix, parallelism_matrices


def test_the_three_placements_of_4x16_on_4x16():
    assert parallelism_matrices([4, 16], [4, 16]) == [((1, 4), (4, 4)), ((2, 2), (2, 8)), ((4, 1), (1, 16))]


@pytest.mark.parametrize(
    "hierarchy, axes, expected",
    [  # the matrices of P²'s Table 3 (A-C: 4 nodes of 16 A100, E: 4 nodes of 8 V100)
        ((4, 16), (2, 32), [((1, 2), (4, 8)), ((2, 1), (2, 16))]),
        ((4, 16), (8, 8), [((1, 8), (4, 2)), ((2, 4), (2, 4)), ((4, 2), (1, 8))]),
        ((4, 8), (8, 4), [((1, 8), (4, 1)), ((2, 4), (2, 2)), ((4, 2), (1, 4))]),
        ((2, 16), (8, 4), [((1, 8), (2, 2)), ((2, 4), (1, 4))]),  # Table 4's F1, F2
    ],
)
def test_table3_matrices(hierarchy, axes, expected):
    assert parallelism_matrices(hierarchy, axes) == expected


def test_three_axes_and_products():
    mats = parallelism_matrices([4, 16], [16, 2, 2])
    assert len(mats) == 4 and ((2, 8), (2, 1), (1, 2)) in mats  # H2
    for m in mats:
        assert [m[0][j] * m[1][j] * m[2][j] for j in range(2)] == [4, 16]
    fig2 = parallelism_matrices([1, 2, 2, 4], [4, 4])  # Figure 2: (b), (c), (d) are among its 4
    assert len(fig2) == 4 and {((1, 2, 2, 1), (1, 1, 1, 4)), ((1, 2, 1, 2), (1, 1, 2, 2)), ((1, 1, 2, 2), (1, 2, 1, 2))} < set(fig2)


def test_mismatched_sizes_are_diagnostics():
    with pytest.raises(InputRejected, match=r"axes \[4, 8\] hold 32 devices but the hierarchy \[4, 16\] has 64"):
        parallelism_matrices([4, 16], [4, 8])
    with pytest.raises(InputRejected, match="positive integers"):
        parallelism_matrices([4, 0], [4])


def test_standard_placement_splits_levels_into_factor_axes():
    p = DevicePlacement.standard(((2, 2), (2, 8)), (4, 16), ("node", "gpu"))
    assert [f.name for f in p.factors] == ["node_p0", "node_p1", "gpu_p0", "gpu_p1"]
    assert p.sizes == (2, 2, 2, 8) and p.axis_factors(0) == (0, 2) and p.axis_factors(1) == (1, 3)
    assert p.matrix == ((2, 2), (2, 8)) and format_matrix(p.matrix) == "[[2,2],[2,8]]"
    # axis-0 groups: ranks with the same node_p1, gpu_p1 digits
    groups = p.groups([0, 2])
    assert len(groups) == 16 and groups[0] == (0, 8, 32, 40)
    assert p.groups([0, 2], fixed_zero=[3]) == [(0, 8, 32, 40), (16, 24, 48, 56)]


def test_placement_of_a_view_mesh():
    p = DevicePlacement.from_view((2, 2, 2, 8), [[0, 2], [1, 3]], (4, 16), ("node", "gpu"))
    assert p.matrix == ((2, 2), (2, 8)) and p == DevicePlacement.standard(((2, 2), (2, 8)), (4, 16), ("node", "gpu"))
    # gpu factors swapped: still a placement, with axis 1 outer inside the gpu level
    q = DevicePlacement.from_view((2, 2, 8, 2), [[0, 3], [1, 2]], (4, 16))
    assert q.matrix == ((2, 2), (2, 8)) and [f.axis for f in q.factors] == [0, 1, 1, 0]
    assert DevicePlacement.from_view((8, 8), [[0], [1]], (4, 16)) is None  # 8 straddles node and gpu
    assert DevicePlacement.from_view((4, 16), [[0]], (4, 16)) is None  # axis 1 of @hw unused
