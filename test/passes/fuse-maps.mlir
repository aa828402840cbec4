// RUN: distir-opt %s -p fuse-maps | filecheck %s
// RUN: distir-opt %s -p 'fuse-maps{targets=a,b}' | filecheck %s --check-prefix=TARGET
// RUN: not distir-opt %s -p 'fuse-maps{targets=a,zz}' 2>&1 | filecheck %s --check-prefix=NONE

// NONE: 'fuse-maps' pass: target %zz names no value (maps here: %a, %b, %b2, %c, %m1, %p, %p1, %q)

dist.mesh @world shape = [4]


// Maps over blocks of different sizes (13 over 4 ranks) fuse as any others.
// CHECK-LABEL: func.func @uneven_two_maps
// CHECK-NEXT:    %[[Q:.*]] = dist.map(%x) : (!dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]>
// CHECK-NOT:     dist.map
// CHECK:         func.return %[[Q]]
func.func @uneven_two_maps(%x: !dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  %p = dist.map(%x) : (!dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  ^bb0(%e1: f32):
    %f1 = arith.mulf %e1, %e1 : f32
    dist.yield %f1 : f32
  }
  %q = dist.map(%p) : (!dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  ^bb0(%e2: f32):
    %f2 = arith.mulf %e2, %e2 : f32
    dist.yield %f2 : f32
  }
  func.return %q : !dist.tensor<13xf32, @world, [sliced<0>]>
}

// map(f, map(g, x), y) = map(f.g, x, y): the producer's body, then the consumer's.
// CHECK-LABEL: func.func @chain
// CHECK:         %[[B:.*]] = dist.map(%x, %y) : ({{.*}}, {{.*}}) -> {{.*}}[sliced<0>]> {
// CHECK-NEXT:    ^{{.*}}(%[[E:.*]]: f32, %[[F:.*]]: f32):
// CHECK-NEXT:      %[[S:.*]] = arith.mulf %[[E]], %[[E]] : f32
// CHECK-NEXT:      %[[T:.*]] = arith.addf %[[S]], %[[F]] : f32
// CHECK-NEXT:      dist.yield %[[T]] : f32
// CHECK:         func.return %[[B]]
func.func @chain(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %y: !dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  %a = dist.map(%x) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%e: f32):
    %s = arith.mulf %e, %e : f32
    dist.yield %s : f32
  }
  %b = dist.map(%a, %y) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%p: f32, %q: f32):
    %t = arith.addf %p, %q : f32
    dist.yield %t : f32
  }
  func.return %b : !dist.tensor<64xf32, @world, [sliced<0>]>
}

// A producer result used elsewhere (later) becomes an extra result: one map computes
// both, as CoCoNet fuses Adam's updates of m, v and p.
// CHECK-LABEL: func.func @shared_producer
// CHECK:         %[[P:.*]], %[[M:.*]] = dist.map(%m, %g, %p) : {{.*}} -> ({{.*}}, {{.*}})
// CHECK:           dist.yield %{{.*}}, %{{.*}} : f32, f32
// CHECK:         func.return %[[P]], %[[M]]
func.func @shared_producer(%m: !dist.tensor<64xf32, @world, [replicated]>, %g: !dist.tensor<64xf32, @world, [replicated]>, %p: !dist.tensor<64xf32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) {
  %m1 = dist.map(%m, %g) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.addf %a, %b : f32
    dist.yield %c : f32
  }
  %p1 = dist.map(%p, %m1) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.subf %a, %b : f32
    dist.yield %c : f32
  }
  func.return %p1, %m1 : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>
}

// A broadcast producer ([8], replicated) fuses into a consumer of shape [16, 8]
// that is sliced: broadcasting composes.
// CHECK-LABEL: func.func @broadcast_producer
// CHECK:         %[[C:.*]] = dist.map(%b, %x) : ({{.*}}<8xf32, @world, [replicated]>, {{.*}}<16x8xf32, @world, [sliced<0>]>) -> {{.*}}<16x8xf32, @world, [sliced<0>]>
// CHECK:         func.return %[[C]]
func.func @broadcast_producer(%b: !dist.tensor<8xf32, @world, [replicated]>, %x: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
  %b2 = dist.map(%b) : (!dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %s = math.exp %e : f32
    dist.yield %s : f32
  }
  %c = dist.map(%x, %b2) : (!dist.tensor<16x8xf32, @world, [sliced<0>]>, !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [sliced<0>]> {
  ^bb0(%p: f32, %q: f32):
    %t = arith.mulf %p, %q : f32
    dist.yield %t : f32
  }
  func.return %c : !dist.tensor<16x8xf32, @world, [sliced<0>]>
}

// A producer result of another shape used elsewhere cannot be an extra result.
// CHECK-LABEL: func.func @not_fusable
// CHECK:         %[[B:.*]] = dist.map(%b)
// CHECK:         dist.map(%x, %[[B]])
// CHECK:         func.return {{.*}}, %[[B]]
func.func @not_fusable(%b: !dist.tensor<8xf32, @world, [replicated]>, %x: !dist.tensor<16x8xf32, @world, [replicated]>) -> (!dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<8xf32, @world, [replicated]>) {
  %b2 = dist.map(%b) : (!dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %s = math.exp %e : f32
    dist.yield %s : f32
  }
  %c = dist.map(%x, %b2) : (!dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<16x8xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32):
    %t = arith.mulf %p, %q : f32
    dist.yield %t : f32
  }
  func.return %c, %b2 : !dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<8xf32, @world, [replicated]>
}

// Only named maps fuse: %c stays apart.
// TARGET-LABEL: func.func @named
// TARGET:         %[[B:.*]] = dist.map(%x) :
// TARGET:         dist.map(%[[B]]) :
// TARGET-NOT:     dist.map
func.func @named(%x: !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %a = dist.map(%x) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %s = math.exp %e : f32
    dist.yield %s : f32
  }
  %b = dist.map(%a) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %s = math.sqrt %e : f32
    dist.yield %s : f32
  }
  %c = dist.map(%b) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %s = math.tanh %e : f32
    dist.yield %s : f32
  }
  func.return %c : !dist.tensor<64xf32, @world, [replicated]>
}
