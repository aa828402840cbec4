// RUN: distir-opt %s -p 'overlap{chunks=4 order=ring}' | filecheck %s
// RUN: distir-opt %s -p 'overlap{chunks=2 targets=l,out}' | filecheck %s --check-prefix=TARGET
// RUN: not distir-opt %s -p 'overlap{targets=lone}' 2>&1 | filecheck %s --check-prefix=NOCHAIN
// RUN: not distir-opt %s -p 'overlap{order=backwards}' 2>&1 | filecheck %s --check-prefix=ORDER
// RUN: not distir-opt %s -p 'overlap{chunks=0}' 2>&1 | filecheck %s --check-prefix=CHUNKS
// RUN: distir-opt %s -p 'overlap{chunks=2 order=remote_first granularity=tile}' | filecheck %s --check-prefix=TILE
// RUN: distir-opt %s -p 'overlap{granularity=tile targets=h}' | filecheck %s --check-prefix=TILETARGET
// RUN: not distir-opt %s -p 'overlap{granularity=tile targets=rs}' 2>&1 | filecheck %s --check-prefix=NOTILE
// RUN: not distir-opt %s -p 'overlap{granularity=tile targets=disp}' 2>&1 | filecheck %s --check-prefix=BEFORE
// RUN: not distir-opt %s -p 'overlap{granularity=wave}' 2>&1 | filecheck %s --check-prefix=GRAN

// NOCHAIN: 'overlap' pass: target %lone: 'dist.map' is in no producer -> collective chain (each op must read the single, single-use result of the previous one)
// ORDER: 'overlap' pass: order must be one of natural, ring, remote_first, got 'backwards'
// CHUNKS: 'overlap' pass: chunks must be at least 1, got 0
// NOTILE: 'overlap' pass: target %rs: no fused tile operator holds 'coll.reduce_scatter': 'coll.reduce_scatter' is not fed by a dist.matmul or dist.embedding_bag (through maps only)
// BEFORE: 'overlap' pass: target %disp: no fused tile operator holds 'coll.all_to_all': 'coll.all_to_all' is not fed by a dist.matmul or dist.embedding_bag (through maps only)
// GRAN: 'overlap' pass: granularity must be one of chunk, tile, got 'wave'

dist.mesh @world shape = [4]

// MM-AR: the matmul and the all-reduce; the computations after the collective stay out.
// With granularity=tile the same chain is one fused GEMM + AllReduce operator.
// TILE-LABEL: func.func @matmul_all_reduce
// TILE:         %[[S:.*]] = coll.overlap chunks 2 order remote_first granularity tile -> {{.*}}[replicated]> {
// TILE-NEXT:      %[[L:.*]] = dist.matmul %a, %b
// TILE-NEXT:      %[[R:.*]] = coll.all_reduce sum %[[L]]
// TILE-NEXT:      coll.yield %[[R]]
// TILE-NEXT:    }
// TILE-NEXT:    dist.map(%[[S]])
// CHECK-LABEL: func.func @matmul_all_reduce
// CHECK:         %[[S:.*]] = coll.overlap chunks 4 order ring -> {{.*}}[replicated]> {
// CHECK-NEXT:      %[[L:.*]] = dist.matmul %a, %b
// CHECK-NEXT:      %[[R:.*]] = coll.all_reduce sum %[[L]]
// CHECK-NEXT:      coll.yield %[[R]]
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[O:.*]] = dist.map(%[[S]])
// CHECK:         func.return %[[O]]
// TARGET-LABEL: func.func @matmul_all_reduce
// TARGET:         %[[O:.*]] = coll.overlap chunks 2 -> {{.*}}[replicated]> {
// TARGET-NEXT:      dist.matmul
// TARGET-NEXT:      coll.all_reduce
// TARGET-NEXT:      %[[M:.*]] = dist.map
// TARGET:           coll.yield %[[M]]
// TARGET:         func.return %[[O]]
func.func @matmul_all_reduce(%a: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %b: !dist.tensor<16x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  %l = dist.matmul %a, %b : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4xf32, @world, [local]>
  %s = coll.all_reduce sum %l : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [replicated]>
  %out = dist.map(%s) : (!dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  ^bb0(%x: f32):
    %y = math.tanh %x : f32
    dist.yield %y : f32
  }
  func.return %out : !dist.tensor<8x4xf32, @world, [replicated]>
}

// A chain of collectives with a computation between: reduce-scatter, map, all-gather.
// No producer feeds a collective: no fused tile operator.
// TILE-LABEL: func.func @scatter_compute_gather
// TILE-NOT:     coll.overlap
// TILE:         func.return
// CHECK-LABEL: func.func @scatter_compute_gather
// CHECK:         coll.overlap chunks 4 order ring
// CHECK-NEXT:      coll.reduce_scatter
// CHECK-NEXT:      dist.map
// CHECK:           coll.all_gather
// CHECK-NEXT:      coll.yield
func.func @scatter_compute_gather(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %m = dist.map(%rs) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %c = arith.mulf %a, %a : f32
    dist.yield %c : f32
  }
  %ag = coll.all_gather %m : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %ag : !dist.tensor<64xf32, @world, [replicated]>
}

// A lone collective, or a producer with other uses, is no chain.
// CHECK-LABEL: func.func @no_chain
// CHECK-NOT:     coll.overlap
// CHECK:         func.return
func.func @no_chain(%x: !dist.tensor<64xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [local]>) {
  %lone = dist.map(%x) : (!dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [local]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  %s = coll.all_reduce sum %lone : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %s, %lone : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [local]>
}

// MoE: dispatch all_to_all, expert GEMM, activation, combine all_to_all. The fused
// operator holds the GEMM, its activation (the epilogue) and the combine; the dispatch
// before them stays out.
// TILE-LABEL: func.func @moe
// TILE:         %disp = coll.all_to_all %tokens dim 0
// TILE-NEXT:    %[[B:.*]] = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]> {
// TILE-NEXT:      %[[H:.*]] = dist.matmul %disp, %w
// TILE-NEXT:      %[[A:.*]] = dist.map(%[[H]])
// TILE:           %[[C:.*]] = coll.all_to_all %[[A]] dim 1
// TILE-NEXT:      coll.yield %[[C]]
// TILE-NEXT:    }
// TILE-NEXT:    func.return %[[B]]
// TILETARGET-LABEL: func.func @moe
// TILETARGET:     coll.overlap chunks 4 granularity tile
// TILETARGET-NEXT:  dist.matmul %disp, %w
func.func @moe(%tokens: !dist.tensor<8x16x8xf32, @world, [sliced<1>]>, %w: !dist.tensor<8x8x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]> {
  %disp = coll.all_to_all %tokens dim 0 : !dist.tensor<8x16x8xf32, @world, [sliced<1>]> -> !dist.tensor<8x16x8xf32, @world, [sliced<0>]>
  %h = dist.matmul %disp, %w : (!dist.tensor<8x16x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16x16xf32, @world, [sliced<0>]>
  %act = dist.map(%h) : (!dist.tensor<8x16x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16x16xf32, @world, [sliced<0>]> {
  ^bb0(%z: f32):
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %z, %zero : f32
    dist.yield %r : f32
  }
  %back = coll.all_to_all %act dim 1 : !dist.tensor<8x16x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
  func.return %back : !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
}

// Embedding + All-to-All (DLRM) and GEMV + ReduceScatter.
// TILE-LABEL: func.func @embedding_and_gemv
// TILE:         coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<8x16x8xf32, @world, [sliced<1>]> {
// TILE-NEXT:      dist.embedding_bag %t, %i
// TILE-NEXT:      coll.all_to_all
// TILE:         coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<4x16xf32, @world, [sliced<1>]> {
// TILE-NEXT:      dist.matmul %x, %v
// TILE-NEXT:      coll.reduce_scatter sum %{{.*}} dim 1
func.func @embedding_and_gemv(%t: !dist.tensor<8x32x8xf32, @world, [sliced<0>]>, %i: !dist.tensor<8x16x4xi32, @world, [sliced<0>]>,
                              %x: !dist.tensor<4x32xf32, @world, [sliced<1>]>, %v: !dist.tensor<32x16xf32, @world, [sliced<0>]>)
    -> (!dist.tensor<8x16x8xf32, @world, [sliced<1>]>, !dist.tensor<4x16xf32, @world, [sliced<1>]>) {
  %e = dist.embedding_bag %t, %i : (!dist.tensor<8x32x8xf32, @world, [sliced<0>]>, !dist.tensor<8x16x4xi32, @world, [sliced<0>]>) -> !dist.tensor<8x16x8xf32, @world, [sliced<0>]>
  %m = coll.all_to_all %e dim 1 : !dist.tensor<8x16x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x16x8xf32, @world, [sliced<1>]>
  %p = dist.matmul %x, %v : (!dist.tensor<4x32xf32, @world, [sliced<1>]>, !dist.tensor<32x16xf32, @world, [sliced<0>]>) -> !dist.tensor<4x16xf32, @world, [local]>
  %rs = coll.reduce_scatter sum %p dim 1 : !dist.tensor<4x16xf32, @world, [local]> -> !dist.tensor<4x16xf32, @world, [sliced<1>]>
  func.return %m, %rs : !dist.tensor<8x16x8xf32, @world, [sliced<1>]>, !dist.tensor<4x16xf32, @world, [sliced<1>]>
}

// A contracted dim of 13 over 4 ranks (blocks 4, 4, 4, 1): the chain is wrapped the same
// way (the lowering runs it on padded blocks).
// CHECK-LABEL: func.func @uneven_matmul_all_reduce
// CHECK:         %[[S:.*]] = coll.overlap chunks 4 order ring -> !dist.tensor<5x7xf32, @world, [replicated]> {
// CHECK-NEXT:      %[[M:.*]] = dist.matmul %a, %w : (!dist.tensor<5x13xf32, @world, [sliced<1>]>, !dist.tensor<13x7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [local]>
// CHECK-NEXT:      %[[R:.*]] = coll.all_reduce sum %[[M]]
// CHECK-NEXT:      coll.yield %[[R]]
func.func @uneven_matmul_all_reduce(%a: !dist.tensor<5x13xf32, @world, [sliced<1>]>, %w: !dist.tensor<13x7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [replicated]> {
  %m = dist.matmul %a, %w : (!dist.tensor<5x13xf32, @world, [sliced<1>]>, !dist.tensor<13x7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [local]>
  %s = coll.all_reduce sum %m : !dist.tensor<5x7xf32, @world, [local]> -> !dist.tensor<5x7xf32, @world, [replicated]>
  func.return %s : !dist.tensor<5x7xf32, @world, [replicated]>
}

// Tile operators whose dims no power of two divides (13 rows, 7 tables or experts, 10
// bags or tokens): wrapped as on even dims; the lowering lays their blocks out padded
// (test/lowering/lower-uneven.mlir).
// TILE-LABEL: func.func @uneven_tiles
// TILE:         %[[RS:.*]] = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<13x5xf32, @world, [sliced<0>]> {
// TILE-NEXT:      %[[P:.*]] = dist.matmul %x, %v
// TILE-NEXT:      %[[S:.*]] = coll.reduce_scatter sum %[[P]] dim 0
// TILE-NEXT:      coll.yield %[[S]]
// TILE:         %[[EA:.*]] = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]> {
// TILE-NEXT:      %[[E:.*]] = dist.embedding_bag %t, %i
// TILE-NEXT:      %[[A:.*]] = coll.all_to_all %[[E]] dim 1
// TILE-NEXT:      coll.yield %[[A]]
// TILE:         %[[XA:.*]] = coll.overlap chunks 2 order remote_first granularity tile -> !dist.tensor<7x10x6xf32, @world, [sliced<1>]> {
// TILE-NEXT:      %[[G:.*]] = dist.matmul %tok, %ew
// TILE-NEXT:      %[[RELU:.*]] = dist.map(%[[G]])
// TILE:           %[[B:.*]] = coll.all_to_all %[[RELU]] dim 1
// TILE-NEXT:      coll.yield %[[B]]
// TILE:         func.return %[[RS]], %[[EA]], %[[XA]]
func.func @uneven_tiles(%x: !dist.tensor<13x11xf32, @world, [sliced<1>]>, %v: !dist.tensor<11x5xf32, @world, [sliced<0>]>,
                        %t: !dist.tensor<7x9x4xf32, @world, [sliced<0>]>, %i: !dist.tensor<7x10x3xi32, @world, [sliced<0>]>,
                        %tok: !dist.tensor<7x10x4xf32, @world, [sliced<0>]>, %ew: !dist.tensor<7x4x6xf32, @world, [sliced<0>]>)
    -> (!dist.tensor<13x5xf32, @world, [sliced<0>]>, !dist.tensor<7x10x4xf32, @world, [sliced<1>]>, !dist.tensor<7x10x6xf32, @world, [sliced<1>]>) {
  %p = dist.matmul %x, %v : (!dist.tensor<13x11xf32, @world, [sliced<1>]>, !dist.tensor<11x5xf32, @world, [sliced<0>]>) -> !dist.tensor<13x5xf32, @world, [local]>
  %s = coll.reduce_scatter sum %p dim 0 : !dist.tensor<13x5xf32, @world, [local]> -> !dist.tensor<13x5xf32, @world, [sliced<0>]>
  %e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<7x9x4xf32, @world, [sliced<0>]>, !dist.tensor<7x10x3xi32, @world, [sliced<0>]>) -> !dist.tensor<7x10x4xf32, @world, [sliced<0>]>
  %a = coll.all_to_all %e dim 1 : !dist.tensor<7x10x4xf32, @world, [sliced<0>]> -> !dist.tensor<7x10x4xf32, @world, [sliced<1>]>
  %g = dist.matmul %tok, %ew : (!dist.tensor<7x10x4xf32, @world, [sliced<0>]>, !dist.tensor<7x4x6xf32, @world, [sliced<0>]>) -> !dist.tensor<7x10x6xf32, @world, [sliced<0>]>
  %relu = dist.map(%g) : (!dist.tensor<7x10x6xf32, @world, [sliced<0>]>) -> !dist.tensor<7x10x6xf32, @world, [sliced<0>]> {
  ^bb0(%z: f32):
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %z, %zero : f32
    dist.yield %r : f32
  }
  %b = coll.all_to_all %relu dim 1 : !dist.tensor<7x10x6xf32, @world, [sliced<0>]> -> !dist.tensor<7x10x6xf32, @world, [sliced<1>]>
  func.return %s, %a, %b : !dist.tensor<13x5xf32, @world, [sliced<0>]>, !dist.tensor<7x10x4xf32, @world, [sliced<1>]>, !dist.tensor<7x10x6xf32, @world, [sliced<1>]>
}
