// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Malformed runtime calls are rejected with a diagnostic naming the op and the rule.

dist.mesh @world shape = [4]
func.func @count_mismatch(%a: memref<64xf32>, %b: memref<64xf32>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'nccl.all_reduce' op buffer 0 has 64 elements, count is 32
  nccl.all_reduce sum %a, %b, %c, %s count 32 : (memref<64xf32>, memref<64xf32>, !rt.comm, !rt.stream) -> ()
  func.return
}

// -----

dist.mesh @world shape = [4]
func.func @datatype_mismatch(%a: memref<64xf32>, %b: memref<64xf16>) {
  %c = rt.comm @world axes [0] : !rt.comm
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'nccl.all_reduce' op buffers must share one datatype, got f32, f16
  nccl.all_reduce sum %a, %b, %c, %s count 64 : (memref<64xf32>, memref<64xf16>, !rt.comm, !rt.stream) -> ()
  func.return
}

// -----

dist.mesh @world shape = [4]
func.func @block_not_divisible(%a: memref<64xf32>) {
  %i = rt.group_rank @world axes [0] : index
  // CHECK: 'rt.block' op dim 0 of size 64 is not divisible into 3 blocks
  %v = rt.block %a, %i dim 0 count 3 : (memref<64xf32>, index) -> memref<21xf32>
  func.return
}

// -----

dist.mesh @world shape = [4]
func.func @bad_axes() {
  // CHECK: 'rt.comm' op axes must be distinct axes of @world (rank 1), got [1]
  %c = rt.comm @world axes [1] : !rt.comm
  func.return
}

// -----

dist.mesh @world shape = [4]
rt.kernel @k shape [4] {
^bb0(%a: memref<4xf32>, %i: index):
  %x = memref.load %a[%i] : memref<4xf32>
  memref.store %x, %a[%i] : memref<4xf32>
}
func.func @launch_types(%a: memref<8xf32>) {
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'rt.launch' op arguments of @k must have types (memref<4xf32>, !rt.stream), got (memref<8xf32>, !rt.stream)
  rt.launch @k(%a, %s) : (memref<8xf32>, !rt.stream) -> ()
  func.return
}

// -----

func.func @copy_blocks_indivisible(%a: memref<8x6xf32>, %b: memref<4x12xf32>) {
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'rt.copy_blocks' op dim 1 of the source (size 6) is not divisible into 4 blocks
  rt.copy_blocks %a, %b, %s from 1 to 0 count 4 : (memref<8x6xf32>, memref<4x12xf32>, !rt.stream) -> ()
  func.return
}

// -----

func.func @copy_blocks_dim(%a: memref<8x8xf32>, %b: memref<4x16xf32>) {
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'rt.copy_blocks' op dim 2 is out of range for the destination memref<4x16xf32>
  rt.copy_blocks %a, %b, %s from 1 to 2 count 4 : (memref<8x8xf32>, memref<4x16xf32>, !rt.stream) -> ()
  func.return
}

// -----

func.func @copy_blocks_count(%a: memref<8x8xf32>, %b: memref<4x8xf32>) {
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'rt.copy_blocks' op source memref<8x8xf32> and destination memref<4x8xf32> must have the same element count and type
  rt.copy_blocks %a, %b, %s from 1 to 0 count 4 : (memref<8x8xf32>, memref<4x8xf32>, !rt.stream) -> ()
  func.return
}

// -----

func.func @prefix_longer_than_the_buffer(%a: memref<12xf32>) {
  // CHECK: 'rt.prefix' op result must keep memref<12xf32> outside dim 0 and take at most 12 elements there ('?' with a count), got memref<13xf32>
  %v = rt.prefix %a dim 0 : memref<12xf32> -> memref<13xf32>
  func.return
}

// -----

dist.mesh @world shape = [4]
func.func @pad_blocks_unequal(%a: memref<10xf32>, %b: memref<10xf32>, %n: index) {
  %s = rt.stream 0 : !rt.stream
  // CHECK: 'rt.pad_blocks' op the padded buffer's dim 0 (size 10) must hold 4 equal blocks
  rt.pad_blocks %a, %b, %n, %s dim 0 counts [4] : (memref<10xf32>, memref<10xf32>, index, !rt.stream) -> ()
  func.return
}
