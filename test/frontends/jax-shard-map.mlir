// RUN: distir-import %s | filecheck %s

// JAX's shard_map: the body per device (every value local), its collectives as coll
// ops between dist.from_local/dist.to_local views of the devices' values.

// CHECK-LABEL: func.func @main
// CHECK-SAME:    (%arg0: !dist.tensor<8x16xf32, @mesh, [sliced<1>]>, %arg1: !dist.tensor<16x32xf32, @mesh, [sliced<0>]>) -> !dist.tensor<2x512xf32, @mesh, [sliced<1>]>
// CHECK:         %[[A:.*]] = dist.to_local %arg0 : {{.*}} -> !dist.tensor<8x4xf32, @mesh, [local]>
// CHECK:         %[[M:.*]] = dist.matmul %[[A]], %{{.*}} : {{.*}} -> !dist.tensor<8x32xf32, @mesh, [local]>
// CHECK-NEXT:    coll.all_reduce sum %[[M]]
// CHECK:         coll.all_gather
// CHECK:         coll.reduce_scatter sum %{{.*}} dim 0
// CHECK:         coll.all_to_all %{{.*}} dim 0
// CHECK:         coll.all_reduce max
// CHECK:         %[[R:.*]] = dist.from_local %{{.*}} : !dist.tensor<2x128xf32, @mesh, [local]> -> !dist.tensor<2x512xf32, @mesh, [sliced<1>]>
// CHECK-NEXT:    func.return %[[R]]

module @jit_smap_body attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}, %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<2x512xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{}, {"x"}]>, <@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{}, {"x"}]>] manual_axes={"x"} (%arg2: tensor<8x4xf32>, %arg3: tensor<4x32xf32>) {
      %1 = stablehlo.dot_general %arg2, %arg3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x4xf32>, tensor<4x32xf32>) -> tensor<8x32xf32>
      %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %10 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %10 : tensor<f32>
      }) : (tensor<8x32xf32>) -> tensor<8x32xf32>
      %3 = "stablehlo.all_gather"(%2) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> : (tensor<8x32xf32>) -> tensor<32x32xf32>
      %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
      %4 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<32x32xf32>
      %5 = stablehlo.multiply %3, %4 : tensor<32x32xf32>
      %6 = "stablehlo.reduce_scatter"(%5) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %10 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %10 : tensor<f32>
      }) : (tensor<32x32xf32>) -> tensor<8x32xf32>
      %7 = "stablehlo.all_to_all"(%6) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, concat_dimension = 1 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, split_count = 4 : i64, split_dimension = 0 : i64}> : (tensor<8x32xf32>) -> tensor<2x128xf32>
      %8 = "stablehlo.all_reduce"(%7) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %10 = stablehlo.maximum %arg4, %arg5 : tensor<f32>
        stablehlo.return %10 : tensor<f32>
      }) : (tensor<2x128xf32>) -> tensor<2x128xf32>
      %9 = stablehlo.add %7, %8 : tensor<2x128xf32>
      sdy.return %9 : tensor<2x128xf32>
    } : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<2x512xf32>
    return %0 : tensor<2x512xf32>
  }
}
