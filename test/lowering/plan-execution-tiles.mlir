// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives,plan-execution{target=local}' | distir-opt | filecheck %s --check-prefix=LOCAL
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives,plan-execution{target=shared-memory}' | distir-opt | filecheck %s --check-prefix=SHM
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives,plan-execution{target=messages}' | filecheck %s --check-prefix=MSG
// plan-execution's transport of a fused tile operator: tiles stored into the peers'
// buffers where ranks share memory; between processes (shared-memory), whose caller may
// give buffers outside the shared memory, with the message path written as the
// fallback (else messages); rank threads see every buffer (local: no fallback); as
// messages where ranks share nothing. The planned text parses back (distir-opt).

dist.mesh @world shape = [?]

// LOCAL-LABEL: func.func @gemv_all_reduce
// LOCAL: rt.matmul_all_reduce sum {{.*}} dim 1 tiles 4 order remote_first transport shared :
// SHM-LABEL: func.func @gemv_all_reduce
// SHM: rt.matmul_all_reduce sum {{.*}} dim 1 tiles 4 order remote_first transport shared else messages :
// MSG-LABEL: func.func @gemv_all_reduce
// MSG: rt.matmul_all_reduce sum {{.*}} dim 1 tiles 4 order remote_first transport messages :
func.func @gemv_all_reduce(%x: !dist.tensor<4x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x64xf32, @world, [sliced<0>]>) -> !dist.tensor<4x64xf32, @world, [replicated]> {
  %y = coll.overlap chunks 4 order remote_first granularity tile -> !dist.tensor<4x64xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<4x64xf32, @world, [sliced<1>]>, !dist.tensor<64x64xf32, @world, [sliced<0>]>) -> !dist.tensor<4x64xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<4x64xf32, @world, [local]> -> !dist.tensor<4x64xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<4x64xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<4x64xf32, @world, [replicated]>
}
