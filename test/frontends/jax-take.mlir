// RUN: distir-import %s | filecheck %s

// JAX's table[ids] (stablehlo.gather) with the table sliced by rows: the lookup is a
// dist.embedding_bag of one-row bags on the rows each device holds (partial sums), the
// ids normalised (negative ones count from the end) and clamped into the table, and one
// all-reduce sums the parts.

// CHECK-LABEL: func.func @main(
// CHECK:         %[[SAFE:.*]] = dist.map(%{{.*}}) : (!dist.tensor<4x1xi32
// CHECK:           arith.maxsi
// CHECK:           arith.minsi
// CHECK:         %[[BAGS:.*]] = dist.embedding_bag %arg0, %[[SAFE]] : (!dist.tensor<16x8xf32, @mesh, [sliced<0>]>, !dist.tensor<4x1xi32, @mesh, [replicated]>) -> !dist.tensor<4x8xf32, @mesh, [local]>
// CHECK:         coll.all_reduce sum %[[BAGS]]
// CHECK-NOT:     coll.

module @jit_g attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<4xi32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> (tensor<4x8xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<4xi32>
    %1 = stablehlo.compare LT, %arg1, %0, SIGNED : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
    %c_0 = stablehlo.constant dense<16> : tensor<i32>
    %2 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<4xi32>
    %3 = stablehlo.add %arg1, %2 : tensor<4xi32>
    %4 = stablehlo.select %1, %3, %arg1 : tensor<4xi1>, tensor<4xi32>
    %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<4xi32>) -> tensor<4x1xi32>
    %6 = "stablehlo.gather"(%arg0, %5) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<16x8xf32>, tensor<4x1xi32>) -> tensor<4x8xf32>
    return %6 : tensor<4x8xf32>
  }
}
