// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// The front end (dialects/frontend.py) turns every malformed text into a located
// diagnostic in time linear in its size: numbers out of range of their types, nesting
// deeper than 100 levels, integers too long to convert, unterminated strings followed by
// long lines (which make xDSL's own string lexer backtrack exponentially).

// CHECK: integer 9223372036854775808 is out of range for i64
dist.mesh @world shape = [4]
func.func @axis_index_too_large(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x axes [9223372036854775808] : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: integer 18446744073709551616 is out of range for i64
dist.mesh @world shape = [18446744073709551616]

// -----

// CHECK: dimension 9223372036854775808 is out of range for i64
dist.mesh @world shape = [4]
func.func @tensor_dim_too_large(%x: !dist.tensor<9223372036854775808x4xf32, @world, [local]>) {
  func.return
}

// -----

// CHECK: integer 9223372036854775808 is out of range for i64
dist.mesh @world shape = [4]
func.func @sliced_dim_too_large(%x: !dist.tensor<64xf32, @world, [sliced<9223372036854775808>]>) {
  func.return
}

// -----

// CHECK: 1.0e39 is out of range for f32
func.func @float_too_large_for_f32() -> f32 {
  %c = arith.constant 1.0e39 : f32
  func.return %c : f32
}

// -----

// CHECK: 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF is out of range for f32
func.func @hex_float_too_long() -> f32 {
  %c = arith.constant 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF : f32
  func.return %c : f32
}

// -----

// CHECK: 300 is out of range for i8
func.func @integer_too_large_for_i8() -> i8 {
  %c = arith.constant 300 : i8
  func.return %c : i8
}

// -----

// CHECK: integer literal of 401 digits is out of range of every integer type
dist.mesh @world shape = [10000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000]

// -----

// CHECK: nesting deeper than 100 levels
dist.mesh @world shape = [4] {a = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}

// -----

// CHECK: End of file reached before closing string literal.
dist.mesh @world shape = [2] axes = ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
