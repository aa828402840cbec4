"""The README's first command: the Adam example (examples/adam.mlir) and its fused CoCoNet
schedule fuse(RS-Adam-AG) on the local backend, 4 ranks: checks that the two give the
same result and prints the time of a step of each.

    pip install -e . && python bench/adam_demo.py [--ranks 4] [--log2n 20]

Memory: about 0.4 GB at the default size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import ADAM_SCHEDULES, LocalStep, adam_text, interleaved, schedule  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--log2n", type=int, default=20, help="elements per rank: 2^N (default 20)")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    from distir.runtime.equivalence import compare_outputs

    n = 1 << args.log2n
    pipeline = ADAM_SCHEDULES["fuse(RS-Adam-AG)"]
    plain, fused = LocalStep(adam_text(n), args.ranks, seed=1), LocalStep(schedule(adam_text(n), pipeline), args.ranks, seed=1)
    c = compare_outputs(plain.runner.outputs(plain.runner.step()), fused.runner.outputs(fused.runner.step()), "AR-Adam", "fuse(RS-Adam-AG)")
    t = interleaved({"AR-Adam": plain, "fuse(RS-Adam-AG)": fused}, args.reps)
    plain.close()
    fused.close()
    print(f"Adam, {n} f32 elements per rank, {args.ranks} ranks, local backend")
    print(f"fused schedule: distir-opt -p '{pipeline}'")
    print(f"fuse(RS-Adam-AG) vs AR-Adam: {c.message}")
    print(f"step time: AR-Adam {t['AR-Adam'] * 1e3:.2f} ms, fuse(RS-Adam-AG) {t['fuse(RS-Adam-AG)'] * 1e3:.2f} ms ({t['AR-Adam'] / t['fuse(RS-Adam-AG)']:.2f}x)")
    return 0 if c.ok else 2


if __name__ == "__main__":
    sys.exit(main())
