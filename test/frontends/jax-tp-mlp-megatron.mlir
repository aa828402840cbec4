// RUN: distir-import %s | filecheck %s

// Megatron's MLP written in JAX at examples/megatron_mlp.mlir's shapes (16-way tensor
// parallelism; jax.ShapeDtypeStruct arguments, so only the types carry the sizes):
// test_import_tune.py tunes it against the example.

// CHECK-LABEL: func.func @main
// CHECK:         dist.matmul %arg0, %arg1 : {{.*}} -> !dist.tensor<4x512x4096xf32, @mesh, [sliced<2>]>
// CHECK:         math.tanh
// CHECK:         %[[Y:.*]] = dist.matmul %{{.*}}, %arg3 : {{.*}} -> !dist.tensor<4x512x1024xf32, @mesh, [local]>
// CHECK-NEXT:    coll.all_reduce sum %[[Y]]
// CHECK-NOT:     coll.

module @jit_mlp attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["tp"=16]> {stablehlo.mesh = {axes = [{name = "tp", size = 16 : i64}]}}
  func.func public @main(%arg0: tensor<4x512x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}, %arg1: tensor<1024x4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"tp"}]>}, %arg2: tensor<4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tp"}]>}, %arg3: tensor<4096x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tp"}, {}]>}, %arg4: tensor<1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> (tensor<4x512x1024xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x512x1024xf32>, tensor<1024x4096xf32>) -> tensor<4x512x4096xf32>
    %1 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<4096xf32>) -> tensor<1x1x4096xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1, 2] : (tensor<1x1x4096xf32>) -> tensor<4x512x4096xf32>
    %3 = stablehlo.add %0, %2 : tensor<4x512x4096xf32>
    %4 = stablehlo.multiply %3, %3 : tensor<4x512x4096xf32>
    %5 = stablehlo.multiply %4, %3 : tensor<4x512x4096xf32>
    %cst = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %6 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x512x4096xf32>
    %7 = stablehlo.multiply %6, %5 : tensor<4x512x4096xf32>
    %8 = stablehlo.add %3, %7 : tensor<4x512x4096xf32>
    %cst_0 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4x512x4096xf32>
    %10 = stablehlo.multiply %9, %8 : tensor<4x512x4096xf32>
    %11 = stablehlo.tanh %10 : tensor<4x512x4096xf32>
    %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<4x512x4096xf32>
    %13 = stablehlo.add %12, %11 : tensor<4x512x4096xf32>
    %cst_2 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<4x512x4096xf32>
    %15 = stablehlo.multiply %14, %13 : tensor<4x512x4096xf32>
    %16 = stablehlo.multiply %3, %15 : tensor<4x512x4096xf32>
    %17 = stablehlo.dot_general %16, %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x512x4096xf32>, tensor<4096x1024xf32>) -> tensor<4x512x1024xf32>
    %18 = stablehlo.broadcast_in_dim %arg4, dims = [2] : (tensor<1024xf32>) -> tensor<1x1x1024xf32>
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1, 2] : (tensor<1x1x1024xf32>) -> tensor<4x512x1024xf32>
    %20 = stablehlo.add %17, %19 : tensor<4x512x1024xf32>
    %21 = stablehlo.add %20, %arg0 : tensor<4x512x1024xf32>
    return %21 : tensor<4x512x1024xf32>
  }
}

