// CoCoNet schedule fuse(RS-LAMB-AG) of examples/lamb.mlir, produced by
//   distir-opt examples/lamb.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m,v},fuse-allreduce{targets=avg_rs}'
// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate
// with: python -m distir.tuning.schedule examples/schedules
builtin.module {
  dist.mesh @world shape = [?]
  func.func @lamb(%g: !dist.tensor<1048576xf32, @world, [local]>, %p: !dist.tensor<1048576xf32, @world, [replicated]>, %m: !dist.tensor<1048576xf32, @world, [sliced<0>]>, %v: !dist.tensor<1048576xf32, @world, [sliced<0>]>, %lr: f32, %beta1: f32, %beta2: f32, %eps: f32, %wd: f32, %t: f32) -> (!dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<1048576xf32, @world, [sliced<0>]> {dist.inplace = 2 : i64}, !dist.tensor<1048576xf32, @world, [sliced<0>]> {dist.inplace = 3 : i64}) {
    %p1, %m1, %v1 = coll.fused_all_reduce avg %g dim 0 gather [true, false, false] : !dist.tensor<1048576xf32, @world, [local]> -> (!dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>) {
    ^bb0(%avg_rs: !dist.tensor<1048576xf32, @world, [sliced<0>]>):
      %p_s = dist.take_slice %p dim 0 : !dist.tensor<1048576xf32, @world, [replicated]> -> !dist.tensor<1048576xf32, @world, [sliced<0>]>
      %p2_s, %u2_s, %m1_s, %v1_s, %u_s = dist.map(%m, %v, %avg_rs, %p_s, %beta1, %beta2, %eps, %wd, %t) : (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, f32, f32, f32, f32, f32) -> (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>) {
      ^bb0(%mi: f32, %vi: f32, %gi: f32, %pi: f32, %b1: f32, %b2: f32, %e: f32, %w: f32, %ti: f32):
        %one = arith.constant 1.000000e+00 : f32
        %a1 = arith.mulf %b1, %mi : f32
        %c1 = arith.subf %one, %b1 : f32
        %d1 = arith.mulf %c1, %gi : f32
        %mn = arith.addf %a1, %d1 : f32
        %a2 = arith.mulf %b2, %vi : f32
        %c2 = arith.subf %one, %b2 : f32
        %gg = arith.mulf %gi, %gi : f32
        %d2 = arith.mulf %c2, %gg : f32
        %vn = arith.addf %a2, %d2 : f32
        %b1t = math.powf %b1, %ti : f32
        %b2t = math.powf %b2, %ti : f32
        %k1 = arith.subf %one, %b1t : f32
        %k2 = arith.subf %one, %b2t : f32
        %mhat = arith.divf %mn, %k1 : f32
        %vhat = arith.divf %vn, %k2 : f32
        %s = math.sqrt %vhat : f32
        %den = arith.addf %s, %e : f32
        %r = arith.divf %mhat, %den : f32
        %wp = arith.mulf %w, %pi : f32
        %un = arith.addf %r, %wp : f32
        %pp = arith.mulf %pi, %pi : f32
        %uu = arith.mulf %un, %un : f32
        dist.yield %pp, %uu, %mn, %vn, %un : f32, f32, f32, f32, f32
      }
      %pn2_part = dist.reduce_tensor sum %p2_s dims [0] : !dist.tensor<1048576xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
      %pn2 = coll.all_reduce sum %pn2_part : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
      %un2_part = dist.reduce_tensor sum %u2_s dims [0] : !dist.tensor<1048576xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
      %un2 = coll.all_reduce sum %un2_part : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
      %p1_s = dist.map(%p_s, %u_s, %pn2, %un2, %lr) : (!dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<f32, @world, [replicated]>, !dist.tensor<f32, @world, [replicated]>, f32) -> !dist.tensor<1048576xf32, @world, [sliced<0>]> {
      ^bb0(%pi_1: f32, %ui: f32, %pn: f32, %un_1: f32, %lri: f32):
        %r1 = math.sqrt %pn : f32
        %r2 = math.sqrt %un_1 : f32
        %trust = arith.divf %r1, %r2 : f32
        %a = arith.mulf %lri, %trust : f32
        %b = arith.mulf %a, %ui : f32
        %c = arith.subf %pi_1, %b : f32
        dist.yield %c : f32
      }
      coll.yield %p1_s, %m1_s, %v1_s : !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>
    }
    func.return %p1, %m1, %v1 : !dist.tensor<1048576xf32, @world, [replicated]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>, !dist.tensor<1048576xf32, @world, [sliced<0>]>
  }
}
