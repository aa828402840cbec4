// RUN: distir-opt %s -p split-allreduce | filecheck %s
// RUN: distir-opt %s -p 'split-allreduce{strategy=reduce-bcast root=2 targets=sum}' | filecheck %s --check-prefix=BCAST
// RUN: distir-opt %s -p 'split-allreduce{dim=1 targets=sum}' | filecheck %s --check-prefix=DIM1

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]
dist.mesh @any shape = [?]

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

// Without dim=, a dim the ranks divide: a decode step's 2x48 over 4 ranks splits dim 1.
// CHECK-LABEL: func.func @decode
// CHECK:         %[[RS:.*]] = coll.reduce_scatter sum %p dim 1 : {{.*}}<2x48xf32, @world, [local]> -> {{.*}}[sliced<1>]>
// CHECK-NEXT:    coll.all_gather %[[RS]] : {{.*}}[sliced<1>]> -> {{.*}}[replicated]>
func.func @decode(%p: !dist.tensor<2x48xf32, @world, [local]>) -> !dist.tensor<2x48xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %p : !dist.tensor<2x48xf32, @world, [local]> -> !dist.tensor<2x48xf32, @world, [replicated]>
  func.return %y : !dist.tensor<2x48xf32, @world, [replicated]>
}

// On a [?] mesh: the dim sharing most factors with what the function already slices
// (x and w 64 ways: the ranks divide 64, so 48 keeps 1, 2, 4, 8 and 16 ranks).
// CHECK-LABEL: func.func @decode_any_ranks
// CHECK:         coll.reduce_scatter sum %p dim 1 : {{.*}}<2x48xf32, @any, [local]> -> {{.*}}[sliced<1>]>
func.func @decode_any_ranks(%x: !dist.tensor<2x64xf32, @any, [sliced<1>]>, %w: !dist.tensor<64x48xf32, @any, [sliced<0>]>) -> !dist.tensor<2x48xf32, @any, [replicated]> {
  %p = dist.matmul %x, %w : (!dist.tensor<2x64xf32, @any, [sliced<1>]>, !dist.tensor<64x48xf32, @any, [sliced<0>]>) -> !dist.tensor<2x48xf32, @any, [local]>
  %y = coll.all_reduce sum %p : !dist.tensor<2x48xf32, @any, [local]> -> !dist.tensor<2x48xf32, @any, [replicated]>
  func.return %y : !dist.tensor<2x48xf32, @any, [replicated]>
}

// On a [?] mesh with nothing sliced: the largest dim.
// CHECK-LABEL: func.func @largest
// CHECK:         coll.reduce_scatter sum %g dim 1 : {{.*}}<3x96xf32, @any, [local]> -> {{.*}}[sliced<1>]>
func.func @largest(%g: !dist.tensor<3x96xf32, @any, [local]>) -> !dist.tensor<3x96xf32, @any, [replicated]> {
  %s = coll.all_reduce sum %g : !dist.tensor<3x96xf32, @any, [local]> -> !dist.tensor<3x96xf32, @any, [replicated]>
  func.return %s : !dist.tensor<3x96xf32, @any, [replicated]>
}

// No dim the 4 ranks divide (uneven blocks): the dim with the least padding, 6 rows as
// blocks of 2, 2, 2, 0 (8 for 6) against 3 columns as 1, 1, 1, 0 (4 for 3), the larger
// on a tie.
// CHECK-LABEL: func.func @no_dim_fits
// CHECK:         %[[RS:.*]] = coll.reduce_scatter sum %g dim 0 : !dist.tensor<6x3xf32, @world, [local]> -> !dist.tensor<6x3xf32, @world, [sliced<0>]>
// CHECK-NEXT:    coll.all_gather %[[RS]] : !dist.tensor<6x3xf32, @world, [sliced<0>]> -> !dist.tensor<6x3xf32, @world, [replicated]>
func.func @no_dim_fits(%g: !dist.tensor<6x3xf32, @world, [local]>) -> !dist.tensor<6x3xf32, @world, [replicated]> {
  %s = coll.all_reduce sum %g : !dist.tensor<6x3xf32, @world, [local]> -> !dist.tensor<6x3xf32, @world, [replicated]>
  func.return %s : !dist.tensor<6x3xf32, @world, [replicated]>
}

// Uneven blocks: 13 rows over 4 ranks (4, 4, 4, 1) pad less than 5 columns (2, 2, 1, 0).
// CHECK-LABEL: func.func @uneven_least_padding
// CHECK:         coll.reduce_scatter sum %g dim 0 : !dist.tensor<13x5xf32, @world, [local]> -> !dist.tensor<13x5xf32, @world, [sliced<0>]>
func.func @uneven_least_padding(%g: !dist.tensor<13x5xf32, @world, [local]>) -> !dist.tensor<13x5xf32, @world, [replicated]> {
  %s = coll.all_reduce sum %g : !dist.tensor<13x5xf32, @world, [local]> -> !dist.tensor<13x5xf32, @world, [replicated]>
  func.return %s : !dist.tensor<13x5xf32, @world, [replicated]>
}
