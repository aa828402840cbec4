// P2's hierarchical AllReduce programs on @hw (2 nodes x 4 GPUs) mean the flat AllReduce.
// RUN: distir-run %examples/hierarchical_allreduce.mlir --backend interpret --func hierarchical --compare-func flat | filecheck %s --check-prefix=H
// RUN: distir-run %examples/hierarchical_allreduce.mlir --backend interpret --func reduce_allreduce_broadcast --compare-func flat --ranks 8 --seed 5 | filecheck %s --check-prefix=RB

// H: @hierarchical on 8 rank(s), backend interpret: 1 result(s)
// H-NEXT: result0: 1024xf32 on @world [replicated] -> 1024 float32
// H-NEXT: results agree (max abs diff {{.*}}, tolerance rtol 1e-05 {{.*}}) [@hierarchical vs @flat]

// RB: results agree ({{.*}}) [@reduce_allreduce_broadcast vs @flat]
