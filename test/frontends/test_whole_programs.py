"""Whole programs from JAX: a GPT training step (examples/jax/gpt_step.py: embedding,
``lax.scan`` over 4 pre-LayerNorm blocks with causal attention and exact GELU,
integer-label cross-entropy, ``jax.value_and_grad``, AdamW with optax's formulas),
unsharded on one device and with Megatron's shardings on dp x tp meshes of 4 and 8
devices, imports, partitions and gives JAX's results (loss, new parameters, both AdamW
moments) on ``interpret`` and ``local`` (test_run_mpi_jax.py: ``mpi``). The 2-stage
pipeline over ``pp`` with automatic ``dp`` is test_partly_manual.py's."""

from __future__ import annotations

import collections

import pytest
from oracle import assert_matches, load

from distir.frontends.program import import_program
from distir.runtime import interpret
from distir.runtime.local import run_local

GPT = {"gpt_step_1": 1, "gpt_step_4": 4, "gpt_step_8": 8}
_imported: dict[str, object] = {}


def imported(jax_dir, name: str):
    """The program imported once per session (about 3,400 ops), a copy per use."""
    if name not in _imported:
        text, _, _ = load(jax_dir, name)
        _imported[name] = import_program(text, f"{name}.mlir").module
    return _imported[name].clone()  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["interpret", "local"])
@pytest.mark.parametrize("name", list(GPT))
def test_gpt_training_step_computes_what_jax_computes(jax_dir, name, backend):
    _, inputs, want = load(jax_dir, name)
    module = imported(jax_dir, name)
    run = interpret if backend == "interpret" else run_local
    got = run(module, "main", inputs, ranks=GPT[name])
    assert len(got) == 1 + 3 * 17  # the loss, then the 17 parameters, m and v
    assert_matches(got, want, f"{name} on {backend}")


def test_gpt_step_partitions_like_megatron(jax_dir):
    """Megatron's tensor parallelism: activations and weights are never gathered (no
    all_gather, all_to_all or slicing of a replicated value), tp reduces only partial
    sums (the attention and MLP outputs, forward and backward), dp reduces the gradients
    once each (a stacked layer parameter once for all its layers: the partial sums of
    the layers pass through the concat that stacks them) and the loss."""
    module = imported(jax_dir, "gpt_step_4")
    colls = collections.Counter((op.name, tuple(op.axes)) for op in module.walk() if op.name.startswith("coll.") or op.name == "dist.take_slice")
    assert set(colls) == {("coll.all_reduce", (0,)), ("coll.all_reduce", (1,))}, colls
    assert colls[("coll.all_reduce", (0,))] == 12 + 5 + 1  # 12 stacked parameters, 5 others, the loss
