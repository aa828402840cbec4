// RUN: distir-opt %s -p partition | filecheck %s
// RUN: distir-opt %s -p 'partition{remarks=true}' 2>&1 >/dev/null | filecheck %s --check-prefix=REMARK

// Programs on global (unplaced) values between placed arguments and results, as the
// front ends import them; `partition` places every value and inserts the collectives.

dist.mesh @m shape = [4] axes = ["x"]

// Megatron's MLP: the first GEMM's weight is column-sliced, so h is sliced on its last
// dim and the element-wise op runs on slices; the second weight is row-sliced: partial
// sums, one all-reduce for the replicated result.
// CHECK-LABEL: func.func @megatron_mlp
// CHECK:         %[[H:.*]] = dist.matmul %x, %w1 : {{.*}} -> !dist.tensor<8x32xf32, @m, [sliced<1>]>
// CHECK-NEXT:    %[[A:.*]] = dist.map(%[[H]]) : {{.*}} -> !dist.tensor<8x32xf32, @m, [sliced<1>]>
// CHECK:         %[[Y:.*]] = dist.matmul %[[A]], %w2 : {{.*}} -> !dist.tensor<8x16xf32, @m, [local]>
// CHECK-NEXT:    %[[R:.*]] = coll.all_reduce sum %[[Y]] : {{.*}}[local]> -> {{.*}}[replicated]>
// CHECK-NEXT:    func.return %[[R]]
// REMARK:        remark: partition: inserted coll.all_reduce sum over x of %y (8x16xf32): [local] -> [replicated] for the function's result
func.func @megatron_mlp(%x: !dist.tensor<8x16xf32, @m, [replicated]>, %w1: !dist.tensor<16x32xf32, @m, [sliced<1>]>, %w2: !dist.tensor<32x16xf32, @m, [sliced<0>]>) -> !dist.tensor<8x16xf32, @m, [replicated]> {
  %xg = dist.drop %x : !dist.tensor<8x16xf32, @m, [replicated]> -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %w1g = dist.join %w1 : !dist.tensor<16x32xf32, @m, [sliced<1>]> -> !dist.tensor<16x32xf32, @m, [unplaced]>
  %w2g = dist.join %w2 : !dist.tensor<32x16xf32, @m, [sliced<0>]> -> !dist.tensor<32x16xf32, @m, [unplaced]>
  %h = dist.matmul %xg, %w1g : (!dist.tensor<8x16xf32, @m, [unplaced]>, !dist.tensor<16x32xf32, @m, [unplaced]>) -> !dist.tensor<8x32xf32, @m, [unplaced]>
  %a = dist.map(%h) : (!dist.tensor<8x32xf32, @m, [unplaced]>) -> !dist.tensor<8x32xf32, @m, [unplaced]> {
  ^bb0(%e: f32):
    %z = arith.constant 0.0 : f32
    %r = arith.maximumf %e, %z : f32
    dist.yield %r : f32
  }
  %y = dist.matmul %a, %w2g : (!dist.tensor<8x32xf32, @m, [unplaced]>, !dist.tensor<32x16xf32, @m, [unplaced]>) -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %out = dist.repl %y : !dist.tensor<8x16xf32, @m, [unplaced]> -> !dist.tensor<8x16xf32, @m, [replicated]>
  func.return %out : !dist.tensor<8x16xf32, @m, [replicated]>
}

// A result sliced on its rows (sequence parallelism): the partial sums are reduced and
// scattered at once.
// CHECK-LABEL: func.func @reduce_scatter_for_a_sliced_result
// CHECK:         %[[Y:.*]] = dist.matmul %a, %w : {{.*}} -> !dist.tensor<8x16xf32, @m, [local]>
// CHECK-NEXT:    %[[R:.*]] = coll.reduce_scatter sum %[[Y]] dim 0 : {{.*}}[local]> -> {{.*}}[sliced<0>]>
// CHECK-NEXT:    func.return %[[R]]
func.func @reduce_scatter_for_a_sliced_result(%a: !dist.tensor<8x32xf32, @m, [sliced<1>]>, %w: !dist.tensor<32x16xf32, @m, [sliced<0>]>) -> !dist.tensor<8x16xf32, @m, [sliced<0>]> {
  %ag = dist.join %a : !dist.tensor<8x32xf32, @m, [sliced<1>]> -> !dist.tensor<8x32xf32, @m, [unplaced]>
  %wg = dist.join %w : !dist.tensor<32x16xf32, @m, [sliced<0>]> -> !dist.tensor<32x16xf32, @m, [unplaced]>
  %y = dist.matmul %ag, %wg : (!dist.tensor<8x32xf32, @m, [unplaced]>, !dist.tensor<32x16xf32, @m, [unplaced]>) -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %out = dist.slice %y dim 0 : !dist.tensor<8x16xf32, @m, [unplaced]> -> !dist.tensor<8x16xf32, @m, [sliced<0>]>
  func.return %out : !dist.tensor<8x16xf32, @m, [sliced<0>]>
}

// A value sliced on rows wanted sliced on columns: one all-to-all.
// CHECK-LABEL: func.func @all_to_all_for_a_change_of_dim
// CHECK:         %[[E:.*]] = dist.map(%x) : {{.*}} -> !dist.tensor<8x16xf32, @m, [sliced<0>]>
// CHECK:         %[[T:.*]] = coll.all_to_all %[[E]] dim 1 : {{.*}}[sliced<0>]> -> {{.*}}[sliced<1>]>
// CHECK-NEXT:    func.return %[[T]]
func.func @all_to_all_for_a_change_of_dim(%x: !dist.tensor<8x16xf32, @m, [sliced<0>]>) -> !dist.tensor<8x16xf32, @m, [sliced<1>]> {
  %xg = dist.join %x : !dist.tensor<8x16xf32, @m, [sliced<0>]> -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %e = dist.map(%xg) : (!dist.tensor<8x16xf32, @m, [unplaced]>) -> !dist.tensor<8x16xf32, @m, [unplaced]> {
  ^bb0(%v: f32):
    %r = math.exp %v : f32
    dist.yield %r : f32
  }
  %out = dist.slice %e dim 1 : !dist.tensor<8x16xf32, @m, [unplaced]> -> !dist.tensor<8x16xf32, @m, [sliced<1>]>
  func.return %out : !dist.tensor<8x16xf32, @m, [sliced<1>]>
}

// Propagation runs backwards too: a sliced result slices the replicated argument first
// (no communication) and the element-wise op runs on slices.
// CHECK-LABEL: func.func @slice_early
// CHECK:         %[[S:.*]] = dist.take_slice %x dim 0 : {{.*}}[replicated]> -> {{.*}}[sliced<0>]>
// CHECK-NEXT:    %[[E:.*]] = dist.map(%[[S]]) : {{.*}}[sliced<0>]>) -> !dist.tensor<64xf32, @m, [sliced<0>]>
// CHECK-NOT:     coll.
// CHECK:         func.return %[[E]]
func.func @slice_early(%x: !dist.tensor<64xf32, @m, [replicated]>) -> !dist.tensor<64xf32, @m, [sliced<0>]> {
  %xg = dist.drop %x : !dist.tensor<64xf32, @m, [replicated]> -> !dist.tensor<64xf32, @m, [unplaced]>
  %e = dist.map(%xg) : (!dist.tensor<64xf32, @m, [unplaced]>) -> !dist.tensor<64xf32, @m, [unplaced]> {
  ^bb0(%v: f32):
    %r = arith.mulf %v, %v : f32
    dist.yield %r : f32
  }
  %out = dist.slice %e dim 0 : !dist.tensor<64xf32, @m, [unplaced]> -> !dist.tensor<64xf32, @m, [sliced<0>]>
  func.return %out : !dist.tensor<64xf32, @m, [sliced<0>]>
}

// A user constraint (a value placed mid-program) is kept: the gather happens there, and
// the rest runs replicated.
// CHECK-LABEL: func.func @constraint_is_kept
// CHECK:         %[[E:.*]] = dist.map(%x) : {{.*}} -> !dist.tensor<64xf32, @m, [sliced<0>]>
// CHECK:         %[[G:.*]] = coll.all_gather %[[E]] : {{.*}}[sliced<0>]> -> {{.*}}[replicated]>
// CHECK-NEXT:    %[[F:.*]] = dist.map(%[[G]]) : {{.*}} -> !dist.tensor<64xf32, @m, [replicated]>
// CHECK:         func.return %[[F]]
func.func @constraint_is_kept(%x: !dist.tensor<64xf32, @m, [sliced<0>]>) -> !dist.tensor<64xf32, @m, [replicated]> {
  %xg = dist.join %x : !dist.tensor<64xf32, @m, [sliced<0>]> -> !dist.tensor<64xf32, @m, [unplaced]>
  %e = dist.map(%xg) : (!dist.tensor<64xf32, @m, [unplaced]>) -> !dist.tensor<64xf32, @m, [unplaced]> {
  ^bb0(%v: f32):
    %r = arith.mulf %v, %v : f32
    dist.yield %r : f32
  }
  %c = dist.repl %e : !dist.tensor<64xf32, @m, [unplaced]> -> !dist.tensor<64xf32, @m, [replicated]>
  %cg = dist.drop %c : !dist.tensor<64xf32, @m, [replicated]> -> !dist.tensor<64xf32, @m, [unplaced]>
  %f = dist.map(%cg) : (!dist.tensor<64xf32, @m, [unplaced]>) -> !dist.tensor<64xf32, @m, [unplaced]> {
  ^bb0(%v: f32):
    %r = arith.addf %v, %v : f32
    dist.yield %r : f32
  }
  %out = dist.repl %f : !dist.tensor<64xf32, @m, [unplaced]> -> !dist.tensor<64xf32, @m, [replicated]>
  func.return %out : !dist.tensor<64xf32, @m, [replicated]>
}

// A reduction over a sliced dim leaves partial maxima: an all-reduce of the same kind.
// CHECK-LABEL: func.func @partial_max
// CHECK:         %[[M:.*]] = dist.reduce_tensor max %x dims [1] : {{.*}} -> !dist.tensor<8xf32, @m, [local]>
// CHECK-NEXT:    %[[R:.*]] = coll.all_reduce max %[[M]]
func.func @partial_max(%x: !dist.tensor<8x16xf32, @m, [sliced<1>]>) -> !dist.tensor<8xf32, @m, [replicated]> {
  %xg = dist.join %x : !dist.tensor<8x16xf32, @m, [sliced<1>]> -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %mx = dist.reduce_tensor max %xg dims [1] : !dist.tensor<8x16xf32, @m, [unplaced]> -> !dist.tensor<8xf32, @m, [unplaced]>
  %out = dist.repl %mx : !dist.tensor<8xf32, @m, [unplaced]> -> !dist.tensor<8xf32, @m, [replicated]>
  func.return %out : !dist.tensor<8xf32, @m, [replicated]>
}

// Partial sums pass through a transpose unreduced: the all-reduce comes right before
// the element-wise op that needs whole values (where fuse-allreduce applies).
// CHECK-LABEL: func.func @partial_sums_through_transpose
// CHECK:         %[[Y:.*]] = dist.matmul %a, %w : {{.*}} -> !dist.tensor<8x16xf32, @m, [local]>
// CHECK-NEXT:    %[[T:.*]] = dist.transpose %[[Y]] perm [1, 0] : {{.*}}[local]> -> !dist.tensor<16x8xf32, @m, [local]>
// CHECK-NEXT:    %[[R:.*]] = coll.all_reduce sum %[[T]]
// CHECK-NEXT:    dist.map(%[[R]])
func.func @partial_sums_through_transpose(%a: !dist.tensor<8x32xf32, @m, [sliced<1>]>, %w: !dist.tensor<32x16xf32, @m, [sliced<0>]>) -> !dist.tensor<16x8xf32, @m, [replicated]> {
  %ag = dist.join %a : !dist.tensor<8x32xf32, @m, [sliced<1>]> -> !dist.tensor<8x32xf32, @m, [unplaced]>
  %wg = dist.join %w : !dist.tensor<32x16xf32, @m, [sliced<0>]> -> !dist.tensor<32x16xf32, @m, [unplaced]>
  %y = dist.matmul %ag, %wg : (!dist.tensor<8x32xf32, @m, [unplaced]>, !dist.tensor<32x16xf32, @m, [unplaced]>) -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %t = dist.transpose %y perm [1, 0] : !dist.tensor<8x16xf32, @m, [unplaced]> -> !dist.tensor<16x8xf32, @m, [unplaced]>
  %e = dist.map(%t) : (!dist.tensor<16x8xf32, @m, [unplaced]>) -> !dist.tensor<16x8xf32, @m, [unplaced]> {
  ^bb0(%v: f32):
    %r = math.tanh %v : f32
    dist.yield %r : f32
  }
  %out = dist.repl %e : !dist.tensor<16x8xf32, @m, [unplaced]> -> !dist.tensor<16x8xf32, @m, [replicated]>
  func.return %out : !dist.tensor<16x8xf32, @m, [replicated]>
}

// A scan's stacked gradients: each layer's weight gradient is partial over the batch
// (data parallel), the layers are reshaped and concatenated, and the partial sums pass
// through (they only move elements): one all-reduce for the stacked tensor, not one per
// layer; a slice of it and a sum over a dim of size 1 (a bias gradient's [1, N]) are
// reduced once after them too.
// CHECK-LABEL: func.func @partial_sums_through_concat
// CHECK-NOT:     coll.
// CHECK:         %[[G0:.*]] = dist.matmul {{.*}} -> !dist.tensor<32x16xf32, @m, [local]>
// CHECK:         %[[G1:.*]] = dist.matmul {{.*}} -> !dist.tensor<32x16xf32, @m, [local]>
// CHECK-NOT:     coll.
// CHECK:         %[[ST:.*]] = dist.concat %{{.*}}, %{{.*}} dim 0 : (!dist.tensor<1x32x16xf32, @m, [local]>, !dist.tensor<1x32x16xf32, @m, [local]>) -> !dist.tensor<2x32x16xf32, @m, [local]>
// CHECK-NEXT:    %[[SL:.*]] = dist.extract_slice %[[ST]] {{.*}} -> !dist.tensor<1x32x16xf32, @m, [local]>
// CHECK:         %[[B:.*]] = dist.reduce_tensor sum %{{.*}} dims [0] : !dist.tensor<1x16xf32, @m, [local]> -> !dist.tensor<16xf32, @m, [local]>
// CHECK-NEXT:    coll.all_reduce sum %[[ST]] : {{.*}} -> !dist.tensor<2x32x16xf32, @m, [replicated]>
// CHECK-NEXT:    coll.all_reduce sum %[[SL]] : {{.*}} -> !dist.tensor<1x32x16xf32, @m, [replicated]>
// CHECK-NEXT:    coll.all_reduce sum %[[B]] : {{.*}} -> !dist.tensor<16xf32, @m, [replicated]>
// CHECK-NOT:     coll.
// CHECK:         func.return
func.func @partial_sums_through_concat(%x: !dist.tensor<8x32xf32, @m, [sliced<0>]>, %d0: !dist.tensor<8x16xf32, @m, [sliced<0>]>, %d1: !dist.tensor<8x16xf32, @m, [sliced<0>]>) -> (!dist.tensor<2x32x16xf32, @m, [replicated]>, !dist.tensor<1x32x16xf32, @m, [replicated]>, !dist.tensor<16xf32, @m, [replicated]>) {
  %xg = dist.join %x : !dist.tensor<8x32xf32, @m, [sliced<0>]> -> !dist.tensor<8x32xf32, @m, [unplaced]>
  %d0g = dist.join %d0 : !dist.tensor<8x16xf32, @m, [sliced<0>]> -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %d1g = dist.join %d1 : !dist.tensor<8x16xf32, @m, [sliced<0>]> -> !dist.tensor<8x16xf32, @m, [unplaced]>
  %xt = dist.transpose %xg perm [1, 0] : !dist.tensor<8x32xf32, @m, [unplaced]> -> !dist.tensor<32x8xf32, @m, [unplaced]>
  %g0 = dist.matmul %xt, %d0g : (!dist.tensor<32x8xf32, @m, [unplaced]>, !dist.tensor<8x16xf32, @m, [unplaced]>) -> !dist.tensor<32x16xf32, @m, [unplaced]>
  %g1 = dist.matmul %xt, %d1g : (!dist.tensor<32x8xf32, @m, [unplaced]>, !dist.tensor<8x16xf32, @m, [unplaced]>) -> !dist.tensor<32x16xf32, @m, [unplaced]>
  %s0 = dist.reshape %g0 : !dist.tensor<32x16xf32, @m, [unplaced]> -> !dist.tensor<1x32x16xf32, @m, [unplaced]>
  %s1 = dist.reshape %g1 : !dist.tensor<32x16xf32, @m, [unplaced]> -> !dist.tensor<1x32x16xf32, @m, [unplaced]>
  %st = dist.concat %s0, %s1 dim 0 : (!dist.tensor<1x32x16xf32, @m, [unplaced]>, !dist.tensor<1x32x16xf32, @m, [unplaced]>) -> !dist.tensor<2x32x16xf32, @m, [unplaced]>
  %sl = dist.extract_slice %st offsets [1, 0, 0] strides [1, 1, 1] : !dist.tensor<2x32x16xf32, @m, [unplaced]> -> !dist.tensor<1x32x16xf32, @m, [unplaced]>
  %b = dist.reduce_tensor sum %d0g dims [0] : !dist.tensor<8x16xf32, @m, [unplaced]> -> !dist.tensor<16xf32, @m, [unplaced]>
  %b1 = dist.reshape %b : !dist.tensor<16xf32, @m, [unplaced]> -> !dist.tensor<1x16xf32, @m, [unplaced]>
  %b2 = dist.reduce_tensor sum %b1 dims [0] : !dist.tensor<1x16xf32, @m, [unplaced]> -> !dist.tensor<16xf32, @m, [unplaced]>
  %o0 = dist.repl %st : !dist.tensor<2x32x16xf32, @m, [unplaced]> -> !dist.tensor<2x32x16xf32, @m, [replicated]>
  %o1 = dist.repl %sl : !dist.tensor<1x32x16xf32, @m, [unplaced]> -> !dist.tensor<1x32x16xf32, @m, [replicated]>
  %o2 = dist.repl %b2 : !dist.tensor<16xf32, @m, [unplaced]> -> !dist.tensor<16xf32, @m, [replicated]>
  func.return %o0, %o1, %o2 : !dist.tensor<2x32x16xf32, @m, [replicated]>, !dist.tensor<1x32x16xf32, @m, [replicated]>, !dist.tensor<16xf32, @m, [replicated]>
}

// Unreduced arguments (partial sums) are reduced where a use needs them whole.
// CHECK-LABEL: func.func @unreduced_argument
// CHECK:         %[[R:.*]] = coll.all_reduce sum %g : {{.*}}[local]> -> {{.*}}[replicated]>
// CHECK-NEXT:    dist.map(%[[R]])
func.func @unreduced_argument(%g: !dist.tensor<64xf32, @m, [local]>) -> !dist.tensor<64xf32, @m, [replicated]> {
  %gg = dist.reduce sum %g : !dist.tensor<64xf32, @m, [local]> -> !dist.tensor<64xf32, @m, [unplaced]>
  %e = dist.map(%gg) : (!dist.tensor<64xf32, @m, [unplaced]>) -> !dist.tensor<64xf32, @m, [unplaced]> {
  ^bb0(%v: f32):
    %r = math.sqrt %v : f32
    dist.yield %r : f32
  }
  %out = dist.repl %e : !dist.tensor<64xf32, @m, [unplaced]> -> !dist.tensor<64xf32, @m, [replicated]>
  func.return %out : !dist.tensor<64xf32, @m, [replicated]>
}

// Heads the ranks do not divide (Megatron's attention with 3 heads on 4 ranks): the
// projection's 12 columns are sliced evenly, its 3 heads of 4 would not be (blocks of
// other elements), so the reshape runs on the gathered value and its result is sliced
// after (a view), on the way back too.
// CHECK-LABEL: func.func @reshape_of_heads_the_ranks_do_not_divide
// CHECK:         %[[G:.*]] = coll.all_gather %x : {{.*}}[sliced<1>]> -> {{.*}}[replicated]>
// CHECK-NEXT:    %[[H:.*]] = dist.reshape %[[G]] : {{.*}} -> !dist.tensor<8x3x4xf32, @m, [replicated]>
// CHECK:         %[[B:.*]] = dist.reshape %{{.*}} : {{.*}} -> !dist.tensor<8x12xf32, @m, [replicated]>
// CHECK-NEXT:    %[[S:.*]] = dist.take_slice %[[B]] dim 1 : {{.*}}[replicated]> -> {{.*}}[sliced<1>]>
// CHECK-NEXT:    func.return %[[S]]
func.func @reshape_of_heads_the_ranks_do_not_divide(%x: !dist.tensor<8x12xf32, @m, [sliced<1>]>) -> !dist.tensor<8x12xf32, @m, [sliced<1>]> {
  %xg = dist.join %x : !dist.tensor<8x12xf32, @m, [sliced<1>]> -> !dist.tensor<8x12xf32, @m, [unplaced]>
  %h = dist.reshape %xg : !dist.tensor<8x12xf32, @m, [unplaced]> -> !dist.tensor<8x3x4xf32, @m, [unplaced]>
  %d = dist.map(%h) : (!dist.tensor<8x3x4xf32, @m, [unplaced]>) -> !dist.tensor<8x3x4xf32, @m, [unplaced]> {
  ^bb0(%e: f32):
    %r = arith.addf %e, %e : f32
    dist.yield %r : f32
  }
  %b = dist.reshape %d : !dist.tensor<8x3x4xf32, @m, [unplaced]> -> !dist.tensor<8x12xf32, @m, [unplaced]>
  %out = dist.slice %b dim 1 : !dist.tensor<8x12xf32, @m, [unplaced]> -> !dist.tensor<8x12xf32, @m, [sliced<1>]>
  func.return %out : !dist.tensor<8x12xf32, @m, [sliced<1>]>
}

// A manual computation over tp only (shard_map(.., axis_names={"tp"})): its values are
// `local` on tp (each device's own) and unplaced on dp, which `partition` decides like any
// other: the batch stays sliced over dp through the body (dp is pinned nowhere), tp is
// kept as the program pins it, and only the body's own all-reduce over tp remains.
dist.mesh @dt shape = [2, 2] axes = ["dp", "tp"]
// CHECK-LABEL: func.func @partly_manual
// CHECK:         %[[X:.*]] = dist.to_local %x : {{.*}} -> !dist.tensor<8x8xf32, @dt, [sliced<0>, local]>
// CHECK-NEXT:    %[[W:.*]] = dist.to_local %w : {{.*}} -> !dist.tensor<8x4xf32, @dt, [replicated, local]>
// CHECK-NEXT:    %[[Y:.*]] = dist.matmul %[[X]], %[[W]] : {{.*}} -> !dist.tensor<8x4xf32, @dt, [sliced<0>, local]>
// CHECK-NEXT:    %[[S:.*]] = coll.all_reduce sum %[[Y]] axes [1] : {{.*}} -> !dist.tensor<8x4xf32, @dt, [sliced<0>, replicated]>
// CHECK-NOT:     coll.
// CHECK:         func.return
func.func @partly_manual(%x: !dist.tensor<8x16xf32, @dt, [sliced<0>, sliced<1>]>, %w: !dist.tensor<16x4xf32, @dt, [replicated, sliced<0>]>) -> !dist.tensor<8x4xf32, @dt, [sliced<0>, replicated]> {
  %xg = dist.join %x axis 1 : !dist.tensor<8x16xf32, @dt, [sliced<0>, sliced<1>]> -> !dist.tensor<8x16xf32, @dt, [sliced<0>, unplaced]>
  %xg2 = dist.join %xg axis 0 : !dist.tensor<8x16xf32, @dt, [sliced<0>, unplaced]> -> !dist.tensor<8x16xf32, @dt, [unplaced, unplaced]>
  %a = dist.slice %xg2 dim 1 axis 1 : !dist.tensor<8x16xf32, @dt, [unplaced, unplaced]> -> !dist.tensor<8x16xf32, @dt, [unplaced, sliced<1>]>
  %al = dist.to_local %a : !dist.tensor<8x16xf32, @dt, [unplaced, sliced<1>]> -> !dist.tensor<8x8xf32, @dt, [unplaced, local]>
  %wg = dist.drop %w axis 0 : !dist.tensor<16x4xf32, @dt, [replicated, sliced<0>]> -> !dist.tensor<16x4xf32, @dt, [unplaced, sliced<0>]>
  %wl = dist.to_local %wg : !dist.tensor<16x4xf32, @dt, [unplaced, sliced<0>]> -> !dist.tensor<8x4xf32, @dt, [unplaced, local]>
  %y = dist.matmul %al, %wl : (!dist.tensor<8x8xf32, @dt, [unplaced, local]>, !dist.tensor<8x4xf32, @dt, [unplaced, local]>) -> !dist.tensor<8x4xf32, @dt, [unplaced, local]>
  %s = coll.all_reduce sum %y axes [1] : !dist.tensor<8x4xf32, @dt, [unplaced, local]> -> !dist.tensor<8x4xf32, @dt, [unplaced, replicated]>
  %sl = dist.to_local %s : !dist.tensor<8x4xf32, @dt, [unplaced, replicated]> -> !dist.tensor<8x4xf32, @dt, [unplaced, local]>
  %o = dist.from_local %sl : !dist.tensor<8x4xf32, @dt, [unplaced, local]> -> !dist.tensor<8x4xf32, @dt, [unplaced, replicated]>
  %g = dist.drop %o axis 1 : !dist.tensor<8x4xf32, @dt, [unplaced, replicated]> -> !dist.tensor<8x4xf32, @dt, [unplaced, unplaced]>
  %r = dist.slice %g dim 0 axis 0 : !dist.tensor<8x4xf32, @dt, [unplaced, unplaced]> -> !dist.tensor<8x4xf32, @dt, [sliced<0>, unplaced]>
  %r2 = dist.repl %r axis 1 : !dist.tensor<8x4xf32, @dt, [sliced<0>, unplaced]> -> !dist.tensor<8x4xf32, @dt, [sliced<0>, replicated]>
  func.return %r2 : !dist.tensor<8x4xf32, @dt, [sliced<0>, replicated]>
}
