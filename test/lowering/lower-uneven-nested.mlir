// RUN: distir-opt %s -p 'fix-mesh-sizes{ranks=6},lower-collectives' | filecheck %s
// Nested blocks whose padded buffer is as long as the largest outer block but does not
// hold them at their places: 10 rows over 3 ranks are outer blocks 4, 4, 2; over 2 more
// the inner blocks are 2, 2 | 2, 2 | 1, 1, and the padded buffer of 2 blocks of 2 has
// 4 rows like the largest outer block, but the last block's inner blocks sit at rows 0
// and 1, not 0 and 2. The collective runs on a padded buffer and the blocks move into
// place after it (rt.unpad_blocks), or before it (rt.pad_blocks); before, it ran
// straight on the result's buffer and the last rows came back as zeros.

dist.mesh @g shape = [3, 2]

// CHECK-LABEL: func.func @gathered
// CHECK-SAME: (%[[X:.*]]: memref<2xf32>) -> memref<4xf32>
// CHECK: %[[Y:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK: %[[TMP:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK: %{{.*}}, %[[LEN:.*]] = rt.span @g axes [0] size 10 : index, index
// CHECK: nccl.all_gather %[[X]], %[[TMP]], %{{.*}}, %{{.*}} count 2
// CHECK-NEXT: rt.unpad_blocks %[[TMP]], %[[Y]], %[[LEN]], %{{.*}} dim 0 counts [2]
// CHECK: func.return %[[Y]] : memref<4xf32>
func.func @gathered(%x: !dist.tensor<10xf32, @g, [sliced<0, 0>, sliced<0, 1>]>) -> !dist.tensor<10xf32, @g, [sliced<0>, replicated]> {
  %y = coll.all_gather %x axes [1] : !dist.tensor<10xf32, @g, [sliced<0, 0>, sliced<0, 1>]> -> !dist.tensor<10xf32, @g, [sliced<0>, replicated]>
  func.return %y : !dist.tensor<10xf32, @g, [sliced<0>, replicated]>
}

// CHECK-LABEL: func.func @scattered
// CHECK-SAME: (%[[X:.*]]: memref<4xf32>) -> memref<2xf32>
// CHECK: %[[TMP:.*]] = rt.alloc : () -> memref<4xf32>
// CHECK: rt.pad_blocks %[[X]], %[[TMP]], %{{.*}}, %{{.*}} dim 0 counts [2]
// CHECK: nccl.reduce_scatter sum %[[TMP]], %{{.*}}, %{{.*}}, %{{.*}} count 2
func.func @scattered(%x: !dist.tensor<10xf32, @g, [sliced<0>, local]>) -> !dist.tensor<10xf32, @g, [sliced<0, 0>, sliced<0, 1>]> {
  %y = coll.reduce_scatter sum %x dim 0 axes [1] : !dist.tensor<10xf32, @g, [sliced<0>, local]> -> !dist.tensor<10xf32, @g, [sliced<0, 0>, sliced<0, 1>]>
  func.return %y : !dist.tensor<10xf32, @g, [sliced<0, 0>, sliced<0, 1>]>
}
