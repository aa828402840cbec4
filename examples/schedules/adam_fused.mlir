// CoCoNet schedule fuse(RS-Adam-AG) of examples/adam.mlir, produced by
//   distir-opt examples/adam.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m,v},fuse-allreduce{targets=avg_rs}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @adam(%g: !dist.tensor<1048576xf32, @world, [local]>, %p: !dist.tensor<1048576xf32, @world, [replicated]>, %m: !dist.tensor<1048576xf32, @world, [sliced<0>]>, %v: !dist.tensor<1048576xf32, @world, [sliced<0>]>, %lr: f32, %beta1: f32, %beta2: f32, %eps: f32, %t: f32) -> (!dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<1048576xf32, @world, [sliced<0>]> {dist.inplace = 2 : i64}, !dist.tensor<1048576xf32, @world, [sliced<0>]> {dist.inplace = 3 : i64}) {
    %p1, %m1, %v1 = coll.fused_all_reduce avg %g dim 0 gather [true, false, false] : !dist.tensor<1048576xf32, @world, [local]> -> (!dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>) {
    ^bb0(%avg_rs: !dist.tensor<1048576xf32, @world, [sliced<0>]>):
      %p_s = dist.take_slice %p dim 0 : !dist.tensor<1048576xf32, @world, [replicated]> -> !dist.tensor<1048576xf32, @world, [sliced<0>]>
      %p1_s, %m1_s, %v1_s = dist.map(%v, %avg_rs, %beta2, %m, %beta1, %p_s, %lr, %eps, %t) : (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32, f32, f32) -> (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>) {
      ^bb0(%vi: f32, %gi: f32, %b2: f32, %mi: f32, %b1: f32, %pi: f32, %lri: f32, %e: f32, %ti: f32):
        %one = arith.constant 1.000000e+00 : f32
        %a = arith.mulf %b2, %vi : f32
        %c = arith.subf %one, %b2 : f32
        %gg = arith.mulf %gi, %gi : f32
        %d = arith.mulf %c, %gg : f32
        %e_1 = arith.addf %a, %d : f32
        %one_1 = arith.constant 1.000000e+00 : f32
        %a_1 = arith.mulf %b1, %mi : f32
        %c_1 = arith.subf %one_1, %b1 : f32
        %d_1 = arith.mulf %c_1, %gi : f32
        %e_2 = arith.addf %a_1, %d_1 : f32
        %one_2 = arith.constant 1.000000e+00 : f32
        %b1t = math.powf %b1, %ti : f32
        %b2t = math.powf %b2, %ti : f32
        %c1 = arith.subf %one_2, %b1t : f32
        %c2 = arith.subf %one_2, %b2t : f32
        %mhat = arith.divf %e_2, %c1 : f32
        %vhat = arith.divf %e_1, %c2 : f32
        %s = math.sqrt %vhat : f32
        %den = arith.addf %s, %e : f32
        %step = arith.divf %mhat, %den : f32
        %upd = arith.mulf %lri, %step : f32
        %np = arith.subf %pi, %upd : f32
        dist.yield %np, %e_2, %e_1 : f32, f32, f32
      }
      coll.yield %p1_s, %m1_s, %v1_s : !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>
    }
    func.return %p1, %m1, %v1 : !dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>
  }
}
