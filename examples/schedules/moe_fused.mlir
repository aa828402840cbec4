// CoCoNet schedule fused(GEMM+A2A) of examples/moe.mlir, produced by
//   distir-opt examples/moe.mlir -p 'overlap{order=remote_first granularity=tile targets=back}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @moe(%tokens: !dist.tensor<8x256x512xf32, @world, [sliced<1>]>, %w: !dist.tensor<8x512x1024xf32, @world, [sliced<0>]>, %gate: !dist.tensor<8x256x1xf32, @world, [sliced<1>]>) -> !dist.tensor<256x1024xf32, @world, [sliced<0>]> {
    %disp = coll.all_to_all %tokens dim 0 : !dist.tensor<8x256x512xf32, @world, [sliced<1>]> -> !dist.tensor<8x256x512xf32, @world, [sliced<0>]>
    %back = coll.overlap chunks 4 order remote_first granularity tile -> !dist.tensor<8x256x1024xf32, @world, [sliced<1>]> {
      %h = dist.matmul %disp, %w : (!dist.tensor<8x256x512xf32, @world, [sliced<0>]>, !dist.tensor<8x512x1024xf32, @world, [sliced<0>]>) -> !dist.tensor<8x256x1024xf32, @world, [sliced<0>]>
      %act = dist.map(%h) : (!dist.tensor<8x256x1024xf32, @world, [sliced<0>]>) -> !dist.tensor<8x256x1024xf32, @world, [sliced<0>]> {
      ^bb0(%z: f32):
        %zero = arith.constant 0.000000e+00 : f32
        %r = arith.maximumf %z, %zero : f32
        dist.yield %r : f32
      }
      %back_1 = coll.all_to_all %act dim 1 : !dist.tensor<8x256x1024xf32, @world, [sliced<0>]> -> !dist.tensor<8x256x1024xf32, @world, [sliced<1>]>
      coll.yield %back_1 : !dist.tensor<8x256x1024xf32, @world, [sliced<1>]>
    }
    %weighted = dist.map(%back, %gate) : (!dist.tensor<8x256x1024xf32, @world, [sliced<1>]>, !dist.tensor<8x256x1xf32, @world, [sliced<1>]>) -> !dist.tensor<8x256x1024xf32, @world, [sliced<1>]> {
    ^bb0(%yi: f32, %gi: f32):
      %r_1 = arith.mulf %yi, %gi : f32
      dist.yield %r_1 : f32
    }
    %out = dist.reduce_tensor sum %weighted dims [0] : !dist.tensor<8x256x1024xf32, @world, [sliced<1>]> -> !dist.tensor<256x1024xf32, @world, [sliced<0>]>
    func.return %out : !dist.tensor<256x1024xf32, @world, [sliced<0>]>
  }
}
