"""The tuner on a real training step (issue 27): ``jax.value_and_grad`` of a two-layer
GELU MLP with a mean-squared loss and an SGD update, x and y sliced over a 16-device mesh
(data parallel), lowered by JAX and tuned with ``distir-tune --model dgx2 --nodes 1
--ranks 16``.

    python bench/tune_train_step.py [--rows 8192] [--d 1600] [--f 6400] [--devices 16]
                                    [--write PROGRAM.mlir] [--repeat 3] [--profile]
                                    [--baseline DIR]

It lowers the step with JAX (in a subprocess: ``XLA_FLAGS`` gives JAX the host devices;
shapes only, nothing is allocated), then measures, each in a process of its own, the CPU
seconds of the exploration alone (``tuning.explore`` as ``distir-tune`` calls it) and of
the whole ``distir-tune`` run (its worker processes included), the least of
``--repeat``, and prints them with the machine's load. Target: the whole run at the full
size (w1 1600x6400, w2 6400x1600, 8x1024 rows; 400 schedules explored) within the
tuner's 10 s budget. ``--baseline DIR`` measures another distir source tree too (e.g.
``git archive COMMIT | tar -x -C DIR``), alternating with this one, and prints both
side by side with their ratio. ``--write PROGRAM.mlir`` keeps the lowered program
(``--rows 64 --d 16 --f 64 --write ...`` gives the same structure, small:
test/tuning/inputs/mlp-train-step.mlir). ``--profile`` prints cProfile's top functions of
one tuning run of this tree.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

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


MEASURE = r"""
import io, contextlib, json, resource, sys

def cpu():  # this process and the tuner's worker processes
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

path, devices, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from distir.tools.run import read_module
from distir.tools.tune import main
from distir.tuning.explore import explore, only_function
from distir.tuning.sizes import choose_dim, fitting

if what == "explore":
    module = only_function(read_module(path), None)
    d = choose_dim(module, None)
    t0 = cpu()
    ex = explore(module, fits=lambda m: any(fitting(m, devices, d, [d])))
    print(json.dumps({"cpu": cpu() - t0, "schedules": len(ex.candidates)}))
else:
    buf, err = io.StringIO(), io.StringIO()
    t0 = cpu()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        code = main([path, "--model", "dgx2", "--nodes", "1", "--ranks", str(devices)])
    if code != 0:
        sys.exit(f"distir-tune exited {code}:\n{err.getvalue()[-3000:]}")
    print(json.dumps({"cpu": cpu() - t0, "table": buf.getvalue()}))
"""


def measure(path: str, devices: int, what: str, tree: str | None) -> dict:
    """One measurement (``what``: ``explore`` or ``tune``) in a process of its own, with
    the distir of this checkout or (``tree``) of another source tree."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as link:
        if tree is not None:  # ``import distir`` finds the other tree first
            os.symlink(os.path.abspath(tree), os.path.join(link, "distir"))
            env["PYTHONPATH"] = link + os.pathsep + env.get("PYTHONPATH", "")
        argv = [sys.executable, "-c", MEASURE, path, str(devices), what]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"measuring {what} ({tree or 'this tree'}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8 * 1024)
    ap.add_argument("--d", type=int, default=1600)
    ap.add_argument("--f", type=int, default=6400)
    ap.add_argument("--devices", type=int, default=16)
    ap.add_argument("--write", metavar="PROGRAM.mlir", help="keep the lowered program here")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--baseline", metavar="DIR", help="another distir source tree (git archive COMMIT | tar -x -C DIR), measured alike")
    args = ap.parse_args()
    if args.baseline is not None and not (Path(args.baseline) / "tuning" / "explore.py").is_file():
        raise SystemExit(f"--baseline {args.baseline}: not a distir source tree (no tuning/explore.py)")
    text = lower_step(args.rows, args.d, args.f, args.devices)
    trees: dict[str, str | None] = {"this tree": None} if args.baseline is None else {"baseline": args.baseline, "this tree": None}
    with tempfile.TemporaryDirectory() as tmp:
        path = args.write or os.path.join(tmp, "step.mlir")
        header = (
            f"// bench/tune_train_step.py --rows {args.rows} --d {args.d} --f {args.f} --devices {args.devices}: jax.value_and_grad of a\n"
            "// two-layer GELU MLP, mean-squared loss, SGD update; x, y sliced over the devices (data parallel).\n"
        )
        Path(path).write_text(header + text)
        best: dict[tuple[str, str], float] = {}
        tables: dict[str, str] = {}
        schedules: dict[str, int] = {}
        loads = [load()]
        for _ in range(max(1, args.repeat)):  # the trees alternate: both see the load alike
            for name, tree in trees.items():
                ex = measure(path, args.devices, "explore", tree)
                run = measure(path, args.devices, "tune", tree)
                best[name, "explore"] = min(best.get((name, "explore"), math.inf), ex["cpu"])
                best[name, "tune"] = min(best.get((name, "tune"), math.inf), run["cpu"])
                schedules[name], tables[name] = ex["schedules"], run["table"]
                loads.append(load())
        print(tables["this tree"])
        if args.baseline is not None and tables["baseline"].splitlines()[1:] != tables["this tree"].splitlines()[1:]:
            print("note: the baseline's table differs from this tree's (below its first line)\n")
        print(
            f"distir-tune on the step (w1 {args.d}x{args.f}, w2 {args.f}x{args.d}, {args.rows} rows, {args.devices} ranks): CPU seconds, "
            f"least of {args.repeat}; load {', '.join(loads)} on {os.cpu_count()} cores; target: distir-tune <= 10 s"
        )
        names = list(trees)
        print(f"{'':40}" + "".join(f"{n:>12}" for n in names) + ("       ratio" if len(names) == 2 else ""))
        for what, label in (("explore", "exploration"), ("tune", "distir-tune (explore, check, predict)")):
            cells = [best[n, what] for n in names]
            ratio = f"{cells[0] / cells[1]:11.2f}x" if len(cells) == 2 else ""
            print(f"{label:40}" + "".join(f"{c:11.2f}s" for c in cells) + ratio)
        print(f"{'schedules explored':40}" + "".join(f"{schedules[n]:12d}" for n in names))
        if args.profile:
            import cProfile
            import pstats

            from distir.tools.tune import main as tune_main

            prof = cProfile.Profile()
            prof.enable()
            tune_main([path, "--model", "dgx2", "--nodes", "1", "--ranks", str(args.devices)])
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
