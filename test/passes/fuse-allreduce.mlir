// RUN: distir-opt %s -p fuse-allreduce | filecheck %s
// RUN: not distir-opt %s -p 'fuse-allreduce{targets=lonely}' 2>&1 | filecheck %s --check-prefix=NOAG
// RUN: not distir-opt %s -p 'fuse-allreduce{targets=y}' 2>&1 | filecheck %s --check-prefix=NOTRS

// NOAG: 'fuse-allreduce' pass: target %lonely: cannot fuse into a coll.fused_all_reduce: no coll.all_gather over axes [0] of its result or of computations on it
// NOTRS: 'fuse-allreduce' pass: target %y: is not the result of a coll.reduce_scatter

dist.mesh @world shape = [4]

// ZeRO-style Adam step: the gathered parameter is a result with gather true, the
// sliced state a result with gather false; the take_slice of the replicated parameter
// moves into the region.
// CHECK-LABEL: func.func @adam_like
// CHECK:         %[[P1:.*]], %[[M1:.*]] = coll.fused_all_reduce avg %g dim 0 gather [true, false] : {{.*}}[local]> -> ({{.*}}[replicated]>, {{.*}}[sliced<0>]>) {
// CHECK-NEXT:    ^{{.*}}(%[[GS:.*]]: {{.*}}[sliced<0>]>):
// CHECK-NEXT:      %[[PS:.*]] = dist.take_slice %p dim 0
// CHECK-NEXT:      %[[A:.*]], %[[B:.*]] = dist.map(%[[PS]], %m, %[[GS]], %lr)
// CHECK:           coll.yield %[[A]], %[[B]] :
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[P1]], %[[M1]]
func.func @adam_like(%g: !dist.tensor<64xf32, @world, [local]>, %p: !dist.tensor<64xf32, @world, [replicated]>, %m: !dist.tensor<64xf32, @world, [sliced<0>]>, %lr: f32) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %avg_rs = coll.reduce_scatter avg %g dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %p_s = dist.take_slice %p dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %p1_s, %m1_s = dist.map(%p_s, %m, %avg_rs, %lr) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %d: f32):
    %mn = arith.addf %b, %c : f32
    %u = arith.mulf %d, %mn : f32
    %pn = arith.subf %a, %u : f32
    dist.yield %pn, %mn : f32, f32
  }
  %p1 = coll.all_gather %p1_s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %p1, %m1_s : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// LAMB-like norm: the partial reduction and the inner scalar all_reduce run inside.
// CHECK-LABEL: func.func @norm_inside
// CHECK:         %[[Y:.*]] = coll.fused_all_reduce sum %x dim 0 : {{.*}} {
// CHECK:           %[[P:.*]] = dist.reduce_tensor sum %{{.*}} dims [0] : {{.*}} -> {{.*}}<f32, @world, [local]>
// CHECK-NEXT:      %[[N:.*]] = coll.all_reduce sum %[[P]] :
// CHECK-NEXT:      %[[S:.*]] = dist.map(%{{.*}}, %[[N]])
// CHECK:           coll.yield %[[S]]
// CHECK:         func.return %[[Y]]
func.func @norm_inside(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %part = dist.reduce_tensor sum %rs dims [0] : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
  %n = coll.all_reduce sum %part : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
  %s = dist.map(%rs, %n) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<f32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.divf %a, %b : f32
    dist.yield %c : f32
  }
  %y = coll.all_gather %s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// An op that reads the slices but cannot run in the region (a primitive) moves after
// the fused op and reads its sliced result.
// CHECK-LABEL: func.func @dependent_after
// CHECK:         %[[Y:.*]], %[[T:.*]] = coll.fused_all_reduce sum %x dim 0 gather [true, false]
// CHECK-NEXT:    ^
// CHECK:         coll.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[J:.*]] = dist.join %[[T]]
// CHECK-NEXT:    %[[S:.*]] = dist.store %[[J]] rank 1
// CHECK-NEXT:    func.return %[[Y]], %[[S]]
func.func @dependent_after(%x: !dist.tensor<64xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [at<1>]>) {
  %rs = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %t = dist.map(%rs) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %c = arith.mulf %a, %a : f32
    dist.yield %c : f32
  }
  %j = dist.join %t : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %t2 = coll.all_gather %t : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %st = dist.store %j rank 1 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [at<1>]>
  func.return %t2, %st : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [at<1>]>
}

// A value both gathered and read as slices after the fused op (by a map that also reads
// the gathered result): the region yields it twice, gathered and not (what the tuner's
// fuse(RS-C-AG) reaches on a ZeRO-1 Adam step).
// CHECK-LABEL: func.func @gathered_and_sliced
// CHECK:         %[[Y:.*]], %[[T:.*]] = coll.fused_all_reduce avg %g dim 0 gather [true, false]
// CHECK-NEXT:    ^{{.*}}(%[[GS:.*]]: {{.*}}):
// CHECK-NEXT:      %[[C:.*]] = dist.cast %[[GS]]
// CHECK-NEXT:      coll.yield %[[C]], %[[C]] :
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[Z:.*]] = dist.take_slice %[[Y]] dim 0
// CHECK-NEXT:    %[[U:.*]] = dist.map(%[[T]], %[[Z]])
// CHECK:         func.return %[[Y]], %[[U]]
func.func @gathered_and_sliced(%g: !dist.tensor<64xf16, @world, [local]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %rs = coll.reduce_scatter avg %g dim 0 : !dist.tensor<64xf16, @world, [local]> -> !dist.tensor<64xf16, @world, [sliced<0>]>
  %t = dist.cast %rs : !dist.tensor<64xf16, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %y = coll.all_gather %t : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %z = dist.take_slice %y dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %u = dist.map(%t, %z) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    dist.yield %c : f32
  }
  func.return %y, %u : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// CHECK-LABEL: func.func @lonely
// CHECK:         coll.reduce_scatter
func.func @lonely(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  %lonely = coll.reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %y = dist.map(%lonely) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [sliced<0>]>
}

// RS -> map -> AG over blocks of different sizes (13 over 4 ranks) fuses the same way.
// CHECK-LABEL: func.func @uneven_rs_map_ag
// CHECK:         %[[AG:.*]] = coll.fused_all_reduce avg %g dim 0 : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [replicated]>
// CHECK-NEXT:    ^bb0(%[[RS:.*]]: !dist.tensor<13xf32, @world, [sliced<0>]>):
// CHECK-NEXT:      %[[M:.*]] = dist.map(%[[RS]])
// CHECK:           coll.yield %[[M]] : !dist.tensor<13xf32, @world, [sliced<0>]>
func.func @uneven_rs_map_ag(%g: !dist.tensor<13xf32, @world, [local]>) -> !dist.tensor<13xf32, @world, [replicated]> {
  %rs = coll.reduce_scatter avg %g dim 0 : !dist.tensor<13xf32, @world, [local]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
  %m = dist.map(%rs) : (!dist.tensor<13xf32, @world, [sliced<0>]>) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  ^bb0(%e: f32):
    %f = arith.mulf %e, %e : f32
    dist.yield %f : f32
  }
  %ag = coll.all_gather %m : !dist.tensor<13xf32, @world, [sliced<0>]> -> !dist.tensor<13xf32, @world, [replicated]>
  func.return %ag : !dist.tensor<13xf32, @world, [replicated]>
}
