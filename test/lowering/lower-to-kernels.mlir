// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-to-kernels' | filecheck %s
// Runs of element-wise ops over one iteration space become one rt.kernel each.

dist.mesh @world shape = [?]

// Two maps over the same block: one kernel; %m1 is used only inside it (registers).
// CHECK-LABEL: func.func @two_maps
// CHECK: %[[Y:.*]] = rt.call @[[K:k[0-9]+]](%{{.*}}, %{{.*}}) : (!dist.tensor<8xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<8xf32, @world, [sliced<0>]>
// CHECK-NEXT: func.return %[[Y]]
func.func @two_maps(%x: !dist.tensor<8xf32, @world, [sliced<0>]>, %s: f32) -> !dist.tensor<8xf32, @world, [sliced<0>]> {
  %m1 = dist.map(%x, %s) : (!dist.tensor<8xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<8xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    dist.yield %c : f32
  }
  %y = dist.map(%m1) : (!dist.tensor<8xf32, @world, [sliced<0>]>) -> !dist.tensor<8xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %c = math.sqrt %a : f32
    dist.yield %c : f32
  }
  func.return %y : !dist.tensor<8xf32, @world, [sliced<0>]>
}

// A broadcast operand is loaded with the index of the dims it has; a collective between
// two maps splits them into two kernels.
// CHECK-LABEL: func.func @bias_then_allreduce
// CHECK: %[[A:.*]] = rt.call @[[KA:k[0-9]+]](%{{.*}}, %{{.*}}) : (!dist.tensor<4x6xf32, @world, [local]>, !dist.tensor<6xf32, @world, [local]>) -> !dist.tensor<4x6xf32, @world, [local]>
// CHECK-NEXT: %[[S:.*]] = coll.all_reduce sum %[[A]]
// CHECK-NEXT: %{{.*}} = rt.call @{{k[0-9]+}}(%[[S]])
func.func @bias_then_allreduce(%x: !dist.tensor<4x6xf32, @world, [local]>, %b: !dist.tensor<6xf32, @world, [local]>) -> !dist.tensor<4x6xf32, @world, [replicated]> {
  %a = dist.map(%x, %b) : (!dist.tensor<4x6xf32, @world, [local]>, !dist.tensor<6xf32, @world, [local]>) -> !dist.tensor<4x6xf32, @world, [local]> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.addf %p, %q : f32
    dist.yield %r : f32
  }
  %s = coll.all_reduce sum %a : !dist.tensor<4x6xf32, @world, [local]> -> !dist.tensor<4x6xf32, @world, [replicated]>
  %d = dist.dropout %s p 0.5 seed 3 : !dist.tensor<4x6xf32, @world, [replicated]> -> !dist.tensor<4x6xf32, @world, [replicated]>
  func.return %d : !dist.tensor<4x6xf32, @world, [replicated]>
}

// Dropout on a block takes the block's offset: rt.group_rank times the block extent.
// CHECK-LABEL: func.func @dropout_on_slices
// CHECK: %[[R:.*]] = rt.group_rank @world axes [0] : index
// CHECK-NEXT: %[[E:.*]] = arith.constant 4 : index
// CHECK-NEXT: %[[OFF:.*]] = arith.muli %[[R]], %[[E]] : index
// CHECK-NEXT: %{{.*}} = rt.call @{{k[0-9]+}}(%{{.*}}, %[[OFF]]) : (!dist.tensor<8xf32, @world, [sliced<0>]>, index) -> !dist.tensor<8xf32, @world, [sliced<0>]>
func.func @dropout_on_slices(%x: !dist.tensor<8xf32, @world, [sliced<0>]>) -> !dist.tensor<8xf32, @world, [sliced<0>]> {
  %d = dist.dropout %x p 0.25 seed 9 : !dist.tensor<8xf32, @world, [sliced<0>]> -> !dist.tensor<8xf32, @world, [sliced<0>]>
  func.return %d : !dist.tensor<8xf32, @world, [sliced<0>]>
}

// The kernels, after the functions:
// CHECK: rt.kernel @[[K]] shape [4] {
// CHECK-NEXT: ^bb0(%{{.*}}: memref<4xf32>, %[[SC:.*]]: f32, %[[OUT:.*]]: memref<4xf32>, %[[I:.*]]: index):
// CHECK-NEXT:   %[[X:.*]] = memref.load %{{.*}}[%[[I]]] : memref<4xf32>
// CHECK-NEXT:   %[[C:.*]] = arith.mulf %[[X]], %[[SC]] : f32
// CHECK-NEXT:   %[[Q:.*]] = math.sqrt %[[C]] : f32
// CHECK-NEXT:   memref.store %[[Q]], %[[OUT]][%[[I]]] : memref<4xf32>
// CHECK-NEXT: }
// CHECK: rt.kernel @[[KA]] shape [4, 6] {
// CHECK-NEXT: ^bb0(%[[XA:.*]]: memref<4x6xf32>, %[[BA:.*]]: memref<6xf32>, %{{.*}}: memref<4x6xf32>, %[[I0:.*]]: index, %[[I1:.*]]: index):
// CHECK-NEXT:   memref.load %[[XA]][%[[I0]], %[[I1]]] : memref<4x6xf32>
// CHECK-NEXT:   memref.load %[[BA]][%[[I1]]] : memref<6xf32>
// CHECK: rt.random
// CHECK: arith.cmpi uge
// CHECK: arith.select
