// RUN: distir-import %s | filecheck %s

// MLIR's shard dialect as mlir-opt-19 prints it (the dialect was called `mesh` then;
// shardings are inline attributes, partial sums `partial = sum[axes]`).

module {
  mesh.mesh @mesh0(shape = 2x2)
  // CHECK-LABEL: func.func @annotated
  // CHECK-SAME:    (%arg0: !dist.tensor<4x8xf32, @mesh0, [sliced<0>, sliced<1>]>) -> !dist.tensor<4x8xf32, @mesh0, [sliced<1>, sliced<1>]>
  // CHECK:         %[[G:.*]] = coll.all_gather %{{.*}} axes [1]
  // CHECK-NEXT:    %[[A:.*]] = coll.all_to_all %[[G]] dim 1 :
  // CHECK-NEXT:    dist.take_slice %[[A]] dim 1 axis 1
  func.func @annotated(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %sharding_annotated = mesh.shard %arg0 to <@mesh0, [[0], [1]]> : tensor<4x8xf32>
    %0 = arith.mulf %sharding_annotated, %sharding_annotated : tensor<4x8xf32>
    %sharding_annotated_0 = mesh.shard %0 to <@mesh0, [[], [0, 1]]> : tensor<4x8xf32>
    return %sharding_annotated_0 : tensor<4x8xf32>
  }
  // CHECK-LABEL: func.func @partial_sums
  // CHECK-SAME:    (%arg0: !dist.tensor<4x8xf32, @mesh0, [sliced<0>, local]>)
  // CHECK:         coll.all_reduce sum %arg0 axes [1]
  func.func @partial_sums(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %sharding_annotated = mesh.shard %arg0 to <@mesh0, [[0]], partial = sum[1]> : tensor<4x8xf32>
    %0 = math.exp %sharding_annotated : tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
  // CHECK-LABEL: func.func @per_device
  // CHECK-SAME:    (%arg0: !dist.tensor<2x4xf32, @mesh0, [local, local]>) -> !dist.tensor<4x4xf32, @mesh0, [local, local]>
  // CHECK:         coll.all_gather
  // CHECK:         coll.all_reduce sum %{{.*}} axes [1]
  func.func @per_device(%arg0: tensor<2x4xf32>) -> tensor<4x4xf32> {
    %all_gather = mesh.all_gather %arg0 on @mesh0 mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
    %all_reduce = mesh.all_reduce %all_gather on @mesh0 mesh_axes = [1] : tensor<4x4xf32> -> tensor<4x4xf32>
    return %all_reduce : tensor<4x4xf32>
  }
}
