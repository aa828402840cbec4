"""The JAX programs the front-end tests import, lowered and executed by JAX itself.

Run as a script (the tests do, in a subprocess, so that ``XLA_FLAGS`` takes effect before
JAX starts and no test process keeps JAX loaded)::

    python jax_programs.py OUTDIR [NAME ...]

writes, for each program, ``NAME.mlir`` (``jax.jit(f).lower(*args).as_text()``),
``NAME.in.npz`` (the inputs, keyed ``arg0``, ``arg1``, ...: distir-run's convention) and
``NAME.out.npz`` (JAX's own results, keyed ``result0``, ...).
"""

from __future__ import annotations

import os
import sys

DEVICES = 8
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def programs():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    rng = np.random.default_rng(0)

    def R(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def mesh(n, names=("x",)):
        shape = (n,) if isinstance(n, int) else n
        return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names), devices=jax.devices()[: int(np.prod(shape))])

    out = {}

    def add(name, f, m, ins, outs, args):
        S = lambda spec: NamedSharding(m, spec)  # noqa: E731
        out[name] = (jax.jit(f, in_shardings=tuple(S(s) for s in ins), out_shardings=outs if outs is None else (tuple(S(s) for s in outs) if isinstance(outs, tuple) else S(outs))), args)

    # Megatron's tensor-parallel MLP: column-sliced W1 and b1, row-sliced W2.
    def tp_mlp(x, w1, b1, w2):
        return jax.nn.relu(x @ w1 + b1) @ w2

    for n in (1, 2, 4, 8):
        add(f"tp_mlp_{n}", tp_mlp, mesh(n), (P(), P(None, "x"), P("x"), P("x", None)), P(), [R(8, 16), R(16, 32), R(32), R(32, 16)])

    # The same block at Megatron's shapes scaled down, with GeLU (tanh): used by the tuner test.
    def gelu_mlp(x, w1, w2):
        return jax.nn.gelu(x @ w1) @ w2

    add("gelu_mlp", gelu_mlp, mesh(4), (P(), P(None, "x"), P("x", None)), P(), [R(4, 8, 32), R(32, 128) * 0.2, R(128, 32) * 0.2])

    # Self-attention, heads split over x (Megatron's attention block).
    def attention(x, wq, wk, wv, wo):
        b, s, d = x.shape
        h = 4
        q = (x @ wq).reshape(b, s, h, d // h)
        k = (x @ wk).reshape(b, s, h, d // h)
        v = (x @ wv).reshape(b, s, h, d // h)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // h)
        p = jax.nn.softmax(scores, axis=-1)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, d) @ wo

    w = [R(16, 16) * 0.3 for _ in range(4)]
    add("attention", attention, mesh(4), (P(), P(None, "x"), P(None, "x"), P(None, "x"), P("x", None)), P(), [R(2, 8, 16), *w])

    # Data-parallel Adam: the gradient of a batch-sliced loss, then the update; the
    # optimizer state is sliced over x (ZeRO) in the second variant.
    def dp_adam(w, m, v, x, y):
        g = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return w - 1e-3 * m / (jnp.sqrt(v) + 1e-8), m, v

    adam_args = [R(16, 8), R(16, 8), np.abs(R(16, 8)), R(32, 16), R(32, 8)]
    add("dp_adam", dp_adam, mesh(4), (P(), P(), P(), P("x", None), P("x", None)), (P(), P(), P()), adam_args)
    add("zero_adam", dp_adam, mesh(4), (P(), P("x", None), P("x", None), P("x", None), P("x", None)), (P(), P("x", None), P("x", None)), adam_args)

    # LayerNorm of a row-sliced batch.
    def layernorm(x, g, b):
        m = x.mean(-1, keepdims=True)
        var = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(var + 1e-5) * g + b

    add("layernorm", layernorm, mesh(4), (P("x", None), P(), P()), P("x", None), [R(8, 16), R(16), R(16)])

    # Embedding lookup as one-hot @ table, the table sliced by rows (vocab-parallel).
    def embedding(ids, table):
        return jax.nn.one_hot(ids, table.shape[0]) @ table

    add("embedding", embedding, mesh(4), (P(), P("x", None)), P(), [rng.integers(0, 32, 8).astype(np.int32), R(32, 16)])

    # Embedding lookups as JAX writes them (stablehlo.gather): indexing a row-sliced table
    # (negative ids count from the end), and bags of a column-sliced table by row-sliced
    # ids, out-of-range ids clipped.
    def take_rows(ids, table):
        return table[ids]

    add("take_rows", take_rows, mesh(4), (P(), P("x", None)), P(), [rng.integers(-32, 32, 8).astype(np.int32), R(32, 16)])

    def take_bags(ids, table):
        return jnp.take(table, ids, axis=0, mode="clip").sum(axis=1)

    add("take_bags", take_bags, mesh(4), (P("x", None), P(None, "x")), P("x", None), [rng.integers(-4, 36, (8, 3)).astype(np.int32), R(32, 16)])

    # The rest of the subset: concatenate, slice, transpose, iota, compare/select, integer ops.
    def misc(x, y, i):
        a = jnp.concatenate([x, y], axis=1)[1:7:2, :]
        j = (i * 3 + 1) % 7
        return jnp.tanh(a).T, jnp.arange(8.0) * 2, jnp.where(x > 0, x, -y).sum(0), jnp.maximum(j, 2).astype(jnp.float32) - jnp.sign(x[:, :4])

    add("misc", misc, mesh(4), (P("x", None), P("x", None), P()), (P(), P(), P(), P()), [R(8, 16), R(8, 16), rng.integers(-5, 5, (8, 4)).astype(np.int32)])
    # A 2-D mesh: data parallel over "dp", Megatron's tensor parallelism over "tp".
    m22 = mesh((2, 2), ("dp", "tp"))
    add("tp_dp_mlp", tp_mlp, m22, (P("dp", None), P(None, "tp"), P("tp"), P("tp", None)), P("dp", None), [R(8, 16), R(16, 32), R(32), R(32, 16)])

    # shard_map: a per-device body with JAX's explicit collectives.
    def smap_body(a, b):
        s = jax.lax.psum(a @ b, "x")
        g = jax.lax.all_gather(s, "x", tiled=True)
        r = jax.lax.psum_scatter(g * 2.0, "x", scatter_dimension=0, tiled=True)
        t = jax.lax.all_to_all(r, "x", 0, 1, tiled=True)
        return t + jax.lax.pmax(t, "x")

    m4 = mesh(4)
    sm = jax.shard_map(smap_body, mesh=m4, in_specs=(P(None, "x"), P("x", None)), out_specs=P(None, "x"))
    out["shard_map"] = (jax.jit(sm), [jax.device_put(R(8, 16), NamedSharding(m4, P(None, "x"))), jax.device_put(R(16, 32), NamedSharding(m4, P("x", None)))])

    # shard_map on the 2-D mesh: collectives over one axis (replica groups of "tp" or "dp").
    def smap2_body(x, w):
        y = jax.lax.psum(x @ w, "tp")
        return jax.lax.all_gather(y, "dp", axis=0, tiled=True) - jax.lax.pmean(y, "dp").sum()

    sm2 = jax.shard_map(smap2_body, mesh=m22, in_specs=(P("dp", "tp"), P("tp", None)), out_specs=P(None, None), check_vma=False)
    out["shard_map_2d"] = (jax.jit(sm2), [jax.device_put(R(8, 16), NamedSharding(m22, P("dp", "tp"))), jax.device_put(R(16, 4), NamedSharding(m22, P("tp", None)))])

    # jax.lax.ppermute (StableHLO's collective_permute) in shard_map bodies on 4 devices:
    # a ring step, the reverse ring, a partial permutation (device 2 gets zeros).
    def smap(body, m, in_specs, out_specs, *shapes):
        args = [jax.device_put(R(*shape), NamedSharding(m, spec)) for shape, spec in zip(shapes, in_specs)]
        return jax.jit(jax.shard_map(body, mesh=m, in_specs=in_specs, out_specs=out_specs, check_vma=False)), args

    ring = [(i, (i + 1) % 4) for i in range(4)]
    for name, perm in [("ring", ring), ("reverse", [(i, (i - 1) % 4) for i in range(4)]), ("partial", [(0, 2), (1, 3), (3, 0)])]:
        out[f"ppermute_{name}"] = smap(lambda a, perm=perm: jax.lax.ppermute(a, "x", perm) * 2.0 + a, m4, (P("x", None),), P("x", None), (8, 4))

    # On the 2x2 mesh: along tp (a swap in each dp row), along dp from row 0 only (row 0
    # gets zeros), and over both axes at once (device ids mixed: 0 <-> 3, 1 -> 2).
    def ppermute_2d(a):
        return jax.lax.ppermute(a, "tp", [(0, 1), (1, 0)]) + 3.0 * jax.lax.ppermute(a, "dp", [(0, 1)]) - jax.lax.ppermute(a, ("dp", "tp"), [(0, 3), (3, 0), (1, 2)])

    out["ppermute_2d"] = smap(ppermute_2d, m22, (P("dp", "tp"),), P("dp", "tp"), (4, 6))

    # Ring algorithms written with ppermute, the loop unrolled in Python (a fori_loop
    # would lower to stablehlo.while, outside the subset): an all-reduce that forwards
    # the buffer it received around the ring and adds it, and a matmul of every device's
    # row block with the local weights, one block per ring step.
    def ring_allreduce(a):
        acc = buf = a
        for _ in range(3):
            buf = jax.lax.ppermute(buf, "x", ring)
            acc = acc + buf
        return acc

    out["ring_allreduce"] = smap(ring_allreduce, m4, (P("x", None),), P("x", None), (8, 16))

    def ring_matmul(x, w):
        acc, buf = x @ w, x
        for _ in range(3):
            buf = jax.lax.ppermute(buf, "x", ring)
            acc = acc + buf @ w
        return jnp.tanh(acc)

    out["ring_matmul"] = smap(ring_matmul, m4, (P("x", None), P(None, "x")), P(None, "x"), (8, 16), (16, 8))
    loop_programs(add, mesh, R, rng, out)
    partly_manual_programs(out, mesh, R)
    whole_programs(out)

    # Dims the mesh does not divide (issue 28): JAX 0.10 refuses uneven in_shardings at
    # device_put, so the programs take replicated arguments and constrain them inside
    # (sdy.sharding_constraint, which Shardy pads). A tied embedding + output projection
    # over a vocabulary of 61 rows sliced over the devices, and Megatron's MLP with a
    # hidden size of 23, on 3, 4, 6 and 8 devices.
    wsc = jax.lax.with_sharding_constraint

    for n in (3, 4, 6, 8):
        m = mesh(n)
        N = lambda spec, m=m: NamedSharding(m, spec)  # noqa: E731

        def uneven_embedding(ids, table, N=N):
            t = wsc(table, N(P("x", None)))
            h = jnp.take(t, ids, axis=0)
            return h @ t.T

        def uneven_mlp(x, w1, b1, w2, N=N):
            h = x @ wsc(w1, N(P(None, "x"))) + wsc(b1, N(P("x")))
            return jax.nn.relu(h) @ wsc(w2, N(P("x", None)))

        add(f"uneven_embedding_{n}", uneven_embedding, m, (P(), P()), P(), [rng.integers(0, 61, 7).astype(np.int32), R(61, 16)])
        add(f"uneven_mlp_{n}", uneven_mlp, m, (P(), P(), P(), P()), P(), [R(5, 11), R(11, 23), R(23), R(23, 11)])

    # The constructs of the programs people write, on one device and sharded.
    import jax_constructs

    out.update(jax_constructs.programs(jax, jnp, np, rng, mesh))
    out.update(gpt_block_gradient(jax, jnp, np))
    return out


def loop_programs(add, mesh, R, rng, out) -> None:
    """Loops and branches (stablehlo.while, case, if), on a 4-device mesh and, named
    ``NAME_1``, on one device without shardings."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P

    m4 = mesh(4)

    # lax.scan over stacked layer weights (column-sliced), with a per-layer output (ys).
    def scan_layers(ws, x):
        def layer(h, w):
            h = jnp.tanh(h @ w)
            return h, h.sum(0)

        return lax.scan(layer, x, ws)

    add("scan_layers", scan_layers, m4, (P(None, None, "x"), P("x", None)), None, [R(3, 8, 8) * 0.4, R(8, 8)])
    # Its gradient: a reverse scan reading back what the forward scan saved.
    add("scan_grad", jax.value_and_grad(lambda ws, x: scan_layers(ws, x)[0].sum()), m4, (P(None, None, "x"), P("x", None)), None, [R(3, 8, 8) * 0.4, R(8, 8)])
    # fori_loop using its counter; a while_loop with a static trip count (counter < 4).
    add("fori", lambda x: lax.fori_loop(0, 5, lambda i, h: h * 0.5 + i, x), m4, (P("x", None),), None, [R(8, 4)])
    add("while_static", lambda x: lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, jnp.sin(c[1]) + c[0]), (0, x))[1], m4, (P(None, "x"),), None, [R(4, 8)])
    # Branches on a predicate / index known only at run time (every branch, then a select).
    add("cond_data", lambda p, x: lax.cond(p.sum() > 0, lambda x: x * 2.0, lambda x: jnp.exp(x), x), m4, (P(), P("x", None)), None, [R(4), R(8, 4)])
    add("switch_data", lambda i, x: lax.switch(i, [lambda x: x * 2.0, lambda x: x - 1.0, jnp.sin], x), m4, (P(), P("x", None)), None, [np.int32(7), R(8, 4)])
    for name in ("scan_layers", "scan_grad", "fori", "while_static", "cond_data", "switch_data"):
        f, args = out[name]
        out[f"{name}_1"] = (jax.jit(f.__wrapped__ if hasattr(f, "__wrapped__") else f), [np.asarray(a) for a in args])
    del rng


def whole_programs(out) -> None:
    """The GPT training step of examples/jax/gpt_step.py: unsharded (one device), and with
    Megatron's shardings on dp x tp meshes of 4 (2x2) and 8 (2x4) devices."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "jax" / "gpt_step.py"
    spec = importlib.util.spec_from_file_location("gpt_step", path)
    gpt = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(gpt)  # type: ignore[union-attr]
    for name, shape in (("gpt_step_1", None), ("gpt_step_4", (2, 2)), ("gpt_step_8", (2, 4))):
        out[name] = gpt.jitted(shape)


def partly_manual_programs(out, mesh, R) -> None:
    """shard_map over some of the mesh axes (``axis_names``): the others stay automatic."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    # Tensor parallelism written by hand over "tp"; "dp" slices the batch automatically.
    m22 = mesh((2, 2), ("dp", "tp"))

    def tp_body(x, w1, w2):
        return lax.psum(jnp.tanh(x @ w1) @ w2, "tp")

    f = jax.shard_map(tp_body, mesh=m22, in_specs=(P(), P(None, "tp"), P("tp", None)), out_specs=P(), axis_names={"tp"})
    args = [jax.device_put(R(*shape), NamedSharding(m22, spec)) for shape, spec in [((8, 16), P("dp", None)), ((16, 32), P(None, "tp")), ((32, 16), P("tp", None))]]
    out["partial_tp"] = (jax.jit(f, out_shardings=NamedSharding(m22, P("dp", None))), args)

    # A two-stage pipeline over "pp" (stage i holds layer i; micro-batches flow with
    # ppermute in a fori_loop), the batch over an automatic "dp": on 4 and 8 devices.
    for dp in (2, 4):
        out[f"pipeline_{2 * dp}"] = pipeline(mesh((dp, 2), ("dp", "pp")), R)


def pipeline(m, R, micro: int = 3):
    """GPipe's schedule for two stages: at step t stage 0 takes micro-batch t and stage 1
    the activation stage 0 sent at step t - 1; stage 1's outputs are summed over pp."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def body(ws, xs):
        w = ws[0]
        stage = lax.axis_index("pp")

        def tick(t, carry):
            state, outs = carry
            y = jnp.tanh(jnp.where(stage == 0, xs[jnp.minimum(t, micro - 1)], state) @ w)
            done = jnp.where((stage == 1) & (t >= 1), y, outs[jnp.maximum(t - 1, 0)])
            outs = lax.dynamic_update_index_in_dim(outs, done, jnp.maximum(t - 1, 0), 0)
            return lax.ppermute(y, "pp", [(0, 1)]), outs

        _, outs = lax.fori_loop(0, micro + 1, tick, (jnp.zeros_like(xs[0]), jnp.zeros_like(xs)))
        return lax.psum(jnp.where(stage == 1, outs, 0.0), "pp")

    f = jax.shard_map(body, mesh=m, in_specs=(P("pp"), P()), out_specs=P(), axis_names={"pp"}, check_vma=False)
    args = [jax.device_put(R(2, 8, 8) * 0.5, NamedSharding(m, P("pp"))), jax.device_put(R(micro, 8, 8), NamedSharding(m, P(None, "dp")))]
    return jax.jit(f, out_shardings=NamedSharding(m, P(None, "dp"))), args


def gpt_block_gradient(jax, jnp, np) -> dict:
    """``gpt_block_grad`` (issue 27): ``jax.value_and_grad`` of the mean-squared error of a
    tensor-parallel GPT block (LayerNorm, 4-head attention, LayerNorm, GELU MLP, two
    residuals) on a 2x4 mesh (dp x tp): the batch sliced over dp, the attention's
    q/k/v and the MLP's first weight column-sliced over tp, the output projection and the
    MLP's second weight row-sliced (Megatron). Its gradients are all-reduced over dp while
    sliced over tp on different dims: before issue 27, ``local`` and ``mpi`` returned the
    output projection's gradient as zeros."""
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    rng = np.random.default_rng(27)
    m = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:8])
    b, s, d, heads, f = 4, 8, 16, 4, 32

    def layernorm(z, g):
        mean = z.mean(-1, keepdims=True)
        var = ((z - mean) ** 2).mean(-1, keepdims=True)
        return (z - mean) * jax.lax.rsqrt(var + 1e-5) * g

    def block(wq, wk, wv, wo, w1, w2, g1, g2, x):
        h = layernorm(x, g1)
        q, k, v = ((h @ w).reshape(b, s, heads, d // heads) for w in (wq, wk, wv))
        p = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads), axis=-1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, d) @ wo
        return x + jax.nn.gelu(layernorm(x, g2) @ w1) @ w2

    def loss(wq, wk, wv, wo, w1, w2, g1, g2, x, y):
        return jnp.mean((block(wq, wk, wv, wo, w1, w2, g1, g2, x) - y) ** 2)

    grad = jax.value_and_grad(loss, argnums=tuple(range(8)))

    def step(*args):
        value, grads = grad(*args)
        return (value, *grads)

    specs = [P(None, "tp")] * 3 + [P("tp", None), P(None, "tp"), P("tp", None), P(), P()]
    data = P("dp", None, None)
    sh = lambda spec: NamedSharding(m, spec)  # noqa: E731
    args = [rng.standard_normal(shape).astype(np.float32) * 0.3 for shape in [(d, d)] * 4 + [(d, f), (f, d)]]
    args += [1 + 0.1 * rng.standard_normal(d).astype(np.float32) for _ in range(2)]
    args += [rng.standard_normal((b, s, d)).astype(np.float32) for _ in range(2)]
    jitted = jax.jit(step, in_shardings=tuple(sh(x) for x in specs + [data, data]), out_shardings=(sh(P()), *(sh(x) for x in specs)))
    return {"gpt_block_grad": (jitted, args)}


def main(argv: list[str]) -> int:
    import jax
    import numpy as np

    outdir = argv[0]
    os.makedirs(outdir, exist_ok=True)
    progs = programs()
    names = argv[1:] or list(progs)
    for name in names:
        jf, args = progs[name]
        with open(os.path.join(outdir, f"{name}.mlir"), "w") as f:
            f.write(jf.lower(*args).as_text())
        res = jax.tree.leaves(jf(*args))  # the program's results, and arguments, flattened as JAX flattens them
        np.savez(os.path.join(outdir, f"{name}.in.npz"), **{f"arg{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(args))})
        np.savez(os.path.join(outdir, f"{name}.out.npz"), **{f"result{i}": np.asarray(r) for i, r in enumerate(res)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
