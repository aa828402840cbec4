// DLRM's sparse part and top MLP for one device (bench/plan.py's dlrm at small sizes):
// 16 embedding tables of 128 rows and dim 16, 2 lookups per sample, batch 64, pooled by
// sum; their sum (the interaction); the top MLP 16-32-16 with a ReLU.
dist.mesh @world shape = [1]

func.func @dlrm(%tables: !dist.tensor<16x128x16xf32, @world, [replicated]>, %indices: !dist.tensor<16x64x2xi32, @world, [replicated]>, %w1: !dist.tensor<16x32xf32, @world, [replicated]>, %w2: !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<64x16xf32, @world, [replicated]> {
  %emb = dist.embedding_bag %tables, %indices mode sum : (!dist.tensor<16x128x16xf32, @world, [replicated]>, !dist.tensor<16x64x2xi32, @world, [replicated]>) -> !dist.tensor<16x64x16xf32, @world, [replicated]>
  %x = dist.reduce_tensor sum %emb dims [0] : !dist.tensor<16x64x16xf32, @world, [replicated]> -> !dist.tensor<64x16xf32, @world, [replicated]>
  %h = dist.matmul %x, %w1 : (!dist.tensor<64x16xf32, @world, [replicated]>, !dist.tensor<16x32xf32, @world, [replicated]>) -> !dist.tensor<64x32xf32, @world, [replicated]>
  %a = dist.map(%h) : (!dist.tensor<64x32xf32, @world, [replicated]>) -> !dist.tensor<64x32xf32, @world, [replicated]> {
  ^bb0(%hi: f32):
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %hi, %zero : f32
    dist.yield %r : f32
  }
  %y = dist.matmul %a, %w2 : (!dist.tensor<64x32xf32, @world, [replicated]>, !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<64x16xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64x16xf32, @world, [replicated]>
}
