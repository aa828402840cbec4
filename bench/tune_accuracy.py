"""The cost model against the runtime: after ``distir-tune --calibrate``, ``--model local``
predicts the measured step time of every Adam, SGD and LAMB schedule the tuner explores,
on 2 ranks of the ``local`` backend, at 2^16 ... 2^24 elements; prints each prediction
next to the measurement, then the median and the worst relative error [targets: median
within 25%, worst within 50%], and for each size whether the model's pick is the
fastest measured schedule.

The calibration runs first, in this process (``--no-calibrate`` reuses the stored one),
so that it and the measurements see the machine in the same state: on a machine shared
with other jobs, a calibration from an hour before describes another machine.

    python bench/tune_accuracy.py [--sizes 2^16..2^24:2] [--ranks 2] [--examples adam,sgd,lamb] [--rounds 5] [--no-calibrate]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import EXAMPLES, note, table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2^16..2^24:2")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--examples", default="adam,sgd,lamb")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-calibrate", action="store_true")
    args = ap.parse_args()
    import os

    from distir.dialects.context import parse_module
    from distir.tuning.calibrate import local_topology
    from distir.tuning.sizes import format_size, parse_sizes
    from distir.tuning.tuner import tune

    sizes = parse_sizes(args.sizes)
    note(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if not args.no_calibrate:
        from distir.tuning.calibrate import calibrate

        note("calibrating the local topology")
        calibrate(args.ranks, backends=("local",))
    topo = local_topology(args.ranks)
    rows, errors = [], []
    start = time.perf_counter()
    for name in args.examples.split(","):
        module = parse_module((EXAMPLES / f"{name}.mlir").read_text())
        note(f"{name}: predicting")
        predicted = tune(module, args.ranks, sizes, model=topo)
        note(f"{name}: timing {len(predicted.schedules)} schedules x {len(sizes)} sizes on the local backend")
        measured = tune(module, args.ranks, sizes, backend="local", rounds=args.rounds)
        for p, m in zip(predicted.schedules, measured.schedules):
            assert p.name == m.name
            for s in sizes:
                tp, tm = p.times.get(s), m.times.get(s)
                if tp is None or tm is None:
                    continue
                err = tp / tm - 1
                errors.append(abs(err))
                rows.append([name, p.name, format_size(s), f"{tm * 1e3:.3f}", f"{tp * 1e3:.3f}", f"{err * 100:+.0f}%"])
        best_p = {s: predicted.best[s] for s in sizes}
        best_m = {s: measured.best[s] for s in sizes}
        for s in sizes:
            if best_p[s] and best_m[s]:
                pick = measured.by_name(best_p[s]).times[s]
                note(f"  {name} {format_size(s)}: model picks {best_p[s]} ({pick * 1e3:.3f} ms measured), fastest measured {best_m[s]} ({measured.by_name(best_m[s]).times[s] * 1e3:.3f} ms): {pick / measured.by_name(best_m[s]).times[s]:.2f}x")
    print(table(rows, ["program", "schedule", "size", "measured ms", "predicted ms", "error"]))
    note(f"load average {os.getloadavg()[0]:.1f}")
    if errors:
        print(f"\n{len(errors)} predictions: median |error| {statistics.median(errors) * 100:.0f}% [target <= 25%], "
              f"worst {max(errors) * 100:.0f}% [target <= 50%]  ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
