// RUN: distir-import %s | filecheck %s

// Shardy's explicit collectives on a 2x2 mesh: each keeps the logical value and changes
// its layout; distir imports each as the dist/coll op(s) of that change.

sdy.mesh @m = <["x"=2, "y"=2]>

// CHECK:         dist.mesh @m shape = [2, 2] axes = ["x", "y"]

// CHECK-LABEL: func.func @gather_both_dims
// CHECK-SAME:    (%arg0: !dist.tensor<4x8xf32, @m, [sliced<0>, sliced<1>]>)
// CHECK:         %[[A:.*]] = coll.all_gather %arg0 : {{.*}}[sliced<0>, sliced<1>]> -> {{.*}}[replicated, sliced<1>]>
// CHECK-NEXT:    %[[B:.*]] = coll.all_gather %[[A]] axes [1] : {{.*}}[replicated, sliced<1>]> -> {{.*}}[replicated, replicated]>
// CHECK-NEXT:    func.return %[[B]]
func.func @gather_both_dims(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {"y"}]>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>}) {
  %0 = sdy.all_gather [{"x"}, {"y"}] %arg0 out_sharding=<@m, [{}, {}]> : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @slice_one_dim_by_two_axes
// CHECK:         %[[A:.*]] = dist.take_slice %arg0 dim 1 : {{.*}}[replicated, replicated]> -> {{.*}}[sliced<1>, replicated]>
// CHECK-NEXT:    %[[B:.*]] = dist.take_slice %[[A]] dim 1 axis 1 : {{.*}}[sliced<1>, replicated]> -> {{.*}}[sliced<1>, sliced<1>]>
// CHECK-NEXT:    func.return %[[B]]
func.func @slice_one_dim_by_two_axes(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x", "y"}]>}) {
  %0 = sdy.all_slice [{}, {"x", "y"}] %arg0 out_sharding=<@m, [{}, {"x", "y"}]> : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @move_x_from_rows_to_columns
// CHECK:         %[[A:.*]] = coll.all_to_all %arg0 dim 1 : {{.*}}[sliced<0>, replicated]> -> {{.*}}[sliced<1>, replicated]>
// CHECK-NEXT:    func.return %[[A]]
func.func @move_x_from_rows_to_columns(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) {
  %0 = sdy.all_to_all [{"x"}: 0->1] %arg0 out_sharding=<@m, [{}, {"x"}]> : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @reduce_scatter_partial_sums
// CHECK-SAME:    (%arg0: !dist.tensor<4x8xf32, @m, [local, local]>)
// CHECK:         %[[A:.*]] = coll.reduce_scatter sum %arg0 dim 0 axes [1] : {{.*}}[local, local]> -> {{.*}}[local, sliced<0>]>
// CHECK-NEXT:    %[[B:.*]] = coll.reduce_scatter sum %[[A]] dim 1 : {{.*}}[local, sliced<0>]> -> {{.*}}[sliced<1>, sliced<0>]>
// CHECK-NEXT:    func.return %[[B]]
func.func @reduce_scatter_partial_sums(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}], unreduced={"x", "y"}>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {"x"}]>}) {
  %0 = sdy.reduce_scatter [{"y"}, {"x"}] %arg0 out_sharding=<@m, [{"y"}, {"x"}]> : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @all_reduce_over_y
// CHECK:         %[[A:.*]] = coll.all_reduce sum %arg0 axes [1] : {{.*}}[sliced<0>, local]> -> {{.*}}[sliced<0>, replicated]>
// CHECK-NEXT:    func.return %[[A]]
func.func @all_reduce_over_y(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}], unreduced={"y"}>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) {
  %0 = sdy.all_reduce {"y"} %arg0 out_sharding=<@m, [{"x"}, {}]> : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// A permutation of the devices' blocks (y outer instead of x): device (x, y) held block
// 2x+y and holds 2y+x after, so devices 1 and 2 swap theirs and 0 and 3 keep them.
// CHECK-LABEL: func.func @permute_axis_order
// CHECK-SAME:    (%arg0: !dist.tensor<8xf32, @m, [sliced<0>, sliced<0>]>) -> !dist.tensor<8xf32, @m, [sliced<0, 1>, sliced<0, 0>]>
// CHECK:         %[[L:.*]] = dist.to_local %arg0 : {{.*}} -> !dist.tensor<2xf32, @m, [local, local]>
// CHECK-NEXT:    %[[P:.*]] = coll.permute %[[L]] pairs {{\[}}[0, 0], [1, 2], [2, 1], [3, 3]] axes [0, 1] :
// CHECK-NEXT:    %[[R:.*]] = dist.from_local %[[P]] : {{.*}} -> !dist.tensor<8xf32, @m, [sliced<0, 1>, sliced<0, 0>]>
// CHECK-NEXT:    func.return %[[R]]
func.func @permute_axis_order(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x", "y"}]>}) -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y", "x"}]>}) {
  %0 = sdy.collective_permute %arg0 out_sharding=<@m, [{"y", "x"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Rows sliced by y instead of x: device (x, y) needs block y, which device (y, x) holds.
// CHECK-LABEL: func.func @permute_replace_axis
// CHECK:         %[[L:.*]] = dist.to_local %arg0 : {{.*}}[sliced<0>, replicated]> -> !dist.tensor<2x8xf32, @m, [local, local]>
// CHECK-NEXT:    %[[P:.*]] = coll.permute %[[L]] pairs {{\[}}[0, 0], [1, 2], [2, 1], [3, 3]] axes [0, 1] :
// CHECK-NEXT:    dist.from_local %[[P]] : {{.*}} -> !dist.tensor<4x8xf32, @m, [replicated, sliced<0>]>
func.func @permute_replace_axis(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) {
  %0 = sdy.collective_permute %arg0 out_sharding=<@m, [{"y"}, {}]> : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// A constraint is kept: the row-sliced input is gathered there, then sliced by columns.
// CHECK-LABEL: func.func @constraint_then_add
// CHECK:         coll.all_to_all %arg0 dim 1 :
// CHECK:         dist.map
func.func @constraint_then_add(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) {
  %0 = sdy.sharding_constraint %arg0 <@m, [{}, {"x"}]> : tensor<4x8xf32>
  %1 = stablehlo.add %0, %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// Every collective in one function (test_run_mpi_jax.py runs it under mpiexec).
// CHECK-LABEL: func.func @chain
// CHECK:         coll.reduce_scatter
// CHECK:         coll.all_to_all
// CHECK:         coll.all_gather
// CHECK:         dist.take_slice
// CHECK:         coll.permute
// CHECK:         coll.all_reduce sum %arg1 axes [1]
func.func @chain(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}], unreduced={"x", "y"}>}, %arg1: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}], unreduced={"y"}>}) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {"y"}]>}, tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) {
  %0 = sdy.reduce_scatter [{"y"}, {"x"}] %arg0 out_sharding=<@m, [{"y"}, {"x"}]> : tensor<4x8xf32>
  %1 = sdy.all_to_all [{"x"}: 1->0] %0 out_sharding=<@m, [{"y", "x"}, {}]> : tensor<4x8xf32>
  %2 = sdy.all_gather [{"x"}, {}] %1 out_sharding=<@m, [{"y"}, {}]> : tensor<4x8xf32>
  %3 = sdy.all_slice [{}, {"x"}] %2 out_sharding=<@m, [{"y"}, {"x"}]> : tensor<4x8xf32>
  %4 = sdy.collective_permute %3 out_sharding=<@m, [{"x"}, {"y"}]> : tensor<4x8xf32>
  %5 = sdy.all_reduce {"y"} %arg1 out_sharding=<@m, [{"x"}, {}]> : tensor<4x8xf32>
  return %4, %5 : tensor<4x8xf32>, tensor<4x8xf32>
}
