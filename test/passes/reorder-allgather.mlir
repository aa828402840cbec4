// RUN: distir-opt %s -p reorder-allgather | filecheck %s
// RUN: distir-opt %s -p 'reorder-allgather{targets=biased}' | filecheck %s --check-prefix=ONE

dist.mesh @world shape = [4]

// CoCoNet's running example: bias, dropout and residual move before the AllGather; the
// replicated residual is sliced, the bias (broadcast along the gathered dim) is not.
// CHECK-LABEL: func.func @megatron_tail
// CHECK:         %[[BS:.*]] = dist.map(%rs, %b) : ({{.*}}<8x4x16xf32, @world, [sliced<0>]>, {{.*}}<16xf32, @world, [replicated]>) -> {{.*}}[sliced<0>]>
// CHECK:         %[[DS:.*]] = dist.dropout %[[BS]] p 0.1 seed 3 : {{.*}}[sliced<0>]> -> {{.*}}[sliced<0>]>
// CHECK-NEXT:    %[[RS:.*]] = dist.take_slice %r dim 0 : {{.*}}[replicated]> -> {{.*}}[sliced<0>]>
// CHECK-NEXT:    %[[OS:.*]] = dist.map(%[[DS]], %[[RS]])
// CHECK:         %[[O:.*]] = coll.all_gather %[[OS]] : {{.*}}[sliced<0>]> -> {{.*}}[replicated]>
// CHECK-NEXT:    func.return %[[O]]
// ONE-LABEL: func.func @megatron_tail
// ONE:         %biased_s = dist.map(%rs, %b)
// ONE:         %biased = coll.all_gather %biased_s
// ONE-NEXT:    %drop = dist.dropout %biased
func.func @megatron_tail(%rs: !dist.tensor<8x4x16xf32, @world, [sliced<0>]>, %b: !dist.tensor<16xf32, @world, [replicated]>, %r: !dist.tensor<8x4x16xf32, @world, [replicated]>) -> !dist.tensor<8x4x16xf32, @world, [replicated]> {
  %sum = coll.all_gather %rs : !dist.tensor<8x4x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x4x16xf32, @world, [replicated]>
  %biased = dist.map(%sum, %b) : (!dist.tensor<8x4x16xf32, @world, [replicated]>, !dist.tensor<16xf32, @world, [replicated]>) -> !dist.tensor<8x4x16xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    dist.yield %z : f32
  }
  %drop = dist.dropout %biased p 0.1 seed 3 : !dist.tensor<8x4x16xf32, @world, [replicated]> -> !dist.tensor<8x4x16xf32, @world, [replicated]>
  %out = dist.map(%drop, %r) : (!dist.tensor<8x4x16xf32, @world, [replicated]>, !dist.tensor<8x4x16xf32, @world, [replicated]>) -> !dist.tensor<8x4x16xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    dist.yield %z : f32
  }
  func.return %out : !dist.tensor<8x4x16xf32, @world, [replicated]>
}

// A computation on two values gathered the same way reads both slices; a multi-result
// map gets one AllGather per result.
// CHECK-LABEL: func.func @two_gathered_operands
// CHECK:         %[[A:.*]], %[[B:.*]] = dist.map(%x, %y) : ({{.*}}[sliced<0>]>, {{.*}}[sliced<0>]>) -> ({{.*}}[sliced<0>]>, {{.*}}[sliced<0>]>)
// CHECK-DAG:     coll.all_gather %[[A]]
// CHECK-DAG:     coll.all_gather %[[B]]
func.func @two_gathered_operands(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %y: !dist.tensor<64xf32, @world, [sliced<0>]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) {
  %gx = coll.all_gather %x : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %gy = coll.all_gather %y : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %s, %d = dist.map(%gx, %gy) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) {
  ^bb0(%a: f32, %b: f32):
    %p = arith.addf %a, %b : f32
    %q = arith.subf %a, %b : f32
    dist.yield %p, %q : f32, f32
  }
  func.return %s, %d : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>
}

// A reduction over the gathered dim becomes partial sums on the slices and an
// all_reduce of them (LAMB's norms); over another dim it stays sliced and is gathered.
// CHECK-LABEL: func.func @reductions
// CHECK:         %[[P:.*]] = dist.reduce_tensor sum %x dims [0, 1] : {{.*}}<16x8xf32, @world, [sliced<0>]> -> {{.*}}<f32, @world, [local]>
// CHECK-NEXT:    %[[N:.*]] = coll.all_reduce sum %[[P]] : {{.*}}[local]> -> {{.*}}[replicated]>
// CHECK-NEXT:    %[[R:.*]] = dist.reduce_tensor max %x dims [1] : {{.*}}<16x8xf32, @world, [sliced<0>]> -> {{.*}}<16xf32, @world, [sliced<0>]>
// CHECK-NEXT:    %[[G:.*]] = coll.all_gather %[[R]]
// CHECK-NEXT:    func.return %[[N]], %[[G]]
func.func @reductions(%x: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> (!dist.tensor<f32, @world, [replicated]>, !dist.tensor<16xf32, @world, [replicated]>) {
  %g = coll.all_gather %x : !dist.tensor<16x8xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [replicated]>
  %n = dist.reduce_tensor sum %g dims [0, 1] : !dist.tensor<16x8xf32, @world, [replicated]> -> !dist.tensor<f32, @world, [replicated]>
  %m = dist.reduce_tensor max %g dims [1] : !dist.tensor<16x8xf32, @world, [replicated]> -> !dist.tensor<16xf32, @world, [replicated]>
  func.return %n, %m : !dist.tensor<f32, @world, [replicated]>, !dist.tensor<16xf32, @world, [replicated]>
}

// A matmul gathered on its row dim runs on the row slice.
// CHECK-LABEL: func.func @matmul_rows
// CHECK:         %[[M:.*]] = dist.matmul %x, %w : ({{.*}}<16x8xf32, @world, [sliced<0>]>, {{.*}}[replicated]>) -> {{.*}}<16x4xf32, @world, [sliced<0>]>
// CHECK-NEXT:    coll.all_gather %[[M]]
func.func @matmul_rows(%x: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %w: !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<16x4xf32, @world, [replicated]> {
  %g = coll.all_gather %x : !dist.tensor<16x8xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [replicated]>
  %y = dist.matmul %g, %w : (!dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<16x4xf32, @world, [replicated]>
  func.return %y : !dist.tensor<16x4xf32, @world, [replicated]>
}

// A matmul gathered on its contracted dim has no sliced form that an AllGather
// completes (it would give partial sums): with no targets it is left alone.
// CHECK-LABEL: func.func @contracted_stays
// CHECK:         %[[G:.*]] = coll.all_gather %x
// CHECK-NEXT:    dist.matmul %[[G]], %w
func.func @contracted_stays(%x: !dist.tensor<16x8xf32, @world, [sliced<1>]>, %w: !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<16x4xf32, @world, [replicated]> {
  %g = coll.all_gather %x : !dist.tensor<16x8xf32, @world, [sliced<1>]> -> !dist.tensor<16x8xf32, @world, [replicated]>
  %y = dist.matmul %g, %w : (!dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<16x4xf32, @world, [replicated]>
  func.return %y : !dist.tensor<16x4xf32, @world, [replicated]>
}

// The map moves onto the blocks of different sizes (13 over 4 ranks) before the gather.
// CHECK-LABEL: func.func @uneven_gather_then_map
// CHECK-NEXT:    %[[MS:.*]] = dist.map(%x) : (!dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]>
// CHECK:         %[[M:.*]] = coll.all_gather %[[MS]] : !dist.tensor<13xf32, @world, [sliced<0>]> -> !dist.tensor<13xf32, @world, [replicated]>
// CHECK-NEXT:    func.return %[[M]]
func.func @uneven_gather_then_map(%x: !dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [replicated]> {
  %ag = coll.all_gather %x : !dist.tensor<13xf32, @world, [sliced<0>]> -> !dist.tensor<13xf32, @world, [replicated]>
  %m = dist.map(%ag) : (!dist.tensor<13xf32, @world, [replicated]>) -> !dist.tensor<13xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %f = arith.mulf %e, %e : f32
    dist.yield %f : f32
  }
  func.return %m : !dist.tensor<13xf32, @world, [replicated]>
}
