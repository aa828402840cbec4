"""A GPT training step in JAX, the way people write one, handed to distir.

    python gpt_step.py OUTDIR [--mesh DPxTP] [--layers 4] [--size toy|gpt2-small|gpt2-medium] [--batch B] [--lower-only]

One step of a GPT: token and position embeddings, ``lax.scan`` over ``--layers``
pre-LayerNorm blocks (causal self-attention, an MLP with exact GELU), a final LayerNorm,
an untied output projection, the cross-entropy of integer labels, ``jax.value_and_grad``
and AdamW with optax's formulas (written here: optax need not be installed). Without
``--mesh`` the step is a one-device program (no shardings); with ``--mesh 2x2`` it runs on
a ``dp x tp`` mesh with Megatron's shardings: the batch over ``dp``; the attention's Q, K
and V projections, the MLP's first layer and the output projection sliced by columns over
``tp``, the attention's output projection and the MLP's second layer by rows; the
optimizer state as its parameter.

``--size`` picks the shapes (``SIZES``): ``toy`` (the default: d 32, 4 heads, ffn 128,
vocab 64, seq 8, batch 8), ``gpt2-small`` (d 768, 12 heads, ffn 3072, vocab 50257, seq
1024, batch 256; GPT-2 small has 12 layers: ``--layers 12``) or ``gpt2-medium`` (d 1024,
16 heads, ffn 4096, the same vocab, seq and batch; 24 layers); ``--batch`` overrides its
batch. Only the shapes change. ``--lower-only`` lowers the step on abstract arguments
(``jax.ShapeDtypeStruct``: no array is allocated, nothing runs) and writes only
``NAME.mlir``: what a planner needs of a step too large to run here.

Written to OUTDIR (``NAME`` is ``gpt_step`` or ``gpt_step_DPxTP``):

* ``NAME.mlir``: ``jax.jit(step).lower(*args).as_text()`` (StableHLO + Shardy);
* ``NAME.in.npz``: the inputs keyed ``arg0``, ``arg1``, ... (distir-run's convention;
  the order of ``jax.tree.leaves((params, m, v, ids, labels))``);
* ``NAME.out.npz``: JAX's results keyed ``result0``, ... (the loss, then the new
  parameters, m and v, in the same order).

Then ``distir-import OUTDIR/NAME.mlir --remarks``, ``distir-run ... --func main --inputs
OUTDIR/NAME.in.npz``, ``distir-plan``, ``distir-tune``. ``lowered(mesh_shape, layers)``
gives the text, the inputs and the results without writing files, ``lowered_text(mesh_shape,
layers, size, batch)`` the text alone (abstract arguments), ``argument_names()`` the
arguments' names in the order of ``arg0``, ``arg1``, ... (``blocks_wq``, ..., ``m_blocks_wq``,
..., ``v_head``, ``ids``, ``labels``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SIZES = {
    "toy": {"vocab": 64, "seq": 8, "batch": 8, "d": 32, "heads": 4, "ffn": 128},
    "gpt2-small": {"vocab": 50257, "seq": 1024, "batch": 256, "d": 768, "heads": 12, "ffn": 3072},
    "gpt2-medium": {"vocab": 50257, "seq": 1024, "batch": 256, "d": 1024, "heads": 16, "ffn": 4096},
}
CONFIG = SIZES["toy"]
ADAMW = {"lr": 1e-3, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "wd": 1e-2, "step": 1}
LAYER_PARAMS = ("ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2")


def config(size: str = "toy", batch: int | None = None) -> dict:
    """The shapes of ``SIZES[size]``, its batch replaced by ``batch`` when given."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}: one of {', '.join(SIZES)}")
    return {**SIZES[size], **({"batch": batch} if batch is not None else {})}


def param_shapes(layers: int, c: dict = CONFIG) -> dict:
    """The parameters' shapes (the tree of ``init_params``; the block parameters stacked
    over a leading layers dim)."""
    d, f, v = c["d"], c["ffn"], c["vocab"]
    blocks = {
        "ln1_g": (layers, d), "ln1_b": (layers, d), "wq": (layers, d, d), "wk": (layers, d, d), "wv": (layers, d, d), "wo": (layers, d, d),
        "ln2_g": (layers, d), "ln2_b": (layers, d), "w1": (layers, d, f), "b1": (layers, f), "w2": (layers, f, d), "b2": (layers, d),
    }  # fmt: skip
    return {"emb": (v, d), "pos": (c["seq"], d), "blocks": blocks, "lnf_g": (d,), "lnf_b": (d,), "head": (d, v)}


def argument_names() -> list[str]:
    """The step's arguments' names in the order JAX flattens ``(params, m, v, ids,
    labels)`` (the order of ``arg0``, ``arg1``, ...; a dict's leaves by sorted key): a
    parameter ``blocks_wq`` or ``emb``, its moments ``m_blocks_wq`` and ``v_blocks_wq``,
    then ``ids`` and ``labels``."""
    import jax

    def name(path) -> str:
        return "_".join(str(k.key) for k in path)

    params = [name(path) for path, _ in jax.tree_util.tree_flatten_with_path(param_shapes(1), is_leaf=lambda x: isinstance(x, tuple))[0]]
    return [*params, *("m_" + p for p in params), *("v_" + p for p in params), "ids", "labels"]


INIT_SCALE = {"emb": 0.5, "pos": 0.1, "lnf_g": 0.1, "lnf_b": 0.1, "ln1_g": 0.1, "ln1_b": 0.1, "ln2_g": 0.1, "ln2_b": 0.1, "b1": 0.1, "w2": 0.1, "b2": 0.1}
"""The standard deviation of each parameter's initial values (0.2 for the others); a
LayerNorm gain (``*_g``) starts at 1 plus such values."""


def init_params(rng, layers: int, c: dict = CONFIG) -> dict:
    """Random parameters of the shapes ``param_shapes`` gives, the blocks' drawn first."""
    import numpy as np

    shapes = param_shapes(layers, c)

    def r(name: str, shape: tuple[int, ...]):
        a = (rng.standard_normal(shape) * INIT_SCALE.get(name, 0.2)).astype(np.float32)
        return 1 + a if name.endswith("_g") else a

    blocks = {k: r(k, s) for k, s in shapes["blocks"].items()}
    return {k: blocks if k == "blocks" else r(k, s) for k, s in shapes.items()}


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


def loss_fn(params: dict, ids, labels, heads: int = CONFIG["heads"]):
    import jax
    import jax.numpy as jnp

    b, s = ids.shape
    h, d = heads, params["emb"].shape[1]
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


def step(params, m, v, ids, labels, heads: int = CONFIG["heads"]):
    import jax

    loss, grads = jax.value_and_grad(loss_fn)(params, ids, labels, heads)
    new = jax.tree.map(adamw, params, grads, m, v)
    istuple = lambda t: isinstance(t, tuple)  # noqa: E731
    return loss, jax.tree.map(lambda t: t[0], new, is_leaf=istuple), jax.tree.map(lambda t: t[1], new, is_leaf=istuple), jax.tree.map(lambda t: t[2], new, is_leaf=istuple)


def jitted(mesh_shape: tuple[int, int] | None, layers: int = 4, seed: int = 0, c: dict = CONFIG, abstract: bool = False):
    """(the jitted step, its arguments: params, m, v, ids, labels), unsharded
    (``mesh_shape`` None) or on a ``dp x tp`` mesh of that shape with Megatron's
    shardings (the arguments placed accordingly), at the shapes ``c`` (``config()``);
    ``abstract``: the arguments are ``jax.ShapeDtypeStruct`` (nothing allocated: for
    lowering only)."""
    import functools

    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    if abstract:
        spec = lambda shape, dtype=np.float32: jax.ShapeDtypeStruct(shape, dtype)  # noqa: E731
        params = jax.tree.map(spec, param_shapes(layers, c), is_leaf=lambda x: isinstance(x, tuple))
        m, v = params, params
        ids = labels = spec((c["batch"], c["seq"]), np.int32)
    else:
        rng = np.random.default_rng(seed)
        params = init_params(rng, layers, c)
        m = jax.tree.map(lambda a: (rng.standard_normal(a.shape) * 0.01).astype(np.float32), params)
        v = jax.tree.map(lambda a: np.abs(rng.standard_normal(a.shape) * 0.01).astype(np.float32), params)
        ids = rng.integers(0, c["vocab"], (c["batch"], c["seq"])).astype(np.int32)
        labels = rng.integers(0, c["vocab"], (c["batch"], c["seq"])).astype(np.int32)
    args = (params, m, v, ids, labels)
    fn = functools.partial(step, heads=c["heads"])
    if mesh_shape is None:
        return jax.jit(fn), args
    mesh = jax.make_mesh(mesh_shape, ("dp", "tp"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[: mesh_shape[0] * mesh_shape[1]])
    specs = megatron_specs(params)
    to_s = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    ps = jax.tree.map(to_s, specs, is_leaf=lambda x: isinstance(x, P))
    batch = to_s(P("dp", None))
    return jax.jit(fn, in_shardings=(ps, ps, ps, batch, batch), out_shardings=(to_s(P()), ps, ps, ps)), args


def lowered(mesh_shape: tuple[int, int] | None, layers: int = 4, seed: int = 0, c: dict = CONFIG):
    """(StableHLO text, inputs keyed arg0.., JAX's results keyed result0..) of one step,
    unsharded (``mesh_shape`` None) or on a ``dp x tp`` mesh of that shape, at the shapes
    ``c`` (``config()``)."""
    import jax
    import numpy as np

    f, args = jitted(mesh_shape, layers, seed, c)
    text = f.lower(*args).as_text()
    results = jax.tree.leaves(f(*args))
    inputs = {f"arg{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(args))}
    return text, inputs, {f"result{i}": np.asarray(r) for i, r in enumerate(results)}


def lowered_text(mesh_shape: tuple[int, int] | None, layers: int = 4, size: str = "toy", batch: int | None = None) -> str:
    """The StableHLO text of one step at the shapes of ``size`` (``batch``: its batch
    replaced), lowered on abstract arguments: nothing is allocated or run."""
    f, args = jitted(mesh_shape, layers, c=config(size, batch), abstract=True)
    return f.lower(*args).as_text()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("outdir", type=Path)
    p.add_argument("--mesh", help="DPxTP, e.g. 2x2 (default: one device, no shardings)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--size", default="toy", choices=list(SIZES), help="the shapes (default toy)")
    p.add_argument("--batch", type=int, help="the batch (default: the size's)")
    p.add_argument("--lower-only", action="store_true", help="write only NAME.mlir, lowered on abstract arguments (nothing runs)")
    args = p.parse_args(argv)
    mesh_shape = tuple(int(x) for x in args.mesh.lower().split("x")) if args.mesh else None
    if mesh_shape is not None and len(mesh_shape) != 2:
        p.error("--mesh takes DPxTP")
    import numpy as np

    name = "gpt_step" + (f"_{mesh_shape[0]}x{mesh_shape[1]}" if mesh_shape else "")
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.lower_only:
        (args.outdir / f"{name}.mlir").write_text(lowered_text(mesh_shape, args.layers, args.size, args.batch))  # type: ignore[arg-type]
        print(f"wrote {args.outdir / name}.mlir ({args.size}, {args.layers} layers; lowered only)")
        return 0
    text, inputs, results = lowered(mesh_shape, args.layers, c=config(args.size, args.batch))  # type: ignore[arg-type]
    (args.outdir / f"{name}.mlir").write_text(text)
    np.savez(args.outdir / f"{name}.in.npz", **inputs)
    np.savez(args.outdir / f"{name}.out.npz", **results)
    print(f"wrote {args.outdir / name}.mlir, .in.npz ({len(inputs)} inputs), .out.npz (loss {float(results['result0']):.6f})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
