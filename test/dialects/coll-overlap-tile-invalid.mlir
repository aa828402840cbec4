// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// A coll.overlap with granularity tile must hold one fused computation-collective
// operator (coll.tile_chain_problem); each CHECK gives the exact diagnostic.

// CHECK: 'coll.overlap' op granularity tile: its producer must be dist.matmul or dist.embedding_bag, got 'coll.reduce_scatter'
dist.mesh @world shape = [4]
func.func @no_producer(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 granularity tile -> !dist.tensor<64xf32, @world, [replicated]> {
    %rs = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %ag = coll.all_gather %rs : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
    coll.yield %ag : !dist.tensor<64xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: 'coll.overlap' op granularity tile: 'coll.all_reduce' fuses only with a dist.matmul that feeds it directly
dist.mesh @world shape = [4]
func.func @map_before_all_reduce(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 granularity tile -> !dist.tensor<8x4xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4xf32, @world, [local]>
    %m = dist.map(%l) : (!dist.tensor<8x4xf32, @world, [local]>) -> !dist.tensor<8x4xf32, @world, [local]> {
    ^bb0(%a: f32):
      %b = arith.mulf %a, %a : f32
      dist.yield %b : f32
    }
    %s = coll.all_reduce sum %m : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x4xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x4xf32, @world, [replicated]>
}

// -----

// CHECK: 'coll.overlap' op granularity tile: the other operands of 'dist.map' must be scalars or 0-d tensors
dist.mesh @world shape = [4]
func.func @epilogue_with_tensor(%x: !dist.tensor<8x16xf32, @world, [sliced<0>]>, %w: !dist.tensor<16x8xf32, @world, [replicated]>, %b: !dist.tensor<8x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [sliced<1>]> {
  %y = coll.overlap chunks 2 granularity tile -> !dist.tensor<8x8xf32, @world, [sliced<1>]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<16x8xf32, @world, [replicated]>) -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
    %m = dist.map(%l, %b) : (!dist.tensor<8x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [sliced<0>]> {
    ^bb0(%p: f32, %q: f32):
      %r = arith.addf %p, %q : f32
      dist.yield %r : f32
    }
    %a = coll.all_to_all %m dim 1 : !dist.tensor<8x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x8xf32, @world, [sliced<1>]>
    coll.yield %a : !dist.tensor<8x8xf32, @world, [sliced<1>]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [sliced<1>]>
}

// -----

// CHECK: 'coll.overlap' op granularity tile: the collective must be coll.all_reduce, coll.reduce_scatter or coll.all_to_all, got 'coll.all_gather'
dist.mesh @world shape = [4]
func.func @matmul_all_gather(%x: !dist.tensor<8x16xf32, @world, [sliced<0>]>, %w: !dist.tensor<16x8xf32, @world, [replicated]>) -> !dist.tensor<8x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 granularity tile -> !dist.tensor<8x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<16x8xf32, @world, [replicated]>) -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
    %g = coll.all_gather %l : !dist.tensor<8x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x8xf32, @world, [replicated]>
    coll.yield %g : !dist.tensor<8x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [replicated]>
}
