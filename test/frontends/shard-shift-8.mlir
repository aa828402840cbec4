// RUN: distir-import %s | filecheck %s

// shard.shift on a ring of 8 devices (its own file: a run's ranks fit every grid of a
// module): a rotation by 3 is coll.permute offset 3; a shift by 5 without `rotate`
// moves devices 0..2 to 5..7 and gives devices 0..4 zeros. test_shard.py checks what
// each device holds.

shard.grid @ring8(shape = 8)

// CHECK-LABEL: func.func @shift_ring8
// CHECK:         coll.permute %x offset 3 : !dist.tensor<2xf32, @ring8, [local]>
// CHECK:         coll.permute %x pairs {{\[}}[0, 5], [1, 6], [2, 7]] :
func.func @shift_ring8(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = shard.shift %x on @ring8 grid_axes = [0] shift_axis = 0 offset = 3 rotate : tensor<2xf32> -> tensor<2xf32>
  %1 = shard.shift %x on @ring8 grid_axes = [0] shift_axis = 0 offset = 5 : tensor<2xf32> -> tensor<2xf32>
  %2 = arith.subf %0, %1 : tensor<2xf32>
  return %2 : tensor<2xf32>
}
