// RUN: distir-opt %s | filecheck %s
// RUN: distir-opt %s | distir-opt | filecheck %s
// The fused computation-collective operators of the rt dialect print in the shared syntax and read back.
dist.mesh @world shape = [2]
rt.kernel @relu shape [1, 2, 32] {
^bb0(%x: memref<1x2x32xf32>, %y: memref<1x2x32xf32>, %i: index, %j: index, %k: index):
  %v = memref.load %x[%i, %j, %k] : memref<1x2x32xf32>
  %z = arith.constant 0.0 : f32
  %r = arith.maximumf %v, %z : f32
  memref.store %r, %y[%i, %j, %k] : memref<1x2x32xf32>
}
func.func @f(%a: memref<4x64xf32>, %w: memref<64x32xf32>, %x: memref<1x8x16xf32>, %w2: memref<1x16x32xf32>, %t: memref<2x100x16xf32>, %ii: memref<2x8x4xi32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  %s1 = rt.stream 1 : !rt.stream
  %r0 = arith.constant 0 : index
  %o = rt.alloc : () -> memref<4x32xf32>
  %red = rt.alloc : () -> memref<2x4x16xf32>
  // CHECK: rt.matmul_all_reduce sum %a, %w, %[[O:.*]], %[[RED:.*]], %[[C:.*]], %[[S:.*]], %[[S1:.*]] dim 1 tiles 2 order remote_first : (memref<4x64xf32>, memref<64x32xf32>, memref<4x32xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
  rt.matmul_all_reduce sum %a, %w, %o, %red, %c, %s, %s1 dim 1 tiles 2 order remote_first : (memref<4x64xf32>, memref<64x32xf32>, memref<4x32xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
  %o2 = rt.alloc : () -> memref<4x16xf32>
  // CHECK: rt.matmul_reduce_scatter avg %a, %w, %{{.*}}, %[[RED]], %[[C]], %[[S]], %[[S1]] dim 1 tiles 2 order natural : (memref<4x64xf32>, memref<64x32xf32>, memref<4x16xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
  rt.matmul_reduce_scatter avg %a, %w, %o2, %red, %c, %s, %s1 dim 1 tiles 2 order natural : (memref<4x64xf32>, memref<64x32xf32>, memref<4x16xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
  %o3 = rt.alloc : () -> memref<2x4x32xf32>
  // CHECK: rt.matmul_all_to_all %{{.*}}, %w2, %{{.*}}, %[[C]], %[[S]], %[[S1]] dim 1 concat 0 tiles 2 order remote_first : (memref<1x8x16xf32>, memref<1x16x32xf32>, memref<2x4x32xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
  // CHECK-NEXT: ^bb0(%[[T:.*]]: memref<1x2x32xf32>):
  // CHECK-NEXT:   rt.launch @relu(%[[T]], %[[T]], %[[S]]) : (memref<1x2x32xf32>, memref<1x2x32xf32>, !rt.stream) -> ()
  // CHECK-NEXT: }
  rt.matmul_all_to_all %x, %w2, %o3, %c, %s, %s1 dim 1 concat 0 tiles 2 order remote_first : (memref<1x8x16xf32>, memref<1x16x32xf32>, memref<2x4x32xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
  ^bb0(%tl: memref<1x2x32xf32>):
    rt.launch @relu(%tl, %tl, %s) : (memref<1x2x32xf32>, memref<1x2x32xf32>, !rt.stream) -> ()
  }
  %o4 = rt.alloc : () -> memref<4x4x16xf32>
  // CHECK: rt.embedding_all_to_all %t, %ii, %{{.*}}, %{{.*}}, %[[C]], %[[S]], %[[S1]] dim 1 concat 0 tile_dim 0 tiles 2 order ring : (memref<2x100x16xf32>, memref<2x8x4xi32>, index, memref<4x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
  // CHECK-NEXT: ^bb0(%{{.*}}: memref<1x4x16xf32>):
  // CHECK-NEXT: }
  rt.embedding_all_to_all %t, %ii, %r0, %o4, %c, %s, %s1 dim 1 concat 0 tile_dim 0 tiles 2 order ring : (memref<2x100x16xf32>, memref<2x8x4xi32>, index, memref<4x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
  ^bb0(%tile: memref<1x4x16xf32>):
  }
  func.return
}
