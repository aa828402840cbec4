// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Programs that break a rule of coll.permute; each CHECK gives the exact diagnostic.
// CHECK: 'coll.permute' op operand must be local on axis 0, got replicated
dist.mesh @world shape = [4]
func.func @permute_needs_local(%x: !dist.tensor<8xf32, @world, [replicated]>) {
  %y = coll.permute %x offset 1 : !dist.tensor<8xf32, @world, [replicated]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'coll.permute' op needs 'offset' or 'pairs'
dist.mesh @world shape = [4]
func.func @permute_needs_offset_or_pairs(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'coll.permute' op takes 'offset' or 'pairs', not both
dist.mesh @world shape = [4]
func.func @permute_offset_and_pairs(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x offset 1 pairs [[0, 1]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'coll.permute' op pair [2, 4] is out of range for a group of 4 ranks
dist.mesh @world shape = [4]
func.func @permute_pair_out_of_range(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x pairs [[0, 1], [2, 4]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return
}

// -----

// The group is the ranks of axis 1 only (2 of them), not the whole mesh.
// CHECK: 'coll.permute' op pair [0, 2] is out of range for a group of 2 ranks
dist.mesh @grid shape = [4, 2]
func.func @permute_pair_out_of_the_group(%x: !dist.tensor<8xf32, @grid, [local, local]>) {
  %y = coll.permute %x pairs [[0, 2]] axes [1] : !dist.tensor<8xf32, @grid, [local, local]> -> !dist.tensor<8xf32, @grid, [local, local]>
  func.return
}

// -----

// CHECK: 'coll.permute' op pair [-1, 0] names a negative rank
dist.mesh @world shape = [?]
func.func @permute_negative_rank(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x pairs [[-1, 0]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'coll.permute' op pair [1, 3]: rank 1 is the source of an earlier pair too
dist.mesh @world shape = [4]
func.func @permute_source_twice(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x pairs [[1, 2], [0, 1], [1, 3]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'coll.permute' op pair [3, 2]: rank 2 is the target of an earlier pair too
dist.mesh @world shape = [4]
func.func @permute_target_twice(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x pairs [[1, 2], [3, 2]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return
}

// -----

// CHECK: a pair is [source, target], got 3 rank(s)
dist.mesh @world shape = [4]
func.func @permute_pair_of_three(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x pairs [[0, 1, 2]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return
}

// -----

// CHECK: 'coll.permute' op result placements must be [local], got [replicated]
dist.mesh @world shape = [4]
func.func @permute_keeps_the_type(%x: !dist.tensor<8xf32, @world, [local]>) {
  %y = coll.permute %x offset 1 : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return
}
