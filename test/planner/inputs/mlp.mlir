// The Megatron MLP block of examples/megatron_mlp.mlir written for one device (every
// value replicated on a one-rank mesh, no collective), at small sizes.
dist.mesh @world shape = [1]

func.func @mlp(%x: !dist.tensor<8x16x32xf32, @world, [replicated]>,
               %w1: !dist.tensor<32x128xf32, @world, [replicated]>,
               %b1: !dist.tensor<128xf32, @world, [replicated]>,
               %w2: !dist.tensor<128x32xf32, @world, [replicated]>,
               %b2: !dist.tensor<32xf32, @world, [replicated]>)
    -> !dist.tensor<8x16x32xf32, @world, [replicated]> {
  %h = dist.matmul %x, %w1 : (!dist.tensor<8x16x32xf32, @world, [replicated]>, !dist.tensor<32x128xf32, @world, [replicated]>) -> !dist.tensor<8x16x128xf32, @world, [replicated]>
  %a = dist.map(%h, %b1) : (!dist.tensor<8x16x128xf32, @world, [replicated]>, !dist.tensor<128xf32, @world, [replicated]>) -> !dist.tensor<8x16x128xf32, @world, [replicated]> {
  ^bb0(%hi: f32, %bi: f32):
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
  %o = dist.matmul %a, %w2 : (!dist.tensor<8x16x128xf32, @world, [replicated]>, !dist.tensor<128x32xf32, @world, [replicated]>) -> !dist.tensor<8x16x32xf32, @world, [replicated]>
  %out = dist.map(%o, %b2, %x) : (!dist.tensor<8x16x32xf32, @world, [replicated]>, !dist.tensor<32xf32, @world, [replicated]>, !dist.tensor<8x16x32xf32, @world, [replicated]>) -> !dist.tensor<8x16x32xf32, @world, [replicated]> {
  ^bb0(%oi: f32, %bi: f32, %xi: f32):
    %s = arith.addf %oi, %bi : f32
    %r = arith.addf %s, %xi : f32
    dist.yield %r : f32
  }
  func.return %out : !dist.tensor<8x16x32xf32, @world, [replicated]>
}
