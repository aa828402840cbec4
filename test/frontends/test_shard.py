"""MLIR's ``shard`` dialect: each collective's per-device meaning as MLIR documents it
(``ShardOps.td``: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
all_slice) checked device by device on the interpreter and on the ``local`` runtime;
annotated programs (both spellings, ``shard`` and mlir-opt-19's ``mesh``) compute their
logical values; bad input is a located diagnostic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from oracle import assert_rejected

from distir.frontends.program import import_program
from distir.runtime import interpret, run_function
from distir.runtime.local import run_local

HERE = Path(__file__).parent
RNG = np.random.default_rng(7)


def load(name: str):
    return import_program((HERE / name).read_text(), name).module


def dev(i: int, j: int) -> int:
    return 2 * i + j


def per_device_model(x: np.ndarray) -> dict[int, np.ndarray]:
    """``@per_device`` of shard-per-device.mlir on a 2x2 grid, device by device, from the
    ops' documentation. ``x[i, j]`` is device (i, j)'s input."""
    g = range(2)
    ar = {(i, j): np.maximum(x[i, 0], x[i, 1]) for i in g for j in g}  # all_reduce max over axis 1
    ag = {(i, j): np.concatenate([ar[(k, j)] for k in g], axis=0) for i in g for j in g}  # all_gather axis 0, dim 0
    total = {(i, j): ag[(i, 0)] + ag[(i, 1)] for i in g for j in g}  # reduce_scatter over axis 1 ...
    rs = {(i, j): np.split(total[(i, j)], 2, axis=1)[j] for i in g for j in g}  # ... scattered along dim 1
    a2a = {(i, j): np.concatenate([np.split(rs[(k, j)], 2, axis=0)[i] for k in g], axis=1) for i in g for j in g}  # split 0, concat 1, axis 0
    bc = {(i, j): a2a[(i, 1)] for i in g for j in g}  # broadcast from root 1 of axis 1
    return {dev(i, j): np.split(bc[(i, j)], 2, axis=0)[j] for i in g for j in g}  # all_slice axis 1, dim 0


def test_collectives_per_device():
    m = load("shard-per-device.mlir")
    x = RNG.standard_normal((2, 2, 4, 8)).astype(np.float32)
    want = per_device_model(x)
    ex = run_function(m, "per_device", {"x": x}, ranks=4)
    for r in range(4):
        np.testing.assert_allclose(ex.results[0].buffers[r], want[r], rtol=1e-6, err_msg=f"device {r}")
    got = run_local(m, "per_device", {"x": x}, ranks=4)[0]  # stacked [i, j] like the input
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(got[i, j], want[dev(i, j)], rtol=1e-6)


def test_annotated_mlp_computes_its_logical_value():
    m = load("shard-annotated.mlir")
    x, w1, w2 = (RNG.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32, 16)])
    want = np.tanh(x @ w1) @ w2
    for run in (interpret, run_local):
        np.testing.assert_allclose(run(m, "mlp", {"x": x, "w1": w1, "w2": w2}, ranks=4)[0], want, rtol=1e-5, atol=1e-5)


def test_mesh_spelling_of_mlir_opt_19():
    m = load("mesh-spelling.mlir")
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(interpret(m, "annotated", {"arg0": a}, ranks=4)[0], a * a, rtol=1e-6)
    parts = RNG.standard_normal((2, 4, 8)).astype(np.float32)  # partial sums over grid axis 1
    np.testing.assert_allclose(run_local(m, "partial_sums", {"arg0": parts}, ranks=4)[0], np.exp(parts.sum(0)), rtol=1e-5)
    blocks = RNG.standard_normal((2, 2, 2, 4)).astype(np.float32)  # per device [i, j]
    got = interpret(m, "per_device", {"arg0": blocks}, ranks=4)[0]
    for i in range(2):
        for j in range(2):
            gathered = [np.concatenate([blocks[0, jj], blocks[1, jj]]) for jj in range(2)]
            np.testing.assert_allclose(got[i, j], gathered[0] + gathered[1], rtol=1e-6)



def permute_model(func: str, x: np.ndarray) -> list[list[np.ndarray]]:
    """Each result of a function of shard-permute.mlir, device by device (device ids
    row-major over the grid), from ``ShardOps.td``: shift moves device i's tensor to
    device i + offset along shift_axis (modulo the axis with ``rotate``; a device with no
    source gets zeros, undefined in MLIR); a recv takes the send before it. ``x[d]`` is
    device d's input."""
    zero = np.zeros_like(x[0])
    n = len(x)
    if func == "shift_line":
        return [[x[(d - 1) % 4] for d in range(4)], [x[(d + 1) % 4] for d in range(4)], [x[d - 2] if d >= 2 else zero for d in range(4)], list(x)]
    if func == "shift_grid":  # x[2 * i + j]: rotate j by 1 in each row, plus row 1 -> row 0 (row 1 gets zeros)
        return [[x[2 * i + (1 - j)] + (x[2 + j] if i == 0 else zero) for i in range(2) for j in range(2)]]
    if func == "send_recv":  # (0, 1) -> (1, 0) over both axes, plus (i, 1) -> (i, 0) in each row
        return [[x[1], zero, x[1] + x[3], zero]]
    assert func == "shift_ring8"
    return [[x[(d - 3) % n] - (x[d - 5] if d >= 5 else zero) for d in range(n)]]


@pytest.mark.parametrize("func, shape", [("shift_line", (4, 2, 3)), ("shift_grid", (4, 3)), ("send_recv", (4, 4)), ("shift_ring8", (8, 2))])
def test_shift_send_recv_per_device(func, shape):
    """shard.shift / send / recv (imported as coll.permute) give each device the tensor
    MLIR's documentation says, on the interpreter and the local runtime."""
    m = load("shard-shift-8.mlir" if func == "shift_ring8" else "shard-permute.mlir")
    x = RNG.standard_normal(shape).astype(np.float32)
    grid = (2, 2) if func in ("shift_grid", "send_recv") else (shape[0],)
    stacked = x.reshape(grid + shape[1:])
    want = permute_model(func, x)
    ranks = shape[0]
    ex = run_function(m, func, {"x": stacked}, ranks=ranks)
    local = run_local(m, func, {"x": stacked}, ranks=ranks)
    for k, per_dev in enumerate(want):
        got_local = local[k].reshape((ranks,) + shape[1:])
        for d in range(ranks):
            np.testing.assert_allclose(ex.results[k].buffers[d], per_dev[d], rtol=1e-6, err_msg=f"@{func} result {k}, device {d}")
            np.testing.assert_allclose(got_local[d], per_dev[d], rtol=1e-6, err_msg=f"@{func} result {k}, device {d}, local")

BAD = {
    "axis out of range": ("shard.grid @g(shape = 4)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %s = shard.sharding @g split_axes = [[1]] : !shard.sharding\n  %0 = shard.shard %x to %s : tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n", r"3:\d+.*grid axis 1 is out of range"),
    "axis twice": ("shard.grid @g(shape = 2x2)\nfunc.func @f(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {\n  %0 = shard.shard %x to <@g, [[0], [0]]> : tensor<8x8xf32>\n  return %0 : tensor<8x8xf32>\n}\n", r"3:\d+.*grid axis 0 is used twice"),
    "offsets not distir's blocks": ("shard.grid @g(shape = 4)\nfunc.func @f(%x: tensor<14xf32>) -> tensor<14xf32> {\n  %s = shard.sharding @g split_axes = [[0]] sharded_dims_offsets = [0, 2, 5, 9, 14] : !shard.sharding\n  %0 = shard.shard %x to %s : tensor<14xf32>\n  return %0 : tensor<14xf32>\n}\n", r"3:\d+.*sharded_dims_offsets of dim 0 must be \[0, 4, 8, 12, 14\] \(distir's blocks of ceil\(14/4\), the last ones shorter or empty\), got \[0, 2, 5, 9, 14\]"),
    "too many offsets": ("shard.grid @g(shape = 2)\nfunc.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %s = shard.sharding @g split_axes = [[0]] sharded_dims_offsets = [0, 2, 3, 0, 1] : !shard.sharding\n  %0 = shard.shard %x to %s : tensor<3xf32>\n  return %0 : tensor<3xf32>\n}\n", r"3:\d+.*sharded_dims_offsets has 2 value\(s\) more than the split dims take"),
    "halo": ("shard.grid @g(shape = 4)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %s = shard.sharding @g split_axes = [[0]] halo_sizes = [1, 1] : !shard.sharding\n  return %x : tensor<8xf32>\n}\n", r"3:\d+.*halo_sizes' is not supported"),
    "dynamic grid": ("shard.grid @g(shape = ?x4)\n", r"1:\d+.*static sizes"),
    "shift axis not grouped": ("shard.grid @g(shape = 2x2)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %0 = shard.shift %x on @g grid_axes = [0] shift_axis = 1 offset = 1 rotate : tensor<8xf32> -> tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n", r"3:\d+.*shift_axis 1 is not one of the grid_axes \[0\]"),
    "shift changes shape": ("shard.grid @g(shape = 2x2)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<4xf32> {\n  %0 = shard.shift %x on @g grid_axes = [0] shift_axis = 0 offset = 1 : tensor<8xf32> -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n", r"3:\d+.*keeps its operand's shape 8"),
    "recv without send": ("shard.grid @g(shape = 2x2)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %0 = shard.recv %x on @g grid_axes = [0] source = [1] : (tensor<8xf32>) -> tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n", r"3:\d+.*has no 'send' before it"),
    "send without recv": ("shard.grid @g(shape = 2x2)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %0 = shard.send %x on @g grid_axes = [0] destination = [1] : (tensor<8xf32>) -> tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n", r"3:\d+.*has no 'recv' after it"),
    "destination outside the group": ("shard.grid @g(shape = 2x2)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %0 = shard.send %x on @g grid_axes = [1] destination = [2] : (tensor<8xf32>) -> tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n", r"3:\d+.*destination \[2\] is not a device of the group over grid axes \[1\]"),
    "send and recv on other axes": ("shard.grid @g(shape = 2x2)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %s = shard.send %x on @g grid_axes = [0] destination = [1] : (tensor<8xf32>) -> tensor<8xf32>\n  %0 = shard.recv %x on @g grid_axes = [1] source = [0] : (tensor<8xf32>) -> tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n", r"4:\d+.*on grid_axes \[1\] matches the 'shard.send' at line 3, on grid_axes \[0\]"),
    "unknown op": ("shard.grid @g(shape = 4)\nfunc.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %0 = tosa.abs %x : (tensor<8xf32>) -> tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n", r"3:\d+.*unsupported op 'tosa.abs'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_a_located_diagnostic(case):
    assert_rejected(*BAD[case])


UNEVEN = """shard.grid @g(shape = 4)
func.func @f(%x: tensor<6x3xf32>, %y: tensor<10xf32>) -> (tensor<6x3xf32>, tensor<10xf32>) {
  %0 = shard.shard %x to <@g, [[0]]> : tensor<6x3xf32>
  %s = shard.sharding @g split_axes = [[0]] sharded_dims_offsets = [0, 3, 6, 9, 10] : !shard.sharding
  %1 = shard.shard %y to %s : tensor<10xf32>
  %2 = arith.addf %0, %0 : tensor<6x3xf32>
  %3 = arith.mulf %1, %1 : tensor<10xf32>
  return %2, %3 : tensor<6x3xf32>, tensor<10xf32>
}
"""


def test_uneven_splits_import_as_ceil_blocks():
    """A split the grid does not divide (6 over 4: blocks of 2, 2, 2, 0) and explicit
    sharded_dims_offsets that are those blocks (10 over 4: 3, 3, 3, 1) import as
    sliced placements and run on the interpreter and the local runtime."""
    from distir.frontends.program import import_program

    m = import_program(UNEVEN, "u.mlir", source="shard").module
    text = str(m)
    assert "%x: !dist.tensor<6x3xf32, @g, [sliced<0>]>" in text and "%y: !dist.tensor<10xf32, @g, [sliced<0>]>" in text
    x, y = RNG.standard_normal((6, 3)).astype(np.float32), RNG.standard_normal(10).astype(np.float32)
    for outs in (run_function(m, "f", {"x": x, "y": y}, ranks=4).outputs, run_local(m, "f", {"x": x, "y": y}, ranks=4)):
        np.testing.assert_allclose(outs[0], x + x, rtol=1e-6)
        np.testing.assert_allclose(outs[1], y * y, rtol=1e-6)


# ------------------------------------------------------------------ the newest spellings

NEWEST = """
shard.grid "private" @g(shape = 2x2)
func.func @rs(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  %c3 = arith.constant 3 : i64
  %c1 = arith.constant 1 : index
  %0 = shard.reduce_scatter %x on @g grid_axes = [1] reduction = max scatter_dim = 1 : tensor<4x8xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}
func.func @sc(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %0 = shard.scatter %x on @g grid_axes = [0] scatter_dim = 0 root = [1] : (tensor<4x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
"""


def test_scatter_dim_is_scatter_axis_and_scalar_constants_are_read():
    """MLIR's newest tests spell ``reduce_scatter``'s and ``scatter``'s ``scatter_axis``
    ``scatter_dim``, write scalar ``arith.constant 3 : i64`` and a grid's visibility: the
    ops mean what ShardOps.td says (reduce over the group, then device k of the group
    takes block k along the dim; scatter: the root's tensor split along the dim, block k
    to group member k), device by device."""
    m = import_program(NEWEST, "newest.mlir").module
    x = RNG.standard_normal((2, 2, 4, 8)).astype(np.float32)  # device (i, j)'s tensor
    got = interpret(m, "rs", {"x": x}, ranks=4)[0]
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(got[i, j], np.split(np.maximum(x[i, 0], x[i, 1]), 2, axis=1)[j], rtol=1e-6)
    got = run_local(m, "sc", {"x": x}, ranks=4)[0]
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(got[i, j], np.split(x[1, j], 2, axis=0)[i], rtol=1e-6)


def test_collective_keywords_outside_shardops_and_run_time_roots_are_named():
    bad = NEWEST.replace("scatter_dim = 1", "scatter_dimension = 1")
    assert_rejected(bad, r"6:\d+\n.*unknown keyword 'scatter_dimension' in 'shard.reduce_scatter'")
    dynamic = NEWEST.replace("func.func @sc(%x: tensor<4x8xf32>)", "func.func @sc(%x: tensor<4x8xf32>, %r: index)").replace("root = [1]", "root = [%r]")
    assert_rejected(dynamic, r"10:\d+\n.*'shard.scatter' with a root given at run time \(%r\) is not supported")


UNEVEN_SHARDINGS = {
    # name: (the sharding of %x, the sharding its users ask for)
    "split_over_one_axis": ("[[1]]", "[[1]]"),
    "split_over_two_axes": ("[[0, 1]]", "[[0, 1]]"),
    "resharded_to_another_axis": ("[[1]]", "[[0]]"),
    "resharded_from_two_axes_to_one": ("[[0, 1]]", "[[]]"),
    "both_dims": ("[[1], [0]]", "[[0], [1]]"),
}


@pytest.mark.parametrize("name", sorted(UNEVEN_SHARDINGS))
def test_uneven_annotated_shardings_import_and_compute_numpys_result(name):
    """``shard.shard`` annotations on dims a 2x3 grid does not divide (7 rows over 3, 2 or
    6 devices; 5 columns over 2), resharded for the users: each imports and computes
    x * x on the interpreter and the local runtime."""
    from distir.frontends.program import import_program

    have, want = UNEVEN_SHARDINGS[name]
    text = f"""shard.grid @g(shape = 2x3)
func.func @f(%x: tensor<7x5xf32>) -> tensor<7x5xf32> {{
  %0 = shard.shard %x to <@g, {have}> : tensor<7x5xf32>
  %1 = shard.shard %0 to <@g, {want}> annotate_for_users : tensor<7x5xf32>
  %2 = arith.mulf %1, %1 : tensor<7x5xf32>
  return %2 : tensor<7x5xf32>
}}
"""
    m = import_program(text, f"{name}.mlir", source="shard").module
    x = RNG.standard_normal((7, 5)).astype(np.float32)
    np.testing.assert_allclose(run_function(m, "f", {"x": x}, ranks=6).outputs[0], x * x, rtol=1e-6)
    np.testing.assert_allclose(run_local(m, "f", {"x": x}, ranks=6)[0], x * x, rtol=1e-6)
