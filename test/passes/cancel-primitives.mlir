// RUN: distir-opt %s -p cancel-primitives | filecheck %s

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 4]

// CHECK-LABEL: func.func @join_of_slice
// CHECK-NOT:     dist.slice
// CHECK-NOT:     dist.join
// CHECK:         func.return %x
func.func @join_of_slice(%x: !dist.tensor<64xf32, @world, [unplaced]>) -> !dist.tensor<64xf32, @world, [unplaced]> {
  %s = dist.slice %x dim 0 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  %j = dist.join %s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [unplaced]>
  func.return %j : !dist.tensor<64xf32, @world, [unplaced]>
}

// CHECK-LABEL: func.func @slice_of_join
// CHECK:         func.return %x
func.func @slice_of_join(%x: !dist.tensor<64x8xf32, @world, [sliced<1>]>) -> !dist.tensor<64x8xf32, @world, [sliced<1>]> {
  %j = dist.join %x : !dist.tensor<64x8xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %s = dist.slice %j dim 1 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  func.return %s : !dist.tensor<64x8xf32, @world, [sliced<1>]>
}

// Joining then slicing another dim is an all-to-all, not an identity.
// CHECK-LABEL: func.func @slice_of_join_other_dim_stays
// CHECK:         %[[J:.*]] = dist.join %x
// CHECK-NEXT:    %[[S:.*]] = dist.slice %[[J]] dim 0
// CHECK-NEXT:    func.return %[[S]]
func.func @slice_of_join_other_dim_stays(%x: !dist.tensor<64x8xf32, @world, [sliced<1>]>) -> !dist.tensor<64x8xf32, @world, [sliced<0>]> {
  %j = dist.join %x : !dist.tensor<64x8xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [unplaced]>
  %s = dist.slice %j dim 0 : !dist.tensor<64x8xf32, @world, [unplaced]> -> !dist.tensor<64x8xf32, @world, [sliced<0>]>
  func.return %s : !dist.tensor<64x8xf32, @world, [sliced<0>]>
}

// CHECK-LABEL: func.func @drop_repl_and_repl_drop
// CHECK:         func.return %x, %y
func.func @drop_repl_and_repl_drop(%x: !dist.tensor<64xf32, @world, [unplaced]>, %y: !dist.tensor<64xf32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [unplaced]>, !dist.tensor<64xf32, @world, [replicated]>) {
  %r = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  %d = dist.drop %r : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %d2 = dist.drop %y : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %r2 = dist.repl %d2 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %d, %r2 : !dist.tensor<64xf32, @world, [unplaced]>, !dist.tensor<64xf32, @world, [replicated]>
}

// store(load(x), r) cancels only when x is at<r>.
// CHECK-LABEL: func.func @load_store
// CHECK:         %[[L:.*]] = dist.load %y
// CHECK-NEXT:    %[[S:.*]] = dist.store %[[L]] rank 3
// CHECK-NEXT:    func.return %x, %y, %[[S]]
func.func @load_store(%x: !dist.tensor<64xf32, @world, [unplaced]>, %y: !dist.tensor<64xf32, @world, [at<2>]>) -> (!dist.tensor<64xf32, @world, [unplaced]>, !dist.tensor<64xf32, @world, [at<2>]>, !dist.tensor<64xf32, @world, [at<3>]>) {
  %s = dist.store %x rank 1 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [at<1>]>
  %l = dist.load %s : !dist.tensor<64xf32, @world, [at<1>]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %l2 = dist.load %y : !dist.tensor<64xf32, @world, [at<2>]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %s2 = dist.store %l2 rank 2 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [at<2>]>
  %l3 = dist.load %y : !dist.tensor<64xf32, @world, [at<2>]> -> !dist.tensor<64xf32, @world, [unplaced]>
  %s3 = dist.store %l3 rank 3 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [at<3>]>
  func.return %l, %s2, %s3 : !dist.tensor<64xf32, @world, [unplaced]>, !dist.tensor<64xf32, @world, [at<2>]>, !dist.tensor<64xf32, @world, [at<3>]>
}

// Primitives on different axes do not cancel.
// CHECK-LABEL: func.func @different_axes_stay
// CHECK:         dist.repl %x axis 1
// CHECK-NEXT:    dist.drop
func.func @different_axes_stay(%x: !dist.tensor<64xf32, @grid, [replicated, unplaced]>) -> !dist.tensor<64xf32, @grid, [unplaced, replicated]> {
  %r = dist.repl %x axis 1 : !dist.tensor<64xf32, @grid, [replicated, unplaced]> -> !dist.tensor<64xf32, @grid, [replicated, replicated]>
  %d = dist.drop %r : !dist.tensor<64xf32, @grid, [replicated, replicated]> -> !dist.tensor<64xf32, @grid, [unplaced, replicated]>
  func.return %d : !dist.tensor<64xf32, @grid, [unplaced, replicated]>
}

// The inner primitive stays while it has other uses.
// CHECK-LABEL: func.func @inner_with_other_use
// CHECK:         %[[R:.*]] = dist.repl %x
// CHECK-NEXT:    func.return %x, %[[R]]
func.func @inner_with_other_use(%x: !dist.tensor<64xf32, @world, [unplaced]>) -> (!dist.tensor<64xf32, @world, [unplaced]>, !dist.tensor<64xf32, @world, [replicated]>) {
  %r = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  %d = dist.drop %r : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [unplaced]>
  func.return %d, %r : !dist.tensor<64xf32, @world, [unplaced]>, !dist.tensor<64xf32, @world, [replicated]>
}

// Uneven blocks (13 over 4 ranks: 4, 4, 4, 1): join(slice(x)) = x all the same.
// CHECK-LABEL: func.func @uneven_slice_join
// CHECK-NEXT:    func.return %x : !dist.tensor<13xf32, @world, [unplaced]>
func.func @uneven_slice_join(%x: !dist.tensor<13xf32, @world, [unplaced]>) -> !dist.tensor<13xf32, @world, [unplaced]> {
  %s = dist.slice %x dim 0 : !dist.tensor<13xf32, @world, [unplaced]> -> !dist.tensor<13xf32, @world, [sliced<0>]>
  %j = dist.join %s : !dist.tensor<13xf32, @world, [sliced<0>]> -> !dist.tensor<13xf32, @world, [unplaced]>
  func.return %j : !dist.tensor<13xf32, @world, [unplaced]>
}
