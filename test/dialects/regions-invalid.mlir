// RUN: distir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Region isolation and dominance: every operand must be visible where it is used. A
// dist.map body sees only its block arguments and what it defines; a fused collective's
// or coll.overlap's body may use values from before the op but nothing is visible outside
// a region. Most of these programs parse (the parser resolves a name used before its
// definition to that later definition, even inside another region) and the verifier
// rejects them before any pass or backend sees them; a name used after the region that
// defines it is a parse error at the use.

// CHECK: 'dist.yield' op operand 0 (%z) is defined inside the region of another 'dist.map' (line {{[0-9]+}}) and is not visible here
dist.mesh @world shape = [4]
func.func @yield_of_a_sibling_map_body(%x: !dist.tensor<64xf32, @world, [replicated]>) -> (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) {
  %w = dist.map(%x) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    dist.yield %z : f32
  }
  %y = dist.map(%x) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    %z = arith.addf %a, %a : f32
    dist.yield %z : f32
  }
  func.return %y, %w : !dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: 'dist.map' op operand 1 is defined inside the op's own region, after its use
dist.mesh @world shape = [4]
func.func @map_operand_defined_in_its_body(%x: !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = dist.map(%x, %z) : (!dist.tensor<64xf32, @world, [replicated]>, f32) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %z = arith.addf %a, %b : f32
    dist.yield %z : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: 'arith.mulf' op operand 1 (%s) is defined outside the enclosing 'dist.map' (line {{[0-9]+}}), whose regions may use only values defined inside them
dist.mesh @world shape = [4]
func.func @map_body_uses_an_outer_value(%x: !dist.tensor<64xf32, @world, [replicated]>, %s: f32) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = dist.map(%x) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    %z = arith.mulf %a, %s : f32
    dist.yield %z : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: 'func.return' op operand 0 (%y) is used before its definition (line {{[0-9]+}})
dist.mesh @world shape = [4]
func.func @use_before_definition(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
  %y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: 'coll.all_reduce' op operand 0 (%y) is a result of the op itself
dist.mesh @world shape = [4]
func.func @op_uses_its_own_result(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %y : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: %s is used but not defined here (a value defined inside a region is not visible outside it)
dist.mesh @world shape = [4]
func.func @fused_body_value_used_after_the_collective(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.fused_all_reduce sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%s: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %s : !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  %q = dist.map(%s) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32):
    dist.yield %a : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: 'coll.yield' op operand 0 (%y) is a result of the enclosing 'coll.fused_all_reduce'
dist.mesh @world shape = [4]
func.func @fused_body_yields_the_collectives_result(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.fused_all_reduce sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%s: !dist.tensor<64xf32, @world, [sliced<0>]>):
    coll.yield %y : !dist.tensor<64xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: %c is used but not defined here (a value defined inside a region is not visible outside it)
dist.mesh @world shape = [4]
func.func @overlap_body_value_used_outside(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %r = coll.overlap chunks 2 -> !dist.tensor<64xf32, @world, [replicated]> {
    %c = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
    coll.yield %c : !dist.tensor<64xf32, @world, [replicated]>
  }
  func.return %c : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// CHECK: %y is used but not defined here (a value defined inside a region is not visible outside it)
dist.mesh @world shape = [4]
func.func @f(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}
func.func @value_of_another_function(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}

// -----

// An op breaking two rules always reports the same one (xDSL keeps traits in a set).
// CHECK: 'func.return' expects parent op 'func.func'
dist.mesh @world shape = [4]
func.func @return_inside_a_map_body(%x: !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = dist.map(%x) : (!dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%a: f32):
    %z = arith.addf %a, %a : f32
    func.return %z : f32
    dist.yield %z : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}
