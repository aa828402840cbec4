// RUN: distir-import %s | filecheck %s

// Meshes whose device_ids are not 0, 1, ...: a value's block at mesh position k (row-major)
// is held by device device_ids[k], which is distir's rank k for that value; replica_groups,
// source_target_pairs and partition_id name device ids (test_device_order.py).
module @device_order attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @a = <["x"=4]>
  sdy.mesh @b = <["x"=4], device_ids=[1, 2, 3, 0]>
  sdy.mesh @r = <["x"=4], device_ids=[3, 2, 1, 0]>

  // Shardy's collective permute between two meshes of different device orders: device
  // k+1 (mod 4) then holds the block device k held.
  // CHECK-LABEL: func.func @between(
  // CHECK-NOT:     coll.
  // CHECK:         func.return
  func.func @between(%arg0: tensor<4xi32> {sdy.sharding = #sdy.sharding<@a, [{"x"}]>}) -> (tensor<4xi32> {sdy.sharding = #sdy.sharding<@b, [{"x"}]>}) {
    %0 = sdy.collective_permute %arg0 out_sharding=<@b, [{"x"}]> : tensor<4xi32>
    return %0 : tensor<4xi32>
  }

  // A shard_map body on the reversed mesh: each device adds its id, passes its block to
  // the next device id (ring), and gathers the blocks of devices 3, 2, 1, 0 (in that order:
// positions 0 .. 3) to take rows 4:6.
  // position p is device 3 - p: the device ring d -> d + 1 is the position ring p -> p - 1,
  // and partition_id is 3 - p (an affine form of the rank, from an iota over the devices)
  // CHECK-LABEL: func.func @reversed(
  // CHECK:         %[[IOTA:.*]] = dist.iota dim 0 : () -> !dist.tensor<4xi64, @r, [sliced<0>]>
  // CHECK:         %[[RANK:.*]] = dist.reshape
  // CHECK:         dist.map(%[[RANK]])
  // CHECK:           arith.remsi
  // CHECK:           arith.constant -1 : i64
  // CHECK:         coll.permute %plus offset -1
  // CHECK:         coll.all_gather
  func.func @reversed(%arg0: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@r, [{"x"}, {}]>}) -> (tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@r, [{"x"}, {}]>}, tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@r, [{"x"}, {}]>}) {
    %0:2 = sdy.manual_computation(%arg0) in_shardings=[<@r, [{"x"}, {}]>] out_shardings=[<@r, [{"x"}, {}]>, <@r, [{"x"}, {}]>] manual_axes={"x"} (%blk: tensor<2x2xf32>) {
      %pid = stablehlo.partition_id : tensor<ui32>
      %id = stablehlo.convert %pid : (tensor<ui32>) -> tensor<f32>
      %idb = stablehlo.broadcast_in_dim %id, dims = [] : (tensor<f32>) -> tensor<2x2xf32>
      %plus = stablehlo.add %blk, %idb : tensor<2x2xf32>
      %next = "stablehlo.collective_permute"(%plus) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>}> : (tensor<2x2xf32>) -> tensor<2x2xf32>
      %g = "stablehlo.all_gather"(%blk) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[3, 2, 1, 0]]> : tensor<1x4xi64>, use_global_device_ids}> : (tensor<2x2xf32>) -> tensor<8x2xf32>
      %half = stablehlo.slice %g [4:6, 0:2] : (tensor<8x2xf32>) -> tensor<2x2xf32>
      sdy.return %next, %half : tensor<2x2xf32>, tensor<2x2xf32>
    } : (tensor<8x2xf32>) -> (tensor<8x2xf32>, tensor<8x2xf32>)
    return %0#0, %0#1 : tensor<8x2xf32>, tensor<8x2xf32>
  }
}
