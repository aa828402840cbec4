// RUN: distir-import %s --remarks 2>%t.remarks | filecheck %s
// RUN: filecheck %s --check-prefix=REMARK < %t.remarks

// An annotated shard program (before MLIR's shard-partition): the annotations place the
// arguments and the result; partition places the rest, as Megatron does.

shard.grid @g(shape = 4)

// CHECK-LABEL: func.func @mlp
// CHECK-SAME:    (%x: !dist.tensor<8x16xf32, @g, [replicated]>, %w1: !dist.tensor<16x32xf32, @g, [sliced<1>]>, %w2: !dist.tensor<32x16xf32, @g, [sliced<0>]>)
// CHECK:         %[[H:.*]] = dist.matmul %x, %w1 : {{.*}} -> !dist.tensor<8x32xf32, @g, [sliced<1>]>
// CHECK-NEXT:    %[[T:.*]] = dist.map(%[[H]])
// CHECK:         %[[Y:.*]] = dist.matmul %[[T]], %w2 : {{.*}} -> !dist.tensor<8x16xf32, @g, [local]>
// CHECK-NEXT:    %[[R:.*]] = coll.all_reduce sum %[[Y]]
// CHECK-NEXT:    func.return %[[R]]
// REMARK:        shard-annotated.mlir:[[# @LINE + 10]]:8: remark: partition: inserted coll.all_reduce sum over axis 0 of %y (8x16xf32): [local] -> [replicated] for a sharding constraint
func.func @mlp(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32>, %w2: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %s1 = shard.sharding @g split_axes = [[], [0]] : !shard.sharding
  %s0 = shard.sharding @g split_axes = [[0]] : !shard.sharding
  %sr = shard.sharding @g split_axes = [[]] : !shard.sharding
  %a = shard.shard %w1 to %s1 : tensor<16x32xf32>
  %b = shard.shard %w2 to %s0 : tensor<32x16xf32>
  %h = stablehlo.dot_general %x, %a, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %t = math.tanh %h : tensor<8x32xf32>
  %y = stablehlo.dot_general %t, %b, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %r = shard.shard %y to %sr : tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}
