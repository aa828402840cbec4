// CoCoNet schedule fused(Emb+A2A) of examples/dlrm_embedding.mlir, produced by
//   distir-opt examples/dlrm_embedding.mlir -p 'overlap{order=remote_first granularity=tile targets=mine}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @embeddings(%tables: !dist.tensor<8x4096x256xf32, @world, [sliced<0>]>, %indices: !dist.tensor<8x1024x8xi32, @world, [sliced<0>]>) -> !dist.tensor<1024x256xf32, @world, [sliced<0>]> {
    %mine = coll.overlap chunks 4 order remote_first granularity tile -> !dist.tensor<8x1024x256xf32, @world, [sliced<1>]> {
      %emb = dist.embedding_bag %tables, %indices : (!dist.tensor<8x4096x256xf32, @world, [sliced<0>]>, !dist.tensor<8x1024x8xi32, @world, [sliced<0>]>) -> !dist.tensor<8x1024x256xf32, @world, [sliced<0>]>
      %mine_1 = coll.all_to_all %emb dim 1 : !dist.tensor<8x1024x256xf32, @world, [sliced<0>]> -> !dist.tensor<8x1024x256xf32, @world, [sliced<1>]>
      coll.yield %mine_1 : !dist.tensor<8x1024x256xf32, @world, [sliced<1>]>
    }
    %inter = dist.reduce_tensor sum %mine dims [0] : !dist.tensor<8x1024x256xf32, @world, [sliced<1>]> -> !dist.tensor<1024x256xf32, @world, [sliced<0>]>
    func.return %inter : !dist.tensor<1024x256xf32, @world, [sliced<0>]>
  }
}
