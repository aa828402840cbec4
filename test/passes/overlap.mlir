// RUN: distir-opt %s -p 'overlap{chunks=4 order=ring}' | filecheck %s
// RUN: distir-opt %s -p 'overlap{chunks=2 targets=l,out}' | filecheck %s --check-prefix=TARGET
// RUN: not distir-opt %s -p 'overlap{targets=lone}' 2>&1 | filecheck %s --check-prefix=NOCHAIN
// RUN: not distir-opt %s -p 'overlap{order=backwards}' 2>&1 | filecheck %s --check-prefix=ORDER
// RUN: not distir-opt %s -p 'overlap{chunks=0}' 2>&1 | filecheck %s --check-prefix=CHUNKS

// NOCHAIN: 'overlap' pass: target %lone: 'dist.map' is in no producer -> collective chain (each op must read the single, single-use result of the previous one)
// ORDER: 'overlap' pass: order must be one of natural, ring, remote_first, got 'backwards'
// CHUNKS: 'overlap' pass: chunks must be at least 1, got 0

dist.mesh @world shape = [4]

// MM-AR: the matmul and the all-reduce; the computations after the collective stay out.
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
