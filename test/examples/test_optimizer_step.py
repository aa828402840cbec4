"""The model-scale generator (examples/optimizer_step.py): its programs verify, and the
Adam step of a Llama-style 32-layer model (mixed precision) compiles, runs on the
``local`` backend at a reduced hidden size and equals the interpreter."""

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.examples.optimizer_step import llama_parameters, main, megatron_mlp_stack, optimizer_step, pipeline_layers, uniform_parameters
from distir.runtime.interpreter import interpret
from distir.runtime.local import run_local


def test_llama_7b_parameter_list():
    params = llama_parameters("llama-7b")
    assert len(params) == 2 + 9 * 32 + 1 == 291
    assert dict(params)["layers_0_gate_proj"] == (11008, 4096)
    assert sum(int(np.prod(s)) for _, s in params) == 6_738_415_616  # Llama-2-7B's parameter count
    small = dict(llama_parameters("llama-7b", hidden=64, vocab=256))
    assert small["layers_31_down_proj"] == (64, 176) and small["embed_tokens"] == (256, 64)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "lamb"])
def test_generated_programs_verify(optimizer):
    parse_module(optimizer_step(optimizer, uniform_parameters(3, 16), mixed=optimizer == "adam"))
    parse_module(megatron_mlp_stack(2))
    parse_module(pipeline_layers(2))


def test_llama_adam_runs_on_local_like_the_interpreter():
    text = optimizer_step("adam", llama_parameters("llama-7b", hidden=16, vocab=32), mixed=True)
    module = parse_module(text)
    got = run_local(module, None, {}, ranks=2, seed=3)
    want = interpret(module, None, {}, ranks=2, seed=3)  # the run lowered a copy
    assert len(got) == 3 * 291
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_command_line(tmp_path, capsys):
    out = tmp_path / "step.mlir"
    assert main(["--model", "llama-7b", "--hidden", "16", "--vocab", "32", "--layers", "2", "-o", str(out)]) == 0
    assert "coll.all_reduce avg %g_layers_1_down_proj" in out.read_text()
    assert main(["--tensors", "2", "--size", "8", "--optimizer", "sgd"]) == 0
    assert "func.func @sgd_step" in capsys.readouterr().out
