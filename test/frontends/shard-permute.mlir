// RUN: distir-import %s | filecheck %s

// MLIR shard's moves between devices in per-device programs, as coll.permute:
// shard.shift moves device i's tensor to device i + offset along shift_axis (wrapping
// around with `rotate`; without it a device with no source gets zeros), and a
// shard.recv takes the send before it: device `destination` gets device `source`'s
// tensor. test_shard.py checks what each device holds.

shard.grid @line(shape = 4)
shard.grid @sq(shape = 2x2)

// CHECK-LABEL: func.func @shift_line
// CHECK-SAME:    (%x: !dist.tensor<2x3xf32, @line, [local]>)
// CHECK:         %[[R:.*]] = coll.permute %x offset 1 : !dist.tensor<2x3xf32, @line, [local]> -> !dist.tensor<2x3xf32, @line, [local]>
// CHECK-NEXT:    %[[L:.*]] = coll.permute %x offset -1 :
// CHECK-NEXT:    %[[S:.*]] = coll.permute %x pairs {{\[}}[0, 2], [1, 3]] :
// CHECK-NEXT:    func.return %[[R]], %[[L]], %[[S]], %x :
func.func @shift_line(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = shard.shift %x on @line grid_axes = [0] shift_axis = 0 offset = 1 rotate : tensor<2x3xf32> -> tensor<2x3xf32>
  %1 = shard.shift %x on @line grid_axes = [0] shift_axis = 0 offset = -5 rotate : tensor<2x3xf32> -> tensor<2x3xf32>
  %2 = shard.shift %x on @line grid_axes = [0] shift_axis = 0 offset = 2 : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = shard.shift %x on @line grid_axes = [0] shift_axis = 0 offset = 4 rotate : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0, %1, %2, %3 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// Only shift_axis moves; the other grid axes of the group keep their coordinates.
// CHECK-LABEL: func.func @shift_grid
// CHECK:         %[[C:.*]] = coll.permute %x offset 1 axes [1] : !dist.tensor<3xf32, @sq, [local, local]> -> !dist.tensor<3xf32, @sq, [local, local]>
// CHECK-NEXT:    %[[D:.*]] = coll.permute %x pairs {{\[}}[1, 0]] :
// CHECK-NEXT:    dist.map(%[[C]], %[[D]])
func.func @shift_grid(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = shard.shift %x on @sq grid_axes = [0, 1] shift_axis = 1 offset = 1 rotate : tensor<3xf32> -> tensor<3xf32>
  %1 = shard.shift %x on @sq grid_axes = [0] shift_axis = 0 offset = -1 : tensor<3xf32> -> tensor<3xf32>
  %2 = arith.addf %0, %1 : tensor<3xf32>
  return %2 : tensor<3xf32>
}

// Device (0, 1) to device (1, 0) (group ranks 1 and 2 over axes [0, 1]); then, in each
// row, device 1 to device 0.
// CHECK-LABEL: func.func @send_recv
// CHECK:         %[[A:.*]] = coll.permute %x pairs {{\[}}[1, 2]] axes [0, 1] :
// CHECK-NEXT:    %[[B:.*]] = coll.permute %x pairs {{\[}}[1, 0]] axes [1] :
// CHECK-NEXT:    dist.map(%[[A]], %[[B]])
func.func @send_recv(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = shard.send %x on @sq grid_axes = [0, 1] destination = [1, 0] : (tensor<4xf32>) -> tensor<4xf32>
  %1 = shard.recv %x on @sq grid_axes = [0, 1] source = [0, 1] : (tensor<4xf32>) -> tensor<4xf32>
  %2 = shard.send %0 on @sq grid_axes = [1] destination = [0] : (tensor<4xf32>) -> tensor<4xf32>
  %3 = shard.recv %x on @sq grid_axes = [1] source = [1] : (tensor<4xf32>) -> tensor<4xf32>
  %4 = arith.addf %1, %3 : tensor<4xf32>
  return %4 : tensor<4xf32>
}
