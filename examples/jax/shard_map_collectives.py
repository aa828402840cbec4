"""A ``jax.shard_map`` program with explicit collectives, handed to distir.

    python shard_map_collectives.py [OUTDIR]

The body runs per device: ``psum`` (all-reduce), ``all_gather``, ``psum_scatter``
(reduce-scatter), ``all_to_all``, ``pmax`` and ``ppermute`` (one step around the ring of
devices). JAX lowers it to an
``sdy.manual_computation`` whose body holds StableHLO's collectives with their replica
groups; distir imports the body per device (every value ``local``) and each collective
as the ``coll`` op between views of the devices' values (``dist.from_local`` /
``dist.to_local``); the ring step is ``coll.permute offset 1``. ``OUTDIR/shard_map.mlir`` is JAX's text; run it with::

    distir-import OUTDIR/shard_map.mlir
    distir-run OUTDIR/shard_map.mlir --ranks 4 --func main --inputs OUTDIR/shard_map.in.npz

Note: arguments of a shard_map must carry their sharding before ``lower``
(``jax.device_put(x, NamedSharding(...))``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

try:
    import jax
except ModuleNotFoundError as e:
    sys.exit(f"{Path(__file__).name} needs JAX ({e}): pip install 'distir[jax]'")
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def body(a, b):
    s = jax.lax.psum(a @ b, "x")
    g = jax.lax.all_gather(s, "x", tiled=True)
    r = jax.lax.psum_scatter(g * 2.0, "x", scatter_dimension=0, tiled=True)
    t = jax.lax.all_to_all(r, "x", 0, 1, tiled=True)
    ring = [(i, (i + 1) % 4) for i in range(4)]
    return t + jax.lax.pmax(t, "x") - 0.5 * jax.lax.ppermute(t, "x", ring)


def main(outdir: Path) -> int:
    outdir.mkdir(parents=True, exist_ok=True)
    mesh = jax.make_mesh((4,), ("x",), axis_types=(AxisType.Auto,))
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(None, "x"), P("x", None)), out_specs=P(None, "x")))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
    args = [jax.device_put(a, NamedSharding(mesh, P(None, "x"))), jax.device_put(b, NamedSharding(mesh, P("x", None)))]
    (outdir / "shard_map.mlir").write_text(f.lower(*args).as_text())
    np.savez(outdir / "shard_map.in.npz", arg0=a, arg1=b)
    want = np.asarray(f(*args))

    from distir.frontends.program import import_program
    from distir.runtime.local import run_local

    module = import_program((outdir / "shard_map.mlir").read_text(), "shard_map.mlir").module
    got = run_local(module, "main", {"arg0": a, "arg1": b}, ranks=4)[0]
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print(f"distir (local, 4 ranks) vs JAX: max relative difference {err:.2e}")
    return 0 if err < 1e-5 else 2


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
