"""Shardy's collectives, per device: what each device holds after each explicit
collective of ``sdy-collectives.mlir`` is what Shardy's semantics say (the blocks of the
logical value the out_sharding names, as Shardy's executable tests check), on the
interpreter; the logical results agree on the ``local`` runtime.

``shardy_block`` is written from Shardy's sharding representation, independently of
distir's layout code: a dim sharded by axes (a1, .., ak) is split in the product of their
sizes, and the device at mesh coordinates c holds block number c[a1] .. c[ak] read as a
mixed-radix number (a1 most significant); a sub-axis "y":(p)s splits y into factors of
sizes p, s and the rest, and reads the middle digit: (c[y] // (|y| / (p s))) % s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from oracle import assert_rejected

from distir.frontends.program import import_program
from distir.runtime import run_function
from distir.runtime.local import run_local

MESH = {"x": 2, "y": 2}
MESH8 = {"x": 2, "y": 4}
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def module():
    return import_program((HERE / "sdy-collectives.mlir").read_text(), "sdy-collectives.mlir").module


@pytest.fixture(scope="module")
def sub_axes():
    return import_program((HERE / "sdy-sub-axes.mlir").read_text(), "sdy-sub-axes.mlir").module


def coords(rank: int, mesh: dict[str, int]) -> dict[str, int]:
    out = {}
    for name, size in reversed(list(mesh.items())):
        out[name] = rank % size
        rank //= size
    return out


def shardy_block(t: np.ndarray, dims: list[list[tuple[str, int, int]]], mesh: dict[str, int], rank: int) -> np.ndarray:
    """The block of ``t`` that device ``rank`` holds; ``dims[d]`` lists (axis, pre, size)
    with size 0 for a whole axis."""
    c = coords(rank, mesh)
    index = []
    for d, axes in enumerate(dims):
        n, k = 1, 0
        for name, pre, size in axes:
            s = size or mesh[name]
            digit = (c[name] // (mesh[name] // (pre * size))) % size if size else c[name]
            k = k * s + digit
            n *= s
        step = t.shape[d] // n
        index.append(slice(k * step, (k + 1) * step))
    return t[tuple(index)]


def per_device(module, name, inputs, ranks=4):
    ex = run_function(module, name, inputs, ranks=ranks)
    return ex, ex.results[0].buffers


def check(module, name, inputs, logical, dims, mesh=MESH):
    ranks = int(np.prod(list(mesh.values())))
    ex, bufs = per_device(module, name, inputs, ranks)
    for r in range(ranks):
        np.testing.assert_array_equal(bufs[r], shardy_block(logical, dims, mesh, r), err_msg=f"@{name}, device {r}")
    np.testing.assert_array_equal(ex.outputs[0], logical)
    np.testing.assert_array_equal(run_local(module, name, inputs, ranks=ranks)[0], logical)


X, Y = ("x", 1, 0), ("y", 1, 0)
T = np.arange(32, dtype=np.float32).reshape(4, 8)


def test_all_gather_gives_every_device_the_whole_tensor(module):
    check(module, "gather_both_dims", {"arg0": T}, T, [[], []])


def test_all_slice_keeps_each_devices_block(module):
    check(module, "slice_one_dim_by_two_axes", {"arg0": T}, T, [[], [X, Y]])


def test_all_to_all_moves_the_axis_to_another_dim(module):
    check(module, "move_x_from_rows_to_columns", {"arg0": T}, T, [[], [X]])


def test_reduce_scatter_sums_the_devices_values_and_scatters(module):
    # unreduced over x and y: one value per device, stacked [x][y]
    parts = np.stack([np.stack([T * (1 + 2 * x + y) for y in range(2)]) for x in range(2)])
    check(module, "reduce_scatter_partial_sums", {"arg0": parts}, parts.sum((0, 1)), [[Y], [X]])


def test_all_reduce_sums_over_one_axis_only(module):
    parts = np.stack([T * 10**y for y in range(2)])  # unreduced over y, stacked [y]
    check(module, "all_reduce_over_y", {"arg0": parts}, parts.sum(0), [[X], []])


def test_collective_permute_changes_which_device_holds_which_block(module):
    v = np.arange(8, dtype=np.float32)
    check(module, "permute_axis_order", {"arg0": v}, v, [[Y, X]])
    check(module, "permute_replace_axis", {"arg0": T}, T, [[Y], []])


def test_collective_permute_moves_one_block_per_device(module):
    """Imported as one coll.permute (each device sends the block it has and receives the
    one it needs), not as a gather and a slice."""
    f = next(op for op in module.walk() if getattr(op, "sym_name", None) is not None and op.sym_name.data == "permute_replace_axis")
    assert [op.name for op in f.walk() if op.name.startswith("coll.")] == ["coll.permute"]


def test_sub_axis_slices_by_the_inner_half_of_an_axis(sub_axes):
    t = np.arange(64, dtype=np.int32).reshape(8, 8)
    check(sub_axes, "slice_by_a_sub_axis", {"arg0": t}, t, [[], [X, ("y", 2, 2)]], mesh=MESH8)


def test_constraint_then_compute(module):
    check(module, "constraint_then_add", {"arg0": T}, T + T, [[], [X]])


def test_every_collective_in_one_function(module):
    parts = np.stack([np.stack([T * (1 + 2 * x + y) for y in range(2)]) for x in range(2)])
    partial_y = np.stack([T * 10**y for y in range(2)])
    inputs = {"arg0": parts, "arg1": partial_y}
    ex = run_function(module, "chain", inputs, ranks=4)
    total = parts.sum((0, 1))
    for r in range(4):
        np.testing.assert_array_equal(ex.results[0].buffers[r], shardy_block(total, [[X], [Y]], MESH, r), err_msg=f"device {r}")
        np.testing.assert_array_equal(ex.results[1].buffers[r], shardy_block(partial_y.sum(0), [[X], []], MESH, r), err_msg=f"device {r}")
    got = run_local(module, "chain", inputs, ranks=4)
    np.testing.assert_array_equal(got[0], total)
    np.testing.assert_array_equal(got[1], partial_y.sum(0))


def test_collective_permute_as_shardys_executable_test_expects(module):
    """Shardy's executable test of sdy.collective_permute with self loops: [{"x", "y"}]
    to [{"y", "x"}] on a 2x2 mesh leaves blocks 0 and 3 in place and swaps blocks 1 and
    2 between devices 1 and 2."""
    v = np.arange(8, dtype=np.float32)
    bufs = per_device(module, "permute_axis_order", {"arg0": v})[1]
    for device, block in enumerate([0, 2, 1, 3]):
        np.testing.assert_array_equal(bufs[device], v[2 * block : 2 * block + 2], err_msg=f"device {device}")


RING = """sdy.mesh @mesh_4 = <["x"=4]>
func.func @ring(%arg0: tensor<16x8xi32> {{sdy.sharding = #sdy.sharding<@mesh_4, [{{"x"}}, {{}}]>}}) -> (tensor<16x8xi32> {{sdy.sharding = #sdy.sharding<@mesh_4, [{{"x"}}, {{}}]>}}) {{
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh_4, [{{"x"}}, {{}}]>] out_shardings=[<@mesh_4, [{{"x"}}, {{}}]>] manual_axes={{"x"}} (%arg1: tensor<4x8xi32>) {{
    %1 = "stablehlo.collective_permute"(%arg1) {{source_target_pairs = dense<{pairs}> : tensor<{n}x2xi64>{handle}}} : (tensor<4x8xi32>) -> tensor<4x8xi32>
    sdy.return %1 : tensor<4x8xi32>
  }} : (tensor<16x8xi32>) -> (tensor<16x8xi32>)
  return %0 : tensor<16x8xi32>
}}
"""


def ring(pairs: str = "[[0, 1], [1, 2], [2, 3], [3, 0]]", handle: str = ", channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>") -> str:
    return RING.format(pairs=pairs, n=pairs.count("[") - 1, handle=handle)


def test_stablehlo_collective_permute_moves_each_devices_block_around_the_ring():
    """Shardy's executable test of StableHLO's collective_permute in a manual computation
    (channel_handle of type 0, i32 blocks of 1, 10, 100, 1000): device d gets device
    d - 1's block."""
    m = import_program(ring(), "ring.mlir").module
    blocks = np.repeat(np.array([1, 10, 100, 1000], dtype=np.int32), 4 * 8).reshape(16, 8)
    ex = run_function(m, "ring", {"arg0": blocks}, ranks=4)
    for d, want in enumerate([1000, 1, 10, 100]):
        np.testing.assert_array_equal(ex.results[0].buffers[d], np.full((4, 8), want, np.int32), err_msg=f"device {d}")
    np.testing.assert_array_equal(run_local(m, "ring", {"arg0": blocks}, ranks=4)[0], np.roll(blocks, 4, axis=0))


BAD_PERMUTES = {
    "no channel handle": (ring(handle=""), r"4:\d+.*without a channel_handle of positive handle permutes replicas"),
    "target twice": (ring(pairs="[[0, 1], [2, 1]]"), r"4:\d+.*pair \[2, 1\]: rank 1 is the target of an earlier pair too"),
    "source twice": (ring(pairs="[[0, 1], [0, 2]]"), r"4:\d+.*pair \[0, 2\]: rank 0 is the source of an earlier pair too"),
    "device outside the mesh": (ring(pairs="[[0, 4]]"), r"4:\d+.*pair \[0, 4\] is out of range for a group of 4 ranks"),
    "pairs not Nx2": (ring().replace("tensor<4x2xi64>", "tensor<8xi64>").replace("[[0, 1], [1, 2], [2, 3], [3, 0]]", "[0, 1, 1, 2, 2, 3, 3, 0]"), r"4:\d+.*needs source_target_pairs = dense<\[\[source, target\]"),
    "blocks per dim change": (
        'sdy.mesh @m = <["x"=2, "y"=2]>\nfunc.func @f(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> tensor<4x8xf32> {\n'
        '  %0 = sdy.collective_permute %arg0 out_sharding=<@m, [{"x", "y"}, {}]> : tensor<4x8xf32>\n  return %0 : tensor<4x8xf32>\n}\n',
        r"3:\d+.*splits dim 0 in 2 block\(s\) before and 4 after",
    ),
    # device orders are read (test_device_order.py); device_ids must name each device once
    "device_ids not a permutation": ('sdy.mesh @mesh_b = <["x"=4], device_ids=[1, 2, 3, 1]>\n', r"1:\d+.*device_ids must name each of the mesh's 4 devices"),
}


@pytest.mark.parametrize("case", sorted(BAD_PERMUTES))
def test_unsupported_permutes_are_located_diagnostics(case):
    assert_rejected(*BAD_PERMUTES[case])


# ------------------------------------------------------------------ dims the axes do not divide

UNEVEN_MESH = 'sdy.mesh @u = <["x"=2, "y"=3]>\n'
U = np.arange(35, dtype=np.float32).reshape(7, 5) - 17
UNEVEN_CASES = {
    # name: (argument sharding, body computing %0 from %arg0, result sharding)
    "sliced_argument": ('[{"y"}, {}]', "%0 = stablehlo.multiply %arg0, %arg0 : tensor<7x5xf32>", '[{"y"}, {}]'),
    "two_axes_on_one_dim": ('[{"x", "y"}, {}]', "%0 = stablehlo.multiply %arg0, %arg0 : tensor<7x5xf32>", '[{"x", "y"}, {}]'),
    "all_gather": ('[{"y"}, {"x"}]', '%0 = sdy.all_gather [{"y"}, {"x"}] %arg0 out_sharding=<@u, [{}, {}]> : tensor<7x5xf32>', "[{}, {}]"),
    "all_gather_inner_axis": ('[{"x", "y"}, {}]', '%0 = sdy.all_gather [{"y"}, {}] %arg0 out_sharding=<@u, [{"x"}, {}]> : tensor<7x5xf32>', '[{"x"}, {}]'),
    "all_slice": ("[{}, {}]", '%0 = sdy.all_slice [{"y"}, {"x"}] %arg0 out_sharding=<@u, [{"y"}, {"x"}]> : tensor<7x5xf32>', '[{"y"}, {"x"}]'),
    "all_to_all": ('[{"y"}, {}]', '%0 = sdy.all_to_all [{"y"}: 0->1] %arg0 out_sharding=<@u, [{}, {"y"}]> : tensor<7x5xf32>', '[{}, {"y"}]'),
    "sharding_constraint": ("[{}, {}]", '%0 = sdy.sharding_constraint %arg0 <@u, [{}, {"y"}]> : tensor<7x5xf32>', '[{}, {"y"}]'),
    "reduce_over_the_uneven_dim": (
        '[{"y"}, {}]',
        "%c = stablehlo.constant dense<0.0> : tensor<f32>\n  %r = stablehlo.reduce(%arg0 init: %c) applies stablehlo.add across dimensions = [0] : (tensor<7x5xf32>, tensor<f32>) -> tensor<5xf32>\n"
        "  %0 = stablehlo.broadcast_in_dim %r, dims = [1] : (tensor<5xf32>) -> tensor<7x5xf32>",
        "[{}, {}]",
    ),
}
"""Shardy's shardings and collectives on a dim of 7 over 2, 3 or 6 devices and one of 5
over 2 or 3 (Shardy pads to a multiple of the shard count): each imports, and its
logical result on the interpreter and the local runtime is numpy's."""


def uneven_expected(name: str) -> np.ndarray:
    if name in ("sliced_argument", "two_axes_on_one_dim"):
        return U * U
    if name == "reduce_over_the_uneven_dim":
        return np.broadcast_to(U.sum(0), U.shape)
    return U


@pytest.mark.parametrize("name", sorted(UNEVEN_CASES))
def test_uneven_shardings_and_collectives_import_and_compute_the_logical_value(name):
    arg, body, result = UNEVEN_CASES[name]
    text = (
        UNEVEN_MESH
        + f"func.func @main(%arg0: tensor<7x5xf32> {{sdy.sharding = #sdy.sharding<@u, {arg}>}}) -> (tensor<7x5xf32> {{sdy.sharding = #sdy.sharding<@u, {result}>}}) {{\n"
        + f"  {body}\n  return %0 : tensor<7x5xf32>\n}}\n"
    )
    module = import_program(text, f"{name}.mlir").module
    want = uneven_expected(name)
    np.testing.assert_allclose(run_function(module, "main", {"arg0": U}, ranks=6).outputs[0], want, rtol=1e-6)
    np.testing.assert_allclose(run_local(module, "main", {"arg0": U}, ranks=6)[0], want, rtol=1e-6)
