// RUN: distir-opt %s -p form-collectives | filecheck %s

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 4]

// CHECK-LABEL: func.func @all_reduce
// CHECK:         %[[Y:.*]] = coll.all_reduce max %x : {{.*}}[local]> -> {{.*}}[replicated]>
// CHECK-NEXT:    func.return %[[Y]]
func.func @all_reduce(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %r = dist.reduce max %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %y = dist.repl %r : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// Two axes: the reductions and the slices on the same set of axes; the slicing order
// gives the collective's axes.
// CHECK-LABEL: func.func @reduce_scatter_two_axes
// CHECK:         coll.reduce_scatter sum %x dim 0 axes [1, 0] : {{.*}}[local, local]> -> {{.*}}[sliced<0, 1>, sliced<0, 0>]>
func.func @reduce_scatter_two_axes(%x: !dist.tensor<64xf32, @grid, [local, local]>) -> !dist.tensor<64xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> {
  %a = dist.reduce sum %x axis 1 : !dist.tensor<64xf32, @grid, [local, local]> -> !dist.tensor<64xf32, @grid, [local, unplaced]>
  %b = dist.reduce sum %a : !dist.tensor<64xf32, @grid, [local, unplaced]> -> !dist.tensor<64xf32, @grid, [unplaced, unplaced]>
  %c = dist.slice %b dim 0 axis 1 : !dist.tensor<64xf32, @grid, [unplaced, unplaced]> -> !dist.tensor<64xf32, @grid, [unplaced, sliced<0>]>
  %d = dist.slice %c dim 0 : !dist.tensor<64xf32, @grid, [unplaced, sliced<0>]> -> !dist.tensor<64xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  func.return %d : !dist.tensor<64xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
}

// A reduction over axis 0 followed by an all-reduce pair on axis 1 only.
// CHECK-LABEL: func.func @partial_chain
// CHECK:         %[[A:.*]] = dist.reduce sum %x : {{.*}}[local, local]> -> {{.*}}[unplaced, local]>
// CHECK-NEXT:    coll.all_reduce sum %[[A]] axes [1] : {{.*}}[unplaced, local]> -> {{.*}}[unplaced, replicated]>
func.func @partial_chain(%x: !dist.tensor<64xf32, @grid, [local, local]>) -> !dist.tensor<64xf32, @grid, [unplaced, replicated]> {
  %a = dist.reduce sum %x : !dist.tensor<64xf32, @grid, [local, local]> -> !dist.tensor<64xf32, @grid, [unplaced, local]>
  %b = dist.reduce sum %a axis 1 : !dist.tensor<64xf32, @grid, [unplaced, local]> -> !dist.tensor<64xf32, @grid, [unplaced, unplaced]>
  %c = dist.repl %b axis 1 : !dist.tensor<64xf32, @grid, [unplaced, unplaced]> -> !dist.tensor<64xf32, @grid, [unplaced, replicated]>
  func.return %c : !dist.tensor<64xf32, @grid, [unplaced, replicated]>
}

// CHECK-LABEL: func.func @gather_broadcast_send_all_to_all
// CHECK:         %[[G:.*]] = coll.all_gather %x :
// CHECK:         %[[B:.*]] = coll.broadcast %y :
// CHECK:         %[[S:.*]] = coll.send %y to 3 :
// CHECK:         %[[T:.*]] = coll.all_to_all %x dim 1 :
// CHECK:         func.return %[[G]], %[[B]], %[[S]], %[[T]]
func.func @gather_broadcast_send_all_to_all(%x: !dist.tensor<64x8xf32, @world, [sliced<0>]>, %y: !dist.tensor<64x8xf32, @world, [at<2>]>) -> (!dist.tensor<64x8xf32, @world, [replicated]>, !dist.tensor<64x8xf32, @world, [replicated]>, !dist.tensor<64x8xf32, @world, [at<3>]>, !dist.tensor<64x8xf32, @world, [sliced<1>]>) {
  %j = dist.join %x : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %g = dist.repl %j : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  %l = dist.load %y : !dist.tensor<64x8xf32, @world, [at<2>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %b = dist.repl %l : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  %l2 = dist.load %y : !dist.tensor<64x8xf32, @world, [at<2>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %s = dist.store %l2 rank 3 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [at<3>]>
  %j2 = dist.join %x : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %t = dist.slice %j2 dim 1 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  func.return %g, %b, %s, %t : !dist.tensor<64x8xf32, @world, [replicated]>, !dist.tensor<64x8xf32, @world, [replicated]>, !dist.tensor<64x8xf32, @world, [at<3>]>, !dist.tensor<64x8xf32, @world, [sliced<1>]>
}

// slice(drop(x)) is a take_slice.
// CHECK-LABEL: func.func @take_slice
// CHECK:         %[[T:.*]] = dist.take_slice %x dim 0 : {{.*}}[replicated]> -> {{.*}}[sliced<0>]>
// CHECK-NEXT:    func.return %[[T]]
func.func @take_slice(%x: !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  %d = dist.drop %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %s = dist.slice %d dim 0 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return %s : !dist.tensor<64xf32, @world, [sliced<0>]>
}

// An intermediate value with another use stops the chain.
// CHECK-LABEL: func.func @shared_reduction_stays
// CHECK:         dist.reduce sum %x
// CHECK-NEXT:    dist.repl
// CHECK-NOT:     coll.all_reduce
func.func @shared_reduction_stays(%x: !dist.tensor<64xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [unplaced]>) {
  %r = dist.reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %y = dist.repl %r : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y, %r : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [unplaced]>
}

// A map between the reduction and the replication: a fused all-reduce, the map running
// on slices; its other operands are placed by the primitive the map crossed.
// CHECK-LABEL: func.func @fused_all_reduce
// CHECK:         %[[Y:.*]] = coll.fused_all_reduce sum %x dim 0 : {{.*}}[local]> -> {{.*}}[replicated]> {
// CHECK-NEXT:    ^{{.*}}(%[[ARG:.*]]: {{.*}}[sliced<0>]>):
// CHECK-NEXT:      %[[B:.*]] = dist.repl %b : {{.*}}<8xf32, @world, [unplaced]> -> {{.*}}[replicated]>
// CHECK-NEXT:      %[[C:.*]] = dist.slice %c dim 0 :
// CHECK-NEXT:      %[[M:.*]] = dist.map(%[[ARG]], %[[B]], %[[C]])
// CHECK:           coll.yield %[[M]]
// CHECK:         func.return %[[Y]]
func.func @fused_all_reduce(%x: !dist.tensor<64x8xf32, @world, [local]>, %b: !dist.tensor<8xf32, @world, [unplaced]>, %c: !dist.tensor<64x8xf32, @world, [unplaced]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  %r = dist.reduce sum %x : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %m = dist.map(%r, %b, %c) : (!dist.tensor<64x8xf32, @world, [unplaced]>, !dist.tensor<8xf32, @world, [unplaced]>, !dist.tensor<64x8xf32, @world, [unplaced]>) -> !dist.tensor<64x8xf32, @world, [unplaced]> {
  ^bb0(%p: f32, %q: f32, %s: f32):
    %z = arith.addf %p, %q : f32
    %w = arith.mulf %z, %s : f32
    dist.yield %w : f32
  }
  %y = dist.repl %m : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64x8xf32, @world, [replicated]>
}

// Map between a reduction and a slice: a fused reduce-scatter.
// CHECK-LABEL: func.func @fused_reduce_scatter
// CHECK:         coll.fused_reduce_scatter sum %x dim 1 : {{.*}}[local]> -> {{.*}}[sliced<1>]> {
// CHECK:           dist.map
// CHECK:           coll.yield
func.func @fused_reduce_scatter(%x: !dist.tensor<64x8xf32, @world, [local]>, %s: f32) -> !dist.tensor<64x8xf32, @world, [sliced<1>]> {
  %r = dist.reduce sum %x : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %m = dist.map(%r, %s) : (!dist.tensor<64x8xf32, @world, [unplaced]>, f32) -> !dist.tensor<64x8xf32, @world, [unplaced]> {
  ^bb0(%p: f32, %q: f32):
    %w = arith.mulf %p, %q : f32
    dist.yield %w : f32
  }
  %y = dist.slice %m dim 1 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  func.return %y : !dist.tensor<64x8xf32, @world, [sliced<1>]>
}

// Map between a join and a replication: a fused all-gather on this rank's slice.
// CHECK-LABEL: func.func @fused_all_gather
// CHECK:         coll.fused_all_gather %x : {{.*}}[sliced<0>]> -> {{.*}}[replicated]> {
// CHECK:           dist.map
func.func @fused_all_gather(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %s: f32) -> !dist.tensor<64xf32, @world, [replicated]> {
  %j = dist.join %x : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %m = dist.map(%j, %s) : (!dist.tensor<64xf32, @world, [unplaced]>, f32) -> !dist.tensor<64xf32, @world, [unplaced]> {
  ^bb0(%p: f32, %q: f32):
    %w = arith.mulf %p, %q : f32
    dist.yield %w : f32
  }
  %y = dist.repl %m : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// Map between a reduction and a store: a fused reduce, the map running on the root.
// CHECK-LABEL: func.func @fused_reduce
// CHECK:         coll.fused_reduce sum %x root 1 : {{.*}}[local]> -> {{.*}}[at<1>]> {
// CHECK:           dist.store %r2 rank 1 :
// CHECK:           dist.map
func.func @fused_reduce(%x: !dist.tensor<64xf32, @world, [local]>, %r2: !dist.tensor<64xf32, @world, [unplaced]>) -> !dist.tensor<64xf32, @world, [at<1>]> {
  %r = dist.reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %m = dist.map(%r, %r2) : (!dist.tensor<64xf32, @world, [unplaced]>, !dist.tensor<64xf32, @world, [unplaced]>) -> !dist.tensor<64xf32, @world, [unplaced]> {
  ^bb0(%p: f32, %q: f32):
    %w = arith.subf %p, %q : f32
    dist.yield %w : f32
  }
  %y = dist.store %m rank 1 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [at<1>]>
  func.return %y : !dist.tensor<64xf32, @world, [at<1>]>
}

// No dim of 13x3 that 4 ranks divide: the fused all-reduce slices the rows (4, 4, 4, 1),
// the dim with the least padding.
// CHECK-LABEL: func.func @uneven_reduce_map_repl
// CHECK:         coll.fused_all_reduce sum %x dim 0 : !dist.tensor<13x3xf32, @world, [local]> -> !dist.tensor<13x3xf32, @world, [replicated]>
// CHECK-NEXT:    ^bb0(%{{.*}}: !dist.tensor<13x3xf32, @world, [sliced<0>]>):
func.func @uneven_reduce_map_repl(%x: !dist.tensor<13x3xf32, @world, [local]>) -> !dist.tensor<13x3xf32, @world, [replicated]> {
  %r = dist.reduce sum %x : !dist.tensor<13x3xf32, @world, [local]> -> !dist.tensor<13x3xf32, @world, [unplaced]>
  %m = dist.map(%r) : (!dist.tensor<13x3xf32, @world, [unplaced]>) -> !dist.tensor<13x3xf32, @world, [unplaced]> {
  ^bb0(%e: f32):
    %f = arith.mulf %e, %e : f32
    dist.yield %f : f32
  }
  %p = dist.repl %m : !dist.tensor<13x3xf32, @world, [unplaced]> -> !dist.tensor<13x3xf32, @world, [replicated]>
  func.return %p : !dist.tensor<13x3xf32, @world, [replicated]>
}

// A fused all-reduce over two axes whose map reads a replicated value dropped on both:
// the region takes that value's slices (take_slice per axis), no unplaced value enters
// it and no drop is left outside (issue 27's differential test: a slice of an unplaced
// value in the region crashed the interpreter and the local runtime computed it wrong).
// CHECK-LABEL: func.func @dropped_operand_of_a_fused_all_reduce
// CHECK-NOT:     dist.drop
// CHECK:         coll.fused_all_reduce sum %g dim 0 axes [0, 1]
// CHECK:           %[[W0:.*]] = dist.take_slice %w dim 0 :
// CHECK-NEXT:      %[[W1:.*]] = dist.take_slice %[[W0]] dim 0 axis 1 :
// CHECK-NEXT:      dist.map(%[[W1]], %{{.*}})
// CHECK-NOT:     dist.slice
func.func @dropped_operand_of_a_fused_all_reduce(%g: !dist.tensor<8x4xf32, @grid, [local, local]>, %w: !dist.tensor<8x4xf32, @grid, [replicated, replicated]>) -> !dist.tensor<8x4xf32, @grid, [replicated, replicated]> {
  %r0 = dist.reduce sum %g : !dist.tensor<8x4xf32, @grid, [local, local]> -> !dist.tensor<8x4xf32, @grid, [unplaced, local]>
  %r = dist.reduce sum %r0 axis 1 : !dist.tensor<8x4xf32, @grid, [unplaced, local]> -> !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>
  %w1 = dist.drop %w axis 1 : !dist.tensor<8x4xf32, @grid, [replicated, replicated]> -> !dist.tensor<8x4xf32, @grid, [replicated, unplaced]>
  %w0 = dist.drop %w1 : !dist.tensor<8x4xf32, @grid, [replicated, unplaced]> -> !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>
  %m = dist.map(%w0, %r) : (!dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>, !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]>) -> !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]> {
  ^bb0(%a: f32, %b: f32):
    %d = arith.subf %a, %b : f32
    dist.yield %d : f32
  }
  %y0 = dist.repl %m : !dist.tensor<8x4xf32, @grid, [unplaced, unplaced]> -> !dist.tensor<8x4xf32, @grid, [replicated, unplaced]>
  %y = dist.repl %y0 axis 1 : !dist.tensor<8x4xf32, @grid, [replicated, unplaced]> -> !dist.tensor<8x4xf32, @grid, [replicated, replicated]>
  func.return %y : !dist.tensor<8x4xf32, @grid, [replicated, replicated]>
}
