// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=8},lower-to-kernels,lower-collectives' | filecheck %s
// coll.permute becomes one NCCL group per rank: a send to the target and a receive from
// the source (peers as shifted group ranks for an offset; under scf.if on the ranks of
// each pair for explicit pairs), and a zero fill on the ranks no pair targets.

dist.mesh @world shape = [?]
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]

// Offset -1 on 8 ranks: send to group rank + 7, receive from group rank + 1.
// CHECK-LABEL: func.func @ring_back
// CHECK-SAME: (%[[X:.*]]: memref<16xf32>) -> memref<16xf32>
// CHECK: %[[S:.*]] = rt.stream 0
// CHECK: %[[Y:.*]] = rt.alloc : () -> memref<16xf32>
// CHECK: %[[C:.*]] = rt.comm @world axes [0]
// CHECK: nccl.group_start
// CHECK: %[[TO:.*]] = rt.group_rank @world axes [0] shift 7 : index
// CHECK: nccl.send %[[X]], %[[TO]], %[[C]], %[[S]] count 16
// CHECK: %[[FROM:.*]] = rt.group_rank @world axes [0] shift 1 : index
// CHECK: nccl.recv %[[Y]], %[[FROM]], %[[C]], %[[S]] count 16
// CHECK: nccl.group_end
// CHECK: func.return %[[Y]]
func.func @ring_back(%x: !dist.tensor<16xf32, @world, [local]>) -> !dist.tensor<16xf32, @world, [local]> {
  %y = coll.permute %x offset -1 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [local]>
  func.return %y : !dist.tensor<16xf32, @world, [local]>
}

// A whole turn moves nothing: the result is the operand's buffer.
// CHECK-LABEL: func.func @whole_turn
// CHECK-SAME: (%[[X:.*]]: memref<16xf32>)
// CHECK-NOT: nccl.
// CHECK: func.return %[[X]]
func.func @whole_turn(%x: !dist.tensor<16xf32, @world, [local]>) -> !dist.tensor<16xf32, @world, [local]> {
  %y = coll.permute %x offset 8 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [local]>
  func.return %y : !dist.tensor<16xf32, @world, [local]>
}

// Pairs over the 4 tp ranks of each stage: 0 -> 1 and 1 -> 2 move, 3 keeps its value,
// 0 gets zeros. Each pair's send and receive run on its source and target only.
// CHECK-LABEL: func.func @pairs
// CHECK-SAME: (%[[X:.*]]: memref<16xf16>) -> memref<16xf16>
// CHECK: %[[Y:.*]] = rt.alloc : () -> memref<16xf16>
// CHECK: %[[C:.*]] = rt.comm @grid axes [1]
// CHECK: nccl.group_start
// CHECK: %[[H0:.*]] = rt.holds @grid [replicated, at<0>]
// CHECK: scf.if %[[H0]] {
// CHECK: nccl.send %[[X]], %[[ONE:.*]], %[[C]], %{{.*}} count 16
// CHECK: %[[H1:.*]] = rt.holds @grid [replicated, at<1>]
// CHECK: scf.if %[[H1]] {
// CHECK: nccl.recv %[[Y]], %[[ZERO:.*]], %[[C]], %{{.*}} count 16
// CHECK: scf.if %[[H1]] {
// CHECK: nccl.send %[[X]], %[[TWO:.*]], %[[C]]
// CHECK: %[[H2:.*]] = rt.holds @grid [replicated, at<2>]
// CHECK: scf.if %[[H2]] {
// CHECK: nccl.recv %[[Y]], %[[ONE]], %[[C]]
// CHECK: nccl.group_end
// CHECK: %[[H3:.*]] = rt.holds @grid [replicated, at<3>]
// CHECK: scf.if %[[H3]] {
// CHECK: rt.copy %[[X]], %[[Y]]
// CHECK: scf.if %[[H0]] {
// CHECK: rt.launch @zero_16_f16(%[[Y]], %{{.*}})
// CHECK: func.return %[[Y]]
func.func @pairs(%x: !dist.tensor<16xf16, @grid, [replicated, local]>) -> !dist.tensor<16xf16, @grid, [replicated, local]> {
  %y = coll.permute %x pairs [[0, 1], [1, 2], [3, 3]] axes [1] : !dist.tensor<16xf16, @grid, [replicated, local]> -> !dist.tensor<16xf16, @grid, [replicated, local]>
  func.return %y : !dist.tensor<16xf16, @grid, [replicated, local]>
}

// Only stage 0 holds the value: the whole permute runs under its guard.
// CHECK-LABEL: func.func @in_stage_0
// CHECK: %[[STAGE:.*]] = rt.holds @grid [at<0>, replicated]
// CHECK: scf.if %[[STAGE]] {
// CHECK: nccl.group_start
// CHECK: nccl.send
// CHECK: nccl.recv
// CHECK: nccl.group_end
func.func @in_stage_0(%x: !dist.tensor<16xi32, @grid, [at<0>, local]>) -> !dist.tensor<16xi32, @grid, [at<0>, local]> {
  %y = coll.permute %x offset 1 axes [1] : !dist.tensor<16xi32, @grid, [at<0>, local]> -> !dist.tensor<16xi32, @grid, [at<0>, local]>
  func.return %y : !dist.tensor<16xi32, @grid, [at<0>, local]>
}

// The zero fill: one kernel per buffer type, added to the module once.
// CHECK-LABEL: rt.kernel @zero_16_f16 shape [16] {
// CHECK: ^bb0(%[[B:.*]]: memref<16xf16>, %[[I:.*]]: index):
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f16
// CHECK: memref.store %[[Z]], %[[B]][%[[I]]] : memref<16xf16>
