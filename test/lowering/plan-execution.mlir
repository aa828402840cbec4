// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-to-kernels,lower-collectives,plan-execution{target=local}' | filecheck %s --check-prefix=LOCAL
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-to-kernels,lower-collectives,plan-execution{target=gpu}' | filecheck %s --check-prefix=GPU
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-to-kernels,lower-collectives,plan-execution{target=messages}' | filecheck %s --check-prefix=MSG
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-to-kernels,lower-collectives,plan-execution{target=local}' | distir-opt | filecheck %s --check-prefix=LOCAL
// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=2},lower-to-kernels,lower-collectives,plan-execution{target=shared-memory}' | distir-opt | filecheck %s --check-prefix=SHM
// plan-execution writes every execution decision into the IR: the module's target, a
// fused group's zero_copy layout (or sequential), in_place all-gathers, the streamed
// copies (stream_from) and the transport of fused tile operators. The planned text
// parses back to the same decisions (the last RUN line).

dist.mesh @world shape = [?]

// The fused RS-SGD-AG group: one zero-copy kernel where ranks share memory (the kernel
// reads the reduced slice through parameter 1 and gathers parameters 6 and 5 in place),
// its calls one by one on a GPU and between processes that only exchange messages.
// Between processes that share memory, the caller may give buffers outside it: the group
// falls back to its calls one by one there (else sequential); rank threads see every
// buffer (local: no fallback).
// The gathers of a zero-copy group stream nothing: the kernel stores them.
// LOCAL: builtin.module attributes {rt.target = #rt.target<"local", shared_memory, host_copies [all_gather, broadcast, send, recv], stream_from 4194304>}
// LOCAL-LABEL: func.func @sgd
// LOCAL: rt.fused zero_copy reduce 1 gather [6, 5] {
// SHM-LABEL: func.func @sgd
// SHM: rt.fused zero_copy reduce 1 gather [6, 5] else sequential {
// LOCAL: nccl.reduce_scatter avg
// LOCAL: rt.launch @[[K:k[0-9]+]](
// LOCAL-NOT: stream_from
// LOCAL: nccl.all_gather {{.*}} count 32 in_place :
// LOCAL-NOT: stream_from
// LOCAL: func.return
// GPU: builtin.module attributes {rt.target = #rt.target<"gpu">}
// GPU-LABEL: func.func @sgd
// GPU: rt.fused sequential {
// GPU: nccl.all_gather {{.*}} count 32 in_place :
// MSG: builtin.module attributes {rt.target = #rt.target<"messages", stream_from 4194304>}
// MSG-LABEL: func.func @sgd
// MSG: rt.fused sequential {
func.func @sgd(%g: !dist.tensor<64xf32, @world, [local]>, %p: !dist.tensor<64xf32, @world, [replicated]>, %m: !dist.tensor<64xf32, @world, [replicated]>, %lr: f32, %mu: f32) -> (!dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 2 : i64}) {
  %m1, %p1 = coll.fused_all_reduce avg %g dim 0 : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) {
  ^bb0(%avg_rs: !dist.tensor<64xf32, @world, [sliced<0>]>):
    %m_s = dist.take_slice %m dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %p_s = dist.take_slice %p dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %p1_s, %m1_s = dist.map(%m_s, %avg_rs, %mu, %p_s, %lr) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, f32, !dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
    ^bb0(%mi: f32, %gi: f32, %mui: f32, %pi: f32, %lri: f32):
      %a = arith.mulf %mui, %mi : f32
      %b = arith.addf %a, %gi : f32
      %a_1 = arith.mulf %lri, %b : f32
      %b_1 = arith.subf %pi, %a_1 : f32
      dist.yield %b_1, %b : f32, f32
    }
    coll.yield %m1_s, %p1_s : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %p1, %m1 : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>
}

// A large all-gather out of a fused group (8 MiB per block): the local target's
// communicator copies its data and streams copies from 4 MiB on; a GPU streams nothing.
// LOCAL-LABEL: func.func @gather_large
// LOCAL: nccl.all_gather %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} count 2097152 in_place stream_from 4194304 :
// GPU-LABEL: func.func @gather_large
// GPU-NOT: stream_from
// GPU: func.return
// MSG-LABEL: func.func @gather_large
// MSG-NOT: stream_from
// MSG: func.return
func.func @gather_large(%x: !dist.tensor<4194304xf32, @world, [sliced<0>]>) -> !dist.tensor<4194304xf32, @world, [replicated]> {
  %y = dist.map(%x) : (!dist.tensor<4194304xf32, @world, [sliced<0>]>) -> !dist.tensor<4194304xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %b = arith.mulf %a, %a : f32
    dist.yield %b : f32
  }
  %z = coll.all_gather %y : !dist.tensor<4194304xf32, @world, [sliced<0>]> -> !dist.tensor<4194304xf32, @world, [replicated]>
  func.return %z : !dist.tensor<4194304xf32, @world, [replicated]>
}

// A fused reduce-scatter that also returns its reduced slice: the zero-copy kernel reduces
// the peers' blocks as it reads them and never writes that buffer, so the group runs its
// calls one by one (zero_copy returned zeros for the slice, issue 27's differential test).
// LOCAL-LABEL: func.func @reduced_slice_returned
// LOCAL: rt.fused sequential {
// LOCAL: func.return
func.func @reduced_slice_returned(%x: !dist.tensor<64xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %r, %s = coll.fused_reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%b: !dist.tensor<64xf32, @world, [sliced<0>]>):
    %m = dist.map(%b) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
    ^bb1(%e: f32):
      %d = arith.addf %e, %e : f32
      dist.yield %d : f32
    }
    coll.yield %b, %m : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %r, %s : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}

// Mixed precision (CoCoNet): bf16 gradients reduced into this rank's bf16 slice, cast up,
// the f32 master slice updated and rounded to the bf16 parameters, which are gathered:
// one zero-copy kernel too (CPU kernels read and write bf16 in place as their bits).
// LOCAL-LABEL: func.func @sgd_mixed
// LOCAL: rt.fused zero_copy reduce {{[0-9]+}} gather [{{[0-9]+}}] {
// LOCAL: nccl.reduce_scatter avg {{.*}}bf16
// LOCAL: rt.launch
// LOCAL: nccl.all_gather {{.*}} in_place :
// GPU-LABEL: func.func @sgd_mixed
// GPU: rt.fused sequential {
func.func @sgd_mixed(%g: !dist.tensor<64xbf16, @world, [local]>, %p: !dist.tensor<64xbf16, @world, [replicated]>, %w: !dist.tensor<64xf32, @world, [sliced<0>]>, %lr: f32) -> (!dist.tensor<64xbf16, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<64xf32, @world, [sliced<0>]> {dist.inplace = 2 : i64}) {
  %p1, %w1 = coll.fused_all_reduce avg %g dim 0 gather [true, false] : !dist.tensor<64xbf16, @world, [local]> -> (!dist.tensor<64xbf16, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%avg_rs: !dist.tensor<64xbf16, @world, [sliced<0>]>):
    %a = dist.cast %avg_rs : !dist.tensor<64xbf16, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [sliced<0>]>
    %w1_s = dist.map(%w, %a, %lr) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
    ^bb0(%wi: f32, %gi: f32, %lri: f32):
      %s = arith.mulf %lri, %gi : f32
      %r = arith.subf %wi, %s : f32
      dist.yield %r : f32
    }
    %p1_s = dist.cast %w1_s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xbf16, @world, [sliced<0>]>
    coll.yield %p1_s, %w1_s : !dist.tensor<64xbf16, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %p1, %w1 : !dist.tensor<64xbf16, @world, [replicated]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}
