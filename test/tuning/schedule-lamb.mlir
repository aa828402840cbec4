// LAMB: fuse(RS-LAMB-AG) with m, v sliced. The norms are computed on slices
// (dist.reduce_tensor gives local partial sums) and combined by an inner scalar
// all_reduce inside the fused collective.
// RUN: distir-opt %examples/lamb.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m,v},fuse-allreduce{targets=avg_rs}' | filecheck %s

// CHECK-LABEL: func.func @lamb
// CHECK-SAME:    %m: !dist.tensor<1048576xf32, @world, [sliced<0>]>, %v: !dist.tensor<1048576xf32, @world, [sliced<0>]>
// CHECK:         %[[P1:.*]], %[[M1:.*]], %[[V1:.*]] = coll.fused_all_reduce avg %g dim 0 gather [true, false, false]
// CHECK-NEXT:    ^{{.*}}(%[[G:.*]]: {{.*}}[sliced<0>]>):
// CHECK-NEXT:      %[[PS:.*]] = dist.take_slice %p dim 0
// CHECK-NEXT:      %[[P2:.*]], %[[U2:.*]], %[[MN:.*]], %[[VN:.*]], %[[U:.*]] = dist.map(%m, %v, %[[G]], %[[PS]],
// CHECK:           %[[PP:.*]] = dist.reduce_tensor sum %[[P2]] dims [0] : {{.*}}[sliced<0>]> -> !dist.tensor<f32, @world, [local]>
// CHECK-NEXT:      %[[PN:.*]] = coll.all_reduce sum %[[PP]] : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
// CHECK-NEXT:      %[[UP:.*]] = dist.reduce_tensor sum %[[U2]] dims [0]
// CHECK-NEXT:      %[[UN:.*]] = coll.all_reduce sum %[[UP]]
// CHECK-NEXT:      %[[PNEW:.*]] = dist.map(%[[PS]], %[[U]], %[[PN]], %[[UN]], %lr)
// CHECK:           coll.yield %[[PNEW]], %[[MN]], %[[VN]]
// CHECK:         func.return %[[P1]], %[[M1]], %[[V1]]
