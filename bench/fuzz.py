"""Fuzz distir's front end and tools, outside CI: N inputs (mutated examples, deep
nesting, out-of-range numbers, unterminated strings, forward references, huge shapes;
``test/support/fuzz.py``) through ``distir-opt`` and ``distir-run`` in this process.

    python bench/fuzz.py [--count 10000] [--seed 0] [--save DIR] [--local 0.02]

Every input goes through ``distir-opt FILE``; a valid one also through ``distir-opt``
with a random pipeline of distir's passes, and every input through ``distir-run FILE``
(``--backend interpret``; a fraction ``--local`` on the ``local`` backend, which
compiles kernels and is slower). The script prints how many inputs ran, the exit codes
of each tool, and every case that exits with anything but 0, 1 or 2, or takes longer
than ``--per-mb`` seconds per MB of input (at least ``--floor`` seconds); ``--save DIR``
keeps those inputs. Exit status 1 when there was any. A case that runs longer than
``--limit`` seconds is stopped and counted as a hang.

Memory: under 1 GB (the programs are small; sizes of the examples are shrunk).
"""

from __future__ import annotations

import argparse
import collections
import io
import random
import signal
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test"))

from support.fuzz import GENERATORS, fuzz_input  # noqa: E402

from distir.tools.diagnostics import quiet_developer_warnings  # noqa: E402

PASSES = [
    "canonicalize", "expand-collectives", "form-collectives", "cancel-primitives", "commute-maps", "fuse-maps",
    "split-allreduce", "reorder-allgather", "reorder-broadcast", "reorder-send", "fuse-allreduce", "fuse-collectives",
    "overlap{chunks=2}", "split-allreduce{strategy=reduce-bcast}", "commute-maps{direction=down}",
]


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def call(tool, argv: list[str], limit: float) -> tuple[int | str, float, str]:
    """(exit code or 'hang'/'exception', seconds, stderr) of a tool's main in this process."""
    out, err = io.StringIO(), io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, limit)
    start = time.perf_counter()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc: int | str = tool(argv)
    except Hang:
        rc = "hang"
    except BaseException as e:  # noqa: BLE001 - an escaping exception is a finding
        rc = "exception"
        err.write(f"{type(e).__name__}: {e}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return rc, time.perf_counter() - start, err.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000, help="number of inputs (default 10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kind", choices=sorted(GENERATORS), help="only this kind of input")
    ap.add_argument("--local", type=float, default=0.02, metavar="FRACTION", help="fraction of runs on the local backend (default 0.02)")
    ap.add_argument("--per-mb", type=float, default=5.0, help="slowest acceptable seconds per MB of input (default 5)")
    ap.add_argument("--floor", type=float, default=3.0, help="a case is slow only above this many seconds (default 3)")
    ap.add_argument("--limit", type=float, default=60.0, help="stop a case after this many seconds, a hang (default 60)")
    ap.add_argument("--save", metavar="DIR", help="write the inputs of the findings there")
    args = ap.parse_args()
    quiet_developer_warnings()
    signal.signal(signal.SIGALRM, _alarm)

    from distir.dialects.context import parse_module
    from distir.runtime import npz
    from distir.tools.opt import main as opt
    from distir.tools.run import main as run

    rng = random.Random(args.seed)
    codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    kinds: collections.Counter = collections.Counter()
    findings: list[str] = []
    worst = (0.0, "")
    tmp = Path(tempfile.mkdtemp(prefix="distir-fuzz-"))
    save = Path(args.save) if args.save else None
    if save:
        save.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for i in range(args.count):
        kind, data = fuzz_input(rng, args.kind)
        kinds[kind] += 1
        path = tmp / f"case{i}.mlir"
        path.write_bytes(data)
        mb = len(data) / 1e6
        budget = max(args.floor, args.per_mb * mb)
        runs: list[tuple[str, list[str]]] = [("distir-opt", [str(path)])]
        valid = False
        try:
            module = parse_module(data.decode("utf-8"))
            valid = True
        except Exception:  # noqa: BLE001 - only deciding what else to run
            module = None
        if valid:
            pipeline = ",".join(rng.sample(PASSES, rng.randint(1, 3)))
            runs.append(("distir-opt", [str(path), "-p", pipeline]))
        ranks = (npz.static_ranks(module) if module is not None else None) or rng.choice([1, 2, 4])
        backend = "local" if rng.random() < args.local else "interpret"
        run_argv = [str(path), "--ranks", str(ranks), "--backend", backend]
        funcs = npz.functions(module) if module is not None else []
        if len(funcs) > 1:
            run_argv += ["--func", rng.choice(funcs).sym_name.data]
        runs.append(("distir-run", run_argv))
        for tool_name, argv in runs:
            tool = opt if tool_name == "distir-opt" else run
            rc, seconds, err = call(tool, argv, args.limit)
            label = f"{tool_name} {' '.join(argv[1:])}".strip()
            codes[tool_name][rc] += 1
            if seconds > worst[0]:
                worst = (seconds, f"case {i} ({kind}, {len(data)} bytes): {label}")
            bad = rc not in (0, 1, 2)
            slow = seconds > budget and not (tool_name == "distir-run" and rc == 0)
            if bad or slow:
                why = f"exit {rc}" if bad else f"{seconds:.1f} s for {len(data)} bytes"
                last = err.strip().splitlines()[-1:] or [""]
                findings.append(f"case {i} ({kind}): {label}: {why}: {last[0][:200]}")
                if save:
                    (save / f"case{i}-{kind}.mlir").write_bytes(data)
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} inputs, {len(findings)} finding(s), {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    elapsed = time.perf_counter() - start
    print(f"\n{args.count} fuzzed inputs (seed {args.seed}) in {elapsed:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    for tool_name, counter in codes.items():
        print(f"  {tool_name}: {sum(counter.values())} runs, exit codes " + ", ".join(f"{k}: {v}" for k, v in sorted(counter.items(), key=str)))
    print(f"  slowest: {worst[0]:.2f} s, {worst[1]}")
    print(f"  findings (exit code not 0/1/2, or slower than {args.per_mb:g} s/MB and {args.floor:g} s): {len(findings)}")
    for f in findings:
        print("   ", f)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
