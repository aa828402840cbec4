// RUN: distir-import %s | filecheck %s

// jax.lax.ppermute on a 2x2 mesh (dp, tp), JAX 0.10.2's own text. The pairs name device
// ids (row-major over dp, tp): a permutation along one mesh axis, the same in every
// group along it, is a coll.permute over that axis of its coordinates; one that mixes
// the axes is over both, with the device ids as group ranks.

// CHECK-LABEL: func.func @main
// CHECK:         %[[A:.*]] = dist.to_local %arg0 : {{.*}} -> !dist.tensor<2x3xf32, @mesh, [local, local]>
// The swap within each dp row: [[0, 1], [1, 0], [2, 3], [3, 2]] is tp's rotation by 1.
// CHECK-NEXT:    %[[TP:.*]] = coll.permute %[[A]] offset 1 axes [1] :
// From dp row 0 to row 1 in each tp column: [[0, 2], [1, 3]]; row 0 gets zeros.
// CHECK-NEXT:    %[[DP:.*]] = coll.permute %[[A]] pairs {{\[}}[0, 1]] :
// CHECK:         %[[BOTH:.*]] = coll.permute %[[A]] pairs {{\[}}[0, 3], [1, 2], [3, 0]] axes [0, 1] :
// CHECK:         dist.map(%{{.*}}, %[[BOTH]])
module @jit_ppermute_2d attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["dp"=2, "tp"=2]> {stablehlo.mesh = {axes = [{name = "dp", size = 2 : i64}, {name = "tp", size = 2 : i64}]}}
  func.func public @main(%arg0: tensor<4x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {"tp"}]>}) -> (tensor<4x6xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"dp"}, {"tp"}]>] out_shardings=[<@mesh, [{"dp"}, {"tp"}]>] manual_axes={"dp", "tp"} (%arg1: tensor<2x3xf32>) {
      %1 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 1], [1, 0], [2, 3], [3, 2]]> : tensor<4x2xi64>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %2 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %cst = stablehlo.constant dense<3.000000e+00> : tensor<f32>
      %3 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
      %4 = stablehlo.multiply %3, %2 : tensor<2x3xf32>
      %5 = stablehlo.add %1, %4 : tensor<2x3xf32>
      %6 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 3], [3, 0], [1, 2]]> : tensor<3x2xi64>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %7 = stablehlo.subtract %5, %6 : tensor<2x3xf32>
      sdy.return %7 : tensor<2x3xf32>
    } : (tensor<4x6xf32>) -> tensor<4x6xf32>
    return %0 : tensor<4x6xf32>
  }
}
