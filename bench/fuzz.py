"""Fuzz distir's tools, outside CI: N inputs through ``distir-opt``, ``distir-run``,
``distir-import``, ``distir-tune`` and ``distir-synth`` in this process
(``test/support/fuzz.py``).

    python bench/fuzz.py [--count 5000] [--seed 0] [--save DIR] [--local 0.02]
                         [--families ir,topology,synth,tune] [--slow 30] [--minutes M]

Four families of inputs, drawn by ``--weights``:

* ``ir``: mutated examples, deep nesting, out-of-range numbers, unterminated strings,
  forward references, huge shapes; every input goes through ``distir-opt FILE``, a valid
  one also with a random pipeline of distir's passes, one in four through
  ``distir-import FILE``, and every input through
  ``distir-run FILE`` (``--backend interpret``; a fraction ``--local`` on ``local``);
* ``topology``: topology TOML files (non-finite, zero, negative, absurd numbers, missing
  and unknown fields, many levels, empty, binary, not UTF-8, nested deeply) through
  ``distir-synth --topology FILE`` on a small hierarchy and, one time in three,
  ``distir-tune --model FILE`` on a small program;
* ``synth``: ``distir-synth`` argument lists (near-valid and anything);
* ``tune``: ``distir-tune`` argument lists on a small program or a fuzzed one.

Findings: an exit code other than 0, 1 or 2 (or an escaping exception); a case taking
more than ``--slow`` CPU seconds (default 30; an IR case also when slower than ``--per-mb``
seconds per MB and ``--floor`` seconds, as before); a non-finite number (``nan``,
``inf``, ``Infinity``) in what distir-tune or distir-synth print or write as JSON. A
case running longer than ``--limit`` seconds (default 60) is stopped and counted as a
hang. The script prints the inputs per family, the exit codes per tool, the slowest
case and every finding; ``--save DIR`` keeps the findings' inputs. Exit status 1 when
there was any finding.

Memory: under 1 GB (the programs are small; sizes of the examples are shrunk).
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import random
import re
import signal
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test"))

from support.fuzz import GENERATORS, TOPOLOGY as TOPOLOGY_TEXT, fuzz_input, mutation, synth_argv, topology, tune_argv  # noqa: E402

from distir.tools.diagnostics import quiet_developer_warnings  # noqa: E402

PASSES = [
    "canonicalize", "expand-collectives", "form-collectives", "cancel-primitives", "commute-maps", "fuse-maps",
    "split-allreduce", "reorder-allgather", "reorder-broadcast", "reorder-send", "fuse-allreduce", "fuse-collectives",
    "overlap{chunks=2}", "split-allreduce{strategy=reduce-bcast}", "commute-maps{direction=down}",
]


class Hang(BaseException):
    pass


TIMED_OUT = [False]


def _alarm(signum, frame):
    TIMED_OUT[0] = True
    raise Hang()


def call(tool, argv: list[str], limit: float) -> tuple[int | str, float, str, str]:
    """(exit code or 'hang'/'exception', CPU seconds, stdout, stderr) of a tool's main in
    this process. CPU seconds (all threads of this process, so the ranks of ``local``
    too), not wall-clock time, judge slowness: on a shared machine a case waits for a
    core; the wall-clock ``limit`` still stops a hang."""
    out, err = io.StringIO(), io.StringIO()
    TIMED_OUT[0] = False
    signal.setitimer(signal.ITIMER_REAL, limit)
    start = time.process_time()
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
    if TIMED_OUT[0]:  # the tool's last line of defence reported the alarm as its error
        rc = "hang"
    return rc, time.process_time() - start, out.getvalue(), err.getvalue()


FAMILIES = ("ir", "topology", "synth", "tune")
WEIGHTS = {"ir": 40, "topology": 20, "synth": 20, "tune": 20}

# A small program the tuner explores quickly (one all-reduce and a map to fuse).
PROGRAM = """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<64xf32, @world, [local]>, %b: !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %s = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  %y = dist.map(%s, %b) : (!dist.tensor<64xf32, @world, [replicated]>, !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  ^bb0(%p: f32, %q: f32):
    %r = arith.addf %p, %q : f32
    dist.yield %r : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}
"""

# nan, inf, infinity as numbers (also "nanx", a speedup), not inside words ("info")
NON_FINITE = re.compile(r"(?i)(?<![a-z_])(nan|inf(inity)?)(?=x\b|\b)")


def non_finite(text: str) -> str | None:
    """The first non-finite number printed in ``text``, or None."""
    m = NON_FINITE.search(text)
    return None if m is None else text[max(0, m.start() - 40) : m.end() + 20].replace("\n", " ")


def non_finite_json(path: Path) -> str | None:
    """A non-finite number in a JSON file the tool wrote, or None (missing: None)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    found: list[str] = []
    try:
        json.loads(text, parse_constant=lambda c: found.append(c))
    except ValueError:
        return None
    return f"{path.name}: {found[0]}" if found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=5_000, help="number of inputs (default 5000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families of inputs (default: all)")
    ap.add_argument("--kind", choices=sorted(GENERATORS), help="only this kind of IR input")
    ap.add_argument("--local", type=float, default=0.02, metavar="FRACTION", help="fraction of IR runs on the local backend (default 0.02)")
    ap.add_argument("--per-mb", type=float, default=5.0, help="IR inputs: slowest acceptable seconds per MB of input (default 5)")
    ap.add_argument("--floor", type=float, default=3.0, help="IR inputs: a case is slow only above this many seconds (default 3)")
    ap.add_argument("--slow", type=float, default=30.0, help="any case slower than this is a finding (default 30)")
    ap.add_argument("--limit", type=float, default=60.0, help="stop a case after this many seconds, a hang (default 60)")
    ap.add_argument("--save", metavar="DIR", help="write the inputs of the findings there")
    ap.add_argument("--minutes", type=float, help="stop after this many minutes (the inputs done so far are reported)")
    args = ap.parse_args()
    families = [f for f in args.families.split(",") if f]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        ap.error(f"unknown families {sorted(unknown)} (choose from {', '.join(FAMILIES)})")
    quiet_developer_warnings()
    signal.signal(signal.SIGALRM, _alarm)

    from distir.dialects.context import parse_module
    from distir.runtime import npz
    from distir.tools.importer import main as importer
    from distir.tools.opt import main as opt
    from distir.tools.run import main as run
    from distir.tools.synth import main as synth
    from distir.tools.tune import main as tune

    tools = {"distir-import": importer, "distir-opt": opt, "distir-run": run, "distir-synth": synth, "distir-tune": tune}
    rng = random.Random(args.seed)
    codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    kinds: collections.Counter = collections.Counter()
    findings: list[str] = []
    worst = (0.0, "")
    tmp = Path(tempfile.mkdtemp(prefix="distir-fuzz-"))
    (tmp / "program.mlir").write_text(PROGRAM)
    save = Path(args.save) if args.save else None
    if save:
        save.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    weights = [WEIGHTS[f] for f in families]
    done = 0
    for i in range(args.count):
        if args.minutes is not None and time.perf_counter() - start > 60 * args.minutes:
            break
        done = i + 1
        family = rng.choices(families, weights=weights)[0]
        case = tmp / f"case{i}"
        case.mkdir()
        files = {
            "program": str(tmp / "program.mlir"),
            "topology": str(case / "topology.toml"),
            "ir": str(case / "fuzzed.mlir"),
            "json": str(case / "out.json"),
            "plot": str(case / "plot.png"),
            "out": str(case / "best.mlir"),
            "dir": str(case / "mlir"),
            "bad": "/dev/null/nope",  # neither a file nor a folder can be made there
        }
        runs: list[tuple[str, list[str]]] = []
        budget = args.slow
        data = b""
        if family == "ir":
            kind, data = fuzz_input(rng, args.kind)
            path = case / "input.mlir"
            path.write_bytes(data)
            budget = min(args.slow, max(args.floor, args.per_mb * len(data) / 1e6))
            runs.append(("distir-opt", [str(path)]))
            if rng.random() < 0.25:
                runs.append(("distir-import", [str(path)]))
            try:
                module = parse_module(data.decode("utf-8"))
            except Exception:  # noqa: BLE001 - only deciding what else to run
                module = None
            if module is not None:
                runs.append(("distir-opt", [str(path), "-p", ",".join(rng.sample(PASSES, rng.randint(1, 3)))]))
            ranks = (npz.static_ranks(module) if module is not None else None) or rng.choice([1, 2, 4])
            backend = "local" if rng.random() < args.local else "interpret"
            run_argv = [str(path), "--ranks", str(ranks), "--backend", backend]
            funcs = npz.functions(module) if module is not None else []
            if len(funcs) > 1:
                run_argv += ["--func", rng.choice(funcs).sym_name.data]
            runs.append(("distir-run", run_argv))
        elif family == "topology":
            kind = "topology"
            data = topology(rng)
            Path(files["topology"]).write_bytes(data)
            h, a = rng.choice([("2,4", "2,4"), ("2,4", "8"), ("8", "2,4"), ("2,2,2", "4,2")])
            runs.append(("distir-synth", ["--hierarchy", h, "--axes", a, "--reduce-axes", "0", "--topology", files["topology"], "--json", files["json"]]))
            if rng.random() < 1 / 3:
                runs.append(("distir-tune", [files["program"], "--ranks", rng.choice(["2", "4", "8"]), "--model", files["topology"], "--json", files["json"]]))
        elif family == "synth":
            kind = "synth"
            data = topology(rng) if rng.random() < 0.3 else b""
            Path(files["topology"]).write_bytes(data or TOPOLOGY_TEXT.encode())
            runs.append(("distir-synth", synth_argv(rng, files)))
        else:
            kind = "tune"
            data = mutation(rng)
            Path(files["ir"]).write_bytes(data)
            Path(files["topology"]).write_bytes(topology(rng) if rng.random() < 0.3 else TOPOLOGY_TEXT.encode())
            runs.append(("distir-tune", tune_argv(rng, files)))
        kinds[kind] += 1
        for tool_name, argv in runs:
            rc, seconds, out, err = call(tools[tool_name], argv, args.limit)
            label = f"{tool_name} {' '.join(a if len(a) < 80 else a[:40] + '...' for a in argv)}".strip()
            codes[tool_name][rc] += 1
            if seconds > worst[0]:
                worst = (seconds, f"case {i} ({kind}, {len(data)} bytes): {label}")
            why = None
            if rc not in (0, 1, 2):
                why = f"exit {rc}"
            elif seconds > budget and not (tool_name == "distir-run" and rc == 0 and seconds <= args.slow):
                why = f"{seconds:.1f} CPU s"
            elif tool_name in ("distir-synth", "distir-tune"):
                bad = non_finite(out) or non_finite_json(Path(files["json"]))
                if bad:
                    why = f"non-finite number: ...{bad}..."
            if why:
                last = err.strip().splitlines()[-1:] or [""]
                findings.append(f"case {i} ({kind}): {label}: {why}: {last[0][:200]}")
                if save:
                    (save / f"case{i}-{kind}.bin").write_bytes(data)
                    (save / f"case{i}-{kind}.argv").write_text("\n".join(argv) + "\n")
        if (i + 1) % 250 == 0:
            print(f"  {i + 1} inputs, {len(findings)} finding(s), {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    elapsed = time.perf_counter() - start
    cut = f" (stopped by --minutes {args.minutes:g}; {args.count} asked)" if done < args.count else ""
    print(f"\n{done} fuzzed inputs{cut} (seed {args.seed}) in {elapsed:.0f} s, {done / max(elapsed, 1e-9):.2f} inputs/s: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    for tool_name, counter in sorted(codes.items()):
        print(f"  {tool_name}: {sum(counter.values())} runs, exit codes " + ", ".join(f"{k}: {v}" for k, v in sorted(counter.items(), key=str)))
    print(f"  slowest: {worst[0]:.2f} CPU s, {worst[1]}")
    print(f"  findings (exit code not 0/1/2, more than {args.slow:g} CPU s, non-finite numbers printed): {len(findings)}")
    for f in findings:
        print("   ", f)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
