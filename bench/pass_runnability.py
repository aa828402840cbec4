"""Every pass keeps a runnable program runnable, on more programs than CI checks
(``test/test_pass_runnability.py``): N random programs (dims of 0, 1 and primes, which
the ranks seldom divide: blocks of different sizes, some empty) on 1 to 8 ranks through
every registered pass, each result run
on ``interpret`` (and ``local`` with ``--local``) and compared with the original.

    python bench/pass_runnability.py [--count 1000] [--local] [--max-ops 8]

Prints the programs checked, the runs that agreed per backend, the requests the passes
refused with a diagnostic, the transformed programs on ``[?]`` meshes rejected at some
rank count (allowed: the passes do not know it; ``support/runnability.py``), and every
failure. Exit status 1 when there was any.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from support.programs import programs  # noqa: E402
from support.runnability import MESHES, Outcome, check_pipelines  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000, help="random programs (default 1000)")
    ap.add_argument("--local", action="store_true", help="also run every program on the local backend")
    ap.add_argument("--max-ops", type=int, default=8, help="ops per program (default 8)")
    ap.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    args = ap.parse_args()
    backends = ("interpret", "local") if args.local else ("interpret",)
    total = Outcome()
    ranks: collections.Counter = collections.Counter()
    static = collections.Counter()

    @seed(args.seed)
    @settings(max_examples=args.count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(programs(max_ops=args.max_ops, meshes=MESHES, free_dims=True))
    def check(prog):
        ranks[prog.ranks] += 1
        static["[?]" if "[?]" in prog.text else "static"] += 1
        check_pipelines(prog, backends=backends, outcome=total)

    start = time.perf_counter()
    check()
    elapsed = time.perf_counter() - start
    print(f"{sum(ranks.values())} programs in {elapsed:.0f} s; ranks " + ", ".join(f"{k}: {v}" for k, v in sorted(ranks.items())) + f"; meshes {dict(static)}")
    for b in backends:
        print(f"  {b}: {sum(v for (p, bb), v in total.ran.items() if bb == b)} transformed programs ran and agreed")
    print(f"  refused by a pass with a diagnostic: {sum(total.refused.values())} {dict(total.refused) or ''}")
    by_pipeline = collections.Counter(r.split(" on ")[0] for r in total.rejected)
    print(f"  [?] meshes, transformed rejected at some rank count (allowed): {len(total.rejected)} {dict(by_pipeline) or ''}")
    print(f"  failures: {len(total.failures)}")
    for f in total.failures[:20]:
        print("   ", f.replace("\n", "\n    "))
    return 1 if total.failures else 0


if __name__ == "__main__":
    sys.exit(main())
