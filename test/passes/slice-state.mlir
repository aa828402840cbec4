// RUN: distir-opt %s -p 'slice-state{targets=m}' | filecheck %s
// RUN: distir-opt %s -p slice-state | filecheck %s --check-prefix=ALL
// RUN: not distir-opt %s -p 'slice-state{targets=g}' 2>&1 | filecheck %s --check-prefix=NOTINPLACE
// RUN: not distir-opt %s -p 'slice-state{targets=q}' 2>&1 | filecheck %s --check-prefix=READ
// RUN: not distir-opt %s -p 'slice-state{targets=k}' 2>&1 | filecheck %s --check-prefix=NOTGATHERED
// RUN: not distir-opt %s -p 'slice-state{targets=m1}' 2>&1 | filecheck %s --check-prefix=NOTARG
// RUN: not distir-opt %s -p 'slice-state{targets=s}' 2>&1 | filecheck %s --check-prefix=SCALAR
// RUN: distir-opt %s -p 'slice-state{targets=c}' | filecheck %s --check-prefix=RO
// RUN: not distir-opt %s -p 'slice-state{targets=u}' 2>&1 | filecheck %s --check-prefix=ROREAD

// NOTINPLACE: 'slice-state' pass: target %g: cannot keep the argument sliced: no result of @step updates it in place ({dist.inplace = 0})
// READ: 'slice-state' pass: target %q: cannot keep the argument sliced: it is read by 'dist.map', not only through dist.take_slice
// NOTGATHERED: 'slice-state' pass: target %k: cannot keep the argument sliced: its in-place update is not an all_gather of a value placed !dist.tensor<64xf32, @world, [sliced<0>]>
// NOTARG: 'slice-state' pass: target %m1: is not a function argument
// SCALAR: 'slice-state' pass: target %s: is a f32 scalar, not a !dist.tensor
// ROREAD: 'slice-state' pass: target %u: cannot keep the argument sliced: no result of @constants updates it in place ({dist.inplace = 3}) and it is read by 'dist.map', not only through dist.take_slice

dist.mesh @world shape = [4]

// The state m is read only sliced and written back gathered: it becomes a sliced
// argument and result, and the take_slice and the AllGather of its update vanish.
// CHECK-LABEL: func.func @step
// CHECK-SAME:    %m: !dist.tensor<64xf32, @world, [sliced<0>]>
// CHECK-SAME:    -> (!dist.tensor<64xf32, @world, [sliced<0>]> {dist.inplace = 1 : i64}, !dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 2 : i64}, !dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 3 : i64})
// CHECK:         %[[M1:.*]] = dist.map(%m, %g, %s)
// CHECK:         func.return %[[M1]], %{{.*}}, %{{.*}} : !dist.tensor<64xf32, @world, [sliced<0>]>,
// ALL-LABEL: func.func @step
// ALL-SAME:    %m: !dist.tensor<64xf32, @world, [sliced<0>]>
// ALL-SAME:    %q: !dist.tensor<64xf32, @world, [replicated]>
// ALL-SAME:    %k: !dist.tensor<64xf32, @world, [replicated]>
func.func @step(%g: !dist.tensor<64xf32, @world, [sliced<0>]>, %m: !dist.tensor<64xf32, @world, [replicated]>, %q: !dist.tensor<64xf32, @world, [replicated]>, %k: !dist.tensor<64xf32, @world, [replicated]>, %s: f32)
    -> (!dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 2 : i64}, !dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 3 : i64}) {
  %m_s = dist.take_slice %m dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %m1_s = dist.map(%m_s, %g, %s) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %d = arith.mulf %a, %c : f32
    %e = arith.addf %d, %b : f32
    dist.yield %e : f32
  }
  %m1 = coll.all_gather %m1_s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %q1 = dist.map(%q) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  %k_s = dist.take_slice %k dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %kg = coll.all_gather %k_s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [replicated]>
  %k1 = dist.map(%kg) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  func.return %m1, %q1, %k1 : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>
}

// State of 13 elements over 4 ranks is kept as blocks of 4, 4, 4 and 1.
// CHECK-LABEL: func.func @uneven_state
// CHECK-SAME:    %m: !dist.tensor<13xf32, @world, [sliced<0>]>
// CHECK-SAME:    -> (!dist.tensor<13xf32, @world, [sliced<0>]> {dist.inplace = 1 : i64})
// CHECK-NEXT:    %[[M1:.*]] = dist.map(%m, %g, %s)
// CHECK:         func.return %[[M1]] : !dist.tensor<13xf32, @world, [sliced<0>]>
func.func @uneven_state(%g: !dist.tensor<13xf32, @world, [sliced<0>]>, %m: !dist.tensor<13xf32, @world, [replicated]>, %s: f32) -> (!dist.tensor<13xf32, @world, [replicated]> {dist.inplace = 1 : i64}) {
  %m_s = dist.take_slice %m dim 0 : !dist.tensor<13xf32, @world, [replicated]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
  %m1_s = dist.map(%m_s, %g, %s) : (!dist.tensor<13xf32, @world, [sliced<0>]>, !dist.tensor<13xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<13xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %d = arith.mulf %a, %c : f32
    %e = arith.addf %d, %b : f32
    dist.yield %e : f32
  }
  %m1 = coll.all_gather %m1_s : !dist.tensor<13xf32, @world, [sliced<0>]> -> !dist.tensor<13xf32, @world, [replicated]>
  func.return %m1 : !dist.tensor<13xf32, @world, [replicated]>
}

// A read-only argument (per-element constants: which group each element belongs to)
// read only through take_slice becomes sliced when named: each rank keeps its slice.
// RO-LABEL: func.func @constants
// RO-SAME:    %c: !dist.tensor<64xi8, @world, [sliced<0>]>
// RO-SAME:    %u: !dist.tensor<64xf32, @world, [replicated]>
// RO-NOT:     dist.take_slice %c
// RO:         %[[Y:.*]] = dist.map(%x, %c, %a)
// RO:         func.return %[[Y]]
func.func @constants(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %a: f32, %c: !dist.tensor<64xi8, @world, [replicated]>, %u: !dist.tensor<64xf32, @world, [replicated]>)
    -> (!dist.tensor<64xf32, @world, [sliced<0>]> {dist.inplace = 0 : i64}, !dist.tensor<64xf32, @world, [replicated]>) {
  %c_s = dist.take_slice %c dim 0 : !dist.tensor<64xi8, @world, [replicated]> -> !dist.tensor<64xi8, @world, [sliced<0>]>
  %y = dist.map(%x, %c_s, %a) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xi8, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%e: f32, %k: i8, %s: f32):
    %zero = arith.constant 0 : i8
    %first = arith.cmpi eq, %k, %zero : i8
    %m = arith.mulf %e, %s : f32
    %r = arith.select %first, %e, %m : f32
    dist.yield %r : f32
  }
  %u1 = dist.map(%u) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    dist.yield %e : f32
  }
  func.return %y, %u1 : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [replicated]>
}
