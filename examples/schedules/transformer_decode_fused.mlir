// CoCoNet schedule fused(GEMV+AR) of examples/transformer_decode.mlir, produced by
//   distir-opt examples/transformer_decode.mlir -p 'overlap{order=remote_first granularity=tile targets=sum}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @mlp_tail(%act: !dist.tensor<4x8192xf32, @world, [sliced<1>]>, %w2: !dist.tensor<8192x2048xf32, @world, [sliced<0>]>, %b2: !dist.tensor<2048xf32, @world, [replicated]>, %x: !dist.tensor<4x2048xf32, @world, [replicated]>) -> !dist.tensor<4x2048xf32, @world, [replicated]> {
    %sum = coll.overlap chunks 4 order remote_first granularity tile -> !dist.tensor<4x2048xf32, @world, [replicated]> {
      %o = dist.matmul %act, %w2 : (!dist.tensor<4x8192xf32, @world, [sliced<1>]>, !dist.tensor<8192x2048xf32, @world, [sliced<0>]>) -> !dist.tensor<4x2048xf32, @world, [local]>
      %sum_1 = coll.all_reduce sum %o : !dist.tensor<4x2048xf32, @world, [local]> -> !dist.tensor<4x2048xf32, @world, [replicated]>
      coll.yield %sum_1 : !dist.tensor<4x2048xf32, @world, [replicated]>
    }
    %out = dist.map(%sum, %b2, %x) : (!dist.tensor<4x2048xf32, @world, [replicated]>, !dist.tensor<2048xf32, @world, [replicated]>, !dist.tensor<4x2048xf32, @world, [replicated]>) -> !dist.tensor<4x2048xf32, @world, [replicated]> {
    ^bb0(%si: f32, %bi: f32, %xi: f32):
      %y = arith.addf %si, %bi : f32
      %r = arith.addf %y, %xi : f32
      dist.yield %r : f32
    }
    func.return %out : !dist.tensor<4x2048xf32, @world, [replicated]>
  }
}
