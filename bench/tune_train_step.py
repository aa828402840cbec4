"""The tuner on a real training step (issue 27): ``jax.value_and_grad`` of a two-layer
GELU MLP with a mean-squared loss and an SGD update, x and y sliced over a 16-device mesh
(data parallel), lowered by JAX and tuned with ``distir-tune --model dgx2 --nodes 1
--ranks 16``.

    python bench/tune_train_step.py [--rows 8192] [--d 1600] [--f 6400] [--devices 16]
                                    [--write PROGRAM.mlir] [--repeat 3] [--profile]

It lowers the step with JAX (in a subprocess: ``XLA_FLAGS`` gives JAX the host devices;
shapes only, nothing is allocated), then runs ``distir-tune`` on it in this process and
prints the CPU seconds of the tuning (least of ``--repeat``), the machine's load and the
tuner's own phases. Target: exploring and predicting the step at the full size (w1
1600x6400, w2 6400x1600, 8x1024 rows; 373 schedules explored) within the tuner's 10 s
budget. ``--write PROGRAM.mlir`` keeps the lowered program (``--rows 64 --d 16 --f 64
--write ...`` gives the same structure, small, for ``distir-tune`` by hand).
``--profile`` prints cProfile's top functions of one tuning run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

LOWER = r"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=" + sys.argv[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

devices, rows, d, f = (int(a) for a in sys.argv[1:5])
mesh = jax.make_mesh((devices,), ("dp",), axis_types=(AxisType.Auto,))

def loss(w1, w2, x, y):
    out = jax.nn.gelu(x @ w1) @ w2
    return jnp.mean((out - y) ** 2)

def step(w1, w2, x, y):
    value, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2, x, y)
    return value, w1 - 0.01 * g1, w2 - 0.01 * g2

rep, data = NamedSharding(mesh, P()), NamedSharding(mesh, P("dp", None))
args = [jax.ShapeDtypeStruct((d, f), jnp.float32, sharding=rep), jax.ShapeDtypeStruct((f, d), jnp.float32, sharding=rep),
        jax.ShapeDtypeStruct((rows, d), jnp.float32, sharding=data), jax.ShapeDtypeStruct((rows, d), jnp.float32, sharding=data)]
jitted = jax.jit(step, in_shardings=(rep, rep, data, data), out_shardings=(rep, rep, rep))
sys.stdout.write(jitted.lower(*args).as_text())
"""


def lower_step(rows: int, d: int, f: int, devices: int) -> str:
    """The StableHLO + Shardy text of the training step (JAX in a subprocess)."""
    out = subprocess.run([sys.executable, "-c", LOWER, str(devices), str(rows), str(d), str(f)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"lowering with JAX failed:\n{out.stderr[-3000:]}")
    return out.stdout


def tune_cpu(path: str, devices: int) -> tuple[float, str]:
    """CPU seconds of one ``distir-tune PATH --model dgx2 --nodes 1 --ranks N`` (run in
    this process; its worker processes' CPU counted too) and what it printed."""
    import contextlib
    import io

    from distir.tools.tune import main

    import resource

    def cpu_now() -> float:  # this process and the tuner's worker processes
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    buf, err = io.StringIO(), io.StringIO()
    t0 = cpu_now()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        code = main([path, "--model", "dgx2", "--nodes", "1", "--ranks", str(devices)])
    cpu = cpu_now() - t0
    if code not in (0,):
        raise SystemExit(f"distir-tune exited {code}:\n{err.getvalue()[-3000:]}")
    return cpu, buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8 * 1024)
    ap.add_argument("--d", type=int, default=1600)
    ap.add_argument("--f", type=int, default=6400)
    ap.add_argument("--devices", type=int, default=16)
    ap.add_argument("--write", metavar="PROGRAM.mlir", help="keep the lowered program here")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    text = lower_step(args.rows, args.d, args.f, args.devices)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.write or os.path.join(tmp, "step.mlir")
        header = (
            f"// bench/tune_train_step.py --rows {args.rows} --d {args.d} --f {args.f} --devices {args.devices}: jax.value_and_grad of a\n"
            "// two-layer GELU MLP, mean-squared loss, SGD update; x, y sliced over the devices (data parallel).\n"
        )
        Path(path).write_text(header + text)
        best, printed = min(tune_cpu(path, args.devices) for _ in range(max(1, args.repeat)))
        print(printed)
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        print(f"distir-tune on the step (w1 {args.d}x{args.f}, w2 {args.f}x{args.d}, {args.rows} rows, {args.devices} ranks): "
              f"{best:.2f} s CPU (least of {args.repeat}; load {load} on {os.cpu_count()} cores; target <= 10 s)")
        if args.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            tune_cpu(path, args.devices)
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
