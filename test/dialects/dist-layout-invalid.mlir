// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// The layout ops' rules; each CHECK gives the exact diagnostic.
// CHECK: 'dist.transpose' op perm must be a permutation of 0..1, got [0, 0]
dist.mesh @world shape = [4]
func.func @transpose_perm(%x: !dist.tensor<8x64xf32, @world, [replicated]>) {
  %t = dist.transpose %x perm [0, 0] : !dist.tensor<8x64xf32, @world, [replicated]> -> !dist.tensor<8x8xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.transpose' op result placements must be [sliced<0>], got [sliced<1>]
dist.mesh @world shape = [4]
func.func @transpose_moves_the_slicing(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>) {
  %t = dist.transpose %x perm [1, 0] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  func.return
}

// -----

// CHECK: 'dist.reshape' op operand is sliced on dim 1 on axis 0, which is not the outermost dim of the dims the reshape merges or splits it with: gather it first
dist.mesh @world shape = [4]
func.func @reshape_inner_sliced_dim(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>) {
  %r = dist.reshape %x : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<512xf32, @world, [sliced<0>]>
  func.return
}

// -----

// CHECK: 'dist.reshape' op cannot reshape 8x64 (512 elements) to 8x8 (64 elements)
dist.mesh @world shape = [4]
func.func @reshape_count(%x: !dist.tensor<8x64xf32, @world, [replicated]>) {
  %r = dist.reshape %x : !dist.tensor<8x64xf32, @world, [replicated]> -> !dist.tensor<8x8xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.iota' op dim 2 is out of range for a tensor of rank 2
dist.mesh @world shape = [4]
func.func @iota_dim() {
  %i = dist.iota dim 2 : () -> !dist.tensor<4x32xi32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.extract_slice' op dim 1 is sliced across ranks: it must be taken whole
dist.mesh @world shape = [4]
func.func @extract_sliced_dim(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>) {
  %e = dist.extract_slice %x offsets [0, 4] strides [1, 1] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<8x32xf32, @world, [sliced<1>]>
  func.return
}

// -----

// CHECK: 'dist.extract_slice' op dim 0: 4 element(s) from 2 by 2 do not fit in size 8
dist.mesh @world shape = [4]
func.func @extract_out_of_bounds(%x: !dist.tensor<8x64xf32, @world, [replicated]>) {
  %e = dist.extract_slice %x offsets [2, 0] strides [2, 1] : !dist.tensor<8x64xf32, @world, [replicated]> -> !dist.tensor<4x64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.concat' op dim 1 is sliced across ranks: gather it first
dist.mesh @world shape = [4]
func.func @concat_sliced_dim(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>) {
  %c = dist.concat %x, %x dim 1 : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<8x64xf32, @world, [sliced<1>]>) -> !dist.tensor<8x128xf32, @world, [sliced<1>]>
  func.return
}

// -----

// CHECK: 'dist.concat' op operands must share placements, operand 1 differs from operand 0
dist.mesh @world shape = [4]
func.func @concat_placements(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>, %y: !dist.tensor<8x64xf32, @world, [replicated]>) {
  %c = dist.concat %x, %y dim 0 : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<8x64xf32, @world, [replicated]>) -> !dist.tensor<16x64xf32, @world, [sliced<1>]>
  func.return
}

// -----

// CHECK: 'dist.to_local' op each rank's buffer must keep its shape: 8x16 becomes 8x64
dist.mesh @world shape = [4]
func.func @to_local_shape(%x: !dist.tensor<8x64xf32, @world, [sliced<1>]>) {
  %l = dist.to_local %x : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<8x64xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'dist.from_local' op axis 0: operand local and result replicated, sliced or at<r>, got replicated -> sliced<0>
dist.mesh @world shape = [4]
func.func @from_local_needs_local(%x: !dist.tensor<8x64xf32, @world, [replicated]>) {
  %g = dist.from_local %x : !dist.tensor<8x64xf32, @world, [replicated]> -> !dist.tensor<32x64xf32, @world, [sliced<0>]>
  func.return
}

// -----

// CHECK: 'dist.to_local' op axis 0: operand replicated or sliced and result local, got at<1> -> local
dist.mesh @world shape = [4]
func.func @to_local_of_a_held_value(%x: !dist.tensor<8x64xf32, @world, [at<1>]>) {
  %l = dist.to_local %x : !dist.tensor<8x64xf32, @world, [at<1>]> -> !dist.tensor<8x64xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'dist.reshape' op block 0 of dim 0 (elements 0..8) is not block 0 of the result's dim 0 (elements 0..6): the ranks slice the two dims differently, gather first
dist.mesh @world shape = [4]
func.func @reshape_of_uneven_blocks(%x: !dist.tensor<6x4xf32, @world, [sliced<0>]>) {
  %y = dist.reshape %x : !dist.tensor<6x4xf32, @world, [sliced<0>]> -> !dist.tensor<24xf32, @world, [sliced<0>]>
  func.return
}
