"""``lower-to-kernels`` at model scale (its IR is checked by ``lower-to-kernels.mlir``):
runs of element-wise ops alike to a run lowered before (a model's layers) call the
kernel built for it; the kernels built do not grow with the layers, counted, not timed."""

from __future__ import annotations

from unittest import mock

from distir.dialects import rt
from distir.dialects.context import parse_module
from distir.examples.gpt_training_step import GPTShape, generate
from distir.lowering import lower_to_kernels
from distir.lowering.pipeline import lower


def lowered_gpt(layers: int) -> tuple[int, int, int]:
    """(kernels built, kernels in the program, kernel launches) of a GPT training step."""
    module = parse_module(generate(GPTShape(layers=layers, hidden=16, heads=2, vocab=32, seq=8, batch=8)))
    build = lower_to_kernels.KernelBuilder.build
    with mock.patch.object(lower_to_kernels.KernelBuilder, "build", autospec=True, side_effect=build) as built:
        out = lower(module, 1, verify=False)
    kernels = sum(1 for op in out.ops if isinstance(op, rt.KernelOp))
    calls = sum(1 for op in out.walk() if isinstance(op, rt.LaunchOp))
    return built.call_count, kernels, calls


def test_the_kernels_of_alike_layers_are_built_once():
    (built3, kernels3, calls3), (built6, kernels6, calls6) = lowered_gpt(3), lowered_gpt(6)
    assert calls6 > 1.5 * calls3  # every layer calls its kernels
    assert built6 == built3 and kernels6 == kernels3, (built3, built6, kernels3, kernels6)
    assert built3 == kernels3  # no kernel built to be thrown away as a duplicate
