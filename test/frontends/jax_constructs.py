"""The constructs of the programs people write, as JAX lowers them: each is lowered twice,
as a one-device program (``NAME_1``: a plain ``jax.jit(f)``, no mesh, no shardings) and
with shardings on a mesh of 4 devices (``NAME_4``). ``jax_programs.py`` adds them to its
programs (one JAX start-up for all); ``test_jax_constructs.py`` runs them.
"""

from __future__ import annotations

ONE_DEVICE = "_1"
SHARDED = "_4"


class ForPlatform:
    """A jitted function lowered for another platform (``jax.jit(f).trace(..).lower(
    lowering_platforms=..)``), run on this one."""

    def __init__(self, jitted, platform: str):
        self.jitted, self.platform = jitted, platform

    def lower(self, *args):
        return self.jitted.trace(*args).lower(lowering_platforms=(self.platform,))

    def __call__(self, *args):
        return self.jitted(*args)


def programs(jax, jnp, np, rng, mesh) -> dict[str, tuple]:
    """name -> (jitted function, arguments)."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def R(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    out: dict[str, tuple] = {}

    def both(name, f, args, ins, outs, m=None):
        """``name_1``: ``jax.jit(f)``; ``name_4``: with ``ins``/``outs`` (PartitionSpecs,
        ``outs`` a tuple for several results) on ``m`` (4 devices along "x")."""
        m = m or mesh(4)

        def S(spec):
            return NamedSharding(m, spec)

        out[name + ONE_DEVICE] = (jax.jit(f), args)
        out_sh = tuple(S(s) for s in outs) if isinstance(outs, tuple) else S(outs)
        out[name + SHARDED] = (jax.jit(f, in_shardings=tuple(S(s) for s in ins), out_shardings=out_sh), args)

    # A two-layer MLP: the one-device program, and Megatron's shardings of it.
    def mlp(x, w1, b1, w2):
        return jnp.tanh(x @ w1 + b1) @ w2

    both("mlp", mlp, [R(8, 16), R(16, 32), R(32), R(32, 16)], (P(), P(None, "x"), P("x"), P("x", None)), P())

    # The element-wise ops JAX emits beyond arith's: chlo.square (x.var()), chlo.erfc
    # (exact GELU), chlo.erf, tan, logistic, is_finite, remainder (fmod and Python's %),
    # power, sign, both roundings, reduce_precision, bitcast_convert, is_inf.
    lax = jax.lax

    def floats(x, y):
        q = x / y  # y has zeros: +-inf and nan
        return (
            x.var(-1),
            jax.nn.gelu(x, approximate=False),
            jax.scipy.special.erf(x),
            jnp.tan(x),
            jax.nn.sigmoid(x),
            jnp.isfinite(q),
            jnp.isinf(q),
            jnp.fmod(x, y + 0.5),
            jnp.remainder(x, 0.75),
            jnp.abs(x) ** y,
            jnp.sign(q),
            jnp.round(x * 2),
            lax.round(x * 2, lax.RoundingMethod.AWAY_FROM_ZERO),
            lax.reduce_precision(x * 1e4, 5, 10),
            lax.bitcast_convert_type(x, jnp.int32) ^ 1,
            x * jnp.array([1.5, -2.0, 0.25, 3.0] * 4, jnp.float32) + jnp.array([[1.0], [2.0], [3.0], [4.0]] * 2, jnp.float32),
        )

    xf = R(8, 16) * 3
    xf[0, :4] = [0.5, -0.5, 1.5, 2.5]  # ties of both roundings
    yf = np.round(R(8, 16)).astype(np.float32)  # zeros included
    both("floats", floats, [xf, yf], (P("x", None), P("x", None)), tuple(P("x") if i == 0 else P("x", None) for i in range(16)))

    # Integer and boolean arithmetic as StableHLO defines it: division and remainder by
    # zero (XLA: -1 and the dividend), INT_MIN / -1, shifts by the width or more or by a
    # negative amount, floor division, bitwise ops, booleans.
    def ints(i, j):
        b = i > j
        return (
            lax.div(i, j),
            lax.rem(i, j),
            i // jnp.where(j == 0, 1, j),
            i % jnp.where(j == 0, 1, j),
            lax.shift_left(i, j),
            lax.shift_right_arithmetic(i, j),
            lax.shift_right_logical(i, j),
            (i & j) | (~i ^ j),
            jnp.abs(i) + jnp.sign(j) * i * j - jnp.maximum(i, j) + jnp.minimum(i, j),
            b & (j > 0) | ~b ^ (i < 0),
            jnp.logical_and(b, j != 0).sum(1),
        )

    ii = rng.integers(-40, 40, (8, 16)).astype(np.int32)
    jj = rng.integers(-3, 40, (8, 16)).astype(np.int32)
    ii[0, :3], jj[0, :3] = [-(2**31), 7, -5], [-1, 0, 0]
    both("ints", ints, [ii, jj], (P("x", None), P("x", None)), tuple(P("x") if i == 10 else P("x", None) for i in range(11)))

    # Gathers beyond rows: cross-entropy with integer labels (jnp.take_along_axis: a
    # batched gather and the and-reduction of its bounds check), on a batch-sliced and on
    # a vocabulary-sliced batch of logits; jnp.take with its default mode="fill"
    # (out-of-range ids give NaN rows) of a row-sliced table; dynamic_update_slice (the
    # second start clamped into the operand).
    def xent(logits, labels):
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, labels[:, None], axis=-1).mean()

    labels = rng.integers(0, 32, 8).astype(np.int32)
    both("xent", xent, [R(8, 32), labels], (P("x", None), P("x")), P())
    out["xent_vocab" + SHARDED] = (jax.jit(xent, in_shardings=(NamedSharding(mesh(4), P(None, "x")), NamedSharding(mesh(4), P())), out_shardings=NamedSharding(mesh(4), P())), [R(8, 32), labels])

    # Cross-entropy as a language model writes it: logits [B, S, V] and labels [B, S]
    # (take_along_axis with two batching dims), its value and gradient (a scatter with
    # two batching dims), and the same loss along dim 1 of logits [B, V, S] (batching
    # dims 0 and 2); on batch-sliced and on vocabulary-sliced logits.
    def xent3(logits, labels):
        def loss(lg):
            return -jnp.take_along_axis(jax.nn.log_softmax(lg), labels[..., None], axis=-1).mean()

        vt = jax.nn.log_softmax(jnp.swapaxes(logits, 1, 2), axis=1)
        return (*jax.value_and_grad(loss)(logits), -jnp.take_along_axis(vt, labels[:, None, :], axis=1).mean())

    r3 = np.random.default_rng(29)  # (its own stream: the programs after keep their inputs)
    xent3_args = [r3.standard_normal((4, 8, 32)).astype(np.float32), r3.integers(0, 32, (4, 8)).astype(np.int32)]
    both("xent3", xent3, xent3_args, (P("x"), P("x")), (P(), P("x"), P()))
    out["xent3_vocab" + SHARDED] = (
        jax.jit(xent3, in_shardings=(NamedSharding(mesh(4), P(None, None, "x")), NamedSharding(mesh(4), P())), out_shardings=tuple(NamedSharding(mesh(4), s) for s in (P(), P(None, None, "x"), P()))),
        xent3_args,
    )

    def take_fill(table, ids):
        return jnp.take(table, ids, axis=0) * 2.0

    both("take_fill", take_fill, [R(32, 16), rng.integers(-40, 40, 12).astype(np.int32)], (P("x", None), P()), P())

    def dus(x, y):
        return lax.dynamic_update_slice(x, y * 2.0, (3, 5)), lax.dynamic_update_slice(x, y, (-1, 100))

    # (Sliced on dim 1 instead, XLA's partitioned program returns x unchanged for the
    # clamped start (7, 100); StableHLO clamps it to (5, 12), as distir does.)
    both("dus", dus, [R(8, 16), R(3, 4)], (P("x", None), P()), (P("x", None), P("x", None)))

    # Scatters: the gradient of an embedding lookup (stablehlo.scatter with add into
    # zeros), with the table sliced by rows (vocabulary parallel: each device adds into
    # the rows it holds) or the batch sliced (data parallel: partial sums, one
    # all-reduce); table.at[ids].add(u) into a table (out-of-range ids dropped, negative
    # ones from the end); a 1-d histogram.
    def emb_grad(table, ids, w):
        return jax.grad(lambda t: (jnp.tanh(t[ids]) * w).sum())(table)

    emb_args = [R(32, 16), rng.integers(-32, 32, 12).astype(np.int32), R(12, 16)]
    both("emb_grad", emb_grad, emb_args, (P("x", None), P(), P()), P("x", None))
    out["emb_grad_dp" + SHARDED] = (jax.jit(emb_grad, in_shardings=tuple(NamedSharding(mesh(4), s) for s in (P(), P("x"), P("x", None))), out_shardings=NamedSharding(mesh(4), P())), emb_args)

    def scatter_add(table, ids, u, hist_ids):
        return table.at[ids].add(u), jnp.zeros(10, jnp.float32).at[hist_ids].add(1.0)

    sc_args = [R(32, 16), rng.integers(-40, 40, 12).astype(np.int32), R(12, 16), rng.integers(0, 12, 20).astype(np.int32)]
    both("scatter_add", scatter_add, sc_args, (P("x", None), P(), P(), P()), (P("x", None), P()))

    # argmax/argmin (a reduce of values and indices with JAX's comparator), jnp.sort and
    # jnp.argsort along the unsliced dim of a batch-sliced operand (ties, -0.0 and NaN).
    def arg_sort(x, i):
        return jnp.argmax(x, -1), jnp.argmin(x, 0), jnp.argmax(i, 1), jnp.sort(x, -1), jnp.argsort(x, -1), jnp.sort(i, 1)

    xs = np.round(R(8, 16) * 2) / 2
    xs[0, :5] = [np.nan, 1.0, np.nan, -0.0, 0.0]
    xs[1, :3] = [3.0, 3.0, -1.0]
    both("arg_sort", arg_sort, [xs.astype(np.float32), rng.integers(-3, 3, (8, 16)).astype(np.int32)], (P("x", None), P("x", None)), (P("x"), P(), P("x"), P("x", None), P("x", None), P("x", None)))

    # Random numbers: dropout with jax.random (threefry2x32 as StableHLO integer ops on
    # ui32: shifts, xor, wrapping adds, bitcast_convert to floats), the key an argument
    # (uint32[2]) or made from an int32 seed inside; the raw bits too. Lowered for a GPU,
    # where JAX unrolls threefry's rounds (for the CPU it writes them as a
    # stablehlo.while loop of 5 trips).
    def dropout(x, key, seed):
        keep = jax.random.bernoulli(key, 0.9, x.shape)
        noise = jax.random.uniform(jax.random.key(seed), x.shape)
        return jnp.where(keep, x, 0.0), keep, noise, jax.random.bits(key, (4, 3))

    drop_args = [R(8, 16), np.asarray(jax.random.PRNGKey(7)), np.int32(-12345)]
    out["dropout" + ONE_DEVICE] = (ForPlatform(jax.jit(dropout), "cuda"), drop_args)
    S4 = lambda spec: NamedSharding(mesh(4), spec)  # noqa: E731
    out["dropout" + SHARDED] = (ForPlatform(jax.jit(dropout, in_shardings=(S4(P("x", None)), S4(P()), S4(P())), out_shardings=(S4(P("x", None)), S4(P("x", None)), S4(P()), S4(P()))), "cuda"), drop_args)

    # Masks from iota (causal attention: iota, compare, select), jnp.tril, jnp.all/any.
    def causal(q, k):
        s = q @ k.T
        mask = jnp.arange(8)[:, None] >= jnp.arange(8)[None, :]
        return jax.nn.softmax(jnp.where(mask, s, -jnp.inf), -1), jnp.all(s > -1, -1), jnp.any(s > 1, 0), jnp.tril(s)

    both("causal", causal, [R(8, 4), R(8, 4)], (P("x", None), P()), (P("x", None), P("x"), P(), P("x", None)))
    return out
