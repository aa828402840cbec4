// RUN: distir-opt %examples/adam.mlir -p 'split-allreduce,reorder-allgather,fuse-maps,slice-state{targets=m,v},fuse-allreduce,fix-mesh-sizes{ranks=2},lower-overlap,lower-to-kernels,lower-collectives' -o %t.mlir
// RUN: distir-opt %t.mlir | diff - %t.mlir
// RUN: distir-run %t.mlir --ranks 2 --backend local | filecheck %s
// RUN: not distir-run %t.mlir --ranks 2 --backend interpret 2>&1 | filecheck %s --check-prefix=INTERP
// A lowered program prints and reads back, and distir-run runs it as it is (its
// dist-level signature is kept in rt.dist_type).
// CHECK: @adam on 2 rank(s), backend local: 3 result(s)
// CHECK-NEXT: result0: 1048576xf32 on @world [replicated] -> 1048576 float32
// CHECK-NEXT: result1: 1048576xf32 on @world [sliced<0>] -> 1048576 float32
// INTERP: distir-run: the program is lowered (rt/nccl ops)
