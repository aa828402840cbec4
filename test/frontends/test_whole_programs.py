"""Whole programs from JAX: a GPT training step (examples/jax/gpt_step.py: embedding,
``lax.scan`` over 4 pre-LayerNorm blocks with causal attention and exact GELU,
integer-label cross-entropy, ``jax.value_and_grad``, AdamW with optax's formulas),
unsharded on one device and with Megatron's shardings on dp x tp meshes of 4 and 8
devices, imports, partitions and gives JAX's results (loss, new parameters, both AdamW
moments) on ``interpret`` and ``local`` (test_run_mpi_jax.py: ``mpi``). The 2-stage
pipeline over ``pp`` with automatic ``dp`` is test_partly_manual.py's."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest
from oracle import assert_matches, load

from distir.frontends.program import import_program
from distir.runtime import interpret
from distir.runtime.local import run_local

GPT_STEP = Path(__file__).resolve().parents[2] / "examples" / "jax" / "gpt_step.py"
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


def test_gpt_step_size_option_gives_its_shapes(tmp_path):
    """``--size gpt2-medium --batch 64 --layers 2 --lower-only`` writes only the step's
    text, at GPT-2 medium's shapes (d 1024, ffn 4096, vocab 50257, seq 1024) with that
    batch and layers, lowered without running; ``argument_names()`` names its arguments
    in order (the bench's hand plans place them by these names)."""
    cli = [sys.executable, str(GPT_STEP), str(tmp_path), "--size", "gpt2-medium", "--batch", "64", "--layers", "2", "--lower-only"]
    subprocess.run(cli, check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt_step.mlir"]
    code = f"import importlib.util, json; s = importlib.util.spec_from_file_location('g', {str(GPT_STEP)!r}); g = importlib.util.module_from_spec(s); s.loader.exec_module(g); print(json.dumps(g.argument_names()))"
    names = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300).stdout)
    module = import_program((tmp_path / "gpt_step.mlir").read_text(), "gpt_step.mlir").module
    main = next(op for op in module.walk() if op.name == "func.func" and op.sym_name.data == "main")  # type: ignore[attr-defined]
    shapes = [tuple(a.type.get_shape()) for a in main.body.block.args]
    assert len(names) == len(shapes) == 3 * 17 + 2
    got = dict(zip(names, shapes, strict=True))
    d, f, v, s, b, layers = 1024, 4096, 50257, 1024, 64, 2
    want = {"emb": (v, d), "pos": (s, d), "head": (d, v), "lnf_g": (d,), "blocks_wq": (layers, d, d), "blocks_wo": (layers, d, d),
            "blocks_w1": (layers, d, f), "blocks_b1": (layers, f), "blocks_w2": (layers, f, d), "blocks_ln2_b": (layers, d)}  # fmt: skip
    for p, shape in want.items():
        assert got[p] == got["m_" + p] == got["v_" + p] == shape, p
    assert got["ids"] == got["labels"] == (b, s)
