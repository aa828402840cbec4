// A training step of a two-layer MLP written for one device: forward, the gradient of
// the squared error against %t, and SGD on both weights (written in place).
dist.mesh @world shape = [1]

func.func @step(%x: !dist.tensor<16x32xf32, @world, [replicated]>,
                %t: !dist.tensor<16x32xf32, @world, [replicated]>,
                %w1: !dist.tensor<32x64xf32, @world, [replicated]>,
                %w2: !dist.tensor<64x32xf32, @world, [replicated]>,
                %lr: f32)
    -> (!dist.tensor<64x32xf32, @world, [replicated]> {dist.inplace = 3 : i64},
        !dist.tensor<32x64xf32, @world, [replicated]> {dist.inplace = 2 : i64},
        !dist.tensor<f32, @world, [replicated]>) {
  %h = dist.matmul %x, %w1 : (!dist.tensor<16x32xf32, @world, [replicated]>, !dist.tensor<32x64xf32, @world, [replicated]>) -> !dist.tensor<16x64xf32, @world, [replicated]>
  %a = dist.map(%h) : (!dist.tensor<16x64xf32, @world, [replicated]>) -> !dist.tensor<16x64xf32, @world, [replicated]> {
  ^bb0(%hi: f32):
    %th = math.tanh %hi : f32
    dist.yield %th : f32
  }
  %y = dist.matmul %a, %w2 : (!dist.tensor<16x64xf32, @world, [replicated]>, !dist.tensor<64x32xf32, @world, [replicated]>) -> !dist.tensor<16x32xf32, @world, [replicated]>
  %dy = dist.map(%y, %t) : (!dist.tensor<16x32xf32, @world, [replicated]>, !dist.tensor<16x32xf32, @world, [replicated]>) -> !dist.tensor<16x32xf32, @world, [replicated]> {
  ^bb0(%yi: f32, %ti: f32):
    %d = arith.subf %yi, %ti : f32
    dist.yield %d : f32
  }
  %sq = dist.map(%dy) : (!dist.tensor<16x32xf32, @world, [replicated]>) -> !dist.tensor<16x32xf32, @world, [replicated]> {
  ^bb0(%di: f32):
    %s = arith.mulf %di, %di : f32
    dist.yield %s : f32
  }
  %loss = dist.reduce_tensor sum %sq dims [0, 1] : !dist.tensor<16x32xf32, @world, [replicated]> -> !dist.tensor<f32, @world, [replicated]>
  %at = dist.transpose %a perm [1, 0] : !dist.tensor<16x64xf32, @world, [replicated]> -> !dist.tensor<64x16xf32, @world, [replicated]>
  %dw2 = dist.matmul %at, %dy : (!dist.tensor<64x16xf32, @world, [replicated]>, !dist.tensor<16x32xf32, @world, [replicated]>) -> !dist.tensor<64x32xf32, @world, [replicated]>
  %w2t = dist.transpose %w2 perm [1, 0] : !dist.tensor<64x32xf32, @world, [replicated]> -> !dist.tensor<32x64xf32, @world, [replicated]>
  %da = dist.matmul %dy, %w2t : (!dist.tensor<16x32xf32, @world, [replicated]>, !dist.tensor<32x64xf32, @world, [replicated]>) -> !dist.tensor<16x64xf32, @world, [replicated]>
  %dh = dist.map(%da, %a) : (!dist.tensor<16x64xf32, @world, [replicated]>, !dist.tensor<16x64xf32, @world, [replicated]>) -> !dist.tensor<16x64xf32, @world, [replicated]> {
  ^bb0(%gi: f32, %ai: f32):
    %one = arith.constant 1.0 : f32
    %a2 = arith.mulf %ai, %ai : f32
    %d = arith.subf %one, %a2 : f32
    %r = arith.mulf %gi, %d : f32
    dist.yield %r : f32
  }
  %xt = dist.transpose %x perm [1, 0] : !dist.tensor<16x32xf32, @world, [replicated]> -> !dist.tensor<32x16xf32, @world, [replicated]>
  %dw1 = dist.matmul %xt, %dh : (!dist.tensor<32x16xf32, @world, [replicated]>, !dist.tensor<16x64xf32, @world, [replicated]>) -> !dist.tensor<32x64xf32, @world, [replicated]>
  %w2n = dist.map(%w2, %dw2, %lr) : (!dist.tensor<64x32xf32, @world, [replicated]>, !dist.tensor<64x32xf32, @world, [replicated]>, f32) -> !dist.tensor<64x32xf32, @world, [replicated]> {
  ^bb0(%wi: f32, %gi: f32, %l: f32):
    %u = arith.mulf %l, %gi : f32
    %r = arith.subf %wi, %u : f32
    dist.yield %r : f32
  }
  %w1n = dist.map(%w1, %dw1, %lr) : (!dist.tensor<32x64xf32, @world, [replicated]>, !dist.tensor<32x64xf32, @world, [replicated]>, f32) -> !dist.tensor<32x64xf32, @world, [replicated]> {
  ^bb0(%wi: f32, %gi: f32, %l: f32):
    %u = arith.mulf %l, %gi : f32
    %r = arith.subf %wi, %u : f32
    dist.yield %r : f32
  }
  func.return %w2n, %w1n, %loss : !dist.tensor<64x32xf32, @world, [replicated]>, !dist.tensor<32x64xf32, @world, [replicated]>, !dist.tensor<f32, @world, [replicated]>
}
