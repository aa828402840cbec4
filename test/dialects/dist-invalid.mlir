// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Programs that break a rule of the dist dialect; each CHECK gives the exact diagnostic.
// CHECK: 'dist.reduce' op operand must be local on axis 0, got replicated
dist.mesh @world shape = [4]
func.func @reduce_needs_local(%x: !dist.tensor<64xf32, @world, [replicated]>) {
  %y = dist.reduce sum %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [unplaced]>
  func.return
}

// -----

// CHECK: 'dist.slice' op operand must be unplaced on axis 0, got sliced<0>
dist.mesh @world shape = [4]
func.func @slice_needs_unplaced(%x: !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %y = dist.slice %x dim 0 : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return
}

// -----

// CHECK: 'dist.slice' op dim 2 is out of range for a tensor of rank 1
dist.mesh @world shape = [4]
func.func @slice_dim_in_range(%x: !dist.tensor<64xf32, @world, [unplaced]>) {
  %y = dist.slice %x dim 2 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return
}

// -----

// CHECK: 'dist.join' op operand axes [0] must be the innermost slicing of one dim, got [sliced<0>, sliced<0>]
dist.mesh @grid shape = [2, 2]
func.func @join_innermost_axis(%x: !dist.tensor<64xf32, @grid, [sliced<0>, sliced<0>]>) {
  %y = dist.join %x : !dist.tensor<64xf32, @grid, [sliced<0>, sliced<0>]> -> !dist.tensor<64xf32, @grid, [unplaced, sliced<0>]>
  func.return
}

// -----

// CHECK: 'dist.repl' op operand must be unplaced on axis 0, got replicated
dist.mesh @world shape = [4]
func.func @repl_needs_unplaced(%x: !dist.tensor<64xf32, @world, [replicated]>) {
  %y = dist.repl %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.store' op result is at<4> on axis 0, which has only 4 ranks
dist.mesh @world shape = [4]
func.func @store_rank_in_range(%x: !dist.tensor<64xf32, @world, [unplaced]>) {
  %y = dist.store %x rank 4 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [at<4>]>
  func.return
}

// -----

// CHECK: 'dist.load' op operand must be at<r> on axis 0, got replicated
dist.mesh @world shape = [4]
func.func @load_needs_at(%x: !dist.tensor<64xf32, @world, [replicated]>) {
  %y = dist.load %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [unplaced]>
  func.return
}

// -----

// CHECK: 'dist.repl' op 0-based mesh axis index 1 is out of bounds: the mesh @world has 1 axes
dist.mesh @world shape = [4]
func.func @axis_in_range(%x: !dist.tensor<64xf32, @world, [unplaced]>) {
  %y = dist.repl %x axis 1 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.repl' op result placements must be [replicated], got [sliced<0>]
dist.mesh @world shape = [4]
func.func @repl_result_placement(%x: !dist.tensor<64xf32, @world, [unplaced]>) {
  %y = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return
}

// -----

// CHECK: 'dist.drop' op result shape must be 64, got 32
dist.mesh @world shape = [4]
func.func @drop_result_shape(%x: !dist.tensor<64xf32, @world, [replicated]>) {
  %y = dist.drop %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<32xf32, @world, [unplaced]>
  func.return
}

// -----

// CHECK: 'dist.drop' op result element type must be f32, got f16
dist.mesh @world shape = [4]
func.func @drop_result_element_type(%x: !dist.tensor<64xf32, @world, [replicated]>) {
  %y = dist.drop %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf16, @world, [unplaced]>
  func.return
}

// -----

// CHECK: 'dist.map' op operand shapes 64, 32 do not broadcast
dist.mesh @world shape = [4]
func.func @map_shapes_broadcast(%a: !dist.tensor<64xf32, @world, [replicated]>, %b: !dist.tensor<32xf32, @world, [replicated]>) {
  %c = dist.map(%a, %b) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<32xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    dist.yield %z : f32
  }
  func.return
}

// -----

// CHECK: 'dist.map' op body argument 0 must be f32, got f16
dist.mesh @world shape = [4]
func.func @map_body_argument_types(%a: !dist.tensor<64xf32, @world, [replicated]>) {
  %c = dist.map(%a) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf16, @world, [replicated]> {
  ^bb0(%x: f16):
    dist.yield %x : f16
  }
  func.return
}

// -----

// CHECK: 'dist.map' op body yields 2 value(s) for 1 result(s)
dist.mesh @world shape = [4]
func.func @map_yield_count(%a: !dist.tensor<64xf32, @world, [replicated]>) {
  %c = dist.map(%a) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%x: f32):
    dist.yield %x, %x : f32, f32
  }
  func.return
}

// -----

// CHECK: 'dist.map' op operands must be on one mesh, got @other, @world
dist.mesh @world shape = [4]
dist.mesh @other shape = [4]
func.func @map_one_mesh(%a: !dist.tensor<64xf32, @world, [replicated]>, %b: !dist.tensor<64xf32, @other, [replicated]>) {
  %c = dist.map(%a, %b) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @other, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    dist.yield %z : f32
  }
  func.return
}

// -----

// CHECK: 'dist.matmul' op contracted dims differ: lhs 8x64 has 64, rhs 32x16 has 32
dist.mesh @world shape = [4]
func.func @matmul_contracted_dims(%a: !dist.tensor<8x64xf32, @world, [replicated]>, %b: !dist.tensor<32x16xf32, @world, [replicated]>) {
  %c = dist.matmul %a, %b : (!dist.tensor<8x64xf32, @world, [replicated]>, !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<8x16xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.matmul' op no matmul placement rule for lhs sliced<0> and rhs sliced<0> on axis 0
dist.mesh @world shape = [4]
func.func @matmul_placement_rule(%a: !dist.tensor<8x64xf32, @world, [sliced<0>]>, %b: !dist.tensor<64x16xf32, @world, [sliced<0>]>) {
  %c = dist.matmul %a, %b : (!dist.tensor<8x64xf32, @world, [sliced<0>]>, !dist.tensor<64x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'dist.matmul' op result placements must be [local], got [replicated]
dist.mesh @world shape = [4]
func.func @matmul_partial_sums_are_local(%a: !dist.tensor<8x64xf32, @world, [sliced<1>]>, %b: !dist.tensor<64x16xf32, @world, [sliced<0>]>) {
  %c = dist.matmul %a, %b : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<64x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.reduce_tensor' op reduced dim 2 is out of range for a tensor of rank 2
dist.mesh @world shape = [4]
func.func @reduce_tensor_dims(%a: !dist.tensor<8x64xf32, @world, [replicated]>) {
  %c = dist.reduce_tensor sum %a dims [2] : !dist.tensor<8x64xf32, @world, [replicated]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.dropout' op p must be in [0, 1), got 1.5
dist.mesh @world shape = [4]
func.func @dropout_probability(%a: !dist.tensor<64xf32, @world, [replicated]>) {
  %c = dist.dropout %a p 1.5 seed 1 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.embedding_bag' op indices must have an integer element type, got f32
dist.mesh @world shape = [4]
func.func @embedding_indices_are_integers(%t: !dist.tensor<100x16xf32, @world, [replicated]>, %i: !dist.tensor<32x2xf32, @world, [replicated]>) {
  %e = dist.embedding_bag %t, %i : (!dist.tensor<100x16xf32, @world, [replicated]>, !dist.tensor<32x2xf32, @world, [replicated]>) -> !dist.tensor<32x16xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.scatter_add' op no scatter_add placement rule for indices sliced<0>, updates sliced<0> and result replicated on axis 0
dist.mesh @world shape = [4]
func.func @scatter_add_of_sliced_bags_is_partial(%i: !dist.tensor<32x1xi32, @world, [sliced<0>]>, %u: !dist.tensor<32x16xf32, @world, [sliced<0>]>) {
  %g = dist.scatter_add %i, %u : (!dist.tensor<32x1xi32, @world, [sliced<0>]>, !dist.tensor<32x16xf32, @world, [sliced<0>]>) -> !dist.tensor<100x16xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.scatter_add' op indices [.., B, L] and updates [.., B, D] give a result [.., R, D]: got 32x1, 30x16 and 100x16
dist.mesh @world shape = [4]
func.func @scatter_add_shapes(%i: !dist.tensor<32x1xi32, @world, [replicated]>, %u: !dist.tensor<30x16xf32, @world, [replicated]>) {
  %g = dist.scatter_add %i, %u : (!dist.tensor<32x1xi32, @world, [replicated]>, !dist.tensor<30x16xf32, @world, [replicated]>) -> !dist.tensor<100x16xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'dist.sort' op the sorted dim 1 must not be sliced, got [sliced<1>]
dist.mesh @world shape = [4]
func.func @sort_along_a_sliced_dim(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>) {
  %s = dist.sort %x dim 1 : !dist.tensor<8x16xf32, @world, [sliced<1>]> -> !dist.tensor<8x16xf32, @world, [sliced<1>]>
  func.return
}

// -----

// CHECK: 'dist.remesh' op result placements [sliced<0>, replicated] on @hw do not keep the operand's layout [sliced<0>] on @world, which is [sliced<0>, sliced<0>] on @hw
dist.mesh @hw shape = [2, 2]
dist.mesh @world shape = [4] view @hw [[0, 1]]
func.func @remesh_keeps_layout(%x: !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %y = dist.remesh %x : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @hw, [sliced<0>, replicated]>
  func.return
}

// -----

// CHECK: 'dist.remesh' op rank 2 holds elements 4..6 of dim 0 on @flat but 4..5 on @hw: the ranks do not divide the dim (9), so its blocks over merged axes differ from its nested blocks and remesh, which moves no data, cannot relate them
dist.mesh @hw shape = [2, 4]
dist.mesh @flat shape = [8] view @hw [[0, 1]]
func.func @remesh_of_uneven_blocks_over_merged_axes(%x: !dist.tensor<9xf32, @flat, [sliced<0>]>) {
  %y = dist.remesh %x : !dist.tensor<9xf32, @flat, [sliced<0>]> -> !dist.tensor<9xf32, @hw, [sliced<0>, sliced<0>]>
  func.return
}

// -----

// CHECK: 'dist.remesh' op meshes @a and @b are not views of one mesh
dist.mesh @a shape = [4]
dist.mesh @b shape = [4]
func.func @remesh_needs_a_view(%x: !dist.tensor<64xf32, @a, [local]>) {
  %y = dist.remesh %x : !dist.tensor<64xf32, @a, [local]> -> !dist.tensor<64xf32, @b, [local]>
  func.return
}

// -----

// CHECK: 'dist.mesh' op view axis 0 has size 6 but parent axes [0, 1] of @hw have 8 ranks
dist.mesh @hw shape = [2, 4]
dist.mesh @world shape = [6] view @hw [[0, 1]]

// -----

// CHECK: 'dist.mesh' op view axes must be products of distinct parent axes covering all 2 axes of @hw, got [[0, 0]]
dist.mesh @hw shape = [2, 4]
dist.mesh @world shape = [8] view @hw [[0, 0]]

// -----

// CHECK: 'dist.mesh' op a mesh may leave only one axis size as '?'
dist.mesh @grid shape = [?, ?]

// -----

// CHECK: 'dist.reduce' op unknown mesh @nope: declare it with dist.mesh
func.func @unknown_mesh(%x: !dist.tensor<64xf32, @nope, [local]>) {
  %y = dist.reduce sum %x : !dist.tensor<64xf32, @nope, [local]> -> !dist.tensor<64xf32, @nope, [unplaced]>
  func.return
}

// -----

// CHECK: 'dist.reduce' op operand has 2 placement(s) but mesh @world has 1 axes
dist.mesh @world shape = [4]
func.func @one_placement_per_axis(%x: !dist.tensor<64xf32, @world, [local, local]>) {
  %y = dist.reduce sum %x : !dist.tensor<64xf32, @world, [local, local]> -> !dist.tensor<64xf32, @world, [unplaced, local]>
  func.return
}

// -----

// CHECK: 'dist.load' op operand is at<5> on axis 0, which has only 4 ranks
dist.mesh @world shape = [4]
func.func @at_rank_in_range(%x: !dist.tensor<64xf32, @world, [at<5>]>) {
  %y = dist.load %x : !dist.tensor<64xf32, @world, [at<5>]> -> !dist.tensor<64xf32, @world, [unplaced]>
  func.return
}

// -----

// CHECK: !dist.tensor of rank 1 cannot be sliced on dim 3
dist.mesh @world shape = [4]
func.func @sliced_dim_in_type(%x: !dist.tensor<64xf32, @world, [sliced<3>]>) {
  func.return
}

// -----

// CHECK: !dist.tensor nesting orders of dim 0 must be 0..1, got 0, 0
dist.mesh @grid shape = [2, 2]
func.func @nesting_orders(%x: !dist.tensor<64xf32, @grid, [sliced<0, 0>, sliced<0, 0>]>) {
  func.return
}

// -----

// CHECK: 'dist.cast' op result shape must be 64, got 32
dist.mesh @world shape = [4]
func.func @cast_keeps_shape(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = dist.cast %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<32xf16, @world, [local]>
  func.return
}

// -----

// CHECK: 'dist.take_slice' op operand must be replicated on axis 0, got local
dist.mesh @world shape = [4]
func.func @take_slice_needs_replicated(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = dist.take_slice %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return
}

// -----

// CHECK: expected a placement (replicated, sliced, local, at, unplaced), got 'partial'
dist.mesh @world shape = [4]
func.func @placement_word(%x: !dist.tensor<64xf32, @world, [partial]>) {
  func.return
}

// -----

// CHECK: 'dist.matmul' op the contracted dim must be sliced by the same axes in the same nesting order on both sides, got lhs [sliced<1>, sliced<1>] and rhs [sliced<0, 1>, sliced<0, 0>]
dist.mesh @grid shape = [2, 2]
func.func @matmul_contracted_nesting(%a: !dist.tensor<8x64xf32, @grid, [sliced<1>, sliced<1>]>, %b: !dist.tensor<64x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>) {
  %c = dist.matmul %a, %b : (!dist.tensor<8x64xf32, @grid, [sliced<1>, sliced<1>]>, !dist.tensor<64x16xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>) -> !dist.tensor<8x16xf32, @grid, [local, local]>
  func.return
}

// -----

// CHECK: 'dist.mesh' op mesh [2048, 1024] has 2097152 ranks: distir handles meshes of at most 1048576 ranks
dist.mesh @huge shape = [2048, 1024]
