// RUN: not distir-opt %s -p 'reorder-allgather{targets=nope}' 2>&1 | filecheck %s --check-prefix=NONE
// RUN: not distir-opt %s -p 'reorder-allgather{targets=bad}' 2>&1 | filecheck %s --check-prefix=CONTRACTED
// RUN: not distir-opt %s -p 'reorder-allgather{targets=plain}' 2>&1 | filecheck %s --check-prefix=NOAG
// RUN: not distir-opt %s -p 'reorder-allgather{targets=wide}' 2>&1 | filecheck %s --check-prefix=BROADCAST

// NONE: 'reorder-allgather' pass: target %nope names no value (all_gather results here: %g, %h)
// CONTRACTED: 'reorder-allgather' pass: target %bad: 'dist.matmul' cannot be reordered with coll.all_gather %g: the matmul rule gives no placement that coll.all_gather turns back into [replicated]
// NOAG: 'reorder-allgather' pass: target %plain: 'dist.map' has no coll.all_gather operand to reorder with
// BROADCAST: 'reorder-allgather' pass: target %wide: 'dist.map' cannot be reordered with coll.all_gather %h: its result does not keep the gathered dim 0 of %h (broadcast)

dist.mesh @world shape = [4]
dist.mesh @one shape = [1]

func.func @f(%x: !dist.tensor<16x8xf32, @world, [sliced<1>]>, %w: !dist.tensor<8x4xf32, @world, [replicated]>) -> (!dist.tensor<16x4xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) {
  %g = coll.all_gather %x : !dist.tensor<16x8xf32, @world, [sliced<1>]> -> !dist.tensor<16x8xf32, @world, [replicated]>
  %bad = dist.matmul %g, %w : (!dist.tensor<16x8xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<16x4xf32, @world, [replicated]>
  %plain = dist.map(%w) : (!dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  func.return %bad, %plain : !dist.tensor<16x4xf32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>
}

// On one rank a dim of size 1 can be sliced; a map broadcasting it cannot be sliced.
func.func @g(%b: !dist.tensor<1x8xf32, @one, [sliced<0>]>, %y: !dist.tensor<4x8xf32, @one, [replicated]>) -> !dist.tensor<4x8xf32, @one, [replicated]> {
  %h = coll.all_gather %b : !dist.tensor<1x8xf32, @one, [sliced<0>]> -> !dist.tensor<1x8xf32, @one, [replicated]>
  %wide = dist.map(%y, %h) : (!dist.tensor<4x8xf32, @one, [replicated]>, !dist.tensor<1x8xf32, @one, [replicated]>) -> !dist.tensor<4x8xf32, @one, [replicated]> {
  ^bb0(%a: f32, %c: f32):
    %p = arith.addf %a, %c : f32
    dist.yield %p : f32
  }
  func.return %wide : !dist.tensor<4x8xf32, @one, [replicated]>
}
