// RUN: distir-import %s | filecheck %s

// The gradient of an embedding lookup, as JAX writes it (stablehlo.scatter adding rows
// into zeros), with the table's gradient sliced by rows (vocabulary parallel): each
// device adds into the rows it holds, with no collective; the zeros are not added.

// CHECK-LABEL: func.func @main(
// CHECK:         %[[IDS:.*]] = dist.reshape %arg0 : !dist.tensor<6xi32, @mesh, [replicated]> -> !dist.tensor<6x1xi32, @mesh, [replicated]>
// CHECK:         %[[G:.*]] = dist.scatter_add %[[IDS]], %arg1 : (!dist.tensor<6x1xi32, @mesh, [replicated]>, !dist.tensor<6x8xf32, @mesh, [replicated]>) -> !dist.tensor<16x8xf32, @mesh, [sliced<0>]>
// CHECK-NOT:     dist.map(%[[G]]
// CHECK-NOT:     coll.
// CHECK:         func.return %[[G]]

module @jit_g attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<6xi32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg1: tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %1 = stablehlo.broadcast_in_dim %arg0, dims = [0] : (tensor<6xi32>) -> tensor<6x1xi32>
    %2 = "stablehlo.scatter"(%0, %1, %arg1) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %3 = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %3 : tensor<f32>
    }) : (tensor<16x8xf32>, tensor<6x1xi32>, tensor<6x8xf32>) -> tensor<16x8xf32>
    return %2 : tensor<16x8xf32>
  }
}
