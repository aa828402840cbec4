"""Unfused RS-Adam-AG against AR-Adam on the ``local`` backend, 2^24 f32 per rank, 2 ranks,
side by side in one run [target: RS-Adam-AG / AR-Adam <= 1.0].

CoCoNet's RS-Opt-AG (GShard-Eq) is AR-Opt with the AllReduce split and the AllGather
reordered with the *fused* optimizer computation, so it runs one kernel on each rank's
slice and gathers p, m and v (``fuse-maps,split-allreduce,reorder-allgather``): that is the
fair comparison. The variant without ``fuse-maps`` (three kernels, three AllGathers
interleaved) and fuse(RS-Adam-AG) are printed too. Each schedule is bound once, warmed
up, then all run round-robin; each round's times are kept and the median and best are
printed, for ``--repeat`` separate runs.

    python bench/rs_ag_ratio.py [--log2n 24] [--rounds 7] [--repeat 3]
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

from common import LocalStep, adam_text, note, schedule, table  # noqa: E402

SCHEDULES = {
    "AR-Adam": "fuse-maps",
    "RS-Adam-AG": "fuse-maps,split-allreduce,reorder-allgather",
    "RS-Adam-AG (3 kernels)": "split-allreduce,reorder-allgather",
    "fuse(RS-Adam-AG)": "fuse-maps,split-allreduce,reorder-allgather,slice-state{targets=m,v},fuse-allreduce",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = 1 << args.log2n
    note(f"Adam step, 2^{args.log2n} f32 per rank, 2 ranks, local backend; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    steps = {name: LocalStep(schedule(adam_text(n), p), 2) for name, p in SCHEDULES.items()}
    rows, ratios = [], []
    try:
        for rep in range(args.repeat):
            for s in steps.values():
                s()
                s()
            times: dict[str, list[float]] = {k: [] for k in steps}
            for _ in range(args.rounds):
                for k, s in steps.items():
                    t = time.perf_counter()
                    s()
                    times[k].append(time.perf_counter() - t)
            med = {k: statistics.median(v) for k, v in times.items()}
            best = {k: min(v) for k, v in times.items()}
            ratio = med["RS-Adam-AG"] / med["AR-Adam"]
            ratios.append(ratio)
            for k in steps:
                rows.append([str(rep + 1), k, f"{med[k] * 1e3:.1f}", f"{best[k] * 1e3:.1f}", f"{med[k] / med['AR-Adam']:.2f}"])
            note(f"  run {rep + 1}: RS-Adam-AG / AR-Adam = {ratio:.2f} (load {os.getloadavg()[0]:.1f})")
    finally:
        for s in steps.values():
            s.close()
    print(table(rows, ["run", "schedule", "median ms", "best ms", "/ AR-Adam"]))
    print(f"\nRS-Adam-AG / AR-Adam (median step): {', '.join(f'{r:.2f}' for r in ratios)} [target <= 1.0]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
