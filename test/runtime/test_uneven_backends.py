"""Programs whose sliced dims the ranks do not divide (blocks of ceil(s/n), the last
ranks holding fewer elements or none) on the lowered backends: ``local`` on 1, 3, 5 and 8
ranks (2, 6 and 10 for the 2-D mesh) and ``mpi`` on 3 and 4 (one batched ``mpiexec`` job per rank count),
each against the reference interpreter. Together they cover every way the lowering lays
such blocks out (``lowering/padding.py``): padded buffers for reduce-scatter,
all-gather and all-to-all, the fused all-reduce computed in place into a padded
argument (zero-copy on ``local``), the rank's part of a padded block for a contracted
matmul dim, an embedding's rows and reductions, random numbers and iota at the rank's
offset, and nested slicing whose outer blocks differ (``rt.pad_blocks``)."""

from __future__ import annotations

import pytest
from support.runs import run_mpi_batch

from distir.runtime import equivalent

PROGRAMS = {
    "ag": """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<7x5xf32, @world, [sliced<0>]>) -> (!dist.tensor<7x5xf32, @world, [replicated]>, !dist.tensor<7x5xf32, @world, [sliced<1>]>) {
  %g = coll.all_gather %x : !dist.tensor<7x5xf32, @world, [sliced<0>]> -> !dist.tensor<7x5xf32, @world, [replicated]>
  %a = coll.all_to_all %x dim 1 : !dist.tensor<7x5xf32, @world, [sliced<0>]> -> !dist.tensor<7x5xf32, @world, [sliced<1>]>
  func.return %g, %a : !dist.tensor<7x5xf32, @world, [replicated]>, !dist.tensor<7x5xf32, @world, [sliced<1>]>
}
""",
    "rs": """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<13x3xf32, @world, [local]>, %y: !dist.tensor<3x13xf32, @world, [local]>) -> (!dist.tensor<13x3xf32, @world, [sliced<0>]>, !dist.tensor<3x13xf32, @world, [replicated]>) {
  %r = coll.reduce_scatter sum %x dim 0 : !dist.tensor<13x3xf32, @world, [local]> -> !dist.tensor<13x3xf32, @world, [sliced<0>]>
  %s = coll.reduce_scatter sum %y dim 1 : !dist.tensor<3x13xf32, @world, [local]> -> !dist.tensor<3x13xf32, @world, [sliced<1>]>
  %t = coll.all_gather %s : !dist.tensor<3x13xf32, @world, [sliced<1>]> -> !dist.tensor<3x13xf32, @world, [replicated]>
  func.return %r, %t : !dist.tensor<13x3xf32, @world, [sliced<0>]>, !dist.tensor<3x13xf32, @world, [replicated]>
}
""",
    "ops": """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<3x13xf32, @world, [sliced<1>]>, %w: !dist.tensor<13x5xf32, @world, [sliced<0>]>, %t: !dist.tensor<11x4xf32, @world, [sliced<0>]>, %i: !dist.tensor<6x2xi32, @world, [replicated]>, %z: !dist.tensor<13x4xf32, @world, [sliced<0>]>) -> (!dist.tensor<3x5xf32, @world, [replicated]>, !dist.tensor<6x4xf32, @world, [replicated]>, !dist.tensor<13x4xf32, @world, [replicated]>, !dist.tensor<13x4xi32, @world, [replicated]>, !dist.tensor<4xf32, @world, [replicated]>, !dist.tensor<4xf32, @world, [replicated]>) {
  %p = dist.matmul %x, %w : (!dist.tensor<3x13xf32, @world, [sliced<1>]>, !dist.tensor<13x5xf32, @world, [sliced<0>]>) -> !dist.tensor<3x5xf32, @world, [local]>
  %s = coll.all_reduce sum %p : !dist.tensor<3x5xf32, @world, [local]> -> !dist.tensor<3x5xf32, @world, [replicated]>
  %e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<11x4xf32, @world, [sliced<0>]>, !dist.tensor<6x2xi32, @world, [replicated]>) -> !dist.tensor<6x4xf32, @world, [local]>
  %es = coll.all_reduce sum %e : !dist.tensor<6x4xf32, @world, [local]> -> !dist.tensor<6x4xf32, @world, [replicated]>
  %d = dist.dropout %z p 0.25 seed 3 : !dist.tensor<13x4xf32, @world, [sliced<0>]> -> !dist.tensor<13x4xf32, @world, [sliced<0>]>
  %dg = coll.all_gather %d : !dist.tensor<13x4xf32, @world, [sliced<0>]> -> !dist.tensor<13x4xf32, @world, [replicated]>
  %io = dist.iota dim 0 : () -> !dist.tensor<13x4xi32, @world, [sliced<0>]>
  %ig = coll.all_gather %io : !dist.tensor<13x4xi32, @world, [sliced<0>]> -> !dist.tensor<13x4xi32, @world, [replicated]>
  %mx = dist.reduce_tensor max %z dims [0] : !dist.tensor<13x4xf32, @world, [sliced<0>]> -> !dist.tensor<4xf32, @world, [local]>
  %mxr = coll.all_reduce max %mx : !dist.tensor<4xf32, @world, [local]> -> !dist.tensor<4xf32, @world, [replicated]>
  %av = dist.reduce_tensor avg %z dims [0] : !dist.tensor<13x4xf32, @world, [sliced<0>]> -> !dist.tensor<4xf32, @world, [local]>
  %avr = coll.all_reduce avg %av : !dist.tensor<4xf32, @world, [local]> -> !dist.tensor<4xf32, @world, [replicated]>
  func.return %s, %es, %dg, %ig, %mxr, %avr : !dist.tensor<3x5xf32, @world, [replicated]>, !dist.tensor<6x4xf32, @world, [replicated]>, !dist.tensor<13x4xf32, @world, [replicated]>, !dist.tensor<13x4xi32, @world, [replicated]>, !dist.tensor<4xf32, @world, [replicated]>, !dist.tensor<4xf32, @world, [replicated]>
}
""",
    "nested": """dist.mesh @g shape = [2, ?]
func.func @f(%x: !dist.tensor<11x2xf32, @g, [local, local]>) -> (!dist.tensor<11x2xf32, @g, [replicated, replicated]>, !dist.tensor<11x2xf32, @g, [sliced<0, 1>, sliced<0, 0>]>) {
  %a = coll.reduce_scatter sum %x dim 0 axes [1] : !dist.tensor<11x2xf32, @g, [local, local]> -> !dist.tensor<11x2xf32, @g, [local, sliced<0>]>
  %b = coll.reduce_scatter sum %a dim 0 axes [0] : !dist.tensor<11x2xf32, @g, [local, sliced<0>]> -> !dist.tensor<11x2xf32, @g, [sliced<0, 1>, sliced<0, 0>]>
  %c = coll.all_gather %b axes [0] : !dist.tensor<11x2xf32, @g, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<11x2xf32, @g, [replicated, sliced<0>]>
  %d = coll.all_gather %c axes [1] : !dist.tensor<11x2xf32, @g, [replicated, sliced<0>]> -> !dist.tensor<11x2xf32, @g, [replicated, replicated]>
  func.return %d, %b : !dist.tensor<11x2xf32, @g, [replicated, replicated]>, !dist.tensor<11x2xf32, @g, [sliced<0, 1>, sliced<0, 0>]>
}
""",
    "fused": """dist.mesh @world shape = [?]
func.func @f(%g: !dist.tensor<10xf32, @world, [local]>, %p: !dist.tensor<10xf32, @world, [replicated]>) -> (!dist.tensor<10xf32, @world, [replicated]> {dist.inplace = 1 : i64}) {
  %q, %k = coll.fused_all_reduce avg %g dim 0 gather [true, false] : !dist.tensor<10xf32, @world, [local]> -> (!dist.tensor<10xf32, @world, [replicated]>, !dist.tensor<10xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<10xf32, @world, [sliced<0>]>):
    %ps = dist.take_slice %p dim 0 : !dist.tensor<10xf32, @world, [replicated]> -> !dist.tensor<10xf32, @world, [sliced<0>]>
    %u = dist.map(%ps, %gs) : (!dist.tensor<10xf32, @world, [sliced<0>]>, !dist.tensor<10xf32, @world, [sliced<0>]>) -> !dist.tensor<10xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32, %b: f32):
      %c = arith.subf %a, %b : f32
      dist.yield %c : f32
    }
    coll.yield %u, %gs : !dist.tensor<10xf32, @world, [sliced<0>]>, !dist.tensor<10xf32, @world, [sliced<0>]>
  }
  func.return %q : !dist.tensor<10xf32, @world, [replicated]>
}
""",
    "multi_axis": """dist.mesh @grid shape = [2, 3]
func.func @f(%x: !dist.tensor<2x1xf32, @grid, [local, local]>, %y: !dist.tensor<11x2xf32, @grid, [local, local]>) -> (!dist.tensor<2x1xf32, @grid, [sliced<0>, sliced<0>]>, !dist.tensor<11x2xf32, @grid, [replicated, replicated]>) {
  %v = coll.reduce_scatter sum %x dim 0 axes [0, 1] : !dist.tensor<2x1xf32, @grid, [local, local]> -> !dist.tensor<2x1xf32, @grid, [sliced<0>, sliced<0>]>
  %w = coll.reduce_scatter sum %y dim 0 axes [1, 0] : !dist.tensor<11x2xf32, @grid, [local, local]> -> !dist.tensor<11x2xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  %g = coll.all_gather %w axes [1, 0] : !dist.tensor<11x2xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<11x2xf32, @grid, [replicated, replicated]>
  func.return %v, %g : !dist.tensor<2x1xf32, @grid, [sliced<0>, sliced<0>]>, !dist.tensor<11x2xf32, @grid, [replicated, replicated]>
}
""",
    "scatter_add": """dist.mesh @world shape = [?]
func.func @f(%i: !dist.tensor<6x2xi32, @world, [replicated]>, %u: !dist.tensor<6x4xf32, @world, [replicated]>) -> !dist.tensor<11x4xf32, @world, [replicated]> {
  %g = dist.scatter_add %i, %u : (!dist.tensor<6x2xi32, @world, [replicated]>, !dist.tensor<6x4xf32, @world, [replicated]>) -> !dist.tensor<11x4xf32, @world, [sliced<0>]>
  %r = coll.all_gather %g : !dist.tensor<11x4xf32, @world, [sliced<0>]> -> !dist.tensor<11x4xf32, @world, [replicated]>
  func.return %r : !dist.tensor<11x4xf32, @world, [replicated]>
}
""",
}
"""``all_gather``/``all_to_all`` of 7 x 5; reduce-scatters along dims 0 and 1 (13 of
them); matmul, embedding, dropout, iota and reductions over 13 and 11 rows; nested
reduce-scatters and all-gathers of 11 over a [2, n/2] mesh; a fused all-reduce updating
10 elements in place; an embedding gradient (scatter_add) into 11 rows sliced over
the ranks."""

LOCAL_RANKS = [1, 3, 5, 8]


def _ranks(name: str, ranks: list[int]) -> list[int]:
    """The nested program's mesh is [2, ?]: even rank counts (10: outer blocks 6 and 5
    over 5 inner ranks, blocks of 2 and 1 that the padded ones do not line up with); the
    multi-axis one's is [2, 3] (a reduce-scatter over both axes nests over them: 2
    elements give blocks 1, 0, 0, 1, 0, 0, not 1, 1, 0, 0, 0, 0)."""
    if name == "multi_axis":
        return [6]
    return [r for r in ranks if r % 2 == 0] if name == "nested" else ranks


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_local_equals_the_interpreter(name):
    text = PROGRAMS[name]
    for ranks in _ranks(name, [2, 6, 10] if name == "nested" else LOCAL_RANKS):
        got = equivalent(text, text, ranks, backend_a="interpret", backend_b="local", trials=1)
        assert got, f"{ranks} ranks: {got}"


@pytest.fixture(scope="module")
def mpi_report(tmp_path_factory):
    jobs = [
        {"id": f"{name}-{ranks}", "text": text, "func": None, "ranks": ranks, "seed": 5}
        for name, text in PROGRAMS.items()
        for ranks in _ranks(name, [3, 4])
    ]
    return run_mpi_batch(jobs, tmp_path_factory.mktemp("uneven-mpi"))


@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_mpi_equals_the_interpreter(mpi_report, name):
    for ranks in _ranks(name, [3, 4]):
        entry = mpi_report[f"{name}-{ranks}"]
        assert entry["ok"], entry["message"]
