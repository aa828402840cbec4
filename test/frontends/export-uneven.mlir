// RUN: distir-opt %s --split-input-file -p 'fix-mesh-sizes{ranks=6}' --emit sdy | filecheck %s --check-prefix=SDY
// Programs whose sliced dims the ranks do not divide (issue 28), one per construct. The
// StableHLO + sdy export pads them (docs/export.md): the arguments are padded in the
// global view (zeros after each block up to the largest), the manual computation runs on
// equal blocks with the padding kept zero, and the results are cut back. The FileCheck
// lines check the key lines at 6 ranks; test_export_sdy.py runs every program with XLA and
// test_export_roundtrip.py re-imports every export, at 3, 5, 6 and 7 ranks (where they
// fit), against the interpreter. MLIR 19's mesh refuses them (test_export_mesh.py).

// A sliced argument on a dim of 7 (blocks of 2, 2, 2, 1, 0, 0 at 6 ranks), an elementwise map
// that makes zeros non-zero, and a dim of 2 (fewer elements than ranks).
dist.mesh @world shape = [?]
func.func @sliced_arg(%x: !dist.tensor<7x4xf32, @world, [sliced<0>]>, %s: !dist.tensor<2xf32, @world, [sliced<0>]>) -> (!dist.tensor<7x4xf32, @world, [sliced<0>]>, !dist.tensor<2xf32, @world, [sliced<0>]>) {
  %y = dist.map(%x) : (!dist.tensor<7x4xf32, @world, [sliced<0>]>) -> !dist.tensor<7x4xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %e = math.exp %a : f32
    dist.yield %e : f32
  }
  %t = dist.map(%s) : (!dist.tensor<2xf32, @world, [sliced<0>]>) -> !dist.tensor<2xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    %one = arith.constant 1.0 : f32
    %b = arith.addf %a, %one : f32
    dist.yield %b : f32
  }
  func.return %y, %t : !dist.tensor<7x4xf32, @world, [sliced<0>]>, !dist.tensor<2xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @sliced_arg(
// SDY-SAME:    %arg0: tensor<7x4xf32> {sdy.sharding = #sdy.sharding<@world, [{"x"}, {}]>}
// SDY:         %[[PAD:[a-z0-9_]+]] = stablehlo.constant dense<0.0{{.*}}> : tensor<5x4xf32>
// SDY:         %[[X:[a-z0-9_]+]] = stablehlo.concatenate %arg0, %[[PAD]], dim = 0 : (tensor<7x4xf32>, tensor<5x4xf32>) -> tensor<12x4xf32>
// SDY:         sdy.manual_computation(%[[X]], %{{.*}}) in_shardings=[<@world, [{"x"}, {}]>, <@world, [{"x"}]>] {{.*}} (%[[XB:[a-z0-9_]+]]: tensor<2x4xf32>, %{{.*}}: tensor<1xf32>)
// SDY:         %[[E:[a-z0-9_]+]] = stablehlo.exponential %[[XB]] : tensor<2x4xf32>
// SDY:         %[[HELD:[a-z0-9_]+]] = stablehlo.compare  LT, %{{.*}}, %{{.*}},  SIGNED : (tensor<2x4xi32>, tensor<2x4xi32>) -> tensor<2x4xi1>
// SDY:         stablehlo.select %[[HELD]], %[[E]], %{{.*}} : tensor<2x4xi1>, tensor<2x4xf32>
// SDY:         } : (tensor<12x4xf32>, tensor<6xf32>) -> (tensor<12x4xf32>, tensor<6xf32>)
// SDY:         stablehlo.slice %manual#0 [0:7, 0:4] : (tensor<12x4xf32>) -> tensor<7x4xf32>
// SDY:         stablehlo.slice %manual#1 [0:2] : (tensor<6xf32>) -> tensor<2xf32>

// -----

// Reductions over the uneven dim: a sum and an avg (the padding adds nothing, the avg
// divides by the dim's size over the ranks) and a max of negative numbers (the padding
// must not win: it is masked with -inf), then all_reduce.
dist.mesh @world shape = [?]
func.func @reduce_uneven(%x: !dist.tensor<11x3xf32, @world, [sliced<0>]>) -> (!dist.tensor<3xf32, @world, [replicated]>, !dist.tensor<3xf32, @world, [replicated]>, !dist.tensor<3xf32, @world, [replicated]>) {
  %s = dist.reduce_tensor sum %x dims [0] : !dist.tensor<11x3xf32, @world, [sliced<0>]> -> !dist.tensor<3xf32, @world, [local]>
  %sum = coll.all_reduce sum %s : !dist.tensor<3xf32, @world, [local]> -> !dist.tensor<3xf32, @world, [replicated]>
  %a = dist.reduce_tensor avg %x dims [0] : !dist.tensor<11x3xf32, @world, [sliced<0>]> -> !dist.tensor<3xf32, @world, [local]>
  %avg = coll.all_reduce avg %a : !dist.tensor<3xf32, @world, [local]> -> !dist.tensor<3xf32, @world, [replicated]>
  %neg = dist.map(%x) : (!dist.tensor<11x3xf32, @world, [sliced<0>]>) -> !dist.tensor<11x3xf32, @world, [sliced<0>]> {
  ^bb0(%v: f32):
    %ten = arith.constant 10.0 : f32
    %w = arith.subf %v, %ten : f32
    dist.yield %w : f32
  }
  %m = dist.reduce_tensor max %neg dims [0] : !dist.tensor<11x3xf32, @world, [sliced<0>]> -> !dist.tensor<3xf32, @world, [local]>
  %max = coll.all_reduce max %m : !dist.tensor<3xf32, @world, [local]> -> !dist.tensor<3xf32, @world, [replicated]>
  func.return %sum, %avg, %max : !dist.tensor<3xf32, @world, [replicated]>, !dist.tensor<3xf32, @world, [replicated]>, !dist.tensor<3xf32, @world, [replicated]>
}
// SDY-LABEL: func.func @reduce_uneven(
// SDY:         (%[[X:[a-z0-9_]+]]: tensor<2x3xf32>)
// SDY:         stablehlo.reduce(%[[X]] init: %{{.*}}) applies stablehlo.add across dimensions = [0]
// SDY:         %[[RED:[a-z0-9_]+]] = stablehlo.reduce(%[[X]] init: %{{.*}}) applies stablehlo.add across dimensions = [0]
// SDY:         %[[N:[a-z0-9_]+]] = stablehlo.constant dense<1.83333{{.*}}> : tensor<3xf32>
// SDY:         stablehlo.divide %[[RED]], %[[N]]
// SDY:         %[[NEGINF:[a-z0-9_]+]] = stablehlo.constant dense<0xFF800000> : tensor<2x3xf32>
// SDY:         %[[M:[a-z0-9_]+]] = stablehlo.select %{{.*}}, %{{.*}}, %[[NEGINF]] : tensor<2x3xi1>, tensor<2x3xf32>
// SDY:         stablehlo.reduce(%[[M]] init: %{{.*}}) applies stablehlo.maximum across dimensions = [0]

// -----

// A contraction over the uneven dim (Megatron's row-parallel matmul on a hidden size of
// 13): the zero padding of both operands adds nothing to the partial sums.
dist.mesh @world shape = [?]
func.func @contract_uneven(%x: !dist.tensor<4x13xf32, @world, [sliced<1>]>, %w: !dist.tensor<13x5xf32, @world, [sliced<0>]>) -> !dist.tensor<4x5xf32, @world, [replicated]> {
  %p = dist.matmul %x, %w : (!dist.tensor<4x13xf32, @world, [sliced<1>]>, !dist.tensor<13x5xf32, @world, [sliced<0>]>) -> !dist.tensor<4x5xf32, @world, [local]>
  %y = coll.all_reduce sum %p : !dist.tensor<4x5xf32, @world, [local]> -> !dist.tensor<4x5xf32, @world, [replicated]>
  func.return %y : !dist.tensor<4x5xf32, @world, [replicated]>
}
// SDY-LABEL: func.func @contract_uneven(
// SDY:         stablehlo.concatenate %arg0, %{{.*}}, dim = 1 : (tensor<4x13xf32>, tensor<4x5xf32>) -> tensor<4x18xf32>
// SDY:         stablehlo.concatenate %arg1, %{{.*}}, dim = 0 : (tensor<13x5xf32>, tensor<5x5xf32>) -> tensor<18x5xf32>
// SDY:         stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [1] x [0] : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
// SDY:         "stablehlo.all_reduce"

// -----

// Megatron's column-then-row MLP on a hidden size of 7: the sliced hidden activations
// (relu of a bias add: zeros stay zero only because they are re-zeroed) feed the
// contraction; reduce_scatter on a dim of 5, then all_gather back.
dist.mesh @world shape = [?]
func.func @mlp_rs_ag(%x: !dist.tensor<5x4xf32, @world, [replicated]>, %w1: !dist.tensor<4x7xf32, @world, [sliced<1>]>, %b1: !dist.tensor<7xf32, @world, [sliced<0>]>, %w2: !dist.tensor<7x4xf32, @world, [sliced<0>]>) -> (!dist.tensor<5x4xf32, @world, [replicated]>, !dist.tensor<5x4xf32, @world, [sliced<0>]>) {
  %h = dist.matmul %x, %w1 : (!dist.tensor<5x4xf32, @world, [replicated]>, !dist.tensor<4x7xf32, @world, [sliced<1>]>) -> !dist.tensor<5x7xf32, @world, [sliced<1>]>
  %a = dist.map(%h, %b1) : (!dist.tensor<5x7xf32, @world, [sliced<1>]>, !dist.tensor<7xf32, @world, [sliced<0>]>) -> !dist.tensor<5x7xf32, @world, [sliced<1>]> {
  ^bb0(%v: f32, %b: f32):
    %one = arith.constant 1.0 : f32
    %u = arith.addf %v, %b : f32
    %w = arith.addf %u, %one : f32
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %w, %zero : f32
    dist.yield %r : f32
  }
  %p = dist.matmul %a, %w2 : (!dist.tensor<5x7xf32, @world, [sliced<1>]>, !dist.tensor<7x4xf32, @world, [sliced<0>]>) -> !dist.tensor<5x4xf32, @world, [local]>
  %rs = coll.reduce_scatter sum %p dim 0 : !dist.tensor<5x4xf32, @world, [local]> -> !dist.tensor<5x4xf32, @world, [sliced<0>]>
  %ag = coll.all_gather %rs : !dist.tensor<5x4xf32, @world, [sliced<0>]> -> !dist.tensor<5x4xf32, @world, [replicated]>
  func.return %ag, %rs : !dist.tensor<5x4xf32, @world, [replicated]>, !dist.tensor<5x4xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @mlp_rs_ag(
// SDY:         %[[P:[a-z0-9_]+]] = stablehlo.concatenate %{{.*}}, %{{.*}}, dim = 0 : (tensor<5x4xf32>, tensor<1x4xf32>) -> tensor<6x4xf32>
// SDY:         "stablehlo.reduce_scatter"(%[[P]]) {{.*}}scatter_dimension = 0 : i64
// SDY:         }) : (tensor<6x4xf32>) -> tensor<1x4xf32>
// SDY:         %[[G:[a-z0-9_]+]] = "stablehlo.all_gather"(%{{.*}}) {{.*}} : (tensor<1x4xf32>) -> tensor<6x4xf32>
// SDY:         stablehlo.slice %[[G]] [0:5, 0:4] : (tensor<6x4xf32>) -> tensor<5x4xf32>

// -----

// all_to_all between two uneven dims (7 rows to 5 columns), a take_slice of a computed
// value and an iota on uneven dims (the padding is cut, the iota's padding re-zeroed).
dist.mesh @world shape = [?]
func.func @a2a_uneven(%x: !dist.tensor<7x5xf32, @world, [sliced<0>]>, %r: !dist.tensor<5xf32, @world, [replicated]>) -> (!dist.tensor<7x5xf32, @world, [sliced<1>]>, !dist.tensor<5xf32, @world, [sliced<0>]>, !dist.tensor<5xi32, @world, [sliced<0>]>) {
  %t = coll.all_to_all %x dim 1 : !dist.tensor<7x5xf32, @world, [sliced<0>]> -> !dist.tensor<7x5xf32, @world, [sliced<1>]>
  %n = dist.map(%r) : (!dist.tensor<5xf32, @world, [replicated]>) -> !dist.tensor<5xf32, @world, [replicated]> {
  ^bb0(%v: f32):
    %w = arith.negf %v : f32
    dist.yield %w : f32
  }
  %b = dist.take_slice %n dim 0 : !dist.tensor<5xf32, @world, [replicated]> -> !dist.tensor<5xf32, @world, [sliced<0>]>
  %i = dist.iota dim 0 : () -> !dist.tensor<5xi32, @world, [sliced<0>]>
  func.return %t, %b, %i : !dist.tensor<7x5xf32, @world, [sliced<1>]>, !dist.tensor<5xf32, @world, [sliced<0>]>, !dist.tensor<5xi32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @a2a_uneven(
// SDY:         %[[S:[a-z0-9_]+]] = stablehlo.concatenate %{{.*}}, %{{.*}}, dim = 1 : (tensor<2x5xf32>, tensor<2x1xf32>) -> tensor<2x6xf32>
// SDY:         %[[T:[a-z0-9_]+]] = "stablehlo.all_to_all"(%[[S]]) {{.*}}concat_dimension = 0 : i64{{.*}}split_dimension = 1 : i64}> : (tensor<2x6xf32>) -> tensor<12x1xf32>
// SDY:         stablehlo.slice %[[T]] [0:7, 0:1] : (tensor<12x1xf32>) -> tensor<7x1xf32>
// SDY:         stablehlo.dynamic_slice {{.*}} sizes = [1] : (tensor<6xf32>, tensor<i32>) -> tensor<1xf32>

// -----

// GPT-2's embedding with its vocabulary sliced (13 rows): each device adds the rows it
// holds (an index into its padding names another device's row), all_reduce; the
// embedding's gradient scattered into the sliced rows; bags sliced over 5 (padded bags
// gather row 0 and are re-zeroed).
dist.mesh @world shape = [?]
func.func @embedding_uneven(%t: !dist.tensor<13x4xf32, @world, [sliced<0>]>, %i: !dist.tensor<5x3xi32, @world, [replicated]>, %g: !dist.tensor<5x4xf32, @world, [replicated]>, %r: !dist.tensor<13x4xf32, @world, [replicated]>, %b: !dist.tensor<5x3xi32, @world, [sliced<0>]>) -> (!dist.tensor<5x4xf32, @world, [replicated]>, !dist.tensor<13x4xf32, @world, [sliced<0>]>, !dist.tensor<5x4xf32, @world, [sliced<0>]>) {
  %p = dist.embedding_bag %t, %i mode sum : (!dist.tensor<13x4xf32, @world, [sliced<0>]>, !dist.tensor<5x3xi32, @world, [replicated]>) -> !dist.tensor<5x4xf32, @world, [local]>
  %e = coll.all_reduce sum %p : !dist.tensor<5x4xf32, @world, [local]> -> !dist.tensor<5x4xf32, @world, [replicated]>
  %d = dist.scatter_add %i, %g : (!dist.tensor<5x3xi32, @world, [replicated]>, !dist.tensor<5x4xf32, @world, [replicated]>) -> !dist.tensor<13x4xf32, @world, [sliced<0>]>
  %m = dist.embedding_bag %r, %b mode mean : (!dist.tensor<13x4xf32, @world, [replicated]>, !dist.tensor<5x3xi32, @world, [sliced<0>]>) -> !dist.tensor<5x4xf32, @world, [sliced<0>]>
  func.return %e, %d, %m : !dist.tensor<5x4xf32, @world, [replicated]>, !dist.tensor<13x4xf32, @world, [sliced<0>]>, !dist.tensor<5x4xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @embedding_uneven(
// SDY:         (%[[T:[a-z0-9_]+]]: tensor<3x4xf32>, %{{.*}}: tensor<5x3xi32>
// SDY:         %[[SIZE:[a-z0-9_]+]] = stablehlo.subtract %{{.*}}, %{{.*}} : tensor<i32>
// SDY:         "stablehlo.gather"(%[[T]], %{{.*}})
// SDY:         "stablehlo.scatter"
// SDY:         }) : (tensor<3x4xf32>, tensor<5x3xi64>, tensor<5x3x4xf32>) -> tensor<3x4xf32>

// -----

// A reshape that keeps the uneven dim whole (7 rows of 4 as 7 rows of 2x2) and dropout
// on it: the mask is drawn at logical indices, the block's offset from partition_id.
// A reshape that merges it (5 rows of 2 as 10 elements: each rank's elements come first
// in its padded block on both sides).
dist.mesh @world shape = [?]
func.func @reshape_dropout(%x: !dist.tensor<7x4xf32, @world, [sliced<0>]>, %z: !dist.tensor<5x2xf32, @world, [sliced<0>]>) -> (!dist.tensor<7x2x2xf32, @world, [sliced<0>]>, !dist.tensor<10xf32, @world, [sliced<0>]>) {
  %y = dist.reshape %x : !dist.tensor<7x4xf32, @world, [sliced<0>]> -> !dist.tensor<7x2x2xf32, @world, [sliced<0>]>
  %d = dist.dropout %y p 0.25 seed 7 : !dist.tensor<7x2x2xf32, @world, [sliced<0>]> -> !dist.tensor<7x2x2xf32, @world, [sliced<0>]>
  %f = dist.reshape %z : !dist.tensor<5x2xf32, @world, [sliced<0>]> -> !dist.tensor<10xf32, @world, [sliced<0>]>
  func.return %d, %f : !dist.tensor<7x2x2xf32, @world, [sliced<0>]>, !dist.tensor<10xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @reshape_dropout(
// SDY:         stablehlo.reshape %{{.*}} : (tensor<2x4xf32>) -> tensor<2x2x2xf32>
// SDY:         %[[LO:[a-z0-9_]+]] = stablehlo.minimum
// SDY:         stablehlo.convert %[[LO]] : (tensor<i32>) -> tensor<i64>
// SDY:         stablehlo.reshape %{{.*}} : (tensor<1x2xf32>) -> tensor<2xf32>

// -----

// Nested slicing over two axes on one dim of 10 (blocks of 5 over axis 0, then of 2 over
// axis 1 at 2x3 ranks), gathered one axis at a time.
dist.mesh @grid shape = [2, ?]
func.func @nested(%x: !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>) -> (!dist.tensor<10x3xf32, @grid, [replicated, replicated]>, !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>) {
  %y = dist.map(%x) : (!dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>) -> !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]> {
  ^bb0(%a: f32):
    %e = math.exp %a : f32
    dist.yield %e : f32
  }
  %g1 = coll.all_gather %y axes [1] : !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]> -> !dist.tensor<10x3xf32, @grid, [sliced<0>, replicated]>
  %g0 = coll.all_gather %g1 axes [0] : !dist.tensor<10x3xf32, @grid, [sliced<0>, replicated]> -> !dist.tensor<10x3xf32, @grid, [replicated, replicated]>
  func.return %g0, %y : !dist.tensor<10x3xf32, @grid, [replicated, replicated]>, !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>
}
// SDY-LABEL: func.func @nested(
// SDY-SAME:    %arg0: tensor<10x3xf32> {sdy.sharding = #sdy.sharding<@grid, [{"x", "y"}, {}]>}
// SDY:         stablehlo.concatenate {{.*}} : (tensor<5x3xf32>, tensor<1x3xf32>, tensor<5x3xf32>, tensor<1x3xf32>) -> tensor<12x3xf32>
// SDY:         (%{{.*}}: tensor<2x3xf32>)
// SDY:         %[[G1:[a-z0-9_]+]] = "stablehlo.all_gather"{{.*}} : (tensor<2x3xf32>) -> tensor<6x3xf32>
// SDY:         stablehlo.slice %[[G1]] [0:5, 0:3] : (tensor<6x3xf32>) -> tensor<5x3xf32>
// SDY:         "stablehlo.all_gather"(%{{.*}}) {{.*}} : (tensor<5x3xf32>) -> tensor<10x3xf32>

// -----

// Nested blocks that do not sit at their padded positions: 10 rows over 3 then 2 ranks
// are blocks of 4, 4, 2, cut in 2 + 2, 2 + 2 and 1 + 1: the second block of the last
// pair starts 1 row in, where an equal-block collective puts it at 2. The export moves
// the blocks into place around the collectives (static slices per outer block, chosen
// by the device's block index): all_gather of the inner axis or both, a take_slice and
// a reduce_scatter onto the inner axis.
dist.mesh @grid shape = [?, 2]
func.func @nested_cut(%x: !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>, %r: !dist.tensor<10x3xf32, @grid, [sliced<0>, replicated]>, %a: !dist.tensor<10x4xf32, @grid, [sliced<0>, sliced<1>]>, %w: !dist.tensor<4x3xf32, @grid, [replicated, sliced<0>]>) -> (!dist.tensor<10x3xf32, @grid, [sliced<0>, replicated]>, !dist.tensor<10x3xf32, @grid, [replicated, replicated]>, !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>, !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>) {
  %y = coll.all_gather %x axes [1] : !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]> -> !dist.tensor<10x3xf32, @grid, [sliced<0>, replicated]>
  %z = coll.all_gather %x axes [0, 1] : !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]> -> !dist.tensor<10x3xf32, @grid, [replicated, replicated]>
  %t = dist.take_slice %r dim 0 axis 1 : !dist.tensor<10x3xf32, @grid, [sliced<0>, replicated]> -> !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>
  %p = dist.matmul %a, %w : (!dist.tensor<10x4xf32, @grid, [sliced<0>, sliced<1>]>, !dist.tensor<4x3xf32, @grid, [replicated, sliced<0>]>) -> !dist.tensor<10x3xf32, @grid, [sliced<0>, local]>
  %s = coll.reduce_scatter sum %p dim 0 axes [1] : !dist.tensor<10x3xf32, @grid, [sliced<0>, local]> -> !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>
  func.return %y, %z, %t, %s : !dist.tensor<10x3xf32, @grid, [sliced<0>, replicated]>, !dist.tensor<10x3xf32, @grid, [replicated, replicated]>, !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>, !dist.tensor<10x3xf32, @grid, [sliced<0, 0>, sliced<0, 1>]>
}
// SDY-LABEL: func.func @nested_cut(
// SDY:         %[[G:[a-z0-9_]+]] = "stablehlo.all_gather"{{.*}} : (tensor<2x3xf32>) -> tensor<4x3xf32>
// SDY:         %[[LAST:[a-z0-9_]+]] = stablehlo.slice %[[G]] [2:3, 0:3] : (tensor<4x3xf32>) -> tensor<1x3xf32>
// SDY:         %[[BLOCK:[a-z0-9_]+]] = stablehlo.compare  EQ, %{{.*}}, %{{.*}},  SIGNED : (tensor<4x3xi32>, tensor<4x3xi32>) -> tensor<4x3xi1>
// SDY:         stablehlo.select %[[BLOCK]], %{{.*}}, %{{.*}} : tensor<4x3xi1>, tensor<4x3xf32>

// -----

// An all_reduce on a value sliced on another axis's uneven dim (a 2-D mesh: 7 rows over
// its second axis, partial sums over its first).
dist.mesh @grid shape = [2, ?]
func.func @all_reduce_2d(%x: !dist.tensor<7x4xf32, @grid, [sliced<1>, sliced<0>]>, %w: !dist.tensor<4x2xf32, @grid, [sliced<0>, replicated]>) -> !dist.tensor<7x2xf32, @grid, [replicated, sliced<0>]> {
  %p = dist.matmul %x, %w : (!dist.tensor<7x4xf32, @grid, [sliced<1>, sliced<0>]>, !dist.tensor<4x2xf32, @grid, [sliced<0>, replicated]>) -> !dist.tensor<7x2xf32, @grid, [local, sliced<0>]>
  %y = coll.all_reduce sum %p axes [0] : !dist.tensor<7x2xf32, @grid, [local, sliced<0>]> -> !dist.tensor<7x2xf32, @grid, [replicated, sliced<0>]>
  func.return %y : !dist.tensor<7x2xf32, @grid, [replicated, sliced<0>]>
}
// SDY-LABEL: func.func @all_reduce_2d(
// SDY-SAME:    %arg0: tensor<7x4xf32> {sdy.sharding = #sdy.sharding<@grid, [{"y"}, {"x"}]>}
// SDY:         "stablehlo.all_reduce"(%{{.*}}) {{.*}}replica_groups = dense<{{\[\[}}0, 3], [1, 4], [2, 5]]>
// SDY:         }) : (tensor<3x2xf32>) -> tensor<3x2xf32>
