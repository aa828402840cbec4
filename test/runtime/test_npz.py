"""The in.npz/out.npz conventions (runtime/npz.py): distributing logical values to ranks
and collecting them back, stacking of local values, replica checks, input checks."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import f32

from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected, ResultsDiffer
from distir.dialects.dist import TensorType
from distir.dialects.layout import base_grid
from distir.dialects.placements import LOCAL, REPLICATED, At, Sliced
from distir.runtime import npz

GRID = base_grid("grid", (2, 3))


@pytest.mark.parametrize(
    "placements",
    [
        [REPLICATED, REPLICATED],
        [Sliced(0), Sliced(1)],
        [Sliced(0), Sliced(0)],
        [Sliced(0, 1), Sliced(0, 0)],
        [LOCAL, Sliced(1)],
        [Sliced(1), LOCAL],
        [LOCAL, LOCAL],
        [At(1), Sliced(0)],
        [REPLICATED, At(2)],
    ],
    ids=str,
)
@pytest.mark.parametrize("logical", [(6, 12), (5, 7), (1, 2)], ids=str)
def test_distribute_then_collect_is_identity(placements, logical):
    # (5, 7) and (1, 2): dims the ranks do not divide, blocks of different sizes, empty ones
    t = TensorType(list(logical), f32, "grid", placements)
    shape, dtype = npz.expected_array(t, {"grid": GRID})
    lead = tuple(GRID.sizes[a] for a, p in enumerate(placements) if p == LOCAL)
    assert shape == lead + logical and dtype == np.float32
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    bufs = npz.distribute(x, t, GRID)
    for r, b in bufs.items():
        c = divmod(r, 3)
        for a, p in enumerate(placements):
            if isinstance(p, At):
                assert c[a] == p.rank.data
        assert not b.flags.writeable
    np.testing.assert_array_equal(npz.collect(t, GRID, bufs), x)


def test_block_positions_follow_nesting_order():
    t = TensorType([6], f32, "grid", [Sliced(0, 1), Sliced(0, 0)])  # axis 1 outer
    bufs = npz.distribute(np.arange(6, dtype=np.float32), t, GRID)
    for r, b in bufs.items():
        c0, c1 = divmod(r, 3)
        assert b.tolist() == [float(c1 * 2 + c0)]


def test_local_values_stack_in_axis_order():
    t = TensorType([2], f32, "grid", [LOCAL, LOCAL])
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    bufs = npz.distribute(x, t, GRID)
    np.testing.assert_array_equal(bufs[5], x[1, 2])


def test_replicas_must_agree():
    t = TensorType([4], f32, "grid", [REPLICATED, REPLICATED])
    bufs = {r: np.zeros(4, np.float32) for r in range(6)}
    bufs[4] = np.array([0, 0, 1, 0], np.float32)
    with pytest.raises(ResultsDiffer, match=r"result0: replicas disagree: ranks 0 and 4 hold different values at \[2\]"):
        npz.collect(t, GRID, bufs, "result0")


SRC = """dist.mesh @world shape = [?]
func.func @f(%t: !dist.tensor<5x2xf32, @world, [replicated]>, %i: !dist.tensor<4x3xi32, @world, [sliced<0>]>, %s: bf16) -> !dist.tensor<4x2xf32, @world, [sliced<0>]> {
  %e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<5x2xf32, @world, [replicated]>, !dist.tensor<4x3xi32, @world, [sliced<0>]>) -> !dist.tensor<4x2xf32, @world, [sliced<0>]>
  func.return %e : !dist.tensor<4x2xf32, @world, [sliced<0>]>
}"""


def test_inputs_are_checked_and_completed():
    module = parse_module(SRC)
    func = npz.select_function(module, None)
    assert npz.argument_names(func) == ["t", "i", "s"]
    assert npz.index_bounds(func) == {"i": 5}
    full = npz.prepare_inputs(module, func, 2, {"s": np.array(1.5, np.float32).astype(ml_dtypes.bfloat16)}, seed=3)
    assert list(full) == ["t", "i", "s"]
    assert full["i"].dtype == np.int32 and 0 <= full["i"].min() and full["i"].max() < 5
    assert 0 <= full["t"].min() and full["t"].max() < 1
    again = npz.prepare_inputs(module, func, 2, {}, seed=3)
    np.testing.assert_array_equal(full["t"], again["t"])
    grids = npz.resolve_grids(module, 2)
    with pytest.raises(InputRejected, match=r"in.npz: argument 't' is missing: expected a 5x2 float32 array, the logical value of"):
        npz.check_inputs(npz.signature(func), grids, {}, "in.npz", allow_missing=False)
    # numpy saves bfloat16 as 2-byte records; they read back as bfloat16
    raw = np.array(1.5, np.float32).astype(ml_dtypes.bfloat16).view("V2")
    got = npz.check_inputs(npz.signature(func), grids, {"s": raw})
    assert got["s"].dtype == ml_dtypes.bfloat16 and float(got["s"]) == 1.5


def test_rank_counts_the_program_cannot_run_on():
    module = parse_module(SRC)
    func = npz.select_function(module, None)
    npz.prepare_inputs(module, func, 3)  # 4 over 3 ranks: blocks of 2, 2 and 0
    with pytest.raises(InputRejected, match="--ranks must be at least 1"):
        npz.resolve_grids(module, 0)
    assert npz.static_ranks(module) is None
