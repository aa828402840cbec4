// A mixture-of-experts layer (the fused-operator paper's "GEMM + All-to-All"): every rank
// holds its own tokens for every expert (capacity C per expert; the token dim is sliced)
// and one expert's weights per rank (the expert dim is sliced). An All-to-All dispatches
// the tokens to their experts, a batched GEMM + GeLU computes the experts, and a second
// All-to-All returns the results to the ranks owning the tokens, which combine them.
// E = 8 experts, C = 256 tokens per expert, H = 512, F = 1024.
dist.mesh @world shape = [?]

func.func @moe(%tokens: !dist.tensor<8x256x512xf32, @world, [sliced<1>]>,
               %w: !dist.tensor<8x512x1024xf32, @world, [sliced<0>]>,
               %gate: !dist.tensor<8x256x1xf32, @world, [sliced<1>]>)
    -> !dist.tensor<256x1024xf32, @world, [sliced<0>]> {
  %disp = coll.all_to_all %tokens dim 0 : !dist.tensor<8x256x512xf32, @world, [sliced<1>]> -> !dist.tensor<8x256x512xf32, @world, [sliced<0>]>
  %h = dist.matmul %disp, %w : (!dist.tensor<8x256x512xf32, @world, [sliced<0>]>, !dist.tensor<8x512x1024xf32, @world, [sliced<0>]>) -> !dist.tensor<8x256x1024xf32, @world, [sliced<0>]>
  %act = dist.map(%h) : (!dist.tensor<8x256x1024xf32, @world, [sliced<0>]>) -> !dist.tensor<8x256x1024xf32, @world, [sliced<0>]> {
  ^bb0(%z: f32):
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %z, %zero : f32
    dist.yield %r : f32
  }
  %back = coll.all_to_all %act dim 1 : !dist.tensor<8x256x1024xf32, @world, [sliced<0>]> -> !dist.tensor<8x256x1024xf32, @world, [sliced<1>]>
  %weighted = dist.map(%back, %gate) : (!dist.tensor<8x256x1024xf32, @world, [sliced<1>]>, !dist.tensor<8x256x1xf32, @world, [sliced<1>]>) -> !dist.tensor<8x256x1024xf32, @world, [sliced<1>]> {
  ^bb0(%yi: f32, %gi: f32):
    %r = arith.mulf %yi, %gi : f32
    dist.yield %r : f32
  }
  %out = dist.reduce_tensor sum %weighted dims [0] : !dist.tensor<8x256x1024xf32, @world, [sliced<1>]> -> !dist.tensor<256x1024xf32, @world, [sliced<0>]>
  func.return %out : !dist.tensor<256x1024xf32, @world, [sliced<0>]>
}
