// CoCoNet schedule ol(MM,fuse(RS-C-AG)) of examples/megatron_attention.mlir, produced by
//   distir-opt examples/megatron_attention.mlir -p 'split-allreduce{dim=0 targets=sum},reorder-allgather{targets=sum_ag},fuse-allreduce{targets=sum_rs},overlap{order=ring targets=layer,out}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @self_attention(%w: !dist.tensor<3072x3072xf16, @world, [sliced<0>]>, %b: !dist.tensor<3072xf16, @world, [replicated]>, %in: !dist.tensor<8x1024x3072xf16, @world, [sliced<2>]>, %r: !dist.tensor<8x1024x3072xf16, @world, [replicated]>) -> !dist.tensor<8x1024x3072xf16, @world, [replicated]> {
    %out = coll.overlap chunks 4 order ring -> !dist.tensor<8x1024x3072xf16, @world, [replicated]> {
      %layer = dist.matmul %in, %w : (!dist.tensor<8x1024x3072xf16, @world, [sliced<2>]>, !dist.tensor<3072x3072xf16, @world, [sliced<0>]>) -> !dist.tensor<8x1024x3072xf16, @world, [local]>
      %out_1 = coll.fused_all_reduce sum %layer dim 0 : !dist.tensor<8x1024x3072xf16, @world, [local]> -> !dist.tensor<8x1024x3072xf16, @world, [replicated]> {
      ^bb0(%sum_rs: !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]>):
        %biased_s = dist.map(%sum_rs, %b) : (!dist.tensor<8x1024x3072xf16, @world, [sliced<0>]>, !dist.tensor<3072xf16, @world, [replicated]>) -> !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]> {
        ^bb0(%x: f16, %y: f16):
          %z = arith.addf %x, %y : f16
          dist.yield %z : f16
        }
        %drop_s = dist.dropout %biased_s p 0.1 seed 1234 : !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]> -> !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]>
        %r_s = dist.take_slice %r dim 0 : !dist.tensor<8x1024x3072xf16, @world, [replicated]> -> !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]>
        %out_s = dist.map(%drop_s, %r_s) : (!dist.tensor<8x1024x3072xf16, @world, [sliced<0>]>, !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]>) -> !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]> {
        ^bb0(%x_1: f16, %y_1: f16):
          %z_1 = arith.addf %x_1, %y_1 : f16
          dist.yield %z_1 : f16
        }
        coll.yield %out_s : !dist.tensor<8x1024x3072xf16, @world, [sliced<0>]>
      }
      coll.yield %out_1 : !dist.tensor<8x1024x3072xf16, @world, [replicated]>
    }
    func.return %out : !dist.tensor<8x1024x3072xf16, @world, [replicated]>
  }
}
