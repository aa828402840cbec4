// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=4},lower-to-kernels,lower-collectives' | filecheck %s
// A kernel result that is all-gathered is computed straight into this rank's block of the
// all-gather's buffer, so the all-gather is in place (nothing is copied to the rank
// itself), as for the gathered results of a fused collective.

dist.mesh @world shape = [?]

// A fresh result buffer: the kernel writes its block, the all-gather sends that block.
// CHECK-LABEL: func.func @gather_fresh
// CHECK-SAME: (%[[X:.*]]: memref<4xf32>) -> memref<16xf32>
// CHECK-DAG: %[[R:.*]] = rt.group_rank @world axes [0] : index
// CHECK-DAG: %[[Y:.*]] = rt.alloc : () -> memref<16xf32>
// CHECK: %[[B:.*]] = rt.block %[[Y]], %[[R]] dim 0 count 4 : (memref<16xf32>, index) -> memref<4xf32>
// CHECK-NOT: rt.alloc
// CHECK: rt.launch @{{k[0-9]+}}(%[[X]], %[[B]], %{{.*}})
// CHECK: nccl.all_gather %[[B]], %[[Y]], %{{.*}}, %{{.*}} count 4
// CHECK: func.return %[[Y]]
func.func @gather_fresh(%x: !dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [replicated]> {
  %y = dist.map(%x) : (!dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %b = arith.mulf %a, %a : f32
    dist.yield %b : f32
  }
  %z = coll.all_gather %y : !dist.tensor<16xf32, @world, [sliced<0>]> -> !dist.tensor<16xf32, @world, [replicated]>
  func.return %z : !dist.tensor<16xf32, @world, [replicated]>
}

// RS-SGD-AG: the in-place parameter's block is read and written by the kernel at the
// same positions, then all-gathered in place; no temporary, no copy at the end.
// CHECK-LABEL: func.func @rs_sgd_ag
// CHECK-SAME: (%[[G:.*]]: memref<16xf32>, %[[W:.*]]: memref<16xf32>, %[[LR:.*]]: f32)
// CHECK: %[[V:.*]] = rt.block %[[W]], %{{.*}} dim 0 count 4 : (memref<16xf32>, index) -> memref<4xf32>
// CHECK: nccl.reduce_scatter avg %[[G]], %[[RS:.*]], %[[C:.*]], %[[S:.*]] count 4
// CHECK: rt.launch @{{k[0-9]+}}(%[[V]], %[[RS]], %[[LR]], %[[V]], %[[S]])
// CHECK-NEXT: nccl.all_gather %[[V]], %[[W]], %[[C]], %[[S]] count 4
// CHECK-NOT: rt.copy
// CHECK: func.return %[[W]]
func.func @rs_sgd_ag(%g: !dist.tensor<16xf32, @world, [local]>, %w: !dist.tensor<16xf32, @world, [replicated]>, %lr: f32)
    -> (!dist.tensor<16xf32, @world, [replicated]> {dist.inplace = 1 : i64}) {
  %rs = coll.reduce_scatter avg %g dim 0 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %ws = dist.take_slice %w dim 0 : !dist.tensor<16xf32, @world, [replicated]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %w1 = dist.map(%ws, %rs, %lr) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32, %l: f32):
    %u = arith.mulf %l, %b : f32
    %n = arith.subf %a, %u : f32
    dist.yield %n : f32
  }
  %w2 = coll.all_gather %w1 : !dist.tensor<16xf32, @world, [sliced<0>]> -> !dist.tensor<16xf32, @world, [replicated]>
  func.return %w2 : !dist.tensor<16xf32, @world, [replicated]>
}

// The old parameter is still read (through its slice) after the kernel: neither the kernel
// nor the all-gather may overwrite it, so the all-gather gets its own buffer (the kernel
// writes its block) and the result is copied into the parameter at the end.
// CHECK-LABEL: func.func @old_value_read_later
// CHECK-SAME: (%[[G:.*]]: memref<16xf32>, %[[W:.*]]: memref<16xf32>, %[[LR:.*]]: f32)
// CHECK: %[[Y:.*]] = rt.alloc : () -> memref<16xf32>
// CHECK: %[[B:.*]] = rt.block %[[Y]], %{{.*}} dim 0 count 4 : (memref<16xf32>, index) -> memref<4xf32>
// CHECK: %[[V:.*]] = rt.block %[[W]], %{{.*}} dim 0 count 4 : (memref<16xf32>, index) -> memref<4xf32>
// CHECK: rt.launch @{{k[0-9]+}}(%[[V]], %{{.*}}, %[[LR]], %[[B]], %{{.*}})
// CHECK: nccl.all_gather %[[B]], %[[Y]], %{{.*}}, %{{.*}} count 4
// CHECK: rt.launch @{{k[0-9]+}}(%[[V]], %{{.*}}) :
// CHECK: rt.copy %[[Y]], %[[W]]
// CHECK: func.return %[[W]]
func.func @old_value_read_later(%g: !dist.tensor<16xf32, @world, [local]>, %w: !dist.tensor<16xf32, @world, [replicated]>, %lr: f32)
    -> (!dist.tensor<16xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  %rs = coll.reduce_scatter avg %g dim 0 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %ws = dist.take_slice %w dim 0 : !dist.tensor<16xf32, @world, [replicated]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %w1 = dist.map(%ws, %rs, %lr) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32, %l: f32):
    %u = arith.mulf %l, %b : f32
    %n = arith.subf %a, %u : f32
    dist.yield %n : f32
  }
  %w2 = coll.all_gather %w1 : !dist.tensor<16xf32, @world, [sliced<0>]> -> !dist.tensor<16xf32, @world, [replicated]>
  %old = dist.map(%ws, %ws) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    dist.yield %s : f32
  }
  func.return %w2, %old : !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>
}

// Two parameters' all-gathers combined into one (`combine-collectives`): each member is
// gathered in place into its parameter, as a plain all-gather is; no temporary, no copy.
// CHECK-LABEL: func.func @combined_params
// CHECK-SAME: (%[[G:.*]]: memref<16xf32>, %[[W:.*]]: memref<16xf32>, %[[U:.*]]: memref<16xf32>, %[[LR:.*]]: f32)
// CHECK-DAG: %[[WB:.*]] = rt.block %[[W]], %{{.*}} dim 0 count 4 : (memref<16xf32>, index) -> memref<4xf32>
// CHECK-DAG: %[[UB:.*]] = rt.block %[[U]], %{{.*}} dim 0 count 4 : (memref<16xf32>, index) -> memref<4xf32>
// CHECK: rt.launch @{{k[0-9]+}}(%[[WB]], %[[UB]], %{{.*}}, %[[LR]], %[[WB]], %[[UB]], %{{.*}})
// CHECK-NEXT: rt.fused {
// CHECK-NEXT: nccl.all_gather %[[WB]], %[[W]], %{{.*}}, %{{.*}} count 4
// CHECK-NEXT: nccl.all_gather %[[UB]], %[[U]], %{{.*}}, %{{.*}} count 4
// CHECK-NOT: rt.copy
// CHECK: func.return %[[W]], %[[U]]
func.func @combined_params(%g: !dist.tensor<16xf32, @world, [local]>, %w: !dist.tensor<16xf32, @world, [replicated]>, %u: !dist.tensor<16xf32, @world, [replicated]>, %lr: f32)
    -> (!dist.tensor<16xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<16xf32, @world, [replicated]> {dist.inplace = 2 : i64}) {
  %rs = coll.reduce_scatter avg %g dim 0 : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %ws = dist.take_slice %w dim 0 : !dist.tensor<16xf32, @world, [replicated]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %us = dist.take_slice %u dim 0 : !dist.tensor<16xf32, @world, [replicated]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  %w1, %u1 = dist.map(%ws, %us, %rs, %lr) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>, f32) -> (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  ^bb0(%a: f32, %c: f32, %b: f32, %l: f32):
    %n = arith.subf %a, %b : f32
    %k = arith.mulf %l, %b : f32
    %o = arith.addf %c, %k : f32
    dist.yield %n, %o : f32, f32
  }
  %w2, %u2 = coll.fused_all_gather %w1, %u1 : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [replicated]>) {
  ^bb0(%w1_s: !dist.tensor<16xf32, @world, [sliced<0>]>, %u1_s: !dist.tensor<16xf32, @world, [sliced<0>]>):
    coll.yield %w1_s, %u1_s : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>
  }
  func.return %w2, %u2 : !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [replicated]>
}
