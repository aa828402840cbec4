"""Does the tuner pick well on this machine? ``distir-tune --backend local --ranks 2``
on ``examples/adam.mlir`` at 2^16 and 2^24 elements picks a schedule; then every
schedule is timed again in one more interleaved run, and the pick's time is compared
with the fastest of that run [target: within 10%]. The ``--model local`` pick (after
``distir-tune --calibrate``) is compared the same way.

    python bench/tune_pick.py [--sizes 2^16,2^24] [--example adam] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import EXAMPLES, note, table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2^16,2^24")
    ap.add_argument("--example", default="adam")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from distir.dialects.context import parse_module
    from distir.dialects.diagnostics import InputRejected
    from distir.tuning.sizes import at_size, format_size, parse_sizes
    from distir.tuning.timing import time_programs
    from distir.tuning.topology import get_topology
    from distir.tuning.tuner import tune

    sizes = parse_sizes(args.sizes)
    module = parse_module((EXAMPLES / f"{args.example}.mlir").read_text())
    note(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; tuning on the local backend")
    tuned = tune(module, 2, sizes, backend="local", rounds=args.rounds)
    try:
        modelled = tune(module, 2, sizes, model=get_topology("local", 2))
    except InputRejected as e:
        note(f"no --model local pick: {e}")
        modelled = None
    rows = []
    for s in sizes:
        note(f"{format_size(s)}: timing every schedule again (load {os.getloadavg()[0]:.1f})")
        again = time_programs([(c.name, at_size(c.module, tuned.dim, s)) for c in tuned.schedules if c.check == "ok"], 2, "local", rounds=args.rounds)
        ok = {n: t for n, t in again.items() if t is not None}
        fastest = min(ok, key=ok.get)  # type: ignore[arg-type]
        picks = [("--backend local", tuned.best[s])] + ([("--model local", modelled.best[s])] if modelled else [])
        for how, pick in picks:
            rows.append([format_size(s), how, pick, f"{ok[pick] * 1e3:.3f}", fastest, f"{ok[fastest] * 1e3:.3f}", f"{ok[pick] / ok[fastest]:.2f}"])
    print(table(rows, ["size", "tuner", "pick", "pick ms", "fastest in the re-run", "fastest ms", "ratio [<= 1.10]"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
