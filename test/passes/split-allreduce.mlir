// RUN: distir-opt %s -p split-allreduce | filecheck %s
// RUN: distir-opt %s -p 'split-allreduce{strategy=reduce-bcast root=2 targets=sum}' | filecheck %s --check-prefix=BCAST
// RUN: distir-opt %s -p 'split-allreduce{dim=1 targets=sum}' | filecheck %s --check-prefix=DIM1

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]

// CHECK-LABEL: func.func @split
// CHECK:         %[[RS:.*]] = coll.reduce_scatter sum %x dim 0 : {{.*}}[local]> -> {{.*}}[sliced<0>]>
// CHECK-NEXT:    %[[AG:.*]] = coll.all_gather %[[RS]] : {{.*}}[sliced<0>]> -> {{.*}}[replicated]>
// CHECK-NEXT:    %[[M:.*]] = dist.map(%[[AG]])
// CHECK:         func.return %[[M]]
// BCAST-LABEL: func.func @split
// BCAST:         %[[R:.*]] = coll.reduce sum %x root 2 : {{.*}}[local]> -> {{.*}}[at<2>]>
// BCAST-NEXT:    %[[B:.*]] = coll.broadcast %[[R]] : {{.*}}[at<2>]> -> {{.*}}[replicated]>
// BCAST-NEXT:    dist.map(%[[B]])
// DIM1-LABEL: func.func @split
// DIM1:          coll.reduce_scatter sum %x dim 1 : {{.*}}[local]> -> {{.*}}[sliced<1>]>
func.func @split(%x: !dist.tensor<64x8xf32, @world, [local]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  %sum = coll.all_reduce sum %x : !dist.tensor<64x8xf32, @world, [local]> -> !dist.tensor<64x8xf32, @world, [replicated]>
  %y = dist.map(%sum) : (!dist.tensor<64x8xf32, @world, [replicated]>) -> !dist.tensor<64x8xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    %b = arith.addf %a, %a : f32
    dist.yield %b : f32
  }
  func.return %y : !dist.tensor<64x8xf32, @world, [replicated]>
}

// New values are named after the split one, so that later passes can target them.
// CHECK-LABEL: func.func @names
// CHECK:         %avg_rs = coll.reduce_scatter avg %g dim 0
// CHECK-NEXT:    %avg_ag = coll.all_gather %avg_rs
// CHECK-NEXT:    func.return %avg_ag
// BCAST-LABEL: func.func @names
// BCAST:         %avg = coll.all_reduce avg %g
func.func @names(%g: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %avg = coll.all_reduce avg %g : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %avg : !dist.tensor<64xf32, @world, [replicated]>
}

// The stage axis keeps its placement; only the tensor-parallel axis is split.
// CHECK-LABEL: func.func @pipeline_stage
// CHECK:         %[[RS:.*]] = coll.reduce_scatter sum %in dim 0 axes [1] : {{.*}}[at<0>, local]> -> {{.*}}[at<0>, sliced<0>]>
// CHECK-NEXT:    coll.all_gather %[[RS]] axes [1] : {{.*}}[at<0>, sliced<0>]> -> {{.*}}[at<0>, replicated]>
func.func @pipeline_stage(%in: !dist.tensor<16x8xf16, @grid, [at<0>, local]>) -> !dist.tensor<16x8xf16, @grid, [at<0>, replicated]> {
  %s = coll.all_reduce sum %in axes [1] : !dist.tensor<16x8xf16, @grid, [at<0>, local]> -> !dist.tensor<16x8xf16, @grid, [at<0>, replicated]>
  func.return %s : !dist.tensor<16x8xf16, @grid, [at<0>, replicated]>
}

// A 0-d all-reduce has no dim to slice: left alone when not named.
// CHECK-LABEL: func.func @scalar
// CHECK:         coll.all_reduce sum %x
func.func @scalar(%x: !dist.tensor<f32, @world, [local]>) -> !dist.tensor<f32, @world, [replicated]> {
  %n = coll.all_reduce sum %x : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
  func.return %n : !dist.tensor<f32, @world, [replicated]>
}
