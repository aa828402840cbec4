// CoCoNet's Adam schedules (Figure 6): AR-Adam -> RS-Adam-AG -> fuse(RS-Adam-AG) with m, v sliced.
// RUN: distir-opt %examples/adam.mlir -p 'fuse-maps' | filecheck %s --check-prefix=AR
// RUN: distir-opt %examples/adam.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag}' | filecheck %s --check-prefix=RS
// RUN: distir-opt %examples/adam.mlir -p 'fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},slice-state{targets=m,v},fuse-allreduce{targets=avg_rs}' | filecheck %s --check-prefix=FUSED

// AR-LABEL: func.func @adam
// AR:         %[[AVG:.*]] = coll.all_reduce avg %g
// AR-NEXT:    %[[P1:.*]], %[[M1:.*]], %[[V1:.*]] = dist.map(%v, %[[AVG]], %beta2, %m, %beta1, %p, %lr, %eps, %t)
// AR:         func.return %[[P1]], %[[M1]], %[[V1]]

// RS-LABEL: func.func @adam
// RS:         %[[SC:.*]] = coll.reduce_scatter avg %g dim 0 : {{.*}}[local]> -> {{.*}}[sliced<0>]>
// RS-DAG:     %[[VS:.*]] = dist.take_slice %v dim 0
// RS-DAG:     %[[MS:.*]] = dist.take_slice %m dim 0
// RS-DAG:     %[[PS:.*]] = dist.take_slice %p dim 0
// RS:         %[[P1:.*]], %[[M1:.*]], %[[V1:.*]] = dist.map(%[[VS]], %[[SC]], %beta2, %[[MS]], %beta1, %[[PS]], %lr, %eps, %t) : {{.*}} -> ({{.*}}[sliced<0>]>, {{.*}}[sliced<0>]>, {{.*}}[sliced<0>]>)
// RS:         %[[GP:.*]] = coll.all_gather %[[P1]]
// RS-NEXT:    %[[GM:.*]] = coll.all_gather %[[M1]]
// RS-NEXT:    %[[GV:.*]] = coll.all_gather %[[V1]]
// RS-NEXT:    func.return %[[GP]], %[[GM]], %[[GV]]

// m and v become sliced arguments and results; p stays replicated and is gathered.
// FUSED-LABEL: func.func @adam
// FUSED-SAME:    %p: !dist.tensor<1048576xf32, @world, [replicated]>, %m: !dist.tensor<1048576xf32, @world, [sliced<0>]>, %v: !dist.tensor<1048576xf32, @world, [sliced<0>]>
// FUSED-SAME:    -> (!dist.tensor<1048576xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<1048576xf32, @world, [sliced<0>]> {dist.inplace = 2 : i64}, !dist.tensor<1048576xf32, @world, [sliced<0>]> {dist.inplace = 3 : i64})
// FUSED-NEXT:    %[[P1:.*]], %[[M1:.*]], %[[V1:.*]] = coll.fused_all_reduce avg %g dim 0 gather [true, false, false] : {{.*}}[local]> -> ({{.*}}[replicated]>, {{.*}}[sliced<0>]>, {{.*}}[sliced<0>]>) {
// FUSED-NEXT:    ^{{.*}}(%[[G:.*]]: {{.*}}[sliced<0>]>):
// FUSED-NEXT:      %[[PS:.*]] = dist.take_slice %p dim 0
// FUSED-NEXT:      %[[A:.*]], %[[B:.*]], %[[C:.*]] = dist.map(%v, %[[G]], %beta2, %m, %beta1, %[[PS]], %lr, %eps, %t)
// FUSED:           coll.yield %[[A]], %[[B]], %[[C]]
// FUSED-NEXT:    }
// FUSED-NEXT:    func.return %[[P1]], %[[M1]], %[[V1]]
// FUSED-NOT:     coll.all_gather
