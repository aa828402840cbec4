// RUN: distir-opt %s | filecheck %s
// RUN: distir-opt %s | distir-opt | filecheck %s
// RUN: distir-opt %s --print-op-generic | distir-opt | filecheck %s
// RUN: xdsl-opt %s | filecheck %s
// Every coll op in its custom syntax; the printed form parses back to the same IR.

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 4] axes = ["node", "gpu"]

// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: !dist.tensor<64x8xf32, @world, [local]>, %s: !dist.tensor<64x8xf32, @world, [sliced<0>]>, %a: !dist.tensor<64x8xf32, @world, [at<3>]>) {
  // CHECK: coll.all_reduce prod %{{.*}} : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  %0 = coll.all_reduce prod %x : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  // CHECK: coll.reduce_scatter min %{{.*}} dim 1 : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  %1 = coll.reduce_scatter min %x dim 1 : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  // CHECK: coll.all_gather %{{.*}} : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  %2 = coll.all_gather %s : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  // CHECK: coll.reduce max %{{.*}} root 2 : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [at<2>]>
  %3 = coll.reduce max %x root 2 : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [at<2>]>
  // CHECK: coll.broadcast %{{.*}} : !dist.tensor<64x8xf32, @world, [at<3>]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  %4 = coll.broadcast %a : !dist.tensor<64x8xf32, @world, [at<3>]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  // CHECK: coll.all_to_all %{{.*}} dim 1 : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  %5 = coll.all_to_all %s dim 1 : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  // CHECK: coll.send %{{.*}} to 0 : !dist.tensor<64x8xf32, @world, [at<3>]> -> !dist.tensor<64x8xf32, @world, [at<0>]>
  %6 = coll.send %a to 0 : !dist.tensor<64x8xf32, @world, [at<3>]> -> !dist.tensor<64x8xf32, @world, [at<0>]>
  func.return
}

// CHECK-LABEL: func.func @collectives_over_axes
func.func @collectives_over_axes(%x: !dist.tensor<64xf32, @grid, [local, local]>) -> !dist.tensor<64xf32, @grid, [replicated, replicated]> {
  // CHECK: coll.reduce_scatter sum %{{.*}} dim 0 axes [1] : {{.*}} -> !dist.tensor<64xf32, @grid, [local, sliced<0>]>
  %rs = coll.reduce_scatter sum %x dim 0 axes [1] : !dist.tensor<64xf32, @grid, [local, local]> -> !dist.tensor<64xf32, @grid, [local, sliced<0>]>
  // CHECK: coll.reduce_scatter sum %{{.*}} dim 0 : {{.*}} -> !dist.tensor<64xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  %rs2 = coll.reduce_scatter sum %rs dim 0 axes [0] : !dist.tensor<64xf32, @grid, [local, sliced<0>]> -> !dist.tensor<64xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  // CHECK: coll.all_gather %{{.*}} : {{.*}} -> !dist.tensor<64xf32, @grid, [replicated, sliced<0>]>
  %ag = coll.all_gather %rs2 axes [0] : !dist.tensor<64xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<64xf32, @grid, [replicated, sliced<0>]>
  // CHECK: coll.all_gather %{{.*}} axes [1] : {{.*}} -> !dist.tensor<64xf32, @grid, [replicated, replicated]>
  %y = coll.all_gather %ag axes [1] : !dist.tensor<64xf32, @grid, [replicated, sliced<0>]> -> !dist.tensor<64xf32, @grid, [replicated, replicated]>
  // CHECK: coll.all_reduce sum %{{.*}} axes [0, 1] : !dist.tensor<64xf32, @grid, [local, local]> -> !dist.tensor<64xf32, @grid, [replicated, replicated]>
  %z = coll.all_reduce sum %x axes [0, 1] : !dist.tensor<64xf32, @grid, [local, local]> -> !dist.tensor<64xf32, @grid, [replicated, replicated]>
  // CHECK: coll.reduce sum %{{.*}} root 5 axes [0, 1] : {{.*}} -> !dist.tensor<64xf32, @grid, [at<1>, at<1>]>
  %r = coll.reduce sum %x root 5 axes [0, 1] : !dist.tensor<64xf32, @grid, [local, local]> -> !dist.tensor<64xf32, @grid, [at<1>, at<1>]>
  func.return %y : !dist.tensor<64xf32, @grid, [replicated, replicated]>
}

// CHECK-LABEL: func.func @fused_all_reduce
func.func @fused_all_reduce(%g: !dist.tensor<64xf32, @world, [local]>, %p: !dist.tensor<64xf32, @world, [replicated]>, %m: !dist.tensor<64xf32, @world, [sliced<0>]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  // CHECK: %{{.*}}, %{{.*}} = coll.fused_all_reduce sum %{{.*}} dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  // CHECK-NEXT: ^bb0(%[[GS:.*]]: !dist.tensor<64xf32, @world, [sliced<0>]>):
  // CHECK: dist.take_slice
  // CHECK: dist.reduce_tensor sum
  // CHECK: coll.all_reduce sum %{{.*}} : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
  // CHECK: coll.yield %{{.*}}, %{{.*}} : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  %p1, %m1 = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
    %ps = dist.take_slice %p dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %n = dist.reduce_tensor sum %gs dims [0] : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
    %nn = coll.all_reduce sum %n : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
    %mm, %pn = dist.map(%m, %gs, %ps, %nn) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<f32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
    ^bb0(%mi: f32, %gi: f32, %pi: f32, %ni: f32):
      %a = arith.addf %mi, %gi : f32
      %b = arith.divf %a, %ni : f32
      %c = arith.subf %pi, %b : f32
      dist.yield %a, %c : f32, f32
    }
    coll.yield %pn, %mm : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %p1, %m1 : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// CHECK-LABEL: func.func @other_fused_collectives
func.func @other_fused_collectives(%x: !dist.tensor<64xf32, @world, [local]>, %s: !dist.tensor<64xf32, @world, [sliced<0>]>, %a: !dist.tensor<64xf32, @world, [at<1>]>) {
  // CHECK: coll.fused_reduce_scatter avg %{{.*}} dim 0 : {{.*}} -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  %0 = coll.fused_reduce_scatter avg %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%v: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %v : !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  // CHECK: coll.fused_all_gather %{{.*}} : {{.*}} -> !dist.tensor<64xf32, @world, [replicated]> {
  %1 = coll.fused_all_gather %s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%v: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %v : !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  // CHECK: coll.fused_reduce sum %{{.*}} root 1 : {{.*}} -> !dist.tensor<64xf32, @world, [at<1>]> {
  %2 = coll.fused_reduce sum %x root 1 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [at<1>]> {
  ^bb0(%v: !dist.tensor<64xf32, @world, [at<1>]>):
    coll.yield %v : !dist.tensor<64xf32, @world, [at<1>]>
  }
  // CHECK: coll.fused_broadcast %{{.*}} : {{.*}} -> !dist.tensor<64xf32, @world, [replicated]> {
  %3 = coll.fused_broadcast %a : !dist.tensor<64xf32, @world, [at<1>]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%v: !dist.tensor<64xf32, @world, [at<1>]>):
    coll.yield %v : !dist.tensor<64xf32, @world, [at<1>]>
  }
  func.return
}

// CHECK-LABEL: func.func @fused_all_to_all
func.func @fused_all_to_all(%x: !dist.tensor<8x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16xf32, @world, [sliced<1>]> {
  // CHECK: coll.fused_all_to_all %{{.*}} dim 1 : {{.*}} -> !dist.tensor<8x16xf32, @world, [sliced<1>]> {
  %y = coll.fused_all_to_all %x dim 1 : !dist.tensor<8x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x16xf32, @world, [sliced<1>]> {
  ^bb0(%v: !dist.tensor<8x16xf32, @world, [sliced<1>]>):
    %w = dist.map(%v) : (!dist.tensor<8x16xf32, @world, [sliced<1>]>) -> !dist.tensor<8x16xf32, @world, [sliced<1>]> {
    ^bb0(%e: f32):
      %t = math.tanh %e : f32
      dist.yield %t : f32
    }
    coll.yield %w : !dist.tensor<8x16xf32, @world, [sliced<1>]>
  }
  func.return %y : !dist.tensor<8x16xf32, @world, [sliced<1>]>
}

// CHECK-LABEL: func.func @overlap
func.func @overlap(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<8x32xf32, @world, [replicated]> {
  // CHECK: %{{.*}} = coll.overlap chunks 4 order remote_first -> !dist.tensor<8x32xf32, @world, [replicated]> {
  // CHECK-NEXT: %[[L:.*]] = dist.matmul
  // CHECK-NEXT: %[[S:.*]] = coll.all_reduce sum %[[L]]
  // CHECK-NEXT: coll.yield %[[S]] : !dist.tensor<8x32xf32, @world, [replicated]>
  %y = coll.overlap chunks 4 order remote_first -> !dist.tensor<8x32xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<8x32xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x32xf32, @world, [local]> -> !dist.tensor<8x32xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x32xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x32xf32, @world, [replicated]>
}

// Dims the ranks do not divide (DESIGN §2: blocks of ceil(s/n), the last ranks hold
// fewer elements or none): 63 over 4 ranks, 2 rows over 4 ranks, nested over [2, 4].
// CHECK-LABEL: func.func @uneven_blocks
func.func @uneven_blocks(%x: !dist.tensor<63x2xf32, @world, [local]>, %h: !dist.tensor<9xf32, @grid, [local, local]>) {
  // CHECK: coll.reduce_scatter sum %{{.*}} dim 0 : !dist.tensor<63x2xf32, @world, [local]> -> !dist.tensor<63x2xf32, @world, [sliced<0>]>
  %s = coll.reduce_scatter sum %x dim 0 : !dist.tensor<63x2xf32, @world, [local]> -> !dist.tensor<63x2xf32, @world, [sliced<0>]>
  // CHECK: coll.all_to_all %{{.*}} dim 1 : !dist.tensor<63x2xf32, @world, [sliced<0>]> -> !dist.tensor<63x2xf32, @world, [sliced<1>]>
  %t = coll.all_to_all %s dim 1 : !dist.tensor<63x2xf32, @world, [sliced<0>]> -> !dist.tensor<63x2xf32, @world, [sliced<1>]>
  // CHECK: coll.reduce_scatter sum %{{.*}} dim 0 axes [1, 0] : !dist.tensor<9xf32, @grid, [local, local]> -> !dist.tensor<9xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  %n = coll.reduce_scatter sum %h dim 0 axes [1, 0] : !dist.tensor<9xf32, @grid, [local, local]> -> !dist.tensor<9xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  func.return
}
