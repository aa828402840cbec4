"""Loops and branches from JAX (``stablehlo.while``, ``case``, ``if``; ``control_flow.py``):
unrolled at import, they compute what JAX computes; a trip count that depends on the
data, and a loop past the unrolling limit, are one-line diagnostics naming the loop; the
work of the import is linear in the trip count."""

from __future__ import annotations

import pytest
from oracle import assert_matches, assert_rejected, load

from distir.frontends import control_flow
from distir.frontends.program import import_program
from distir.frontends.sdy import sdy_import
from distir.runtime import interpret
from distir.runtime.local import run_local

LOOPS = ["scan_layers", "scan_grad", "fori", "while_static", "cond_data", "switch_data"]
"""Each on a 4-device mesh, and as ``NAME_1`` lowered without shardings (one device)."""


@pytest.mark.parametrize("backend", ["interpret", "local"])
@pytest.mark.parametrize("name", LOOPS + [n + "_1" for n in LOOPS])
def test_loop_program_computes_what_jax_computes(jax_dir, name, backend):
    text, inputs, want = load(jax_dir, name)
    module = import_program(text, f"{name}.mlir").module
    run = interpret if backend == "interpret" else run_local
    assert_matches(run(module, "main", inputs, ranks=1 if name.endswith("_1") else 4), want, f"{name} on {backend}")


def _ops(module) -> list[str]:
    return [op.name for op in module.walk()]


def test_scan_unrolls_one_layer_per_iteration_and_stacks_its_outputs_once(jax_dir):
    """Three iterations: three matmuls; the per-layer outputs (ys) become one concat, not
    one per iteration; no loop op is left."""
    text, _, _ = load(jax_dir, "scan_layers")
    ops = _ops(import_program(text, "scan_layers.mlir").module)
    assert ops.count("dist.matmul") == 3
    assert ops.count("dist.concat") == 1


def test_reverse_scan_reads_back_the_saved_activations_without_copying_them(jax_dir):
    """The gradient's reverse scan takes each layer's saved activation straight from the
    forward scan (no concat of the saved stack and slice of it); only the stacked weight
    gradient is concatenated, once."""
    text, _, _ = load(jax_dir, "scan_grad")
    module, _ = sdy_import(text, "scan_grad.mlir")
    ops = _ops(module)
    assert ops.count("dist.concat") == 1
    assert ops.count("dist.matmul") == 9  # 3 forward, 2 x 3 backward


def test_branch_with_data_dependent_predicate_selects(jax_dir):
    text, _, _ = load(jax_dir, "switch_data")
    module = import_program(text, "switch_data.mlir").module
    ops = _ops(module)
    assert "math.sin" in ops and "arith.select" in ops


COUNTED_LOOP = """
sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8x4xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{}}]>}}) -> tensor<8x4xf32> {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c0, %h = %arg0) : tensor<i32>, tensor<8x4xf32>
  cond {{
    %n = stablehlo.constant dense<{n}> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }} do {{
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %one : tensor<i32>
    %t = stablehlo.tanh %h : tensor<8x4xf32>
    stablehlo.return %j, %t : tensor<i32>, tensor<8x4xf32>
  }}
  return %0#1 : tensor<8x4xf32>
}}
"""


def test_known_branch_index_takes_that_branch_only():
    text = """
sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %i = stablehlo.constant dense<5> : tensor<i32>
  %r = "stablehlo.case"(%i) ({
    %a = stablehlo.sine %arg0 : tensor<8xf32>
    stablehlo.return %a : tensor<8xf32>
  }, {
    %b = stablehlo.exponential %arg0 : tensor<8xf32>
    stablehlo.return %b : tensor<8xf32>
  }) : (tensor<i32>) -> tensor<8xf32>
  %t = stablehlo.constant dense<true> : tensor<i1>
  %s = "stablehlo.if"(%t) ({
    %c = stablehlo.tanh %r : tensor<8xf32>
    stablehlo.return %c : tensor<8xf32>
  }, {
    %d = stablehlo.cosine %r : tensor<8xf32>
    stablehlo.return %d : tensor<8xf32>
  }) : (tensor<i1>) -> tensor<8xf32>
  return %s : tensor<8xf32>
}
"""
    import numpy as np

    module = import_program(text, "case.mlir").module
    ops = _ops(module)
    assert "math.exp" in ops and "math.sin" not in ops  # index 5 is out of range: the last branch
    assert "math.tanh" in ops and "math.cos" not in ops and "arith.select" not in ops
    x = np.linspace(-1, 1, 8).astype(np.float32)
    np.testing.assert_allclose(interpret(module, "main", {"arg0": x}, ranks=4)[0], np.tanh(np.exp(x)), rtol=1e-6)


def test_data_dependent_trip_count_is_a_diagnostic_naming_the_loop():
    text = COUNTED_LOOP.format(n=3).replace("%p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>", "%s = stablehlo.reduce(%h init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32>\n    %p = stablehlo.compare GT, %s, %z, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>")
    text = text.replace("cond {\n", "cond {\n    %z = stablehlo.constant dense<0.0> : tensor<f32>\n")
    assert_rejected(text, r"5:10\n.*the trip count of 'stablehlo.while' \(%0\) depends on values computed at run time")


def test_distir_import_reports_a_data_dependent_trip_count_in_one_line(tmp_path):
    """The bound of the counter is an argument: the command prints one diagnostic line."""
    from distir.tools.importer import main

    path = tmp_path / "w.mlir"
    path.write_text(COUNTED_LOOP.format(n=3).replace("%p = stablehlo.compare LT, %i, %n", "%p = stablehlo.compare LT, %n, %i").replace("%c0 = stablehlo.constant dense<0> : tensor<i32>", "%c0 = stablehlo.convert %k : (tensor<i32>) -> tensor<i32>").replace("(%arg0: tensor<8x4xf32>", "(%k: tensor<i32>, %arg0: tensor<8x4xf32>"))
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main([str(path)]) == 1
    lines = [ln for ln in err.getvalue().splitlines() if "error" in ln or "trip count" in ln]
    assert len([ln for ln in lines if "trip count" in ln]) == 1, err.getvalue()


def test_unrolling_limit_is_a_diagnostic(monkeypatch):
    monkeypatch.setattr(control_flow, "MAX_UNROLLED_OPS", 100)
    assert_rejected(COUNTED_LOOP.format(n=1000), r"5:10\n.*'stablehlo.while' \(%0\) is still running after \d+ iterations: unrolling it exceeds distir's limit of 100 ops")


def test_import_work_is_linear_in_the_trip_count():
    """Ops produced and source ops translated grow by the same amount per iteration at 50
    and at 100 iterations (the regions' names are forgotten after each iteration, so an
    iteration costs the same whatever came before)."""
    from distir.frontends import stablehlo

    counts = {}
    visited = {}
    original = stablehlo.Translator.translate_region

    def counting(self, body, args):
        out = original(self, body, args)
        visited[self] = self.visited
        return out

    for n in (0, 50, 100):
        stablehlo.Translator.translate_region = counting
        try:
            visited.clear()
            module, _ = sdy_import(COUNTED_LOOP.format(n=n), "loop.mlir")
        finally:
            stablehlo.Translator.translate_region = original
        counts[n] = (len(_ops(module)), max(visited.values()))
    for k in range(2):
        assert counts[100][k] - counts[50][k] == counts[50][k] - counts[0][k] > 0, counts
