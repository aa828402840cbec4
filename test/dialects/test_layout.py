"""Placement arithmetic: nesting orders, local shapes, blocks, views."""

import numpy as np
import pytest
from xdsl.dialects.builtin import f32

from distir.dialects import layout
from distir.dialects.placements import LOCAL, REPLICATED, UNPLACED, At, Sliced


def test_default_nesting_is_mesh_axis_order():
    p = [Sliced(0), Sliced(0)]
    assert layout.slicing_axes(p, 0) == [0, 1]
    assert layout.slicing_axes([Sliced(0, 1), Sliced(0, 0)], 0) == [1, 0]


def test_same_layout_compares_meaning_not_spelling():
    assert layout.same_layout([Sliced(0), Sliced(0)], [Sliced(0, 0), Sliced(0, 1)])
    assert not layout.same_layout([Sliced(0), Sliced(0)], [Sliced(0, 1), Sliced(0, 0)])
    assert not layout.same_layout([Sliced(0)], [Sliced(1)])
    assert not layout.same_layout([At(0)], [At(1)])
    assert layout.same_layout([LOCAL, REPLICATED], [LOCAL, REPLICATED])


def test_one_layout_is_one_type_however_spelled():
    """The default nesting order written out (``[sliced<0, 0>, sliced<0, 1>]``, as the
    front ends write two axes on one dim) is the same type as the short spelling the
    passes build: a function returning the long one no longer fails its return's
    verifier after a pass rebuilt the value's type (exit 3, a bug in distir)."""
    from distir.dialects.context import parse_module
    from distir.dialects.dist import TensorType
    from distir.passes.pipeline import apply_pipeline

    assert TensorType([4], f32, "g", [Sliced(0, 0), Sliced(0, 1)]) == TensorType([4], f32, "g", [Sliced(0), Sliced(0)])
    assert TensorType([4], f32, "g", [Sliced(0, 1), Sliced(0, 0)]) != TensorType([4], f32, "g", [Sliced(0), Sliced(0)])
    t = "!dist.tensor<4xf32, @g, [sliced<0, 0>, sliced<0, 1>]>"
    module = parse_module(
        "dist.mesh @g shape = [2, 2]\n"
        "func.func @f(%x: !dist.tensor<4xf32, @g, [sliced<0>, local]>) -> " + t + " {\n"
        "  %r = coll.reduce_scatter sum %x dim 0 axes [1] : !dist.tensor<4xf32, @g, [sliced<0>, local]> -> " + t + "\n"
        "  func.return %r : " + t + "\n}\n"
    )
    apply_pipeline(module, "expand-collectives")  # raised PassProducedInvalidIR
    assert "[sliced<0>, sliced<0>]" in str(module) and "sliced<0, 0>" not in str(module)


def test_add_slicing_nests_inside_existing_axes():
    # ReduceScatter over gpu (axis 1) then over node (axis 0): gpu outer, node inner.
    after_gpu = layout.add_slicing([LOCAL, LOCAL], 0, [1])
    assert after_gpu == [LOCAL, Sliced(0)]
    after_node = layout.add_slicing(after_gpu, 0, [0])
    assert [str(p) for p in after_node] == ["sliced<0, 1>", "sliced<0, 0>"]
    # and tidy() writes the default order in the short form
    assert layout.tidy([Sliced(0, 0), Sliced(0, 1)]) == [Sliced(0), Sliced(0)]


def test_innermost_slicing_and_replace_axes():
    p = [Sliced(0, 1), Sliced(0, 0)]
    assert layout.innermost_slicing(p, [0]) == 0
    assert layout.innermost_slicing(p, [1]) is None
    assert layout.replace_axes(p, [0], REPLICATED) == [REPLICATED, Sliced(0)]


def test_check_orders():
    assert layout.check_orders([Sliced(0, 0), Sliced(0)]) is not None
    assert layout.check_orders([Sliced(0, 0), Sliced(0, 0)]) is not None
    assert layout.check_orders([Sliced(0, 1), Sliced(0, 0)]) is None


def test_local_shape_and_blocks_cover_the_tensor():
    shape, sizes = (8, 6), (2, 2)
    p = [Sliced(0, 1), Sliced(0, 0)]
    assert layout.local_shape(shape, p, sizes) == (2, 6)
    seen = np.zeros(shape, int)
    starts = {}
    for c0 in range(2):
        for c1 in range(2):
            idx = layout.block(shape, p, sizes, (c0, c1))
            seen[idx] += 1
            starts[(c0, c1)] = idx[0].start
    assert (seen == 1).all()
    # axis 1 is outer: coordinates (c0, c1) hold block c1 * 2 + c0
    assert starts == {(0, 0): 0, (1, 0): 2, (0, 1): 4, (1, 1): 6}


def test_dim_block_is_the_ceil_rule_of_design():
    # s = 10 over 4 ranks: c = 3, blocks [0,3) [3,6) [6,9) [9,10)
    assert layout.dim_blocks(10, 4) == [(0, 3), (3, 3), (6, 3), (9, 1)]
    # fewer elements than ranks: the last ranks hold none
    assert layout.dim_blocks(2, 4) == [(0, 1), (1, 1), (2, 0), (2, 0)]
    # 6 over 4: c = 2, the last rank is empty although 4 ranks could hold 6 (DTensor, XLA)
    assert layout.dim_blocks(6, 4) == [(0, 2), (2, 2), (4, 2), (6, 0)]
    assert layout.dim_blocks(0, 3) == [(0, 0)] * 3
    assert layout.dim_blocks(8, 4) == [(0, 2), (2, 2), (4, 2), (6, 2)]


def test_nested_slicing_applies_the_rule_once_per_level():
    # 9 over (2 outer, 4 inner): outer blocks 5 and 4, then 2,2,1,0 and 1,1,1,1
    got = [layout.dim_block(9, [2, 4], [i, j]) for i in range(2) for j in range(4)]
    assert got == [(0, 2), (2, 2), (4, 1), (5, 0), (5, 1), (6, 1), (7, 1), (8, 1)]
    assert layout.max_block(9, [2, 4]) == 2
    # the flat rule over 8 ranks would give 2,2,2,2,1,0,0,0: nesting is not merging
    assert [n for _, n in layout.dim_blocks(9, 8)] == [2, 2, 2, 2, 1, 0, 0, 0]


def test_uneven_blocks_cover_the_tensor_once():
    for shape, p, sizes in [((9, 5), [Sliced(0), Sliced(1)], (4, 2)), ((9, 3), [Sliced(0, 1), Sliced(0, 0)], (2, 4)), ((2, 7), [Sliced(1), REPLICATED], (8, 1))]:
        seen = np.zeros(shape, int)
        for c0 in range(sizes[0]):
            for c1 in range(sizes[1]):
                idx = layout.block(shape, p, sizes, (c0, c1))
                seen[idx] += 1
                assert tuple(s.stop - s.start for s in idx) == layout.local_shape(shape, p, sizes, (c0, c1))
        assert (seen == 1).all()
    # without coordinates: the largest block, rank 0's
    assert layout.local_shape((9, 5), [Sliced(0), Sliced(1)], (4, 2)) == (3, 3)


def test_uneven_dims_and_descriptions():
    assert layout.uneven_dims((10, 8), [Sliced(0), Sliced(1)], (4, 2)) == [0]
    assert layout.uneven_dims((10,), [Sliced(0)], (None,)) == []
    assert layout.describe_uneven((10,), [Sliced(0)], (4,), 0) == "dim 0 of size 10 over the 4 ranks of axis 0: blocks of 3, 3, 3, 1"
    assert layout.divisibility_error((63,), [Sliced(0)], (4,)) == "dim 0 of size 63 is not divisible by the 4 ranks of axis 0"


def test_block_key_tells_empty_blocks_apart():
    p, sizes = [Sliced(0)], (4,)
    keys = {layout.block_key(p, sizes, (c,)) for c in range(4)}
    assert len(keys) == 4
    assert layout.block((2,), p, sizes, (2,)) == layout.block((2,), p, sizes, (3,)) == (slice(2, 2),)


def test_holds():
    assert layout.holds([At(1), REPLICATED], (1, 0))
    assert not layout.holds([At(1), REPLICATED], (0, 0))
    assert not layout.holds([UNPLACED], (0,))


@pytest.mark.parametrize(
    "sizes, ranks, expected",
    [((None,), 8, (8,)), ((2, None), 8, (2, 4)), ((4,), 4, (4,))],
)
def test_resolve_sizes(sizes, ranks, expected):
    assert layout.resolve_sizes(sizes, ranks) == expected


@pytest.mark.parametrize("sizes, ranks", [((4,), 8), ((3, None), 8), ((None, None), 4)])
def test_resolve_sizes_rejects(sizes, ranks):
    with pytest.raises(layout.LayoutError):
        layout.resolve_sizes(sizes, ranks)


def test_view_grid_keeps_parent_numbering():
    hw = layout.base_grid("hw", (2, 2, 2, 2))
    logical = layout.view_grid("logical", hw, [[1, 2], [0, 3]])
    assert logical.sizes == (4, 4)
    for r in range(16):
        s, c, g0, g1 = hw.coords(r)
        assert logical.grid[c * 2 + g0, s * 2 + g1] == r


def test_groups_are_ordered_over_listed_axes():
    g = layout.base_grid("g", (2, 3))
    assert g.groups([1]) == [[0, 1, 2], [3, 4, 5]]
    assert g.groups([0]) == [[0, 3], [1, 4], [2, 5]]
    assert g.groups([1, 0]) == [[0, 3, 1, 4, 2, 5]]


def test_view_to_parent():
    # at<r> on a merged axis becomes the digits of r on its factors
    p = layout.view_to_parent([At(5)], [[0, 1]], (2, 4), 2)
    assert p == [At(1), At(1)]
    p = layout.view_to_parent([Sliced(0)], [[1, 0]], (2, 4), 2)
    assert [str(x) for x in p] == ["sliced<0, 1>", "sliced<0, 0>"]
