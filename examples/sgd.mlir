// Data-parallel SGD with momentum (CoCoNet's "AR-SGD"): average the gradients with an
// AllReduce, then every rank updates the momentum buffer and the parameters.
//   m1 = mu * m + avg(g);  p1 = p - lr * m1
dist.mesh @world shape = [?]

func.func @sgd(%g: !dist.tensor<1048576xf32, @world, [local]>,
               %p: !dist.tensor<1048576xf32, @world, [replicated]>,
               %m: !dist.tensor<1048576xf32, @world, [replicated]>,
               %lr: f32, %mu: f32)
    -> (!dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 1 : i64},
        !dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 2 : i64}) {
  %avg = coll.all_reduce avg %g : !dist.tensor<1048576xf32, @world, [local]> -> !dist.tensor<1048576xf32, @world, [replicated]>
  %m1 = dist.map(%m, %avg, %mu) : (!dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [replicated]>, f32) -> !dist.tensor<1048576xf32, @world, [replicated]> {
  ^bb0(%mi: f32, %gi: f32, %mui: f32):
    %a = arith.mulf %mui, %mi : f32
    %b = arith.addf %a, %gi : f32
    dist.yield %b : f32
  }
  %p1 = dist.map(%p, %m1, %lr) : (!dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [replicated]>, f32) -> !dist.tensor<1048576xf32, @world, [replicated]> {
  ^bb0(%pi: f32, %mi: f32, %lri: f32):
    %a = arith.mulf %lri, %mi : f32
    %b = arith.subf %pi, %a : f32
    dist.yield %b : f32
  }
  func.return %p1, %m1 : !dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [replicated]>
}
