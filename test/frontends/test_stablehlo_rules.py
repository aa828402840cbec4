"""Invalid StableHLO is rejected at import: one test per rule of StableHLO's specification
that ``stablehlo_verify.py`` (and ``sdy.py`` for Shardy's attribute names) checks, each a
located one-line diagnostic. The programs are written here from the rules."""

from __future__ import annotations

import pytest
from oracle import assert_rejected

from distir.frontends.program import import_program
from distir.tools.importer import main as import_main


def fn(body: str, args: str = "%a: tensor<4xf32>, %b: tensor<4xf32>", results: str = "tensor<4xf32>", extra: str = "") -> str:
    return f"func.func public @main({args}) -> {results} {{\n{body}\n}}\n{extra}"


def test_valid_program_imports():
    import_program(fn("  %0 = stablehlo.add %a, %b : tensor<4xf32>\n  return %0 : tensor<4xf32>"), "ok.mlir")


def test_a_declared_result_type_that_is_not_its_values():
    """add gives its operands' type: a declared f16 result of f32 operands is invalid,
    even where the f32 value is what the function returns."""
    text = fn("  %0 = stablehlo.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf16>\n  return %0 : tensor<4xf32>")
    assert_rejected(text, r"2:8\b.*'stablehlo.add' takes and gives one type, got \(tensor<4xf32>, tensor<4xf32>\) -> tensor<4xf16>")


def test_a_use_with_another_type_than_its_definition():
    text = fn("  %0 = stablehlo.negate %a : tensor<4xf32>\n  %1 = stablehlo.add %0, %b : tensor<4xf16>\n  return %1 : tensor<4xf16>", results="tensor<4xf16>")
    assert_rejected(text, r"3:22\b.*%0 has type tensor<4xf32>, the op's type says tensor<4xf16>")


def test_ops_after_the_return():
    text = fn("  return %a : tensor<4xf32>\n  %0 = stablehlo.add %a, %b : tensor<4xf32>")
    assert_rejected(text, r"3:8\b.*'stablehlo.add' after the return of function @main: a return ends its block")


def test_ops_after_the_return_of_a_region():
    body = """  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%a init: %c) across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
   reducer(%x: tensor<f32>, %y: tensor<f32>) {
    %s = stablehlo.add %x, %y : tensor<f32>
    stablehlo.return %s : tensor<f32>
    %t = stablehlo.add %x, %y : tensor<f32>
  }
  return %0 : tensor<f32>"""
    assert_rejected(fn(body, results="tensor<f32>"), r"7:10\b.*'stablehlo.add' after the return of the region of 'stablehlo.reduce'")


def test_a_function_returns_its_signatures_types():
    text = fn("  %0 = stablehlo.negate %a : tensor<4xf32>\n  return %0 : tensor<4xf32>", results="tensor<4xf16>")
    assert_rejected(text, r"3:3\b.*@main returns \(tensor<4xf32>\), its signature says \(tensor<4xf16>\)")


def test_call_result_types_are_the_callees():
    callee = "func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32>\n}"
    text = fn("  %0 = call @f(%a) : (tensor<4xf32>) -> tensor<4xf16>\n  %1 = stablehlo.convert %0 : (tensor<4xf16>) -> tensor<4xf32>\n  return %1 : tensor<4xf32>", extra=callee)
    assert_rejected(text, r"2:8\b.*the call of @f expects \(tensor<4xf16>\), @f returns \(tensor<4xf32>\)")


def test_call_argument_types_are_the_callees():
    callee = "func.func private @f(%x: tensor<4xf16>) -> tensor<4xf32> {\n  %y = stablehlo.convert %x : (tensor<4xf16>) -> tensor<4xf32>\n  return %y : tensor<4xf32>\n}"
    text = fn("  %0 = call @f(%a) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>", extra=callee)
    assert_rejected(text, r"2:8\b.*the call of @f passes \(tensor<4xf32>\), @f takes \(tensor<4xf16>\)")


@pytest.mark.parametrize(
    "op",
    ["subtract", "divide", "remainder", "power", "shift_left", "shift_right_logical"],
)
def test_arithmetic_on_booleans_that_stablehlo_does_not_define(op):
    text = fn(f"  %0 = stablehlo.{op} %a, %b : tensor<4xi1>\n  return %0 : tensor<4xi1>", args="%a: tensor<4xi1>, %b: tensor<4xi1>", results="tensor<4xi1>")
    assert_rejected(text, rf"2:8\b.*'stablehlo.{op}' is (not defined on i1|defined on integers)")


@pytest.mark.parametrize("op", ["negate", "abs", "sign"])
def test_unary_arithmetic_on_booleans(op):
    text = fn(f"  %0 = stablehlo.{op} %a : tensor<4xi1>\n  return %0 : tensor<4xi1>", args="%a: tensor<4xi1>", results="tensor<4xi1>")
    assert_rejected(text, rf"2:8\b.*'stablehlo.{op}' is not defined on i1")


def test_boolean_add_and_multiply_are_or_and_and():
    """add/maximum of i1 are or, multiply/minimum are and (StableHLO's booleans)."""
    import numpy as np

    from distir.runtime import interpret

    text = fn(
        "  %0 = stablehlo.add %a, %b : tensor<4xi1>\n  %1 = stablehlo.multiply %a, %b : tensor<4xi1>\n  return %0, %1 : tensor<4xi1>, tensor<4xi1>",
        args="%a: tensor<4xi1>, %b: tensor<4xi1>",
        results="(tensor<4xi1>, tensor<4xi1>)",
    )
    a, b = np.array([0, 0, 1, 1], bool), np.array([0, 1, 0, 1], bool)
    got = interpret(import_program(text, "b.mlir").module, "main", {"a": a, "b": b})
    np.testing.assert_array_equal(got[0], a | b)
    np.testing.assert_array_equal(got[1], a & b)


def test_float_only_ops_on_integers():
    text = fn("  %0 = stablehlo.exponential %a : tensor<4xi32>\n  return %0 : tensor<4xi32>", args="%a: tensor<4xi32>", results="tensor<4xi32>")
    assert_rejected(text, r"2:8\b.*'stablehlo.exponential' is defined on floats, got i32")


def test_bitwise_ops_on_floats():
    text = fn("  %0 = stablehlo.and %a, %b : tensor<4xf32>\n  return %0 : tensor<4xf32>")
    assert_rejected(text, r"2:8\b.*'stablehlo.and' is defined on integers and booleans, got f32")


def test_compare_gives_booleans_of_its_operands_shape():
    text = fn("  %0 = stablehlo.compare LT, %a, %b, FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi32>\n  return %0 : tensor<4xi32>", results="tensor<4xi32>")
    assert_rejected(text, r"2:8\b.*'stablehlo.compare' takes two operands of one type and gives i1 of their shape")


def test_compare_type_fits_the_element_type():
    text = fn("  %0 = stablehlo.compare LT, %a, %b, SIGNED : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>\n  return %0 : tensor<4xi1>", results="tensor<4xi1>")
    assert_rejected(text, r"2:8\b.*comparison type SIGNED does not fit f32")


def test_select_predicate_and_values():
    args = "%p: tensor<4xi32>, %a: tensor<4xf32>, %b: tensor<4xf32>"
    text = fn("  %0 = stablehlo.select %p, %a, %b : (tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>", args=args)
    assert_rejected(text, r"2:8\b.*'stablehlo.select' takes an i1 predicate")


def test_convert_keeps_the_shape():
    text = fn("  %0 = stablehlo.convert %a : (tensor<4xf32>) -> tensor<2xf16>\n  return %0 : tensor<2xf16>", results="tensor<2xf16>")
    assert_rejected(text, r"2:8\b.*'stablehlo.convert' keeps the shape")


def test_is_finite_of_integers():
    text = fn("  %0 = stablehlo.is_finite %a : (tensor<4xi32>) -> tensor<4xi1>\n  return %0 : tensor<4xi1>", args="%a: tensor<4xi32>", results="tensor<4xi1>")
    assert_rejected(text, r"2:8\b.*'stablehlo.is_finite' takes floats")


def sharded(arg_attr: str) -> str:
    return (
        'sdy.mesh @mesh = <["x"=4]>\n'
        f"func.func public @main(%a: tensor<8xf32> {{{arg_attr}}}) -> tensor<8xf32> {{\n"
        "  %0 = stablehlo.negate %a : tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n"
    )


def test_sharded_argument_imports():
    m = import_program(sharded('sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>'), "ok.mlir").module
    assert "sliced<0>" in str(m)


def test_misspelled_sdy_sharding_is_not_a_replicated_value():
    assert_rejected(sharded('sdy.shardng = #sdy.sharding<@mesh, [{"x"}]>'), r"2:1\b.*unknown Shardy attribute 'sdy.shardng' on 'func.func' \(a sharding is written 'sdy.sharding'\)")


def test_a_sharding_under_another_name():
    assert_rejected(sharded('jax.sharding = #sdy.sharding<@mesh, [{"x"}]>'), r"2:1\b.*a #sdy.sharding under 'jax.sharding' on 'func.func'")


def test_misspelled_dimension_numbers_key():
    text = fn(
        '  %0 = "stablehlo.gather"(%t, %i) <{dimension_numbers = #stablehlo.gather<offset_dim = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>}> : (tensor<8x4xf32>, tensor<3x1xi32>) -> tensor<3x4xf32>\n  return %0 : tensor<3x4xf32>',
        args="%t: tensor<8x4xf32>, %i: tensor<3x1xi32>",
        results="tensor<3x4xf32>",
    )
    assert_rejected(text, r"2:8\b.*'offset_dim' in dimension_numbers is not a key of #stablehlo.gather")


def test_cli_exit_1_with_one_line(tmp_path, capsys):
    path = tmp_path / "bad.mlir"
    path.write_text(fn("  return %a : tensor<4xf32>\n  %0 = stablehlo.add %a, %b : tensor<4xf32>"))
    assert import_main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3:8" in err and "after the return" in err and "Traceback" not in err
