// RUN: distir-opt %s -p fuse-collectives | filecheck %s
// RUN: not distir-opt %s -p 'fuse-collectives{targets=bare}' 2>&1 | filecheck %s --check-prefix=NOTHING
// RUN: not distir-opt %s -p 'fuse-collectives{targets=z}' 2>&1 | filecheck %s --check-prefix=KIND

// NOTHING: 'fuse-collectives' pass: target %bare: cannot fuse 'coll.reduce_scatter' with computations: no computation reads its result
// KIND: 'fuse-collectives' pass: target %z: is not the result of a reduce_scatter, reduce, all_to_all, all_gather or broadcast

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 4] axes = ["pp", "tp"]

// CHECK-LABEL: func.func @reduce_scatter_then_map
// CHECK:         %[[Z:.*]] = coll.fused_reduce_scatter sum %x dim 0 : {{.*}}[local]> -> {{.*}}[sliced<0>]> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: {{.*}}[sliced<0>]>):
// CHECK-NEXT:      %[[M:.*]] = dist.map(%[[A]], %s)
// CHECK:           coll.yield %[[M]]
// CHECK:         func.return %[[Z]]
func.func @reduce_scatter_then_map(%x: !dist.tensor<64xf32, @world, [local]>, %s: f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  %y = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %z = dist.map(%y, %s) : (!dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    dist.yield %c : f32
  }
  func.return %z : !dist.tensor<64xf32, @world, [sliced<0>]>
}

// CHECK-LABEL: func.func @reduce_then_map
// CHECK:         coll.fused_reduce sum %x root 3 : {{.*}}[local]> -> {{.*}}[at<3>]> {
func.func @reduce_then_map(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [at<3>]> {
  %r = coll.reduce sum %x root 3 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [at<3>]>
  %z = dist.map(%r) : (!dist.tensor<64xf32, @world, [at<3>]>) -> !dist.tensor<64xf32, @world, [at<3>]> {
  ^bb0(%a: f32):
    %c = math.sqrt %a : f32
    dist.yield %c : f32
  }
  func.return %z : !dist.tensor<64xf32, @world, [at<3>]>
}

// CHECK-LABEL: func.func @all_to_all_then_cast
// CHECK:         coll.fused_all_to_all %x dim 1 : {{.*}}xf32, @world, [sliced<0>]> -> {{.*}}xf16, @world, [sliced<1>]> {
// CHECK:           dist.cast
func.func @all_to_all_then_cast(%x: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf16, @world, [sliced<1>]> {
  %t = coll.all_to_all %x dim 1 : !dist.tensor<16x8xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [sliced<1>]>
  %h = dist.cast %t : !dist.tensor<16x8xf32, @world, [sliced<1>]> -> !dist.tensor<16x8xf16, @world, [sliced<1>]>
  func.return %h : !dist.tensor<16x8xf16, @world, [sliced<1>]>
}

// Computations feeding only an AllGather: a fused all-gather on this rank's slice; the
// take_slice of the replicated operand moves in, the bias is read from outside.
// CHECK-LABEL: func.func @map_then_all_gather
// CHECK:         %[[G:.*]] = coll.fused_all_gather %x : {{.*}}[sliced<0>]> -> {{.*}}[replicated]> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: {{.*}}[sliced<0>]>):
// CHECK-NEXT:      %[[R:.*]] = dist.take_slice %r dim 0
// CHECK-NEXT:      %[[M:.*]] = dist.map(%[[A]], %[[R]], %b)
// CHECK:           coll.yield %[[M]]
// CHECK:         func.return %[[G]]
func.func @map_then_all_gather(%x: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %r: !dist.tensor<16x8xf32, @world, [replicated]>, %b: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [replicated]> {
  %r_s = dist.take_slice %r dim 0 : !dist.tensor<16x8xf32, @world, [replicated]> -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
  %m = dist.map(%x, %r_s, %b) : (!dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
  ^bb0(%p: f32, %q: f32, %t: f32):
    %c = arith.addf %p, %q : f32
    %d = arith.addf %c, %t : f32
    dist.yield %d : f32
  }
  %g = coll.all_gather %m : !dist.tensor<16x8xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [replicated]>
  func.return %g : !dist.tensor<16x8xf32, @world, [replicated]>
}

// CoCoNet's fused P2P + computation: the send starts the region of the fused all-gather,
// which gathers on the receiving stage.
// CHECK-LABEL: func.func @send_compute_gather
// CHECK:         %[[O:.*]] = coll.fused_all_gather %sum_rs axes [1] : {{.*}}[at<0>, sliced<0>]> -> {{.*}}[at<1>, replicated]> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: {{.*}}[at<0>, sliced<0>]>):
// CHECK-NEXT:      %[[S:.*]] = coll.send %[[A]] to 1 :
// CHECK-NEXT:      %[[D:.*]] = dist.dropout %[[S]] p 0.1 seed 7
// CHECK:           coll.yield %[[D]]
// CHECK:         func.return %[[O]]
func.func @send_compute_gather(%sum_rs: !dist.tensor<16x8xf16, @grid, [at<0>, sliced<0>]>) -> !dist.tensor<16x8xf16, @grid, [at<1>, replicated]> {
  %recv_s = coll.send %sum_rs to 1 : !dist.tensor<16x8xf16, @grid, [at<0>, sliced<0>]> -> !dist.tensor<16x8xf16, @grid, [at<1>, sliced<0>]>
  %drop_s = dist.dropout %recv_s p 0.1 seed 7 : !dist.tensor<16x8xf16, @grid, [at<1>, sliced<0>]> -> !dist.tensor<16x8xf16, @grid, [at<1>, sliced<0>]>
  %out = coll.all_gather %drop_s axes [1] : !dist.tensor<16x8xf16, @grid, [at<1>, sliced<0>]> -> !dist.tensor<16x8xf16, @grid, [at<1>, replicated]>
  func.return %out : !dist.tensor<16x8xf16, @grid, [at<1>, replicated]>
}

// A value computed for the AllGather and also returned stays outside.
// CHECK-LABEL: func.func @shared_value
// CHECK:         %[[M:.*]] = dist.map(%x)
// CHECK:         coll.all_gather %[[M]]
func.func @shared_value(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %v: !dist.tensor<64xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %m = dist.map(%x) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %c = math.exp %a : f32
    dist.yield %c : f32
  }
  %g = coll.all_gather %m : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %bare = coll.reduce_scatter sum %v dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return %g, %m, %bare : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// A map on the blocks of different sizes a reduce-scatter gives (13 over 4 ranks).
// CHECK-LABEL: func.func @uneven_rs_map
// CHECK:         %{{.*}} = coll.fused_reduce_scatter sum %g dim 0 : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
// CHECK-NEXT:    ^bb0(%[[RS:.*]]: !dist.tensor<13xf32, @world, [sliced<0>]>):
// CHECK-NEXT:      dist.map(%[[RS]])
func.func @uneven_rs_map(%g: !dist.tensor<13xf32, @world, [local]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  %rs = coll.reduce_scatter sum %g dim 0 : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
  %m = dist.map(%rs) : (!dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  ^bb0(%e: f32):
    %f = arith.mulf %e, %e : f32
    dist.yield %f : f32
  }
  func.return %m : !dist.tensor<13xf32, @world, [sliced<0>]>
}
