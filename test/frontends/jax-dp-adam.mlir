// RUN: distir-import %s | filecheck %s

// JAX's data-parallel Adam: the gradient of a batch-sliced loss holds partial sums; they
// pass the transpose unreduced and one all-reduce comes right before the update (where
// CoCoNet's fuse-allreduce applies).

// CHECK-LABEL: func.func @main
// CHECK:         %[[G:.*]] = dist.matmul %{{.*}} -> !dist.tensor<8x16xf32, @mesh, [local]>
// CHECK-NEXT:    %[[T:.*]] = dist.transpose %[[G]] perm [1, 0] : {{.*}} -> !dist.tensor<16x8xf32, @mesh, [local]>
// CHECK:         coll.all_reduce sum %[[T]]
// CHECK-NOT:     coll.

module @jit_dp_adam attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg2: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg3: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg4: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<16x8xf32> {jax.result_info = "result[0]", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, tensor<16x8xf32> {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, tensor<16x8xf32> {jax.result_info = "result[2]", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg3, %arg0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x16xf32>, tensor<16x8xf32>) -> tensor<32x8xf32>
    %1 = stablehlo.subtract %0, %arg4 : tensor<32x8xf32>
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<32x8xf32>
    %3 = stablehlo.multiply %2, %1 : tensor<32x8xf32>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_1 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %4 = stablehlo.divide %cst_0, %cst_1 : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %4, dims = [] : (tensor<f32>) -> tensor<32x8xf32>
    %6 = stablehlo.multiply %5, %3 : tensor<32x8xf32>
    %7 = stablehlo.dot_general %6, %arg3, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<32x8xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
    %8 = stablehlo.transpose %7, dims = [1, 0] : (tensor<8x16xf32>) -> tensor<16x8xf32>
    %cst_2 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %10 = stablehlo.multiply %9, %arg1 : tensor<16x8xf32>
    %cst_3 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %11 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %12 = stablehlo.multiply %11, %8 : tensor<16x8xf32>
    %13 = stablehlo.add %10, %12 : tensor<16x8xf32>
    %cst_4 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %15 = stablehlo.multiply %14, %arg2 : tensor<16x8xf32>
    %cst_5 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %16 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %17 = stablehlo.multiply %16, %8 : tensor<16x8xf32>
    %18 = stablehlo.multiply %17, %8 : tensor<16x8xf32>
    %19 = stablehlo.add %15, %18 : tensor<16x8xf32>
    %cst_6 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %20 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %21 = stablehlo.multiply %20, %13 : tensor<16x8xf32>
    %22 = stablehlo.sqrt %19 : tensor<16x8xf32>
    %cst_7 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %23 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %24 = stablehlo.add %22, %23 : tensor<16x8xf32>
    %25 = stablehlo.divide %21, %24 : tensor<16x8xf32>
    %26 = stablehlo.subtract %arg0, %25 : tensor<16x8xf32>
    return %26, %13, %19 : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
  }
}
