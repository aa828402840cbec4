// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// P²'s Figure 4 in distir: Figure 2d's placement [[1,1,2,2],[1,2,1,2]] of 4 data-parallel
// replicas x 4 parameter shards on [(rack,1),(server,2),(CPU,2),(GPU,4)], reducing the
// shards (axis 1 = server_p1 x GPU_p1). Both programs run as NCCL calls but are not
// reductions; distir's types reject them as P²'s semantics does.

// Figure 4a: ReduceScatter over {A0, A1}, then AllReduce over {A0, A1}: the two halves of
// the result would be added together.
// CHECK: 'coll.all_reduce' op operand must be local on axis 3, got sliced<0>
dist.mesh @hw shape = [2, 2, 2, 2] axes = ["server_p1", "CPU_p0", "GPU_p0", "GPU_p1"]
dist.mesh @logical shape = [4, 4] axes = ["data", "shard"] view @hw [[1, 2], [0, 3]]
func.func @figure4a(%x: !dist.tensor<64xf32, @hw, [local, local, local, local]>) -> !dist.tensor<64xf32, @hw, [local, local, local, replicated]> {
  %rs = coll.reduce_scatter sum %x dim 0 axes [3] : !dist.tensor<64xf32, @hw, [local, local, local, local]> -> !dist.tensor<64xf32, @hw, [local, local, local, sliced<0>]>
  %ar = coll.all_reduce sum %rs axes [3] : !dist.tensor<64xf32, @hw, [local, local, local, sliced<0>]> -> !dist.tensor<64xf32, @hw, [local, local, local, replicated]>
  func.return %ar : !dist.tensor<64xf32, @hw, [local, local, local, replicated]>
}

// -----

// Figure 4b: AllReduce over S0 ({A0, C0}), then over the whole shard axis: A0's and C0's
// data would be added twice.
// CHECK: 'coll.all_reduce' op operand must be local on axis 0, got replicated
dist.mesh @hw shape = [2, 2, 2, 2] axes = ["server_p1", "CPU_p0", "GPU_p0", "GPU_p1"]
dist.mesh @logical shape = [4, 4] axes = ["data", "shard"] view @hw [[1, 2], [0, 3]]
func.func @figure4b(%x: !dist.tensor<64xf32, @hw, [local, local, local, local]>) -> !dist.tensor<64xf32, @hw, [replicated, local, local, replicated]> {
  %a = coll.all_reduce sum %x axes [0] : !dist.tensor<64xf32, @hw, [local, local, local, local]> -> !dist.tensor<64xf32, @hw, [replicated, local, local, local]>
  %b = coll.all_reduce sum %a axes [0, 3] : !dist.tensor<64xf32, @hw, [replicated, local, local, local]> -> !dist.tensor<64xf32, @hw, [replicated, local, local, replicated]>
  func.return %b : !dist.tensor<64xf32, @hw, [replicated, local, local, replicated]>
}
