// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// plan-execution's decision attributes are verified: a zero_copy group must have the shape
// its clauses name, an in_place all-gather must gather this rank's block.

// CHECK: 'rt.fused' op zero_copy group reduces into parameter 1 and gathers parameters [6, 5], not reduce 0 gather [6, 5]
  dist.mesh @world shape = [2]
  func.func @wrong_reduce(%g: memref<64xf32>, %p: memref<64xf32>, %m: memref<64xf32>, %lr: f32, %mu: f32) -> (memref<64xf32> {dist.inplace = 1 : i64}, memref<64xf32> {dist.inplace = 2 : i64}) attributes {rt.dist_type = (!dist.tensor<64xf32, @world, [local]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, f32, f32) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>)} {
    %s = rt.stream 0 : !rt.stream
    %avg_rs = rt.alloc : () -> memref<32xf32>
    %0 = rt.comm @world axes [0] : !rt.comm
    %1 = rt.group_rank @world axes [0] : index
    rt.fused zero_copy reduce 0 gather [6, 5] {
      nccl.reduce_scatter avg %g, %avg_rs, %0, %s count 32 : (memref<64xf32>, memref<32xf32>, !rt.comm, !rt.stream) -> ()
      %2 = rt.block %m, %1 dim 0 count 2 : (memref<64xf32>, index) -> memref<32xf32>
      %3 = rt.block %p, %1 dim 0 count 2 : (memref<64xf32>, index) -> memref<32xf32>
      rt.launch @k0(%2, %avg_rs, %mu, %3, %lr, %3, %2, %s) : (memref<32xf32>, memref<32xf32>, f32, memref<32xf32>, f32, memref<32xf32>, memref<32xf32>, !rt.stream) -> ()
      nccl.all_gather %2, %m, %0, %s count 32 in_place : (memref<32xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
      nccl.all_gather %3, %p, %0, %s count 32 in_place : (memref<32xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
    }
    rt.stream_sync %s : !rt.stream -> ()
    func.return %p, %m : memref<64xf32>, memref<64xf32>
  }
  rt.kernel @k0 shape [32] {
  ^bb0(%m_s: memref<32xf32>, %avg_rs: memref<32xf32>, %mu: f32, %p_s: memref<32xf32>, %lr: f32, %p1_s_out: memref<32xf32>, %m1_s_out: memref<32xf32>, %i0: index):
    %m_s_1 = memref.load %m_s[%i0] : memref<32xf32>
    %avg_rs_1 = memref.load %avg_rs[%i0] : memref<32xf32>
    %p_s_1 = memref.load %p_s[%i0] : memref<32xf32>
    %a = arith.mulf %mu, %m_s_1 : f32
    %b = arith.addf %a, %avg_rs_1 : f32
    %a_1 = arith.mulf %lr, %b : f32
    %b_1 = arith.subf %p_s_1, %a_1 : f32
    memref.store %b_1, %p1_s_out[%i0] : memref<32xf32>
    memref.store %b, %m1_s_out[%i0] : memref<32xf32>
  }

// -----

// CHECK: 'rt.fused' op cannot run zero_copy: each all-gather must be in place
  dist.mesh @world shape = [2]
  func.func @zero_copy_without_in_place_gather(%g: memref<64xf32>, %p: memref<64xf32>, %m: memref<64xf32>, %lr: f32, %mu: f32) -> (memref<64xf32> {dist.inplace = 1 : i64}, memref<64xf32> {dist.inplace = 2 : i64}) attributes {rt.dist_type = (!dist.tensor<64xf32, @world, [local]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, f32, f32) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>)} {
    %s = rt.stream 0 : !rt.stream
    %avg_rs = rt.alloc : () -> memref<32xf32>
    %0 = rt.comm @world axes [0] : !rt.comm
    %1 = rt.group_rank @world axes [0] : index
    rt.fused zero_copy reduce 1 gather [6, 5] {
      nccl.reduce_scatter avg %g, %avg_rs, %0, %s count 32 : (memref<64xf32>, memref<32xf32>, !rt.comm, !rt.stream) -> ()
      %2 = rt.block %m, %1 dim 0 count 2 : (memref<64xf32>, index) -> memref<32xf32>
      %3 = rt.block %p, %1 dim 0 count 2 : (memref<64xf32>, index) -> memref<32xf32>
      rt.launch @k0(%2, %avg_rs, %mu, %3, %lr, %3, %2, %s) : (memref<32xf32>, memref<32xf32>, f32, memref<32xf32>, f32, memref<32xf32>, memref<32xf32>, !rt.stream) -> ()
      nccl.all_gather %2, %m, %0, %s count 32 in_place : (memref<32xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
      nccl.all_gather %2, %p, %0, %s count 32 : (memref<32xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
    }
    rt.stream_sync %s : !rt.stream -> ()
    func.return %p, %m : memref<64xf32>, memref<64xf32>
  }
  rt.kernel @k0 shape [32] {
  ^bb0(%m_s: memref<32xf32>, %avg_rs: memref<32xf32>, %mu: f32, %p_s: memref<32xf32>, %lr: f32, %p1_s_out: memref<32xf32>, %m1_s_out: memref<32xf32>, %i0: index):
    %m_s_1 = memref.load %m_s[%i0] : memref<32xf32>
    %avg_rs_1 = memref.load %avg_rs[%i0] : memref<32xf32>
    %p_s_1 = memref.load %p_s[%i0] : memref<32xf32>
    %a = arith.mulf %mu, %m_s_1 : f32
    %b = arith.addf %a, %avg_rs_1 : f32
    %a_1 = arith.mulf %lr, %b : f32
    %b_1 = arith.subf %p_s_1, %a_1 : f32
    memref.store %b_1, %p1_s_out[%i0] : memref<32xf32>
    memref.store %b, %m1_s_out[%i0] : memref<32xf32>
  }

// -----

// CHECK: 'nccl.all_gather' op in_place needs the send buffer to be this rank's contiguous block of the recv buffer
  dist.mesh @world shape = [2]
  func.func @in_place_not_a_block(%g: memref<64xf32>, %p: memref<64xf32>, %m: memref<64xf32>, %lr: f32, %mu: f32) -> (memref<64xf32> {dist.inplace = 1 : i64}, memref<64xf32> {dist.inplace = 2 : i64}) attributes {rt.dist_type = (!dist.tensor<64xf32, @world, [local]>, !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>, f32, f32) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>)} {
    %s = rt.stream 0 : !rt.stream
    %avg_rs = rt.alloc : () -> memref<32xf32>
    %0 = rt.comm @world axes [0] : !rt.comm
    %1 = rt.group_rank @world axes [0] : index
    nccl.all_gather %avg_rs, %g, %0, %s count 32 in_place : (memref<32xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
    rt.fused sequential {
      nccl.reduce_scatter avg %g, %avg_rs, %0, %s count 32 : (memref<64xf32>, memref<32xf32>, !rt.comm, !rt.stream) -> ()
      %2 = rt.block %m, %1 dim 0 count 2 : (memref<64xf32>, index) -> memref<32xf32>
      %3 = rt.block %p, %1 dim 0 count 2 : (memref<64xf32>, index) -> memref<32xf32>
      rt.launch @k0(%2, %avg_rs, %mu, %3, %lr, %3, %2, %s) : (memref<32xf32>, memref<32xf32>, f32, memref<32xf32>, f32, memref<32xf32>, memref<32xf32>, !rt.stream) -> ()
      nccl.all_gather %2, %m, %0, %s count 32 in_place : (memref<32xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
      nccl.all_gather %3, %p, %0, %s count 32 in_place : (memref<32xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
    }
    rt.stream_sync %s : !rt.stream -> ()
    func.return %p, %m : memref<64xf32>, memref<64xf32>
  }
  rt.kernel @k0 shape [32] {
  ^bb0(%m_s: memref<32xf32>, %avg_rs: memref<32xf32>, %mu: f32, %p_s: memref<32xf32>, %lr: f32, %p1_s_out: memref<32xf32>, %m1_s_out: memref<32xf32>, %i0: index):
    %m_s_1 = memref.load %m_s[%i0] : memref<32xf32>
    %avg_rs_1 = memref.load %avg_rs[%i0] : memref<32xf32>
    %p_s_1 = memref.load %p_s[%i0] : memref<32xf32>
    %a = arith.mulf %mu, %m_s_1 : f32
    %b = arith.addf %a, %avg_rs_1 : f32
    %a_1 = arith.mulf %lr, %b : f32
    %b_1 = arith.subf %p_s_1, %a_1 : f32
    memref.store %b_1, %p1_s_out[%i0] : memref<32xf32>
    memref.store %b, %m1_s_out[%i0] : memref<32xf32>
  }

// -----

// A fused tile operator falls back to messages only from the shared transport.
// CHECK: 'rt.matmul_all_reduce' op 'else messages' belongs to 'transport shared'
  dist.mesh @world shape = [2]
  func.func @else_without_shared(%x: memref<4x32xf32>, %w: memref<32x64xf32>) -> memref<4x64xf32> attributes {rt.dist_type = (!dist.tensor<4x64xf32, @world, [sliced<1>]>, !dist.tensor<64x64xf32, @world, [sliced<0>]>) -> !dist.tensor<4x64xf32, @world, [replicated]>} {
    %s = rt.stream 0 : !rt.stream
    %0 = rt.comm @world axes [0] : !rt.comm
    %s1 = rt.stream 1 : !rt.stream
    %y = rt.alloc : () -> memref<4x64xf32>
    %y_red = rt.alloc : () -> memref<2x4x32xf32>
    rt.matmul_all_reduce sum %x, %w, %y, %y_red, %0, %s, %s1 dim 1 tiles 4 order remote_first transport messages else messages : (memref<4x32xf32>, memref<32x64xf32>, memref<4x64xf32>, memref<2x4x32xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
    rt.stream_sync %s : !rt.stream -> ()
    rt.stream_sync %s1 : !rt.stream -> ()
    func.return %y : memref<4x64xf32>
  }
