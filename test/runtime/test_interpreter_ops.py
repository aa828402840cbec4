"""The reference interpreter, op by op, against hand-written numpy computations on 1, 2,
4 and 8 ranks. Results are checked both as logical outputs and as the buffers each rank
holds (``Execution.results[i].buffers``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from distir.dialects.diagnostics import InputRejected
from distir.runtime import equivalent, interpret, run_function
from distir.runtime.interpreter import ExecutionError

RANKS = [1, 2, 4, 8]
GRID_RANKS = [2, 4, 8]
RNG = np.random.default_rng(1234)

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"f16": np.float16, "bf16": BF16, "f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


def T(shape, elt="f32", pl="replicated", mesh="world") -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"!dist.tensor<{dims}{elt}, @{mesh}, [{pl}]>"


WORLD = "dist.mesh @world shape = [?]\n"


def rand(*shape, dtype=np.float32):
    if np.issubdtype(np.dtype(dtype), np.integer):
        return RNG.integers(-20, 20, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def block(a: np.ndarray, dim: int, i: int, n: int) -> np.ndarray:
    step = a.shape[dim] // n
    return a[(slice(None),) * dim + (slice(i * step, (i + 1) * step),)]


def buffers(ex, i=0):
    return dict(ex.results[i].buffers)


def reduce_np(x: np.ndarray, kind: str, axis=0) -> np.ndarray:
    acc = x.astype(np.float32) if x.dtype in (np.float16, BF16) else x
    fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "avg": np.mean}[kind]
    return fn(acc, axis=axis).astype(x.dtype)


KINDS = ["sum", "prod", "max", "min", "avg"]

# ======================================================================================
# Functional primitives
# ======================================================================================


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("kind", KINDS)
def test_reduce_then_repl(ranks, kind):
    src = WORLD + f"""
func.func @f(%x: {T([16, 4], pl='local')}) -> {T([16, 4])} {{
  %r = dist.reduce {kind} %x : {T([16, 4], pl='local')} -> {T([16, 4], pl='unplaced')}
  %y = dist.repl %r : {T([16, 4], pl='unplaced')} -> {T([16, 4])}
  func.return %y : {T([16, 4])}
}}"""
    x = rand(ranks, 16, 4)
    ex = run_function(src, "f", {"x": x}, ranks)
    want = reduce_np(x, kind)
    np.testing.assert_allclose(ex.outputs[0], want, rtol=1e-5, atol=1e-5)
    bufs = buffers(ex)
    assert sorted(bufs) == list(range(ranks))
    assert all(b is bufs[0] for b in bufs.values())  # replicas share one array
    assert ex.allocated_bytes["r"] == [0] * ranks  # unplaced: held by no rank
    assert ex.allocated_bytes["y"] == [16 * 4 * 4] * ranks


@pytest.mark.parametrize("ranks", RANKS)
def test_drop_slice_join(ranks):
    src = WORLD + f"""
func.func @f(%x: {T([16, 8])}) -> ({T([16, 8], pl='sliced<1>')}, {T([16, 8])}) {{
  %d = dist.drop %x : {T([16, 8])} -> {T([16, 8], pl='unplaced')}
  %s = dist.slice %d dim 1 : {T([16, 8], pl='unplaced')} -> {T([16, 8], pl='sliced<1>')}
  %j = dist.join %s : {T([16, 8], pl='sliced<1>')} -> {T([16, 8], pl='unplaced')}
  %y = dist.repl %j : {T([16, 8], pl='unplaced')} -> {T([16, 8])}
  func.return %s, %y : {T([16, 8], pl='sliced<1>')}, {T([16, 8])}
}}"""
    x = rand(16, 8)
    ex = run_function(src, "f", {"x": x}, ranks)
    for r, b in buffers(ex, 0).items():
        np.testing.assert_array_equal(b, block(x, 1, r, ranks))
    np.testing.assert_array_equal(ex.outputs[0], x)
    np.testing.assert_array_equal(ex.outputs[1], x)
    assert ex.allocated_bytes["s"] == [16 * 8 * 4 // ranks] * ranks


@pytest.mark.parametrize("ranks", RANKS)
def test_store_load(ranks):
    root = ranks - 1
    src = WORLD + f"""
func.func @f(%x: {T([8, 2])}) -> ({T([8, 2], pl=f'at<{root}>')}, {T([8, 2])}) {{
  %d = dist.drop %x : {T([8, 2])} -> {T([8, 2], pl='unplaced')}
  %s = dist.store %d rank {root} : {T([8, 2], pl='unplaced')} -> {T([8, 2], pl=f'at<{root}>')}
  %l = dist.load %s : {T([8, 2], pl=f'at<{root}>')} -> {T([8, 2], pl='unplaced')}
  %y = dist.repl %l : {T([8, 2], pl='unplaced')} -> {T([8, 2])}
  func.return %s, %y : {T([8, 2], pl=f'at<{root}>')}, {T([8, 2])}
}}"""
    x = rand(8, 2)
    ex = run_function(src, "f", {"x": x}, ranks)
    assert sorted(buffers(ex, 0)) == [root]
    np.testing.assert_array_equal(buffers(ex, 0)[root], x)
    np.testing.assert_array_equal(ex.outputs[1], x)
    assert ex.allocated_bytes["s"] == [0] * root + [64]


# ======================================================================================
# Collectives on one axis
# ======================================================================================


def _coll(body_type_in, body_type_out, op_text):
    return WORLD + f"""
func.func @f(%x: {body_type_in}) -> {body_type_out} {{
  %y = {op_text} : {body_type_in} -> {body_type_out}
  func.return %y : {body_type_out}
}}"""


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("kind", KINDS)
def test_all_reduce(ranks, kind):
    src = _coll(T([8, 4], pl="local"), T([8, 4]), f"coll.all_reduce {kind} %x")
    x = rand(ranks, 8, 4)
    ex = run_function(src, "f", {"x": x}, ranks)
    want = reduce_np(x, kind)
    for b in buffers(ex).values():
        np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_scatter(ranks, dim):
    src = _coll(T([16, 8], pl="local"), T([16, 8], pl=f"sliced<{dim}>"), f"coll.reduce_scatter sum %x dim {dim}")
    x = rand(ranks, 16, 8)
    ex = run_function(src, "f", {"x": x}, ranks)
    total = x.sum(axis=0)
    for r, b in buffers(ex).items():
        np.testing.assert_allclose(b, block(total, dim, r, ranks), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[0], total, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", RANKS)
def test_all_gather(ranks):
    src = _coll(T([8, 16], pl="sliced<1>"), T([8, 16]), "coll.all_gather %x")
    x = rand(8, 16)
    ex = run_function(src, "f", {"x": x}, ranks)
    for b in buffers(ex).values():
        np.testing.assert_array_equal(b, x)


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("kind", ["sum", "max", "avg"])
def test_reduce_to_root(ranks, kind):
    root = ranks // 2
    src = _coll(T([8], pl="local"), T([8], pl=f"at<{root}>"), f"coll.reduce {kind} %x root {root}")
    x = rand(ranks, 8)
    ex = run_function(src, "f", {"x": x}, ranks)
    assert sorted(buffers(ex)) == [root]
    np.testing.assert_allclose(buffers(ex)[root], reduce_np(x, kind), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", RANKS)
def test_broadcast(ranks):
    root = ranks - 1
    src = _coll(T([8], pl=f"at<{root}>"), T([8]), "coll.broadcast %x")
    x = rand(8)
    ex = run_function(src, "f", {"x": x}, ranks)
    assert sorted(buffers(ex)) == list(range(ranks))
    for b in buffers(ex).values():
        np.testing.assert_array_equal(b, x)


@pytest.mark.parametrize("ranks", RANKS)
def test_all_to_all(ranks):
    src = _coll(T([16, 8], pl="sliced<0>"), T([16, 8], pl="sliced<1>"), "coll.all_to_all %x dim 1")
    x = rand(16, 8)
    ex = run_function(src, "f", {"x": x}, ranks)
    for r, b in buffers(ex).items():
        np.testing.assert_array_equal(b, block(x, 1, r, ranks))


@pytest.mark.parametrize("ranks", RANKS)
def test_send(ranks):
    to = ranks - 1
    src = _coll(T([4], pl="at<0>"), T([4], pl=f"at<{to}>"), f"coll.send %x to {to}")
    x = rand(4)
    ex = run_function(src, "f", {"x": x}, ranks)
    assert sorted(buffers(ex)) == [to]
    np.testing.assert_array_equal(buffers(ex)[to], x)
    assert ex.allocated_bytes["y"] == [0] * to + [16]


# ======================================================================================
# 2-D meshes: several axes, nesting, at<r> on another axis
# ======================================================================================


def grid_mesh(ranks):
    return f'dist.mesh @grid shape = [2, {ranks // 2}] axes = ["a", "b"]\n'


def G(shape, pl, elt="f32"):
    return T(shape, elt, pl, "grid")


def coords(r, ranks):
    return divmod(r, ranks // 2)


@pytest.mark.parametrize("ranks", GRID_RANKS)
@pytest.mark.parametrize("axes", [[0, 1], [1, 0]])
def test_reduce_scatter_over_two_axes_orders_groups_row_major(ranks, axes):
    out_pl = "sliced<0>, sliced<0>" if axes == [0, 1] else "sliced<0, 1>, sliced<0, 0>"
    src = grid_mesh(ranks) + f"""
func.func @f(%x: {G([16, 2], 'local, local')}) -> {G([16, 2], out_pl)} {{
  %y = coll.reduce_scatter sum %x dim 0 axes {axes} : {G([16, 2], 'local, local')} -> {G([16, 2], out_pl)}
  func.return %y : {G([16, 2], out_pl)}
}}"""
    s1 = ranks // 2
    x = rand(2, s1, 16, 2)
    ex = run_function(src, "f", {"x": x}, ranks)
    total = x.sum(axis=(0, 1))
    for r, b in buffers(ex).items():
        c0, c1 = coords(r, ranks)
        idx = c0 * s1 + c1 if axes == [0, 1] else c1 * 2 + c0
        np.testing.assert_allclose(b, block(total, 0, idx, ranks), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[0], total, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", GRID_RANKS)
def test_nested_reduce_scatters_then_all_gathers(ranks):
    # RS over b then over a nests a inside b: rank (a, b) holds block b*2 + a.
    src = grid_mesh(ranks) + f"""
func.func @f(%x: {G([16], 'local, local')}) -> ({G([16], 'sliced<0, 1>, sliced<0, 0>')}, {G([16], 'replicated, replicated')}) {{
  %a = coll.reduce_scatter sum %x dim 0 axes [1] : {G([16], 'local, local')} -> {G([16], 'local, sliced<0>')}
  %b = coll.reduce_scatter sum %a dim 0 axes [0] : {G([16], 'local, sliced<0>')} -> {G([16], 'sliced<0, 1>, sliced<0, 0>')}
  %c = coll.all_gather %b axes [0] : {G([16], 'sliced<0, 1>, sliced<0, 0>')} -> {G([16], 'replicated, sliced<0>')}
  %d = coll.all_gather %c axes [1] : {G([16], 'replicated, sliced<0>')} -> {G([16], 'replicated, replicated')}
  func.return %b, %d : {G([16], 'sliced<0, 1>, sliced<0, 0>')}, {G([16], 'replicated, replicated')}
}}"""
    s1 = ranks // 2
    x = rand(2, s1, 16)
    ex = run_function(src, "f", {"x": x}, ranks)
    total = x.sum(axis=(0, 1))
    for r, b in buffers(ex, 0).items():
        c0, c1 = coords(r, ranks)
        np.testing.assert_allclose(b, block(total, 0, c1 * 2 + c0, ranks), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[1], total, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", GRID_RANKS)
def test_all_reduce_over_both_axes_and_all_gather_over_both(ranks):
    src = grid_mesh(ranks) + f"""
func.func @f(%x: {G([8, 4], 'local, local')}, %s: {G([8, 4], 'sliced<0>, sliced<0>')}) -> ({G([8, 4], 'replicated, replicated')}, {G([8, 4], 'replicated, replicated')}) {{
  %y = coll.all_reduce max %x axes [0, 1] : {G([8, 4], 'local, local')} -> {G([8, 4], 'replicated, replicated')}
  %z = coll.all_gather %s axes [0, 1] : {G([8, 4], 'sliced<0>, sliced<0>')} -> {G([8, 4], 'replicated, replicated')}
  func.return %y, %z : {G([8, 4], 'replicated, replicated')}, {G([8, 4], 'replicated, replicated')}
}}"""
    x = rand(2, ranks // 2, 8, 4)
    s = rand(8, 4)
    ex = run_function(src, "f", {"x": x, "s": s}, ranks)
    np.testing.assert_array_equal(ex.outputs[0], x.max(axis=(0, 1)))
    np.testing.assert_array_equal(ex.outputs[1], s)
    for r, b in buffers(ex, 1).items():
        np.testing.assert_array_equal(b, s)


@pytest.mark.parametrize("ranks", GRID_RANKS)
def test_collectives_with_at_on_another_axis(ranks):
    # Only stage a=0 holds the partial sums; it all-reduces them, sends to stage 1,
    # which broadcasts to both stages.
    s1 = ranks // 2
    src = grid_mesh(ranks) + f"""
func.func @f(%x: {G([4, 6], 'at<0>, local')}) -> ({G([4, 6], 'at<1>, replicated')}, {G([4, 6], 'replicated, replicated')}) {{
  %s = coll.all_reduce sum %x axes [1] : {G([4, 6], 'at<0>, local')} -> {G([4, 6], 'at<0>, replicated')}
  %r = coll.send %s to 1 axes [0] : {G([4, 6], 'at<0>, replicated')} -> {G([4, 6], 'at<1>, replicated')}
  %b = coll.broadcast %r axes [0] : {G([4, 6], 'at<1>, replicated')} -> {G([4, 6], 'replicated, replicated')}
  func.return %r, %b : {G([4, 6], 'at<1>, replicated')}, {G([4, 6], 'replicated, replicated')}
}}"""
    x = rand(s1, 4, 6)
    ex = run_function(src, "f", {"x": x}, ranks)
    total = x.sum(axis=0)
    assert sorted(buffers(ex, 0)) == list(range(s1, ranks))
    np.testing.assert_allclose(ex.outputs[0], total, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[1], total, rtol=1e-5, atol=1e-5)
    assert ex.allocated_bytes["x"] == [4 * 6 * 4] * s1 + [0] * s1
    assert ex.allocated_bytes["s"] == [4 * 6 * 4] * s1 + [0] * s1


@pytest.mark.parametrize("ranks", GRID_RANKS)
def test_reduce_and_send_to_group_rank_over_two_axes(ranks):
    root = ranks - 1  # group rank over axes [0, 1]: digits (1, s1 - 1)
    s1 = ranks // 2
    src = grid_mesh(ranks) + f"""
func.func @f(%x: {G([4], 'local, local')}) -> ({G([4], f'at<1>, at<{s1 - 1}>')}, {G([4], 'at<0>, at<0>')}) {{
  %y = coll.reduce sum %x root {root} axes [0, 1] : {G([4], 'local, local')} -> {G([4], f'at<1>, at<{s1 - 1}>')}
  %z = coll.send %y to 0 axes [1, 0] : {G([4], f'at<1>, at<{s1 - 1}>')} -> {G([4], 'at<0>, at<0>')}
  func.return %y, %z : {G([4], f'at<1>, at<{s1 - 1}>')}, {G([4], 'at<0>, at<0>')}
}}"""
    x = rand(2, s1, 4)
    ex = run_function(src, "f", {"x": x}, ranks)
    assert sorted(buffers(ex, 0)) == [ranks - 1]
    assert sorted(buffers(ex, 1)) == [0]
    np.testing.assert_allclose(ex.outputs[1], x.sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", GRID_RANKS)
def test_local_outputs_stack_in_axis_order(ranks):
    src = grid_mesh(ranks) + f"""
func.func @f(%x: {G([3], 'local, local')}) -> {G([3], 'local, local')} {{
  %y = dist.map(%x) : ({G([3], 'local, local')}) -> {G([3], 'local, local')} {{
  ^bb0(%e: f32):
    %t = arith.addf %e, %e : f32
    dist.yield %t : f32
  }}
  func.return %y : {G([3], 'local, local')}
}}"""
    x = rand(2, ranks // 2, 3)
    ex = run_function(src, "f", {"x": x}, ranks)
    for r, b in buffers(ex).items():
        c0, c1 = coords(r, ranks)
        np.testing.assert_array_equal(b, 2 * x[c0, c1])
    np.testing.assert_array_equal(ex.outputs[0], 2 * x)


# ======================================================================================
# Mesh views and dist.remesh
# ======================================================================================


def test_remesh_keeps_each_ranks_buffer():
    src = """
dist.mesh @hw shape = [2, 4] axes = ["node", "gpu"]
dist.mesh @world shape = [8] view @hw [[0, 1]]
dist.mesh @swap shape = [4, 2] view @hw [[1], [0]]
func.func @f(%x: !dist.tensor<16x4xf32, @world, [sliced<0>]>) -> (!dist.tensor<16x4xf32, @hw, [sliced<0>, replicated]>, !dist.tensor<16x4xf32, @swap, [replicated, sliced<0>]>) {
  %h = dist.remesh %x : !dist.tensor<16x4xf32, @world, [sliced<0>]> -> !dist.tensor<16x4xf32, @hw, [sliced<0>, sliced<0>]>
  %g = coll.all_gather %h axes [1] : !dist.tensor<16x4xf32, @hw, [sliced<0>, sliced<0>]> -> !dist.tensor<16x4xf32, @hw, [sliced<0>, replicated]>
  %s = dist.remesh %g : !dist.tensor<16x4xf32, @hw, [sliced<0>, replicated]> -> !dist.tensor<16x4xf32, @swap, [replicated, sliced<0>]>
  func.return %g, %s : !dist.tensor<16x4xf32, @hw, [sliced<0>, replicated]>, !dist.tensor<16x4xf32, @swap, [replicated, sliced<0>]>
}"""
    x = rand(16, 4)
    ex = run_function(src, "f", {"x": x}, 8)
    for r in range(8):
        node = r // 4
        np.testing.assert_array_equal(buffers(ex, 0)[r], block(x, 0, node, 2))
        assert buffers(ex, 1)[r] is buffers(ex, 0)[r]  # no data moves
    np.testing.assert_array_equal(ex.outputs[1], x)
    assert ex.allocated_bytes["h"] == [0] * 8 and ex.allocated_bytes["s"] == [0] * 8


@pytest.mark.parametrize("ranks", GRID_RANKS)
def test_hierarchical_all_reduce_on_view_with_dynamic_sizes(ranks):
    src = """
dist.mesh @hw shape = [2, ?] axes = ["node", "gpu"]
dist.mesh @world shape = [?] view @hw [[0, 1]]
func.func @flat(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}
func.func @hier(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %h = dist.remesh %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @hw, [local, local]>
  %rs = coll.reduce_scatter sum %h dim 0 axes [1] : !dist.tensor<64xf32, @hw, [local, local]> -> !dist.tensor<64xf32, @hw, [local, sliced<0>]>
  %ar = coll.all_reduce sum %rs axes [0] : !dist.tensor<64xf32, @hw, [local, sliced<0>]> -> !dist.tensor<64xf32, @hw, [replicated, sliced<0>]>
  %ag = coll.all_gather %ar axes [1] : !dist.tensor<64xf32, @hw, [replicated, sliced<0>]> -> !dist.tensor<64xf32, @hw, [replicated, replicated]>
  %y = dist.remesh %ag : !dist.tensor<64xf32, @hw, [replicated, replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}"""
    x = rand(ranks, 64)
    np.testing.assert_allclose(interpret(src, "hier", {"x": x}, ranks)[0], x.sum(0), rtol=1e-5, atol=1e-5)
    assert equivalent(src, None, ranks, func_a="flat", func_b="hier")


# ======================================================================================
# Fused collectives and overlap
# ======================================================================================

FUSED = WORLD + """
func.func @fused(%g: !dist.tensor<64xf32, @world, [local]>, %p: !dist.tensor<64xf32, @world, [replicated]>, %m: !dist.tensor<64xf32, @world, [sliced<0>]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %p1, %m1 = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
    %ps = dist.take_slice %p dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %n = dist.reduce_tensor sum %gs dims [0] : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
    %nn = coll.all_reduce sum %n : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
    %pn, %mm = dist.map(%ps, %m, %gs, %nn) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<f32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
    ^bb0(%pi: f32, %mi: f32, %gi: f32, %ni: f32):
      %a = arith.addf %mi, %gi : f32
      %b = arith.divf %a, %ni : f32
      %c = arith.subf %pi, %b : f32
      dist.yield %c, %a : f32, f32
    }
    coll.yield %pn, %mm : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %p1, %m1 : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

func.func @unfused(%g: !dist.tensor<64xf32, @world, [local]>, %p: !dist.tensor<64xf32, @world, [replicated]>, %m: !dist.tensor<64xf32, @world, [sliced<0>]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %gs = coll.reduce_scatter sum %g dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %ps = dist.take_slice %p dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %n = dist.reduce_tensor sum %gs dims [0] : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
  %nn = coll.all_reduce sum %n : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
  %pn, %mm = dist.map(%ps, %m, %gs, %nn) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<f32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%pi: f32, %mi: f32, %gi: f32, %ni: f32):
    %a = arith.addf %mi, %gi : f32
    %b = arith.divf %a, %ni : f32
    %c = arith.subf %pi, %b : f32
    dist.yield %c, %a : f32, f32
  }
  %p1 = coll.all_gather %pn : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %p1, %mm : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}
"""


@pytest.mark.parametrize("ranks", RANKS)
def test_fused_all_reduce_with_gather_flags_and_inner_all_reduce(ranks):
    g, p, m = rand(ranks, 64), rand(64), rand(64)
    ex = run_function(FUSED, "fused", {"g": g, "p": p, "m": m}, ranks)
    G = g.sum(0)
    np.testing.assert_allclose(ex.outputs[0], p - (m + G) / G.sum(), rtol=1e-4)
    np.testing.assert_allclose(ex.outputs[1], m + G, rtol=1e-5, atol=1e-5)
    for r, b in buffers(ex, 1).items():  # not gathered: stays sliced
        assert b.shape == (64 // ranks,)
    assert ex.allocated_bytes["m1"] == [0] * ranks  # the region's own buffer
    unfused = interpret(FUSED, "unfused", {"g": g, "p": p, "m": m}, ranks)
    for a, b in zip(ex.outputs, unfused):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ranks", RANKS)
def test_other_fused_collectives(ranks):
    src = WORLD + f"""
func.func @f(%x: {T([64], pl='local')}, %s: {T([64], pl='sliced<0>')}, %a: {T([64], pl='at<0>')}, %q: {T([8, 16], pl='sliced<0>')}) -> ({T([64], pl='sliced<0>')}, {T([64])}, {T([64], pl='at<0>')}, {T([64])}, {T([8, 16], pl='sliced<1>')}) {{
  %0 = coll.fused_reduce_scatter avg %x dim 0 : {T([64], pl='local')} -> {T([64], pl='sliced<0>')} {{
  ^bb0(%v: {T([64], pl='sliced<0>')}):
    coll.yield %v : {T([64], pl='sliced<0>')}
  }}
  %1 = coll.fused_all_gather %s : {T([64], pl='sliced<0>')} -> {T([64])} {{
  ^bb0(%v: {T([64], pl='sliced<0>')}):
    %w = dist.map(%v) : ({T([64], pl='sliced<0>')}) -> {T([64], pl='sliced<0>')} {{
    ^bb0(%e: f32):
      %t = arith.mulf %e, %e : f32
      dist.yield %t : f32
    }}
    coll.yield %w : {T([64], pl='sliced<0>')}
  }}
  %2 = coll.fused_reduce max %x root 0 : {T([64], pl='local')} -> {T([64], pl='at<0>')} {{
  ^bb0(%v: {T([64], pl='at<0>')}):
    coll.yield %v : {T([64], pl='at<0>')}
  }}
  %3 = coll.fused_broadcast %a : {T([64], pl='at<0>')} -> {T([64])} {{
  ^bb0(%v: {T([64], pl='at<0>')}):
    %w = dist.map(%v) : ({T([64], pl='at<0>')}) -> {T([64], pl='at<0>')} {{
    ^bb0(%e: f32):
      %t = arith.negf %e : f32
      dist.yield %t : f32
    }}
    coll.yield %w : {T([64], pl='at<0>')}
  }}
  %4 = coll.fused_all_to_all %q dim 1 : {T([8, 16], pl='sliced<0>')} -> {T([8, 16], pl='sliced<1>')} {{
  ^bb0(%v: {T([8, 16], pl='sliced<1>')}):
    %w = dist.map(%v) : ({T([8, 16], pl='sliced<1>')}) -> {T([8, 16], pl='sliced<1>')} {{
    ^bb0(%e: f32):
      %t = math.tanh %e : f32
      dist.yield %t : f32
    }}
    coll.yield %w : {T([8, 16], pl='sliced<1>')}
  }}
  func.return %0, %1, %2, %3, %4 : {T([64], pl='sliced<0>')}, {T([64])}, {T([64], pl='at<0>')}, {T([64])}, {T([8, 16], pl='sliced<1>')}
}}"""
    x, s, a, q = rand(ranks, 64), rand(64), rand(64), rand(8, 16)
    ex = run_function(src, "f", {"x": x, "s": s, "a": a, "q": q}, ranks)
    np.testing.assert_allclose(ex.outputs[0], x.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[1], s * s, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ex.outputs[2], x.max(0))
    assert sorted(buffers(ex, 2)) == [0]
    np.testing.assert_array_equal(ex.outputs[3], -a)
    np.testing.assert_allclose(ex.outputs[4], np.tanh(q), rtol=1e-5, atol=1e-5)
    for r, b in buffers(ex, 4).items():
        np.testing.assert_allclose(b, np.tanh(block(q, 1, r, ranks)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", RANKS)
def test_overlap_means_its_chain(ranks):
    src = WORLD + """
func.func @f(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<8x32xf32, @world, [replicated]> {
  %y = coll.overlap chunks 4 order ring -> !dist.tensor<8x32xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<8x32xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x32xf32, @world, [local]> -> !dist.tensor<8x32xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x32xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x32xf32, @world, [replicated]>
}"""
    x, w = rand(8, 64), rand(64, 32)
    np.testing.assert_allclose(interpret(src, "f", {"x": x, "w": w}, ranks)[0], x @ w, rtol=1e-4, atol=1e-5)


# ======================================================================================
# dist.map: broadcasting, scalars, 0-d tensors, arith/math semantics
# ======================================================================================


@pytest.mark.parametrize("ranks", RANKS)
def test_map_broadcasts_scalars_and_0d_tensors(ranks):
    src = WORLD + f"""
func.func @f(%a: {T([16, 8], pl='sliced<0>')}, %b: {T([8])}, %s: f32, %z: {T([])}) -> ({T([16, 8], pl='sliced<0>')}, {T([4])}) {{
  %y = dist.map(%a, %b, %s, %z) : ({T([16, 8], pl='sliced<0>')}, {T([8])}, f32, {T([])}) -> {T([16, 8], pl='sliced<0>')} {{
  ^bb0(%ai: f32, %bi: f32, %si: f32, %zi: f32):
    %m = arith.mulf %ai, %bi : f32
    %p = arith.addf %m, %si : f32
    %q = arith.subf %p, %zi : f32
    dist.yield %q : f32
  }}
  %c = dist.map(%s) : (f32) -> {T([4])} {{
  ^bb0(%si: f32):
    %two = arith.constant 2.0 : f32
    %t = arith.mulf %si, %two : f32
    dist.yield %t : f32
  }}
  func.return %y, %c : {T([16, 8], pl='sliced<0>')}, {T([4])}
}}"""
    a, b = rand(16, 8), rand(8)
    s, z = np.array(1.5, np.float32), np.array(-0.25, np.float32)
    ex = run_function(src, "f", {"a": a, "b": b, "s": s, "z": z}, ranks)
    np.testing.assert_allclose(ex.outputs[0], a * b + s - z, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ex.outputs[1], np.full(4, 3.0, np.float32))
    for r, buf in buffers(ex, 0).items():
        assert buf.shape == (16 // ranks, 8)


def _map1(elt, arg_elts, body, res_elt=None, shape=(12,)):
    res_elt = res_elt or elt
    args = ", ".join(f"%a{i}: {T(shape, e)}" for i, e in enumerate(arg_elts))
    ins = ", ".join(f"%a{i}" for i in range(len(arg_elts)))
    in_types = ", ".join(T(shape, e) for e in arg_elts)
    bb = ", ".join(f"%x{i}: {e}" for i, e in enumerate(arg_elts))
    return WORLD + f"""
func.func @f({args}) -> {T(shape, res_elt)} {{
  %y = dist.map({ins}) : ({in_types}) -> {T(shape, res_elt)} {{
  ^bb0({bb}):
    {body}
  }}
  func.return %y : {T(shape, res_elt)}
}}"""


FLOAT_OPS = [
    ("arith.addf %x0, %x1", np.add),
    ("arith.subf %x0, %x1", np.subtract),
    ("arith.mulf %x0, %x1", np.multiply),
    ("arith.divf %x0, %x1", np.divide),
    ("arith.maximumf %x0, %x1", np.maximum),
    ("arith.minimumf %x0, %x1", np.minimum),
    ("math.powf %x0, %x1", np.power),
    ("math.copysign %x0, %x1", np.copysign),
    ("arith.negf %x0", np.negative),
    ("math.sqrt %x0", np.sqrt),
    ("math.rsqrt %x0", lambda x: 1 / np.sqrt(x)),
    ("math.exp %x0", np.exp),
    ("math.log %x0", np.log),
    ("math.tanh %x0", np.tanh),
    ("math.erf %x0", lambda x: np.array([__import__("math").erf(v) for v in x.astype(np.float64)])),
    ("math.erfc %x0", lambda x: np.array([__import__("math").erfc(v) for v in x.astype(np.float64)])),
    ("arith.remf %x0, %x1", np.fmod),
    ("math.absf %x0", np.abs),
    ("math.ceil %x0", np.ceil),
    ("math.floor %x0", np.floor),
    ("math.round %x0", lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5)),
]


@pytest.mark.parametrize("text,fn", FLOAT_OPS, ids=[t.split()[0] for t, _ in FLOAT_OPS])
def test_float_body_ops(text, fn):
    n = text.count("%x")
    src = _map1("f32", ["f32"] * n, f"%r = {text} : f32\n    dist.yield %r : f32")
    xs = [np.abs(rand(12)) + 0.5, rand(12)][:n]
    xs[0][:3] = [2.5, -2.5, 0.5] if "round" in text else xs[0][:3]
    out = interpret(src, "f", {f"a{i}": x for i, x in enumerate(xs)}, 2)[0]
    np.testing.assert_allclose(out, fn(*xs).astype(np.float32), rtol=2e-6, atol=1e-7)


def test_fma_select_cmpf_and_casts_in_body():
    body = """%f = math.fma %x0, %x1, %x2 : f32
    %c = arith.cmpf olt, %x0, %x1 : f32
    %s = arith.select %c, %f, %x2 : f32
    %i = arith.fptosi %s : f32 to i32
    %b = arith.sitofp %i : i32 to f32
    %h = arith.truncf %b : f32 to f16
    %e = arith.extf %h : f16 to f32
    dist.yield %e : f32"""
    src = _map1("f32", ["f32"] * 3, body)
    x0, x1, x2 = rand(12) * 10, rand(12) * 10, rand(12) * 10
    out = interpret(src, "f", {"a0": x0, "a1": x1, "a2": x2}, 1)[0]
    f = (x0.astype(np.float64) * x1 + x2).astype(np.float32)
    s = np.where(x0 < x1, f, x2)
    np.testing.assert_array_equal(out, np.trunc(s).astype(np.int32).astype(np.float32).astype(np.float16).astype(np.float32))


CMPF = {"oeq": np.equal, "one": lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b), "olt": np.less, "ule": lambda a, b: (a <= b) | np.isnan(a) | np.isnan(b), "une": np.not_equal, "uno": lambda a, b: np.isnan(a) | np.isnan(b)}


@pytest.mark.parametrize("pred", sorted(CMPF))
def test_cmpf_predicates_with_nan(pred):
    body = f"%c = arith.cmpf {pred}, %x0, %x1 : f32\n    %r = arith.extui %c : i1 to i32\n    dist.yield %r : i32"
    src = _map1("f32", ["f32", "f32"], body, res_elt="i32", shape=(6,))
    a = np.array([1, 2, np.nan, 3, np.nan, 0], np.float32)
    b = np.array([1, 1, 1, 4, np.nan, -0.0], np.float32)
    out = interpret(src, "f", {"a0": a, "a1": b}, 1)[0]
    np.testing.assert_array_equal(out, CMPF[pred](a, b).astype(np.int32))


def _divsi(a, b):
    q = np.trunc(a.astype(np.float64) / b).astype(a.dtype)
    return q


INT_OPS = [
    ("arith.addi %x0, %x1", np.add),
    ("arith.subi %x0, %x1", np.subtract),
    ("arith.muli %x0, %x1", np.multiply),
    ("arith.divsi %x0, %x1", _divsi),
    ("arith.remsi %x0, %x1", lambda a, b: a - b * _divsi(a, b)),
    ("arith.divui %x0, %x1", lambda a, b: (a.astype(np.uint32) // b.astype(np.uint32)).astype(np.int32)),
    ("arith.andi %x0, %x1", np.bitwise_and),
    ("arith.ori %x0, %x1", np.bitwise_or),
    ("arith.xori %x0, %x1", np.bitwise_xor),
    ("arith.maxsi %x0, %x1", np.maximum),
    ("arith.minsi %x0, %x1", np.minimum),
]


@pytest.mark.parametrize("text,fn", INT_OPS, ids=[t.split()[0] for t, _ in INT_OPS])
def test_int_body_ops(text, fn):
    src = _map1("i32", ["i32", "i32"], f"%r = {text} : i32\n    dist.yield %r : i32")
    a = np.array([7, -7, 7, -7, 0, 100, -100, 3, 2147483647, -5, 9, 1], np.int32)
    b = np.array([2, 2, -2, -2, 5, 7, 7, -3, 1, 3, 4, 1], np.int32)
    out = interpret(src, "f", {"a0": a, "a1": b}, 1)[0]
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, fn(a, b).astype(np.int32))


def test_int_cmpi_extsi_trunci_and_wrapping():
    body = """%c = arith.cmpi ult, %x0, %x1 : i32
    %s = arith.extsi %c : i1 to i64
    %w = arith.extsi %x0 : i32 to i64
    %m = arith.muli %w, %w : i64
    %t = arith.trunci %m : i64 to i32
    %e = arith.extsi %t : i32 to i64
    %r = arith.addi %e, %s : i64
    dist.yield %r : i64"""
    src = _map1("i32", ["i32", "i32"], body, res_elt="i64", shape=(4,))
    a = np.array([-1, 3, 100000, 5], np.int32)
    b = np.array([1, 4, 2, 5], np.int32)
    out = interpret(src, "f", {"a0": a, "a1": b}, 1)[0]
    lt = (a.astype(np.uint32) < b.astype(np.uint32)).astype(np.int64) * -1
    sq = (a.astype(np.int64) ** 2).astype(np.int32).astype(np.int64)
    np.testing.assert_array_equal(out, sq + lt)


def test_f16_rounds_once_per_op():
    src = _map1("f16", ["f16", "f16", "f16"], "%s = arith.addf %x0, %x1 : f16\n    %t = arith.mulf %s, %x2 : f16\n    dist.yield %t : f16")
    a, b, c = rand(12, dtype=np.float16), rand(12, dtype=np.float16), rand(12, dtype=np.float16)
    out = interpret(src, "f", {"a0": a, "a1": b, "a2": c}, 1)[0]
    s = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out, (s.astype(np.float32) * c.astype(np.float32)).astype(np.float16))


def test_bitcast_reinterprets_the_bits():
    body = "%i = arith.bitcast %x0 : f32 to i32\n    %j = arith.xori %i, %x1 : i32\n    %r = arith.bitcast %j : i32 to f32\n    dist.yield %r : f32"
    src = _map1("f32", ["f32", "i32"], body, shape=(4,))
    a = np.array([1.0, -2.5, np.inf, 0.0], np.float32)
    b = np.array([1, -(2**31), 1, 7], np.int32)
    out = interpret(src, "f", {"a0": a, "a1": b}, 1)[0]
    np.testing.assert_array_equal(out.view(np.int32), a.view(np.int32) ^ b)


def test_unsupported_body_op_is_named():
    src = _map1("f32", ["f32"], "%i = arith.fptosi %x0 : f32 to i32\n    %p = math.ctpop %i : i32\n    %r = arith.sitofp %p : i32 to f32\n    dist.yield %r : f32")
    with pytest.raises(ExecutionError, match="'math.ctpop' is not supported"):
        interpret(src, "f", {}, 1)


# ======================================================================================
# matmul, reduce_tensor, cast
# ======================================================================================


@pytest.mark.parametrize("ranks", RANKS)
def test_matmul_sliced_contraction_gives_local_partial_sums(ranks):
    src = WORLD + """
func.func @f(%x: !dist.tensor<2x8x16xf32, @world, [sliced<2>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<2x8x8xf32, @world, [local]> {
  %y = dist.matmul %x, %w : (!dist.tensor<2x8x16xf32, @world, [sliced<2>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<2x8x8xf32, @world, [local]>
  func.return %y : !dist.tensor<2x8x8xf32, @world, [local]>
}"""
    x, w = rand(2, 8, 16), rand(16, 8)
    ex = run_function(src, "f", {"x": x, "w": w}, ranks)
    for r in range(ranks):
        np.testing.assert_allclose(ex.outputs[0][r], block(x, 2, r, ranks) @ block(w, 0, r, ranks), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ex.outputs[0].sum(0), x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", RANKS)
def test_matmul_row_column_batch_and_local_rules(ranks):
    src = WORLD + """
func.func @f(%x: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %w: !dist.tensor<8x16xf32, @world, [replicated]>, %r: !dist.tensor<16x8xf32, @world, [replicated]>, %v: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %b: !dist.tensor<8x4x8xf32, @world, [sliced<0>]>, %c: !dist.tensor<8x8x2xf32, @world, [sliced<0>]>, %l: !dist.tensor<16x8xf32, @world, [local]>) -> (!dist.tensor<16x16xf32, @world, [sliced<0>]>, !dist.tensor<16x16xf32, @world, [sliced<1>]>, !dist.tensor<8x4x2xf32, @world, [sliced<0>]>, !dist.tensor<16x16xf32, @world, [local]>) {
  %y1 = dist.matmul %x, %w : (!dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<8x16xf32, @world, [replicated]>) -> !dist.tensor<16x16xf32, @world, [sliced<0>]>
  %y2 = dist.matmul %r, %v : (!dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<8x16xf32, @world, [sliced<1>]>) -> !dist.tensor<16x16xf32, @world, [sliced<1>]>
  %y3 = dist.matmul %b, %c : (!dist.tensor<8x4x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8x2xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4x2xf32, @world, [sliced<0>]>
  %y4 = dist.matmul %l, %w : (!dist.tensor<16x8xf32, @world, [local]>, !dist.tensor<8x16xf32, @world, [replicated]>) -> !dist.tensor<16x16xf32, @world, [local]>
  func.return %y1, %y2, %y3, %y4 : !dist.tensor<16x16xf32, @world, [sliced<0>]>, !dist.tensor<16x16xf32, @world, [sliced<1>]>, !dist.tensor<8x4x2xf32, @world, [sliced<0>]>, !dist.tensor<16x16xf32, @world, [local]>
}"""
    ins = {"x": rand(16, 8), "w": rand(8, 16), "r": rand(16, 8), "v": rand(8, 16), "b": rand(8, 4, 8), "c": rand(8, 8, 2), "l": rand(ranks, 16, 8)}
    ex = run_function(src, "f", ins, ranks)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    np.testing.assert_allclose(ex.outputs[0], ins["x"] @ ins["w"], **tol)
    np.testing.assert_allclose(ex.outputs[1], ins["r"] @ ins["v"], **tol)
    np.testing.assert_allclose(ex.outputs[2], ins["b"] @ ins["c"], **tol)
    np.testing.assert_allclose(ex.outputs[3], ins["l"] @ ins["w"], **tol)
    for r, b in buffers(ex, 1).items():
        assert b.shape == (16, 16 // ranks)


@pytest.mark.parametrize("elt", ["f16", "bf16", "f64", "i32", "i64"])
def test_matmul_dtypes(elt):
    dt = DTYPES[elt]
    src = WORLD + f"""
func.func @f(%x: {T([4, 8], elt)}, %w: {T([8, 3], elt)}) -> {T([4, 3], elt)} {{
  %y = dist.matmul %x, %w : ({T([4, 8], elt)}, {T([8, 3], elt)}) -> {T([4, 3], elt)}
  func.return %y : {T([4, 3], elt)}
}}"""
    x, w = rand(4, 8, dtype=dt), rand(8, 3, dtype=dt)
    out = interpret(src, "f", {"x": x, "w": w}, 2)[0]
    cdt = np.float32 if elt in ("f16", "bf16") else dt
    np.testing.assert_array_equal(out, (x.astype(cdt) @ w.astype(cdt)).astype(dt))


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("kind", KINDS)
def test_reduce_tensor_over_sliced_dim_gives_partials(ranks, kind):
    src = WORLD + f"""
func.func @f(%x: {T([16, 3], pl='sliced<0>')}) -> ({T([3], pl='local')}, {T([3])}, {T([16])}) {{
  %p = dist.reduce_tensor {kind} %x dims [0] : {T([16, 3], pl='sliced<0>')} -> {T([3], pl='local')}
  %t = coll.all_reduce {kind} %p : {T([3], pl='local')} -> {T([3])}
  %q = dist.reduce_tensor {kind} %x dims [1] : {T([16, 3], pl='sliced<0>')} -> {T([16], pl='sliced<0>')}
  %j = coll.all_gather %q : {T([16], pl='sliced<0>')} -> {T([16])}
  func.return %p, %t, %j : {T([3], pl='local')}, {T([3])}, {T([16])}
}}"""
    x = rand(16, 3) * 0.5 + 1
    ex = run_function(src, "f", {"x": x}, ranks)
    parts = np.stack([reduce_np(block(x, 0, r, ranks), kind) for r in range(ranks)])
    np.testing.assert_allclose(ex.outputs[0], parts, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[1], reduce_np(x, kind), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[2], reduce_np(x, kind, axis=1), rtol=1e-5, atol=1e-5)


def test_reduce_tensor_int_avg_truncates_and_sum_wraps():
    src = WORLD + f"""
func.func @f(%x: {T([4], 'i32')}) -> ({T([], 'i32')}, {T([], 'i32')}) {{
  %a = dist.reduce_tensor avg %x dims [0] : {T([4], 'i32')} -> {T([], 'i32')}
  %s = dist.reduce_tensor sum %x dims [0] : {T([4], 'i32')} -> {T([], 'i32')}
  func.return %a, %s : {T([], 'i32')}, {T([], 'i32')}
}}"""
    x = np.array([-3, -2, 0, 2147483647], np.int32)
    a, s = interpret(src, "f", {"x": x}, 1)
    with np.errstate(all="ignore"):
        total = np.sum(x, dtype=np.int32)
    assert s == total
    assert a == -(abs(int(total)) // 4) if total < 0 else a == int(total) // 4


CASTS = [("f32", "f16"), ("f32", "bf16"), ("f16", "f32"), ("bf16", "f16"), ("f32", "i32"), ("i64", "f64"), ("i32", "i64"), ("f64", "f32")]


@pytest.mark.parametrize("src_elt,dst_elt", CASTS)
def test_cast(src_elt, dst_elt):
    src = WORLD + f"""
func.func @f(%x: {T([8], src_elt, 'sliced<0>')}) -> {T([8], dst_elt, 'sliced<0>')} {{
  %y = dist.cast %x : {T([8], src_elt, 'sliced<0>')} -> {T([8], dst_elt, 'sliced<0>')}
  func.return %y : {T([8], dst_elt, 'sliced<0>')}
}}"""
    x = (rand(8) * 10).astype(DTYPES[src_elt])
    out = interpret(src, "f", {"x": x}, 4)[0]
    np.testing.assert_array_equal(out, x.astype(DTYPES[dst_elt]))
    if dst_elt == "i32":  # truncation toward zero
        np.testing.assert_array_equal(out, np.trunc(x).astype(np.int32))


# ======================================================================================
# Element types through a collective and a map
# ======================================================================================


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("elt", list(DTYPES))
def test_dtypes_all_reduce_and_map(ranks, elt):
    dt = np.dtype(DTYPES[elt])
    add = "arith.addi" if elt.startswith("i") else "arith.addf"
    src = WORLD + f"""
func.func @f(%x: {T([8], elt, 'local')}, %b: {T([8], elt)}) -> {T([8], elt)} {{
  %s = coll.all_reduce sum %x : {T([8], elt, 'local')} -> {T([8], elt)}
  %y = dist.map(%s, %b) : ({T([8], elt)}, {T([8], elt)}) -> {T([8], elt)} {{
  ^bb0(%p: {elt}, %q: {elt}):
    %r = {add} %p, %q : {elt}
    dist.yield %r : {elt}
  }}
  func.return %y : {T([8], elt)}
}}"""
    x, b = rand(ranks, 8, dtype=dt), rand(8, dtype=dt)
    out = interpret(src, "f", {"x": x, "b": b}, ranks)[0]
    assert out.dtype == dt
    cdt = np.float32 if elt in ("f16", "bf16") else dt
    s = x.astype(cdt).sum(axis=0, dtype=cdt).astype(dt) if ranks > 1 else x[0]
    np.testing.assert_array_equal(out, (s.astype(cdt) + b.astype(cdt)).astype(dt))


# ======================================================================================
# dropout
# ======================================================================================

DROPOUT = WORLD + """
func.func @drop_then_slice(%x: !dist.tensor<16x24xf32, @world, [replicated]>) -> !dist.tensor<16x24xf32, @world, [sliced<1>]> {
  %d = dist.dropout %x p 0.25 seed 99 : !dist.tensor<16x24xf32, @world, [replicated]> -> !dist.tensor<16x24xf32, @world, [replicated]>
  %s = dist.take_slice %d dim 1 : !dist.tensor<16x24xf32, @world, [replicated]> -> !dist.tensor<16x24xf32, @world, [sliced<1>]>
  func.return %s : !dist.tensor<16x24xf32, @world, [sliced<1>]>
}
func.func @slice_then_drop(%x: !dist.tensor<16x24xf32, @world, [replicated]>) -> !dist.tensor<16x24xf32, @world, [sliced<1>]> {
  %s = dist.take_slice %x dim 1 : !dist.tensor<16x24xf32, @world, [replicated]> -> !dist.tensor<16x24xf32, @world, [sliced<1>]>
  %d = dist.dropout %s p 0.25 seed 99 : !dist.tensor<16x24xf32, @world, [sliced<1>]> -> !dist.tensor<16x24xf32, @world, [sliced<1>]>
  func.return %d : !dist.tensor<16x24xf32, @world, [sliced<1>]>
}
func.func @local(%x: !dist.tensor<16x24xf32, @world, [local]>) -> !dist.tensor<16x24xf32, @world, [local]> {
  %d = dist.dropout %x p 0.25 seed 99 : !dist.tensor<16x24xf32, @world, [local]> -> !dist.tensor<16x24xf32, @world, [local]>
  func.return %d : !dist.tensor<16x24xf32, @world, [local]>
}
"""


@pytest.mark.parametrize("ranks", RANKS)
def test_dropout_commutes_with_slicing(ranks):
    x = rand(16, 24) + 5
    a = interpret(DROPOUT, "drop_then_slice", {"x": x}, ranks)[0]
    b = interpret(DROPOUT, "slice_then_drop", {"x": x}, ranks)[0]
    np.testing.assert_array_equal(a, b)
    reference = interpret(DROPOUT, "drop_then_slice", {"x": x}, 1)[0]
    np.testing.assert_array_equal(a, reference)
    kept = a != 0
    assert 0.6 < kept.mean() < 0.9
    np.testing.assert_array_equal(a[kept], (x[kept] * np.float32(1 / 0.75)).astype(np.float32))
    assert equivalent(DROPOUT, None, ranks, func_a="drop_then_slice", func_b="slice_then_drop")


@pytest.mark.parametrize("ranks", [2, 4])
def test_dropout_of_local_values_uses_one_mask(ranks):
    x = rand(ranks, 16, 24) + 5
    out = interpret(DROPOUT, "local", {"x": x}, ranks)[0]
    masks = out != 0
    assert all(np.array_equal(masks[0], m) for m in masks)


# ======================================================================================
# embedding_bag
# ======================================================================================


def np_bag(table, idx, mode):
    g = table[idx].astype(np.float32)  # [B, L, D]
    return {"sum": g.sum(-2), "mean": g.mean(-2), "max": g.max(-2)}[mode].astype(table.dtype)


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_modes_with_sliced_bags(ranks, mode):
    src = WORLD + f"""
func.func @f(%t: {T([32, 4])}, %i: {T([16, 3], 'i32', 'sliced<0>')}) -> {T([16, 4], pl='sliced<0>')} {{
  %e = dist.embedding_bag %t, %i mode {mode} : ({T([32, 4])}, {T([16, 3], 'i32', 'sliced<0>')}) -> {T([16, 4], pl='sliced<0>')}
  func.return %e : {T([16, 4], pl='sliced<0>')}
}}"""
    t = rand(32, 4)
    i = RNG.integers(0, 32, size=(16, 3)).astype(np.int32)
    out = interpret(src, "f", {"t": t, "i": i}, ranks)[0]
    np.testing.assert_allclose(out, np_bag(t, i, mode), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", RANKS)
def test_embedding_bag_row_sliced_table_sums_held_rows(ranks):
    src = WORLD + f"""
func.func @f(%t: {T([32, 4], pl='sliced<0>')}, %i: {T([16, 3], 'i32')}) -> ({T([16, 4], pl='local')}, {T([16, 4])}) {{
  %e = dist.embedding_bag %t, %i mode sum : ({T([32, 4], pl='sliced<0>')}, {T([16, 3], 'i32')}) -> {T([16, 4], pl='local')}
  %s = coll.all_reduce sum %e : {T([16, 4], pl='local')} -> {T([16, 4])}
  func.return %e, %s : {T([16, 4], pl='local')}, {T([16, 4])}
}}"""
    t = rand(32, 4)
    i = RNG.integers(0, 32, size=(16, 3)).astype(np.int32)
    ex = run_function(src, "f", {"t": t, "i": i}, ranks)
    rows = 32 // ranks
    for r in range(ranks):
        held = np.where((i >= r * rows) & (i < (r + 1) * rows), 1.0, 0.0)[..., None]
        np.testing.assert_allclose(ex.outputs[0][r], (t[i] * held).sum(1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ex.outputs[1], np_bag(t, i, "sum"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ranks", RANKS)
def test_embedding_bag_several_tables(ranks):
    src = WORLD + f"""
func.func @f(%t: {T([8, 10, 4], pl='sliced<0>')}, %i: {T([8, 6, 2], 'i64', 'sliced<0>')}) -> {T([8, 6, 4], pl='sliced<0>')} {{
  %e = dist.embedding_bag %t, %i mode mean : ({T([8, 10, 4], pl='sliced<0>')}, {T([8, 6, 2], 'i64', 'sliced<0>')}) -> {T([8, 6, 4], pl='sliced<0>')}
  func.return %e : {T([8, 6, 4], pl='sliced<0>')}
}}"""
    t = rand(8, 10, 4)
    i = RNG.integers(0, 10, size=(8, 6, 2))
    out = interpret(src, "f", {"t": t, "i": i}, ranks)[0]
    want = np.stack([np_bag(t[k], i[k], "mean") for k in range(8)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_embedding_bag_index_out_of_range_is_rejected():
    src = WORLD + f"""
func.func @f(%t: {T([4, 2])}, %i: {T([2, 2], 'i32')}) -> {T([2, 2])} {{
  %e = dist.embedding_bag %t, %i mode sum : ({T([4, 2])}, {T([2, 2], 'i32')}) -> {T([2, 2])}
  func.return %e : {T([2, 2])}
}}"""
    with pytest.raises(ExecutionError, match="index 4 is out of range for a table of 4 rows"):
        interpret(src, "f", {"t": rand(4, 2), "i": np.array([[0, 4], [1, 2]], np.int32)}, 1)
    out = interpret(src, "f", {"t": rand(4, 2)}, 1)  # random indices stay in range
    assert out[0].shape == (2, 2)


# ======================================================================================
# Statistics, in-place results, errors
# ======================================================================================


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_allocated_bytes_sliced_state_and_inplace(ranks):
    src = WORLD + """
func.func @f(%g: !dist.tensor<64xf32, @world, [local]>, %m: !dist.tensor<64xf32, @world, [sliced<0>]>, %v: !dist.tensor<64xf32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [sliced<0>]> {dist.inplace = 1 : i64}, !dist.tensor<64xf32, @world, [replicated]>) {
  %gs = coll.reduce_scatter sum %g dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %m1 = dist.map(%m, %gs) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.addf %a, %b : f32
    dist.yield %c : f32
  }
  %v1 = dist.map(%v) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  func.return %m1, %v1 : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [replicated]>
}"""
    ex = run_function(src, "f", None, ranks)
    assert ex.allocated_bytes["m"] == [256 // ranks] * ranks
    assert ex.allocated_bytes["v"] == [256] * ranks
    assert ex.allocated_bytes["gs"] == [256 // ranks] * ranks
    assert ex.allocated_bytes["m1"] == [0] * ranks  # written into %m's buffer
    assert ex.allocated_bytes["v1"] == [256] * ranks
    assert ex.total_bytes() == [3 * 256 + 2 * 256 // ranks] * ranks


def test_bad_inputs_name_the_argument():
    src = _coll(T([8, 4], pl="local"), T([8, 4]), "coll.all_reduce sum %x")
    with pytest.raises(InputRejected, match=r"argument 'x' must have shape 2x8x4 .*got 8x4"):
        interpret(src, "f", {"x": rand(8, 4)}, 2)
    with pytest.raises(InputRejected, match=r"argument 'x' must have dtype float32 \(f32\), got float64"):
        interpret(src, "f", {"x": np.zeros((2, 8, 4))}, 2)
    with pytest.raises(InputRejected, match=r"array 'y' matches no argument \(arguments: x\)"):
        interpret(src, "f", {"y": rand(2, 8, 4)}, 2)


def test_at_rank_out_of_range_for_the_run():
    src = _coll(T([4], pl="at<0>"), T([4], pl="at<3>"), "coll.send %x to 3")
    with pytest.raises(InputRejected, match=r"is at<3> on axis 0 of @world, which has 2 ranks"):
        interpret(src, "f", None, 2)
