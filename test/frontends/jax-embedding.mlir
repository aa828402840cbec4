// RUN: distir-import %s | filecheck %s

// JAX's embedding as one_hot(ids) @ table with the table sliced by rows (vocabulary
// parallel): the iota behind the one-hot is sliced like the rows, each rank multiplies
// its part, one all-reduce sums them.

// CHECK-LABEL: func.func @main
// CHECK:         dist.iota dim 1 : () -> !dist.tensor<1x32xi32, @mesh, [sliced<1>]>
// CHECK:         arith.cmpi eq
// CHECK:         %[[E:.*]] = dist.matmul %{{.*}}, %arg1 : (!dist.tensor<8x32xf32, @mesh, [sliced<1>]>, !dist.tensor<32x16xf32, @mesh, [sliced<0>]>) -> !dist.tensor<8x16xf32, @mesh, [local]>
// CHECK-NEXT:    coll.all_reduce sum %[[E]]

module @jit_embedding attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8xi32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg1: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x16xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = call @_one_hot(%arg0) : (tensor<8xi32>) -> tensor<8x32xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
    return %1 : tensor<8x16xf32>
  }
  func.func private @_one_hot(%arg0: tensor<8xi32>) -> tensor<8x32xf32> {
    %0 = stablehlo.broadcast_in_dim %arg0, dims = [0] : (tensor<8xi32>) -> tensor<8x1xi32>
    %1 = stablehlo.iota dim = 1 : tensor<1x32xi32>
    %2 = stablehlo.broadcast_in_dim %0, dims = [0, 1] : (tensor<8x1xi32>) -> tensor<8x32xi32>
    %3 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x32xi32>) -> tensor<8x32xi32>
    %4 = stablehlo.compare EQ, %2, %3, SIGNED : (tensor<8x32xi32>, tensor<8x32xi32>) -> tensor<8x32xi1>
    %5 = stablehlo.convert %4 : (tensor<8x32xi1>) -> tensor<8x32xf32>
    return %5 : tensor<8x32xf32>
  }
}
