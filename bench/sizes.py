"""Adam step time vs tensor size (2^10 ... 2^26 f32 elements per rank) for each schedule
on the local backend (2 ranks): prints a table; with ``--out PREFIX`` also saves it as
PREFIX.csv and a plot as PREFIX.png (matplotlib). The README's table and plot are
``--out bench/adam_sizes``.

    python bench/sizes.py [--min 10] [--max 26] [--step 2] [--out PREFIX]

Memory: about 9 GB at the largest default size (2^26); --max 24 needs about 2.3 GB.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import ADAM_SCHEDULES, LocalStep, adam_text, median_time, note, schedule, table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min", type=int, default=10)
    ap.add_argument("--max", type=int, default=26)
    ap.add_argument("--step", type=int, default=2)
    ap.add_argument("--out", metavar="PREFIX", help="also write PREFIX.csv and PREFIX.png (default: print only)")
    args = ap.parse_args()
    sizes = list(range(args.min, args.max + 1, args.step))
    results: dict[str, dict[int, float]] = {name: {} for name in ADAM_SCHEDULES}
    for log2n in sizes:
        n = 1 << log2n
        reps = max(3, min(50, (1 << 22) // n))
        for name, pipeline in ADAM_SCHEDULES.items():
            note(f"  2^{log2n}: {name}")
            step = LocalStep(schedule(adam_text(n), pipeline), 2)
            results[name][log2n] = median_time(step, reps)
            step.close()
    header = ["elements/rank", *ADAM_SCHEDULES, "fused speedup"]
    rows = []
    for log2n in sizes:
        t = [results[name][log2n] for name in ADAM_SCHEDULES]
        rows.append([f"2^{log2n}", *[f"{x * 1e3:.3f} ms" for x in t], f"{t[0] / t[-1]:.2f}x"])
    print("\nAdam step time vs size, local backend, 2 ranks (median):\n")
    print(table(rows, header))
    if not args.out:
        return 0
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["log2_elements", *[f"{name}_s" for name in ADAM_SCHEDULES]])
        for log2n in sizes:
            w.writerow([log2n, *[results[name][log2n] for name in ADAM_SCHEDULES]])
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        note("matplotlib is not installed: no plot (pip install matplotlib)")
        return 0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in ADAM_SCHEDULES:
        ax.plot([1 << s for s in sizes], [results[name][s] * 1e3 for s in sizes], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("f32 elements per rank")
    ax.set_ylabel("step time (ms)")
    ax.set_title("Data-parallel Adam step, local backend, 2 ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=120)
    print(f"\nsaved {args.out}.csv and {args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
