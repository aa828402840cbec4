// RUN: distir-opt %s | filecheck %s
// RUN: distir-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: distir-opt %s --print-op-generic | distir-opt - | filecheck %s
// coll.permute parses, prints back in its custom syntax, and round-trips through the
// generic form (pairs are stored flat).

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]

// CHECK-LABEL: func.func @ring_step
// CHECK: %[[Y:.*]] = coll.permute %{{.*}} offset 1 : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
// CHECK: func.return %[[Y]]
// GENERIC-LABEL: sym_name = "ring_step"
// GENERIC: "coll.permute"(%{{.*}}) <{offset = 1 : i64}>
func.func @ring_step(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [local]> {
  %y = coll.permute %x offset 1 : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return %y : !dist.tensor<8xf32, @world, [local]>
}

// CHECK-LABEL: func.func @backwards
// CHECK: coll.permute %{{.*}} offset -1 :
func.func @backwards(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [local]> {
  %y = coll.permute %x offset -1 : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return %y : !dist.tensor<8xf32, @world, [local]>
}

// CHECK-LABEL: func.func @swap_on_one_axis
// CHECK: coll.permute %{{.*}} pairs [[0, 1], [1, 0]] axes [1] : !dist.tensor<4x8xf16, @grid, [replicated, local]> -> !dist.tensor<4x8xf16, @grid, [replicated, local]>
// GENERIC-LABEL: sym_name = "swap_on_one_axis"
// GENERIC: "coll.permute"(%{{.*}}) <{pairs = array<i64: 0, 1, 1, 0>, axes = array<i64: 1>}>
func.func @swap_on_one_axis(%x: !dist.tensor<4x8xf16, @grid, [replicated, local]>) -> !dist.tensor<4x8xf16, @grid, [replicated, local]> {
  %y = coll.permute %x pairs [[0, 1], [1, 0]] axes [1] : !dist.tensor<4x8xf16, @grid, [replicated, local]> -> !dist.tensor<4x8xf16, @grid, [replicated, local]>
  func.return %y : !dist.tensor<4x8xf16, @grid, [replicated, local]>
}

// Only the ranks of stage 0 hold the value: they permute it among themselves.
// CHECK-LABEL: func.func @partial_in_a_stage
// CHECK: coll.permute %{{.*}} pairs [[0, 1]] axes [1] : !dist.tensor<8xi32, @grid, [at<0>, local]> -> !dist.tensor<8xi32, @grid, [at<0>, local]>
func.func @partial_in_a_stage(%x: !dist.tensor<8xi32, @grid, [at<0>, local]>) -> !dist.tensor<8xi32, @grid, [at<0>, local]> {
  %y = coll.permute %x pairs [[0, 1]] axes [1] : !dist.tensor<8xi32, @grid, [at<0>, local]> -> !dist.tensor<8xi32, @grid, [at<0>, local]>
  func.return %y : !dist.tensor<8xi32, @grid, [at<0>, local]>
}

// CHECK-LABEL: func.func @nothing_moves
// CHECK: coll.permute %{{.*}} pairs [] :
// GENERIC-LABEL: sym_name = "nothing_moves"
// GENERIC: "coll.permute"(%{{.*}}) <{pairs = array<i64>}>
func.func @nothing_moves(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [local]> {
  %y = coll.permute %x pairs [] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return %y : !dist.tensor<8xf32, @world, [local]>
}
