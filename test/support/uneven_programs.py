"""Small programs whose sliced dims the ranks do not divide, one per way the lowering
lays such blocks out (``lowering/padding.py``): ``test/runtime/test_uneven_backends.py``
runs them on ``local`` and ``mpi``, ``test_nccl_simulator.py`` on the simulated CUDA
device."""

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
    "nested_short": """dist.mesh @g shape = [3, ?]
func.func @f(%x: !dist.tensor<10x3xf32, @g, [sliced<0>, local]>) -> (!dist.tensor<10x3xf32, @g, [sliced<0, 0>, sliced<0, 1>]>, !dist.tensor<10x3xf32, @g, [sliced<0>, replicated]>, !dist.tensor<10x3xf32, @g, [sliced<0>, replicated]>) {
  %a = coll.reduce_scatter sum %x dim 0 axes [1] : !dist.tensor<10x3xf32, @g, [sliced<0>, local]> -> !dist.tensor<10x3xf32, @g, [sliced<0, 0>, sliced<0, 1>]>
  %b = coll.all_to_all %a dim 1 axes [1] : !dist.tensor<10x3xf32, @g, [sliced<0, 0>, sliced<0, 1>]> -> !dist.tensor<10x3xf32, @g, [sliced<0>, sliced<1>]>
  %c = coll.all_gather %b axes [1] : !dist.tensor<10x3xf32, @g, [sliced<0>, sliced<1>]> -> !dist.tensor<10x3xf32, @g, [sliced<0>, replicated]>
  %d = coll.all_gather %a axes [1] : !dist.tensor<10x3xf32, @g, [sliced<0, 0>, sliced<0, 1>]> -> !dist.tensor<10x3xf32, @g, [sliced<0>, replicated]>
  func.return %a, %c, %d : !dist.tensor<10x3xf32, @g, [sliced<0, 0>, sliced<0, 1>]>, !dist.tensor<10x3xf32, @g, [sliced<0>, replicated]>, !dist.tensor<10x3xf32, @g, [sliced<0>, replicated]>
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
    "tiles": """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<5x13xf32, @world, [sliced<1>]>, %w: !dist.tensor<13x7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<5x7xf32, @world, [replicated]> {
    %p = dist.matmul %x, %w : (!dist.tensor<5x13xf32, @world, [sliced<1>]>, !dist.tensor<13x7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [local]>
    %s = coll.all_reduce sum %p : !dist.tensor<5x7xf32, @world, [local]> -> !dist.tensor<5x7xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<5x7xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<5x7xf32, @world, [replicated]>
}
""",
    "scatter_add": """dist.mesh @world shape = [?]
func.func @f(%i: !dist.tensor<6x2xi32, @world, [replicated]>, %u: !dist.tensor<6x4xf32, @world, [replicated]>) -> !dist.tensor<11x4xf32, @world, [replicated]> {
  %g = dist.scatter_add %i, %u : (!dist.tensor<6x2xi32, @world, [replicated]>, !dist.tensor<6x4xf32, @world, [replicated]>) -> !dist.tensor<11x4xf32, @world, [sliced<0>]>
  %r = coll.all_gather %g : !dist.tensor<11x4xf32, @world, [sliced<0>]> -> !dist.tensor<11x4xf32, @world, [replicated]>
  func.return %r : !dist.tensor<11x4xf32, @world, [replicated]>
}
""",
    "tiles_rs": """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<13x11xf32, @world, [sliced<1>]>, %w: !dist.tensor<11x5xf32, @world, [sliced<0>]>) -> !dist.tensor<13x5xf32, @world, [sliced<0>]> {
  %r = coll.overlap chunks 3 order remote_first granularity tile -> !dist.tensor<13x5xf32, @world, [sliced<0>]> {
    %p = dist.matmul %x, %w : (!dist.tensor<13x11xf32, @world, [sliced<1>]>, !dist.tensor<11x5xf32, @world, [sliced<0>]>) -> !dist.tensor<13x5xf32, @world, [local]>
    %s = coll.reduce_scatter sum %p dim 0 : !dist.tensor<13x5xf32, @world, [local]> -> !dist.tensor<13x5xf32, @world, [sliced<0>]>
    coll.yield %s : !dist.tensor<13x5xf32, @world, [sliced<0>]>
  }
  func.return %r : !dist.tensor<13x5xf32, @world, [sliced<0>]>
}
""",
    "tiles_emb": """dist.mesh @world shape = [?]
func.func @f(%t: !dist.tensor<7x9x4xf32, @world, [sliced<0>]>, %i: !dist.tensor<7x10x3xi32, @world, [sliced<0>]>) -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]> {
  %m = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]> {
    %e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<7x9x4xf32, @world, [sliced<0>]>, !dist.tensor<7x10x3xi32, @world, [sliced<0>]>) -> !dist.tensor<7x10x4xf32, @world, [sliced<0>]>
    %a = coll.all_to_all %e dim 1 : !dist.tensor<7x10x4xf32, @world, [sliced<0>]> -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]>
    coll.yield %a : !dist.tensor<7x10x4xf32, @world, [sliced<1>]>
  }
  func.return %m : !dist.tensor<7x10x4xf32, @world, [sliced<1>]>
}
""",
    "tiles_moe": """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<7x10x4xf32, @world, [sliced<0>]>, %w: !dist.tensor<7x4x6xf32, @world, [sliced<0>]>) -> !dist.tensor<7x10x6xf32, @world, [sliced<1>]> {
  %b = coll.overlap chunks 3 order remote_first granularity tile -> !dist.tensor<7x10x6xf32, @world, [sliced<1>]> {
    %h = dist.matmul %x, %w : (!dist.tensor<7x10x4xf32, @world, [sliced<0>]>, !dist.tensor<7x4x6xf32, @world, [sliced<0>]>) -> !dist.tensor<7x10x6xf32, @world, [sliced<0>]>
    %a = dist.map(%h) : (!dist.tensor<7x10x6xf32, @world, [sliced<0>]>) -> !dist.tensor<7x10x6xf32, @world, [sliced<0>]> {
    ^bb0(%z: f32):
      %zero = arith.constant 0.0 : f32
      %r = arith.maximumf %z, %zero : f32
      dist.yield %r : f32
    }
    %c = coll.all_to_all %a dim 1 : !dist.tensor<7x10x6xf32, @world, [sliced<0>]> -> !dist.tensor<7x10x6xf32, @world, [sliced<1>]>
    coll.yield %c : !dist.tensor<7x10x6xf32, @world, [sliced<1>]>
  }
  func.return %b : !dist.tensor<7x10x6xf32, @world, [sliced<1>]>
}
""",
    "tiles_cols": """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<10x4xf32, @world, [replicated]>, %w: !dist.tensor<4x11xf32, @world, [sliced<1>]>) -> !dist.tensor<10x11xf32, @world, [sliced<0>]> {
  %b = coll.overlap chunks 2 order natural granularity tile -> !dist.tensor<10x11xf32, @world, [sliced<0>]> {
    %h = dist.matmul %x, %w : (!dist.tensor<10x4xf32, @world, [replicated]>, !dist.tensor<4x11xf32, @world, [sliced<1>]>) -> !dist.tensor<10x11xf32, @world, [sliced<1>]>
    %c = coll.all_to_all %h dim 0 : !dist.tensor<10x11xf32, @world, [sliced<1>]> -> !dist.tensor<10x11xf32, @world, [sliced<0>]>
    coll.yield %c : !dist.tensor<10x11xf32, @world, [sliced<0>]>
  }
  func.return %b : !dist.tensor<10x11xf32, @world, [sliced<0>]>
}
""",
}
"""``all_gather``/``all_to_all`` of 7 x 5; reduce-scatters along dims 0 and 1 (13 of
them); matmul, embedding, dropout, iota and reductions over 13 and 11 rows; nested
reduce-scatters and all-gathers of 11 over a [2, n/2] mesh; a fused all-reduce updating
10 elements in place; an embedding gradient (scatter_add) into 11 rows sliced over
the ranks; a GEMM + AllReduce tile operator (overlap granularity tile) contracting 13
and cutting 7 output columns over the ranks; the other tile operators with a ragged
last block (``fused_ops.tile_layout``): a GEMM + ReduceScatter of 13 rows in up to 3
tiles, an embedding + All-to-All of 7 tables (the dim it gathers) and 10 bags, an
expert GEMM + ReLU + All-to-All of 7 experts and 10 tokens, and a GEMM + All-to-All of
11 columns (gathered) and 10 rows (scattered) in natural order."""
