// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=4},lower-overlap,lower-to-kernels,lower-collectives' | filecheck %s
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=64},lower-overlap,lower-to-kernels,lower-collectives' | filecheck %s --check-prefix=R64
// Blocks that are not contiguous (split along an inner dim) are packed side by side
// before a reduce-scatter and spread back after an all-gather by one rt.copy_blocks
// each, whatever the number of ranks: no copy per block.

dist.mesh @world shape = [?]

// CHECK-LABEL: func.func @strided
// CHECK-SAME: (%[[X:.*]]: memref<2x64x64xf32>, %[[V:.*]]: memref<2x64x64xf32>)
// CHECK: %[[P:.*]] = rt.alloc : () -> memref<4x2x16x64xf32>
// CHECK: rt.copy_blocks %[[X]], %[[P]], %[[S:.*]] from 1 to 0 count 4 : (memref<2x64x64xf32>, memref<4x2x16x64xf32>, !rt.stream) -> ()
// CHECK-NEXT: nccl.reduce_scatter sum %[[P]], %[[Y:.*]], %{{.*}}, %[[S]] count 2048
// CHECK: %[[G:.*]] = rt.alloc : () -> memref<4x2x16x64xf32>
// CHECK-NEXT: nccl.all_gather %[[Y]], %[[G]], %{{.*}}, %[[S]] count 2048
// CHECK-NEXT: rt.copy_blocks %[[G]], %[[Z:.*]], %[[S]] from 0 to 1 count 4 : (memref<4x2x16x64xf32>, memref<2x64x64xf32>, !rt.stream) -> ()
// CHECK: %[[Q:.*]] = rt.alloc : () -> memref<4x2x64x16xf32>
// CHECK: rt.copy_blocks %[[V]], %[[Q]], %[[S]] from 2 to 0 count 4
// CHECK-NEXT: nccl.reduce_scatter sum %[[Q]]
// CHECK-NOT: rt.copy
// CHECK: func.return
// R64-LABEL: func.func @strided
// R64: rt.copy_blocks %{{.*}}, %{{.*}}, %{{.*}} from 1 to 0 count 64 : (memref<2x64x64xf32>, memref<64x2x1x64xf32>, !rt.stream) -> ()
// R64-NEXT: nccl.reduce_scatter
// R64: nccl.all_gather
// R64-NEXT: rt.copy_blocks %{{.*}}, %{{.*}}, %{{.*}} from 0 to 1 count 64 : (memref<64x2x1x64xf32>, memref<2x64x64xf32>, !rt.stream) -> ()
// R64: rt.copy_blocks %{{.*}}, %{{.*}}, %{{.*}} from 2 to 0 count 64
// R64-NEXT: nccl.reduce_scatter
// R64-NOT: rt.copy
// R64: func.return
func.func @strided(%x: !dist.tensor<2x64x64xf32, @world, [local]>, %v: !dist.tensor<2x64x64xf32, @world, [local]>)
    -> (!dist.tensor<2x64x64xf32, @world, [sliced<1>]>, !dist.tensor<2x64x64xf32, @world, [replicated]>, !dist.tensor<2x64x64xf32, @world, [sliced<2>]>) {
  %y = coll.reduce_scatter sum %x dim 1 : !dist.tensor<2x64x64xf32, @world, [local]> -> !dist.tensor<2x64x64xf32, @world, [sliced<1>]>
  %z = coll.all_gather %y : !dist.tensor<2x64x64xf32, @world, [sliced<1>]> -> !dist.tensor<2x64x64xf32, @world, [replicated]>
  %w = coll.reduce_scatter sum %v dim 2 : !dist.tensor<2x64x64xf32, @world, [local]> -> !dist.tensor<2x64x64xf32, @world, [sliced<2>]>
  func.return %y, %z, %w : !dist.tensor<2x64x64xf32, @world, [sliced<1>]>, !dist.tensor<2x64x64xf32, @world, [replicated]>, !dist.tensor<2x64x64xf32, @world, [sliced<2>]>
}

// An overlapped matmul + reduce-scatter along dim 2, cut into 2 chunks along dim 0:
// each chunk's partial sums are packed by one copy on the collectives' stream.
// CHECK-LABEL: func.func @overlap_dim2
// CHECK: rt.matmul %{{.*}}, %{{.*}}, %[[C0:.*]], %[[S0:.*]] :
// CHECK: %[[P0:.*]] = rt.alloc : () -> memref<4x1x64x16xf32>
// CHECK-NEXT: rt.copy_blocks %[[C0]], %[[P0]], %[[S1:.*]] from 2 to 0 count 4 : (memref<1x64x64xf32>, memref<4x1x64x16xf32>, !rt.stream) -> ()
// CHECK-NEXT: nccl.reduce_scatter sum %[[P0]], %{{.*}}, %{{.*}}, %[[S1]] count 1024
// CHECK: rt.matmul %{{.*}}, %{{.*}}, %[[C1:.*]], %[[S0]] :
// CHECK: rt.copy_blocks %[[C1]], %[[P1:.*]], %[[S1]] from 2 to 0 count 4
// CHECK-NEXT: nccl.reduce_scatter sum %[[P1]]
// CHECK-NOT: rt.copy
// CHECK: func.return
// R64-LABEL: func.func @overlap_dim2
// R64-COUNT-2: rt.copy_blocks %{{.*}} from 2 to 0 count 64 : (memref<1x64x64xf32>, memref<64x1x64x1xf32>, !rt.stream) -> ()
// R64-NOT: rt.copy
// R64: func.return
func.func @overlap_dim2(%x: !dist.tensor<2x64x64xf32, @world, [sliced<2>]>, %w: !dist.tensor<64x64xf32, @world, [sliced<0>]>) -> !dist.tensor<2x64x64xf32, @world, [sliced<2>]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<2x64x64xf32, @world, [sliced<2>]> {
    %p = dist.matmul %x, %w : (!dist.tensor<2x64x64xf32, @world, [sliced<2>]>, !dist.tensor<64x64xf32, @world, [sliced<0>]>) -> !dist.tensor<2x64x64xf32, @world, [local]>
    %r = coll.reduce_scatter sum %p dim 2 : !dist.tensor<2x64x64xf32, @world, [local]> -> !dist.tensor<2x64x64xf32, @world, [sliced<2>]>
    coll.yield %r : !dist.tensor<2x64x64xf32, @world, [sliced<2>]>
  }
  func.return %y : !dist.tensor<2x64x64xf32, @world, [sliced<2>]>
}
