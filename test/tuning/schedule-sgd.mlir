// SGD with momentum: AR-SGD -> RS-SGD-AG -> fuse(RS-SGD-AG) with the momentum sliced.
// RUN: distir-opt %examples/sgd.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag}' | filecheck %s --check-prefix=RS
// RUN: distir-opt %examples/sgd.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m},fuse-allreduce{targets=avg_rs}' | filecheck %s --check-prefix=FUSED

// RS-LABEL: func.func @sgd
// RS:         %[[SC:.*]] = coll.reduce_scatter avg %g dim 0
// RS:         %[[P1:.*]], %[[M1:.*]] = dist.map({{.*}}%[[SC]]{{.*}}) : {{.*}} -> ({{.*}}[sliced<0>]>, {{.*}}[sliced<0>]>)
// RS:         coll.all_gather %[[P1]]
// RS:         coll.all_gather %[[M1]]

// FUSED-LABEL: func.func @sgd
// FUSED-SAME:    %m: !dist.tensor<1048576xf32, @world, [sliced<0>]>
// FUSED:         %[[P1:.*]], %[[M1:.*]] = coll.fused_all_reduce avg %g dim 0 gather [true, false] : {{.*}}[local]> -> ({{.*}}[replicated]>, {{.*}}[sliced<0>]>)
// FUSED:           dist.take_slice %p dim 0
// FUSED:           dist.map(%m,
// FUSED:         func.return %[[P1]], %[[M1]]
