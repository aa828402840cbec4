// RUN: distir-import %s | filecheck %s

// A language model's cross-entropy as JAX lowers it: take_along_axis of the log-probs
// [B, S, V] with the labels [B, S, 1] (a gather with two batching dims), and its
// gradient (a scatter with two batching dims), on a dp x tp mesh with the batch over
// dp and the vocabulary over tp. The batching dims B and S are merged into one table
// dim of dist.embedding_bag / dist.scatter_add (B, sliced, stays outermost): the
// lookup adds the rows each tp rank holds (partial sums, one all-reduce over tp), the
// gradient adds into the rows each rank holds (no collective); nothing is gathered.

// CHECK-LABEL: func.func @main(
// CHECK:         %[[TAB:[a-z_0-9]+]] = dist.reshape %arg0 : {{.*}} -> !dist.tensor<32x32x1xf32, @mesh, [sliced<0>, sliced<1>]>
// CHECK:         %[[IDS:[a-z_0-9]+]] = dist.reshape %arg1 : {{.*}} -> !dist.tensor<32x1x1xi32, @mesh, [sliced<0>, replicated]>
// CHECK:         %[[SAFE:[a-z_0-9]+]] = dist.map(%[[IDS]])
// CHECK:           arith.maxsi
// CHECK:           arith.minsi
// CHECK:         %[[BAGS:[a-z_0-9]+]] = dist.embedding_bag %[[TAB]], %[[SAFE]] : {{.*}} -> !dist.tensor<32x1x1xf32, @mesh, [sliced<0>, local]>
// CHECK:         %[[G:[a-z_0-9]+]] = dist.reshape %[[BAGS]] : {{.*}} -> !dist.tensor<4x8x1xf32, @mesh, [sliced<0>, local]>
// CHECK-NOT:     coll.
// CHECK:         %[[U:[a-z_0-9]+]] = dist.reshape %arg2 : {{.*}} -> !dist.tensor<32x1x1xf32, @mesh, [sliced<0>, replicated]>
// CHECK-NEXT:    %[[IDS2:[a-z_0-9]+]] = dist.reshape %arg1 : {{.*}} -> !dist.tensor<32x1x1xi32, @mesh, [sliced<0>, replicated]>
// CHECK-NEXT:    %[[ADD:[a-z_0-9]+]] = dist.scatter_add %[[IDS2]], %[[U]] : {{.*}} -> !dist.tensor<32x32x1xf32, @mesh, [sliced<0>, sliced<1>]>
// CHECK-NEXT:    %{{.*}} = dist.reshape %[[ADD]] : {{.*}} -> !dist.tensor<4x8x32xf32, @mesh, [sliced<0>, sliced<2>]>
// CHECK-NEXT:    %{{.*}} = coll.all_reduce sum %[[G]] axes [1]
// CHECK-NOT:     coll.
// CHECK:         func.return

module @jit_xent attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["dp"=2, "tp"=2]>
  func.func public @main(%arg0: tensor<4x8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}, {"tp"}]>}, %arg1: tensor<4x8x1x1xi32> {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}, {}, {}]>}, %arg2: tensor<4x8x1xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}, {}]>}) -> (tensor<4x8x1xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}, {}]>}, tensor<4x8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}, {"tp"}]>}) {
    %0 = "stablehlo.gather"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [2], operand_batching_dims = [0, 1], start_indices_batching_dims = [0, 1], start_index_map = [2], index_vector_dim = 3>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1, 1>}> : (tensor<4x8x32xf32>, tensor<4x8x1x1xi32>) -> tensor<4x8x1xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %z = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x8x32xf32>
    %1 = "stablehlo.scatter"(%z, %arg1, %arg2) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [2], input_batching_dims = [0, 1], scatter_indices_batching_dims = [0, 1], scatter_dims_to_operand_dims = [2], index_vector_dim = 3>, unique_indices = false}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4x8x32xf32>, tensor<4x8x1x1xi32>, tensor<4x8x1xf32>) -> tensor<4x8x32xf32>
    return %0, %1 : tensor<4x8x1xf32>, tensor<4x8x32xf32>
  }
}
