"""The reference interpreter on dims the ranks do not divide (DESIGN §2's rule: over n
ranks a dim of size s is cut in blocks of c = ceil(s/n), the last ranks hold fewer
elements or none): every op against numpy and against the one-rank program, on 1, 2, 3,
5, 6, 7 and 8 ranks, and the blocks each rank holds."""

from __future__ import annotations

import numpy as np
import pytest

from distir.dialects import layout
from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected
from distir.runtime import interpret, run_function
from distir.runtime.interpreter import ExecutionError

RANKS = [1, 2, 3, 5, 6, 7, 8]
RNG = np.random.default_rng(28)
WORLD = "dist.mesh @world shape = [?]\n"


def T(shape, elt="f32", pl="replicated", mesh="world") -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"!dist.tensor<{dims}{elt}, @{mesh}, [{pl}]>"


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def blk(a: np.ndarray, dim: int, i: int, n: int) -> np.ndarray:
    lo, size = layout.dim_block(a.shape[dim], [n], [i])
    return a[(slice(None),) * dim + (slice(lo, lo + size),)]


def one_op(tin: str, tout: str, op_text: str) -> str:
    return WORLD + f"""
func.func @f(%x: {tin}) -> {tout} {{
  %y = {op_text} : {tin} -> {tout}
  func.return %y : {tout}
}}"""


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("size", [1, 2, 7, 13])
def test_reduce_scatter_gives_each_rank_its_ceil_block(ranks, size):
    src = one_op(T([size, 3], pl="local"), T([size, 3], pl="sliced<0>"), "coll.reduce_scatter sum %x dim 0")
    x = rand(ranks, size, 3)
    ex = run_function(src, "f", {"x": x}, ranks)
    total = x.sum(0)
    for r, b in ex.results[0].buffers.items():
        np.testing.assert_allclose(b, blk(total, 0, r, ranks), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.outputs[0], total, rtol=1e-5, atol=1e-5)
    c = -(-size // ranks)
    assert ex.allocated_bytes["y"] == [4 * 3 * max(0, min(c, size - r * c)) for r in range(ranks)]


@pytest.mark.parametrize("ranks", RANKS)
def test_all_gather_and_all_to_all_of_uneven_blocks(ranks):
    src = WORLD + f"""
func.func @f(%x: {T([7, 5], pl='sliced<0>')}) -> ({T([7, 5])}, {T([7, 5], pl='sliced<1>')}) {{
  %g = coll.all_gather %x : {T([7, 5], pl='sliced<0>')} -> {T([7, 5])}
  %a = coll.all_to_all %x dim 1 : {T([7, 5], pl='sliced<0>')} -> {T([7, 5], pl='sliced<1>')}
  func.return %g, %a : {T([7, 5])}, {T([7, 5], pl='sliced<1>')}
}}"""
    x = rand(7, 5)
    ex = run_function(src, "f", {"x": x}, ranks)
    np.testing.assert_array_equal(ex.outputs[0], x)
    np.testing.assert_array_equal(ex.outputs[1], x)
    for r, b in ex.results[1].buffers.items():
        np.testing.assert_array_equal(b, blk(x, 1, r, ranks))


@pytest.mark.parametrize("sizes", [(2, 4), (4, 2), (3, 2)])
def test_nested_slicing_cuts_the_outer_block_again(sizes):
    # dim 0 of size 9 sliced over both axes (axis 0 outer): the inner rule applies to the
    # outer block's own size; all_gather over the inner axis leaves the outer blocks.
    mesh = f"dist.mesh @g shape = [{sizes[0]}, {sizes[1]}]\n"
    t2, t1 = T([9], pl="sliced<0>, sliced<0>", mesh="g"), T([9], pl="sliced<0>, replicated", mesh="g")
    src = mesh + f"""
func.func @f(%x: {t2}) -> {t1} {{
  %y = coll.all_gather %x axes [1] : {t2} -> {t1}
  func.return %y : {t1}
}}"""
    x = rand(9)
    ex = run_function(src, "f", {"x": x}, sizes[0] * sizes[1])
    for r, b in ex.results[0].buffers.items():
        np.testing.assert_array_equal(b, blk(x, 0, r // sizes[1], sizes[0]))
    np.testing.assert_array_equal(ex.outputs[0], x)
    held = [layout.dim_block(9, list(sizes), [r // sizes[1], r % sizes[1]])[1] * 4 for r in range(sizes[0] * sizes[1])]
    assert ex.allocated_bytes["x"] == held


@pytest.mark.parametrize("ranks", RANKS[1:])
def test_hierarchical_reduce_scatters_nest_and_gather_back(ranks):
    # RS over axis 1 then over axis 0 (axis 0 inner), AG back: any 2-D factoring.
    a0 = 2 if ranks % 2 == 0 else 1
    a1 = ranks // a0
    mesh = f"dist.mesh @g shape = [{a0}, {a1}]\n"
    loc, s1 = T([11, 2], pl="local, local", mesh="g"), T([11, 2], pl="local, sliced<0>", mesh="g")
    s2 = T([11, 2], pl="sliced<0, 1>, sliced<0, 0>", mesh="g")
    rep1 = T([11, 2], pl="replicated, sliced<0>", mesh="g")
    rep = T([11, 2], pl="replicated, replicated", mesh="g")
    src = mesh + f"""
func.func @f(%x: {loc}) -> {rep} {{
  %a = coll.reduce_scatter sum %x dim 0 axes [1] : {loc} -> {s1}
  %b = coll.reduce_scatter sum %a dim 0 axes [0] : {s1} -> {s2}
  %c = coll.all_gather %b axes [0] : {s2} -> {rep1}
  %d = coll.all_gather %c axes [1] : {rep1} -> {rep}
  func.return %d : {rep}
}}"""
    x = rand(a0, a1, 11, 2)
    out = interpret(src, "f", {"x": x}, ranks)[0]
    np.testing.assert_allclose(out, x.sum((0, 1)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("kind", ["sum", "max", "min", "avg"])
def test_reduce_tensor_partials_complete_to_the_whole_reduction(ranks, kind):
    # avg over a dim the ranks do not divide: each partial is scaled so that the
    # all-reduce avg is the mean of the whole tensor; max/min of an empty block is the
    # identity.
    src = WORLD + f"""
func.func @f(%x: {T([5, 3], pl='sliced<0>')}) -> {T([3])} {{
  %p = dist.reduce_tensor {kind} %x dims [0] : {T([5, 3], pl='sliced<0>')} -> {T([3], pl='local')}
  %t = coll.all_reduce {kind} %p : {T([3], pl='local')} -> {T([3])}
  func.return %t : {T([3])}
}}"""
    x = rand(5, 3)
    want = {"sum": np.sum, "max": np.max, "min": np.min, "avg": np.mean}[kind](x, axis=0)
    np.testing.assert_allclose(interpret(src, "f", {"x": x}, ranks)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ranks", RANKS)
def test_matmul_embedding_dropout_iota_and_maps_match_one_rank(ranks):
    src = WORLD + f"""
func.func @f(%x: {T([3, 13], pl='sliced<1>')}, %w: {T([13, 5], pl='sliced<0>')}, %t: {T([11, 4], pl='sliced<0>')}, %i: {T([6, 2], 'i32')}, %z: {T([13, 4], pl='sliced<0>')}) -> ({T([3, 5])}, {T([6, 4])}, {T([13, 4])}, {T([13, 4], 'i32')}) {{
  %p = dist.matmul %x, %w : ({T([3, 13], pl='sliced<1>')}, {T([13, 5], pl='sliced<0>')}) -> {T([3, 5], pl='local')}
  %s = coll.all_reduce sum %p : {T([3, 5], pl='local')} -> {T([3, 5])}
  %e = dist.embedding_bag %t, %i mode sum : ({T([11, 4], pl='sliced<0>')}, {T([6, 2], 'i32')}) -> {T([6, 4], pl='local')}
  %es = coll.all_reduce sum %e : {T([6, 4], pl='local')} -> {T([6, 4])}
  %d = dist.dropout %z p 0.25 seed 3 : {T([13, 4], pl='sliced<0>')} -> {T([13, 4], pl='sliced<0>')}
  %m = dist.map(%d) : ({T([13, 4], pl='sliced<0>')}) -> {T([13, 4], pl='sliced<0>')} {{
  ^bb0(%v: f32):
    %two = arith.constant 2.0 : f32
    %u = arith.mulf %v, %two : f32
    dist.yield %u : f32
  }}
  %dg = coll.all_gather %m : {T([13, 4], pl='sliced<0>')} -> {T([13, 4])}
  %io = dist.iota dim 0 : () -> {T([13, 4], 'i32', 'sliced<0>')}
  %ig = coll.all_gather %io : {T([13, 4], 'i32', 'sliced<0>')} -> {T([13, 4], 'i32')}
  func.return %s, %es, %dg, %ig : {T([3, 5])}, {T([6, 4])}, {T([13, 4])}, {T([13, 4], 'i32')}
}}"""
    ins = {"x": rand(3, 13), "w": rand(13, 5), "t": rand(11, 4), "i": RNG.integers(0, 11, size=(6, 2)).astype(np.int32), "z": rand(13, 4) + 3}
    got = interpret(src, "f", ins, ranks)
    ref = interpret(src, "f", ins, 1)
    np.testing.assert_allclose(got[0], ins["x"] @ ins["w"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], ins["t"][ins["i"]].sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[2], ref[2])
    np.testing.assert_array_equal(got[3], np.broadcast_to(np.arange(13)[:, None], (13, 4)))


@pytest.mark.parametrize("ranks", [3, 4, 8])
def test_fused_all_reduce_over_uneven_slices(ranks):
    # ZeRO-style Adam-like update: RS, a map on this rank's slice, AG (one gathered,
    # one kept sliced).
    n = 10
    src = WORLD + f"""
func.func @f(%g: {T([n], pl='local')}, %p: {T([n])}) -> ({T([n])}, {T([n], pl='sliced<0>')}) {{
  %q, %k = coll.fused_all_reduce avg %g dim 0 gather [true, false] : {T([n], pl='local')} -> ({T([n])}, {T([n], pl='sliced<0>')}) {{
  ^bb0(%gs: {T([n], pl='sliced<0>')}):
    %ps = dist.take_slice %p dim 0 : {T([n])} -> {T([n], pl='sliced<0>')}
    %u = dist.map(%ps, %gs) : ({T([n], pl='sliced<0>')}, {T([n], pl='sliced<0>')}) -> {T([n], pl='sliced<0>')} {{
    ^bb0(%a: f32, %b: f32):
      %c = arith.subf %a, %b : f32
      dist.yield %c : f32
    }}
    coll.yield %u, %gs : {T([n], pl='sliced<0>')}, {T([n], pl='sliced<0>')}
  }}
  func.return %q, %k : {T([n])}, {T([n], pl='sliced<0>')}
}}"""
    g, p = rand(ranks, n), rand(n)
    q, k = interpret(src, "f", {"g": g, "p": p}, ranks)
    np.testing.assert_allclose(q, p - g.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k, g.mean(0), rtol=1e-5, atol=1e-6)


def test_reshape_needs_the_same_blocks_before_and_after():
    ok = one_op(T([6, 4], pl="sliced<0>"), T([24], pl="sliced<0>"), "dist.reshape %x")
    parse_module(ok.replace("[?]", "[2]"))
    # 6 rows over 4 ranks: blocks of 2,2,2,0 rows = 8,8,8,0 elements; 24 over 4: 6 each
    bad = ok.replace("[?]", "[4]")
    with pytest.raises(Exception, match=r"block 0 of dim 0 \(elements 0..8\) is not block 0 of the result's dim 0 \(elements 0..6\)"):
        parse_module(bad)
    with pytest.raises(InputRejected, match=r"'dist.reshape' op block 0 of dim 0 .* \(--ranks 4\)"):
        interpret(ok, "f", None, 4)
    x = rand(6, 4)
    np.testing.assert_array_equal(interpret(ok, "f", {"x": x}, 3)[0], x.reshape(24))


def test_to_local_of_an_uneven_dim_is_refused():
    src = one_op(T([5, 2], pl="sliced<0>"), T([2, 2], pl="local"), "dist.to_local %x")
    with pytest.raises(Exception, match=r"a local value has one shape on every rank, and the ranks' blocks differ: dim 0 of size 5 over the 3 ranks of axis 0: blocks of 2, 2, 1"):
        parse_module(src.replace("[?]", "[3]"))


def test_remesh_over_merged_axes_needs_the_same_blocks():
    # 8 ranks as [2, 4]: the view's one axis merges both. 9 elements: blocks of 2 over 8
    # merged ranks, but 5 then 2 nested: the same rank holds different elements.
    head = "dist.mesh @hw shape = [2, 4]\ndist.mesh @flat shape = [8] view @hw [[0, 1]]\n"
    for size, ok in ((16, True), (9, False)):
        a, b = T([size], pl="sliced<0>", mesh="flat"), T([size], pl="sliced<0>, sliced<0>", mesh="hw")
        src = head + f"""
func.func @f(%x: {a}) -> {b} {{
  %y = dist.remesh %x : {a} -> {b}
  func.return %y : {b}
}}"""
        if ok:
            parse_module(src)
        else:
            with pytest.raises(Exception, match=r"rank 2 holds elements 4..6 of dim 0 on @flat but 4..5 on @hw"):
                parse_module(src)


def test_empty_blocks_hold_nothing_and_collect_back():
    src = one_op(T([2], pl="sliced<0>"), T([2]), "coll.all_gather %x")
    x = rand(2)
    ex = run_function(src, "f", {"x": x}, 5)
    np.testing.assert_array_equal(ex.outputs[0], x)
    assert ex.allocated_bytes["x"] == [4, 4, 0, 0, 0]
    with pytest.raises(ExecutionError, match="index 11 is out of range"):
        bad = WORLD + f"""
func.func @f(%t: {T([11, 2], pl='sliced<0>')}, %i: {T([1, 1], 'i32')}) -> {T([1, 2], pl='local')} {{
  %e = dist.embedding_bag %t, %i mode sum : ({T([11, 2], pl='sliced<0>')}, {T([1, 1], 'i32')}) -> {T([1, 2], pl='local')}
  func.return %e : {T([1, 2], pl='local')}
}}"""
        interpret(bad, "f", {"t": rand(11, 2), "i": np.array([[11]], np.int32)}, 4)
