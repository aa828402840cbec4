"""A GPT training step in JAX, the way people write one, handed to distir.

    python gpt_step.py OUTDIR [--mesh DPxTP] [--layers 4] [--devices N]

One step of a small GPT: token and position embeddings, ``lax.scan`` over ``--layers``
pre-LayerNorm blocks (causal self-attention, an MLP with exact GELU), a final LayerNorm,
an untied output projection, the cross-entropy of integer labels, ``jax.value_and_grad``
and AdamW with optax's formulas (written here: optax need not be installed). Without
``--mesh`` the step is a one-device program (no shardings); with ``--mesh 2x2`` it runs on
a ``dp x tp`` mesh with Megatron's shardings: the batch over ``dp``; the attention's Q, K
and V projections, the MLP's first layer and the output projection sliced by columns over
``tp``, the attention's output projection and the MLP's second layer by rows; the
optimizer state as its parameter.

Written to OUTDIR (``NAME`` is ``gpt_step`` or ``gpt_step_DPxTP``):

* ``NAME.mlir``: ``jax.jit(step).lower(*args).as_text()`` (StableHLO + Shardy);
* ``NAME.in.npz``: the inputs keyed ``arg0``, ``arg1``, ... (distir-run's convention;
  the order of ``jax.tree.leaves((params, m, v, ids, labels))``);
* ``NAME.out.npz``: JAX's results keyed ``result0``, ... (the loss, then the new
  parameters, m and v, in the same order).

Then ``distir-import OUTDIR/NAME.mlir --remarks``, ``distir-run ... --func main --inputs
OUTDIR/NAME.in.npz``, ``distir-plan``, ``distir-tune``. ``lowered(mesh_shape, layers)``
gives the text, the inputs and the results without writing files.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

CONFIG = {"vocab": 64, "seq": 8, "batch": 8, "d": 32, "heads": 4, "ffn": 128}
ADAMW = {"lr": 1e-3, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "wd": 1e-2, "step": 1}
LAYER_PARAMS = ("ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2")


def init_params(rng, layers: int) -> dict:
    import numpy as np

    c = CONFIG
    d, f, v = c["d"], c["ffn"], c["vocab"]

    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    blocks = {
        "ln1_g": 1 + r(layers, d, scale=0.1), "ln1_b": r(layers, d, scale=0.1),
        "wq": r(layers, d, d), "wk": r(layers, d, d), "wv": r(layers, d, d), "wo": r(layers, d, d),
        "ln2_g": 1 + r(layers, d, scale=0.1), "ln2_b": r(layers, d, scale=0.1),
        "w1": r(layers, d, f), "b1": r(layers, f, scale=0.1), "w2": r(layers, f, d, scale=0.1), "b2": r(layers, d, scale=0.1),
    }  # fmt: skip
    return {"emb": r(v, d, scale=0.5), "pos": r(c["seq"], d, scale=0.1), "blocks": blocks, "lnf_g": 1 + r(d, scale=0.1), "lnf_b": r(d, scale=0.1), "head": r(d, v)}


def megatron_specs(params: dict) -> dict:
    """Megatron's tensor parallelism over ``tp`` (the layer dim of the stacked block
    parameters is never sliced)."""
    from jax.sharding import PartitionSpec as P

    cols = P(None, None, "tp")
    rows = P(None, "tp", None)
    blocks = {k: P() for k in LAYER_PARAMS}
    blocks.update(wq=cols, wk=cols, wv=cols, w1=cols, b1=P(None, "tp"), wo=rows, w2=rows)
    return {"emb": P(), "pos": P(), "blocks": blocks, "lnf_g": P(), "lnf_b": P(), "head": P(None, "tp")}


def layernorm(x, g, b):
    import jax

    m = x.mean(-1, keepdims=True)
    var = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(var + 1e-5) * g + b


def loss_fn(params: dict, ids, labels):
    import jax
    import jax.numpy as jnp

    c = CONFIG
    b, s = ids.shape
    h, d = c["heads"], c["d"]
    x = params["emb"][ids] + params["pos"][None, :s]

    def block(x, p):
        y = layernorm(x, p["ln1_g"], p["ln1_b"])
        q = (y @ p["wq"]).reshape(b, s, h, d // h)
        k = (y @ p["wk"]).reshape(b, s, h, d // h)
        v = (y @ p["wv"]).reshape(b, s, h, d // h)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // h).astype(jnp.float32)
        causal = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
        scores = jnp.where(causal, scores, -1e9)
        att = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(b, s, d)
        x = x + att @ p["wo"]
        y = layernorm(x, p["ln2_g"], p["ln2_b"])
        return x + jax.nn.gelu(y @ p["w1"] + p["b1"], approximate=False) @ p["w2"] + p["b2"], None

    x, _ = jax.lax.scan(block, x, params["blocks"])
    logits = layernorm(x, params["lnf_g"], params["lnf_b"]) @ params["head"]
    logp = jax.nn.log_softmax(logits, axis=-1)  # [B, S, V]
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def adamw(p, g, m, v):
    """optax.adamw's update (``scale_by_adam``, ``add_decayed_weights``, then the
    learning rate) for step ``ADAMW['step']``."""
    import jax.numpy as jnp

    a = ADAMW
    m = a["b1"] * m + (1 - a["b1"]) * g
    v = a["b2"] * v + (1 - a["b2"]) * g * g
    m_hat = m / (1 - a["b1"] ** a["step"])
    v_hat = v / (1 - a["b2"] ** a["step"])
    update = m_hat / (jnp.sqrt(v_hat) + a["eps"]) + a["wd"] * p
    return p - a["lr"] * update, m, v


def step(params, m, v, ids, labels):
    import jax

    loss, grads = jax.value_and_grad(loss_fn)(params, ids, labels)
    new = jax.tree.map(adamw, params, grads, m, v)
    istuple = lambda t: isinstance(t, tuple)  # noqa: E731
    return loss, jax.tree.map(lambda t: t[0], new, is_leaf=istuple), jax.tree.map(lambda t: t[1], new, is_leaf=istuple), jax.tree.map(lambda t: t[2], new, is_leaf=istuple)


def jitted(mesh_shape: tuple[int, int] | None, layers: int = 4, seed: int = 0):
    """(the jitted step, its arguments: params, m, v, ids, labels), unsharded
    (``mesh_shape`` None) or on a ``dp x tp`` mesh of that shape with Megatron's
    shardings (the arguments placed accordingly)."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    rng = np.random.default_rng(seed)
    params = init_params(rng, layers)
    m = jax.tree.map(lambda a: (rng.standard_normal(a.shape) * 0.01).astype(np.float32), params)
    v = jax.tree.map(lambda a: np.abs(rng.standard_normal(a.shape) * 0.01).astype(np.float32), params)
    c = CONFIG
    ids = rng.integers(0, c["vocab"], (c["batch"], c["seq"])).astype(np.int32)
    labels = rng.integers(0, c["vocab"], (c["batch"], c["seq"])).astype(np.int32)
    args = (params, m, v, ids, labels)
    if mesh_shape is None:
        return jax.jit(step), args
    mesh = jax.make_mesh(mesh_shape, ("dp", "tp"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[: mesh_shape[0] * mesh_shape[1]])
    specs = megatron_specs(params)
    to_s = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    ps = jax.tree.map(to_s, specs, is_leaf=lambda x: isinstance(x, P))
    batch = to_s(P("dp", None))
    return jax.jit(step, in_shardings=(ps, ps, ps, batch, batch), out_shardings=(to_s(P()), ps, ps, ps)), args


def lowered(mesh_shape: tuple[int, int] | None, layers: int = 4, seed: int = 0):
    """(StableHLO text, inputs keyed arg0.., JAX's results keyed result0..) of one step,
    unsharded (``mesh_shape`` None) or on a ``dp x tp`` mesh of that shape."""
    import jax
    import numpy as np

    f, args = jitted(mesh_shape, layers, seed)
    text = f.lower(*args).as_text()
    results = jax.tree.leaves(f(*args))
    inputs = {f"arg{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(args))}
    return text, inputs, {f"result{i}": np.asarray(r) for i, r in enumerate(results)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("outdir", type=Path)
    p.add_argument("--mesh", help="DPxTP, e.g. 2x2 (default: one device, no shardings)")
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args(argv)
    mesh_shape = tuple(int(x) for x in args.mesh.lower().split("x")) if args.mesh else None
    if mesh_shape is not None and len(mesh_shape) != 2:
        p.error("--mesh takes DPxTP")
    import numpy as np

    text, inputs, results = lowered(mesh_shape, args.layers)  # type: ignore[arg-type]
    name = "gpt_step" + (f"_{mesh_shape[0]}x{mesh_shape[1]}" if mesh_shape else "")
    args.outdir.mkdir(parents=True, exist_ok=True)
    (args.outdir / f"{name}.mlir").write_text(text)
    np.savez(args.outdir / f"{name}.in.npz", **inputs)
    np.savez(args.outdir / f"{name}.out.npz", **results)
    print(f"wrote {args.outdir / name}.mlir, .in.npz ({len(inputs)} inputs), .out.npz (loss {float(results['result0']):.6f})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
