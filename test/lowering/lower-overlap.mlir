// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap' | filecheck %s
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives' | filecheck %s --check-prefix=LOW
// coll.overlap chains are cut into chunks: computation on stream 0, collectives on 1.

dist.mesh @world shape = [?]

// CHECK-LABEL: func.func @mm_ar
// CHECK: %[[K0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[X0:.*]] = rt.chunk %{{.*}}, %[[K0]] dim 0 count 2 : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, index) -> !dist.tensor<4x16xf32, @world, [sliced<1>]>
// CHECK-NEXT: %[[L0:.*]] = dist.matmul %[[X0]], %{{.*}} {rt.stream = 0 : i64}
// CHECK-NEXT: %[[S0:.*]] = coll.all_reduce sum %[[L0]] {rt.stream = 1 : i64} : !dist.tensor<4x8xf32, @world, [local]> -> !dist.tensor<4x8xf32, @world, [replicated]>
// CHECK-NEXT: %[[K1:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[X1:.*]] = rt.chunk %{{.*}}, %[[K1]] dim 0 count 2
// CHECK-NEXT: %[[L1:.*]] = dist.matmul %[[X1]], %{{.*}} {rt.stream = 0 : i64}
// CHECK-NEXT: %[[S1:.*]] = coll.all_reduce sum %[[L1]] {rt.stream = 1 : i64}
// CHECK-NEXT: %[[Y:.*]] = rt.assemble %[[S0]], %[[S1]] dim 0 : (!dist.tensor<4x8xf32, @world, [replicated]>, !dist.tensor<4x8xf32, @world, [replicated]>) -> !dist.tensor<8x8xf32, @world, [replicated]>
// CHECK-NEXT: func.return %[[Y]]

// Each chunk's all-reduce waits for its matmul through an event; the result is written
// straight into its block of the assembled buffer; stream 0 waits for stream 1 at the end.
// LOW-LABEL: func.func @mm_ar
// LOW: %[[S:.*]] = rt.stream 0 : !rt.stream
// LOW: rt.matmul %{{.*}}, %{{.*}}, %[[L0:.*]], %[[S]]
// LOW: %[[S1:.*]] = rt.stream 1 : !rt.stream
// LOW-NEXT: %[[E0:.*]] = rt.event_record %[[S]]
// LOW-NEXT: rt.stream_wait %[[S1]], %[[E0]]
// LOW: %[[Y:.*]] = rt.alloc : () -> memref<8x8xf32>
// LOW: %[[B0:.*]] = rt.block %[[Y]], %{{.*}} dim 0 count 2 : (memref<8x8xf32>, index) -> memref<4x8xf32>
// LOW: nccl.all_reduce sum %[[L0]], %[[B0]], %{{.*}}, %[[S1]] count 32
// LOW: rt.matmul %{{.*}}, %{{.*}}, %[[L1:.*]], %[[S]]
// LOW: rt.event_record %[[S]]
// LOW: nccl.all_reduce sum %[[L1]], %{{.*}}, %{{.*}}, %[[S1]] count 32
// LOW: %[[E:.*]] = rt.event_record %[[S1]]
// LOW-NEXT: rt.stream_wait %[[S]], %[[E]]
// LOW: rt.stream_sync %[[S]]
// LOW-NEXT: rt.stream_sync %[[S1]]
// LOW-NEXT: func.return %[[Y]]
func.func @mm_ar(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<8x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [replicated]>
}

// A reduce-scatter slices dim 0 and the result stays sliced along it: cut along dim 0,
// rank r would hold block r of each chunk instead of block r of the rows, so the chain
// is cut along dim 1.
// CHECK-LABEL: func.func @mm_rs
// CHECK: rt.chunk %{{.*}}, %{{.*}} dim 1 count 2
// CHECK: coll.reduce_scatter sum %{{.*}} dim 0 {rt.stream = 1 : i64} : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [sliced<0>]>
// CHECK: rt.assemble %{{.*}}, %{{.*}} dim 1
func.func @mm_rs(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [sliced<0>]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<8x8xf32, @world, [sliced<0>]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.reduce_scatter sum %l dim 0 : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [sliced<0>]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [sliced<0>]>
}

// Chunks that do not divide the blocks: the chain stays whole.
// CHECK-LABEL: func.func @indivisible
// CHECK: coll.overlap chunks 3
func.func @indivisible(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 3 -> !dist.tensor<8x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [replicated]>
}

// A chain that reduce-scatters dim 0 and gathers it back (ol(MM,fuse(RS-C-AG))) is cut
// along dim 0, the contiguous rows: chunk k's rows are reduce-scattered on their own, the
// replicated input the region slices is chunked before it is sliced, the dropout marks
// its chunk as chunk-major ([dim, k, n, 1]), and the all-gathered chunks are the rows.
// CHECK-LABEL: func.func @mm_fused_rows
// CHECK: %[[K0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[X0:.*]] = rt.chunk %x, %[[K0]] dim 0 count 2 : (!dist.tensor<16x16xf32, @world, [sliced<1>]>, index) -> !dist.tensor<8x16xf32, @world, [sliced<1>]>
// CHECK-NEXT: %[[L0:.*]] = dist.matmul %[[X0]], %w {rt.stream = 0 : i64}
// CHECK-NEXT: %[[R0:.*]] = rt.chunk %r, %[[K0]] dim 0 count 2 : (!dist.tensor<16x8xf32, @world, [replicated]>, index) -> !dist.tensor<8x8xf32, @world, [replicated]>
// CHECK-NEXT: %[[F0:.*]] = coll.fused_all_reduce sum %[[L0]] dim 0 {rt.stream = 1 : i64} : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [replicated]> {
// CHECK-NEXT: ^{{.*}}(%[[S0:.*]]: !dist.tensor<8x8xf32, @world, [sliced<0>]>):
// CHECK-NEXT: dist.take_slice %[[R0]] dim 0 : !dist.tensor<8x8xf32, @world, [replicated]> -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
// CHECK-NEXT: dist.dropout %[[S0]] p 0.5 seed 7 {rt.chunk = [0 : i64, 0 : i64, 2 : i64, 1 : i64]}
// CHECK: %[[K1:.*]] = arith.constant 1 : index
// CHECK-NEXT: rt.chunk %x, %[[K1]] dim 0 count 2
// CHECK: dist.dropout %{{.*}} {rt.chunk = [0 : i64, 1 : i64, 2 : i64, 1 : i64]}
// CHECK: %[[Y:.*]] = rt.assemble %[[F0]], %{{.*}} dim 0 : (!dist.tensor<8x8xf32, @world, [replicated]>, !dist.tensor<8x8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [replicated]>
// CHECK-NEXT: func.return %[[Y]]

// Lowered, every chunk is a contiguous block: no copies; chunk k's all-gather fills rows
// 8k .. 8k+7 of the result, and its dropout starts at logical row 8k + 4 x rank.
// LOW-LABEL: func.func @mm_fused_rows
// LOW-NOT: rt.copy
// LOW: %[[Y:.*]] = rt.alloc : () -> memref<16x8xf32>
// LOW: rt.fused {
// LOW-NEXT: nccl.reduce_scatter sum %{{.*}}, %[[S0:.*]], %{{.*}}, %{{.*}} count 32 : (memref<8x8xf32>, memref<4x8xf32>, !rt.comm, !rt.stream) -> ()
// LOW-NEXT: %[[B0:.*]] = rt.block %[[Y]], %{{.*}} dim 0 count 2 : (memref<16x8xf32>, index) -> memref<8x8xf32>
// LOW: %[[G:.*]] = rt.group_rank @world axes [0] : index
// LOW-NEXT: %[[E:.*]] = arith.constant 4 : index
// LOW-NEXT: %[[GE:.*]] = arith.muli %[[G]], %[[E]] : index
// LOW-NEXT: %[[K:.*]] = arith.constant 0 : index
// LOW-NEXT: %[[OFF:.*]] = arith.addi %[[GE]], %[[K]] : index
// LOW-NEXT: rt.launch @{{.*}}(%[[S0]], %{{.*}}, %{{.*}}, %[[OFF]], %[[OUT:.*]], %{{.*}})
// LOW-NEXT: nccl.all_gather %[[OUT]], %[[B0]], %{{.*}}, %{{.*}} count 32
// LOW: rt.fused {
// LOW: %[[K1:.*]] = arith.constant 8 : index
// LOW-NEXT: arith.addi %{{.*}}, %[[K1]] : index
// LOW-NOT: rt.copy
// LOW: func.return %[[Y]]
func.func @mm_fused_rows(%x: !dist.tensor<16x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %b: !dist.tensor<8xf32, @world, [replicated]>, %r: !dist.tensor<16x8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<16x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<16x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [local]>
    %f = coll.fused_all_reduce sum %l dim 0 : !dist.tensor<16x8xf32, @world, [local]> -> !dist.tensor<16x8xf32, @world, [replicated]> {
    ^bb0(%s: !dist.tensor<16x8xf32, @world, [sliced<0>]>):
      %rs = dist.take_slice %r dim 0 : !dist.tensor<16x8xf32, @world, [replicated]> -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
      %d = dist.dropout %s p 0.5 seed 7 : !dist.tensor<16x8xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
      %o = dist.map(%d, %b, %rs) : (!dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<8xf32, @world, [replicated]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
      ^bb0(%p: f32, %q: f32, %t: f32):
        %u = arith.addf %p, %q : f32
        %v = arith.addf %u, %t : f32
        dist.yield %v : f32
      }
      coll.yield %o : !dist.tensor<16x8xf32, @world, [sliced<0>]>
    }
    coll.yield %f : !dist.tensor<16x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<16x8xf32, @world, [replicated]>
}

// ol(MM,RS-C-AG) unfused, with the residual sliced before the chain (as
// reorder-allgather leaves it): cut along dim 0 too; that input is sliced again from its
// replicated source's chunk, so each rank adds the rows of its block of the chunk.
// CHECK-LABEL: func.func @mm_rs_ag_rows
// CHECK: %[[X0:.*]] = rt.chunk %x, %{{.*}} dim 0 count 2
// CHECK-NEXT: %[[L0:.*]] = dist.matmul %[[X0]], %w {rt.stream = 0 : i64}
// CHECK-NEXT: %[[S0:.*]] = coll.reduce_scatter sum %[[L0]] dim 0 {rt.stream = 1 : i64} : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
// CHECK-NEXT: %[[R0:.*]] = rt.chunk %r, %{{.*}} dim 0 count 2 : (!dist.tensor<16x8xf32, @world, [replicated]>, index) -> !dist.tensor<8x8xf32, @world, [replicated]>
// CHECK-NEXT: %[[RS0:.*]] = dist.take_slice %[[R0]] dim 0 : !dist.tensor<8x8xf32, @world, [replicated]> -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
// CHECK-NEXT: %[[O0:.*]] = dist.map(%[[S0]], %[[RS0]]) {rt.stream = 1 : i64}
// CHECK: %[[G0:.*]] = coll.all_gather %[[O0]] {rt.stream = 1 : i64} : !dist.tensor<8x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x8xf32, @world, [replicated]>
// CHECK: rt.assemble %[[G0]], %{{.*}} dim 0
func.func @mm_rs_ag_rows(%x: !dist.tensor<16x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %r: !dist.tensor<16x8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [replicated]> {
  %rs = dist.take_slice %r dim 0 : !dist.tensor<16x8xf32, @world, [replicated]> -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
  %y = coll.overlap chunks 2 -> !dist.tensor<16x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<16x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [local]>
    %s = coll.reduce_scatter sum %l dim 0 : !dist.tensor<16x8xf32, @world, [local]> -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
    %o = dist.map(%s, %rs) : (!dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
    ^bb0(%p: f32, %q: f32):
      %u = arith.addf %p, %q : f32
      dist.yield %u : f32
    }
    %g = coll.all_gather %o : !dist.tensor<16x8xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [replicated]>
    coll.yield %g : !dist.tensor<16x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<16x8xf32, @world, [replicated]>
}

// An input sliced along dim 0 that is not a slice of a replicated value (an argument):
// its chunk of rank r's block is not rank r's block of the chunk, so the chain keeps the
// cut along dim 1.
// CHECK-LABEL: func.func @sliced_input
// CHECK: rt.chunk %w, %{{.*}} dim 1 count 2
// CHECK: coll.reduce_scatter sum %{{.*}} dim 0 {rt.stream = 1 : i64} : !dist.tensor<16x4xf32, @world, [local]> -> !dist.tensor<16x4xf32, @world, [sliced<0>]>
// CHECK: rt.chunk %r, %{{.*}} dim 1 count 2
// CHECK: rt.assemble %{{.*}}, %{{.*}} dim 1
func.func @sliced_input(%x: !dist.tensor<16x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %r: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<16x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<16x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [local]>
    %s = coll.reduce_scatter sum %l dim 0 : !dist.tensor<16x8xf32, @world, [local]> -> !dist.tensor<16x8xf32, @world, [sliced<0>]>
    %o = dist.map(%s, %r) : (!dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
    ^bb0(%p: f32, %q: f32):
      %u = arith.addf %p, %q : f32
      dist.yield %u : f32
    }
    %g = coll.all_gather %o : !dist.tensor<16x8xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [replicated]>
    coll.yield %g : !dist.tensor<16x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<16x8xf32, @world, [replicated]>
}

// A ring order is rank-dependent: the matmul -> fused all-reduce chain is left whole for
// lower-collectives, which reduces it by point-to-point transfers along the
// reduce-scatter's dim (overlap.py), as before.
// CHECK-LABEL: func.func @ring_fused
// CHECK: coll.overlap chunks 2 order ring
// CHECK-NOT: rt.chunk
// LOW-LABEL: func.func @ring_fused
// LOW: rt.block %x, %{{.*}} dim 0 count 2 : (memref<16x8xf32>, index) -> memref<8x8xf32>
// LOW: nccl.send
// LOW: nccl.recv
// LOW: rt.fused
// LOW: nccl.all_gather
func.func @ring_fused(%x: !dist.tensor<16x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %b: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 order ring -> !dist.tensor<16x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<16x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [local]>
    %f = coll.fused_all_reduce sum %l dim 0 : !dist.tensor<16x8xf32, @world, [local]> -> !dist.tensor<16x8xf32, @world, [replicated]> {
    ^bb0(%s: !dist.tensor<16x8xf32, @world, [sliced<0>]>):
      %o = dist.map(%s, %b) : (!dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
      ^bb0(%p: f32, %q: f32):
        %u = arith.addf %p, %q : f32
        dist.yield %u : f32
      }
      coll.yield %o : !dist.tensor<16x8xf32, @world, [sliced<0>]>
    }
    coll.yield %f : !dist.tensor<16x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<16x8xf32, @world, [replicated]>
}
