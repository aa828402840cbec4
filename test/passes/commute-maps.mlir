// RUN: distir-opt %s -p commute-maps | filecheck %s
// RUN: distir-opt %s -p 'commute-maps{direction=down}' | filecheck %s --check-prefix=DOWN
// RUN: distir-opt %s -p 'commute-maps{targets=only}' | filecheck %s --check-prefix=TARGET
// RUN: distir-opt %s -p 'expand-collectives,commute-maps,cancel-primitives,form-collectives,cancel-primitives' | filecheck %s --check-prefix=IDENT
// RUN: not distir-opt %s -p 'commute-maps{direction=sideways}' 2>&1 | filecheck %s --check-prefix=DIRECTION
// RUN: not distir-opt %s -p 'commute-maps{targets=r}' 2>&1 | filecheck %s --check-prefix=NOTMAP

// DIRECTION: 'commute-maps' pass: direction must be up or down, got 'sideways'
// NOTMAP: 'commute-maps' pass: target %r: is not the result of a dist.map

dist.mesh @world shape = [4]

// map(f, repl(x), s) = repl(map(f, x, s)); the scalar operand is unchanged.
// CHECK-LABEL: func.func @over_repl
// CHECK:         %[[M:.*]] = dist.map(%x, %s) : ({{.*}}[unplaced]>, f32) -> {{.*}}[unplaced]>
// CHECK:         %[[Y:.*]] = dist.repl %[[M]] :
// CHECK-NEXT:    func.return %[[Y]]
func.func @over_repl(%x: !dist.tensor<64xf32, @world, [unplaced]>, %s: f32) -> !dist.tensor<64xf32, @world, [replicated]> {
  %r = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  %y = dist.map(%r, %s) : (!dist.tensor<64xf32, @world, [replicated]>, f32) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    dist.yield %c : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// Under a join the other operands are sliced; an operand broadcast along the joined
// dim is replicated instead. The map then keeps moving up, across the slice.
// CHECK-LABEL: func.func @over_join
// CHECK-DAG:     %[[D:.*]] = dist.drop %b : {{.*}}<8xf32, @world, [replicated]> -> {{.*}}[unplaced]>
// CHECK-DAG:     %[[W:.*]] = dist.drop %w : {{.*}}<64x8xf32, @world, [replicated]> -> {{.*}}[unplaced]>
// CHECK:         %[[M:.*]] = dist.map(%x, %[[W]], %[[D]]) : ({{.*}}[unplaced]>, {{.*}}[unplaced]>, {{.*}}[unplaced]>) -> {{.*}}[unplaced]>
// CHECK:         %[[S:.*]] = dist.slice %[[M]] dim 0
// CHECK-NEXT:    %[[J:.*]] = dist.join %[[S]]
// CHECK-NEXT:    %[[Y:.*]] = dist.repl %[[J]]
// CHECK-NEXT:    func.return %[[Y]]
func.func @over_join(%x: !dist.tensor<64x8xf32, @world, [unplaced]>, %w: !dist.tensor<64x8xf32, @world, [replicated]>, %b: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  %s = dist.slice %x dim 0 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [sliced<0>]>
  %j = dist.join %s : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %g = dist.repl %j : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  %y = dist.map(%g, %w, %b) : (!dist.tensor<64x8xf32, @world, [replicated]>, !dist.tensor<64x8xf32, @world, [replicated]>, !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32, %t: f32):
    %c = arith.addf %p, %q : f32
    %e = arith.mulf %c, %t : f32
    dist.yield %e : f32
  }
  func.return %y : !dist.tensor<64x8xf32, @world, [replicated]>
}

// DOWN-LABEL: func.func @down_slice
// DOWN:         %[[A:.*]] = dist.slice %x dim 1 : {{.*}}<64x8xf32, @world, [unplaced]> -> {{.*}}[sliced<1>]>
// DOWN-NEXT:    %[[B:.*]] = dist.slice %b dim 0 : {{.*}}<8xf32, @world, [unplaced]> -> {{.*}}[sliced<0>]>
// DOWN-NEXT:    %[[Y:.*]] = dist.map(%[[A]], %[[B]]) : ({{.*}}[sliced<1>]>, {{.*}}[sliced<0>]>) -> {{.*}}[sliced<1>]>
// DOWN:         func.return %[[Y]]
func.func @down_slice(%x: !dist.tensor<64x8xf32, @world, [unplaced]>, %b: !dist.tensor<8xf32, @world, [unplaced]>) -> !dist.tensor<64x8xf32, @world, [sliced<1>]> {
  %m = dist.map(%x, %b) : (!dist.tensor<64x8xf32, @world, [unplaced]>, !dist.tensor<8xf32, @world, [unplaced]>) -> !dist.tensor<64x8xf32, @world, [unplaced]> {
  ^bb0(%p: f32, %q: f32):
    %c = arith.addf %p, %q : f32
    dist.yield %c : f32
  }
  %y = dist.slice %m dim 1 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  func.return %y : !dist.tensor<64x8xf32, @world, [sliced<1>]>
}

// Only the named map moves.
// TARGET-LABEL: func.func @targets
// TARGET:         %[[O:.*]] = dist.map(%x) : ({{.*}}[unplaced]>) -> {{.*}}[unplaced]>
// TARGET:         %[[R:.*]] = dist.repl %[[O]]
// TARGET:         %[[N:.*]] = dist.map(%{{.*}}) : ({{.*}}[replicated]>) -> {{.*}}[replicated]>
func.func @targets(%x: !dist.tensor<64xf32, @world, [unplaced]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) {
  %r = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  %only = dist.map(%r) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%p: f32):
    %c = arith.addf %p, %p : f32
    dist.yield %c : f32
  }
  %r2 = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  %not = dist.map(%r2) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%p: f32):
    %c = arith.mulf %p, %p : f32
    dist.yield %c : f32
  }
  func.return %only, %not : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>
}

// CoCoNet's AllGather reorder follows from the identities: expand, move the map up,
// cancel, form: all_gather(reduce_scatter) with the map between is a fused all-reduce.
// IDENT-LABEL: func.func @reorder_from_identities
// IDENT:         %[[Y:.*]] = coll.fused_all_reduce sum %x dim 0
// IDENT-NEXT:    ^{{.*}}(%[[S:.*]]: {{.*}}[sliced<0>]>):
// IDENT-NEXT:      %[[R:.*]] = dist.take_slice %r dim 0
// IDENT-NEXT:      dist.map(%[[S]], %[[R]])
// IDENT:         func.return %[[Y]]
func.func @reorder_from_identities(%x: !dist.tensor<64xf32, @world, [local]>, %r: !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %ag = coll.all_gather %rs : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %y = dist.map(%ag, %r) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32):
    %c = arith.addf %p, %q : f32
    dist.yield %c : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// A map commutes with a slice into blocks of different sizes (13 over 4 ranks).
// CHECK-LABEL: func.func @uneven_map_after_slice
// CHECK:         %[[M:.*]] = dist.map(%x) : (!dist.tensor<13xf32, @world, [unplaced]>) -> !dist.tensor<13xf32, @world, [unplaced]>
// CHECK:         %{{.*}} = dist.slice %[[M]] dim 0 : !dist.tensor<13xf32, @world, [unplaced]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
func.func @uneven_map_after_slice(%x: !dist.tensor<13xf32, @world, [unplaced]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  %s = dist.slice %x dim 0 : !dist.tensor<13xf32, @world, [unplaced]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
  %m = dist.map(%s) : (!dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  ^bb0(%e: f32):
    %f = arith.mulf %e, %e : f32
    dist.yield %f : f32
  }
  func.return %m : !dist.tensor<13xf32, @world, [sliced<0>]>
}
