// Megatron-LM model parallelism (CoCoNet Figure 4): MM-AR-C -> MM-RS-C-AG ->
// ol(MM,fuse(RS-C-AG)), for the self-attention tail and the MLP block.
// RUN: distir-opt %examples/megatron_attention.mlir -p 'split-allreduce{dim=0 targets=sum},reorder-allgather{targets=sum_ag}' | filecheck %s --check-prefix=RS
// RUN: distir-opt %examples/megatron_attention.mlir -p 'split-allreduce{dim=0 targets=sum},reorder-allgather{targets=sum_ag},fuse-allreduce{targets=sum_rs},overlap{order=ring targets=layer,out}' | filecheck %s --check-prefix=OL
// RUN: distir-opt %examples/megatron_mlp.mlir -p 'split-allreduce{dim=1 targets=sum},reorder-allgather{targets=sum_ag},fuse-allreduce{targets=sum_rs},overlap{order=ring targets=o,out}' | filecheck %s --check-prefix=MLP

// RS-LABEL: func.func @self_attention
// RS:         %[[L:.*]] = dist.matmul %in, %w
// RS-NEXT:    %[[SC:.*]] = coll.reduce_scatter sum %[[L]] dim 0 : {{.*}}[local]> -> {{.*}}[sliced<0>]>
// RS-NEXT:    %[[B:.*]] = dist.map(%[[SC]], %b) : ({{.*}}[sliced<0>]>, {{.*}}<3072xf16, @world, [replicated]>) -> {{.*}}[sliced<0>]>
// RS:         %[[D:.*]] = dist.dropout %[[B]] p 0.1 seed 1234
// RS-NEXT:    %[[R:.*]] = dist.take_slice %r dim 0
// RS-NEXT:    %[[O:.*]] = dist.map(%[[D]], %[[R]])
// RS:         %[[AG:.*]] = coll.all_gather %[[O]]
// RS-NEXT:    func.return %[[AG]]

// OL-LABEL: func.func @self_attention
// OL-NEXT:    %[[OUT:.*]] = coll.overlap chunks 4 order ring -> {{.*}}[replicated]> {
// OL-NEXT:      %[[L:.*]] = dist.matmul %in, %w
// OL-NEXT:      %[[F:.*]] = coll.fused_all_reduce sum %[[L]] dim 0 : {{.*}}[local]> -> {{.*}}[replicated]> {
// OL-NEXT:      ^{{.*}}(%[[S:.*]]: {{.*}}[sliced<0>]>):
// OL-NEXT:        dist.map(%[[S]], %b)
// OL:             dist.dropout
// OL:             dist.take_slice %r dim 0
// OL:             coll.yield
// OL:           coll.yield %[[F]]
// OL-NEXT:    }
// OL-NEXT:    func.return %[[OUT]]

// The MLP slices the sequence dim (B = 4 does not divide 8 ranks); its first GEMM and
// GeLU stay outside the overlap of the second GEMM with the fused all-reduce.
// MLP-LABEL: func.func @mlp
// MLP:         %[[A:.*]] = dist.map(%h, %b1)
// MLP:         %[[OUT:.*]] = coll.overlap chunks 4 order ring
// MLP-NEXT:      %[[O:.*]] = dist.matmul %[[A]], %w2
// MLP-NEXT:      coll.fused_all_reduce sum %[[O]] dim 1
// MLP:             dist.take_slice %x dim 1
// MLP:         func.return %[[OUT]]
