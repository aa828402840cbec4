// RUN: distir-import %s | filecheck %s

// A module without sdy.mesh and without shardings is one device's program: a one-rank
// mesh, every value replicated, the functions and arguments keep their names. The
// element-wise ops JAX emits beyond arith's become dist.map bodies; StableHLO's integer
// edge cases (division by zero, shifts by the width or more) are explicit selects.

// CHECK:       dist.mesh @mesh shape = [1] axes = ["_"]

// CHECK-LABEL: func.func @chlo(%arg0: !dist.tensor<4x8xf32, @mesh, [replicated]>)
// CHECK:         dist.map(%arg0)
// CHECK:           %[[SQ:.*]] = arith.mulf %[[X:.*]], %[[X]] : f32
// CHECK:         dist.map(
// CHECK:           math.erfc
// CHECK:         dist.map(
// CHECK:           math.erf
// CHECK:         dist.map(
// CHECK:           math.tan
func.func public @chlo(%arg0: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = chlo.square %arg0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = chlo.erfc %arg0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = chlo.erf %arg0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %3 = chlo.tan %arg0 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @floats(
// CHECK:         dist.map(%arg0)
// CHECK:           %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK:           %[[ABS:.*]] = math.absf
// CHECK:           arith.cmpf one, %[[ABS]], %[[INF]] : f32
// CHECK:         dist.map(%arg0, %arg1)
// CHECK:           arith.remf
// CHECK:         dist.map(%arg0)
// CHECK:           %[[BITS:.*]] = arith.bitcast %{{.*}} : f32 to i32
// CHECK:         dist.map(%arg0)
// CHECK:           arith.bitcast %{{.*}} : f32 to i32
// CHECK:           arith.bitcast %{{.*}} : i32 to f32
// CHECK:           arith.cmpf uno
func.func public @floats(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xi32>, tensor<4x8xf32>) {
  %0 = stablehlo.is_finite %arg0 : (tensor<4x8xf32>) -> tensor<4x8xi1>
  %1 = stablehlo.remainder %arg0, %arg1 : tensor<4x8xf32>
  %2 = stablehlo.bitcast_convert %arg0 : (tensor<4x8xf32>) -> tensor<4x8xi32>
  %3 = stablehlo.reduce_precision %arg0, format = e5m10 : tensor<4x8xf32>
  return %0, %1, %2, %3 : tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xi32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @ints(
// CHECK:         dist.map(%arg0, %arg1)
// CHECK:           %[[Z:.*]] = arith.cmpi eq, %[[B:.*]], %{{.*}} : i32
// CHECK:           %[[SAFE:.*]] = arith.select %[[Z]], %{{.*}}, %[[B]] : i32
// CHECK:           %[[Q:.*]] = arith.divsi %{{.*}}, %[[SAFE]] : i32
// CHECK:           %[[M1:.*]] = arith.constant -1 : i32
// CHECK:           arith.select %[[Z]], %[[M1]], %[[Q]] : i32
// CHECK:         dist.map(%arg0, %arg1)
// CHECK:           %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %{{.*}} : i32
// CHECK:           %[[AMT:.*]] = arith.andi
// CHECK:           %[[SH:.*]] = arith.shrui %{{.*}}, %[[AMT]] : i32
// CHECK:           arith.select %[[IN]], %[[SH]], %{{.*}} : i32
// CHECK:         dist.map(%arg2, %arg3)
// CHECK:           arith.ori
func.func public @ints(%arg0: tensor<8xi32>, %arg1: tensor<8xi32>, %arg2: tensor<8xi1>, %arg3: tensor<8xi1>) -> (tensor<8xi32>, tensor<8xi32>, tensor<8xi1>) {
  %0 = stablehlo.divide %arg0, %arg1 : tensor<8xi32>
  %1 = stablehlo.shift_right_logical %arg0, %arg1 : tensor<8xi32>
  %2 = stablehlo.add %arg2, %arg3 : tensor<8xi1>
  return %0, %1, %2 : tensor<8xi32>, tensor<8xi32>, tensor<8xi1>
}

// jnp.all: the and of booleans is the min of their 0/1 values.
// CHECK-LABEL: func.func @all(
// CHECK:         %[[I:.*]] = dist.cast %arg0 : !dist.tensor<4x8xi1, @mesh, [replicated]> -> !dist.tensor<4x8xi32
// CHECK:         %[[M:.*]] = dist.reduce_tensor min %[[I]] dims [1]
// CHECK:         dist.map(%[[M]])
// CHECK:           arith.cmpi ne
func.func public @all(%arg0: tensor<4x8xi1>) -> tensor<4xi1> {
  %c = stablehlo.constant dense<true> : tensor<i1>
  %0 = stablehlo.reduce(%arg0 init: %c) applies stablehlo.and across dimensions = [1] : (tensor<4x8xi1>, tensor<i1>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// jnp.take_along_axis(x, ids[:, None], axis=1): a batched gather of single elements is
// an embedding_bag of the table [4, 8] seen as rows of width 1.
// CHECK-LABEL: func.func @take_along_axis(
// CHECK:         %[[T:.*]] = dist.reshape %arg0 : !dist.tensor<4x8xf32, @mesh, [replicated]> -> !dist.tensor<4x8x1xf32
// CHECK:         %[[B:.*]] = dist.embedding_bag %[[T]], %{{.*}} : (!dist.tensor<4x8x1xf32, @mesh, [replicated]>, !dist.tensor<4x1x1xi32, @mesh, [replicated]>) -> !dist.tensor<4x1x1xf32
// CHECK:         dist.reshape %[[B]] : !dist.tensor<4x1x1xf32, @mesh, [replicated]> -> !dist.tensor<4x1xf32
func.func public @take_along_axis(%arg0: tensor<4x8xf32>, %arg1: tensor<4x1x1xi32>) -> tensor<4x1xf32> {
  %0 = "stablehlo.gather"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}> : (tensor<4x8xf32>, tensor<4x1x1xi32>) -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// dynamic_update_slice at (1, 2): rows before, the slab with the update pasted between
// its columns, rows after.
// CHECK-LABEL: func.func @dus(
// CHECK:         %[[TOP:.*]] = dist.extract_slice %arg0 offsets [0, 0] strides [1, 1] {{.*}} -> !dist.tensor<1x8xf32
// CHECK:         %[[SLAB:.*]] = dist.extract_slice %arg0 offsets [1, 0] strides [1, 1] {{.*}} -> !dist.tensor<2x8xf32
// CHECK:         %[[L:.*]] = dist.extract_slice %[[SLAB]] offsets [0, 0] {{.*}} -> !dist.tensor<2x2xf32
// CHECK:         %[[R:.*]] = dist.extract_slice %[[SLAB]] offsets [0, 5] {{.*}} -> !dist.tensor<2x3xf32
// CHECK:         %[[MID:.*]] = dist.concat %[[L]], %arg1, %[[R]] dim 1
// CHECK:         %[[BOT:.*]] = dist.extract_slice %arg0 offsets [3, 0] {{.*}} -> !dist.tensor<1x8xf32
// CHECK:         dist.concat %[[TOP]], %[[MID]], %[[BOT]] dim 0
func.func public @dus(%arg0: tensor<4x8xf32>, %arg1: tensor<2x3xf32>) -> tensor<4x8xf32> {
  %c = stablehlo.constant dense<1> : tensor<i32>
  %c_0 = stablehlo.constant dense<2> : tensor<i32>
  %0 = stablehlo.dynamic_update_slice %arg0, %arg1, %c, %c_0 : (tensor<4x8xf32>, tensor<2x3xf32>, tensor<i32>, tensor<i32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// jnp.argmax: the max over the dim, then the smallest index whose value reaches it
// (or is NaN).
// CHECK-LABEL: func.func @argmax(
// CHECK:         %[[M:.*]] = dist.reduce_tensor max %arg0 dims [1]
// CHECK:         %[[MB:.*]] = dist.reshape %[[M]] : !dist.tensor<4xf32, @mesh, [replicated]> -> !dist.tensor<4x1xf32
// CHECK:         %[[C:.*]] = dist.map(%arg0, %[[MB]], %{{.*}})
// CHECK:           arith.cmpf oeq
// CHECK:           arith.cmpf uno
// CHECK:         dist.reduce_tensor min %[[C]] dims [1]
func.func public @argmax(%arg0: tensor<4x8xf32>) -> tensor<4xi32> {
  %0 = stablehlo.iota dim = 1 : tensor<4x8xi32>
  %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %c = stablehlo.constant dense<0> : tensor<i32>
  %1:2 = stablehlo.reduce(%arg0 init: %cst), (%0 init: %c) across dimensions = [1] : (tensor<4x8xf32>, tensor<4x8xi32>, tensor<f32>, tensor<i32>) -> (tensor<4xf32>, tensor<4xi32>)
   reducer(%a: tensor<f32>, %b: tensor<f32>) (%i: tensor<i32>, %j: tensor<i32>)  {
    %2 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %3 = stablehlo.compare NE, %a, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %4 = stablehlo.or %2, %3 : tensor<i1>
    %5 = stablehlo.compare EQ, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %6 = stablehlo.compare LT, %i, %j, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %7 = stablehlo.and %5, %6 : tensor<i1>
    %8 = stablehlo.or %4, %7 : tensor<i1>
    %9 = stablehlo.select %4, %a, %b : tensor<i1>, tensor<f32>
    %10 = stablehlo.select %8, %i, %j : tensor<i1>, tensor<i32>
    stablehlo.return %9, %10 : tensor<f32>, tensor<i32>
  }
  return %1#1 : tensor<4xi32>
}

// jnp.argsort: dist.sort of the keys and an iota along the dim.
// CHECK-LABEL: func.func @argsort(
// CHECK:         %[[J:.*]] = dist.iota dim 1
// CHECK:         %{{.*}}, %[[I:.*]] = dist.sort %arg0, %[[J]] dim 1
// CHECK:         func.return %[[I]]
func.func public @argsort(%arg0: tensor<4x8xi32>) -> tensor<4x8xi32> {
  %0 = stablehlo.iota dim = 1 : tensor<4x8xi32>
  %1:2 = "stablehlo.sort"(%arg0, %0) <{dimension = 1 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<i32>, %b: tensor<i32>, %i: tensor<i32>, %j: tensor<i32>):
    %2 = stablehlo.compare LT, %a, %b, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %2 : tensor<i1>
  }) : (tensor<4x8xi32>, tensor<4x8xi32>) -> (tensor<4x8xi32>, tensor<4x8xi32>)
  return %1#1 : tensor<4x8xi32>
}

// Unsigned integers are their bits as signless ones: the ops whose meaning depends on
// the sign take arith's unsigned forms; a non-splat constant is a select per element of
// its flat index.
// CHECK-LABEL: func.func @unsigned(%arg0: !dist.tensor<4xi32, @mesh, [replicated]>, %arg1: !dist.tensor<4xi32, @mesh, [replicated]>)
// CHECK:         dist.map(%arg0, %arg1)
// CHECK:           arith.divui
// CHECK:         dist.map(%arg0)
// CHECK:           arith.uitofp %{{.*}} : i32 to f32
// CHECK:         %[[K:.*]] = dist.iota dim 0 : () -> !dist.tensor<4xi32
// CHECK:         dist.map(%[[K]])
// CHECK-DAG:       arith.constant -1 : i32
// CHECK-DAG:       arith.constant 7 : i32
// CHECK:           arith.select
func.func public @unsigned(%arg0: tensor<4xui32>, %arg1: tensor<4xui32>) -> (tensor<4xui32>, tensor<4xf32>, tensor<4xui32>) {
  %0 = stablehlo.divide %arg0, %arg1 : tensor<4xui32>
  %1 = stablehlo.convert %arg0 : (tensor<4xui32>) -> tensor<4xf32>
  %c = stablehlo.constant dense<[7, 4294967295, 0, 13]> : tensor<4xui32>
  %2 = stablehlo.xor %arg0, %c : tensor<4xui32>
  return %0, %1, %2 : tensor<4xui32>, tensor<4xf32>, tensor<4xui32>
}
