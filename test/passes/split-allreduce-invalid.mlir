// RUN: not distir-opt %s -p 'split-allreduce{targets=nothing}' 2>&1 | filecheck %s --check-prefix=NONE
// RUN: not distir-opt %s -p 'split-allreduce{targets=y}' 2>&1 | filecheck %s --check-prefix=NOTAR
// RUN: not distir-opt %s -p 'split-allreduce{targets=n}' 2>&1 | filecheck %s --check-prefix=SCALAR
// RUN: not distir-opt %s -p 'split-allreduce{strategy=ring}' 2>&1 | filecheck %s --check-prefix=STRATEGY
// RUN: not distir-opt %s -p 'split-allreduce{strategy=reduce-bcast root=4 targets=odd}' 2>&1 | filecheck %s --check-prefix=ROOT

// NONE: 'split-allreduce' pass: target %nothing names no value (all_reduce results here: %flat, %n, %odd, %sum)
// NOTAR: 'split-allreduce' pass: target %y: is not the result of a coll.all_reduce (it comes from 'dist.map')
// SCALAR: 'split-allreduce' pass: target %n: cannot split with strategy rs-ag: a 0-d all_reduce has no dim to reduce-scatter along
// STRATEGY: 'split-allreduce' pass: strategy must be one of rs-ag, reduce-bcast, got 'ring'
// ROOT: 'split-allreduce' pass: target %odd: cannot split with strategy reduce-bcast: root 4 is out of range for a group of 4 ranks

dist.mesh @world shape = [4]

func.func @f(%x: !dist.tensor<64xf32, @world, [local]>, %z: !dist.tensor<6xf32, @world, [local]>, %s: !dist.tensor<f32, @world, [local]>, %m: !dist.tensor<6x3xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<6xf32, @world, [replicated]>, !dist.tensor<f32, @world, [replicated]>, !dist.tensor<6x3xf32, @world, [replicated]>) {
  %sum = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %y = dist.map(%sum) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  %odd = coll.all_reduce sum %z : !dist.tensor<6xf32, @world, [local]> -> !dist.tensor<6xf32, @world, [replicated]>
  %n = coll.all_reduce sum %s : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
  %flat = coll.all_reduce sum %m : !dist.tensor<6x3xf32, @world, [local]> -> !dist.tensor<6x3xf32, @world, [replicated]>
  func.return %y, %odd, %n, %flat : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<6xf32, @world, [replicated]>, !dist.tensor<f32, @world, [replicated]>, !dist.tensor<6x3xf32, @world, [replicated]>
}
