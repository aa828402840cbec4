// RUN: distir-opt %s -p canonicalize | filecheck %s

dist.mesh @world shape = [4]
dist.mesh @one shape = [1]

// CHECK-LABEL: func.func @gather_of_scatter
// CHECK:         %[[Y:.*]] = coll.all_reduce avg %x : {{.*}}[local]> -> {{.*}}[replicated]>
// CHECK-NEXT:    func.return %[[Y]]
func.func @gather_of_scatter(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter avg %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %ag = coll.all_gather %rs : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %ag : !dist.tensor<64xf32, @world, [replicated]>
}

// CHECK-LABEL: func.func @broadcast_of_reduce
// CHECK:         %[[Y:.*]] = coll.all_reduce max %x
// CHECK-NEXT:    func.return %[[Y]]
func.func @broadcast_of_reduce(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %r = coll.reduce max %x root 2 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [at<2>]>
  %b = coll.broadcast %r : !dist.tensor<64xf32, @world, [at<2>]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %b : !dist.tensor<64xf32, @world, [replicated]>
}

// AR(x) + AR(y) -> AR(x + y): one collective instead of two.
// CHECK-LABEL: func.func @sum_of_all_reduces
// CHECK:         %[[P:.*]] = dist.map(%x, %y) : ({{.*}}[local]>, {{.*}}[local]>) -> {{.*}}[local]>
// CHECK:         %[[C:.*]] = coll.all_reduce sum %[[P]]
// CHECK-NEXT:    func.return %[[C]]
func.func @sum_of_all_reduces(%x: !dist.tensor<64xf32, @world, [local]>, %y: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %a = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %b = coll.all_reduce sum %y : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %c = dist.map(%a, %b) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32):
    %z = arith.subf %p, %q : f32
    dist.yield %z : f32
  }
  func.return %c : !dist.tensor<64xf32, @world, [replicated]>
}

// max is not linear: the two all-reduces stay.
// CHECK-LABEL: func.func @max_stays
// CHECK-COUNT-2: coll.all_reduce max
func.func @max_stays(%x: !dist.tensor<64xf32, @world, [local]>, %y: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %a = coll.all_reduce max %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %b = coll.all_reduce max %y : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %c = dist.map(%a, %b) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32):
    %z = arith.addf %p, %q : f32
    dist.yield %z : f32
  }
  func.return %c : !dist.tensor<64xf32, @world, [replicated]>
}

// CHECK-LABEL: func.func @slice_gather_pairs
// CHECK-NOT:     coll.all_gather
// CHECK-NOT:     dist.take_slice
// CHECK:         func.return %r, %s
func.func @slice_gather_pairs(%r: !dist.tensor<64xf32, @world, [replicated]>, %s: !dist.tensor<64xf32, @world, [sliced<0>]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %t = dist.take_slice %r dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %g = coll.all_gather %t : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %h = coll.all_gather %s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %u = dist.take_slice %h dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return %g, %u : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// On a group of one rank every collective is a copy: a chain of them is one collective
// for the whole placement change, or none; a send to the holder itself is the identity.
// CHECK-LABEL: func.func @unit_group
// CHECK:         %[[A:.*]] = coll.all_reduce sum %u : {{.*}}[local]> -> {{.*}}[replicated]>
// CHECK-NEXT:    func.return %[[A]], %v
func.func @unit_group(%u: !dist.tensor<64x8xf32, @one, [local]>, %v: !dist.tensor<64x8xf32, @one, [at<0>]>) -> (!dist.tensor<64x8xf32, @one, [replicated]>, !dist.tensor<64x8xf32, @one, [at<0>]>) {
  %a = coll.reduce_scatter sum %u dim 1 : !dist.tensor<64x8xf32, @one, [local]> -> !dist.tensor<64x8xf32, @one, [sliced<1>]>
  %b = coll.all_to_all %a dim 0 : !dist.tensor<64x8xf32, @one, [sliced<1>]> -> !dist.tensor<64x8xf32, @one, [sliced<0>]>
  %c = coll.all_gather %b : !dist.tensor<64x8xf32, @one, [sliced<0>]> -> !dist.tensor<64x8xf32, @one, [replicated]>
  %w = coll.send %v to 0 : !dist.tensor<64x8xf32, @one, [at<0>]> -> !dist.tensor<64x8xf32, @one, [at<0>]>
  func.return %c, %w : !dist.tensor<64x8xf32, @one, [replicated]>, !dist.tensor<64x8xf32, @one, [at<0>]>
}

// A fused all-reduce with an empty region is an all-reduce; dead collectives go.
// CHECK-LABEL: func.func @trivial_and_dead
// CHECK:         %[[Y:.*]] = coll.all_reduce sum %x
// CHECK-NEXT:    func.return %[[Y]]
func.func @trivial_and_dead(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.fused_all_reduce sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %a : !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  %dead = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %d2 = dist.dropout %dead p 0.5 seed 1 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// 13 over 4 ranks: the all-gather of a reduce-scatter is still the all-reduce.
// CHECK-LABEL: func.func @uneven_rs_ag
// CHECK-NEXT:    %[[AR:.*]] = coll.all_reduce avg %x : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [replicated]>
// CHECK-NEXT:    func.return %[[AR]]
func.func @uneven_rs_ag(%x: !dist.tensor<13xf32, @world, [local]>) -> !dist.tensor<13xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter avg %x dim 0 : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
  %ag = coll.all_gather %rs : !dist.tensor<13xf32, @world, [sliced<0>]> -> !dist.tensor<13xf32, @world, [replicated]>
  func.return %ag : !dist.tensor<13xf32, @world, [replicated]>
}
