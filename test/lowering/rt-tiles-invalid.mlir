// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Malformed fused computation-collective operators are rejected with a diagnostic naming
// the op and the rule.

dist.mesh @world shape = [2]
func.func @red_shape(%a: memref<4x64xf32>, %w: memref<64x32xf32>, %o: memref<4x32xf32>, %red: memref<2x4x32xf32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  %s1 = rt.stream 1 : !rt.stream
  // CHECK: 'rt.matmul_all_reduce' op reduction buffer must have shape [2, 4, 16], got [2, 4, 32]
  rt.matmul_all_reduce sum %a, %w, %o, %red, %c, %s, %s1 dim 1 tiles 2 order remote_first : (memref<4x64xf32>, memref<64x32xf32>, memref<4x32xf32>, memref<2x4x32xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
  func.return
}

// -----

dist.mesh @world shape = [2]
func.func @tiles_divide(%a: memref<4x64xf32>, %w: memref<64x32xf32>, %o: memref<4x32xf32>, %red: memref<2x4x16xf32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  %s1 = rt.stream 1 : !rt.stream
  // CHECK: 'rt.matmul_all_reduce' op dim 1 of the producer's result (32) is not divisible into 2 blocks of 3 tiles
  rt.matmul_all_reduce sum %a, %w, %o, %red, %c, %s, %s1 dim 1 tiles 3 order remote_first : (memref<4x64xf32>, memref<64x32xf32>, memref<4x32xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> ()
  func.return
}

// -----

dist.mesh @world shape = [2]
func.func @streams_last(%a: memref<4x64xf32>, %w: memref<64x32xf32>, %o: memref<4x16xf32>, %red: memref<2x4x16xf32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'rt.matmul_reduce_scatter' op takes 7 operands (producer inputs, output, reduction buffer, communicator, compute stream, communication stream), got 6
  rt.matmul_reduce_scatter sum %a, %w, %o, %red, %c, %s dim 1 tiles 2 order remote_first : (memref<4x64xf32>, memref<64x32xf32>, memref<4x16xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream) -> ()
  func.return
}

// -----

dist.mesh @world shape = [2]
func.func @a2a_output(%x: memref<1x8x16xf32>, %w: memref<1x16x32xf32>, %o: memref<2x4x16xf32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  %s1 = rt.stream 1 : !rt.stream
  // CHECK: 'rt.matmul_all_to_all' op output must have shape [2, 4, 32] for a group of 2 rank(s) (the producer's dim 1 divided by it, dim 0 multiplied), got [2, 4, 16]
  rt.matmul_all_to_all %x, %w, %o, %c, %s, %s1 dim 1 concat 0 tiles 2 order remote_first : (memref<1x8x16xf32>, memref<1x16x32xf32>, memref<2x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
  ^bb0(%t: memref<1x2x32xf32>):
  }
  func.return
}

// -----

dist.mesh @world shape = [2]
func.func @epilogue_arg(%x: memref<1x8x16xf32>, %w: memref<1x16x32xf32>, %o: memref<2x4x32xf32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  %s1 = rt.stream 1 : !rt.stream
  // CHECK: 'rt.matmul_all_to_all' op the epilogue region takes one argument, the tile (memref<1x2x32xf32>)
  rt.matmul_all_to_all %x, %w, %o, %c, %s, %s1 dim 1 concat 0 tiles 2 order remote_first : (memref<1x8x16xf32>, memref<1x16x32xf32>, memref<2x4x32xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
  ^bb0(%t: memref<1x4x32xf32>):
  }
  func.return
}

// -----

dist.mesh @world shape = [2]
func.func @embedding_row0(%t: memref<2x100x16xf32>, %i: memref<2x8x4xi32>, %r: memref<2xf32>, %o: memref<4x4x16xf32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  %s1 = rt.stream 1 : !rt.stream
  // CHECK: 'rt.embedding_all_to_all' op operand 2 (the table block's first row) must be an index, got memref<2xf32>
  rt.embedding_all_to_all %t, %i, %r, %o, %c, %s, %s1 dim 1 concat 0 tiles 2 order remote_first : (memref<2x100x16xf32>, memref<2x8x4xi32>, memref<2xf32>, memref<4x4x16xf32>, !rt.comm, !rt.stream, !rt.stream) -> () {
  ^bb0(%tile: memref<2x2x16xf32>):
  }
  func.return
}
