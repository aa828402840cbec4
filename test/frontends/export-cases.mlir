// RUN: distir-opt %s --split-input-file -p 'fix-mesh-sizes{ranks=4}' --emit sdy | filecheck %s --check-prefix=SDY
// RUN: distir-opt %s --split-input-file -p 'fix-mesh-sizes{ranks=4}' --emit mesh | filecheck %s --check-prefix=MESH
// Small programs for the exporters, one per case: the FileCheck lines check the key
// lines of both exports; test_export_sdy.py runs every case with XLA on 1, 2, 4 and 8
// devices against the interpreter, test_export_mesh.py verifies every case with mlir-opt-19.

// A data-parallel gradient average: the signature in JAX's global view (local = unreduced),
// the body one device's program.
dist.mesh @world shape = [?]
func.func @grad_avg(%g: !dist.tensor<8x4xf32, @world, [local]>, %lr: f32) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  %avg = coll.all_reduce avg %g : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [replicated]>
  %step = dist.map(%avg, %lr) : (!dist.tensor<8x4xf32, @world, [replicated]>, f32) -> !dist.tensor<8x4xf32, @world, [replicated]> {
  ^bb0(%x: f32, %l: f32):
    %y = arith.mulf %x, %l : f32
    dist.yield %y : f32
  }
  func.return %step : !dist.tensor<8x4xf32, @world, [replicated]>
}
// SDY:       sdy.mesh @world = <["x"=4]>
// SDY-LABEL: func.func @grad_avg(
// SDY-SAME:    %arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@world, [{}, {}], unreduced={"x"}>}
// SDY-SAME:    %arg1: tensor<f32> {sdy.sharding = #sdy.sharding<@world, []>}
// SDY:         sdy.manual_computation(%arg0, %arg1) {{.*}} manual_axes={"x"} (%[[G:[a-z0-9_]+]]: tensor<8x4xf32>, %[[LR:[a-z0-9_]+]]: tensor<f32>)
// SDY:         %[[SUM:.*]] = "stablehlo.all_reduce"(%[[G]]) {{.*}}replica_groups = dense<{{\[\[}}0, 1, 2, 3]]>
// SDY:         stablehlo.add
// SDY:         %[[AVG:.*]] = stablehlo.divide %[[SUM]], %{{.*}} : tensor<8x4xf32>
// SDY:         %[[L:.*]] = stablehlo.broadcast_in_dim %[[LR]], dims = [] : (tensor<f32>) -> tensor<8x4xf32>
// SDY:         %[[Y:.*]] = stablehlo.multiply %[[AVG]], %[[L]] : tensor<8x4xf32>
// SDY:         sdy.return %[[Y]] : tensor<8x4xf32>
// MESH:       mesh.mesh @world(shape = 4)
// MESH-LABEL: func.func @grad_avg(
// MESH-SAME:    %[[G:[a-z0-9_]+]]: tensor<8x4xf32> {mesh.sharding = #mesh.shard<@world, {{\[\[}}], []]>, distir.placements = "[local]"}
// MESH:         %[[SUM:.*]] = mesh.all_reduce %[[G]] on @world mesh_axes = [0] : tensor<8x4xf32> -> tensor<8x4xf32>
// MESH:         %[[AVG:.*]] = arith.divf %[[SUM]], %{{.*}} : tensor<8x4xf32>
// MESH:         linalg.generic {{.*}} ins(%[[AVG]], %{{.*}} : tensor<8x4xf32>, f32)
// MESH:           arith.mulf
// MESH:           linalg.yield

// -----

// Megatron's sliced matmul: partial sums, reduce_scatter, a broadcasting map with a
// lower-rank operand, all_gather.
dist.mesh @world shape = [?]
func.func @mm_rs_ag(%x: !dist.tensor<4x8x16xf32, @world, [sliced<2>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>, %b: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<4x8x8xf32, @world, [replicated]> {
  %y = dist.matmul %x, %w : (!dist.tensor<4x8x16xf32, @world, [sliced<2>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<4x8x8xf32, @world, [local]>
  %rs = coll.reduce_scatter sum %y dim 0 : !dist.tensor<4x8x8xf32, @world, [local]> -> !dist.tensor<4x8x8xf32, @world, [sliced<0>]>
  %biased = dist.map(%rs, %b) : (!dist.tensor<4x8x8xf32, @world, [sliced<0>]>, !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<4x8x8xf32, @world, [sliced<0>]> {
  ^bb0(%s: f32, %c: f32):
    %z = arith.addf %s, %c : f32
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %z, %zero : f32
    dist.yield %r : f32
  }
  %ag = coll.all_gather %biased : !dist.tensor<4x8x8xf32, @world, [sliced<0>]> -> !dist.tensor<4x8x8xf32, @world, [replicated]>
  func.return %ag : !dist.tensor<4x8x8xf32, @world, [replicated]>
}
// SDY-LABEL: func.func @mm_rs_ag(
// SDY-SAME:    %arg0: tensor<4x8x16xf32> {sdy.sharding = #sdy.sharding<@world, [{}, {}, {"x"}]>}
// SDY-SAME:    %arg1: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@world, [{"x"}, {}]>}
// SDY:         (%[[X:[a-z0-9_]+]]: tensor<4x8x4xf32>, %[[W:[a-z0-9_]+]]: tensor<4x8xf32>, %[[B:[a-z0-9_]+]]: tensor<8xf32>)
// SDY:         %[[Y:.*]] = stablehlo.dot_general %[[X]], %[[W]], contracting_dims = [2] x [0] : (tensor<4x8x4xf32>, tensor<4x8xf32>) -> tensor<4x8x8xf32>
// SDY:         %[[RS:.*]] = "stablehlo.reduce_scatter"(%[[Y]]) {{.*}}scatter_dimension = 0
// SDY:         }) : (tensor<4x8x8xf32>) -> tensor<1x8x8xf32>
// SDY:         stablehlo.broadcast_in_dim %[[B]], dims = [2] : (tensor<8xf32>) -> tensor<1x8x8xf32>
// SDY:         %[[BIASED:.*]] = stablehlo.maximum
// SDY:         "stablehlo.all_gather"(%[[BIASED]]) <{all_gather_dim = 0 : i64
// SDY-SAME:      : (tensor<1x8x8xf32>) -> tensor<4x8x8xf32>
// MESH-LABEL: func.func @mm_rs_ag(
// MESH-SAME:    %[[X:[a-z0-9_]+]]: tensor<4x8x4xf32> {mesh.sharding = #mesh.shard<@world, {{\[\[}}], [], [0]]>}
// MESH:         %[[ACC:.*]] = linalg.fill
// MESH:         %[[Y:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[X]], %{{.*}} : tensor<4x8x4xf32>, tensor<4x8xf32>) outs(%[[ACC]] : tensor<4x8x8xf32>)
// MESH:         %[[RS:.*]] = mesh.reduce_scatter %[[Y]] on @world mesh_axes = [0] scatter_axis = 0 : tensor<4x8x8xf32> -> tensor<1x8x8xf32>
// MESH:         %[[BIASED:.*]] = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>
// MESH:         mesh.all_gather %[[BIASED]] on @world mesh_axes = [0] gather_axis = 0 : tensor<1x8x8xf32> -> tensor<4x8x8xf32>

// -----

// A 2-D mesh: one dim sliced by both axes in a given nesting order (sliced<d, k>), a
// reduce_scatter nested inside an existing slicing, gathers over several axes, a batched
// matmul and a reduction of a sliced dim (partial results, completed by an all_reduce).
dist.mesh @grid shape = [2, ?] axes = ["dp", "tp"]
func.func @two_axes(%a: !dist.tensor<8x4xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>, %p: !dist.tensor<8x4xf32, @grid, [sliced<0>, local]>, %l: !dist.tensor<4x8x2xf32, @grid, [replicated, sliced<0>]>, %r: !dist.tensor<4x2x8xf32, @grid, [replicated, sliced<0>]>) -> (!dist.tensor<8x4xf32, @grid, [replicated, replicated]>, !dist.tensor<8x4xf32, @grid, [sliced<0>, sliced<0>]>, !dist.tensor<f32, @grid, [replicated, replicated]>) {
  %full = coll.all_gather %a axes [1, 0] : !dist.tensor<8x4xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> -> !dist.tensor<8x4xf32, @grid, [replicated, replicated]>
  %rs = coll.reduce_scatter sum %p dim 0 axes [1] : !dist.tensor<8x4xf32, @grid, [sliced<0>, local]> -> !dist.tensor<8x4xf32, @grid, [sliced<0>, sliced<0>]>
  %mm = dist.matmul %l, %r : (!dist.tensor<4x8x2xf32, @grid, [replicated, sliced<0>]>, !dist.tensor<4x2x8xf32, @grid, [replicated, sliced<0>]>) -> !dist.tensor<4x8x8xf32, @grid, [replicated, sliced<0>]>
  %part = dist.reduce_tensor max %mm dims [0, 2] : !dist.tensor<4x8x8xf32, @grid, [replicated, sliced<0>]> -> !dist.tensor<8xf32, @grid, [replicated, local]>
  %m = coll.all_reduce max %part axes [1] : !dist.tensor<8xf32, @grid, [replicated, local]> -> !dist.tensor<8xf32, @grid, [replicated, replicated]>
  %n = dist.reduce_tensor sum %m dims [0] : !dist.tensor<8xf32, @grid, [replicated, replicated]> -> !dist.tensor<f32, @grid, [replicated, replicated]>
  func.return %full, %rs, %n : !dist.tensor<8x4xf32, @grid, [replicated, replicated]>, !dist.tensor<8x4xf32, @grid, [sliced<0>, sliced<0>]>, !dist.tensor<f32, @grid, [replicated, replicated]>
}
// SDY:       sdy.mesh @grid = <["dp"=2, "tp"=2]>
// SDY-LABEL: func.func @two_axes(
// SDY-SAME:    #sdy.sharding<@grid, [{"tp", "dp"}, {}]>
// SDY-SAME:    #sdy.sharding<@grid, [{"dp"}, {}], unreduced={"tp"}>
// SDY:         out_shardings=[<@grid, [{}, {}]>, <@grid, [{"dp", "tp"}, {}]>, <@grid, []>]
// SDY:         "stablehlo.all_gather"(%{{.*}}) <{all_gather_dim = 0 : i64, {{.*}}replica_groups = dense<{{\[\[}}0, 2, 1, 3]]>
// SDY:         "stablehlo.reduce_scatter"(%{{.*}}) <{{.*}}replica_groups = dense<{{\[\[}}0, 1], [2, 3]]>{{.*}}scatter_dimension = 0
// SDY:         stablehlo.dot_general %{{.*}}, %{{.*}}, batching_dims = [0] x [0], contracting_dims = [2] x [1]
// SDY:         stablehlo.reduce(%{{.*}} init: %{{.*}}) applies stablehlo.maximum across dimensions = [0, 2]
// MESH:       mesh.mesh @grid(shape = 2x2)
// MESH-LABEL: func.func @two_axes(
// MESH-SAME:    tensor<2x4xf32> {mesh.sharding = #mesh.shard<@grid, {{\[\[}}1, 0], []]>}
// MESH:         mesh.all_gather %{{.*}} on @grid mesh_axes = [1, 0] gather_axis = 0 : tensor<2x4xf32> -> tensor<8x4xf32>
// MESH:         mesh.reduce_scatter %{{.*}} on @grid mesh_axes = [1] scatter_axis = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// MESH:         linalg.reduce ins(%{{.*}} : tensor<2x8x8xf32>) outs(%{{.*}} : tensor<8xf32>) dimensions = [0, 2]
// MESH:           arith.maximumf
// MESH:         mesh.all_reduce %{{.*}} on @grid mesh_axes = [1] reduction = <max> : tensor<8xf32> -> tensor<8xf32>

// -----

// A view mesh: collectives over view axes run over the root axes they are made of.
dist.mesh @hw shape = [2, 2] axes = ["node", "gpu"]
dist.mesh @flat shape = [4] view @hw [[0, 1]]
func.func @view(%x: !dist.tensor<16x4xf32, @flat, [local]>) -> (!dist.tensor<16x4xf32, @flat, [sliced<0>]>, !dist.tensor<16x4xf32, @hw, [sliced<0>, replicated]>) {
  %h = dist.remesh %x : !dist.tensor<16x4xf32, @flat, [local]> -> !dist.tensor<16x4xf32, @hw, [local, local]>
  %rs = coll.reduce_scatter sum %h dim 0 axes [1] : !dist.tensor<16x4xf32, @hw, [local, local]> -> !dist.tensor<16x4xf32, @hw, [local, sliced<0>]>
  %ar = coll.all_reduce sum %rs axes [0] : !dist.tensor<16x4xf32, @hw, [local, sliced<0>]> -> !dist.tensor<16x4xf32, @hw, [replicated, sliced<0>]>
  %t = coll.all_to_all %ar dim 1 axes [1] : !dist.tensor<16x4xf32, @hw, [replicated, sliced<0>]> -> !dist.tensor<16x4xf32, @hw, [replicated, sliced<1>]>
  %g = coll.all_gather %t axes [1] : !dist.tensor<16x4xf32, @hw, [replicated, sliced<1>]> -> !dist.tensor<16x4xf32, @hw, [replicated, replicated]>
  %f = dist.remesh %g : !dist.tensor<16x4xf32, @hw, [replicated, replicated]> -> !dist.tensor<16x4xf32, @flat, [replicated]>
  %s = dist.take_slice %f dim 0 : !dist.tensor<16x4xf32, @flat, [replicated]> -> !dist.tensor<16x4xf32, @flat, [sliced<0>]>
  %sh = dist.remesh %s : !dist.tensor<16x4xf32, @flat, [sliced<0>]> -> !dist.tensor<16x4xf32, @hw, [sliced<0>, sliced<0>]>
  %o = coll.all_gather %sh axes [1] : !dist.tensor<16x4xf32, @hw, [sliced<0>, sliced<0>]> -> !dist.tensor<16x4xf32, @hw, [sliced<0>, replicated]>
  func.return %s, %o : !dist.tensor<16x4xf32, @flat, [sliced<0>]>, !dist.tensor<16x4xf32, @hw, [sliced<0>, replicated]>
}
// SDY:       sdy.mesh @hw = <["node"=2, "gpu"=2]>
// SDY-NOT:   sdy.mesh @flat
// SDY-LABEL: func.func @view(
// SDY-SAME:    unreduced={"node", "gpu"}
// SDY:         out_shardings=[<@hw, [{"node", "gpu"}, {}]>, <@hw, [{"node"}, {}]>]
// SDY:         "stablehlo.reduce_scatter"{{.*}}replica_groups = dense<{{\[\[}}0, 1], [2, 3]]>
// SDY:         "stablehlo.all_reduce"{{.*}}replica_groups = dense<{{\[\[}}0, 2], [1, 3]]>
// SDY:         "stablehlo.all_to_all"{{.*}}concat_dimension = 0 : i64, replica_groups = dense<{{\[\[}}0, 1], [2, 3]]>{{.*}}split_count = 2 : i64, split_dimension = 1 : i64
// SDY:         stablehlo.partition_id
// SDY:         stablehlo.dynamic_slice
// SDY:         "stablehlo.all_gather"{{.*}}replica_groups = dense<{{\[\[}}0, 1], [2, 3]]>
// MESH:       mesh.mesh @hw(shape = 2x2)
// MESH-LABEL: func.func @view(
// MESH:         mesh.reduce_scatter %{{.*}} on @hw mesh_axes = [1] scatter_axis = 0
// MESH:         mesh.all_reduce %{{.*}} on @hw mesh_axes = [0]
// MESH:         mesh.all_to_all %{{.*}} on @hw mesh_axes = [1] split_axis = 1 concat_axis = 0 : tensor<8x4xf32> -> tensor<16x2xf32>
// MESH:         mesh.all_slice %{{.*}} on @hw mesh_axes = [0, 1] slice_axis = 0 : tensor<16x4xf32> -> tensor<4x4xf32>
// MESH:         mesh.all_gather %{{.*}} on @hw mesh_axes = [1] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>

// -----

// Reduce to a root, broadcast from it, send along a pipeline axis; a result held at<1>.
dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]
func.func @rooted(%x: !dist.tensor<4x4xf32, @grid, [local, local]>, %y: !dist.tensor<4xi32, @grid, [at<0>, replicated]>) -> (!dist.tensor<4x4xf32, @grid, [replicated, replicated]>, !dist.tensor<4xi32, @grid, [at<1>, replicated]>) {
  %r = coll.reduce sum %x root 1 axes [1] : !dist.tensor<4x4xf32, @grid, [local, local]> -> !dist.tensor<4x4xf32, @grid, [local, at<1>]>
  %a = coll.all_reduce sum %r axes [0] : !dist.tensor<4x4xf32, @grid, [local, at<1>]> -> !dist.tensor<4x4xf32, @grid, [replicated, at<1>]>
  %b = coll.broadcast %a axes [1] : !dist.tensor<4x4xf32, @grid, [replicated, at<1>]> -> !dist.tensor<4x4xf32, @grid, [replicated, replicated]>
  %s = coll.send %y to 1 axes [0] : !dist.tensor<4xi32, @grid, [at<0>, replicated]> -> !dist.tensor<4xi32, @grid, [at<1>, replicated]>
  func.return %b, %s : !dist.tensor<4x4xf32, @grid, [replicated, replicated]>, !dist.tensor<4xi32, @grid, [at<1>, replicated]>
}
// SDY-LABEL: func.func @rooted(
// SDY-SAME:    %arg1: tensor<4xi32> {sdy.sharding = #sdy.sharding<@grid, [{}]>}
// SDY:         %[[R:.*]] = "stablehlo.all_reduce"
// SDY:         "stablehlo.all_gather"(%{{.*}}) <{all_gather_dim = 0 : i64{{.*}}: (tensor<1x4x4xf32>) -> tensor<2x4x4xf32>
// SDY:         stablehlo.slice %{{.*}} [1:2, 0:4, 0:4]
// SDY:         %[[S:.*]] = "stablehlo.collective_permute"(%{{.*}}) <{{.*}}source_target_pairs = dense<{{\[\[}}0, 2], [1, 3]]>
// SDY:         "stablehlo.all_gather"(%{{.*}}) {{.*}}replica_groups = dense<{{\[\[}}0, 2], [1, 3]]>
// SDY:         stablehlo.slice %{{.*}} [1:2, 0:4]
// MESH-LABEL: func.func @rooted(
// MESH-SAME:    distir.placements = "[at<0>, replicated]"
// MESH:         mesh.reduce %{{.*}} on @grid mesh_axes = [1] root = [1] : (tensor<4x4xf32>) -> tensor<4x4xf32>
// MESH:         mesh.broadcast %{{.*}} on @grid mesh_axes = [1] root = [1] : (tensor<4x4xf32>) -> tensor<4x4xf32>
// MESH:         %[[PP:.*]] = mesh.process_multi_index on @grid axes = [0] : index
// MESH:         scf.if %{{.*}} {
// MESH-NEXT:      mesh.send %{{.*}} on @grid mesh_axes = [0] destination = [1] : (tensor<4xi32>) -> tensor<4xi32>
// MESH:         scf.if %{{.*}} -> (tensor<4xi32>) {
// MESH-NEXT:      mesh.recv %{{.*}} on @grid mesh_axes = [0] source = [0] : (tensor<4xi32>) -> tensor<4xi32>

// -----

// Dropout on a sliced 2-D value draws at logical indices: the block offset comes from the
// device's coordinate.
dist.mesh @world shape = [?]
func.func @dropout(%x: !dist.tensor<8x16xf16, @world, [sliced<1>]>) -> !dist.tensor<8x16xf16, @world, [sliced<1>]> {
  %d = dist.dropout %x p 0.25 seed 7 : !dist.tensor<8x16xf16, @world, [sliced<1>]> -> !dist.tensor<8x16xf16, @world, [sliced<1>]>
  func.return %d : !dist.tensor<8x16xf16, @world, [sliced<1>]>
}
// SDY-LABEL: func.func @dropout(
// SDY:         stablehlo.iota dim = 0 : tensor<8x4xi64>
// SDY:         stablehlo.iota dim = 1 : tensor<8x4xi64>
// SDY:         stablehlo.partition_id : tensor<ui32>
// SDY:         stablehlo.shift_right_logical
// SDY:         %[[KEEP:.*]] = stablehlo.compare  GE, %{{.*}}, %{{.*}},  SIGNED
// SDY:         stablehlo.select %[[KEEP]]
// SDY:         stablehlo.convert %{{.*}} : (tensor<8x4xf32>) -> tensor<8x4xf16>
// MESH-LABEL: func.func @dropout(
// MESH:         %[[C:.*]] = mesh.process_multi_index on @world axes = [0] : index
// MESH:         %[[START:.*]] = arith.muli %[[C]], %{{.*}} : index
// MESH:         linalg.generic
// MESH:           linalg.index 1 : index
// MESH-NEXT:      arith.addi %{{.*}}, %[[START]] : index
// MESH:           arith.cmpi uge

// -----

// Embedding bags: a row-sliced table gives partial sums (the rows a device holds), a
// table of several tables with the table dim sliced, mean and max modes.
dist.mesh @world shape = [?]
func.func @bags(%t: !dist.tensor<16x4xf32, @world, [sliced<0>]>, %i: !dist.tensor<8x3xi32, @world, [replicated]>, %tt: !dist.tensor<8x6x4xf32, @world, [sliced<0>]>, %ii: !dist.tensor<8x5x2xi64, @world, [sliced<0>]>) -> (!dist.tensor<8x4xf32, @world, [replicated]>, !dist.tensor<8x5x4xf32, @world, [sliced<0>]>, !dist.tensor<8x5x4xf32, @world, [sliced<0>]>) {
  %part = dist.embedding_bag %t, %i mode sum : (!dist.tensor<16x4xf32, @world, [sliced<0>]>, !dist.tensor<8x3xi32, @world, [replicated]>) -> !dist.tensor<8x4xf32, @world, [local]>
  %sum = coll.all_reduce sum %part : !dist.tensor<8x4xf32, @world, [local]> -> !dist.tensor<8x4xf32, @world, [replicated]>
  %mean = dist.embedding_bag %tt, %ii mode mean : (!dist.tensor<8x6x4xf32, @world, [sliced<0>]>, !dist.tensor<8x5x2xi64, @world, [sliced<0>]>) -> !dist.tensor<8x5x4xf32, @world, [sliced<0>]>
  %max = dist.embedding_bag %tt, %ii mode max : (!dist.tensor<8x6x4xf32, @world, [sliced<0>]>, !dist.tensor<8x5x2xi64, @world, [sliced<0>]>) -> !dist.tensor<8x5x4xf32, @world, [sliced<0>]>
  func.return %sum, %mean, %max : !dist.tensor<8x4xf32, @world, [replicated]>, !dist.tensor<8x5x4xf32, @world, [sliced<0>]>, !dist.tensor<8x5x4xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @bags(
// SDY:         %[[HELD:.*]] = stablehlo.and
// SDY:         "stablehlo.gather"(%{{.*}}, %{{.*}}) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>
// SDY:         stablehlo.reduce(%{{.*}} init: %{{.*}}) applies stablehlo.add across dimensions = [1]
// SDY:         "stablehlo.gather"{{.*}}operand_batching_dims = [0], start_indices_batching_dims = [0]
// SDY:         applies stablehlo.maximum across dimensions = [2]
// MESH-LABEL: func.func @bags(
// MESH:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<8x3xi32>)
// MESH:           %[[ROW:.*]] = arith.index_cast %{{.*}} : i32 to index
// MESH:           tensor.extract %{{.*}} : tensor<4x4xf32>
// MESH:         mesh.all_reduce

// -----

// Scatters and sorts: an embedding's gradient into a row-sliced table (each device adds
// the updates of the rows it holds; indices outside them add nothing), data-parallel
// bags (partial sums, one all-reduce), several tables with the table dim sliced; an
// argsort along the unsliced dim of a batch-sliced operand.
dist.mesh @world shape = [?]
func.func @scatter_sort(%i: !dist.tensor<8x3xi32, @world, [replicated]>, %u: !dist.tensor<8x4xf32, @world, [replicated]>, %j: !dist.tensor<8x1xi64, @world, [sliced<0>]>, %v: !dist.tensor<8x4xf32, @world, [sliced<0>]>, %ti: !dist.tensor<8x5x2xi32, @world, [sliced<0>]>, %tu: !dist.tensor<8x5x4xf32, @world, [sliced<0>]>, %x: !dist.tensor<8x16xf32, @world, [sliced<0>]>, %k: !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<16x4xf32, @world, [sliced<0>]>, !dist.tensor<16x4xf32, @world, [replicated]>, !dist.tensor<8x6x4xf32, @world, [sliced<0>]>, !dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) {
  %g = dist.scatter_add %i, %u : (!dist.tensor<8x3xi32, @world, [replicated]>, !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<16x4xf32, @world, [sliced<0>]>
  %p = dist.scatter_add %j, %v : (!dist.tensor<8x1xi64, @world, [sliced<0>]>, !dist.tensor<8x4xf32, @world, [sliced<0>]>) -> !dist.tensor<16x4xf32, @world, [local]>
  %s = coll.all_reduce sum %p : !dist.tensor<16x4xf32, @world, [local]> -> !dist.tensor<16x4xf32, @world, [replicated]>
  %t = dist.scatter_add %ti, %tu : (!dist.tensor<8x5x2xi32, @world, [sliced<0>]>, !dist.tensor<8x5x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x6x4xf32, @world, [sliced<0>]>
  %sx, %sk = dist.sort %x, %k dim 1 : (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>)
  func.return %g, %s, %t, %sx, %sk : !dist.tensor<16x4xf32, @world, [sliced<0>]>, !dist.tensor<16x4xf32, @world, [replicated]>, !dist.tensor<8x6x4xf32, @world, [sliced<0>]>, !dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @scatter_sort(
// SDY:         %[[HELD:.*]] = stablehlo.and
// SDY:         "stablehlo.scatter"(%{{.*}}) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [2], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 2>
// SDY:         stablehlo.add
// SDY:         "stablehlo.all_reduce"
// SDY:         "stablehlo.scatter"{{.*}}input_batching_dims = [0], scatter_indices_batching_dims = [0]
// SDY:         "stablehlo.sort"(%{{.*}}, %{{.*}}) <{dimension = 1 : i64, is_stable = true}>
// SDY:           stablehlo.compare  LT, {{.*}}  TOTALORDER
// MESH-LABEL: func.func @scatter_sort(
// MESH:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "reduction"]{{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x3xi32>, tensor<8x4xf32>)
// MESH:           arith.cmpi eq
// MESH:         mesh.all_reduce
// MESH:         %[[RANK:[a-z0-9_]+]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// MESH:           arith.cmpf olt
// MESH:         linalg.generic {{.*}} ins(%[[RANK]], %{{.*}} : tensor<{{[0-9]+}}x16xi64>, tensor<{{[0-9]+}}x16xf32>)
// MESH:           arith.select

// -----

// Fused collectives are exported unfused; an overlap is its chain. The region of the
// fused all-reduce uses a take_slice of an argument (in StableHLO the device receives its
// block, as shard_map's in_specs give it) and an inner scalar all_reduce.
dist.mesh @world shape = [?]
func.func @fused(%g: !dist.tensor<16xf32, @world, [local]>, %p: !dist.tensor<16xf32, @world, [replicated]>, %x: !dist.tensor<4x8xf32, @world, [sliced<1>]>, %w: !dist.tensor<8x4xf32, @world, [sliced<0>]>) -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<f32, @world, [replicated]>, !dist.tensor<4x4xf32, @world, [replicated]>) {
  %p1, %n = coll.fused_all_reduce sum %g dim 0 gather [true, false] : !dist.tensor<16xf32, @world, [local]> -> (!dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<f32, @world, [replicated]>) {
  ^bb0(%gs: !dist.tensor<16xf32, @world, [sliced<0>]>):
    %ps = dist.take_slice %p dim 0 : !dist.tensor<16xf32, @world, [replicated]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
    %u = dist.map(%ps, %gs) : (!dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
    ^bb0(%a: f32, %b: f32):
      %c = arith.subf %a, %b : f32
      dist.yield %c : f32
    }
    %part = dist.reduce_tensor sum %u dims [0] : !dist.tensor<16xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>
    %norm = coll.all_reduce sum %part : !dist.tensor<f32, @world, [local]> -> !dist.tensor<f32, @world, [replicated]>
    coll.yield %u, %norm : !dist.tensor<16xf32, @world, [sliced<0>]>, !dist.tensor<f32, @world, [replicated]>
  }
  %y = coll.overlap chunks 2 -> !dist.tensor<4x4xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<4x8xf32, @world, [sliced<1>]>, !dist.tensor<8x4xf32, @world, [sliced<0>]>) -> !dist.tensor<4x4xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<4x4xf32, @world, [local]> -> !dist.tensor<4x4xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<4x4xf32, @world, [replicated]>
  }
  func.return %p1, %n, %y : !dist.tensor<16xf32, @world, [replicated]>, !dist.tensor<f32, @world, [replicated]>, !dist.tensor<4x4xf32, @world, [replicated]>
}
// SDY-LABEL: func.func @fused(
// SDY:         sdy.manual_computation(%arg0, %arg1, %arg2, %arg3, %arg1) in_shardings=[{{.*}}, <@world, [{"x"}]>] {{.*}}, %[[PS:[a-z0-9_]+]]: tensor<4xf32>)
// SDY:         %[[GS:.*]] = "stablehlo.reduce_scatter"
// SDY-NOT:     stablehlo.dynamic_slice
// SDY:         %[[U:.*]] = stablehlo.subtract %[[PS]], %[[GS]] : tensor<4xf32>
// SDY:         %[[PART:.*]] = stablehlo.reduce(%[[U]] init:
// SDY:         "stablehlo.all_reduce"(%[[PART]])
// SDY:         "stablehlo.all_gather"(%[[U]])
// SDY:         stablehlo.dot_general
// SDY:         "stablehlo.all_reduce"
// SDY-NOT:     coll.
// MESH-LABEL: func.func @fused(
// MESH:         %[[GS:.*]] = mesh.reduce_scatter %{{.*}} on @world mesh_axes = [0] scatter_axis = 0 : tensor<16xf32> -> tensor<4xf32>
// MESH:         %[[PS:.*]] = mesh.all_slice %{{.*}} on @world mesh_axes = [0] slice_axis = 0 : tensor<16xf32> -> tensor<4xf32>
// MESH:         linalg.generic {{.*}} ins(%[[PS]], %[[GS]] : tensor<4xf32>, tensor<4xf32>)
// MESH:         mesh.all_reduce %{{.*}} on @world mesh_axes = [0] : tensor<f32> -> tensor<f32>
// MESH:         mesh.all_gather %{{.*}} on @world mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<16xf32>

// -----

// The other fused collectives, and the functional primitives (unplaced values are held
// by every device).
dist.mesh @world shape = [?]
func.func @fused_more(%x: !dist.tensor<8x8xf32, @world, [local]>, %y: !dist.tensor<8x8xf32, @world, [sliced<0>]>, %z: !dist.tensor<8x8xf32, @world, [at<0>]>) -> (!dist.tensor<8x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8xf32, @world, [sliced<1>]>, !dist.tensor<8x8xf32, @world, [at<0>]>, !dist.tensor<8x8xf32, @world, [replicated]>, !dist.tensor<8x8xf32, @world, [replicated]>) {
  %a = coll.fused_reduce_scatter max %x dim 0 : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [sliced<0>]> {
  ^bb0(%s: !dist.tensor<8x8xf32, @world, [sliced<0>]>):
    coll.yield %s : !dist.tensor<8x8xf32, @world, [sliced<0>]>
  }
  %b = coll.fused_all_to_all %y dim 1 : !dist.tensor<8x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x8xf32, @world, [sliced<1>]> {
  ^bb0(%s: !dist.tensor<8x8xf32, @world, [sliced<1>]>):
    %t = dist.map(%s) : (!dist.tensor<8x8xf32, @world, [sliced<1>]>) -> !dist.tensor<8x8xf32, @world, [sliced<1>]> {
    ^bb0(%e: f32):
      %two = arith.constant 2.0 : f32
      %m = arith.mulf %e, %two : f32
      dist.yield %m : f32
    }
    coll.yield %t : !dist.tensor<8x8xf32, @world, [sliced<1>]>
  }
  %c = coll.fused_reduce min %x root 0 : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [at<0>]> {
  ^bb0(%s: !dist.tensor<8x8xf32, @world, [at<0>]>):
    coll.yield %s : !dist.tensor<8x8xf32, @world, [at<0>]>
  }
  %d = coll.fused_broadcast %z : !dist.tensor<8x8xf32, @world, [at<0>]> -> !dist.tensor<8x8xf32, @world, [replicated]> {
  ^bb0(%s: !dist.tensor<8x8xf32, @world, [at<0>]>):
    coll.yield %s : !dist.tensor<8x8xf32, @world, [at<0>]>
  }
  %red = dist.reduce prod %x : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [unplaced]>
  %sl = dist.slice %red dim 1 : !dist.tensor<8x8xf32, @world, [unplaced]> -> !dist.tensor<8x8xf32, @world, [sliced<1>]>
  %jn = dist.join %sl : !dist.tensor<8x8xf32, @world, [sliced<1>]> -> !dist.tensor<8x8xf32, @world, [unplaced]>
  %e = dist.repl %jn : !dist.tensor<8x8xf32, @world, [unplaced]> -> !dist.tensor<8x8xf32, @world, [replicated]>
  func.return %a, %b, %c, %d, %e : !dist.tensor<8x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8xf32, @world, [sliced<1>]>, !dist.tensor<8x8xf32, @world, [at<0>]>, !dist.tensor<8x8xf32, @world, [replicated]>, !dist.tensor<8x8xf32, @world, [replicated]>
}
// SDY-LABEL: func.func @fused_more(
// SDY:         "stablehlo.reduce_scatter"
// SDY:         stablehlo.maximum
// SDY:         "stablehlo.all_to_all"(%{{.*}}) <{{.*}}concat_dimension = 0 : i64{{.*}}split_count = 4 : i64, split_dimension = 1 : i64}> : (tensor<2x8xf32>) -> tensor<8x2xf32>
// SDY:         stablehlo.multiply
// SDY:         "stablehlo.all_reduce"
// SDY:         stablehlo.minimum
// SDY:         "stablehlo.all_reduce"
// SDY:         stablehlo.multiply
// SDY:         stablehlo.dynamic_slice
// SDY:         "stablehlo.all_gather"
// MESH-LABEL: func.func @fused_more(
// MESH:         mesh.reduce_scatter %{{.*}} reduction = <max> scatter_axis = 0
// MESH:         mesh.all_to_all %{{.*}} on @world mesh_axes = [0] split_axis = 1 concat_axis = 0 : tensor<2x8xf32> -> tensor<8x2xf32>
// MESH:         mesh.reduce %{{.*}} reduction = <min> root = [0]
// MESH:         mesh.broadcast %{{.*}} root = [0]
// MESH:         mesh.all_reduce %{{.*}} reduction = <product>
// MESH:         mesh.all_slice
// MESH:         mesh.all_gather

// -----

// Map bodies beyond arithmetic: comparisons, selects, integer ops and casts, several
// results, size-1 broadcasting; scalar code outside a map; dist.cast.
dist.mesh @world shape = [?]
func.func @scalars(%x: !dist.tensor<8x4xf32, @world, [sliced<0>]>, %k: !dist.tensor<1x4xi32, @world, [replicated]>, %s: f32) -> (!dist.tensor<8x4xf32, @world, [sliced<0>]>, !dist.tensor<8x4xi32, @world, [sliced<0>]>, !dist.tensor<8x4xf16, @world, [sliced<0>]>) {
  %half = arith.constant 0.5 : f32
  %hs = arith.mulf %s, %half : f32
  %y, %n = dist.map(%x, %k, %hs) : (!dist.tensor<8x4xf32, @world, [sliced<0>]>, !dist.tensor<1x4xi32, @world, [replicated]>, f32) -> (!dist.tensor<8x4xf32, @world, [sliced<0>]>, !dist.tensor<8x4xi32, @world, [sliced<0>]>) {
  ^bb0(%a: f32, %b: i32, %c: f32):
    %bf = arith.sitofp %b : i32 to f32
    %big = arith.cmpf ogt, %a, %c : f32
    %t = math.tanh %a : f32
    %e = math.exp %bf : f32
    %v = arith.select %big, %t, %e : f32
    %ai = arith.fptosi %a : f32 to i32
    %three = arith.constant 3 : i32
    %q = arith.remsi %ai, %three : i32
    %m = arith.muli %q, %b : i32
    dist.yield %v, %m : f32, i32
  }
  %h = dist.cast %y : !dist.tensor<8x4xf32, @world, [sliced<0>]> -> !dist.tensor<8x4xf16, @world, [sliced<0>]>
  func.return %y, %n, %h : !dist.tensor<8x4xf32, @world, [sliced<0>]>, !dist.tensor<8x4xi32, @world, [sliced<0>]>, !dist.tensor<8x4xf16, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @scalars(
// SDY:         %[[HS:.*]] = stablehlo.multiply %{{.*}}, %{{.*}} : tensor<f32>
// SDY:         stablehlo.broadcast_in_dim %{{.*}}, dims = [0, 1] : (tensor<1x4xi32>) -> tensor<2x4xi32>
// SDY:         stablehlo.broadcast_in_dim %[[HS]], dims = [] : (tensor<f32>) -> tensor<2x4xf32>
// SDY:         stablehlo.compare  GT, %{{.*}}, %{{.*}},  FLOAT
// SDY:         stablehlo.tanh
// SDY:         stablehlo.select
// SDY:         stablehlo.remainder
// SDY:         stablehlo.convert %{{.*}} : (tensor<2x4xf32>) -> tensor<2x4xf16>
// MESH-LABEL: func.func @scalars(
// MESH:         %[[HS:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// MESH:         linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (0, d1)>, affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>]
// MESH-SAME:      ins(%{{.*}}, %{{.*}}, %[[HS]] : tensor<2x4xf32>, tensor<1x4xi32>, f32)
// MESH:           arith.cmpf ogt
// MESH:           math.tanh
// MESH:           arith.remsi
// MESH:           linalg.yield %{{.*}}, %{{.*}} : f32, i32
// MESH:         arith.truncf %{{.*}} : tensor<2x4xf32> to tensor<2x4xf16>

// -----

// dist.cast has numpy's astype meaning: to bool is "nonzero" (not the low bit), f16 to
// bf16 goes through f32 in MLIR (no single arith op).
dist.mesh @world shape = [?]
func.func @casts(%x: !dist.tensor<8xf32, @world, [sliced<0>]>, %i: !dist.tensor<8xi32, @world, [sliced<0>]>, %h: !dist.tensor<8xf16, @world, [sliced<0>]>) -> (!dist.tensor<8xi1, @world, [sliced<0>]>, !dist.tensor<8xi1, @world, [sliced<0>]>, !dist.tensor<8xbf16, @world, [sliced<0>]>, !dist.tensor<8xf32, @world, [sliced<0>]>) {
  %xb = dist.cast %x : !dist.tensor<8xf32, @world, [sliced<0>]> -> !dist.tensor<8xi1, @world, [sliced<0>]>
  %ib = dist.cast %i : !dist.tensor<8xi32, @world, [sliced<0>]> -> !dist.tensor<8xi1, @world, [sliced<0>]>
  %hb = dist.cast %h : !dist.tensor<8xf16, @world, [sliced<0>]> -> !dist.tensor<8xbf16, @world, [sliced<0>]>
  %bf = dist.cast %ib : !dist.tensor<8xi1, @world, [sliced<0>]> -> !dist.tensor<8xf32, @world, [sliced<0>]>
  func.return %xb, %ib, %hb, %bf : !dist.tensor<8xi1, @world, [sliced<0>]>, !dist.tensor<8xi1, @world, [sliced<0>]>, !dist.tensor<8xbf16, @world, [sliced<0>]>, !dist.tensor<8xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @casts(
// SDY:         stablehlo.convert %{{.*}} : (tensor<2xf32>) -> tensor<2xi1>
// SDY:         stablehlo.convert %{{.*}} : (tensor<2xi32>) -> tensor<2xi1>
// SDY:         stablehlo.convert %{{.*}} : (tensor<2xf16>) -> tensor<2xbf16>
// MESH-LABEL: func.func @casts(
// MESH:         arith.cmpf une, %{{.*}}, %{{.*}} : tensor<2xf32>
// MESH:         arith.cmpi ne, %{{.*}}, %{{.*}} : tensor<2xi32>
// MESH:         %[[W:.*]] = arith.extf %{{.*}} : tensor<2xf16> to tensor<2xf32>
// MESH-NEXT:    arith.truncf %[[W]] : tensor<2xf32> to tensor<2xbf16>
// MESH:         arith.uitofp %{{.*}} : tensor<2xi1> to tensor<2xf32>

// -----

// The layout ops distir-import makes of StableHLO: each device transposes, reshapes,
// slices and concatenates its own block; an iota counts from the block's first index.
dist.mesh @world shape = [?]
func.func @layout(%x: !dist.tensor<8x16xf32, @world, [sliced<0>]>, %y: !dist.tensor<8x4xf32, @world, [sliced<0>]>) -> (!dist.tensor<16x8xf32, @world, [sliced<1>]>, !dist.tensor<8x4x4xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>, !dist.tensor<8x8xf32, @world, [sliced<0>]>) {
  %t = dist.transpose %x perm [1, 0] : !dist.tensor<8x16xf32, @world, [sliced<0>]> -> !dist.tensor<16x8xf32, @world, [sliced<1>]>
  %r = dist.reshape %x : !dist.tensor<8x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x4x4xf32, @world, [sliced<0>]>
  %i = dist.iota dim 0 : () -> !dist.tensor<8x16xi32, @world, [sliced<0>]>
  %s = dist.extract_slice %x offsets [0, 2] strides [1, 3] : !dist.tensor<8x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x4xf32, @world, [sliced<0>]>
  %cat = dist.concat %s, %y dim 1 : (!dist.tensor<8x4xf32, @world, [sliced<0>]>, !dist.tensor<8x4xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [sliced<0>]>
  func.return %t, %r, %i, %cat : !dist.tensor<16x8xf32, @world, [sliced<1>]>, !dist.tensor<8x4x4xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>, !dist.tensor<8x8xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @layout(
// SDY:         stablehlo.transpose %[[X:[a-z0-9_]+]], dims = [1, 0] : (tensor<2x16xf32>) -> tensor<16x2xf32>
// SDY:         stablehlo.reshape %[[X]] : (tensor<2x16xf32>) -> tensor<2x4x4xf32>
// SDY:         %[[START:.*]] = stablehlo.multiply %{{.*}}, %{{.*}} : tensor<i32>
// SDY:         %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<2x16xi32>
// SDY:         %[[OFF:.*]] = stablehlo.broadcast_in_dim %[[START]], dims = [] : (tensor<i32>) -> tensor<2x16xi32>
// SDY:         %i = stablehlo.add %[[IOTA]], %[[OFF]] : tensor<2x16xi32>
// SDY:         %[[S:.*]] = stablehlo.slice %[[X]] [0:2, 2:12:3] : (tensor<2x16xf32>) -> tensor<2x4xf32>
// SDY:         stablehlo.concatenate %[[S]], %{{.*}}, dim = 1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
// MESH-LABEL: func.func @layout(
// MESH:         linalg.transpose ins(%[[X:[a-z0-9_]+]] : tensor<2x16xf32>) outs(%{{.*}} : tensor<16x2xf32>) permutation = [1, 0]
// MESH:         %[[SHAPE:.*]] = arith.constant dense<[2, 4, 4]> : tensor<3xi64>
// MESH:         tensor.reshape %[[X]](%[[SHAPE]]) : (tensor<2x16xf32>, tensor<3xi64>) -> tensor<2x4x4xf32>
// MESH:         %[[START:.*]] = arith.muli %{{.*}}, %{{.*}} : index
// MESH:         linalg.generic
// MESH:           %[[I:.*]] = linalg.index 0 : index
// MESH-NEXT:      %[[G:.*]] = arith.addi %[[I]], %[[START]] : index
// MESH-NEXT:      arith.index_cast %[[G]] : index to i32
// MESH:         %[[S:.*]] = tensor.extract_slice %[[X]][0, 2] [2, 4] [1, 3] : tensor<2x16xf32> to tensor<2x4xf32>
// MESH:         tensor.concat dim(1) %[[S]], %{{.*}} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>

// -----

// to_local and from_local see the same buffers with another meaning: nothing to export.
dist.mesh @world shape = [4]
func.func @views(%x: !dist.tensor<16xf32, @world, [sliced<0>]>) -> !dist.tensor<16xf32, @world, [sliced<0>]> {
  %l = dist.to_local %x : !dist.tensor<16xf32, @world, [sliced<0>]> -> !dist.tensor<4xf32, @world, [local]>
  %d = dist.map(%l) : (!dist.tensor<4xf32, @world, [local]>) -> !dist.tensor<4xf32, @world, [local]> {
  ^bb0(%a: f32):
    %s = arith.addf %a, %a : f32
    dist.yield %s : f32
  }
  %g = dist.from_local %d : !dist.tensor<4xf32, @world, [local]> -> !dist.tensor<16xf32, @world, [sliced<0>]>
  func.return %g : !dist.tensor<16xf32, @world, [sliced<0>]>
}
// SDY-LABEL: func.func @views(
// SDY:         (%[[X:[a-z0-9_]+]]: tensor<4xf32>)
// SDY-NEXT:      %[[D:.*]] = stablehlo.add %[[X]], %[[X]] : tensor<4xf32>
// SDY-NEXT:      sdy.return %[[D]] : tensor<4xf32>
// MESH-LABEL: func.func @views(
// MESH:         linalg.generic {{.*}} ins(%[[X:[a-z0-9_]+]] : tensor<4xf32>)

// -----

// coll.permute: a ring step (StableHLO's collective_permute; MLIR's mesh.shift on one
// axis), explicit pairs (ranks nobody sends to get zeros), a ring over two axes.
dist.mesh @grid shape = [2, ?] axes = ["a", "b"]
func.func @permutes(%x: !dist.tensor<4x2xf32, @grid, [replicated, local]>, %y: !dist.tensor<4xf32, @grid, [local, local]>) -> (!dist.tensor<4x2xf32, @grid, [replicated, local]>, !dist.tensor<4x2xf32, @grid, [replicated, local]>, !dist.tensor<4xf32, @grid, [local, local]>) {
  %ring = coll.permute %x offset 1 axes [1] : !dist.tensor<4x2xf32, @grid, [replicated, local]> -> !dist.tensor<4x2xf32, @grid, [replicated, local]>
  %pair = coll.permute %x pairs [[0, 1]] axes [1] : !dist.tensor<4x2xf32, @grid, [replicated, local]> -> !dist.tensor<4x2xf32, @grid, [replicated, local]>
  %both = coll.permute %y offset -1 axes [0, 1] : !dist.tensor<4xf32, @grid, [local, local]> -> !dist.tensor<4xf32, @grid, [local, local]>
  func.return %ring, %pair, %both : !dist.tensor<4x2xf32, @grid, [replicated, local]>, !dist.tensor<4x2xf32, @grid, [replicated, local]>, !dist.tensor<4xf32, @grid, [local, local]>
}
// SDY-LABEL: func.func @permutes(
// SDY:         %ring = "stablehlo.collective_permute"(%{{.*}}) <{{.*}}source_target_pairs = dense<{{\[\[}}0, 1], [1, 0], [2, 3], [3, 2]]> : tensor<4x2xi64>}>
// SDY:         %pair = "stablehlo.collective_permute"(%{{.*}}) <{{.*}}source_target_pairs = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>}>
// SDY:         %both = "stablehlo.collective_permute"(%{{.*}}) <{{.*}}source_target_pairs = dense<{{\[\[}}0, 3], [1, 0], [2, 1], [3, 2]]> : tensor<4x2xi64>}>
// MESH-LABEL: func.func @permutes(
// MESH:         %ring = mesh.shift %{{.*}} on @grid mesh_axes = [1] shift_axis = 1 offset = 1 rotate : tensor<4x2xf32> -> tensor<4x2xf32>
// MESH:         scf.if %{{.*}} {
// MESH-NEXT:      mesh.send %{{.*}} on @grid mesh_axes = [1] destination = [1]
// MESH:         %[[ZEROS:.*]] = linalg.fill
// MESH:         %pair = scf.if %{{.*}} -> (tensor<4x2xf32>) {
// MESH-NEXT:      %[[R:.*]] = mesh.recv %{{.*}} on @grid mesh_axes = [1] source = [0]
// MESH-NEXT:      scf.yield %[[R]] : tensor<4x2xf32>
// MESH-NEXT:    } else {
// MESH-NEXT:      scf.yield %[[ZEROS]] : tensor<4x2xf32>
// MESH:         mesh.send %{{.*}} on @grid mesh_axes = [0, 1] destination = [1, 1]
