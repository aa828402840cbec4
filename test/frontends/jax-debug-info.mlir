// RUN: distir-import %s | filecheck %s

// JAX's text with as_text(debug_info=True): locations on every op and argument, and the
// location aliases (#loc1 = loc(...)) before and after the module; they are read and
// ignored.

// CHECK-LABEL: func.func @main
// CHECK:         dist.matmul %arg0, %arg1 : {{.*}} -> !dist.tensor<8x32xf32, @mesh, [sliced<1>]>
// CHECK:         coll.all_gather

#loc = loc(unknown)
#loc1 = loc("x")
#loc2 = loc("w")
module @jit__lambda attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}} loc(#loc)
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>} loc("x"), %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>} loc("w")) -> (tensor<8x32xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32> loc(#loc15)
    %1 = call @relu(%0) : (tensor<8x32xf32>) -> tensor<8x32xf32> loc(#loc16)
    return %1 : tensor<8x32xf32> loc(#loc14)
  } loc(#loc)
  func.func private @relu(%arg0: tensor<8x32xf32> loc(unknown)) -> tensor<8x32xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc)
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x32xf32> loc(#loc7)
    %1 = stablehlo.maximum %arg0, %0 : tensor<8x32xf32> loc(#loc7)
    return %1 : tensor<8x32xf32> loc(#loc)
  } loc(#loc11)
} loc(#loc)
#loc3 = loc("/tmp/fe/dbg.py":7:37 to :42)
#loc4 = loc("/tmp/fe/dbg.py":8:6 to :52)
#loc5 = loc("/tmp/fe/dbg.py":7:25 to :43)
#loc6 = loc("jit")
#loc7 = loc("max")
#loc8 = loc("<lambda>"(#loc3))
#loc9 = loc("<module>"(#loc4))
#loc10 = loc("<lambda>"(#loc5))
#loc11 = loc("jit:"(#loc6))
#loc12 = loc(callsite(#loc8 at #loc9))
#loc13 = loc(callsite(#loc10 at #loc9))
#loc14 = loc("jit(<lambda>)"(#loc9))
#loc15 = loc("jit(<lambda>)/dot_general"(#loc12))
#loc16 = loc("jit(<lambda>)/jit(relu)"(#loc13))

