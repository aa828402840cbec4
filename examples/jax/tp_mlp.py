"""Megatron's tensor-parallel MLP in JAX, handed to distir.

    python tp_mlp.py [OUTDIR]          # default: the current directory

JAX lowers the jitted block on 4 host devices with its shardings (W1 and b1 sliced by
columns over "tp", W2 by rows): ``OUTDIR/tp_mlp.mlir`` is
``jax.jit(f).lower(...).as_text()``, StableHLO with Shardy annotations.
``OUTDIR/tp_mlp.in.npz`` holds the inputs keyed ``arg0``.. (distir-run's convention) and
``OUTDIR/tp_mlp.jax.npz`` JAX's own result. Then, from the shell::

    distir-import OUTDIR/tp_mlp.mlir --remarks               # the partitioned dist/coll IR
    distir-run OUTDIR/tp_mlp.mlir --ranks 4 --func main \\
        --inputs OUTDIR/tp_mlp.in.npz --outputs out.npz      # local backend (default)
    mpiexec -n 4 distir-run OUTDIR/tp_mlp.mlir --ranks 4 --backend mpi --func main \\
        --inputs OUTDIR/tp_mlp.in.npz --outputs out.npz
    distir-tune OUTDIR/tp_mlp.mlir --ranks 4 --model dgx2    # CoCoNet's schedules, ranked

The script also does the import and the run in Python and prints how far distir's result
is from JAX's.
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


def mlp(x, w1, b1, w2):
    return jax.nn.gelu(x @ w1 + b1) @ w2


def main(outdir: Path) -> int:
    outdir.mkdir(parents=True, exist_ok=True)
    # jax.make_mesh makes Explicit axes by default in JAX 0.10; Auto gives the classic
    # behaviour (a contracted sliced dim is a partial sum, not an error).
    mesh = jax.make_mesh((4,), ("tp",), axis_types=(AxisType.Auto,))
    S = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    f = jax.jit(mlp, in_shardings=(S(), S(None, "tp"), S("tp"), S("tp", None)), out_shardings=S())
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(8, 64), (64, 256), (256,), (256, 64)]]
    (outdir / "tp_mlp.mlir").write_text(f.lower(*args).as_text())
    np.savez(outdir / "tp_mlp.in.npz", **{f"arg{i}": a for i, a in enumerate(args)})
    want = np.asarray(f(*args))
    np.savez(outdir / "tp_mlp.jax.npz", result0=want)

    from distir.frontends.program import import_program
    from distir.runtime.local import run_local

    imported = import_program((outdir / "tp_mlp.mlir").read_text(), str(outdir / "tp_mlp.mlir"))
    for line in imported.remark_lines():
        print(line)
    got = run_local(imported.module, "main", {f"arg{i}": a for i, a in enumerate(args)}, ranks=4)[0]
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print(f"distir (local, 4 ranks) vs JAX: max relative difference {err:.2e}")
    return 0 if err < 1e-5 else 2


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
