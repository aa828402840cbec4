// RUN: distir-opt %s --split-input-file --verify-diagnostics --emit sdy | filecheck %s --check-prefix=SDY
// RUN: distir-opt %s --split-input-file --verify-diagnostics --emit mesh | filecheck %s --check-prefix=MESH
// Programs an exporter rejects: each diagnostic names the op (and is located at it).

// SDY: export-invalid.mlir:8:1
// SDY: 'dist.mesh' op mesh @world has shape [?]: StableHLO + sdy needs static mesh sizes (fix them with -p 'fix-mesh-sizes{ranks=N}')
// MESH: 'dist.mesh' op mesh @world has shape [?]: MLIR mesh needs static mesh sizes (fix them with -p 'fix-mesh-sizes{ranks=N}')
dist.mesh @world shape = [?]
func.func @dynamic_mesh(%x: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  func.return %x : !dist.tensor<8xf32, @world, [replicated]>
}

// -----

// SDY: 'func.call' op cannot be exported to StableHLO + sdy: inline the callee first
// MESH: 'func.call' op cannot be exported to MLIR mesh: inline the callee first
dist.mesh @world shape = [2]
func.func @callee(%x: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  func.return %x : !dist.tensor<8xf32, @world, [replicated]>
}
func.func @caller(%x: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = func.call @callee(%x) : (!dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]>
  func.return %y : !dist.tensor<8xf32, @world, [replicated]>
}

// -----

// SDY: 'func.func' op uses meshes @a, @b: StableHLO + sdy exports a function on one root mesh
// MESH: 'func.func' op uses meshes @a, @b: MLIR mesh exports a function on one root mesh
dist.mesh @a shape = [2]
dist.mesh @b shape = [4]
func.func @two_meshes(%x: !dist.tensor<8xf32, @a, [replicated]>, %y: !dist.tensor<8xf32, @b, [replicated]>) {
  func.return
}

// -----

// SDY: 'func.func' op argument 0 is unplaced: unplaced values exist only between functional primitives
// MESH: 'func.func' op argument 0 is unplaced: unplaced values exist only between functional primitives
dist.mesh @world shape = [2]
func.func @unplaced_argument(%x: !dist.tensor<8xf32, @world, [unplaced]>) {
  func.return
}

// -----

// SDY: 'arith.maxnumf' op has no StableHLO + sdy counterpart in this exporter
// MESH-NOT: error
dist.mesh @world shape = [2]
func.func @maxnum(%x: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = dist.map(%x) : (!dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    %z = arith.constant 0.0 : f32
    %m = arith.maxnumf %a, %z : f32
    dist.yield %m : f32
  }
  func.return %y : !dist.tensor<8xf32, @world, [replicated]>
}

// -----

// Partial sums on a dim the ranks do not divide cannot be padded at the boundary (the
// sdy export pads in the global view, where an unreduced value has no blocks).
// SDY: 'func.func' op argument 0 holds partial sums (local) on a dim the ranks do not divide (dim 0 of size 7 over the 3 ranks of axis 1: blocks of 3, 3, 1): the export pads such dims in the global view, where an unreduced value has no per-device blocks to pad (all_reduce or reduce_scatter it inside the function first)
// MESH: 'func.func' op cannot be exported to MLIR mesh: dim 0 of size 7 over the 3 ranks of axis 1: blocks of 3, 3, 1: the export is SPMD with one static shape per device (MLIR 19's mesh has no sharded_dims_offsets)
dist.mesh @grid shape = [2, 3]
func.func @uneven_partial_sums(%x: !dist.tensor<7x2xf32, @grid, [local, sliced<0>]>) -> !dist.tensor<7x2xf32, @grid, [replicated, sliced<0>]> {
  %y = coll.all_reduce sum %x axes [0] : !dist.tensor<7x2xf32, @grid, [local, sliced<0>]> -> !dist.tensor<7x2xf32, @grid, [replicated, sliced<0>]>
  func.return %y : !dist.tensor<7x2xf32, @grid, [replicated, sliced<0>]>
}
