// CoCoNet schedule ol(MM,fuse(RS-C-AG)) of examples/megatron_mlp.mlir, produced by
//   distir-opt examples/megatron_mlp.mlir -p 'split-allreduce{dim=1 targets=sum},reorder-allgather{targets=sum_ag},fuse-allreduce{targets=sum_rs},overlap{order=ring targets=o,out}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @mlp(%x: !dist.tensor<4x512x1024xf32, @world, [replicated]>, %w1: !dist.tensor<1024x4096xf32, @world, [sliced<1>]>, %b1: !dist.tensor<4096xf32, @world, [sliced<0>]>, %w2: !dist.tensor<4096x1024xf32, @world, [sliced<0>]>, %b2: !dist.tensor<1024xf32, @world, [replicated]>) -> !dist.tensor<4x512x1024xf32, @world, [replicated]> {
    %h = dist.matmul %x, %w1 : (!dist.tensor<4x512x1024xf32, @world, [replicated]>, !dist.tensor<1024x4096xf32, @world, [sliced<1>]>) -> !dist.tensor<4x512x4096xf32, @world, [sliced<2>]>
    %a = dist.map(%h, %b1) : (!dist.tensor<4x512x4096xf32, @world, [sliced<2>]>, !dist.tensor<4096xf32, @world, [sliced<0>]>) -> !dist.tensor<4x512x4096xf32, @world, [sliced<2>]> {
    ^bb0(%hi: f32, %bi: f32):
      %z = arith.addf %hi, %bi : f32
      %half = arith.constant 5.000000e-01 : f32
      %one = arith.constant 1.000000e+00 : f32
      %k = arith.constant 0.797884583 : f32
      %c = arith.constant 4.471500e-02 : f32
      %z2 = arith.mulf %z, %z : f32
      %z3 = arith.mulf %z2, %z : f32
      %cz3 = arith.mulf %c, %z3 : f32
      %in = arith.addf %z, %cz3 : f32
      %arg = arith.mulf %k, %in : f32
      %th = math.tanh %arg : f32
      %opt = arith.addf %one, %th : f32
      %hz = arith.mulf %half, %z : f32
      %gelu = arith.mulf %hz, %opt : f32
      dist.yield %gelu : f32
    }
    %out = coll.overlap chunks 4 order ring -> !dist.tensor<4x512x1024xf32, @world, [replicated]> {
      %o = dist.matmul %a, %w2 : (!dist.tensor<4x512x4096xf32, @world, [sliced<2>]>, !dist.tensor<4096x1024xf32, @world, [sliced<0>]>) -> !dist.tensor<4x512x1024xf32, @world, [local]>
      %out_1 = coll.fused_all_reduce sum %o dim 1 : !dist.tensor<4x512x1024xf32, @world, [local]> -> !dist.tensor<4x512x1024xf32, @world, [replicated]> {
      ^bb0(%sum_rs: !dist.tensor<4x512x1024xf32, @world, [sliced<1>]>):
        %biased_s = dist.map(%sum_rs, %b2) : (!dist.tensor<4x512x1024xf32, @world, [sliced<1>]>, !dist.tensor<1024xf32, @world, [replicated]>) -> !dist.tensor<4x512x1024xf32, @world, [sliced<1>]> {
        ^bb0(%si: f32, %bi_1: f32):
          %r = arith.addf %si, %bi_1 : f32
          dist.yield %r : f32
        }
        %drop_s = dist.dropout %biased_s p 0.1 seed 42 : !dist.tensor<4x512x1024xf32, @world, [sliced<1>]> -> !dist.tensor<4x512x1024xf32, @world, [sliced<1>]>
        %x_s = dist.take_slice %x dim 1 : !dist.tensor<4x512x1024xf32, @world, [replicated]> -> !dist.tensor<4x512x1024xf32, @world, [sliced<1>]>
        %out_s = dist.map(%drop_s, %x_s) : (!dist.tensor<4x512x1024xf32, @world, [sliced<1>]>, !dist.tensor<4x512x1024xf32, @world, [sliced<1>]>) -> !dist.tensor<4x512x1024xf32, @world, [sliced<1>]> {
        ^bb0(%di: f32, %xi: f32):
          %r_1 = arith.addf %di, %xi : f32
          dist.yield %r_1 : f32
        }
        coll.yield %out_s : !dist.tensor<4x512x1024xf32, @world, [sliced<1>]>
      }
      coll.yield %out_1 : !dist.tensor<4x512x1024xf32, @world, [replicated]>
    }
    func.return %out : !dist.tensor<4x512x1024xf32, @world, [replicated]>
  }
}
