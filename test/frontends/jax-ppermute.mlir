// RUN: distir-import %s | filecheck %s

// jax.lax.ppermute in a shard_map body on 4 devices (JAX 0.10.2's own text):
// StableHLO's collective_permute names device ids of the mesh; a whole rotation is a
// coll.permute offset (+1 the ring step, -1 the reverse ring), a partial permutation
// keeps its pairs (device 2, which no pair targets, gets zeros).

// CHECK-LABEL: func.func @main
// CHECK:         %[[A:.*]] = dist.to_local %arg0 : {{.*}} -> !dist.tensor<2x4xf32, @mesh, [local]>
// CHECK-NEXT:    %[[RING:.*]] = coll.permute %[[A]] offset 1 : !dist.tensor<2x4xf32, @mesh, [local]> -> !dist.tensor<2x4xf32, @mesh, [local]>
// CHECK-NEXT:    %[[BACK:.*]] = coll.permute %[[A]] offset -1 :
// CHECK-NEXT:    %[[PART:.*]] = coll.permute %[[A]] pairs {{\[}}[0, 2], [1, 3], [3, 0]] :
// CHECK:         dist.map(%[[BACK]], %[[PART]])
// CHECK:         dist.map(%[[RING]],
// CHECK:         dist.from_local
module @jit_body attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x4xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%arg1: tensor<2x4xf32>) {
      %1 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>}> : (tensor<2x4xf32>) -> tensor<2x4xf32>
      %2 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 3], [1, 0], [2, 1], [3, 2]]> : tensor<4x2xi64>}> : (tensor<2x4xf32>) -> tensor<2x4xf32>
      %3 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 2], [1, 3], [3, 0]]> : tensor<3x2xi64>}> : (tensor<2x4xf32>) -> tensor<2x4xf32>
      %4 = stablehlo.multiply %2, %3 : tensor<2x4xf32>
      %5 = stablehlo.add %1, %4 : tensor<2x4xf32>
      sdy.return %5 : tensor<2x4xf32>
    } : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}

