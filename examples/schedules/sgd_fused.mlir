// CoCoNet schedule fuse(RS-SGD-AG) of examples/sgd.mlir, produced by
//   distir-opt examples/sgd.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m},fuse-allreduce{targets=avg_rs}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @sgd(%g: !dist.tensor<1048576xf32, @world, [local]>, %p: !dist.tensor<1048576xf32, @world, [replicated]>, %m: !dist.tensor<1048576xf32, @world, [sliced<0>]>, %lr: f32, %mu: f32) -> (!dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<1048576xf32, @world, [sliced<0>]> {dist.inplace = 2 : i64}) {
    %p1, %m1 = coll.fused_all_reduce avg %g dim 0 gather [true, false] : !dist.tensor<1048576xf32, @world, [local]> -> (!dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>) {
    ^bb0(%avg_rs: !dist.tensor<1048576xf32, @world, [sliced<0>]>):
      %p_s = dist.take_slice %p dim 0 : !dist.tensor<1048576xf32, @world, [replicated]> -> !dist.tensor<1048576xf32, @world, [sliced<0>]>
      %p1_s, %m1_s = dist.map(%m, %avg_rs, %mu, %p_s, %lr) : (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32) -> (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>) {
      ^bb0(%mi: f32, %gi: f32, %mui: f32, %pi: f32, %lri: f32):
        %a = arith.mulf %mui, %mi : f32
        %b = arith.addf %a, %gi : f32
        %a_1 = arith.mulf %lri, %b : f32
        %b_1 = arith.subf %pi, %a_1 : f32
        dist.yield %b_1, %b : f32, f32
      }
      coll.yield %p1_s, %m1_s : !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>
    }
    func.return %p1, %m1 : !dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>
  }
}
