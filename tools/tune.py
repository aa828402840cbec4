"""``distir-tune``: CoCoNet's autotuner (DESIGN §5).

    distir-tune FILE --ranks N [--sizes 2^10..2^30|a,b,...] [--dim D]
                [--backend local|mpi | --model TOPOLOGY [--nodes N]]
                [--json F] [--plot F.png] [-o BEST.mlir] [--func NAME] [--as-slice NAMES]
    distir-tune --calibrate [--ranks N]

Explores the schedules of FILE's function (``tuning/explore.py``), checks each against
the program with the reference interpreter, then times each on a backend
(``--backend``, default ``local``) or predicts it on a topology (``--model``: ``dgx2``,
``p2-a100``, ``p2-v100``, ``local`` after ``--calibrate``, or a TOML file), at every size
of ``--sizes`` (the program's own size by default): the dimension ``--dim`` (default:
the largest of the program) is replaced by each size everywhere it occurs. Prints, per
size, every schedule's time, its speedup over the program as written, ``*`` on the best
and the ``distir-opt -p`` pipeline that produces it; ``--json`` writes the DESIGN §5
format, ``--plot`` the speedups vs size (matplotlib), ``-o`` the best schedule (one
size). ``--nodes`` defaults to the nodes ``--ranks`` needs. ``--calibrate`` fits the
``local`` topology (and ``local-mpi``) on this machine for ``--ranks`` ranks (default
2) and stores it; with FILE it then tunes.

Exit codes: 0 success; 1 input rejected (parse, verify, bad option or file); 2 a
schedule computes something other than the program (a distir bug, reported on stderr;
that schedule is never picked); 3 internal error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from distir.tools.diagnostics import InputRejected, make_parser, run_tool

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
    return p


# --------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------


class _Progress:
    """A progress bar on a terminal (tqdm), nothing otherwise."""

    LABELS = {"explore": "exploring", "check": "checking", "predict": "predicting", "time": "timing"}

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.bar = None
        self.phase = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.tty:
            return
        from tqdm import tqdm

        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = tqdm(total=total or None, desc=self.LABELS.get(phase, phase), unit="schedule", leave=False, file=sys.stderr)
        assert self.bar is not None
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


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


def render_table(result) -> str:
    """Per size: every schedule by time, its speedup over the program as written, the
    best marked ``*``, and its pipeline."""
    lines = []
    header = ["", "schedule", "time", "speedup", "pipeline"]
    for size in result.sizes:
        rows = sorted(result.schedules, key=lambda s: (s.times.get(size) is None, s.times.get(size) or 0.0))
        table = []
        for s in rows:
            sp = result.speedup(s, size)
            mark = "*" if result.best.get(size) == s.name else ""
            table.append([mark, _label(s), format_time(s.times.get(size)), f"{sp:.2f}x" if sp else "-", s.pipeline or "(as written)"])
        widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
        lines.append(f"size {format_size(size)} ({size}):")
        for r in [header, *table]:
            cells = [c.rjust(w) if i in (2, 3) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
            lines.append("  " + "  ".join(cells).rstrip())
        lines.append("")
    best = ", ".join(f"{format_size(s)}: {n or 'none'}" for s, n in result.best.items())
    lines.append(f"best: {best}")
    return "\n".join(lines)


def result_json(result) -> dict:
    """The DESIGN §5 ``--json`` format."""
    return {
        "sizes": list(result.sizes),
        "schedules": [
            {"name": s.name, "pipeline": s.pipeline, "times": {str(k): v for k, v in s.times.items()}, "measured": s.measured} for s in result.schedules
        ],
        "best": {str(k): v for k, v in result.best.items()},
    }


def plot(result, path: str, title: str) -> None:
    """Speedup over the program as written vs size, one line per schedule that is best
    at some size plus the fastest others (CoCoNet's Figures 10-12)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputRejected("distir-tune: --plot needs matplotlib (pip install matplotlib)") from None
    chosen = [s for s in result.schedules if s.name in set(result.best.values())]
    others = sorted(
        (s for s in result.schedules if s not in chosen and s is not result.baseline and s.check == "ok"),
        key=lambda s: -max((result.speedup(s, z) or 0) for z in result.sizes),
    )
    lines = [result.baseline] + [s for s in chosen if s is not result.baseline] + others[: max(0, 8 - len(chosen))]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for s in lines:
        xs = [z for z in result.sizes if result.speedup(s, z)]
        ax.plot(xs, [result.speedup(s, z) for z in xs], marker="o", markersize=3, label=s.name)
    if len(result.sizes) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(f"size (dim {result.dim} replaced)")
    ax.set_ylabel("speedup over the program as written")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise InputRejected(f"distir-tune: cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------
# The tool
# --------------------------------------------------------------------------------------


def _calibrate(ranks: int) -> None:
    from distir.tuning.calibrate import calibrate, local_topology

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
    print(f"stored in {path}")


def _tune(args) -> int:
    from distir.runtime import npz
    from distir.tools.run import read_module
    from distir.tuning.topology import get_topology
    from distir.tuning.tuner import tune

    module = read_module(args.file)
    ranks = args.ranks or npz.static_ranks(module)
    if ranks is None:
        raise InputRejected("distir-tune: give --ranks N: the program's meshes do not fix the rank count")
    npz.resolve_grids(module, ranks)
    sizes = parse_sizes(args.sizes) if args.sizes else None
    if args.output and sizes is not None and len(sizes) != 1:
        raise InputRejected(f"distir-tune: -o writes the best schedule for one size; --sizes gives {len(sizes)} (give one, e.g. --sizes {format_size(sizes[-1])})")
    topo = None
    if args.model is not None:
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
    as_slice = None
    if args.as_slice is not None:
        as_slice = [] if args.as_slice.strip() == "none" else [n.strip().lstrip("%") for n in args.as_slice.split(",") if n.strip()]
    if args.rounds < 1:
        raise InputRejected(f"distir-tune: --rounds must be at least 1, got {args.rounds}")

    bar = _Progress()
    try:
        result = tune(module, ranks, sizes, dim=args.dim, model=topo, backend=backend, func_name=args.func, as_slice=as_slice, progress=bar, rounds=args.rounds)
    finally:
        bar.close()
    where = topo.describe() if topo is not None else f"the {backend} backend of this machine"
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in result.seconds.items())
    print(f"distir-tune: {args.file}: {len(result.schedules)} schedules on {ranks} ranks, "
          f"{'predicted for' if topo is not None else 'timed on'} {where} ({phases})\n")
    print(render_table(result))
    for note in result.notes:
        print(f"distir-tune: note: {note}", file=sys.stderr)
    for bug in result.bugs:
        print(f"distir-tune: error: {bug}", file=sys.stderr)
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(result_json(result), f, indent=1)
        except OSError as e:
            raise InputRejected(f"distir-tune: cannot write {args.json}: {e.strerror or e}") from None
    if args.plot:
        plot(result, args.plot, f"{args.file}: {ranks} ranks, {result.how}")
    if args.output:
        size = result.sizes[0]
        best = result.best_module(size)
        if best is None:
            raise InputRejected(f"distir-tune: no schedule runs at size {size}: nothing to write to {args.output}")
        name = result.best[size]
        header = f"// distir-tune: best schedule at size {size} on {ranks} ranks ({result.how}): {name}\n//   distir-opt -p '{result.by_name(name).pipeline}'\n"
        try:
            with open(args.output, "w") as f:
                f.write(header + str(best) + "\n")
        except OSError as e:
            raise InputRejected(f"distir-tune: cannot write {args.output}: {e.strerror or e}") from None
    return EXIT_BUG if result.bugs else 0


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.calibrate:
        ranks = args.ranks or 2
        if ranks < 1:
            raise InputRejected(f"distir-tune: --ranks must be at least 1, got {ranks}")
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
