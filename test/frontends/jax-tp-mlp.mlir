// RUN: distir-import %s | filecheck %s

// examples/jax/tp_mlp.py's program as JAX writes it (python tp_mlp.py): Megatron's MLP
// on 4 devices. JAX numbers its values (%0, %17); the importer names each value after
// the op that computes it, and partition's collectives after theirs, so that the
// tuner's pipelines name values that read as names (`split-allreduce{targets=all_reduce}`):
// test/tools/test_pipeline_roundtrip.py tunes it.

// CHECK-LABEL: func.func @main
// CHECK:         %dot_general = dist.matmul %arg0, %arg1
// CHECK:         %[[Y:dot_general_1]] = dist.matmul %{{.*}}, %arg3
// CHECK-NEXT:    %all_reduce = coll.all_reduce sum %[[Y]]
// CHECK-NEXT:    func.return %all_reduce

module @jit_mlp attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["tp"=4]> {stablehlo.mesh = {axes = [{name = "tp", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"tp"}]>}, %arg2: tensor<256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tp"}]>}, %arg3: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tp"}, {}]>}) -> (tensor<8x64xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x64xf32>, tensor<64x256xf32>) -> tensor<8x256xf32>
    %1 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<256xf32>) -> tensor<1x256xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x256xf32>) -> tensor<8x256xf32>
    %3 = stablehlo.add %0, %2 : tensor<8x256xf32>
    %4 = stablehlo.multiply %3, %3 : tensor<8x256xf32>
    %5 = stablehlo.multiply %4, %3 : tensor<8x256xf32>
    %cst = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %6 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x256xf32>
    %7 = stablehlo.multiply %6, %5 : tensor<8x256xf32>
    %8 = stablehlo.add %3, %7 : tensor<8x256xf32>
    %cst_0 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<8x256xf32>
    %10 = stablehlo.multiply %9, %8 : tensor<8x256xf32>
    %11 = stablehlo.tanh %10 : tensor<8x256xf32>
    %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<8x256xf32>
    %13 = stablehlo.add %12, %11 : tensor<8x256xf32>
    %cst_2 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<8x256xf32>
    %15 = stablehlo.multiply %14, %13 : tensor<8x256xf32>
    %16 = stablehlo.multiply %3, %15 : tensor<8x256xf32>
    %17 = stablehlo.dot_general %16, %arg3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x256xf32>, tensor<256x64xf32>) -> tensor<8x64xf32>
    return %17 : tensor<8x64xf32>
  }
}
