// RUN: distir-import %s | filecheck %s

// A per-device shard program (collectives, no annotations): every value is `local` on
// the grid axes; each collective views the devices' values as the placement it needs
// (dist.from_local), communicates, and gives each device its own value back
// (dist.to_local). test_shard.py checks what each device holds.

shard.grid @g(shape = 2x2)

// CHECK-LABEL: func.func @per_device
// CHECK-SAME:    (%x: !dist.tensor<4x8xf32, @g, [local, local]>) -> !dist.tensor<2x8xf32, @g, [local, local]>
// CHECK:         %[[AR:.*]] = coll.all_reduce max %x axes [1] : {{.*}} -> !dist.tensor<4x8xf32, @g, [local, replicated]>
// CHECK-NEXT:    %[[L0:.*]] = dist.to_local %[[AR]]
// CHECK-NEXT:    %[[S0:.*]] = dist.from_local %[[L0]] : {{.*}} -> !dist.tensor<8x8xf32, @g, [sliced<0>, local]>
// CHECK-NEXT:    %[[AG:.*]] = coll.all_gather %[[S0]] : {{.*}} -> !dist.tensor<8x8xf32, @g, [replicated, local]>
// CHECK-NEXT:    %[[L1:.*]] = dist.to_local %[[AG]]
// CHECK-NEXT:    %[[RS:.*]] = coll.reduce_scatter sum %[[L1]] dim 1 axes [1] : {{.*}} -> !dist.tensor<8x8xf32, @g, [local, sliced<1>]>
// CHECK-NEXT:    %[[L2:.*]] = dist.to_local %[[RS]] : {{.*}} -> !dist.tensor<8x4xf32, @g, [local, local]>
// CHECK-NEXT:    %[[S2:.*]] = dist.from_local %[[L2]] : {{.*}} -> !dist.tensor<8x8xf32, @g, [sliced<1>, local]>
// CHECK-NEXT:    %[[A2A:.*]] = coll.all_to_all %[[S2]] dim 0 : {{.*}} -> !dist.tensor<8x8xf32, @g, [sliced<0>, local]>
// CHECK-NEXT:    %[[L3:.*]] = dist.to_local %[[A2A]] : {{.*}} -> !dist.tensor<4x8xf32, @g, [local, local]>
// CHECK-NEXT:    %[[R:.*]] = dist.from_local %[[L3]] : {{.*}} -> !dist.tensor<4x8xf32, @g, [local, at<1>]>
// CHECK-NEXT:    %[[B:.*]] = coll.broadcast %[[R]] axes [1]
// CHECK:         dist.map
// CHECK:         dist.take_slice %{{.*}} dim 0 axis 1
func.func @per_device(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %0 = shard.all_reduce %x on @g grid_axes = [1] reduction = <max> : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = shard.all_gather %0 on @g grid_axes = [0] gather_axis = 0 : tensor<4x8xf32> -> tensor<8x8xf32>
  %2 = shard.reduce_scatter %1 on @g grid_axes = [1] scatter_axis = 1 : tensor<8x8xf32> -> tensor<8x4xf32>
  %3 = shard.all_to_all %2 on @g grid_axes = [0] split_axis = 0 concat_axis = 1 : tensor<8x4xf32> -> tensor<4x8xf32>
  %4 = shard.broadcast %3 on @g grid_axes = [1] root = [1] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = arith.addf %4, %3 : tensor<4x8xf32>
  %6 = shard.all_slice %4 on @g grid_axes = [1] slice_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  return %6 : tensor<2x8xf32>
}
