// Pipeline + model parallelism (CoCoNet Figure 8): AR-P2P-C -> RS-P2P-C-AG ->
// ol(RS,fuse(P2P-C),AG). Only a slice crosses the stages; the fused P2P + computation
// and the final AllGather form one coll.fused_all_gather, overlapped with the
// reduce-scatter.
// RUN: distir-opt %examples/pipeline_layer.mlir -p 'split-allreduce{dim=1 targets=sum},reorder-send{targets=recv},reorder-allgather{targets=recv}' | filecheck %s --check-prefix=RS
// RUN: distir-opt %examples/pipeline_layer.mlir -p 'split-allreduce{dim=1 targets=sum},reorder-send{targets=recv},reorder-allgather{targets=recv},fuse-collectives{targets=out},overlap{targets=sum_rs,out}' | filecheck %s --check-prefix=OL

// RS-LABEL: func.func @transformer
// RS:         %[[SC:.*]] = coll.reduce_scatter sum %in dim 1 axes [1] : {{.*}}[at<0>, local]> -> {{.*}}[at<0>, sliced<1>]>
// RS-NEXT:    %[[S:.*]] = coll.send %[[SC]] to 1 : {{.*}}[at<0>, sliced<1>]> -> {{.*}}[at<1>, sliced<1>]>
// RS-NEXT:    %[[B:.*]] = dist.map(%[[S]], %b)
// RS:         %[[D:.*]] = dist.dropout %[[B]]
// RS-NEXT:    %[[R:.*]] = dist.take_slice %r dim 1 axis 1
// RS-NEXT:    %[[O:.*]] = dist.map(%[[D]], %[[R]])
// RS:         %[[AG:.*]] = coll.all_gather %[[O]] axes [1] : {{.*}}[at<1>, sliced<1>]> -> {{.*}}[at<1>, replicated]>
// RS-NEXT:    func.return %[[AG]]

// OL-LABEL: func.func @transformer
// OL-NEXT:    %[[OUT:.*]] = coll.overlap chunks 4 -> {{.*}}[at<1>, replicated]> {
// OL-NEXT:      %[[SC:.*]] = coll.reduce_scatter sum %in dim 1 axes [1]
// OL-NEXT:      %[[F:.*]] = coll.fused_all_gather %[[SC]] axes [1] : {{.*}}[at<0>, sliced<1>]> -> {{.*}}[at<1>, replicated]> {
// OL-NEXT:      ^{{.*}}(%[[A:.*]]: {{.*}}[at<0>, sliced<1>]>):
// OL-NEXT:        %[[S:.*]] = coll.send %[[A]] to 1
// OL-NEXT:        dist.map(%[[S]], %b)
// OL:             coll.yield
// OL:           coll.yield %[[F]]
// OL-NEXT:    }
// OL-NEXT:    func.return %[[OUT]]
