// RUN: distir-import %s | filecheck %s

// Loops are unrolled at import (frontends/control_flow.py): a scan of two layers, as
// lax.scan lowers it, is two matmuls on the two layers' weights (the counter is folded,
// so each dynamic_slice is a static extract_slice), and its per-layer outputs (sums over
// the x-sliced batch: partial) are one concat, reduced once after it; a branch on a predicate computed at run time is both branches and a select.

// CHECK-LABEL: func.func @scan(
// CHECK:         %[[W0:.*]] = dist.extract_slice %arg0 offsets [0, 0, 0]
// CHECK:         %[[M0:.*]] = dist.matmul %arg1, %{{.*}} :
// CHECK:         %[[H0:.*]] = dist.map(%[[M0]])
// CHECK:           math.tanh
// CHECK:         %[[W1:.*]] = dist.extract_slice %arg0 offsets [1, 0, 0]
// CHECK:         %[[M1:.*]] = dist.matmul %[[H0]], %{{.*}} :
// CHECK:         %[[H1:.*]] = dist.map(%[[M1]])
// CHECK-NOT:     dist.matmul
// CHECK:         %[[YS:.*]] = dist.concat %{{.*}}, %{{.*}} dim 0 : {{.*}} -> !dist.tensor<2x8xf32, @mesh, [local]>
// CHECK:         %[[R:.*]] = coll.all_reduce sum %[[YS]]
// CHECK:         func.return %[[H1]], %[[R]]

// CHECK-LABEL: func.func @branch(
// CHECK-DAG:     math.exp
// CHECK-DAG:     arith.mulf
// CHECK:         dist.map(%{{.*}}, %{{.*}}, %{{.*}}) : (!dist.tensor<i32, @mesh, [replicated]>
// CHECK:           %[[EQ:.*]] = arith.cmpi eq
// CHECK:           arith.select %[[EQ]]

sdy.mesh @mesh = <["x"=2]>
func.func public @scan(%arg0: tensor<2x8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}, %arg1: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<4x8xf32>, tensor<2x8xf32>) {
  %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
  %c = stablehlo.constant dense<0> : tensor<i32>
  %1:4 = stablehlo.while(%iterArg = %arg0, %iterArg_0 = %c, %iterArg_1 = %arg1, %iterArg_2 = %0) : tensor<2x8x8xf32>, tensor<i32>, tensor<4x8xf32>, tensor<2x8xf32>
  cond {
    %c_3 = stablehlo.constant dense<2> : tensor<i32>
    %2 = stablehlo.compare LT, %iterArg_0, %c_3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %2 : tensor<i1>
  } do {
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %2 = stablehlo.dynamic_slice %iterArg, %iterArg_0, %c_0, %c_0, sizes = [1, 8, 8] : (tensor<2x8x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x8x8xf32>
    %3 = stablehlo.reshape %2 : (tensor<1x8x8xf32>) -> tensor<8x8xf32>
    %4 = stablehlo.dot_general %iterArg_1, %3, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %5 = stablehlo.tanh %4 : tensor<4x8xf32>
    %6 = stablehlo.reduce(%5 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<4x8xf32>, tensor<f32>) -> tensor<8xf32>
    %7 = stablehlo.reshape %6 : (tensor<8xf32>) -> tensor<1x8xf32>
    %8 = stablehlo.dynamic_update_slice %iterArg_2, %7, %iterArg_0, %c_0 : (tensor<2x8xf32>, tensor<1x8xf32>, tensor<i32>, tensor<i32>) -> tensor<2x8xf32>
    %c_3 = stablehlo.constant dense<1> : tensor<i32>
    %9 = stablehlo.add %iterArg_0, %c_3 : tensor<i32>
    stablehlo.return %iterArg, %9, %5, %8 : tensor<2x8x8xf32>, tensor<i32>, tensor<4x8xf32>, tensor<2x8xf32>
  }
  return %1#2, %1#3 : tensor<4x8xf32>, tensor<2x8xf32>
}

func.func public @branch(%arg0: tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}, %arg1: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<4x8xf32> {
  %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %0 = stablehlo.compare GT, %arg0, %cst, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %1 = stablehlo.convert %0 : (tensor<i1>) -> tensor<i32>
  %2 = "stablehlo.case"(%1) ({
    %3 = stablehlo.exponential %arg1 : tensor<4x8xf32>
    stablehlo.return %3 : tensor<4x8xf32>
  }, {
    %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %3 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
    %4 = stablehlo.multiply %arg1, %3 : tensor<4x8xf32>
    stablehlo.return %4 : tensor<4x8xf32>
  }) : (tensor<i32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
