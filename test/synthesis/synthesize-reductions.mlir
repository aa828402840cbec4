// RUN: distir-opt %s -p 'synthesize-reductions{topology=p2-a100}' | filecheck %s
// RUN: distir-opt %s -p 'synthesize-reductions{topology=p2-a100 algorithm=tree}' | filecheck %s --check-prefix=TREE

// 4 nodes of 16 A100 (p2-a100): one 64-way data-parallel axis, and a 4 x 16 split.
dist.mesh @hw shape = [4, 16] axes = ["node", "gpu"]
dist.mesh @world shape = [64] axes = ["dp"] view @hw [[0, 1]]
dist.mesh @dp_tp shape = [4, 16] axes = ["dp", "tp"] view @hw [[0], [1]]
dist.mesh @tp_dp shape = [16, 4] axes = ["tp", "dp"] view @hw [[1], [0]]

// The flat all_reduce crosses the NICs: ReduceScatter inside each node, AllReduce across
// nodes on a sixteenth of the data, AllGather inside each node (P²'s Figure 10 (ii)).
// CHECK-LABEL: func.func @flat
// CHECK:         %[[H:.*]] = dist.remesh %x : {{.*}}@world, [local]> -> {{.*}}@hw, [local, local]>
// CHECK-NEXT:    %[[RS:.*]] = coll.reduce_scatter sum %[[H]] dim 0 axes [1] : {{.*}}[local, local]> -> {{.*}}[local, sliced<0>]>
// CHECK-NEXT:    %[[AR:.*]] = coll.all_reduce sum %[[RS]] : {{.*}}[local, sliced<0>]> -> {{.*}}[replicated, sliced<0>]>
// CHECK-NEXT:    %[[AG:.*]] = coll.all_gather %[[AR]] axes [1] : {{.*}}[replicated, sliced<0>]> -> {{.*}}[replicated, replicated]>
// CHECK-NEXT:    %g = dist.remesh %[[AG]] : {{.*}}@hw, [replicated, replicated]> -> {{.*}}@world, [replicated]>
// CHECK-NEXT:    %[[M:.*]] = dist.map(%g)
// TREE-LABEL: func.func @flat
// TREE:         coll.reduce_scatter sum {{.*}} axes [1]
func.func @flat(%x: !dist.tensor<1048576xf32, @world, [local]>) -> !dist.tensor<1048576xf32, @world, [replicated]> {
  %g = coll.all_reduce sum %x : !dist.tensor<1048576xf32, @world, [local]> -> !dist.tensor<1048576xf32, @world, [replicated]>
  %m = dist.map(%g) : (!dist.tensor<1048576xf32, @world, [replicated]>) -> !dist.tensor<1048576xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    %b = arith.mulf %a, %a : f32
    dist.yield %b : f32
  }
  func.return %m : !dist.tensor<1048576xf32, @world, [replicated]>
}

// Data parallelism across nodes (one GPU of each node per group): one level, nothing to
// split with ring; with tree, ReduceScatter + AllGather (ring) beat the tree AllReduce.
// CHECK-LABEL: func.func @across_nodes
// CHECK-NEXT:    %g = coll.all_reduce sum %x : {{.*}}@dp_tp, [local, sliced<0>]> -> {{.*}}@dp_tp, [replicated, sliced<0>]>
// TREE-LABEL: func.func @across_nodes
// TREE:         %[[H:.*]] = dist.remesh %x : {{.*}}@dp_tp, [local, sliced<0>]> -> {{.*}}@hw, [local, sliced<0>]>
// TREE-NEXT:    %[[RS:.*]] = coll.reduce_scatter sum %[[H]] dim 0 : {{.*}}@hw, [local, sliced<0>]> -> {{.*}}@hw, [sliced<0, 1>, sliced<0, 0>]>
// TREE-NEXT:    %[[AG:.*]] = coll.all_gather %[[RS]] : {{.*}}[sliced<0, 1>, sliced<0, 0>]> -> {{.*}}@hw, [replicated, sliced<0>]>
// TREE-NEXT:    %g = dist.remesh %[[AG]]
func.func @across_nodes(%x: !dist.tensor<1048576xf32, @dp_tp, [local, sliced<0>]>) -> !dist.tensor<1048576xf32, @dp_tp, [replicated, sliced<0>]> {
  %g = coll.all_reduce sum %x axes [0] : !dist.tensor<1048576xf32, @dp_tp, [local, sliced<0>]> -> !dist.tensor<1048576xf32, @dp_tp, [replicated, sliced<0>]>
  func.return %g : !dist.tensor<1048576xf32, @dp_tp, [replicated, sliced<0>]>
}

// Small buffers: latency decides. Tensor parallelism inside a node stays one AllReduce
// (one level); max is kept as the reduction of every step.
// CHECK-LABEL: func.func @small_max
// CHECK:         %[[H:.*]] = dist.remesh %x
// CHECK-NEXT:    coll.reduce_scatter max %[[H]]
// CHECK-LABEL: func.func @inside_node
// CHECK-NEXT:    %g = coll.all_reduce sum %x : {{.*}}@tp_dp
func.func @small_max(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %g = coll.all_reduce max %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %g : !dist.tensor<64xf32, @world, [replicated]>
}
func.func @inside_node(%x: !dist.tensor<1024xf32, @tp_dp, [local, local]>) -> !dist.tensor<1024xf32, @tp_dp, [replicated, local]> {
  %g = coll.all_reduce sum %x axes [0] : !dist.tensor<1024xf32, @tp_dp, [local, local]> -> !dist.tensor<1024xf32, @tp_dp, [replicated, local]>
  func.return %g : !dist.tensor<1024xf32, @tp_dp, [replicated, local]>
}
