"""The constructs of the programs people write, as JAX lowers them: each is lowered twice,
as a one-device program (``NAME_1``: a plain ``jax.jit(f)``, no mesh, no shardings) and
with shardings on a mesh of 4 devices (``NAME_4``). ``jax_programs.py`` adds them to its
programs (one JAX start-up for all); ``test_jax_constructs.py`` runs them.
"""

from __future__ import annotations

ONE_DEVICE = "_1"
SHARDED = "_4"


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
    return out
