// RUN: distir-import %s | filecheck %s

// A sub-axis ("y":(2)2, the inner half of y) splits its axis: the values live on a mesh
// with one axis per part, and the Shardy mesh is a view of it.

sdy.mesh @m8 = <["x"=2, "y"=4]>

// CHECK:         dist.mesh @m8_sub shape = [2, 2, 2] axes = ["x", "y:(1)2", "y:(2)2"]
// CHECK-NEXT:    dist.mesh @m8 shape = [2, 4] axes = ["x", "y"] view @m8_sub {{\[}}[0], [1, 2]]

// CHECK-LABEL: func.func @slice_by_a_sub_axis
// CHECK-SAME:    -> !dist.tensor<8x8xi32, @m8_sub, [sliced<1>, replicated, sliced<1>]>
// CHECK:         dist.take_slice %arg0 dim 1 :
// CHECK-NEXT:    dist.take_slice %{{.*}} dim 1 axis 2 :
func.func @slice_by_a_sub_axis(%arg0: tensor<8x8xi32> {sdy.sharding = #sdy.sharding<@m8, [{}, {}]>}) -> (tensor<8x8xi32> {sdy.sharding = #sdy.sharding<@m8, [{}, {"x", "y":(2)2}]>}) {
  %0 = sdy.all_slice [{}, {"x", "y":(2)2}] %arg0 out_sharding=<@m8, [{}, {"x", "y":(2)2}]> : tensor<8x8xi32>
  return %0 : tensor<8x8xi32>
}

