// Megatron-LM model-parallel MLP block ("MM-AR-C" on the second GEMM): the first weight is
// sliced on its output columns, so h = X W1 is sliced on its last dim and GeLU(h + b1)
// runs on slices; the second weight is sliced on its rows (the contracted dim), so
// o = a W2 gives partial sums (local) that an AllReduce sums; bias, dropout and the
// residual follow. Shapes [B,S,H] x [H,4H] then [B,S,4H] x [4H,H] with B=4, S=512, H=1024.
dist.mesh @world shape = [?]

func.func @mlp(%x: !dist.tensor<4x512x1024xf32, @world, [replicated]>,
               %w1: !dist.tensor<1024x4096xf32, @world, [sliced<1>]>,
               %b1: !dist.tensor<4096xf32, @world, [sliced<0>]>,
               %w2: !dist.tensor<4096x1024xf32, @world, [sliced<0>]>,
               %b2: !dist.tensor<1024xf32, @world, [replicated]>)
    -> !dist.tensor<4x512x1024xf32, @world, [replicated]> {
  %h = dist.matmul %x, %w1 : (!dist.tensor<4x512x1024xf32, @world, [replicated]>, !dist.tensor<1024x4096xf32, @world, [sliced<1>]>) -> !dist.tensor<4x512x4096xf32, @world, [sliced<2>]>
  %a = dist.map(%h, %b1) : (!dist.tensor<4x512x4096xf32, @world, [sliced<2>]>, !dist.tensor<4096xf32, @world, [sliced<0>]>) -> !dist.tensor<4x512x4096xf32, @world, [sliced<2>]> {
  ^bb0(%hi: f32, %bi: f32):
    // GeLU, tanh approximation: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))
    %z = arith.addf %hi, %bi : f32
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %k = arith.constant 0.7978845608 : f32
    %c = arith.constant 0.044715 : f32
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
  %o = dist.matmul %a, %w2 : (!dist.tensor<4x512x4096xf32, @world, [sliced<2>]>, !dist.tensor<4096x1024xf32, @world, [sliced<0>]>) -> !dist.tensor<4x512x1024xf32, @world, [local]>
  %sum = coll.all_reduce sum %o : !dist.tensor<4x512x1024xf32, @world, [local]> -> !dist.tensor<4x512x1024xf32, @world, [replicated]>
  %biased = dist.map(%sum, %b2) : (!dist.tensor<4x512x1024xf32, @world, [replicated]>, !dist.tensor<1024xf32, @world, [replicated]>) -> !dist.tensor<4x512x1024xf32, @world, [replicated]> {
  ^bb0(%si: f32, %bi: f32):
    %r = arith.addf %si, %bi : f32
    dist.yield %r : f32
  }
  %drop = dist.dropout %biased p 0.1 seed 42 : !dist.tensor<4x512x1024xf32, @world, [replicated]> -> !dist.tensor<4x512x1024xf32, @world, [replicated]>
  %out = dist.map(%drop, %x) : (!dist.tensor<4x512x1024xf32, @world, [replicated]>, !dist.tensor<4x512x1024xf32, @world, [replicated]>) -> !dist.tensor<4x512x1024xf32, @world, [replicated]> {
  ^bb0(%di: f32, %xi: f32):
    %r = arith.addf %di, %xi : f32
    dist.yield %r : f32
  }
  func.return %out : !dist.tensor<4x512x1024xf32, @world, [replicated]>
}
