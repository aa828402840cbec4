// CoCoNet schedule AR-SGD of examples/sgd.mlir, produced by
//   distir-opt examples/sgd.mlir -p 'fuse-maps'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @sgd(%g: !dist.tensor<1048576xf32, @world, [local]>, %p: !dist.tensor<1048576xf32, @world, [replicated]>, %m: !dist.tensor<1048576xf32, @world, [replicated]>, %lr: f32, %mu: f32) -> (!dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 2 : i64}) {
    %avg = coll.all_reduce avg %g : !dist.tensor<1048576xf32, @world, [local]> -> !dist.tensor<1048576xf32, @world, [replicated]>
    %p1, %m1 = dist.map(%m, %avg, %mu, %p, %lr) : (!dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [replicated]>, f32, !dist.tensor<1048576xf32, @world, [replicated]>, f32) -> (!dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [replicated]>) {
    ^bb0(%mi: f32, %gi: f32, %mui: f32, %pi: f32, %lri: f32):
      %a = arith.mulf %mui, %mi : f32
      %b = arith.addf %a, %gi : f32
      %a_1 = arith.mulf %lri, %b : f32
      %b_1 = arith.subf %pi, %a_1 : f32
      dist.yield %b_1, %b : f32, f32
    }
    func.return %p1, %m1 : !dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [replicated]>
  }
}
