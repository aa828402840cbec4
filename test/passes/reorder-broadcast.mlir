// RUN: distir-opt %s -p reorder-broadcast | filecheck %s
// RUN: not distir-opt %s -p 'reorder-broadcast{targets=nope}' 2>&1 | filecheck %s --check-prefix=NONE

// NONE: 'reorder-broadcast' pass: target %nope names no value (broadcast results here: %b)

dist.mesh @world shape = [4]

// The computation runs on the root (at<2>); the replicated operand is restricted to
// the root (drop then store: the root keeps its replica); the scalar is unchanged.
// CHECK-LABEL: func.func @on_root
// CHECK:         %[[D:.*]] = dist.drop %r : {{.*}}[replicated]> -> {{.*}}[unplaced]>
// CHECK-NEXT:    %[[S:.*]] = dist.store %[[D]] rank 2 : {{.*}}[unplaced]> -> {{.*}}[at<2>]>
// CHECK-NEXT:    %[[Y:.*]] = dist.map(%x, %[[S]], %s) : ({{.*}}[at<2>]>, {{.*}}[at<2>]>, f32) -> {{.*}}[at<2>]>
// CHECK:         %[[N:.*]] = dist.reduce_tensor sum %[[Y]] dims [0] : {{.*}}[at<2>]> -> {{.*}}<f32, @world, [at<2>]>
// CHECK-NEXT:    %[[B:.*]] = coll.broadcast %[[N]] : {{.*}}[at<2>]> -> {{.*}}[replicated]>
// CHECK-NEXT:    func.return %[[B]]
func.func @on_root(%x: !dist.tensor<64xf32, @world, [at<2>]>, %r: !dist.tensor<64xf32, @world, [replicated]>, %s: f32) -> !dist.tensor<f32, @world, [replicated]> {
  %b = coll.broadcast %x : !dist.tensor<64xf32, @world, [at<2>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %y = dist.map(%b, %r, %s) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, f32) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32, %t: f32):
    %a = arith.mulf %p, %q : f32
    %c = arith.addf %a, %t : f32
    dist.yield %c : f32
  }
  %n = dist.reduce_tensor sum %y dims [0] : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<f32, @world, [replicated]>
  func.return %n : !dist.tensor<f32, @world, [replicated]>
}

// 13x5 on 4 ranks: the map runs on the root, then the broadcast.
// CHECK-LABEL: func.func @uneven_broadcast_then_map
// CHECK-NEXT:    %[[MS:.*]] = dist.map(%x) : (!dist.tensor<13x5xf32, @world, [at<0>]>) -> !dist.tensor<13x5xf32, @world, [at<0>]>
// CHECK:         %[[M:.*]] = coll.broadcast %[[MS]] : !dist.tensor<13x5xf32, @world, [at<0>]> -> !dist.tensor<13x5xf32, @world, [replicated]>
func.func @uneven_broadcast_then_map(%x: !dist.tensor<13x5xf32, @world, [at<0>]>) -> !dist.tensor<13x5xf32, @world, [replicated]> {
  %b = coll.broadcast %x : !dist.tensor<13x5xf32, @world, [at<0>]> -> !dist.tensor<13x5xf32, @world, [replicated]>
  %m = dist.map(%b) : (!dist.tensor<13x5xf32, @world, [replicated]>) -> !dist.tensor<13x5xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %f = arith.mulf %e, %e : f32
    dist.yield %f : f32
  }
  func.return %m : !dist.tensor<13x5xf32, @world, [replicated]>
}
