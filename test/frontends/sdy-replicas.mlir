// RUN: distir-import %s | filecheck %s

// collective_permute without a channel handle permutes replicas: read where the module
// makes the mesh's four devices its replicas (test_device_order.py).
module @replicas attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {
  sdy.mesh @m = <["x"=4]>
  // the replicas 0..3 are the mesh's devices: each sends to the previous one
  // CHECK-LABEL: func.func @ring(
  // CHECK:         coll.permute %{{.*}} offset -1
  func.func @ring(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{"x"}]>] out_shardings=[<@m, [{"x"}]>] manual_axes={"x"} (%blk: tensor<2xf32>) {
      %p = "stablehlo.collective_permute"(%blk) <{source_target_pairs = dense<[[0, 3], [1, 0], [2, 1], [3, 2]]> : tensor<4x2xi64>}> : (tensor<2xf32>) -> tensor<2xf32>
      sdy.return %p : tensor<2xf32>
    } : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
