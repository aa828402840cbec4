// RUN: distir-opt %s | filecheck %s
// RUN: distir-opt %s | distir-opt | filecheck %s
// RUN: distir-opt %s --print-op-generic | distir-opt | filecheck %s
// The layout ops the front ends need for StableHLO (transpose, reshape, iota,
// extract_slice, concat) and the per-device views (to_local, from_local), in their
// custom syntax; the printed form parses back to the same IR.

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 2]

// CHECK-LABEL: func.func @layout_ops
// CHECK:         %t = dist.transpose %x perm [1, 0] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [sliced<0>]>
// CHECK-NEXT:    %r = dist.reshape %t : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<4x16x8xf32, @world, [sliced<0>]>
// CHECK-NEXT:    %i = dist.iota dim 1 : () -> !dist.tensor<4x32xi32, @world, [sliced<1>]>
// CHECK-NEXT:    %e = dist.extract_slice %x offsets [2, 0] strides [2, 1] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<3x64xf32, @world, [sliced<1>]>
// CHECK-NEXT:    %c = dist.concat %x, %e dim 0 : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<3x64xf32, @world, [sliced<1>]>) -> !dist.tensor<11x64xf32, @world, [sliced<1>]>
// CHECK-NEXT:    %l = dist.to_local %x : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<8x16xf32, @world, [local]>
// CHECK-NEXT:    %g = dist.from_local %l : !dist.tensor<8x16xf32, @world, [local]> -> !dist.tensor<32x16xf32, @world, [sliced<0>]>
// CHECK-NEXT:    %h = dist.from_local %l : !dist.tensor<8x16xf32, @world, [local]> -> !dist.tensor<8x16xf32, @world, [at<2>]>
func.func @layout_ops(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>) -> !dist.tensor<64x8xf32, @world, [sliced<0>]> {
  %t = dist.transpose %x perm [1, 0] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [sliced<0>]>
  %r = dist.reshape %t : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<4x16x8xf32, @world, [sliced<0>]>
  %i = dist.iota dim 1 : () -> !dist.tensor<4x32xi32, @world, [sliced<1>]>
  %e = dist.extract_slice %x offsets [2, 0] strides [2, 1] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<3x64xf32, @world, [sliced<1>]>
  %c = dist.concat %x, %e dim 0 : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<3x64xf32, @world, [sliced<1>]>) -> !dist.tensor<11x64xf32, @world, [sliced<1>]>
  %l = dist.to_local %x : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<8x16xf32, @world, [local]>
  %g = dist.from_local %l : !dist.tensor<8x16xf32, @world, [local]> -> !dist.tensor<32x16xf32, @world, [sliced<0>]>
  %h = dist.from_local %l : !dist.tensor<8x16xf32, @world, [local]> -> !dist.tensor<8x16xf32, @world, [at<2>]>
  func.return %t : !dist.tensor<64x8xf32, @world, [sliced<0>]>
}

// Two axes slicing one dim move together, in their nesting order.
// CHECK-LABEL: func.func @two_axes
// CHECK:         dist.transpose %x perm [1, 0] : !dist.tensor<8x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<16x8xf32, @grid, [sliced<1, 1>, sliced<1, 0>]>
// CHECK-NEXT:    dist.reshape %x : !dist.tensor<8x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<4x2x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
func.func @two_axes(%x: !dist.tensor<8x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>) {
  %t = dist.transpose %x perm [1, 0] : !dist.tensor<8x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<16x8xf32, @grid, [sliced<1, 1>, sliced<1, 0>]>
  %r = dist.reshape %x : !dist.tensor<8x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<4x2x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  func.return
}
