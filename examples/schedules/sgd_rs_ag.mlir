// CoCoNet schedule RS-SGD-AG of examples/sgd.mlir, produced by
//   distir-opt examples/sgd.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @sgd(%g: !dist.tensor<1048576xf32, @world, [local]>, %p: !dist.tensor<1048576xf32, @world, [replicated]>, %m: !dist.tensor<1048576xf32, @world, [replicated]>, %lr: f32, %mu: f32) -> (!dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 2 : i64}) {
    %avg_rs = coll.reduce_scatter avg %g dim 0 : !dist.tensor<1048576xf32, @world, [local]> -> !dist.tensor<1048576xf32, @world, [sliced<0>]>
    %m_s = dist.take_slice %m dim 0 : !dist.tensor<1048576xf32, @world, [replicated]> -> !dist.tensor<1048576xf32, @world, [sliced<0>]>
    %p_s = dist.take_slice %p dim 0 : !dist.tensor<1048576xf32, @world, [replicated]> -> !dist.tensor<1048576xf32, @world, [sliced<0>]>
    %p1_s, %m1_s = dist.map(%m_s, %avg_rs, %mu, %p_s, %lr) : (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32) -> (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>) {
    ^bb0(%mi: f32, %gi: f32, %mui: f32, %pi: f32, %lri: f32):
      %a = arith.mulf %mui, %mi : f32
      %b = arith.addf %a, %gi : f32
      %a_1 = arith.mulf %lri, %b : f32
      %b_1 = arith.subf %pi, %a_1 : f32
      dist.yield %b_1, %b : f32, f32
    }
    %p1 = coll.all_gather %p1_s : !dist.tensor<1048576xf32, @world, [sliced<0>]> -> !dist.tensor<1048576xf32, @world, [replicated]>
    %m1 = coll.all_gather %m1_s : !dist.tensor<1048576xf32, @world, [sliced<0>]> -> !dist.tensor<1048576xf32, @world, [replicated]>
    func.return %p1, %m1 : !dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [replicated]>
  }
}
