// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=4},lower-overlap,lower-to-kernels,lower-collectives' | filecheck %s
// Blocks of different sizes (10 elements over 4 ranks: 3, 3, 3, 1): buffers hold the
// largest block; a value whose dim a collective cuts into one block per rank lives in a
// buffer padded to 4 x 3 = 12 elements and is its rt.prefix; NCCL counts are equal.

dist.mesh @world shape = [?]
dist.mesh @grid shape = [2, 2]

// The gradient and the in-place parameter are laid out padded in the signature; the
// fused all-reduce runs on the padded buffers exactly as on even ones.
// CHECK-LABEL: func.func @fused_update
// CHECK-SAME: (%[[G:.*]]: memref<12xf32>, %[[P:.*]]: memref<12xf32>) -> (memref<10xf32> {dist.inplace = 1 : i64})
// CHECK-SAME: rt.dist_type = (!dist.tensor<10xf32, @world, [local]>, !dist.tensor<10xf32, @world, [replicated]>) -> !dist.tensor<10xf32, @world, [replicated]>
// CHECK: %[[PV:.*]] = rt.prefix %[[P]] dim 0 : memref<12xf32> -> memref<10xf32>
// CHECK: rt.fused {
// CHECK-NEXT: nccl.reduce_scatter avg %[[G]], %[[RS:.*]], %{{.*}}, %{{.*}} count 3 : (memref<12xf32>, memref<3xf32>, !rt.comm, !rt.stream) -> ()
// CHECK-NEXT: %[[MINE:.*]] = rt.block %[[P]], %{{.*}} dim 0 count 4 : (memref<12xf32>, index) -> memref<3xf32>
// CHECK-NEXT: rt.launch @{{.*}}(%[[MINE]], %[[RS]], %[[MINE]], %{{.*}})
// CHECK-NEXT: nccl.all_gather %[[MINE]], %[[P]], %{{.*}}, %{{.*}} count 3 : (memref<3xf32>, memref<12xf32>, !rt.comm, !rt.stream) -> ()
// CHECK: func.return %[[PV]] : memref<10xf32>
func.func @fused_update(%g: !dist.tensor<10xf32, @world, [local]>, %p: !dist.tensor<10xf32, @world, [replicated]>) -> (!dist.tensor<10xf32, @world, [replicated]> {dist.inplace = 1 : i64}) {
  %q = coll.fused_all_reduce avg %g dim 0 : !dist.tensor<10xf32, @world, [local]> -> !dist.tensor<10xf32, @world, [replicated]> {
  ^bb0(%gs: !dist.tensor<10xf32, @world, [sliced<0>]>):
    %ps = dist.take_slice %p dim 0 : !dist.tensor<10xf32, @world, [replicated]> -> !dist.tensor<10xf32, @world, [sliced<0>]>
    %u = dist.map(%ps, %gs) : (!dist.tensor<10xf32, @world, [sliced<0>]>, !dist.tensor<10xf32, @world, [sliced<0>]>) -> !dist.tensor<10xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32, %b: f32):
      %c = arith.subf %a, %b : f32
      dist.yield %c : f32
    }
    coll.yield %u : !dist.tensor<10xf32, @world, [sliced<0>]>
  }
  func.return %q : !dist.tensor<10xf32, @world, [replicated]>
}

// A value the program computes is allocated padded where an all-gather writes it.
// CHECK-LABEL: func.func @gathered
// CHECK-SAME: (%[[X:.*]]: memref<3x2xf32>) -> memref<10x2xf32>
// CHECK: %[[Y:.*]] = rt.alloc : () -> memref<12x2xf32>
// CHECK-NEXT: %[[YV:.*]] = rt.prefix %[[Y]] dim 0 : memref<12x2xf32> -> memref<10x2xf32>
// CHECK: nccl.all_gather %[[X]], %[[Y]], %{{.*}}, %{{.*}} count 6 : (memref<3x2xf32>, memref<12x2xf32>, !rt.comm, !rt.stream) -> ()
// CHECK: func.return %[[YV]] : memref<10x2xf32>
func.func @gathered(%x: !dist.tensor<10x2xf32, @world, [sliced<0>]>) -> !dist.tensor<10x2xf32, @world, [replicated]> {
  %y = coll.all_gather %x : !dist.tensor<10x2xf32, @world, [sliced<0>]> -> !dist.tensor<10x2xf32, @world, [replicated]>
  func.return %y : !dist.tensor<10x2xf32, @world, [replicated]>
}

// A contracted dim: the matmul reads only the rank's part of its padded blocks.
// CHECK-LABEL: func.func @contracted
// CHECK: %{{.*}}, %[[LEN:.*]] = rt.span @world axes [0] size 10 : index, index
// CHECK: %[[A:.*]] = rt.prefix %{{.*}}, %[[LEN]] dim 1 : (memref<2x3xf32>, index) -> memref<2x?xf32>
// CHECK-NEXT: %[[B:.*]] = rt.prefix %{{.*}}, %[[LEN]] dim 0 : (memref<3x5xf32>, index) -> memref<?x5xf32>
// CHECK: rt.matmul %[[A]], %[[B]], %{{.*}}, %{{.*}} : (memref<2x?xf32>, memref<?x5xf32>, memref<2x5xf32>, !rt.stream) -> ()
func.func @contracted(%x: !dist.tensor<2x10xf32, @world, [sliced<1>]>, %w: !dist.tensor<10x5xf32, @world, [sliced<0>]>) -> !dist.tensor<2x5xf32, @world, [local]> {
  %p = dist.matmul %x, %w : (!dist.tensor<2x10xf32, @world, [sliced<1>]>, !dist.tensor<10x5xf32, @world, [sliced<0>]>) -> !dist.tensor<2x5xf32, @world, [local]>
  func.return %p : !dist.tensor<2x5xf32, @world, [local]>
}

// avg over a dim the ranks do not divide: each rank divides its sum by 10 / 4 = 2.5.
// CHECK-LABEL: func.func @mean
// CHECK: %[[V:.*]] = rt.prefix %{{.*}}, %{{.*}} dim 0 : (memref<3xf32>, index) -> memref<?xf32>
// CHECK: rt.reduce_tensor avg %[[V]], %{{.*}}, %{{.*}} dims [0] count 2.5
func.func @mean(%x: !dist.tensor<10xf32, @world, [sliced<0>]>) -> !dist.tensor<f32, @world, [local]> {
  %m = dist.reduce_tensor avg %x dims [0] : !dist.tensor<10xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
  func.return %m : !dist.tensor<f32, @world, [local]>
}

// 3 over [2, 2] nested: outer blocks 2 and 1, inner blocks 1, 1 and 1, 0: aligned, the
// inner all-gather writes the padded buffer of the outer block. 5 over [2, 2]: outer
// blocks 3 and 2, inner blocks 2, 1 and 1, 1: the second outer block's inner blocks do
// not start at multiples of 2, so the gathered blocks are moved by rt.unpad_blocks.
// CHECK-LABEL: func.func @nested
// CHECK: %{{.*}}, %[[OUTER:.*]] = rt.span @grid axes [0] size 5 : index, index
// CHECK: nccl.all_gather %{{.*}}, %[[T:.*]], %{{.*}}, %{{.*}} count 2 : (memref<2xf32>, memref<4xf32>, !rt.comm, !rt.stream) -> ()
// CHECK-NEXT: rt.unpad_blocks %[[T]], %{{.*}}, %[[OUTER]], %{{.*}} dim 0 counts [2] : (memref<4xf32>, memref<3xf32>, index, !rt.stream) -> ()
func.func @nested(%x: !dist.tensor<5xf32, @grid, [sliced<0>, sliced<0>]>) -> !dist.tensor<5xf32, @grid, [sliced<0>, replicated]> {
  %y = coll.all_gather %x axes [1] : !dist.tensor<5xf32, @grid, [sliced<0>, sliced<0>]> -> !dist.tensor<5xf32, @grid, [sliced<0>, replicated]>
  func.return %y : !dist.tensor<5xf32, @grid, [sliced<0>, replicated]>
}

// A GEMM + AllReduce tile operator over 7 output columns (blocks of 2, 2, 2, 1): the
// weight's columns and the result are laid out padded (8), every tile is full; the
// contracted dim (13: 4, 4, 4, 1) is read as each rank's part.
// CHECK-LABEL: func.func @tiles
// CHECK-SAME: (%[[X:.*]]: memref<5x4xf32>, %[[W:.*]]: memref<4x8xf32>) -> memref<5x7xf32>
// CHECK: %[[XV:.*]] = rt.prefix %[[X]], %[[LEN:.*]] dim 1 : (memref<5x4xf32>, index) -> memref<5x?xf32>
// CHECK-NEXT: %[[WV:.*]] = rt.prefix %[[W]], %[[LEN]] dim 0 : (memref<4x8xf32>, index) -> memref<?x8xf32>
// CHECK: %[[Y:.*]] = rt.alloc : () -> memref<5x8xf32>
// CHECK: rt.matmul_all_reduce sum %[[XV]], %[[WV]], %[[Y]], %{{.*}} dim 1 tiles 2 order remote_first : (memref<5x?xf32>, memref<?x8xf32>, memref<5x8xf32>, memref<4x5x2xf32>,
func.func @tiles(%x: !dist.tensor<5x13xf32, @world, [sliced<1>]>, %w: !dist.tensor<13x7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<5x7xf32, @world, [replicated]> {
    %p = dist.matmul %x, %w : (!dist.tensor<5x13xf32, @world, [sliced<1>]>, !dist.tensor<13x7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [local]>
    %s = coll.all_reduce sum %p : !dist.tensor<5x7xf32, @world, [local]> -> !dist.tensor<5x7xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<5x7xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<5x7xf32, @world, [replicated]>
}

// The other tile operators, blocks padded the same way. GEMM + ReduceScatter of 13 rows
// (4, 4, 4, 1): the lhs rows are laid out padded (16) in the signature, the result is
// one padded block; each block of 4 rows in 2 tiles (3 do not divide it).
// CHECK-LABEL: func.func @tiles_reduce_scatter
// CHECK-SAME: (%[[X:.*]]: memref<16x3xf32>, %[[W:.*]]: memref<3x5xf32>) -> memref<4x5xf32>
// CHECK: %[[XV:.*]] = rt.prefix %[[X]], %[[LEN:.*]] dim 1 : (memref<16x3xf32>, index) -> memref<16x?xf32>
// CHECK-NEXT: %[[WV:.*]] = rt.prefix %[[W]], %[[LEN]] dim 0 : (memref<3x5xf32>, index) -> memref<?x5xf32>
// CHECK-NEXT: %[[R:.*]] = rt.alloc : () -> memref<4x5xf32>
// CHECK-NEXT: %[[RED:.*]] = rt.alloc : () -> memref<4x4x5xf32>
// CHECK-NEXT: rt.matmul_reduce_scatter sum %[[XV]], %[[WV]], %[[R]], %[[RED]], %{{.*}} dim 0 tiles 2 order remote_first
// CHECK-NOT: rt.copy
// CHECK: func.return %[[R]] : memref<4x5xf32>
func.func @tiles_reduce_scatter(%x: !dist.tensor<13x11xf32, @world, [sliced<1>]>, %w: !dist.tensor<11x5xf32, @world, [sliced<0>]>) -> !dist.tensor<13x5xf32, @world, [sliced<0>]> {
  %r = coll.overlap chunks 3 order remote_first granularity tile -> !dist.tensor<13x5xf32, @world, [sliced<0>]> {
    %p = dist.matmul %x, %w : (!dist.tensor<13x11xf32, @world, [sliced<1>]>, !dist.tensor<11x5xf32, @world, [sliced<0>]>) -> !dist.tensor<13x5xf32, @world, [local]>
    %s = coll.reduce_scatter sum %p dim 0 : !dist.tensor<13x5xf32, @world, [local]> -> !dist.tensor<13x5xf32, @world, [sliced<0>]>
    coll.yield %s : !dist.tensor<13x5xf32, @world, [sliced<0>]>
  }
  func.return %r : !dist.tensor<13x5xf32, @world, [sliced<0>]>
}

// Embedding + All-to-All of 7 tables (2, 2, 2, 1) and 10 bags (3, 3, 3, 1): the indices'
// bags are laid out padded (12) in the signature, the result's tables (the dim the
// all-to-all gathers) in a padded buffer (8) whose prefix is the value: no copy.
// CHECK-LABEL: func.func @tiles_embedding
// CHECK-SAME: (%[[T:.*]]: memref<2x9x4xf32>, %[[I:.*]]: memref<2x12x3xi32>) -> memref<7x3x4xf32>
// CHECK: %[[P:.*]] = rt.alloc : () -> memref<8x3x4xf32>
// CHECK-NEXT: %[[V:.*]] = rt.prefix %[[P]] dim 0 : memref<8x3x4xf32> -> memref<7x3x4xf32>
// CHECK: rt.embedding_all_to_all %[[T]], %[[I]], %{{.*}}, %[[P]], %{{.*}} dim 1 concat 0 tile_dim 0 tiles 2 order remote_first
// CHECK-NOT: rt.copy
// CHECK: func.return %[[V]] : memref<7x3x4xf32>
func.func @tiles_embedding(%t: !dist.tensor<7x9x4xf32, @world, [sliced<0>]>, %i: !dist.tensor<7x10x3xi32, @world, [sliced<0>]>) -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]> {
  %m = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]> {
    %e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<7x9x4xf32, @world, [sliced<0>]>, !dist.tensor<7x10x3xi32, @world, [sliced<0>]>) -> !dist.tensor<7x10x4xf32, @world, [sliced<0>]>
    %a = coll.all_to_all %e dim 1 : !dist.tensor<7x10x4xf32, @world, [sliced<0>]> -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]>
    coll.yield %a : !dist.tensor<7x10x4xf32, @world, [sliced<1>]>
  }
  func.return %m : !dist.tensor<7x10x4xf32, @world, [sliced<1>]>
}

// GEMM + All-to-All scattering 10 rows (3, 3, 3, 1) and gathering 11 columns (3, 3, 3,
// 2): the replicated lhs is laid out padded (12 rows), the result in 12 columns.
// CHECK-LABEL: func.func @tiles_columns
// CHECK-SAME: (%[[X:.*]]: memref<12x4xf32>, %[[W:.*]]: memref<4x3xf32>) -> memref<3x11xf32>
// CHECK: %[[P:.*]] = rt.alloc : () -> memref<3x12xf32>
// CHECK-NEXT: %[[V:.*]] = rt.prefix %[[P]] dim 1 : memref<3x12xf32> -> memref<3x11xf32>
// CHECK: rt.matmul_all_to_all %[[X]], %[[W]], %[[P]], %{{.*}} dim 0 concat 1 tiles 1 order natural
// CHECK-NOT: rt.copy
// CHECK: func.return %[[V]] : memref<3x11xf32>
func.func @tiles_columns(%x: !dist.tensor<10x4xf32, @world, [replicated]>, %w: !dist.tensor<4x11xf32, @world, [sliced<1>]>) -> !dist.tensor<10x11xf32, @world, [sliced<0>]> {
  %b = coll.overlap chunks 2 order natural granularity tile -> !dist.tensor<10x11xf32, @world, [sliced<0>]> {
    %q = dist.matmul %x, %w : (!dist.tensor<10x4xf32, @world, [replicated]>, !dist.tensor<4x11xf32, @world, [sliced<1>]>) -> !dist.tensor<10x11xf32, @world, [sliced<1>]>
    %c = coll.all_to_all %q dim 0 : !dist.tensor<10x11xf32, @world, [sliced<1>]> -> !dist.tensor<10x11xf32, @world, [sliced<0>]>
    coll.yield %c : !dist.tensor<10x11xf32, @world, [sliced<0>]>
  }
  func.return %b : !dist.tensor<10x11xf32, @world, [sliced<0>]>
}
