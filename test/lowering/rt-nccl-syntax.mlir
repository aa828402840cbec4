// RUN: distir-opt %s | filecheck %s
// RUN: distir-opt %s | distir-opt | filecheck %s
// The rt and nccl ops print in the shared `: operands -> results` syntax and read back.

dist.mesh @world shape = [4]

// CHECK: rt.kernel @k0 shape [256] {
// CHECK-NEXT: ^bb0(%[[G:.*]]: memref<256xf32>, %[[P:.*]]: memref<256xf32>, %[[LR:.*]]: f32, %[[I:.*]]: index):
// CHECK-NEXT:   %[[GI:.*]] = memref.load %[[G]][%[[I]]] : memref<256xf32>
// CHECK:        memref.store %{{.*}}, %[[P]][%[[I]]] : memref<256xf32>
// CHECK-NEXT: }
rt.kernel @k0 shape [256] {
^bb0(%g: memref<256xf32>, %p: memref<256xf32>, %lr: f32, %i: index):
  %gi = memref.load %g[%i] : memref<256xf32>
  %pi = memref.load %p[%i] : memref<256xf32>
  %u = arith.mulf %lr, %gi : f32
  %n = arith.subf %pi, %u : f32
  memref.store %n, %p[%i] : memref<256xf32>
}

// CHECK-LABEL: func.func @calls
func.func @calls(%g: memref<1024xf32>, %p: memref<1024xf32>, %lr: f32) -> memref<1024xf32> {
  // CHECK: %[[C:.*]] = rt.comm @world axes [0] : !rt.comm
  // CHECK-NEXT: %[[S:.*]] = rt.stream 0 : !rt.stream
  // CHECK-NEXT: %[[S1:.*]] = rt.stream 1 : !rt.stream
  // CHECK-NEXT: %[[R:.*]] = rt.group_rank @world axes [0] : index
  // CHECK-NEXT: %[[NEXT:.*]] = rt.group_rank @world axes [0] shift 1 : index
  // CHECK-NEXT: %{{.*}} = rt.holds @world [at<1>] : i1
  // CHECK-NEXT: %[[RS:.*]] = rt.alloc : () -> memref<256xf32>
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  %s1 = rt.stream 1 : !rt.stream
  %i = rt.group_rank @world axes [0] : index
  %next = rt.group_rank @world axes [0] shift 1 : index
  %h = rt.holds @world [at<1>] : i1
  %rs = rt.alloc : () -> memref<256xf32>
  // CHECK-NEXT: rt.fused {
  // CHECK-NEXT:   nccl.reduce_scatter avg %{{.*}}, %[[RS]], %[[C]], %[[S]] count 256 : (memref<1024xf32>, memref<256xf32>, !rt.comm, !rt.stream) -> ()
  // CHECK-NEXT:   %[[V:.*]] = rt.block %{{.*}}, %[[R]] dim 0 count 4 : (memref<1024xf32>, index) -> memref<256xf32>
  // CHECK-NEXT:   rt.launch @k0(%[[RS]], %[[V]], %{{.*}}, %[[S]]) : (memref<256xf32>, memref<256xf32>, f32, !rt.stream) -> ()
  // CHECK-NEXT:   nccl.all_gather %[[V]], %{{.*}}, %[[C]], %[[S]] count 256 : (memref<256xf32>, memref<1024xf32>, !rt.comm, !rt.stream) -> ()
  // CHECK-NEXT: }
  rt.fused {
    nccl.reduce_scatter avg %g, %rs, %c, %s count 256 : (memref<1024xf32>, memref<256xf32>, !rt.comm, !rt.stream) -> ()
    %pv = rt.block %p, %i dim 0 count 4 : (memref<1024xf32>, index) -> memref<256xf32>
    rt.launch @k0(%rs, %pv, %lr, %s) : (memref<256xf32>, memref<256xf32>, f32, !rt.stream) -> ()
    nccl.all_gather %pv, %p, %c, %s count 256 : (memref<256xf32>, memref<1024xf32>, !rt.comm, !rt.stream) -> ()
  }
  // CHECK-NEXT: %[[E:.*]] = rt.event_record %[[S]] : !rt.stream -> !rt.event
  // CHECK-NEXT: rt.stream_wait %[[S1]], %[[E]] : (!rt.stream, !rt.event) -> ()
  // CHECK-NEXT: nccl.all_reduce max %[[RS]], %[[RS]], %[[C]], %[[S1]] count 256
  // CHECK-NEXT: nccl.reduce sum %[[RS]], %[[RS]], %[[C]], %[[S1]] count 256 root 2
  // CHECK-NEXT: nccl.broadcast %[[RS]], %[[RS]], %[[C]], %[[S1]] count 256 root 1
  %e = rt.event_record %s : !rt.stream -> !rt.event
  rt.stream_wait %s1, %e : (!rt.stream, !rt.event) -> ()
  nccl.all_reduce max %rs, %rs, %c, %s1 count 256 : (memref<256xf32>, memref<256xf32>, !rt.comm, !rt.stream) -> ()
  nccl.reduce sum %rs, %rs, %c, %s1 count 256 root 2 : (memref<256xf32>, memref<256xf32>, !rt.comm, !rt.stream) -> ()
  nccl.broadcast %rs, %rs, %c, %s1 count 256 root 1 : (memref<256xf32>, memref<256xf32>, !rt.comm, !rt.stream) -> ()
  // CHECK-NEXT: nccl.group_start : () -> ()
  // CHECK-NEXT: nccl.send %[[RS]], %[[NEXT]], %[[C]], %[[S1]] count 256 : (memref<256xf32>, index, !rt.comm, !rt.stream) -> ()
  // CHECK-NEXT: nccl.recv %[[RS]], %[[R]], %[[C]], %[[S1]] count 256 : (memref<256xf32>, index, !rt.comm, !rt.stream) -> ()
  // CHECK-NEXT: nccl.group_end : () -> ()
  // CHECK-NEXT: rt.stream_sync %[[S1]] : !rt.stream -> ()
  nccl.group_start : () -> ()
  nccl.send %rs, %next, %c, %s1 count 256 : (memref<256xf32>, index, !rt.comm, !rt.stream) -> ()
  nccl.recv %rs, %i, %c, %s1 count 256 : (memref<256xf32>, index, !rt.comm, !rt.stream) -> ()
  nccl.group_end : () -> ()
  rt.stream_sync %s1 : !rt.stream -> ()
  // CHECK-NEXT: %[[T:.*]] = rt.alloc : () -> memref<1x256xf32>
  // CHECK-NEXT: rt.copy %[[RS]], %[[T]], %[[S]] : (memref<256xf32>, memref<1x256xf32>, !rt.stream) -> ()
  %t = rt.alloc : () -> memref<1x256xf32>
  rt.copy %rs, %t, %s : (memref<256xf32>, memref<1x256xf32>, !rt.stream) -> ()
  // CHECK-NEXT: %[[U:.*]] = rt.alloc : () -> memref<4x1x64xf32>
  // CHECK-NEXT: rt.copy_blocks %[[T]], %[[U]], %[[S]] from 1 to 0 count 4 : (memref<1x256xf32>, memref<4x1x64xf32>, !rt.stream) -> ()
  %u = rt.alloc : () -> memref<4x1x64xf32>
  rt.copy_blocks %t, %u, %s from 1 to 0 count 4 : (memref<1x256xf32>, memref<4x1x64xf32>, !rt.stream) -> ()
  func.return %p : memref<1024xf32>
}

// A rank's block of a dim the ranks do not divide, and padded buffers (lowering/padding.py).
// CHECK-LABEL: func.func @padded
func.func @padded(%a: memref<12x8xf32>) {
  %s = rt.stream 0 : !rt.stream
  // CHECK: %[[O:.*]], %[[N:.*]] = rt.span @world axes [0] size 10 : index, index
  %o, %n = rt.span @world axes [0] size 10 : index, index
  // CHECK-NEXT: %[[V:.*]] = rt.prefix %{{.*}} dim 0 : memref<12x8xf32> -> memref<10x8xf32>
  %v = rt.prefix %a dim 0 : memref<12x8xf32> -> memref<10x8xf32>
  // CHECK-NEXT: %[[B:.*]] = rt.block %{{.*}}, %[[O]] dim 0 count 4 : (memref<12x8xf32>, index) -> memref<3x8xf32>
  %b = rt.block %a, %o dim 0 count 4 : (memref<12x8xf32>, index) -> memref<3x8xf32>
  // CHECK-NEXT: rt.prefix %[[B]], %[[N]] dim 0 : (memref<3x8xf32>, index) -> memref<?x8xf32>
  %w = rt.prefix %b, %n dim 0 : (memref<3x8xf32>, index) -> memref<?x8xf32>
  %t = rt.alloc : () -> memref<16x8xf32>
  // CHECK: rt.pad_blocks %[[V]], %{{.*}}, %[[N]], %{{.*}} dim 0 counts [4] : (memref<10x8xf32>, memref<16x8xf32>, index, !rt.stream) -> ()
  rt.pad_blocks %v, %t, %n, %s dim 0 counts [4] : (memref<10x8xf32>, memref<16x8xf32>, index, !rt.stream) -> ()
  // CHECK-NEXT: rt.unpad_blocks %{{.*}}, %[[V]], %[[N]], %{{.*}} dim 0 counts [4] : (memref<16x8xf32>, memref<10x8xf32>, index, !rt.stream) -> ()
  rt.unpad_blocks %t, %v, %n, %s dim 0 counts [4] : (memref<16x8xf32>, memref<10x8xf32>, index, !rt.stream) -> ()
  func.return
}
