// RUN: distir-opt %s -p combine-collectives,lower-buckets | filecheck %s

dist.mesh @world shape = [2]

// AR-SGD over two tensors: one all_reduce of the packed gradients, then each map once
// over the packed buffers; the members are unpacked where they are returned.
// CHECK-LABEL: func.func @ar_sgd
// CHECK:         %[[G:.*]] = rt.pack %g0, %g1 : ({{.*}}) -> !dist.tensor<96xf32, @world, [local]>
// CHECK-NEXT:    %[[A:.*]] = coll.all_reduce avg %[[G]] : !dist.tensor<96xf32, @world, [local]> -> !dist.tensor<96xf32, @world, [replicated]>
// CHECK-NEXT:    %[[P:.*]] = rt.pack %p0, %p1 : ({{.*}}) -> !dist.tensor<96xf32, @world, [replicated]>
// CHECK-NEXT:    %[[U:.*]] = dist.map(%[[P]], %[[A]], %lr) : (!dist.tensor<96xf32, @world, [replicated]>, !dist.tensor<96xf32, @world, [replicated]>, f32) -> !dist.tensor<96xf32, @world, [replicated]>
// CHECK:         %[[U0:.*]], %[[U1:.*]] = rt.unpack %[[U]] : !dist.tensor<96xf32, @world, [replicated]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>)
// CHECK-NEXT:    func.return %[[U0]], %[[U1]]
func.func @ar_sgd(%g0: !dist.tensor<64xf32, @world, [local]>, %p0: !dist.tensor<64xf32, @world, [replicated]>,
                  %g1: !dist.tensor<8x4xf32, @world, [local]>, %p1: !dist.tensor<8x4xf32, @world, [replicated]>, %lr: f32)
    -> (!dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<8x4xf32, @world, [replicated]> {dist.inplace = 3 : i64}) {
  %a = coll.all_reduce avg %g0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %u = dist.map(%p0, %a, %lr) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, f32) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32, %l: f32):
    %s = arith.mulf %l, %y : f32
    %d = arith.subf %x, %s : f32
    dist.yield %d : f32
  }
  %b = coll.all_reduce avg %g1 : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [replicated]>
  %v = dist.map(%p1, %b, %lr) : (!dist.tensor<8x4xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>, f32) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32, %l: f32):
    %s = arith.mulf %l, %y : f32
    %d = arith.subf %x, %s : f32
    dist.yield %d : f32
  }
  func.return %u, %v : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>
}

// Maps that differ between the tensors are left per tensor (the all_reduce is still one).
// CHECK-LABEL: func.func @different_maps
// CHECK:         coll.all_reduce avg %{{.*}} : !dist.tensor<96xf32
// CHECK:         rt.unpack
// CHECK:         dist.map(%p0, %{{.*}}) : (!dist.tensor<64xf32
// CHECK:         dist.map(%p1, %{{.*}}) : (!dist.tensor<8x4xf32
func.func @different_maps(%g0: !dist.tensor<64xf32, @world, [local]>, %p0: !dist.tensor<64xf32, @world, [replicated]>,
                          %g1: !dist.tensor<8x4xf32, @world, [local]>, %p1: !dist.tensor<8x4xf32, @world, [replicated]>)
    -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) {
  %a = coll.all_reduce avg %g0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %u = dist.map(%p0, %a) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32):
    %d = arith.subf %x, %y : f32
    dist.yield %d : f32
  }
  %b = coll.all_reduce avg %g1 : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [replicated]>
  %v = dist.map(%p1, %b) : (!dist.tensor<8x4xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32):
    %d = arith.addf %x, %y : f32
    dist.yield %d : f32
  }
  func.return %u, %v : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>
}
