// RUN: distir-opt %s -p combine-collectives | filecheck %s
// RUN: distir-opt %s -p 'combine-collectives{bucket-bytes=256}' | filecheck %s --check-prefix=SMALL
// RUN: not distir-opt %s -p 'combine-collectives{bucket-bytes=0}' 2>&1 | filecheck %s --check-prefix=BAD

// BAD: 'combine-collectives' pass: bucket-bytes must be at least 1, got 0

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 4] axes = ["dp", "tp"]

// All-reduces of an AR-SGD step over two tensors: the second moves up to the first
// op reading the first's result, and both become one collective over both tensors.
// CHECK-LABEL: func.func @ar_step
// CHECK:         %[[A:.*]], %[[B:.*]] = coll.fused_all_reduce avg %g0, %g1 dim 0 : (!dist.tensor<64xf32, @world, [local]>, !dist.tensor<8x4xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) {
// CHECK-NEXT:    ^{{.*}}(%[[X:.*]]: !dist.tensor<64xf32, @world, [sliced<0>]>, %[[Y:.*]]: !dist.tensor<8x4xf32, @world, [sliced<0>]>):
// CHECK-NEXT:      coll.yield %[[X]], %[[Y]]
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[U:.*]] = dist.map(%p0, %[[A]], %lr)
// CHECK:         %[[V:.*]] = dist.map(%p1, %[[B]], %lr)
// CHECK-NOT:     coll.all_reduce
// SMALL-LABEL: func.func @ar_step
// SMALL:         coll.all_reduce avg %g0
// SMALL:         coll.all_reduce avg %g1
func.func @ar_step(%g0: !dist.tensor<64xf32, @world, [local]>, %p0: !dist.tensor<64xf32, @world, [replicated]>,
                   %g1: !dist.tensor<8x4xf32, @world, [local]>, %p1: !dist.tensor<8x4xf32, @world, [replicated]>, %lr: f32)
    -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) {
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

// A collective reading a value computed after the first use of an open bucket cannot
// move up to it; collectives of different kinds or reductions are not combined.
// CHECK-LABEL: func.func @late_operand
// CHECK:         %[[A:.*]] = coll.all_reduce sum %x
// CHECK:         dist.map(%[[A]])
// CHECK:         %[[W:.*]] = dist.map(%z)
// CHECK:         coll.all_reduce sum %[[W]]
// CHECK:         coll.all_reduce max %z
// CHECK:         coll.reduce_scatter sum %z dim 0
func.func @late_operand(%x: !dist.tensor<64xf32, @world, [local]>, %z: !dist.tensor<64xf32, @world, [local]>)
    -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %a = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %y = dist.map(%a) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %s = arith.mulf %e, %e : f32
    dist.yield %s : f32
  }
  %w = dist.map(%z) : (!dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [local]> {
  ^bb0(%e: f32):
    %s = arith.mulf %e, %e : f32
    dist.yield %s : f32
  }
  %b = coll.all_reduce sum %w : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %c = coll.all_reduce max %z : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %d = coll.reduce_scatter sum %z dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return %y, %b, %c, %d : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// Fused all-reduces (fuse(RS-Opt-AG) per tensor) combine into one: regions run one
// after the other, gather flags are concatenated.
// CHECK-LABEL: func.func @fused
// CHECK:         %{{.*}}, %{{.*}}, %{{.*}} = coll.fused_all_reduce avg %g0, %g1 dim 0 gather [true, false, true] :
// CHECK-NEXT:    ^{{.*}}(%[[S0:.*]]: {{.*}}, %[[S1:.*]]: {{.*}}):
// CHECK-NEXT:      %[[P0:.*]] = dist.take_slice %p0 dim 0
// CHECK-NEXT:      %[[N0:.*]] = dist.map(%[[P0]], %[[S0]])
// CHECK:           %[[P1:.*]] = dist.take_slice %p1 dim 0
// CHECK-NEXT:      %[[N1:.*]] = dist.map(%[[P1]], %[[S1]])
// CHECK:           coll.yield %[[N0]], %[[S0]], %[[N1]] :
// CHECK-NOT:     coll.fused_all_reduce
func.func @fused(%g0: !dist.tensor<64xf32, @world, [local]>, %p0: !dist.tensor<64xf32, @world, [replicated]>,
                 %g1: !dist.tensor<32xf32, @world, [local]>, %p1: !dist.tensor<32xf32, @world, [replicated]>)
    -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<32xf32, @world, [replicated]>) {
  %n0, %s0 = coll.fused_all_reduce avg %g0 dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%a: !dist.tensor<64xf32, @world, [sliced<0>]>):
    %ps = dist.take_slice %p0 dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %n = dist.map(%ps, %a) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
    ^bb1(%x: f32, %y: f32):
      %d = arith.subf %x, %y : f32
      dist.yield %d : f32
    }
    coll.yield %n, %a : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  %n1 = coll.fused_all_reduce avg %g1 dim 0 : !dist.tensor<32xf32, @world, [local]> -> !dist.tensor<32xf32, @world, [replicated]> {
  ^bb0(%a: !dist.tensor<32xf32, @world, [sliced<0>]>):
    %ps = dist.take_slice %p1 dim 0 : !dist.tensor<32xf32, @world, [replicated]> -> !dist.tensor<32xf32, @world, [sliced<0>]>
    %n = dist.map(%ps, %a) : (!dist.tensor<32xf32, @world, [sliced<0>]>, !dist.tensor<32xf32, @world, [sliced<0>]>) -> !dist.tensor<32xf32, @world, [sliced<0>]> {
    ^bb1(%x: f32, %y: f32):
      %d = arith.subf %x, %y : f32
      dist.yield %d : f32
    }
    coll.yield %n : !dist.tensor<32xf32, @world, [sliced<0>]>
  }
  func.return %n0, %s0, %n1 : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<32xf32, @world, [replicated]>
}

// All-reduces over dp of operands also sliced over tp, on different dims (the gradient
// of a tensor-parallel block, issue 27): a combined all-reduce slices one dim over dp,
// and no dim both can take (dp divides and tp does not slice) exists: they stay apart.
// CHECK-LABEL: func.func @sliced_on_other_axes
// CHECK:         %{{.*}} = coll.all_reduce sum %a
// CHECK:         %{{.*}} = coll.all_reduce sum %b
// CHECK-NOT:     coll.fused_all_reduce
func.func @sliced_on_other_axes(%a: !dist.tensor<32x4x8xf32, @grid, [local, sliced<1>]>, %b: !dist.tensor<4x8x32xf32, @grid, [local, sliced<0>]>)
    -> (!dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>) {
  %0 = coll.all_reduce sum %a : !dist.tensor<32x4x8xf32, @grid, [local, sliced<1>]> -> !dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>
  %1 = coll.all_reduce sum %b : !dist.tensor<4x8x32xf32, @grid, [local, sliced<0>]> -> !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>
  func.return %0, %1 : !dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>
}

// A dim tp slices is never the combined dim: operands sliced over tp on dim 0 combine
// along dim 1, operands sliced on dim 1 along dim 0; each pair keeps its tp slicing.
// CHECK-LABEL: func.func @combined_dim_skips_sliced_dims
// CHECK:         %{{.*}}, %{{.*}} = coll.fused_all_reduce sum %a, %c dim 0 :
// CHECK-NEXT:    ^{{.*}}(%{{.*}}: !dist.tensor<32x4x8xf32, @grid, [sliced<0>, sliced<1>]>, %{{.*}}: !dist.tensor<16x8x8xf32, @grid, [sliced<0>, sliced<1>]>):
// CHECK:         %{{.*}}, %{{.*}} = coll.fused_all_reduce sum %b, %d dim 1 :
// CHECK-NEXT:    ^{{.*}}(%{{.*}}: !dist.tensor<4x8x32xf32, @grid, [sliced<1>, sliced<0>]>, %{{.*}}: !dist.tensor<8x8x16xf32, @grid, [sliced<1>, sliced<0>]>):
func.func @combined_dim_skips_sliced_dims(%a: !dist.tensor<32x4x8xf32, @grid, [local, sliced<1>]>, %b: !dist.tensor<4x8x32xf32, @grid, [local, sliced<0>]>,
                                          %c: !dist.tensor<16x8x8xf32, @grid, [local, sliced<1>]>, %d: !dist.tensor<8x8x16xf32, @grid, [local, sliced<0>]>)
    -> (!dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>,
        !dist.tensor<16x8x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<8x8x16xf32, @grid, [replicated, sliced<0>]>) {
  %0 = coll.all_reduce sum %a : !dist.tensor<32x4x8xf32, @grid, [local, sliced<1>]> -> !dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>
  %1 = coll.all_reduce sum %b : !dist.tensor<4x8x32xf32, @grid, [local, sliced<0>]> -> !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>
  %2 = coll.all_reduce sum %c : !dist.tensor<16x8x8xf32, @grid, [local, sliced<1>]> -> !dist.tensor<16x8x8xf32, @grid, [replicated, sliced<1>]>
  %3 = coll.all_reduce sum %d : !dist.tensor<8x8x16xf32, @grid, [local, sliced<0>]> -> !dist.tensor<8x8x16xf32, @grid, [replicated, sliced<0>]>
  func.return %0, %1, %2, %3 : !dist.tensor<32x4x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @grid, [replicated, sliced<0>]>, !dist.tensor<16x8x8xf32, @grid, [replicated, sliced<1>]>, !dist.tensor<8x8x16xf32, @grid, [replicated, sliced<0>]>
}

// With at<0> on tp, only the ranks of tp 0 take part: a different group from an
// all-reduce over dp of a value every rank holds. Same groups combine.
// CHECK-LABEL: func.func @same_ranks_taking_part
// CHECK:         %{{.*}} = coll.all_reduce sum %y
// CHECK:         %{{.*}}, %{{.*}} = coll.fused_all_reduce sum %x, %z dim 0 :
// CHECK-NOT:     coll.all_reduce
func.func @same_ranks_taking_part(%x: !dist.tensor<8xf32, @grid, [local, at<0>]>, %y: !dist.tensor<8xf32, @grid, [local, replicated]>, %z: !dist.tensor<4xf32, @grid, [local, at<0>]>)
    -> (!dist.tensor<8xf32, @grid, [replicated, at<0>]>, !dist.tensor<8xf32, @grid, [replicated, replicated]>, !dist.tensor<4xf32, @grid, [replicated, at<0>]>) {
  %0 = coll.all_reduce sum %x : !dist.tensor<8xf32, @grid, [local, at<0>]> -> !dist.tensor<8xf32, @grid, [replicated, at<0>]>
  %1 = coll.all_reduce sum %y : !dist.tensor<8xf32, @grid, [local, replicated]> -> !dist.tensor<8xf32, @grid, [replicated, replicated]>
  %2 = coll.all_reduce sum %z : !dist.tensor<4xf32, @grid, [local, at<0>]> -> !dist.tensor<4xf32, @grid, [replicated, at<0>]>
  func.return %0, %1, %2 : !dist.tensor<8xf32, @grid, [replicated, at<0>]>, !dist.tensor<8xf32, @grid, [replicated, replicated]>, !dist.tensor<4xf32, @grid, [replicated, at<0>]>
}

// No dim the 4 ranks divide: each member slices the dim with the least padding (13
// rows as 4, 4, 4, 1 rather than 3 columns as 1, 1, 1, 0), and they combine.
// CHECK-LABEL: func.func @uneven_all_reduces
// CHECK:         %[[A:.*]], %[[B:.*]] = coll.fused_all_reduce sum %x, %y dim 0 : (!dist.tensor<13x3xf32, @world, [local]>, !dist.tensor<13xf32, @world, [local]>)
// CHECK-NEXT:    ^bb0(%[[XS:.*]]: !dist.tensor<13x3xf32, @world, [sliced<0>]>, %[[YS:.*]]: !dist.tensor<13xf32, @world, [sliced<0>]>):
// CHECK-NEXT:      coll.yield %[[XS]], %[[YS]]
func.func @uneven_all_reduces(%x: !dist.tensor<13x3xf32, @world, [local]>, %y: !dist.tensor<13xf32, @world, [local]>) -> (!dist.tensor<13x3xf32, @world, [replicated]>, !dist.tensor<13xf32, @world, [replicated]>) {
  %a = coll.all_reduce sum %x : !dist.tensor<13x3xf32, @world, [local]> -> !dist.tensor<13x3xf32, @world, [replicated]>
  %b = coll.all_reduce sum %y : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [replicated]>
  func.return %a, %b : !dist.tensor<13x3xf32, @world, [replicated]>, !dist.tensor<13xf32, @world, [replicated]>
}
