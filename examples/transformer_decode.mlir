// The MLP tail of a Transformer decode step (the fused-operator paper's "GEMV +
// AllReduce"). In the token phase a few tokens (T = 4) go through the feed-forward
// block; Megatron-LM slices the second weight W2 [4H, H] by rows, so each rank
// multiplies its slice of the GeLU activations [T, 4H/n] by its rows of W2 (a GEMV per
// token): partial sums [T, H] that an AllReduce adds; bias and residual follow.
// H = 2048, 4H = 8192, f32. Fused:
//   distir-opt examples/transformer_decode.mlir -p 'overlap{order=remote_first granularity=tile}'
dist.mesh @world shape = [?]

func.func @mlp_tail(%act: !dist.tensor<4x8192xf32, @world, [sliced<1>]>,
                    %w2: !dist.tensor<8192x2048xf32, @world, [sliced<0>]>,
                    %b2: !dist.tensor<2048xf32, @world, [replicated]>,
                    %x: !dist.tensor<4x2048xf32, @world, [replicated]>)
    -> !dist.tensor<4x2048xf32, @world, [replicated]> {
  %o = dist.matmul %act, %w2 : (!dist.tensor<4x8192xf32, @world, [sliced<1>]>, !dist.tensor<8192x2048xf32, @world, [sliced<0>]>) -> !dist.tensor<4x2048xf32, @world, [local]>
  %sum = coll.all_reduce sum %o : !dist.tensor<4x2048xf32, @world, [local]> -> !dist.tensor<4x2048xf32, @world, [replicated]>
  %out = dist.map(%sum, %b2, %x) : (!dist.tensor<4x2048xf32, @world, [replicated]>, !dist.tensor<2048xf32, @world, [replicated]>, !dist.tensor<4x2048xf32, @world, [replicated]>) -> !dist.tensor<4x2048xf32, @world, [replicated]> {
  ^bb0(%si: f32, %bi: f32, %xi: f32):
    %y = arith.addf %si, %bi : f32
    %r = arith.addf %y, %xi : f32
    dist.yield %r : f32
  }
  func.return %out : !dist.tensor<4x2048xf32, @world, [replicated]>
}
