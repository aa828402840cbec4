// RUN: distir-import %s | filecheck %s

// JAX's self-attention (jax_programs.py: heads over x, Megatron's attention block), as
// jax.jit(f).lower(...).as_text() prints it. The projections are column-sliced, so the
// heads are sliced (the reshape keeps the slicing on the head dim), the score and
// softmax computations run per head, and one all-reduce follows the output projection.

// CHECK-LABEL: func.func @main
// CHECK:         %[[Q:.*]] = dist.matmul %arg0, %arg1 : {{.*}} -> !dist.tensor<2x8x16xf32, @mesh, [sliced<2>]>
// CHECK-NEXT:    dist.reshape %[[Q]] : {{.*}} -> !dist.tensor<2x8x4x4xf32, @mesh, [sliced<2>]>
// CHECK:         dist.matmul %{{.*}}, %{{.*}} : (!dist.tensor<2x4x8x4xf32, @mesh, [sliced<1>]>, !dist.tensor<2x4x4x8xf32, @mesh, [sliced<1>]>) -> !dist.tensor<2x4x8x8xf32, @mesh, [sliced<1>]>
// CHECK:         dist.reduce_tensor max %{{.*}} dims [3] : {{.*}}[sliced<1>]> -> !dist.tensor<2x4x8xf32, @mesh, [sliced<1>]>
// CHECK:         %[[O:.*]] = dist.matmul %{{.*}}, %arg4 : {{.*}} -> !dist.tensor<2x8x16xf32, @mesh, [local]>
// CHECK-NEXT:    %[[R:.*]] = coll.all_reduce sum %[[O]]
// CHECK-NEXT:    func.return %[[R]]
// CHECK-NOT:     coll.

module @jit_attention attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<2x8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}, %arg1: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}, %arg2: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}, %arg3: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}, %arg4: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<2x8x16xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %1 = stablehlo.reshape %0 : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
    %2 = stablehlo.dot_general %arg0, %arg2, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %3 = stablehlo.reshape %2 : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
    %4 = stablehlo.dot_general %arg0, %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %5 = stablehlo.reshape %4 : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
    %6 = stablehlo.dot_general %1, %3, batching_dims = [0, 2] x [0, 2], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>) -> tensor<2x4x8x8xf32>
    %cst = stablehlo.constant dense<4.000000e+00> : tensor<f32>
    %7 = stablehlo.sqrt %cst : tensor<f32>
    %8 = stablehlo.convert %7 : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [] : (tensor<f32>) -> tensor<2x4x8x8xf32>
    %10 = stablehlo.divide %6, %9 : tensor<2x4x8x8xf32>
    %cst_0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %11 = stablehlo.reduce(%10 init: %cst_0) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
    %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<2x4x8xf32>
    %13 = stablehlo.maximum %12, %11 : tensor<2x4x8xf32>
    %14 = stablehlo.broadcast_in_dim %13, dims = [0, 1, 2] : (tensor<2x4x8xf32>) -> tensor<2x4x8x1xf32>
    %15 = stablehlo.broadcast_in_dim %14, dims = [0, 1, 2, 3] : (tensor<2x4x8x1xf32>) -> tensor<2x4x8x8xf32>
    %16 = stablehlo.subtract %10, %15 : tensor<2x4x8x8xf32>
    %17 = stablehlo.exponential %16 : tensor<2x4x8x8xf32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %18 = stablehlo.reduce(%17 init: %cst_2) applies stablehlo.add across dimensions = [3] : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1, 2] : (tensor<2x4x8xf32>) -> tensor<2x4x8x1xf32>
    %20 = stablehlo.broadcast_in_dim %19, dims = [0, 1, 2, 3] : (tensor<2x4x8x1xf32>) -> tensor<2x4x8x8xf32>
    %21 = stablehlo.divide %17, %20 : tensor<2x4x8x8xf32>
    %22 = stablehlo.dot_general %5, %21, batching_dims = [0, 2] x [0, 1], contracting_dims = [1] x [3], precision = [DEFAULT, DEFAULT] : (tensor<2x8x4x4xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x4x8xf32>
    %23 = stablehlo.transpose %22, dims = [0, 3, 1, 2] : (tensor<2x4x4x8xf32>) -> tensor<2x8x4x4xf32>
    %24 = stablehlo.reshape %23 : (tensor<2x8x4x4xf32>) -> tensor<2x8x16xf32>
    %25 = stablehlo.dot_general %24, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    return %25 : tensor<2x8x16xf32>
  }
}
