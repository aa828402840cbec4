"""``distir-import`` on the upstream test suites of Shardy and MLIR's ``shard`` dialect:
every program ends in a module or a one-line diagnostic naming the construct.

    python bench/upstream_sweep.py PATH [PATH ...] [--json OUT] [--show bad|rejected|all]
                                   [--timeout 60]

Each PATH is a ``.mlir`` file or a folder (its ``.mlir`` files, recursively). A file is
split at ``// -----`` lines as ``mlir-opt --split-input-file`` does, and each program is
imported in this process (``import_program``: read, partition, verify), as
``distir-import`` would. The upstream files are not part of distir; get them from a
checkout, e.g. Shardy's (the folders the suite covers are ``ir/test`` and
``transforms/*/test``)::

    git -C SHARDY archive HEAD shardy/dialect/sdy | tar -x -C /tmp/shardy
    python bench/upstream_sweep.py /tmp/shardy/shardy/dialect/sdy/ir/test \\
        /tmp/shardy/shardy/dialect/sdy/transforms/*/test /tmp/mlir-shard

Outcomes, per program:

* ``imported``: a partitioned, verified dist/coll module;
* ``rejected``: a located diagnostic (``ParseError``, ``InputRejected``) whose message is
  one line and is about the input -- counted by reason (the message with its numbers,
  value names and symbols blanked out, so that one kind of construct is one reason);
* ``bad``: anything else -- an exception that is not a diagnostic (a traceback), a
  verifier message about distir's own IR (``'dist.matmul' op ...``: the import produced
  invalid IR), an internal error, a message of several lines, or no answer within
  ``--timeout`` seconds.

The script prints the counts (programs, imported, rejected by reason, bad with where and
why) and exits 1 when any program is bad. ``--json OUT`` writes them.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import signal
import sys
import time
import traceback
from pathlib import Path

from distir.tools.diagnostics import quiet_developer_warnings

SPLIT = re.compile(r"^// -----.*$", re.M)
OWN_IR = re.compile(r"'(?:dist|coll|rt|nccl|func|builtin|arith|math)\.[a-z_]+' op\b")
"""A verifier message about an op of the IR distir builds: the importer built invalid IR."""


class Timeout(Exception):
    pass


def programs(paths: list[Path]) -> list[tuple[str, int, int, str]]:
    """(file, index, first line, text) of each program of the files under ``paths``."""
    files: list[Path] = []
    for p in paths:
        files += sorted(p.rglob("*.mlir")) if p.is_dir() else [p]
    out = []
    for f in files:
        text = f.read_text(errors="replace")
        pos = 0
        chunks = []
        for m in SPLIT.finditer(text):
            chunks.append((pos, text[pos : m.start()]))
            pos = m.end() + (text[m.end() : m.end() + 1] == "\n")  # the program starts on the next line
        chunks.append((pos, text[pos:]))
        for i, (start, chunk) in enumerate(chunks):
            line = text.count("\n", 0, start) + 1
            # keep the line numbers of the file: pad the chunk with the newlines before it
            out.append((str(f), i, line, "\n" * (line - 1) + chunk))
    return out


def message_of(e: BaseException) -> str:
    """The message of a diagnostic, without its location and source excerpt."""
    text = str(e)
    lines = text.split("\n")
    caret = max((i for i, ln in enumerate(lines) if ln.strip() and set(ln.strip()) <= {"^"}), default=None)
    if caret is not None:
        return "\n".join(ln.strip() for ln in lines[caret + 1 :]).strip()
    return text.strip()


def reason_of(msg: str) -> str:
    """The kind of construct a message names: numbers, value names, symbols and shapes
    blanked out."""
    m = re.match(r"unsupported op '([^']+)'", msg)
    if m:
        return f"unsupported op '{m.group(1)}'"
    r = re.sub(r"%[\w#.$-]+", "%v", msg)
    r = re.sub(r"@[\w.$-]+", "@s", r)
    r = re.sub(r"tensor<[^>]*>", "tensor<..>", r)
    r = re.sub(r"\b\d+(x\d+)+\b", "AxB", r)
    r = re.sub(r"-?\b\d+\b", "N", r)
    r = re.sub(r'"[^"]*"', '"a"', r)
    r = re.sub(r"\[[^\[\]]*\]", "[..]", r)
    return r[:160]


def classify(name: str, text: str, timeout: float) -> tuple[str, str]:
    """(outcome, message) of importing one program."""
    from xdsl.utils.exceptions import ParseError, VerifyException

    from distir.dialects.diagnostics import InputRejected
    from distir.frontends.program import import_program

    def on_alarm(signum, frame):
        raise Timeout

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        import_program(text, name)
        return "imported", ""
    except Timeout:
        return "bad", f"no answer within {timeout:g} s"
    except (ParseError, InputRejected) as e:
        msg = message_of(e)
        if OWN_IR.search(msg) or "a bug in distir" in msg or "(internal)" in msg:
            return "bad", msg
        if "\n" in msg:
            return "bad", "a message of several lines: " + msg.replace("\n", " | ")
        return "rejected", msg
    except VerifyException as e:
        return "bad", "distir's IR does not verify: " + message_of(e).replace("\n", " | ")
    except RecursionError:
        return "bad", "RecursionError"
    except Exception as e:  # noqa: BLE001 - every other exception is a finding
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return "bad", f"{type(e).__name__}: {e} at {Path(tb.filename).name}:{tb.lineno}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", type=Path, help=".mlir files or folders of them")
    p.add_argument("--json", type=Path, help="write the counts and the findings as JSON")
    p.add_argument("--show", choices=("bad", "rejected", "all"), default="bad", help="which programs to list (default: the bad ones)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per program (default 60)")
    args = p.parse_args(argv)
    quiet_developer_warnings()
    missing = [str(x) for x in args.paths if not x.exists()]
    if missing:
        p.error(f"no such file or folder: {', '.join(missing)}")
    progs = programs(args.paths)
    outcomes: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    listed = []
    per_folder: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    t0 = time.perf_counter()
    for f, i, line, text in progs:
        outcome, msg = classify(f"{f}", text, args.timeout)
        outcomes[outcome] += 1
        per_folder[str(Path(f).parent)][outcome] += 1
        if outcome == "rejected":
            reasons[reason_of(msg)] += 1
        if args.show == "all" or outcome == args.show or (args.show == "rejected" and outcome == "bad"):
            listed.append({"file": f, "program": i, "line": line, "outcome": outcome, "message": msg})
    seconds = time.perf_counter() - t0
    print(f"{len(progs)} programs in {len({f for f, *_ in progs})} files ({seconds:.0f} s): {outcomes['imported']} imported, {outcomes['rejected']} rejected with a diagnostic, {outcomes['bad']} bad")
    for folder, c in sorted(per_folder.items()):
        print(f"  {folder}: {c['imported']} imported, {c['rejected']} rejected, {c['bad']} bad")
    print("rejected, by reason:")
    for r, n in reasons.most_common():
        print(f"  {n:4d}  {r}")
    for item in listed:
        print(f"{item['outcome']}: {item['file']}:{item['line']} (program {item['program']}): {item['message']}")
    if args.json:
        args.json.write_text(json.dumps({"programs": len(progs), "outcomes": dict(outcomes), "reasons": dict(reasons.most_common()), "listed": listed}, indent=1))
    return 1 if outcomes["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
