// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap' | filecheck %s
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives' | filecheck %s --check-prefix=LOW
// coll.overlap chains are cut into chunks: computation on stream 0, collectives on 1.

dist.mesh @world shape = [?]

// CHECK-LABEL: func.func @mm_ar
// CHECK: %[[K0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[X0:.*]] = rt.chunk %{{.*}}, %[[K0]] dim 0 count 2 : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, index) -> !dist.tensor<4x16xf32, @world, [sliced<1>]>
// CHECK-NEXT: %[[L0:.*]] = dist.matmul %[[X0]], %{{.*}} {rt.stream = 0 : i64}
// CHECK-NEXT: %[[S0:.*]] = coll.all_reduce sum %[[L0]] {rt.stream = 1 : i64} : !dist.tensor<4x8xf32, @world, [local]> -> !dist.tensor<4x8xf32, @world, [replicated]>
// CHECK-NEXT: %[[K1:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[X1:.*]] = rt.chunk %{{.*}}, %[[K1]] dim 0 count 2
// CHECK-NEXT: %[[L1:.*]] = dist.matmul %[[X1]], %{{.*}} {rt.stream = 0 : i64}
// CHECK-NEXT: %[[S1:.*]] = coll.all_reduce sum %[[L1]] {rt.stream = 1 : i64}
// CHECK-NEXT: %[[Y:.*]] = rt.assemble %[[S0]], %[[S1]] dim 0 : (!dist.tensor<4x8xf32, @world, [replicated]>, !dist.tensor<4x8xf32, @world, [replicated]>) -> !dist.tensor<8x8xf32, @world, [replicated]>
// CHECK-NEXT: func.return %[[Y]]

// Each chunk's all-reduce waits for its matmul through an event; the result is written
// straight into its block of the assembled buffer; stream 0 waits for stream 1 at the end.
// LOW-LABEL: func.func @mm_ar
// LOW: %[[S:.*]] = rt.stream 0 : !rt.stream
// LOW: rt.matmul %{{.*}}, %{{.*}}, %[[L0:.*]], %[[S]]
// LOW: %[[S1:.*]] = rt.stream 1 : !rt.stream
// LOW-NEXT: %[[E0:.*]] = rt.event_record %[[S]]
// LOW-NEXT: rt.stream_wait %[[S1]], %[[E0]]
// LOW: %[[Y:.*]] = rt.alloc : () -> memref<8x8xf32>
// LOW: %[[B0:.*]] = rt.block %[[Y]], %{{.*}} dim 0 count 2 : (memref<8x8xf32>, index) -> memref<4x8xf32>
// LOW: nccl.all_reduce sum %[[L0]], %[[B0]], %{{.*}}, %[[S1]] count 32
// LOW: rt.matmul %{{.*}}, %{{.*}}, %[[L1:.*]], %[[S]]
// LOW: rt.event_record %[[S]]
// LOW: nccl.all_reduce sum %[[L1]], %{{.*}}, %{{.*}}, %[[S1]] count 32
// LOW: %[[E:.*]] = rt.event_record %[[S1]]
// LOW-NEXT: rt.stream_wait %[[S]], %[[E]]
// LOW: rt.stream_sync %[[S]]
// LOW-NEXT: rt.stream_sync %[[S1]]
// LOW-NEXT: func.return %[[Y]]
func.func @mm_ar(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<8x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [replicated]>
}

// A reduce-scatter slices dim 0, so the chain is cut along dim 1.
// CHECK-LABEL: func.func @mm_rs
// CHECK: rt.chunk %{{.*}}, %{{.*}} dim 1 count 2
// CHECK: coll.reduce_scatter sum %{{.*}} dim 0 {rt.stream = 1 : i64} : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [sliced<0>]>
// CHECK: rt.assemble %{{.*}}, %{{.*}} dim 1
func.func @mm_rs(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [sliced<0>]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<8x8xf32, @world, [sliced<0>]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.reduce_scatter sum %l dim 0 : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [sliced<0>]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [sliced<0>]>
}

// Chunks that do not divide the blocks: the chain stays whole.
// CHECK-LABEL: func.func @indivisible
// CHECK: coll.overlap chunks 3
func.func @indivisible(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 3 -> !dist.tensor<8x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [replicated]>
}
