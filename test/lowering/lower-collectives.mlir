// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=4},lower-to-kernels,lower-collectives' | filecheck %s
// Collectives become NCCL calls on rank-local buffers, one communicator per group kind.

dist.mesh @world shape = [?]
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]

// CHECK-LABEL: func.func @all_reduce
// CHECK-SAME: (%[[X:.*]]: memref<16xf32>) -> memref<16xf32>
// CHECK-SAME: rt.dist_type = (!dist.tensor<16xf32, @world, [local]>) -> !dist.tensor<16xf32, @world, [replicated]>
// CHECK: %[[S:.*]] = rt.stream 0 : !rt.stream
// CHECK: %[[Y:.*]] = rt.alloc : () -> memref<16xf32>
// CHECK: %[[C:.*]] = rt.comm @world axes [0] : !rt.comm
// CHECK: nccl.all_reduce avg %[[X]], %[[Y]], %[[C]], %[[S]] count 16
// CHECK: rt.stream_sync %[[S]]
// CHECK: func.return %[[Y]]
func.func @all_reduce(%x: !dist.tensor<16xf32, @world, [local]>) -> !dist.tensor<16xf32, @world, [replicated]> {
  %y = coll.all_reduce avg %x : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [replicated]>
  func.return %y : !dist.tensor<16xf32, @world, [replicated]>
}

// Blocks along dim 1 are not contiguous: they are packed side by side (one copy of the
// strided blocks) before the reduce-scatter.
// CHECK-LABEL: func.func @reduce_scatter_dim1
// CHECK-SAME: (%[[X:.*]]: memref<4x8xf32>) -> memref<4x2xf32>
// CHECK: %[[P:.*]] = rt.alloc : () -> memref<4x4x2xf32>
// CHECK: rt.copy_blocks %[[X]], %[[P]], %{{.*}} from 1 to 0 count 4 : (memref<4x8xf32>, memref<4x4x2xf32>, !rt.stream) -> ()
// CHECK-NEXT: nccl.reduce_scatter sum %[[P]], %{{.*}} count 8 : (memref<4x4x2xf32>, memref<4x2xf32>, !rt.comm, !rt.stream) -> ()
func.func @reduce_scatter_dim1(%x: !dist.tensor<4x8xf32, @world, [local]>) -> !dist.tensor<4x8xf32, @world, [sliced<1>]> {
  %y = coll.reduce_scatter sum %x dim 1 : !dist.tensor<4x8xf32, @world, [local]> -> !dist.tensor<4x8xf32, @world, [sliced<1>]>
  func.return %y : !dist.tensor<4x8xf32, @world, [sliced<1>]>
}

// A fused all-reduce: reduce-scatter, one kernel on this rank's slice writing straight
// into its block of the (in-place) parameter, an in-place all-gather of it.
// CHECK-LABEL: func.func @fused_sgd
// CHECK-SAME: (%[[G:.*]]: memref<16xf32>, %[[W:.*]]: memref<16xf32>, %[[LR:.*]]: f32)
// CHECK: %[[RS:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK: %[[R:.*]] = rt.group_rank @world axes [0] : index
// CHECK: rt.fused {
// CHECK-NEXT: nccl.reduce_scatter avg %[[G]], %[[RS]], %[[C:.*]], %[[S:.*]] count 4
// CHECK-NEXT: %[[V:.*]] = rt.block %[[W]], %[[R]] dim 0 count 4
// CHECK-NEXT: rt.launch @{{k[0-9]+}}(%[[V]], %[[RS]], %[[LR]], %[[V]], %[[S]])
// CHECK-NEXT: nccl.all_gather %[[V]], %[[W]], %[[C]], %[[S]] count 4
// CHECK-NEXT: }
// CHECK-NOT: rt.copy
// CHECK: func.return %[[W]]
func.func @fused_sgd(%g: !dist.tensor<16xf32, @world, [local]>, %w: !dist.tensor<16xf32, @world, [replicated]>, %lr: f32)
    -> (!dist.tensor<16xf32, @world, [replicated]> {dist.inplace = 1 : i64}) {
  %w1 = coll.fused_all_reduce avg %g dim 0 gather [true] : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [replicated]> {
  ^bb0(%gs: !dist.tensor<16xf32, @world, [sliced<0>]>):
    %ws = dist.take_slice %w dim 0 : !dist.tensor<16xf32, @world, [replicated]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
    %n = dist.map(%ws, %gs, %lr) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32, %b: f32, %l: f32):
      %u = arith.mulf %l, %b : f32
      %r = arith.subf %a, %u : f32
      dist.yield %r : f32
    }
    coll.yield %n : !dist.tensor<16xf32, @world, [sliced<0>]>
  }
  func.return %w1 : !dist.tensor<16xf32, @world, [replicated]>
}

// A value yielded for a gathered and a sliced result: the kernel writes this rank's
// block of the gathered buffer (the all-gather runs in place); the sliced result gets
// its own copy of that block after the group (a view made inside the group is not
// visible after it).
// CHECK-LABEL: func.func @yield_twice
// CHECK-SAME: -> (memref<16xf32>, memref<4xf32>)
// CHECK: %[[R:.*]] = rt.alloc : () -> memref<16xf32>
// CHECK: %[[I:.*]] = rt.group_rank @world axes [0] : index
// CHECK: rt.fused {
// CHECK-NEXT: nccl.reduce_scatter
// CHECK-NEXT: %[[V:.*]] = rt.block %[[R]], %[[I]] dim 0 count 4
// CHECK-NEXT: rt.launch @{{k[0-9]+}}(%{{.*}}, %[[V]], %{{.*}})
// CHECK-NEXT: nccl.all_gather %[[V]], %[[R]]
// CHECK-NEXT: }
// CHECK-NEXT: %[[B:.*]] = rt.block %[[R]], %[[I]] dim 0 count 4
// CHECK-NEXT: %[[S:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK-NEXT: rt.copy %[[B]], %[[S]]
// CHECK: func.return %[[R]], %[[S]]
func.func @yield_twice(%g: !dist.tensor<16xf32, @world, [local]>) -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  %r, %s = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<16xf32, @world, [local]> -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<16xf32, @world, [sliced<0>]>):
    %m = dist.map(%gs) : (!dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32):
      %b = arith.addf %a, %a : f32
      dist.yield %b : f32
    }
    coll.yield %m, %m : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>
  }
  func.return %r, %s : !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>
}

// The same with the sliced results first: each gets its own copy.
// CHECK-LABEL: func.func @yield_twice_kept_first
// CHECK: rt.fused {
// CHECK: nccl.all_gather %{{[^,]*}}, %[[R:[^,]*]],
// CHECK-NEXT: }
// CHECK-NEXT: %[[B:.*]] = rt.block %[[R]]
// CHECK-NEXT: %[[S:.*]] = rt.alloc
// CHECK-NEXT: rt.copy %[[B]], %[[S]]
// CHECK-NEXT: %[[T:.*]] = rt.alloc
// CHECK-NEXT: rt.copy %[[B]], %[[T]]
// CHECK: func.return %[[S]], %[[R]], %[[T]]
func.func @yield_twice_kept_first(%g: !dist.tensor<16xf32, @world, [local]>) -> (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  %s, %r, %t = coll.fused_all_reduce sum %g dim 0 gather [false, true, false] : !dist.tensor<16xf32, @world, [local]> -> (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<16xf32, @world, [sliced<0>]>):
    %m = dist.map(%gs) : (!dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32):
      %b = arith.mulf %a, %a : f32
      dist.yield %b : f32
    }
    coll.yield %m, %m, %m : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>
  }
  func.return %s, %r, %t : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>
}

// An in-place sliced result: the copy of the block goes into its argument.
// CHECK-LABEL: func.func @yield_twice_inplace
// CHECK-SAME: (%{{.*}}: memref<16xf32>, %[[W:.*]]: memref<4xf32>)
// CHECK: rt.fused {
// CHECK: nccl.all_gather %{{[^,]*}}, %[[R:[^,]*]],
// CHECK-NEXT: }
// CHECK-NEXT: %[[B:.*]] = rt.block %[[R]]
// CHECK-NEXT: rt.copy %[[B]], %[[W]]
// CHECK: func.return %[[R]], %[[W]]
func.func @yield_twice_inplace(%g: !dist.tensor<16xf32, @world, [local]>, %w: !dist.tensor<16xf32, @world, [sliced<0>]>) -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]> {dist.inplace = 1 : i64}) {
  %r, %s = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<16xf32, @world, [local]> -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<16xf32, @world, [sliced<0>]>):
    %m = dist.map(%gs, %w) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32, %c: f32):
      %b = arith.subf %c, %a : f32
      dist.yield %b : f32
    }
    coll.yield %m, %m : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>
  }
  func.return %r, %s : !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>
}

// The reduce-scatter's result yielded three times: gathered (from its buffer), as one
// sliced result (its buffer) and as another (a copy).
// CHECK-LABEL: func.func @yield_block_arg
// CHECK: %[[GS:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK: rt.fused {
// CHECK-NEXT: nccl.reduce_scatter avg %{{.*}}, %[[GS]],
// CHECK-NEXT: nccl.all_gather %[[GS]], %[[R:[^,]*]],
// CHECK-NEXT: }
// CHECK-NEXT: %[[T:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK-NEXT: rt.copy %[[GS]], %[[T]]
// CHECK: func.return %[[R]], %[[GS]], %[[T]]
func.func @yield_block_arg(%g: !dist.tensor<16xf32, @world, [local]>) -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  %r, %s, %t = coll.fused_all_reduce avg %g dim 0 gather [true, false, false] : !dist.tensor<16xf32, @world, [local]> -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<16xf32, @world, [sliced<0>]>):
    coll.yield %gs, %gs, %gs : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>
  }
  func.return %r, %s, %t : !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>
}

// A value from outside yielded directly: the result is a copy, not the argument.
// CHECK-LABEL: func.func @yield_outer
// CHECK-SAME: (%{{.*}}: memref<16xf32>, %[[W:.*]]: memref<4xf32>)
// CHECK: rt.fused {
// CHECK: }
// CHECK-NEXT: %[[S:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK-NEXT: rt.copy %[[W]], %[[S]]
// CHECK: func.return %{{.*}}, %[[S]]
func.func @yield_outer(%g: !dist.tensor<16xf32, @world, [local]>, %w: !dist.tensor<16xf32, @world, [sliced<0>]>) -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  %r, %s = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<16xf32, @world, [local]> -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<16xf32, @world, [sliced<0>]>):
    %m = dist.map(%gs, %w) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32, %c: f32):
      %b = arith.addf %a, %c : f32
      dist.yield %b : f32
    }
    coll.yield %m, %w : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>
  }
  func.return %r, %s : !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [sliced<0>]>
}

// An in-place result whose argument is read after it is computed: computed into a new
// buffer, copied into the argument at the end.
// CHECK-LABEL: func.func @inplace_read_later
// CHECK-SAME: (%[[A:.*]]: memref<8xf32>)
// CHECK: %[[T:.*]] = rt.alloc : () -> memref<8xf32>
// CHECK: rt.launch @{{k[0-9]+}}(%[[A]], %[[T]], %{{.*}})
// CHECK: nccl.all_reduce sum %[[A]]
// CHECK: rt.copy %[[T]], %[[A]]
func.func @inplace_read_later(%a: !dist.tensor<8xf32, @world, [local]>)
    -> (!dist.tensor<8xf32, @world, [local]> {dist.inplace = 0 : i64}, !dist.tensor<8xf32, @world, [replicated]>) {
  %d = dist.map(%a) : (!dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [local]> {
  ^bb0(%x: f32):
    %y = arith.addf %x, %x : f32
    dist.yield %y : f32
  }
  %s = coll.all_reduce sum %a : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return %d, %s : !dist.tensor<8xf32, @world, [local]>, !dist.tensor<8xf32, @world, [replicated]>
}

// Pipeline stages: values placed at<r> on axis 0 are computed under rt.holds; a send is a
// grouped ncclSend on the holder and a grouped ncclRecv on the target.
// CHECK-LABEL: func.func @stage_send
// CHECK: %[[TP:.*]] = rt.comm @grid axes [1] : !rt.comm
// CHECK: %[[H0:.*]] = rt.holds @grid [at<0>, replicated] : i1
// CHECK: scf.if %[[H0]] {
// CHECK-NEXT: nccl.all_reduce sum %{{.*}}, %{{.*}}, %[[TP]], %{{.*}} count 8
// CHECK: %[[PP:.*]] = rt.comm @grid axes [0] : !rt.comm
// CHECK: scf.if %[[H0]] {
// CHECK-NEXT: nccl.group_start
// CHECK-NEXT: nccl.send %{{.*}}, %{{.*}}, %[[PP]], %{{.*}} count 8
// CHECK-NEXT: nccl.group_end
// CHECK: %[[H1:.*]] = rt.holds @grid [at<1>, replicated] : i1
// CHECK: scf.if %[[H1]] {
// CHECK-NEXT: nccl.group_start
// CHECK-NEXT: nccl.recv %{{.*}}, %{{.*}}, %[[PP]], %{{.*}} count 8
// CHECK-NEXT: nccl.group_end
func.func @stage_send(%x: !dist.tensor<8xf32, @grid, [at<0>, local]>) -> !dist.tensor<8xf32, @grid, [at<1>, replicated]> {
  %s = coll.all_reduce sum %x axes [1] : !dist.tensor<8xf32, @grid, [at<0>, local]> -> !dist.tensor<8xf32, @grid, [at<0>, replicated]>
  %r = coll.send %s to 1 axes [0] : !dist.tensor<8xf32, @grid, [at<0>, replicated]> -> !dist.tensor<8xf32, @grid, [at<1>, replicated]>
  func.return %r : !dist.tensor<8xf32, @grid, [at<1>, replicated]>
}

// All-to-all: a copy to self and one send/recv pair per peer, in one group; the peer
// of step k is this rank's group rank shifted by k.
// CHECK-LABEL: func.func @all_to_all
// CHECK: %[[ME:.*]] = rt.group_rank @world axes [0] : index
// CHECK: rt.copy
// CHECK: %[[P1:.*]] = rt.group_rank @world axes [0] shift 1 : index
// CHECK: %[[P3:.*]] = rt.group_rank @world axes [0] shift 3 : index
// CHECK: nccl.group_start
// CHECK-NEXT: nccl.send %{{.*}}, %[[P1]], %{{.*}} count 2
// CHECK-NEXT: nccl.recv %{{.*}}, %[[P3]], %{{.*}} count 2
// CHECK-NEXT: nccl.send
// CHECK-NEXT: nccl.recv
// CHECK-NEXT: nccl.send %{{.*}}, %[[P3]], %{{.*}} count 2
// CHECK-NEXT: nccl.recv %{{.*}}, %[[P1]], %{{.*}} count 2
// CHECK-NEXT: nccl.group_end
func.func @all_to_all(%x: !dist.tensor<8x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4xf32, @world, [sliced<1>]> {
  %y = coll.all_to_all %x dim 1 : !dist.tensor<8x4xf32, @world, [sliced<0>]> -> !dist.tensor<8x4xf32, @world, [sliced<1>]>
  func.return %y : !dist.tensor<8x4xf32, @world, [sliced<1>]>
}

// Local computations: matmul and reduce_tensor are library calls; remesh moves nothing.
// CHECK-LABEL: func.func @local_ops
// CHECK-SAME: (%[[A:.*]]: memref<4x2xf32>, %[[B:.*]]: memref<2x6xf32>)
// CHECK: rt.matmul %[[A]], %[[B]], %[[M:.*]], %{{.*}} : (memref<4x2xf32>, memref<2x6xf32>, memref<4x6xf32>, !rt.stream) -> ()
// CHECK: rt.reduce_tensor sum %[[M]], %{{.*}}, %{{.*}} dims [1] : (memref<4x6xf32>, memref<4xf32>, !rt.stream) -> ()
func.func @local_ops(%a: !dist.tensor<4x8xf32, @world, [sliced<1>]>, %b: !dist.tensor<8x6xf32, @world, [sliced<0>]>) -> !dist.tensor<4xf32, @world, [local]> {
  %m = dist.matmul %a, %b : (!dist.tensor<4x8xf32, @world, [sliced<1>]>, !dist.tensor<8x6xf32, @world, [sliced<0>]>) -> !dist.tensor<4x6xf32, @world, [local]>
  %r = dist.reduce_tensor sum %m dims [1] : !dist.tensor<4x6xf32, @world, [local]> -> !dist.tensor<4xf32, @world, [local]>
  func.return %r : !dist.tensor<4xf32, @world, [local]>
}

// A scatter-add into a row-sliced result: each rank fills its block of 25 rows, whose
// first global row is its group rank times 25.
// CHECK-LABEL: func.func @scatter_add_rows
// CHECK-SAME: (%[[I:.*]]: memref<32x1xi32>, %[[U:.*]]: memref<32x16xf32>) -> memref<25x16xf32>
// CHECK: %[[O:.*]] = rt.alloc : () -> memref<25x16xf32>
// CHECK: %[[G:.*]] = rt.group_rank @world axes [0]
// CHECK: %[[R0:.*]] = arith.muli %[[G]], %{{.*}} : index
// CHECK: rt.scatter_add %[[I]], %[[U]], %[[R0]], %[[O]], %{{.*}} : (memref<32x1xi32>, memref<32x16xf32>, index, memref<25x16xf32>, !rt.stream) -> ()
func.func @scatter_add_rows(%i: !dist.tensor<32x1xi32, @world, [replicated]>, %u: !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<100x16xf32, @world, [sliced<0>]> {
  %g = dist.scatter_add %i, %u : (!dist.tensor<32x1xi32, @world, [replicated]>, !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<100x16xf32, @world, [sliced<0>]>
  func.return %g : !dist.tensor<100x16xf32, @world, [sliced<0>]>
}

// CHECK-LABEL: func.func @sort_rows
// CHECK-SAME: (%[[X:.*]]: memref<2x16xf32>, %[[J:.*]]: memref<2x16xi32>)
// CHECK: rt.sort %[[X]], %[[J]], %{{.*}}, %{{.*}}, %{{.*}} dim 1 : (memref<2x16xf32>, memref<2x16xi32>, memref<2x16xf32>, memref<2x16xi32>, !rt.stream) -> ()
func.func @sort_rows(%x: !dist.tensor<8x16xf32, @world, [sliced<0>]>, %j: !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) {
  %s, %i = dist.sort %x, %j dim 1 : (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>)
  func.return %s, %i : !dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>
}
