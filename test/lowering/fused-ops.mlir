// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives' | filecheck %s
// coll.overlap ... granularity tile: one fused computation-collective operator each,
// on the compute stream (0) with the communication stream (1).

dist.mesh @world shape = [?]

// GEMV + AllReduce: few rows and a large weight, so the tiles cut the output columns
// (each tile re-reads the small input); the owner's reduction buffer has one slot per
// rank; lower-overlap leaves the chain whole.
// CHECK-LABEL: func.func @gemv_all_reduce
// CHECK-DAG:   %[[C:.*]] = rt.comm @world axes [0] : !rt.comm
// CHECK-DAG:   %[[S:.*]] = rt.stream 0 : !rt.stream
// CHECK-DAG:   %[[S1:.*]] = rt.stream 1 : !rt.stream
// CHECK-DAG:   %[[Y:.*]] = rt.alloc : () -> memref<4x64xf32>
// CHECK-DAG:   %[[RED:.*]] = rt.alloc : () -> memref<2x4x32xf32>
// CHECK:       rt.matmul_all_reduce sum %x, %w, %[[Y]], %[[RED]], %[[C]], %[[S]], %[[S1]] dim 1 tiles 4 order remote_first : (memref<4x32xf32>, memref<32x64xf32>, memref<4x64xf32>, memref<2x4x32xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
// CHECK-NOT:   nccl.
// CHECK:       func.return %[[Y]]
func.func @gemv_all_reduce(%x: !dist.tensor<4x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x64xf32, @world, [sliced<0>]>) -> !dist.tensor<4x64xf32, @world, [replicated]> {
  %y = coll.overlap chunks 4 order remote_first granularity tile -> !dist.tensor<4x64xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<4x64xf32, @world, [sliced<1>]>, !dist.tensor<64x64xf32, @world, [sliced<0>]>) -> !dist.tensor<4x64xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<4x64xf32, @world, [local]> -> !dist.tensor<4x64xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<4x64xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<4x64xf32, @world, [replicated]>
}

// GEMM + AllReduce with many rows: the tiles cut the rows (each re-reads the weight);
// 3 tiles do not divide the 32 rows of a block, 2 do.
// CHECK-LABEL: func.func @gemm_all_reduce
// CHECK:       rt.matmul_all_reduce avg %{{.*}} dim 0 tiles 2 order natural : (memref<64x8xf32>, memref<8x8xf32>, memref<64x8xf32>, memref<2x32x8xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
func.func @gemm_all_reduce(%x: !dist.tensor<64x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 3 granularity tile -> !dist.tensor<64x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<64x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<64x8xf32, @world, [local]>
    %s = coll.all_reduce avg %l : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<64x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<64x8xf32, @world, [replicated]>
}

// GEMM + ReduceScatter: the tiles cut the reduce-scatter's dim; the output is the block.
// CHECK-LABEL: func.func @gemm_reduce_scatter
// CHECK:       rt.matmul_reduce_scatter sum %{{.*}} dim 0 tiles 4 order ring : (memref<16x16xf32>, memref<16x8xf32>, memref<8x8xf32>, memref<2x8x8xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
func.func @gemm_reduce_scatter(%x: !dist.tensor<16x32xf32, @world, [sliced<1>]>, %w: !dist.tensor<32x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
  %y = coll.overlap chunks 4 order ring granularity tile -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
    %l = dist.matmul %x, %w : (!dist.tensor<16x32xf32, @world, [sliced<1>]>, !dist.tensor<32x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [local]>
    %s = coll.reduce_scatter sum %l dim 0 : !dist.tensor<16x8xf32, @world, [local]> -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
    coll.yield %s : !dist.tensor<16x8xf32, @world, [sliced<0>]>
  }
  func.return %y : !dist.tensor<16x8xf32, @world, [sliced<0>]>
}

// GEMM + All-to-All (MoE combine): the activation becomes the epilogue, a tile-shaped
// copy of its kernel launched on each finished tile in place; the scalar operand is
// passed through. The tiles cut the experts (tile_dim 0): each expert's weights are
// read for all destinations back to back.
// CHECK-LABEL: func.func @gemm_all_to_all
// CHECK:       rt.matmul_all_to_all %x, %w, %[[O:.*]], %{{.*}}, %[[S:.*]], %{{.*}} dim 1 concat 0 tile_dim 0 tiles 2 order remote_first : (memref<4x16x8xf32>, memref<4x8x16xf32>, memref<8x8x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
// CHECK-NEXT:  ^bb0(%[[T:.*]]: memref<2x8x16xf32>):
// CHECK-NEXT:    rt.launch @[[K:.*]]_tile_2x8x16(%[[T]], %alpha, %[[T]], %[[S]]) : (memref<2x8x16xf32>, f32, memref<2x8x16xf32>, !rt.stream) -> ()
// CHECK-NEXT:  }
// CHECK:       func.return %[[O]]
func.func @gemm_all_to_all(%x: !dist.tensor<8x16x8xf32, @world, [sliced<0>]>, %w: !dist.tensor<8x8x16xf32, @world, [sliced<0>]>, %alpha: f32) -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]> {
  %y = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]> {
    %h = dist.matmul %x, %w : (!dist.tensor<8x16x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16x16xf32, @world, [sliced<0>]>
    %act = dist.map(%h, %alpha) : (!dist.tensor<8x16x16xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<8x16x16xf32, @world, [sliced<0>]> {
    ^bb0(%z: f32, %a: f32):
      %zero = arith.constant 0.0 : f32
      %r = arith.maximumf %z, %zero : f32
      %s = arith.mulf %r, %a : f32
      dist.yield %s : f32
    }
    %back = coll.all_to_all %act dim 1 : !dist.tensor<8x16x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
    coll.yield %back : !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
  }
  func.return %y : !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
}

// Embedding + All-to-All (DLRM): the table block's first row is 0 (tables are sliced,
// not their rows); the tiles cut the tables; the epilogue is empty.
// CHECK-LABEL: func.func @embedding_all_to_all
// CHECK:       %[[R0:.*]] = arith.constant 0 : index
// CHECK:       rt.embedding_all_to_all %t, %i, %[[R0]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} mode mean dim 1 concat 0 tile_dim 0 tiles 2 order remote_first : (memref<4x32x8xf32>, memref<4x16x4xi32>, index, memref<8x8x8xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
// CHECK-NEXT:  ^bb0(%{{.*}}: memref<2x8x8xf32>):
// CHECK-NEXT:  }
// The tile-shaped copy of the MoE activation's kernel (after the functions):
// CHECK:       rt.kernel @[[K]]_tile_2x8x16 shape [2, 8, 16] {
// CHECK-NEXT:  ^bb0(%{{.*}}: memref<2x8x16xf32>, %{{.*}}: f32, %{{.*}}: memref<2x8x16xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index):
func.func @embedding_all_to_all(%t: !dist.tensor<8x32x8xf32, @world, [sliced<0>]>, %i: !dist.tensor<8x16x4xi32, @world, [sliced<0>]>) -> !dist.tensor<8x16x8xf32, @world, [sliced<1>]> {
  %y = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<8x16x8xf32, @world, [sliced<1>]> {
    %e = dist.embedding_bag %t, %i mode mean : (!dist.tensor<8x32x8xf32, @world, [sliced<0>]>, !dist.tensor<8x16x4xi32, @world, [sliced<0>]>) -> !dist.tensor<8x16x8xf32, @world, [sliced<0>]>
    %m = coll.all_to_all %e dim 1 : !dist.tensor<8x16x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x16x8xf32, @world, [sliced<1>]>
    coll.yield %m : !dist.tensor<8x16x8xf32, @world, [sliced<1>]>
  }
  func.return %y : !dist.tensor<8x16x8xf32, @world, [sliced<1>]>
}
