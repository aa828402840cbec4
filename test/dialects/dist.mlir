// RUN: distir-opt %s | filecheck %s
// RUN: distir-opt %s | distir-opt | filecheck %s
// RUN: distir-opt %s --print-op-generic | distir-opt | filecheck %s
// RUN: xdsl-opt %s | filecheck %s
// Every dist op in its custom syntax; the printed form parses back to the same IR.

// CHECK: dist.mesh @world shape = [4]
// CHECK: dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]
// CHECK: dist.mesh @hw shape = [2, 2, 2, 2] axes = ["server", "cpu", "g0", "g1"]
// CHECK: dist.mesh @logical shape = [4, 4] axes = ["dp", "tp"] view @hw {{\[}}[1, 2], [0, 3]]
dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]
dist.mesh @hw shape = [2, 2, 2, 2] axes = ["server", "cpu", "g0", "g1"]
dist.mesh @logical shape = [4, 4] axes = ["dp", "tp"] view @hw [[1, 2], [0, 3]]

// CHECK-LABEL: func.func @primitives
func.func @primitives(%x: !dist.tensor<64x8xf32, @world, [local]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  // CHECK: %[[R:.*]] = dist.reduce max %{{.*}} : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %r = dist.reduce max %x : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  // CHECK: %[[S:.*]] = dist.slice %[[R]] dim 1 : {{.*}} -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  %s = dist.slice %r dim 1 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  // CHECK: %[[J:.*]] = dist.join %[[S]] : {{.*}} -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %j = dist.join %s : !dist.tensor<64x8xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  // CHECK: %[[ST:.*]] = dist.store %[[J]] rank 2 : {{.*}} -> !dist.tensor<64x8xf32, @world, [at<2>]>
  %st = dist.store %j rank 2 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [at<2>]>
  // CHECK: %[[L:.*]] = dist.load %[[ST]] : {{.*}} -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %l = dist.load %st : !dist.tensor<64x8xf32, @world, [at<2>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  // CHECK: %[[P:.*]] = dist.repl %[[L]] : {{.*}} -> !dist.tensor<64x8xf32, @world, [replicated]>
  %p = dist.repl %l : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  // CHECK: %[[D:.*]] = dist.drop %[[P]] : {{.*}} -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %d = dist.drop %p : !dist.tensor<64x8xf32, @world, [replicated]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %q = dist.repl %d : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  func.return %q : !dist.tensor<64x8xf32, @world, [replicated]>
}

// CHECK-LABEL: func.func @primitives_on_second_axis
func.func @primitives_on_second_axis(%x: !dist.tensor<8x6xf32, @grid, [at<0>, local]>) -> !dist.tensor<8x6xf32, @grid, [at<0>, sliced<1>]> {
  // CHECK: dist.reduce sum %{{.*}} axis 1 : {{.*}} -> !dist.tensor<8x6xf32, @grid, [at<0>, unplaced]>
  %r = dist.reduce sum %x axis 1 : !dist.tensor<8x6xf32, @grid, [at<0>, local]> -> !dist.tensor<8x6xf32, @grid, [at<0>, unplaced]>
  // CHECK: dist.slice %{{.*}} dim 1 axis 1 : {{.*}} -> !dist.tensor<8x6xf32, @grid, [at<0>, sliced<1>]>
  %s = dist.slice %r dim 1 axis 1 : !dist.tensor<8x6xf32, @grid, [at<0>, unplaced]> -> !dist.tensor<8x6xf32, @grid, [at<0>, sliced<1>]>
  func.return %s : !dist.tensor<8x6xf32, @grid, [at<0>, sliced<1>]>
}

// CHECK-LABEL: func.func @nested_slicing
func.func @nested_slicing(%x: !dist.tensor<16xf32, @hw, [unplaced, unplaced, replicated, replicated]>) -> !dist.tensor<16xf32, @hw, [sliced<0, 1>, sliced<0, 0>, replicated, replicated]> {
  // CHECK: dist.slice %{{.*}} dim 0 axis 1 : {{.*}} -> !dist.tensor<16xf32, @hw, [unplaced, sliced<0>, replicated, replicated]>
  %a = dist.slice %x dim 0 axis 1 : !dist.tensor<16xf32, @hw, [unplaced, unplaced, replicated, replicated]> -> !dist.tensor<16xf32, @hw, [unplaced, sliced<0>, replicated, replicated]>
  // CHECK: dist.slice %{{.*}} dim 0 : {{.*}} -> !dist.tensor<16xf32, @hw, [sliced<0, 1>, sliced<0, 0>, replicated, replicated]>
  %b = dist.slice %a dim 0 : !dist.tensor<16xf32, @hw, [unplaced, sliced<0>, replicated, replicated]> -> !dist.tensor<16xf32, @hw, [sliced<0, 1>, sliced<0, 0>, replicated, replicated]>
  func.return %b : !dist.tensor<16xf32, @hw, [sliced<0, 1>, sliced<0, 0>, replicated, replicated]>
}

// CHECK-LABEL: func.func @map_broadcast_and_multi_result
func.func @map_broadcast_and_multi_result(%a: !dist.tensor<8x64xf16, @world, [sliced<1>]>, %b: !dist.tensor<64xf16, @world, [sliced<0>]>, %n: !dist.tensor<f16, @world, [replicated]>, %s: f16) -> (!dist.tensor<8x64xf16, @world, [sliced<1>]>, !dist.tensor<8x64xf16, @world, [sliced<1>]>) {
  // CHECK: %{{.*}}, %{{.*}} = dist.map(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!dist.tensor<8x64xf16, @world, [sliced<1>]>, !dist.tensor<64xf16, @world, [sliced<0>]>, !dist.tensor<f16, @world, [replicated]>, f16) -> (!dist.tensor<8x64xf16, @world, [sliced<1>]>, !dist.tensor<8x64xf16, @world, [sliced<1>]>) {
  // CHECK-NEXT: ^bb0(%{{.*}}: f16, %{{.*}}: f16, %{{.*}}: f16, %{{.*}}: f16):
  // CHECK: dist.yield %{{.*}}, %{{.*}} : f16, f16
  %c, %d = dist.map(%a, %b, %n, %s) : (!dist.tensor<8x64xf16, @world, [sliced<1>]>, !dist.tensor<64xf16, @world, [sliced<0>]>, !dist.tensor<f16, @world, [replicated]>, f16) -> (!dist.tensor<8x64xf16, @world, [sliced<1>]>, !dist.tensor<8x64xf16, @world, [sliced<1>]>) {
  ^bb0(%x: f16, %y: f16, %z: f16, %w: f16):
    %t = arith.addf %x, %y : f16
    %u = arith.mulf %t, %z : f16
    %v = math.sqrt %w : f16
    dist.yield %u, %v : f16, f16
  }
  func.return %c, %d : !dist.tensor<8x64xf16, @world, [sliced<1>]>, !dist.tensor<8x64xf16, @world, [sliced<1>]>
}

// CHECK-LABEL: func.func @local_ops
func.func @local_ops(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x32xf32, @world, [sliced<0>]>, %p: !dist.tensor<64xf32, @world, [replicated]>) -> (!dist.tensor<8x32xf16, @world, [local]>, !dist.tensor<f32, @world, [local]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  // CHECK: %[[MM:.*]] = dist.matmul %{{.*}}, %{{.*}} : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<8x32xf32, @world, [local]>
  %mm = dist.matmul %x, %w : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<8x32xf32, @world, [local]>
  // CHECK: dist.cast %[[MM]] : !dist.tensor<8x32xf32, @world, [local]> -> !dist.tensor<8x32xf16, @world, [local]>
  %h = dist.cast %mm : !dist.tensor<8x32xf32, @world, [local]> -> !dist.tensor<8x32xf16, @world, [local]>
  // CHECK: dist.reduce_tensor avg %{{.*}} dims [0, 1] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<f32, @world, [local]>
  %n = dist.reduce_tensor avg %x dims [0, 1] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<f32, @world, [local]>
  // CHECK: dist.take_slice %{{.*}} dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %ps = dist.take_slice %p dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return %h, %n, %ps : !dist.tensor<8x32xf16, @world, [local]>, !dist.tensor<f32, @world, [local]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// CHECK-LABEL: func.func @matmul_rules
func.func @matmul_rules(%x: !dist.tensor<4x8x64xbf16, @world, [sliced<0>]>, %w: !dist.tensor<64x32xbf16, @world, [replicated]>, %v: !dist.tensor<4x8x64xbf16, @world, [replicated]>, %u: !dist.tensor<64x32xbf16, @world, [sliced<1>]>) -> (!dist.tensor<4x8x32xbf16, @world, [sliced<0>]>, !dist.tensor<4x8x32xbf16, @world, [sliced<2>]>) {
  // CHECK: -> !dist.tensor<4x8x32xbf16, @world, [sliced<0>]>
  %a = dist.matmul %x, %w : (!dist.tensor<4x8x64xbf16, @world, [sliced<0>]>, !dist.tensor<64x32xbf16, @world, [replicated]>) -> !dist.tensor<4x8x32xbf16, @world, [sliced<0>]>
  // CHECK: -> !dist.tensor<4x8x32xbf16, @world, [sliced<2>]>
  %b = dist.matmul %v, %u : (!dist.tensor<4x8x64xbf16, @world, [replicated]>, !dist.tensor<64x32xbf16, @world, [sliced<1>]>) -> !dist.tensor<4x8x32xbf16, @world, [sliced<2>]>
  func.return %a, %b : !dist.tensor<4x8x32xbf16, @world, [sliced<0>]>, !dist.tensor<4x8x32xbf16, @world, [sliced<2>]>
}

// CHECK-LABEL: func.func @dropout_and_embeddings
func.func @dropout_and_embeddings(%t: !dist.tensor<100x16xf32, @world, [sliced<0>]>, %i: !dist.tensor<32x3xi64, @world, [replicated]>, %x: !dist.tensor<64xf64, @world, [at<1>]>) -> (!dist.tensor<32x16xf32, @world, [local]>, !dist.tensor<64xf64, @world, [at<1>]>) {
  // CHECK: dist.embedding_bag %{{.*}}, %{{.*}} : (!dist.tensor<100x16xf32, @world, [sliced<0>]>, !dist.tensor<32x3xi64, @world, [replicated]>) -> !dist.tensor<32x16xf32, @world, [local]>
  %e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<100x16xf32, @world, [sliced<0>]>, !dist.tensor<32x3xi64, @world, [replicated]>) -> !dist.tensor<32x16xf32, @world, [local]>
  // CHECK: dist.dropout %{{.*}} p 0.25 seed 9 : !dist.tensor<64xf64, @world, [at<1>]> -> !dist.tensor<64xf64, @world, [at<1>]>
  %d = dist.dropout %x p 0.25 seed 9 : !dist.tensor<64xf64, @world, [at<1>]> -> !dist.tensor<64xf64, @world, [at<1>]>
  func.return %e, %d : !dist.tensor<32x16xf32, @world, [local]>, !dist.tensor<64xf64, @world, [at<1>]>
}

// CHECK-LABEL: func.func @scatter_add
func.func @scatter_add(%i: !dist.tensor<32x1xi32, @world, [replicated]>, %u: !dist.tensor<32x16xf32, @world, [replicated]>, %j: !dist.tensor<32x1xi32, @world, [sliced<0>]>, %v: !dist.tensor<32x16xf32, @world, [sliced<0>]>) -> (!dist.tensor<100x16xf32, @world, [sliced<0>]>, !dist.tensor<100x16xf32, @world, [local]>) {
  // CHECK: dist.scatter_add %{{.*}}, %{{.*}} : (!dist.tensor<32x1xi32, @world, [replicated]>, !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<100x16xf32, @world, [sliced<0>]>
  %g = dist.scatter_add %i, %u : (!dist.tensor<32x1xi32, @world, [replicated]>, !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<100x16xf32, @world, [sliced<0>]>
  // CHECK: dist.scatter_add %{{.*}}, %{{.*}} : (!dist.tensor<32x1xi32, @world, [sliced<0>]>, !dist.tensor<32x16xf32, @world, [sliced<0>]>) -> !dist.tensor<100x16xf32, @world, [local]>
  %h = dist.scatter_add %j, %v : (!dist.tensor<32x1xi32, @world, [sliced<0>]>, !dist.tensor<32x16xf32, @world, [sliced<0>]>) -> !dist.tensor<100x16xf32, @world, [local]>
  func.return %g, %h : !dist.tensor<100x16xf32, @world, [sliced<0>]>, !dist.tensor<100x16xf32, @world, [local]>
}

// CHECK-LABEL: func.func @sort
func.func @sort(%x: !dist.tensor<8x16xf32, @world, [sliced<0>]>, %j: !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) {
  // CHECK: %{{.*}}, %{{.*}} = dist.sort %{{.*}}, %{{.*}} dim 1 : (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>)
  %s, %i = dist.sort %x, %j dim 1 : (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>)
  func.return %s, %i : !dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>
}

// Each device's own values (a manual computation's): scattered and sorted per device.
// CHECK-LABEL: func.func @per_device_scatter_add_and_sort
func.func @per_device_scatter_add_and_sort(%i: !dist.tensor<32x1xi32, @world, [local]>, %u: !dist.tensor<32x16xf32, @world, [local]>, %x: !dist.tensor<8x16xf32, @world, [local]>) -> (!dist.tensor<100x16xf32, @world, [local]>, !dist.tensor<8x16xf32, @world, [local]>) {
  // CHECK: dist.scatter_add %{{.*}}, %{{.*}} : (!dist.tensor<32x1xi32, @world, [local]>, !dist.tensor<32x16xf32, @world, [local]>) -> !dist.tensor<100x16xf32, @world, [local]>
  %g = dist.scatter_add %i, %u : (!dist.tensor<32x1xi32, @world, [local]>, !dist.tensor<32x16xf32, @world, [local]>) -> !dist.tensor<100x16xf32, @world, [local]>
  // CHECK: dist.sort %{{.*}} dim 1 : !dist.tensor<8x16xf32, @world, [local]> -> !dist.tensor<8x16xf32, @world, [local]>
  %s = dist.sort %x dim 1 : !dist.tensor<8x16xf32, @world, [local]> -> !dist.tensor<8x16xf32, @world, [local]>
  func.return %g, %s : !dist.tensor<100x16xf32, @world, [local]>, !dist.tensor<8x16xf32, @world, [local]>
}

// CHECK-LABEL: func.func @remesh_views
func.func @remesh_views(%x: !dist.tensor<64xi32, @logical, [sliced<0>, at<2>]>) -> !dist.tensor<64xi32, @hw, [at<1>, sliced<0>, sliced<0>, at<0>]> {
  // CHECK: dist.remesh %{{.*}} : !dist.tensor<64xi32, @logical, [sliced<0>, at<2>]> -> !dist.tensor<64xi32, @hw, [at<1>, sliced<0>, sliced<0>, at<0>]>
  %y = dist.remesh %x : !dist.tensor<64xi32, @logical, [sliced<0>, at<2>]> -> !dist.tensor<64xi32, @hw, [at<1>, sliced<0>, sliced<0>, at<0>]>
  func.return %y : !dist.tensor<64xi32, @hw, [at<1>, sliced<0>, sliced<0>, at<0>]>
}
