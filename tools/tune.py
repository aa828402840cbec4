"""``distir-tune``: CoCoNet's autotuner (DESIGN §5; user guide: docs/tune.md).

    distir-tune FILE --ranks N [--sizes 2^10..2^30|a,b,...] [--dim D]
                [--backend local|mpi | --model TOPOLOGY [--nodes N]]
                [--json F] [--plot F.png] [-o BEST.mlir] [--func NAME] [--as-slice NAMES]
                [--top K | --all] [--max-schedules N] [--time-budget S]
    distir-tune --calibrate [--ranks N]

Explores the schedules of FILE's function (``tuning/explore.py``), checks each against
the program with the reference interpreter, then times each on a backend
(``--backend``, default ``local``) or predicts it on a topology (``--model``: ``dgx2``,
``p2-a100``, ``p2-v100``, ``local`` after ``--calibrate``, or a TOML file), at every size
of ``--sizes`` (the program's own size by default): the dimension ``--dim`` (default:
the largest of the program) is replaced by each size everywhere it occurs. The search
skips what cannot change the answer (``tuning/search.py``; ``--all`` evaluates and lists
every schedule); a program of many independent parts (a model's optimizer step) is
tuned class by class of its parts (``tuning/units.py``).

Prints, per size, the program as written, the best schedule and the ``--top`` K
schedules (default 10), one row per family (overlaps that differ only in their chunk
order and are predicted alike are one row: ``[4 chunks, natural|ring|remote_first]``),
each with its time, speedup over the program as written and the ``distir-opt -p``
pipeline that produces it; then one ``best`` line per size. ``--json`` writes the
DESIGN §5 format, ``--plot`` the speedups vs size (matplotlib), ``-o`` the best schedule
(one size). ``--max-schedules`` and ``--time-budget`` bound the search (the best found
so far, said to be cut short); a first Ctrl-C does the same and exits 130. Off a
terminal a progress line goes to stderr every few seconds. ``--nodes`` defaults to the
nodes ``--ranks`` needs. ``--calibrate`` fits the ``local`` topology (and ``local-mpi``)
on this machine for ``--ranks`` ranks (default 2) and stores it; with FILE it then tunes.

Exit codes: 0 success; 1 input rejected (parse, verify, bad option or file); 2 a
schedule computes something other than the program (a distir bug, reported on stderr;
that schedule is never picked); 3 internal error; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import signal
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass

from distir.dialects.diagnostics import check_rank_count
from distir.tools.diagnostics import InputRejected, check_output, make_parser, run_tool, write_output

EXIT_BUG = 2


def format_size(n: int) -> str:  # the tuning package is imported once the arguments are parsed
    from distir.tuning.sizes import format_size

    return format_size(n)


def parse_sizes(text: str) -> list[int]:
    from distir.tuning.sizes import parse_sizes

    return parse_sizes(text)


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("distir-tune", "Explore, check and time or predict the schedules of a distir program.")
    p.add_argument("file", metavar="FILE", nargs="?", help="the program (.mlir), or - for standard input")
    p.add_argument("--ranks", type=int, metavar="N", help="number of ranks (default: the size of a static mesh; 2 for --calibrate)")
    p.add_argument("--sizes", metavar="SIZES", help="2^10..2^30 (powers of two), 2^10..2^30:2 (every 2nd), or a list a,b,... (default: the program's size)")
    p.add_argument("--dim", type=int, metavar="D", help="the dimension the sizes replace (default: the program's largest)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--backend", metavar="NAME", help="time on this backend: local (default) or mpi")
    how.add_argument("--model", metavar="TOPOLOGY", help="predict on a topology: dgx2, p2-a100, p2-v100, local, local-mpi or a .toml file")
    p.add_argument("--nodes", type=int, metavar="N", help="nodes of the --model topology (default: as many as --ranks needs)")
    p.add_argument("--calibrate", action="store_true", help="fit the 'local' topology of this machine (local and mpi backends) and store it")
    p.add_argument("--json", metavar="F", help="write the results as JSON (DESIGN §5)")
    p.add_argument("--plot", metavar="F.png", help="plot each schedule's speedup vs size")
    p.add_argument("-o", "--output", metavar="BEST.mlir", help="write the best schedule (needs a single size)")
    p.add_argument("--func", metavar="NAME", help="function to tune (default: the only one)")
    p.add_argument("--as-slice", metavar="NAMES", help="in-place arguments the schedules may keep sliced (CoCoNet's asSlice); default: all but the first in-place result's; 'none' for none")
    p.add_argument("--rounds", type=int, default=5, metavar="R", help="timing rounds per schedule with --backend (default 5; best of them)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--top", type=int, metavar="K", help="schedules shown per size besides the best and the program as written (default 10; with more than 3 sizes, one row per size)")
    shown.add_argument("--all", action="store_true", help="evaluate every schedule the exploration finds and list every one")
    p.add_argument("--max-schedules", type=int, metavar="N", help="stop after evaluating N schedules (the best found so far)")
    p.add_argument("--time-budget", type=float, metavar="S", help="stop searching after S seconds (the best found so far)")
    return p


# --------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------


class _Progress:
    """A progress bar on a terminal (tqdm); off a terminal one line on stderr every
    ``EVERY`` seconds (a pipe or a log file still shows that the search is alive)."""

    LABELS = {"explore": "exploring", "check": "checking", "predict": "predicting", "time": "timing", "classes": "tuning classes of parts", "calibrate": "calibrating"}
    EVERY = 5.0

    def __init__(self, tool: str = "distir-tune") -> None:
        self.tool = tool
        self.tty = sys.stderr.isatty()
        self.bar = None
        self.phase: str | None = None
        self.start = time.monotonic()
        self.last = self.start

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.tty:
            now = time.monotonic()
            if now - self.last >= self.EVERY:
                self.last = now
                count = f"{done} of {total}" if total else f"{done}"
                print(f"{self.tool}: {self.LABELS.get(phase, phase)}: {count} ({now - self.start:.0f} s)", file=sys.stderr, flush=True)
            return
        from tqdm import tqdm

        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = tqdm(total=total or None, desc=self.LABELS.get(phase, phase), unit="schedule", leave=False, file=sys.stderr)
        assert self.bar is not None
        if total and self.bar.total != total:
            self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class _Interrupt:
    """The first Ctrl-C asks the search to stop with the best found so far; a second one
    stops at once (``KeyboardInterrupt``, exit 130)."""

    def __init__(self) -> None:
        self.asked = False
        self.previous = None

    def __enter__(self) -> _Interrupt:
        try:
            self.previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread (an embedding program): leave Ctrl-C alone
            self.previous = None
        return self

    def _handle(self, signum, frame) -> None:
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True
        print("\ndistir-tune: interrupted: stopping with the best schedule found so far (Ctrl-C again to quit at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def __call__(self) -> bool:
        return self.asked


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------


def format_time(t: float | None) -> str:
    if t is None:
        return "n/a"
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1:
        return f"{t * 1e3:.3f} ms"
    return f"{t:.3f} s"


def _label(s) -> str:
    """A schedule's name in the table, flagged when its check did not pass."""
    if s.check == "ok":
        return s.name
    return s.name + (" (WRONG: a distir bug)" if s.check.startswith("differs") else " (not checked)")


_ORDER = re.compile(r"^(?P<head>.*) \[(?P<chunks>\d+) (?P<order>natural|ring|remote_first)(?P<tiles> tiles)?(?P<rest>(, [^\]]*)?)\](?P<tail>.*)$")


@dataclass
class Row:
    """One row of the table: schedules predicted alike that differ only in their
    overlap's chunk order, shown as one (``[4 chunks, natural|ring]``)."""

    name: str
    time: float | None
    members: list

    @property
    def first(self):
        return self.members[0]


def fold(schedules: Sequence, size: int) -> list[Row]:
    """The schedules as rows (``Row``), in the order given."""
    rows: list[Row] = []
    index: dict[tuple, Row] = {}
    for s in schedules:
        t = s.times.get(size)
        m = _ORDER.match(s.name)
        if m is None or s.check != "ok":
            rows.append(Row(_label(s), t, [s]))
            continue
        key = (m["head"], m["chunks"], m["tiles"], m["rest"], m["tail"], t)
        row = index.get(key)
        if row is None:
            row = index[key] = Row("", t, [])
            rows.append(row)
        row.members.append(s)
    for row in index.values():
        m = _ORDER.match(row.first.name)
        assert m is not None
        found = {_ORDER.match(x.name)["order"] for x in row.members}  # type: ignore[index]
        orders = "|".join(o for o in ("natural", "ring", "remote_first") if o in found)
        what = "tiles" if m["tiles"] else "chunks"
        row.name = f"{m['head']} [{m['chunks']} {what}, {orders}{m['rest']}]{m['tail']}" if len(row.members) > 1 else row.first.name
    return rows


def _sort_key(size: int):
    return lambda s: (s.times.get(size) is None, s.times.get(size) or 0.0, s.name)


def size_rows(result, size: int, top: int | None) -> tuple[list[Row], int]:
    """The rows of one size (``top`` families after the best, plus the program as
    written; every schedule when ``top`` is None) and how many do not run at that size."""
    ordered = sorted(result.schedules, key=_sort_key(size))
    if top is None:
        return [Row(_label(s), s.times.get(size), [s]) for s in ordered], 0
    # cut short, a schedule not predicted at any size is still the best found so far
    unpredicted = (lambda s: all(t is None for t in s.times.values())) if result.cut_short else (lambda s: False)
    running = [s for s in ordered if s.times.get(size) is not None or s.check.startswith("differs") or unpredicted(s)]
    rows = fold(running, size)
    shown = rows[: top + 1]
    baseline = next((r for r in rows if any(m.original for m in r.members)), None)
    if baseline is not None and baseline not in shown:
        shown.append(baseline)
    shown += [r for r in rows if r not in shown and r.first.check.startswith("differs")]
    return shown, len(ordered) - len(running)


LONG_PIPELINE = 160
"""A pipeline longer than this many characters is abridged in the default table."""

_TARGETS = re.compile(r"\btargets=([^ }]*)")


def abridged(pipeline: str) -> str:
    """``pipeline`` with each ``targets=`` list longer than one name replaced by its
    count (``targets=<64 names>``): a whole model's pipeline names every tensor."""

    def count(m: re.Match) -> str:
        names = m.group(1).split(",")
        return m.group(0) if len(names) == 1 else f"targets=<{len(names)} names>"

    return _TARGETS.sub(count, pipeline)


def _padding(result, s, size: int) -> str:
    """The collectives of schedule ``s`` that move padding at ``size`` (a dim the ranks
    do not divide: NCCL's equal counts), with their bytes per rank (``-``: none)."""
    from distir.lowering.padding import format_padding, padding_moved
    from distir.tuning.sizes import at_size

    if s.module is None:
        return "-"
    try:
        return format_padding(padding_moved(at_size(s.module, result.dim, size), result.ranks))
    except Exception:  # noqa: BLE001 - a schedule that does not fit this size moves nothing
        return "-"


SUMMARY_SIZES = 3
"""With more sizes than this (and no ``--top``), one summary table replaces the tables
per size."""

LEGEND = (
    "*: best; =: a tie (within the timing noise of the best); ±: the rounds' scatter above the best; "
    "asSlice(m,v): state kept sliced (CoCoNet); [N chunks, a|b]: overlaps differing only in chunk order"
)


def _wrap_pipeline(pipeline: str, width: int | None) -> str:
    """The pipeline as lines of at most ``width`` characters, cut after a pass's comma
    (never inside a pass: each line, and their concatenation, is ``-p`` text)."""
    if width is None or len(pipeline) <= width:
        return pipeline
    lines, cur = [], ""
    for part in re.split(r"(?<=,)(?![^{]*})", pipeline):
        if cur and len(cur) + len(part) > width:
            lines.append(cur)
            cur = ""
        cur += part
    lines.append(cur)
    return "\n".join(lines)


def _time_cell(s, size: int, shown_time: str) -> str:
    sp = s.spread.get(size) if s.measured else None
    return shown_time if sp is None else f"{shown_time} ±{sp * 100:.0f}%"


def render_table(result, top: int | None = 10, width: int | None = None) -> str:
    """Per size: the best (``*``), the schedules tied with it (``=``), the ``top``
    fastest families and the program as written, by time (measured times with their
    spread, ``±``), with the speedup over the program as written and the pipeline (one
    longer than ``LONG_PIPELINE`` characters with its ``targets`` lists counted,
    ``abridged``; cut into lines after a pass to fit ``width``); the schedules that do
    not run at the size counted in one line; then one ``best`` line per size (saying
    when the best is a tie) and one line explaining the marks. ``top=None`` lists every
    schedule, every pipeline whole. More than ``SUMMARY_SIZES`` sizes and
    ``top=-1``: one row per size instead (``render_summary``). Plain text (rich's
    layout, no escape codes), at most ``width`` columns where it can."""
    import io

    from rich.console import Console
    from rich.table import Table

    if top == -1:
        return render_summary(result, width)
    out = io.StringIO()
    console = Console(file=out, width=width or 100_000, color_system=None, force_terminal=False, soft_wrap=False, highlight=False, emoji=False, markup=False)
    shortened = False
    for size in result.sizes:
        rows, missing = size_rows(result, size, top)
        tied = {s.name for s in result.ties(size)}
        table = Table(box=None, pad_edge=False, padding=(0, 1))
        name_width = max((len(r.name) for r in rows), default=10)
        name_max = None if width is None else min(name_width, max(20, width // 3))
        # the pipeline's column: what the others leave (mark, name, "999.999 ms ±99%", speedup, 4 gaps)
        budget = None if width is None or name_max is None else max(24, width - 1 - name_max - 15 - 7 - 4)
        table.add_column("")
        table.add_column("schedule", no_wrap=width is None, min_width=name_max, max_width=name_max)
        table.add_column("time", justify="right", no_wrap=True)
        table.add_column("speedup", justify="right", no_wrap=True)
        padding = {id(row): _padding(result, row.first, size) for row in rows}
        if any(p != "-" for p in padding.values()):
            table.add_column("padding moved per rank", no_wrap=width is None, overflow="fold")
        else:
            padding = {}
        # cut after a pass (``_wrap_pipeline``); a pass longer than the column wraps at its spaces
        table.add_column("pipeline", no_wrap=width is None, overflow="fold", max_width=budget)
        for row in rows:
            s = row.first
            sp = result.speedup(s, size)
            mark = "*" if any(result.best.get(size) == m.name for m in row.members) else "=" if any(m.name in tied for m in row.members) else ""
            shown_time = "not predicted" if row.time is None and all(t is None for t in s.times.values()) else format_time(row.time)
            pipeline = s.pipeline or "(as written)"
            if top is not None and len(pipeline) > LONG_PIPELINE:
                pipeline, shortened = abridged(pipeline), True
            cells = [mark, row.name, _time_cell(s, size, shown_time), f"{sp:.2f}x" if sp else "-"] + ([padding[id(row)]] if padding else [])
            table.add_row(*cells, _wrap_pipeline(pipeline, budget))
        shown = sum(len(r.members) for r in rows)
        console.print(f"size {format_size(size)} ({size}): {len(result.schedules)} schedules evaluated; {shown} shown in {len(rows)} rows")
        console.print(table)
        if missing:
            console.print(f"  {missing} schedule(s) do not run at this size")
        console.print("")
    _best_lines(console, result)
    if shortened:
        console.print("(targets=<N names>: a list of N value names, abridged; --all or --json gives every pipeline whole)")
    console.print(LEGEND)
    text = out.getvalue()
    return "\n".join(line.rstrip() for line in text.splitlines())


def _best_lines(console, result) -> None:
    ties_seen = False
    for size in result.sizes:
        name = result.best.get(size)
        if name is None:
            why = f"none evaluated here before the search was cut short: {result.cut_short}" if result.cut_short else "no schedule runs at this size"
            console.print(f"best: {format_size(size)}: none ({why})")
            continue
        s = result.by_name(name)
        sp = result.speedup(s, size)
        t = s.times.get(size)
        tied = result.ties(size)
        line = f"best: {format_size(size)}: {name}  {format_time(t) if t is not None else '(not predicted)'}" + (f"  {sp:.2f}x over the program as written" if sp else "")
        if tied:
            ties_seen = True
            others = ", ".join(x.name for x in tied[:3]) + (f" and {len(tied) - 3} more" if len(tied) > 3 else "")
            line += f"  (a tie with {others}: within the timing noise)"
        console.print(line)
    if ties_seen:
        console.print("(a tie: the timed rounds of these schedules overlap; more --rounds, or a quieter machine, may separate them)")


def render_summary(result, width: int | None = None) -> str:
    """One row per size: the best schedule, its time and speedup, the runner-up and
    whether it ties; then the pipelines of the schedules named (``--top K`` gives the
    tables per size)."""
    import io

    from rich.console import Console
    from rich.table import Table

    out = io.StringIO()
    console = Console(file=out, width=width or 100_000, color_system=None, force_terminal=False, soft_wrap=False, highlight=False, emoji=False, markup=False)
    table = Table(box=None, pad_edge=False, padding=(0, 1))
    for col, just in (("size", "right"), ("best", "left"), ("time", "right"), ("speedup", "right"), ("runner-up", "left"), ("its time", "right")):
        table.add_column(col, justify=just, no_wrap=col in ("size", "time", "speedup", "its time"))  # type: ignore[arg-type]
    named: dict[str, str] = {}
    for size in result.sizes:
        name = result.best.get(size)
        if name is None:
            table.add_row(format_size(size), "(none runs)", "", "", "", "")
            continue
        s = result.by_name(name)
        ordered = [x for x in sorted(result.schedules, key=_sort_key(size)) if x.check == "ok" and x.times.get(size) is not None and x is not s]
        second = ordered[0] if ordered else None
        tied = {x.name for x in result.ties(size)}
        sp = result.speedup(s, size)
        named.setdefault(s.name, s.pipeline or "(as written)")
        r2 = ""
        if second is not None:
            r2 = ("= " if second.name in tied else "") + second.name
        table.add_row(
            format_size(size), "* " + name, _time_cell(s, size, format_time(s.times.get(size))), f"{sp:.2f}x" if sp else "-",
            r2, _time_cell(second, size, format_time(second.times.get(size))) if second else "",
        )
    console.print(f"{len(result.sizes)} sizes, {len(result.schedules)} schedules evaluated; the best (*) per size and the runner-up (=: a tie) (--top K: a table per size)")
    console.print(table)
    console.print("")
    for name, pipeline in named.items():
        console.print(f"{name}:")
        console.print("  " + _wrap_pipeline(pipeline, None if width is None else max(24, width - 2)).replace("\n", "\n  "))
    console.print("")
    console.print(LEGEND)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def _width() -> int | None:
    """The width the tables fit: the terminal's; none off a terminal (a file or a pipe
    gets whole lines, the same wherever it runs)."""
    if sys.stdout.isatty():
        import shutil

        return shutil.get_terminal_size().columns
    return None


def render_parts(result) -> str:
    """A program of many parts: each class of parts and the schedule the best whole
    program gives it, per size."""
    if not result.parts:
        return ""
    lines = [f"parts ({len(result.parts)} classes, each tuned on its first part):"]
    width = max(len(label) for label, _, _ in result.parts)
    for k, (label, _, r) in enumerate(result.parts):
        picks = []
        for size in result.sizes:
            name = result.best.get(size)
            chosen = result.by_name(name).parts if name else ()
            pick = chosen[k] if k < len(chosen) else "(as written)"
            picks.append(pick if len(result.sizes) == 1 else f"{format_size(size)}: {pick}")
        lines.append(f"  {label.ljust(width)}  {'; '.join(dict.fromkeys(picks))}")
    return "\n".join(lines)


def result_json(result) -> dict:
    """The DESIGN §5 ``--json`` format (strict JSON: a prediction that overflows is an
    error, never ``Infinity``)."""
    for s in result.schedules:
        for size, t in s.times.items():
            if t is not None and not math.isfinite(t):
                raise InputRejected(f"the prediction of {s.name} at size {size} overflows ({t}): check the topology's numbers")
    return {
        "sizes": list(result.sizes),
        "schedules": [
            {"name": s.name, "pipeline": s.pipeline, "times": {str(k): v for k, v in s.times.items()}, "measured": s.measured} for s in result.schedules
        ],
        "best": {str(k): v for k, v in result.best.items()},
    }


PLOTTED = 6
"""Families drawn besides the program as written and the best ones."""


def plot(result, path: str, title: str) -> None:
    """Speedup over the program as written vs size (CoCoNet's Figures 10-12): the
    program as written, the families best at some size and the next fastest families
    (one line per family of schedules predicted alike), the best at each size marked,
    the legend outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [s for s in result.schedules if s.check == "ok"]
    families: dict[str, list] = {}
    for size in result.sizes:
        for row in fold(sorted(ok, key=_sort_key(size)), size):
            families.setdefault(row.name, row.members)
    best_names = set(result.best.values())
    ranked = sorted(families.items(), key=lambda kv: -max((result.speedup(kv[1][0], z) or 0) for z in result.sizes))
    chosen = [(n, m) for n, m in ranked if any(x.name in best_names for x in m)]
    others = [(n, m) for n, m in ranked if (n, m) not in chosen and not any(x.original for x in m)]
    baseline = [(n, m) for n, m in ranked if any(x.original for x in m)][:1]
    lines = baseline + [c for c in chosen if c not in baseline] + others[: max(0, PLOTTED - len(chosen))]
    # schedules predicted alike at every size are one line, named after all of them
    curves: dict[tuple, list[str]] = {}
    first: dict[tuple, object] = {}
    for name, members in lines:
        s = members[0]
        key = tuple(round(result.speedup(s, z) or 0.0, 9) for z in result.sizes)
        curves.setdefault(key, []).append(name)
        first.setdefault(key, s)
    fig, ax = plt.subplots(figsize=(10, 4.8))
    for key, names in curves.items():
        s = first[key]
        xs = [z for z in result.sizes if result.speedup(s, z)]
        ax.plot(xs, [result.speedup(s, z) for z in xs], marker="o", markersize=3, label=" = ".join(names))
    for size in result.sizes:
        name = result.best.get(size)
        sp = result.speedup(result.by_name(name), size) if name else None
        if sp:
            ax.plot([size], [sp], marker="*", markersize=11, color="black", linestyle="none", label="best at each size" if size == result.sizes[0] else None)
    if len(result.sizes) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(f"size (dim {result.dim} replaced)")
    ax.set_ylabel("speedup over the program as written")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except (OSError, ValueError) as e:
        raise InputRejected(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------
# The tool
# --------------------------------------------------------------------------------------


BUSY_LOAD = 0.5
"""A load average above this many runnable jobs per core means other work shares the
machine: a calibration then measures it too."""


def _busy(what: str) -> str | None:
    """A warning when the machine's load makes a measurement unreliable, else None."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load <= BUSY_LOAD * cores:
        return None
    return (f"distir-tune: warning: {what} at load {load:.1f} on {cores} cores: other jobs share this machine and the fit "
            "measures them too (its bandwidths come out low, its predictions slow); calibrate again when the machine is idle")


def _calibrate(ranks: int) -> None:
    from distir.tuning.calibrate import calibrate, local_topology

    before = _busy("calibrating")  # said once the fit is stored (a rejected run says only why)
    bar = _Progress()
    count = [0]

    def tick(name: str) -> None:
        count[0] += 1
        bar("calibrate", count[0], 0)

    path = calibrate(ranks, progress=tick)
    bar.close()
    for backend in ("local", "mpi"):
        topo = local_topology(ranks, backend)
        rt = topo.runtime
        print(f"{topo.name}: {topo.device.name}: memory {topo.device.memory_bandwidth_GBps:.1f} GB/s per rank, "
              f"element-wise {topo.device.peak_tflops.f32 * 1e3:.1f} GFLOP/s, matmul f32 {topo.peak_matmul('f32') / 1e9:.1f} GFLOP/s; "
              f"step {rt.step_s * 1e6:.0f} us + {rt.dispatch_s * 1e6:.1f} us per op")
        for kind, a, b in topo.collectives:
            print(f"  {kind:15s} alpha {a * 1e6:8.1f} us  beta {b * 1e12:8.1f} ps/byte ({1 / b / 1e9:.1f} GB/s)")
    print(f"stored in {path} (used by every distir-tune --model local of this user on this machine)")
    warning = before or _busy("the calibration ran")
    if warning:
        print(warning, file=sys.stderr, flush=True)


MODEL_MAX_RANKS = 1 << 16
"""The most ranks ``--model`` predicts for: the cost model simulates the groups of every
collective over all ranks, and beyond this the prediction takes minutes and gigabytes."""

EXIT_INTERRUPTED = 130

OVERFLOW_S = 1e15
"""A predicted step longer than this (30 million years) is the arithmetic of absurd
topology numbers overflowing, not a prediction."""


def _plot_format(path: str) -> None:
    """Reject a ``--plot`` file whose extension matplotlib cannot write, before the run."""
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    if ext not in known:
        raise InputRejected(f"distir-tune: --plot {path}: matplotlib cannot write '.{ext}' files (it writes {', '.join('.' + k for k in sorted(known))})")


def _options(args, module):
    """The checked options: (ranks, sizes, topology, backend, as_slice)."""
    from distir.runtime import npz
    from distir.runtime.local import MAX_RANKS
    from distir.tuning.timing import check_mpi_ranks
    from distir.tuning.topology import get_topology

    try:
        f = npz.select_function(module, args.func)
    except InputRejected as e:
        raise InputRejected(f"--func {args.func}: {e}" if args.func else str(e)) from None
    ranks = args.ranks if args.ranks is not None else npz.static_ranks(module, f)  # the meshes f uses
    if ranks is None:
        raise InputRejected("distir-tune: give --ranks N: the program's meshes do not fix the rank count")
    check_rank_count(ranks, "distir-tune")
    npz.resolve_grids(module, ranks, npz.used_meshes(module, f))
    sizes = parse_sizes(args.sizes) if args.sizes is not None else None
    if args.output and sizes is not None and len(sizes) != 1:
        raise InputRejected(f"distir-tune: -o writes the best schedule for one size; --sizes gives {len(sizes)} (give one, e.g. --sizes {format_size(sizes[-1])})")
    topo = None
    if args.model is not None:
        if ranks > MODEL_MAX_RANKS:
            raise InputRejected(
                f"distir-tune: --ranks {ranks}: the cost model predicts for at most {MODEL_MAX_RANKS} ranks "
                "(it simulates every collective's groups over all ranks)"
            )
        topo = get_topology(args.model, args.nodes)
        if args.nodes is None and len(topo.levels) > 1 and ranks > topo.ranks:
            per = topo.ranks // topo.levels[0].cardinality
            topo = topo.with_nodes(math.ceil(ranks / per))
        if args.nodes is None and len(topo.levels) == 1 and topo.levels[0].cardinality < ranks:
            topo = get_topology(args.model, ranks)
        if ranks > topo.ranks:
            raise InputRejected(f"distir-tune: --ranks {ranks} is more than the {topo.ranks} devices of {topo.describe()}")
    elif args.nodes is not None:
        raise InputRejected("distir-tune: --nodes goes with --model")
    backend = None if topo is not None else (args.backend or "local")
    if backend not in (None, "local", "mpi"):
        raise InputRejected(f"distir-tune: --backend {backend}: the tuner times on local or mpi (use --model TOPOLOGY to predict)")
    if backend == "local" and ranks > MAX_RANKS:
        raise InputRejected(
            f"distir-tune: --ranks {ranks}: the local backend runs at most {MAX_RANKS} ranks (threads of one process): "
            f"time on --backend mpi or predict with --model TOPOLOGY"
        )
    if backend == "mpi":
        check_mpi_ranks(ranks)
    as_slice = None
    if args.as_slice is not None:
        as_slice = [] if args.as_slice.strip() == "none" else [n.strip().lstrip("%") for n in args.as_slice.split(",") if n.strip()]
    if args.rounds < 1:
        raise InputRejected(f"distir-tune: --rounds must be at least 1, got {args.rounds}")
    if args.top is not None and args.top < 0:
        raise InputRejected(f"distir-tune: --top must be at least 0, got {args.top}")
    if args.max_schedules is not None and args.max_schedules < 1:
        raise InputRejected(f"distir-tune: --max-schedules must be at least 1, got {args.max_schedules}")
    if args.time_budget is not None and not (args.time_budget > 0 and math.isfinite(args.time_budget)):
        raise InputRejected(f"distir-tune: --time-budget must be a positive number of seconds, got {args.time_budget}")
    for path, what in ((args.json, "--json"), (args.plot, "--plot"), (args.output, "-o")):
        if path:
            check_output("distir-tune", path, what)
    if args.plot:
        _plot_format(args.plot)
    if topo is not None and sizes:
        _warn_memory(module, ranks, sizes, args)
    return ranks, sizes, topo, backend, as_slice


DEVICE_MEMORY = 80 << 30
"""More memory than any device of the built-in topologies has (an 80 GB GPU)."""


def _warn_memory(module, ranks: int, sizes: Sequence[int], args) -> None:
    """The cost model ignores memory capacity: say so for sizes no device holds."""
    from distir.tuning.explore import only_function
    from distir.tuning.sizes import choose_dim, rank_bytes

    program = only_function(module, args.func)
    d = choose_dim(program, args.dim)
    big = [(z, rank_bytes(program, ranks, d, z)) for z in sizes]
    big = [(z, b) for z, b in big if b > DEVICE_MEMORY]
    if big:
        z, b = big[0]
        print(
            f"distir-tune: warning: --sizes {format_size(z)}{' and larger' if len(big) > 1 else ''}: one rank's arguments take "
            f"{b / (1 << 30):.0f} GiB, more than any device holds ({DEVICE_MEMORY >> 30} GiB); the model ignores memory capacity "
            "and predicts them anyway",
            file=sys.stderr,
        )


def _tune(args) -> int:
    from distir.tools.run import read_module
    from distir.tuning.tuner import Limits, tune

    module = read_module(args.file)
    ranks, sizes, topo, backend, as_slice = _options(args, module)
    bar = _Progress()
    with _Interrupt() as interrupted:
        limits = Limits.of(args.max_schedules, args.time_budget, interrupted)
        try:
            result = tune(
                module, ranks, sizes, dim=args.dim, model=topo, backend=backend, func_name=args.func, as_slice=as_slice,
                progress=bar, rounds=args.rounds, exhaustive=args.all, limits=limits,
            )
        finally:
            bar.close()
    overflow = [(s.name, z, t) for s in result.schedules for z, t in s.times.items() if t is not None and not (math.isfinite(t) and t < OVERFLOW_S)]
    if overflow:
        name, size, t = overflow[0]
        raise InputRejected(
            f"distir-tune: the prediction of {name} at size {format_size(size)} overflows ({t:.3g} s): the numbers of "
            f"{topo.describe() if topo is not None else backend} give no meaningful time"
        )
    where = topo.describe() if topo is not None else f"the {backend} backend of this machine"
    if topo is not None and ranks < topo.ranks:
        where += f", {ranks} of its {topo.ranks} devices"
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in result.seconds.items())
    width = _width()
    header = (f"distir-tune: {args.file}: {len(result.schedules)} schedules on {ranks} ranks, "
              f"{'predicted for' if topo is not None else 'timed on'} {where} ({phases}); "
              f"each size replaces the program's dimension {result.dim} wherever it occurs (--dim)")
    print((textwrap.fill(header, width, break_on_hyphens=False) if width else header) + "\n")
    parts = render_parts(result)
    if parts:
        print(parts + "\n")
    top = None if args.all else args.top if args.top is not None else -1 if len(result.sizes) > SUMMARY_SIZES else 10
    print(render_table(result, top, width))
    if result.cut_short:
        print(f"\ndistir-tune: the search was cut short ({result.cut_short}): these are the best schedules found so far")
    for note in result.notes:
        print(f"distir-tune: note: {note}", file=sys.stderr)
    for bug in result.bugs:
        print(f"distir-tune: error: {bug}", file=sys.stderr)
    if args.json:
        write_output("distir-tune", args.json, json.dumps(result_json(result), indent=1, allow_nan=False))
        if args.json != "-":
            print(f"distir-tune: wrote the results as JSON to {args.json}", file=sys.stderr)
    if args.plot:
        plot(result, args.plot, f"{args.file}: {ranks} ranks, {result.how}")
        print(f"distir-tune: wrote the plot to {args.plot}", file=sys.stderr)
    if args.output:
        size = result.sizes[0]
        best = result.best_module(size)
        if best is None:
            raise InputRejected(f"distir-tune: no schedule runs at size {size}: nothing to write to {args.output}")
        name = result.best[size]
        header = f"// distir-tune: best schedule at size {size} on {ranks} ranks ({result.how}): {name}\n//   distir-opt -p {shlex.quote(result.by_name(name).pipeline)}\n"
        write_output("distir-tune", args.output, header + str(best) + "\n")
        if args.output != "-":
            print(f"distir-tune: wrote the best schedule ({name}) to {args.output}", file=sys.stderr)
    if result.cut_short == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_BUG if result.bugs else 0


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.calibrate:
        ranks = 2 if args.ranks is None else args.ranks
        check_rank_count(ranks, "distir-tune")
        _calibrate(ranks)
        if args.file is None:
            return 0
    if args.file is None:
        raise InputRejected("distir-tune: give a program FILE (or --calibrate)")
    return _tune(args)


def _run_tool(argv: Sequence[str] | None) -> int:
    from distir.tools.run import _Located

    try:
        return _run(argv)
    except _Located:
        raise  # a parse or verification diagnostic, located in the file
    except InputRejected as e:
        msg = str(e)
        raise InputRejected(msg if msg.startswith("distir-tune:") else f"distir-tune: {msg}") from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-tune", lambda: _run_tool(argv))


if __name__ == "__main__":
    sys.exit(main())
