"""Import time grows linearly with program size: reading, translating and partitioning
a stack of 4x as many tensor-parallel MLP blocks does at most ~4x the work. Work is
counted, never timed: the Python function calls ``import_program`` makes
(``sys.setprofile``), which a rescan of the program per value would multiply by its
size."""

from __future__ import annotations

import sys

from distir.frontends.program import import_program

SMALL, LARGE = 12, 48
GROWTH = 4.6


def stacked_mlp(layers: int) -> str:
    """StableHLO + Shardy as JAX prints it: x + gelu(x @ w1_i) @ w2_i, layer after layer."""
    ins = ['%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}']
    for i in range(layers):
        ins.append(f'%arg{2 * i + 1}: tensor<32x64xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{"x"}}]>}}')
        ins.append(f'%arg{2 * i + 2}: tensor<64x32xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{}}]>}}')
    lines = ['sdy.mesh @mesh = <["x"=4]>', f"func.func public @main({', '.join(ins)}) -> (tensor<8x32xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}}) {{"]
    x = "%arg0"
    for i in range(layers):
        w1, w2 = f"%arg{2 * i + 1}", f"%arg{2 * i + 2}"
        lines += [
            f"  %h{i} = stablehlo.dot_general {x}, {w1}, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>",
            f"  %c{i} = stablehlo.constant dense<5.000000e-01> : tensor<f32>",
            f"  %b{i} = stablehlo.broadcast_in_dim %c{i}, dims = [] : (tensor<f32>) -> tensor<8x64xf32>",
            f"  %t{i} = stablehlo.tanh %h{i} : tensor<8x64xf32>",
            f"  %g{i} = stablehlo.multiply %b{i}, %t{i} : tensor<8x64xf32>",
            f"  %y{i} = stablehlo.dot_general %g{i}, {w2}, contracting_dims = [1] x [0] : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>",
            f"  %x{i} = stablehlo.add {x}, %y{i} : tensor<8x32xf32>",
        ]
        x = f"%x{i}"
    lines += [f"  return {x} : tensor<8x32xf32>", "}"]
    return "\n".join(lines) + "\n"


def calls(layers: int) -> int:
    text = stacked_mlp(layers)
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        imported = import_program(text, "stack.mlir")
    finally:
        sys.setprofile(None)
    assert len(imported.remarks) == layers  # one all-reduce per block
    return count


def test_import_work_grows_linearly():
    small, large = calls(SMALL), calls(LARGE)
    assert large <= GROWTH * small, f"{LARGE} layers: {large} calls, {SMALL} layers: {small} calls ({large / small:.2f}x)"
