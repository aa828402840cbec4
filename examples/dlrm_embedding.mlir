// DLRM's model-parallel embeddings followed by an All-to-All (the fused-operator paper's
// "embedding + All-to-All"): each rank holds some of the 8 embedding tables (the table
// dim is sliced) and pools every sample of the global batch in them; the All-to-All
// turns "my tables, whole batch" into "whole tables, my batch slice", which feeds the
// data-parallel interaction (here: the sum over the tables). The paper's embedding
// dim (256) and a global batch of 1024 with 8 lookups per bag, scaled down in tables
// (8) and rows (4096) for 2 cores (bench/fused_ops.py runs the paper's larger
// configurations). Fused:
//   distir-opt examples/dlrm_embedding.mlir -p 'overlap{order=remote_first granularity=tile}'
dist.mesh @world shape = [?]

func.func @embeddings(%tables: !dist.tensor<8x4096x256xf32, @world, [sliced<0>]>,
                      %indices: !dist.tensor<8x1024x8xi32, @world, [sliced<0>]>)
    -> !dist.tensor<1024x256xf32, @world, [sliced<0>]> {
  %emb = dist.embedding_bag %tables, %indices mode sum : (!dist.tensor<8x4096x256xf32, @world, [sliced<0>]>, !dist.tensor<8x1024x8xi32, @world, [sliced<0>]>) -> !dist.tensor<8x1024x256xf32, @world, [sliced<0>]>
  %mine = coll.all_to_all %emb dim 1 : !dist.tensor<8x1024x256xf32, @world, [sliced<0>]> -> !dist.tensor<8x1024x256xf32, @world, [sliced<1>]>
  %inter = dist.reduce_tensor sum %mine dims [0] : !dist.tensor<8x1024x256xf32, @world, [sliced<1>]> -> !dist.tensor<1024x256xf32, @world, [sliced<0>]>
  func.return %inter : !dist.tensor<1024x256xf32, @world, [sliced<0>]>
}
