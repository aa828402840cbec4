// RUN: distir-opt %s -p expand-collectives | filecheck %s
// RUN: distir-opt %s -p expand-collectives,form-collectives | filecheck %s --check-prefix=ROUND

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 4]

// CHECK-LABEL: func.func @all_reduce
// CHECK:         %[[R:.*]] = dist.reduce sum %x : {{.*}}[local]> -> {{.*}}[unplaced]>
// CHECK-NEXT:    %[[Y:.*]] = dist.repl %[[R]] : {{.*}}[unplaced]> -> {{.*}}[replicated]>
// CHECK-NEXT:    func.return %[[Y]]
// ROUND-LABEL: func.func @all_reduce
// ROUND:         coll.all_reduce sum %x :
func.func @all_reduce(%x: !dist.tensor<64x8xf32, @world, [local]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64x8xf32, @world, [replicated]>
}

// CHECK-LABEL: func.func @reduce_scatter_then_all_gather
// CHECK:         %[[R:.*]] = dist.reduce avg %x
// CHECK-NEXT:    %[[S:.*]] = dist.slice %[[R]] dim 1 : {{.*}}[unplaced]> -> {{.*}}[sliced<1>]>
// CHECK-NEXT:    %[[J:.*]] = dist.join %[[S]] : {{.*}}[sliced<1>]> -> {{.*}}[unplaced]>
// CHECK-NEXT:    %[[A:.*]] = dist.repl %[[J]]
// CHECK-NEXT:    func.return %[[A]]
// ROUND-LABEL: func.func @reduce_scatter_then_all_gather
// ROUND:         %[[RS:.*]] = coll.reduce_scatter avg %x dim 1
// ROUND-NEXT:    coll.all_gather %[[RS]] :
func.func @reduce_scatter_then_all_gather(%x: !dist.tensor<64x8xf32, @world, [local]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter avg %x dim 1 : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  %ag = coll.all_gather %rs : !dist.tensor<64x8xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  func.return %ag : !dist.tensor<64x8xf32, @world, [replicated]>
}

// Root 5 of a 2x4 group is at<1> on both axes; send to 2 is at<0>, at<2>.
// CHECK-LABEL: func.func @reduce_send_broadcast_two_axes
// CHECK:         %[[R0:.*]] = dist.reduce sum %x : {{.*}}[local, local]> -> {{.*}}[unplaced, local]>
// CHECK-NEXT:    %[[R1:.*]] = dist.reduce sum %[[R0]] axis 1 : {{.*}} -> {{.*}}[unplaced, unplaced]>
// CHECK-NEXT:    %[[S0:.*]] = dist.store %[[R1]] rank 1 : {{.*}} -> {{.*}}[at<1>, unplaced]>
// CHECK-NEXT:    %[[S1:.*]] = dist.store %[[S0]] rank 1 axis 1 : {{.*}} -> {{.*}}[at<1>, at<1>]>
// CHECK-NEXT:    %[[L0:.*]] = dist.load %[[S1]] :
// CHECK-NEXT:    %[[L1:.*]] = dist.load %[[L0]] axis 1 :
// CHECK-NEXT:    %[[T0:.*]] = dist.store %[[L1]] rank 0 :
// CHECK-NEXT:    %[[T1:.*]] = dist.store %[[T0]] rank 2 axis 1 : {{.*}} -> {{.*}}[at<0>, at<2>]>
// CHECK-NEXT:    %[[L2:.*]] = dist.load %[[T1]] :
// CHECK-NEXT:    %[[L3:.*]] = dist.load %[[L2]] axis 1 :
// CHECK-NEXT:    %[[B0:.*]] = dist.repl %[[L3]] :
// CHECK-NEXT:    %[[B1:.*]] = dist.repl %[[B0]] axis 1 : {{.*}} -> {{.*}}[replicated, replicated]>
// ROUND-LABEL: func.func @reduce_send_broadcast_two_axes
// ROUND:         %[[R:.*]] = coll.reduce sum %x root 5 axes [0, 1]
// ROUND-NEXT:    %[[S:.*]] = coll.send %[[R]] to 2 axes [0, 1]
// ROUND-NEXT:    coll.broadcast %[[S]] axes [0, 1]
func.func @reduce_send_broadcast_two_axes(%x: !dist.tensor<64x8xf32, @grid, [local, local]>) -> !dist.tensor<64x8xf32, @grid, [replicated, replicated]> {
  %r = coll.reduce sum %x root 5 axes [0, 1] : !dist.tensor<64x8xf32, @grid, [local, local]> -> !dist.tensor<64x8xf32, @grid, [at<1>, at<1>]>
  %s = coll.send %r to 2 axes [0, 1] : !dist.tensor<64x8xf32, @grid, [at<1>, at<1>]> -> !dist.tensor<64x8xf32, @grid, [at<0>, at<2>]>
  %b = coll.broadcast %s axes [0, 1] : !dist.tensor<64x8xf32, @grid, [at<0>, at<2>]> -> !dist.tensor<64x8xf32, @grid, [replicated, replicated]>
  func.return %b : !dist.tensor<64x8xf32, @grid, [replicated, replicated]>
}

// A gather over two axes joins the innermost axis first.
// CHECK-LABEL: func.func @all_gather_two_axes
// CHECK:         %[[J1:.*]] = dist.join %x : {{.*}}[sliced<0, 1>, sliced<0, 0>]> -> {{.*}}[unplaced, sliced<0>]>
// CHECK-NEXT:    %[[J0:.*]] = dist.join %[[J1]] axis 1 :
// CHECK-NEXT:    %[[P1:.*]] = dist.repl %[[J0]] axis 1 :
// CHECK-NEXT:    dist.repl %[[P1]] :
// ROUND-LABEL: func.func @all_gather_two_axes
// ROUND:         coll.all_gather %x axes [1, 0] :
func.func @all_gather_two_axes(%x: !dist.tensor<64x8xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>) -> !dist.tensor<64x8xf32, @grid, [replicated, replicated]> {
  %y = coll.all_gather %x axes [1, 0] : !dist.tensor<64x8xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<64x8xf32, @grid, [replicated, replicated]>
  func.return %y : !dist.tensor<64x8xf32, @grid, [replicated, replicated]>
}

// CHECK-LABEL: func.func @all_to_all
// CHECK:         %[[J:.*]] = dist.join %x : {{.*}}[sliced<0>]> -> {{.*}}[unplaced]>
// CHECK-NEXT:    dist.slice %[[J]] dim 1 : {{.*}}[unplaced]> -> {{.*}}[sliced<1>]>
// ROUND-LABEL: func.func @all_to_all
// ROUND:         coll.all_to_all %x dim 1 :
func.func @all_to_all(%x: !dist.tensor<64x8xf32, @world, [sliced<0>]>) -> !dist.tensor<64x8xf32, @world, [sliced<1>]> {
  %y = coll.all_to_all %x dim 1 : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  func.return %y : !dist.tensor<64x8xf32, @world, [sliced<1>]>
}

// A fused all-reduce: the reduce-scatter's primitives, the region inlined on the slice,
// the all-gather's primitives on the gathered result; the sliced result stays as is.
// CHECK-LABEL: func.func @fused_all_reduce
// CHECK:         %[[R:.*]] = dist.reduce sum %g :
// CHECK-NEXT:    %[[S:.*]] = dist.slice %[[R]] dim 0 :
// CHECK-NEXT:    %[[M:.*]], %[[N:.*]] = dist.map(%[[S]], %m, %s)
// CHECK:         %[[J:.*]] = dist.join %[[M]] :
// CHECK-NEXT:    %[[P:.*]] = dist.repl %[[J]] :
// CHECK-NEXT:    func.return %[[P]], %[[N]] :
// ROUND-LABEL: func.func @fused_all_reduce
// ROUND:         %[[RS:.*]] = coll.reduce_scatter sum %g dim 0
// ROUND-NEXT:    %[[M:.*]], %[[N:.*]] = dist.map(%[[RS]], %m, %s)
// ROUND:         %[[AG:.*]] = coll.all_gather %[[M]] :
// ROUND-NEXT:    func.return %[[AG]], %[[N]] :
func.func @fused_all_reduce(%g: !dist.tensor<64xf32, @world, [local]>, %m: !dist.tensor<64xf32, @world, [sliced<0>]>, %s: f32) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %p, %n = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
    %a, %b = dist.map(%gs, %m, %s) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
    ^bb1(%x: f32, %y: f32, %z: f32):
      %u = arith.mulf %x, %z : f32
      %v = arith.addf %y, %u : f32
      dist.yield %u, %v : f32, f32
    }
    coll.yield %a, %b : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %p, %n : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// An overlap means exactly its chain, which is inlined.
// CHECK-LABEL: func.func @overlap
// CHECK-NOT:     coll.overlap
// CHECK:         %[[L:.*]] = dist.matmul %a, %b
// CHECK-NEXT:    %[[R:.*]] = dist.reduce sum %[[L]]
// CHECK-NEXT:    %[[Y:.*]] = dist.repl %[[R]]
// CHECK-NEXT:    func.return %[[Y]]
func.func @overlap(%a: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %b: !dist.tensor<16x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  %y = coll.overlap chunks 2 -> !dist.tensor<8x4xf32, @world, [replicated]> {
    %l = dist.matmul %a, %b : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x4xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x4xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x4xf32, @world, [replicated]>
}

// A region that yields its argument: the gather reads the reduce-scatter's slice.
// CHECK-LABEL: func.func @trivial_region
// CHECK:         %[[R:.*]] = dist.reduce sum %x
// CHECK-NEXT:    %[[S:.*]] = dist.slice %[[R]] dim 0
// CHECK-NEXT:    %[[J:.*]] = dist.join %[[S]]
// CHECK-NEXT:    %[[Y:.*]] = dist.repl %[[J]]
// CHECK-NEXT:    func.return %[[Y]]
func.func @trivial_region(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.fused_all_reduce sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %a : !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// A reduce-scatter into blocks of different sizes (13 over 4 ranks) is slice(reduce(x)).
// CHECK-LABEL: func.func @uneven_reduce_scatter
// CHECK-NEXT:    %[[R:.*]] = dist.reduce sum %x : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [unplaced]>
// CHECK-NEXT:    %[[S:.*]] = dist.slice %[[R]] dim 0 : !dist.tensor<13xf32, @world, [unplaced]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
// CHECK-NEXT:    func.return %[[S]]
func.func @uneven_reduce_scatter(%x: !dist.tensor<13xf32, @world, [local]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  %rs = coll.reduce_scatter sum %x dim 0 : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
  func.return %rs : !dist.tensor<13xf32, @world, [sliced<0>]>
}
