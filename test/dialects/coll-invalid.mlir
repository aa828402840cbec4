// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Programs that break a rule of the coll dialect; each CHECK gives the exact diagnostic.
// CHECK: 'coll.all_gather' op operand must be sliced on axis 0, got local
dist.mesh @world shape = [4]
func.func @all_gather_needs_sliced(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = coll.all_gather %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'coll.all_gather' op operand axes [0] must be the innermost slicing of one dim, got [sliced<0>, sliced<0>]
dist.mesh @grid shape = [2, 2]
func.func @all_gather_innermost_axes(%x: !dist.tensor<64xf32, @grid, [sliced<0>, sliced<0>]>) {
  %y = coll.all_gather %x axes [0] : !dist.tensor<64xf32, @grid, [sliced<0>, sliced<0>]> -> !dist.tensor<64xf32, @grid, [replicated, sliced<0>]>
  func.return
}

// -----

// CHECK: 'coll.reduce' op root 7 is out of range for a group of 4 ranks
dist.mesh @world shape = [4]
func.func @reduce_root_in_group(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = coll.reduce sum %x root 7 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [at<3>]>
  func.return
}

// -----

// CHECK: 'coll.broadcast' op operand must be at<r> on axis 0, got replicated
dist.mesh @world shape = [4]
func.func @broadcast_needs_at(%x: !dist.tensor<64xf32, @world, [replicated]>) {
  %y = coll.broadcast %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'coll.send' op target rank 2 is out of range for a group of 2 ranks
dist.mesh @grid shape = [2, 4]
func.func @send_target_in_group(%x: !dist.tensor<64xf32, @grid, [at<0>, replicated]>) {
  %y = coll.send %x to 2 axes [0] : !dist.tensor<64xf32, @grid, [at<0>, replicated]> -> !dist.tensor<64xf32, @grid, [at<1>, replicated]>
  func.return
}

// -----

// CHECK: 'coll.all_to_all' op dim 2 is out of range for a tensor of rank 2
dist.mesh @world shape = [4]
func.func @all_to_all_dim_in_range(%x: !dist.tensor<64x8xf32, @world, [sliced<0>]>) {
  %y = coll.all_to_all %x dim 2 : !dist.tensor<64x8xf32, @world, [sliced<0>]> -> !dist.tensor<64x8xf32, @world, [sliced<1>]>
  func.return
}

// -----

// CHECK: 'coll.all_reduce' op axes must be distinct, got [0, 0]
dist.mesh @grid shape = [2, 2]
func.func @axes_distinct(%x: !dist.tensor<64xf32, @grid, [local, local]>) {
  %y = coll.all_reduce sum %x axes [0, 0] : !dist.tensor<64xf32, @grid, [local, local]> -> !dist.tensor<64xf32, @grid, [replicated, replicated]>
  func.return
}

// -----

// CHECK: 'coll.all_reduce' op 0-based mesh axis index 1 is out of bounds: the mesh @world has 1 axes
dist.mesh @world shape = [4]
func.func @axes_in_range(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = coll.all_reduce sum %x axes [1] : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'coll.all_reduce' expects a reduction (sum, prod, max, min, avg)
dist.mesh @world shape = [4]
func.func @reduction_kind(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = coll.all_reduce mean %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return
}

// -----

// CHECK: 'coll.reduce_scatter' expects 'dim' here
dist.mesh @world shape = [4]
func.func @reduce_scatter_needs_dim(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = coll.reduce_scatter sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
  func.return
}

// -----

// CHECK: 'coll.reduce_scatter' op result placements must be [sliced<0, 1>, sliced<0, 0>], got [sliced<0>, sliced<0>]
dist.mesh @grid shape = [2, 2]
func.func @reduce_scatter_nests_inside(%x: !dist.tensor<64xf32, @grid, [local, sliced<0>]>) {
  %y = coll.reduce_scatter sum %x dim 0 axes [0] : !dist.tensor<64xf32, @grid, [local, sliced<0>]> -> !dist.tensor<64xf32, @grid, [sliced<0>, sliced<0>]>
  func.return
}

// -----

// CHECK: 'coll.fused_all_reduce' op region argument 0 placements must be [sliced<0>], got [replicated]
dist.mesh @world shape = [4]
func.func @fused_region_argument(%g: !dist.tensor<64xf32, @world, [local]>) {
  %p = coll.fused_all_reduce sum %g dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%gs: !dist.tensor<64xf32, @world, [replicated]>):
    coll.yield %gs : !dist.tensor<64xf32, @world, [replicated]>
  }
  func.return
}

// -----

// CHECK: 'coll.fused_all_reduce' op gather has 2 flag(s) for 1 result(s)
dist.mesh @world shape = [4]
func.func @fused_gather_flags(%g: !dist.tensor<64xf32, @world, [local]>) {
  %p = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %gs : !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return
}

// -----

// CHECK: 'coll.fused_all_reduce' op result 0 placements must be [replicated], got [sliced<0>]
dist.mesh @world shape = [4]
func.func @fused_gathered_result(%g: !dist.tensor<64xf32, @world, [local]>) {
  %p = coll.fused_all_reduce sum %g dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %gs : !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return
}

// -----

// CHECK: 'coll.fused_reduce_scatter' op region yields 2 value(s) for 1 result(s)
dist.mesh @world shape = [4]
func.func @fused_yield_count(%g: !dist.tensor<64xf32, @world, [local]>) {
  %p = coll.fused_reduce_scatter sum %g dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%gs: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %gs, %gs : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return
}

// -----

// CHECK: 'coll.overlap' op region must hold a chain ending in a collective
dist.mesh @world shape = [4]
func.func @overlap_holds_a_collective(%x: !dist.tensor<64xf32, @world, [replicated]>) {
  %y = coll.overlap chunks 2 -> !dist.tensor<64xf32, @world, [replicated]> {
    %z = dist.cast %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
    coll.yield %z : !dist.tensor<64xf32, @world, [replicated]>
  }
  func.return
}

// -----

// CHECK: 'coll.overlap' op chunks must be at least 1, got 0
dist.mesh @world shape = [4]
func.func @overlap_chunks(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = coll.overlap chunks 0 -> !dist.tensor<64xf32, @world, [replicated]> {
    %z = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
    coll.yield %z : !dist.tensor<64xf32, @world, [replicated]>
  }
  func.return
}

// -----

// CHECK: 'order' must be one of natural, ring, remote_first, got 'random'
dist.mesh @world shape = [4]
func.func @overlap_order(%x: !dist.tensor<64xf32, @world, [local]>) {
  %y = coll.overlap chunks 2 order random -> !dist.tensor<64xf32, @world, [replicated]> {
    %z = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
    coll.yield %z : !dist.tensor<64xf32, @world, [replicated]>
  }
  func.return
}
