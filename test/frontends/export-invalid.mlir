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

// Blocks of different sizes (10 over 4 ranks: 3, 3, 3, 1) have no SPMD export.
// SDY: 'func.func' op cannot be exported to StableHLO + sdy: dim 0 of size 10 over the 4 ranks of axis 0: blocks of 3, 3, 3, 1: the export is one sdy.manual_computation (shard_map), whose manual axes cannot pad a dim (Shardy's rule)
// MESH: 'func.func' op cannot be exported to MLIR mesh: dim 0 of size 10 over the 4 ranks of axis 0: blocks of 3, 3, 3, 1: the export is SPMD with one static shape per device (MLIR 19's mesh has no sharded_dims_offsets)
dist.mesh @world shape = [4]
func.func @uneven(%x: !dist.tensor<10xf32, @world, [sliced<0>]>) -> !dist.tensor<10xf32, @world, [sliced<0>]> {
  func.return %x : !dist.tensor<10xf32, @world, [sliced<0>]>
}
