// distir-run on the contract's primitives.mlir: every collective agrees with its
// functional-primitive expansion (and with the other schedules of the same reduction).
// RUN: distir-run %examples/primitives.mlir --backend interpret --func all_reduce --compare-func all_reduce_as_primitives --ranks 4 | filecheck %s --check-prefix=AR
// RUN: distir-run %examples/primitives.mlir --backend interpret --func reduce_scatter_all_gather --compare-func reduce_scatter_all_gather_as_primitives --ranks 4 | filecheck %s --check-prefix=RSAG
// RUN: distir-run %examples/primitives.mlir --backend interpret --func reduce_broadcast --compare-func all_reduce | filecheck %s --check-prefix=RB
// RUN: distir-run %examples/primitives.mlir --backend interpret --func all_to_all --ranks 4 | filecheck %s --check-prefix=A2A
// RUN: not distir-run %examples/primitives.mlir --backend interpret --func all_reduce --compare-func all_to_all --ranks 4 2>&1 | filecheck %s --check-prefix=SIG
// RUN: not distir-run %examples/primitives.mlir --backend interpret --func all_reduce --ranks 2 2>&1 | filecheck %s --check-prefix=RANKS

// AR: @all_reduce on 4 rank(s), backend interpret: 1 result(s)
// AR-NEXT: result0: 64x8xf32 on @world [replicated] -> 64x8 float32
// AR-NEXT: results agree (max abs diff 0, tolerance rtol 1e-05 + atol 1e-06 x max|ref| {{.*}}) [@all_reduce vs @all_reduce_as_primitives]

// RSAG: results agree (max abs diff 0, {{.*}}) [@reduce_scatter_all_gather vs @reduce_scatter_all_gather_as_primitives]

// RB: @reduce_broadcast on 4 rank(s)
// RB: results agree (max abs diff 0, {{.*}}) [@reduce_broadcast vs @all_reduce]

// A2A: result0: 64x8xf32 on @world [sliced<1>] -> 64x8 float32

// SIG: distir-run: cannot compare @all_reduce with @all_to_all: argument 0 differs: 'x' takes a 4x64x8 float32 array, 'x' a 64x8 float32 array

// RANKS: distir-run: --ranks 2 does not fit mesh @world of shape [4]: the mesh has 4 ranks, the run has 2
