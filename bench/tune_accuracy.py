"""The cost model against the runtime: ``--model local`` predicts the measured step time
of every Adam, SGD and LAMB schedule the tuner explores, on 2 ranks of the ``local``
backend, at 2^16 ... 2^24 elements; prints each prediction next to the measurement, the
median and the worst relative error [targets: median within 25%, worst within 50%], and
per size whether the model's pick is the fastest measured schedule [within 10%].

The calibration (``distir-tune --calibrate``'s programs and fit) runs *interleaved with*
the schedules it predicts: each batch of schedules is timed round-robin together with
the calibration programs, and the fit of that batch predicts them. On a machine shared
with other jobs the memory bandwidth changes several-fold within minutes; a calibration
measured at another moment describes another machine; and both sides take the median
of their rounds (a 5 ms calibration program finds a quiet moment more often than a
100 ms step would). ``--stored`` uses the stored calibration instead. A batch runs
largest first, schedules and calibration programs together, as the calibration orders
its own programs (``calibrate.programs``): each program runs after one of about its
size. (With the schedules first and the calibration after, the first schedule of every
batch ran right after the calibration's tiniest program, with caches and rank threads
cold: at 2^16 the program as written measured 1.3-1.6x its copy ``AR-Adam``, which
lowers to the same kernels and runs second.)

    python bench/tune_accuracy.py [--sizes 2^16..2^24:2] [--ranks 2] [--examples adam,sgd,lamb] [--rounds 5] [--min-time 2] [--stored]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import EXAMPLES, note, table  # noqa: E402

BATCH_BYTES = 3 << 30


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2^16..2^24:2")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--examples", default="adam,sgd,lamb")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds each batch runs at least (up to 60 rounds): the medians of short steps need many rounds")
    ap.add_argument("--stored", action="store_true")
    args = ap.parse_args()

    from distir.dialects.context import parse_module
    from distir.lowering.pipeline import lower
    from distir.tuning import calibrate
    from distir.tuning.cost_model import Scaling, predict, prepare
    from distir.tuning.explore import Checker, explore
    from distir.tuning.sizes import at_size, choose_dim, format_size, parse_sizes
    from distir.tuning.timing import build, time_programs

    sizes = parse_sizes(args.sizes)
    cal = [(f"calibration:{k}", parse_module(t)) for k, t in calibrate.programs().items()]
    footprint = {k: _footprint(build, m, args.ranks) for k, m in cal}
    note(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows, errors, picks = [], [], []
    start = time.perf_counter()
    for name in args.examples.split(","):
        module = parse_module((EXAMPLES / f"{name}.mlir").read_text())
        d = choose_dim(module, None)
        ex = explore(module)
        checker = Checker.of(ex, args.ranks)
        cands = [c for c in ex.candidates if checker(c) == "ok"]
        for s in sizes:
            programs = [(c.name, at_size(c.module, d, s)) for c in cands]
            batches, batch, used = [], [], 0
            for p in programs:
                size = footprint[p[0]] = _footprint(build, p[1], args.ranks)
                if batch and used + size > BATCH_BYTES:
                    batches.append(batch)
                    batch, used = [], 0
                batch.append(p)
                used += size
            batches.append(batch)
            measured, predicted = {}, {}
            for batch in batches:
                note(f"{name} {format_size(s)}: {len(batch)} schedules with the calibration programs (load {os.getloadavg()[0]:.1f})")
                ordered = sorted(batch + ([] if args.stored else cal), key=lambda p: -footprint[p[0]])  # stable: largest first
                times = time_programs(ordered, args.ranks, "local", rounds=args.rounds, statistic="median", min_time=args.min_time, max_rounds=60)
                if args.stored:
                    topo = calibrate.local_topology(args.ranks)
                else:
                    fit = calibrate.fit({k.split(":", 1)[1]: v for k, v in times.items() if k.startswith("calibration:")}, args.ranks, "local")  # type: ignore[misc]
                    topo = calibrate.topology_from(fit, "local", args.ranks)
                for cname, module_s in batch:
                    lowered = lower(module_s, args.ranks)
                    prepared = prepare(lowered, next(iter(_funcs(module_s))), topo, args.ranks, Scaling(s, 2**61 - 1))
                    predicted[cname] = float(predict(prepared, [s])[0])
                    measured[cname] = times[cname]
            for cname in measured:
                tm, tp = measured[cname], predicted[cname]
                if tm is None:
                    continue
                err = tp / tm - 1
                errors.append(abs(err))
                rows.append([name, cname, format_size(s), f"{tm * 1e3:.3f}", f"{tp * 1e3:.3f}", f"{err * 100:+.0f}%"])
            ok = {k: v for k, v in measured.items() if v is not None}
            fastest = min(ok, key=ok.get)  # type: ignore[arg-type]
            pick = min(predicted, key=predicted.get)  # type: ignore[arg-type]
            picks.append([name, format_size(s), pick, fastest, f"{ok[pick] / ok[fastest]:.2f}"])
    print(table(rows, ["program", "schedule", "size", "measured ms", "predicted ms", "error"]))
    print()
    print(table(picks, ["program", "size", "model's pick", "fastest measured", "pick / fastest [<= 1.10]"]))
    note(f"load average {os.getloadavg()[0]:.1f}")
    if errors:
        print(f"\n{len(errors)} predictions: median |error| {statistics.median(errors) * 100:.0f}% [target <= 25%], "
              f"worst {max(errors) * 100:.0f}% [target <= 50%]  ({time.perf_counter() - start:.0f} s)")
    return 0


def _funcs(module):
    from xdsl.dialects import func

    return [f.sym_name.data for f in module.ops if isinstance(f, func.FuncOp)]


def _footprint(build, module, ranks) -> int:
    from distir.tuning.timing import _footprint as footprint

    return footprint(build(module, ranks))


if __name__ == "__main__":
    sys.exit(main())
