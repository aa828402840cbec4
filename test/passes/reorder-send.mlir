// RUN: distir-opt %s -p reorder-send | filecheck %s
// RUN: not distir-opt %s -p 'reorder-send{targets=plain}' 2>&1 | filecheck %s --check-prefix=NOAG
// RUN: not distir-opt %s -p 'reorder-send{targets=sum_ag}' 2>&1 | filecheck %s --check-prefix=NOTSEND

// NOAG: 'reorder-send' pass: target %plain: cannot reorder the send with an all_gather: its operand %x is not the result of a coll.all_gather
// NOTSEND: 'reorder-send' pass: target %sum_ag: is not the result of a coll.send

dist.mesh @grid shape = [2, 4] axes = ["pp", "tp"]
dist.mesh @world shape = [4]

// Only the slice crosses the stages; the receiving stage gathers it.
// CHECK-LABEL: func.func @pipeline
// CHECK:         %[[S:.*]] = coll.send %sum_rs to 1 : {{.*}}[at<0>, sliced<0>]> -> {{.*}}[at<1>, sliced<0>]>
// CHECK-NEXT:    %[[G:.*]] = coll.all_gather %[[S]] axes [1] : {{.*}}[at<1>, sliced<0>]> -> {{.*}}[at<1>, replicated]>
// CHECK-NEXT:    func.return %[[G]]
func.func @pipeline(%sum_rs: !dist.tensor<16x8xf16, @grid, [at<0>, sliced<0>]>) -> !dist.tensor<16x8xf16, @grid, [at<1>, replicated]> {
  %sum_ag = coll.all_gather %sum_rs axes [1] : !dist.tensor<16x8xf16, @grid, [at<0>, sliced<0>]> -> !dist.tensor<16x8xf16, @grid, [at<0>, replicated]>
  %recv = coll.send %sum_ag to 1 : !dist.tensor<16x8xf16, @grid, [at<0>, replicated]> -> !dist.tensor<16x8xf16, @grid, [at<1>, replicated]>
  func.return %recv : !dist.tensor<16x8xf16, @grid, [at<1>, replicated]>
}

// A send of a value that is not gathered stays.
// CHECK-LABEL: func.func @others
// CHECK:         coll.send %x to 2
func.func @others(%x: !dist.tensor<16xf32, @world, [at<0>]>) -> !dist.tensor<16xf32, @world, [at<2>]> {
  %plain = coll.send %x to 2 : !dist.tensor<16xf32, @world, [at<0>]> -> !dist.tensor<16xf32, @world, [at<2>]>
  func.return %plain : !dist.tensor<16xf32, @world, [at<2>]>
}

// Only the blocks (13 rows over 4 ranks: 4, 4, 4, 1) cross the stages.
// CHECK-LABEL: func.func @uneven_pipeline
// CHECK:         %[[S:.*]] = coll.send %sum_rs to 1 : !dist.tensor<13x3xf16, @grid, [at<0>, sliced<0>]> -> !dist.tensor<13x3xf16, @grid, [at<1>, sliced<0>]>
// CHECK-NEXT:    %[[G:.*]] = coll.all_gather %[[S]] axes [1] : {{.*}}[at<1>, sliced<0>]> -> {{.*}}[at<1>, replicated]>
func.func @uneven_pipeline(%sum_rs: !dist.tensor<13x3xf16, @grid, [at<0>, sliced<0>]>) -> !dist.tensor<13x3xf16, @grid, [at<1>, replicated]> {
  %sum_ag = coll.all_gather %sum_rs axes [1] : !dist.tensor<13x3xf16, @grid, [at<0>, sliced<0>]> -> !dist.tensor<13x3xf16, @grid, [at<0>, replicated]>
  %recv = coll.send %sum_ag to 1 : !dist.tensor<13x3xf16, @grid, [at<0>, replicated]> -> !dist.tensor<13x3xf16, @grid, [at<1>, replicated]>
  func.return %recv : !dist.tensor<13x3xf16, @grid, [at<1>, replicated]>
}
