// DLRM's model-parallel embeddings followed by an All-to-All (the fused-operator paper's
// "embedding + All-to-All"): each rank holds some of the 8 embedding tables (the table
// dim is sliced) and looks up every sample of the batch in them; the All-to-All turns
// "my tables, whole batch" into "whole tables, my batch slice", which feeds the
// data-parallel interaction (here: the sum over the tables).
dist.mesh @world shape = [?]

func.func @embeddings(%tables: !dist.tensor<8x4096x64xf32, @world, [sliced<0>]>,
                      %indices: !dist.tensor<8x512x4xi32, @world, [sliced<0>]>)
    -> !dist.tensor<512x64xf32, @world, [sliced<0>]> {
  %emb = dist.embedding_bag %tables, %indices mode sum : (!dist.tensor<8x4096x64xf32, @world, [sliced<0>]>, !dist.tensor<8x512x4xi32, @world, [sliced<0>]>) -> !dist.tensor<8x512x64xf32, @world, [sliced<0>]>
  %mine = coll.all_to_all %emb dim 1 : !dist.tensor<8x512x64xf32, @world, [sliced<0>]> -> !dist.tensor<8x512x64xf32, @world, [sliced<1>]>
  %inter = dist.reduce_tensor sum %mine dims [0] : !dist.tensor<8x512x64xf32, @world, [sliced<1>]> -> !dist.tensor<512x64xf32, @world, [sliced<0>]>
  func.return %inter : !dist.tensor<512x64xf32, @world, [sliced<0>]>
}
