// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives' | filecheck %s
// coll.overlap with a rank-dependent order (ring, remote_first): the matmul computes one
// block per step in that order on stream 0; the partial sums travel by grouped
// send/recv on stream 1 and are added there.

dist.mesh @world shape = [?]

// CHECK-LABEL: func.func @remote_first
// CHECK: %[[S:.*]] = rt.stream 0 : !rt.stream
// CHECK: %[[S1:.*]] = rt.stream 1 : !rt.stream
// CHECK: %[[O1:.*]] = rt.group_rank @world axes [0] shift 1 : index
// CHECK: %[[A1:.*]] = rt.block %{{.*}}, %[[O1]] dim 0 count 2 : (memref<8x8xf32>, index) -> memref<4x8xf32>
// CHECK-NEXT: rt.matmul %[[A1]], %{{.*}}, %[[P1:.*]], %[[S]]
// CHECK-NEXT: %[[E:.*]] = rt.event_record %[[S]]
// CHECK-NEXT: rt.stream_wait %[[S1]], %[[E]]
// CHECK: nccl.group_start
// CHECK-NEXT: nccl.send %[[P1]], %[[O1]], %[[C:.*]], %[[S1]] count 32
// CHECK-NEXT: nccl.recv %[[R1:.*]], %[[O1]], %[[C]], %[[S1]] count 32
// CHECK-NEXT: nccl.group_end
// CHECK: %[[ME:.*]] = rt.group_rank @world axes [0] : index
// CHECK: %[[A0:.*]] = rt.block %{{.*}}, %[[ME]] dim 0 count 2
// CHECK-NEXT: rt.matmul %[[A0]], %{{.*}}, %[[P0:.*]], %[[S]]
// CHECK: rt.launch @add_4x8_f32(%[[P0]], %[[R1]], %[[P0]], %[[S1]])
// CHECK: nccl.all_gather %[[P0]], %{{.*}}, %[[C]], %[[S1]] count 32
// CHECK: rt.kernel @add_4x8_f32 shape [4, 8]
func.func @remote_first(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 order remote_first -> !dist.tensor<8x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [replicated]>
}
