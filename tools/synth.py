"""``distir-synth``: P²'s parallelism placement and reduction-strategy synthesis (DESIGN §5).

    distir-synth --hierarchy 4,16 --axes 4,16 --reduce-axes 0[,2] [--topology T] [--nodes N]
                 [--algorithm ring|tree|auto] [--elements N] [--size-limit 5] [--json F]
                 [--emit-mlir DIR]

Lists every parallelism matrix of the axes on the hierarchy, the number of valid reduction
programs of each (and how many are predicted faster than a single AllReduce), the
predicted times, and the best program per matrix in P²'s notation and as distir IR.
``--topology`` (default ``p2-a100``; a built-in name or a TOML file) with ``--nodes``
(default: the hierarchy's devices divided by the devices of one node) times the programs
with ``--algorithm`` (NCCL's ring or tree; default ring) on ``--elements`` float32 per
device (default P²'s 2^29 x nodes). ``--json F`` writes DESIGN §5's format (``-`` for
standard output; ``best`` indexes ``programs``); ``--emit-mlir DIR`` writes one file per
matrix, ``matrix<i>.mlir``, with the meshes, ``@allreduce`` and every program as ``@p<j>``
(runnable with ``distir-run --compare-func allreduce``). A progress bar is shown on a
terminal. Exit codes: 0 success, 1 a bad option (with a diagnostic), 3 internal error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from distir.tools.diagnostics import InputRejected, make_parser, open_output, run_tool

if TYPE_CHECKING:  # imported once the arguments are parsed (--help at once)
    from distir.synthesis.driver import MatrixResult, SynthesisResult

DEFAULT_SIZE_LIMIT = 5  # synthesis/driver.py's (checked by the tests)
ALGORITHM_NAMES = ("ring", "tree", "auto")  # tuning/collectives.py's ALGORITHMS (checked by the tests)


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("distir-synth", "P² placement and reduction-strategy synthesis.")
    p.add_argument("--hierarchy", required=True, metavar="H0,H1,...", help="system hierarchy, outermost level first (e.g. 4,16)")
    p.add_argument("--axes", required=True, metavar="P0,P1,...", help="parallelism axis sizes (e.g. 4,16)")
    p.add_argument("--reduce-axes", required=True, metavar="A[,B]", help="axes to reduce over (e.g. 0 or 0,2)")
    p.add_argument("--topology", default="p2-a100", metavar="T", help="built-in topology (dgx2, p2-a100, p2-v100) or a TOML file (default p2-a100)")
    p.add_argument("--nodes", type=_positive("--nodes"), metavar="N", help="units of the topology's outermost level (default: fit the hierarchy)")
    p.add_argument("--algorithm", default="ring", metavar="ALGO", help=f"NCCL algorithm: {', '.join(ALGORITHM_NAMES)} (default ring)")
    p.add_argument("--elements", type=_positive("--elements"), metavar="N", help="float32 elements per device (default 2^29 x nodes)")
    p.add_argument("--size-limit", type=_positive("--size-limit"), default=DEFAULT_SIZE_LIMIT, metavar="K", help="most instructions per program (default 5)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON (- for stdout)")
    p.add_argument("--emit-mlir", metavar="DIR", help="write every matrix's programs as distir IR into DIR")
    return p


def _positive(flag: str):
    def parse(text: str) -> int:
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects a positive integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{flag} expects a positive integer, got {text!r}")
        return v

    return parse


def _ints(flag: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x, 0) for x in text.split(","))
    except ValueError:
        raise InputRejected(f"distir-synth: error: {flag} expects comma-separated integers, got {text!r}") from None
    return values


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-synth", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from distir.synthesis.driver import synthesize
    from distir.tuning.collectives import ALGORITHMS
    from distir.tuning.topology import get_topology

    hierarchy = _ints("--hierarchy", args.hierarchy)
    axes = _ints("--axes", args.axes)
    reduce_axes = _ints("--reduce-axes", args.reduce_axes)
    if args.algorithm not in ALGORITHMS:
        raise InputRejected(f"distir-synth: error: --algorithm must be one of {', '.join(ALGORITHMS)}, got {args.algorithm!r}")
    topology = get_topology(args.topology)
    nodes = args.nodes
    if nodes is None:
        per_node = topology.ranks // topology.cardinalities[0]
        total = math.prod(hierarchy) if all(h > 0 for h in hierarchy) else 0
        if per_node and total % per_node == 0 and total:
            nodes = total // per_node
        else:
            raise InputRejected(
                f"distir-synth: error: the hierarchy {args.hierarchy} ({total} devices) is not a whole number of "
                f"{topology.name!r} nodes ({per_node} devices each); give --nodes or another --topology"
            )
    topology = topology.with_nodes(nodes)
    # the outputs are opened first: an unwritable path is a diagnostic before the work
    json_out = open_output("distir-synth", args.json) if args.json else None
    if args.emit_mlir:
        _make_folder(Path(args.emit_mlir))
    bar = _progress()
    try:
        result = synthesize(hierarchy, axes, reduce_axes, topology, args.algorithm, args.elements, args.size_limit, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if args.emit_mlir:
        emit_mlir(result, Path(args.emit_mlir))
    if json_out is not None:
        json_out.write(json.dumps(result.to_json(), indent=1) + "\n")
        if json_out is not sys.stdout:
            json_out.close()
        if args.json == "-":
            return 0
    print(report(result))
    return 0


class _Bar:
    def __init__(self):
        from tqdm import tqdm

        self.bar = tqdm(total=None, desc="simulating", unit="matrix", file=sys.stderr, leave=False)

    def __call__(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def _progress() -> _Bar | None:
    return _Bar() if sys.stderr.isatty() else None


def _seconds(t: float | None) -> str:
    if t is None:
        return "-"
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def report(result: SynthesisResult) -> str:
    """The text ``distir-synth`` prints: a table of matrices, then each best program."""
    from tabulate import tabulate

    from distir.synthesis.driver import ELEMENT_BYTES
    from distir.synthesis.lower import lower_program, module_of
    from distir.synthesis.matrices import format_matrix

    topo = result.topology
    nbytes = (result.elements or 0) * ELEMENT_BYTES
    red = ",".join(str(a) for a in result.reduce_axes)
    lines = [
        f"P² synthesis: hierarchy {list(result.hierarchy)}, axes {list(result.axes)}, reducing axis {red}, size limit {result.size_limit}",
    ]
    if topo is not None:
        lines.append(f"topology {topo.describe()}")
        lines.append(f"algorithm {result.algorithm}; {result.elements} float32 per device ({nbytes / 1e9:.3g} GB)")
    beat = sum(1 for m in result.matrices if m.best is not None and m.times[m.best] < (m.allreduce_s or 0) * (1 - 1e-9))
    lines.append(
        f"{len(result.matrices)} parallelism matrices, {result.programs_total} programs; synthesized beats AllReduce on "
        f"{beat} of {len(result.matrices)} matrices (synthesis {_seconds(result.synthesis_s)}, simulation {_seconds(result.simulation_s)})"
    )
    lines.append("")
    header = ("matrix", "synthesis hierarchy", "programs", "beat AR", "AllReduce", "best", "speedup", "best program")
    rows = []
    for m in result.matrices:
        b = m.best
        speed = f"{m.allreduce_s / m.times[b]:.2f}x" if b is not None and m.times[b] > 0 else "-"
        rows.append(
            (
                format_matrix(m.matrix),
                m.hierarchy.describe(),
                str(len(m.programs)),
                str(m.beating_allreduce),
                _seconds(m.allreduce_s),
                _seconds(m.times[b]) if b is not None else "-",
                speed,
                m.short_name(b) if b is not None else "-",
            )
        )
    table = tabulate(rows, header, tablefmt="plain", disable_numparse=True, stralign="left")
    lines.extend(line.rstrip() for line in table.splitlines())
    for i, m in enumerate(result.matrices):
        b = m.best
        if b is None:
            continue
        lines.append("")
        lines.append(f"matrix {format_matrix(m.matrix)}: best program {b} ({_seconds(m.times[b])}): {m.notation(b)}")
        lowered = lower_program(m.placement, m.hierarchy, m.programs[b], result.reduce_axes, _ir_shape(result, m), name=f"best{i}")
        lines.append(_print(module_of(m.placement, [lowered.func])))
    return "\n".join(lines)


def _ir_shape(result: SynthesisResult, m: MatrixResult) -> list[int]:
    group = 1
    for f in m.placement.factors:
        if f.axis in result.reduce_axes:
            group *= f.size
    n = result.elements or group
    if n % group:
        raise InputRejected(
            f"distir-synth: error: --elements {n} is not divisible by the {group} devices of a reduction group "
            f"(programs reduce-scatter the buffer over them)"
        )
    return [n]


def _print(op) -> str:
    import io

    from xdsl.printer import Printer

    out = io.StringIO()
    Printer(stream=out).print_op(op)
    return out.getvalue().rstrip()


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputRejected(f"distir-synth: error: cannot create {folder}: {e.strerror or e}") from None


def emit_mlir(result: SynthesisResult, folder: Path) -> list[Path]:
    """One file per matrix: meshes, ``@allreduce`` and every program ``@p<j>``."""
    from distir.synthesis.lower import lower_program, module_of, reference
    from distir.synthesis.matrices import format_matrix

    _make_folder(folder)
    written = []
    for i, m in enumerate(result.matrices):
        shape = _ir_shape(result, m)
        funcs = [reference(m.placement, result.reduce_axes, shape)]
        head = [
            f"// P² matrix {format_matrix(m.matrix)} of axes {list(result.axes)} on hierarchy {list(result.hierarchy)}, reducing axes {list(result.reduce_axes)}",
            f"// synthesis hierarchy {m.hierarchy.describe()}; {len(m.programs)} programs, each equal to @allreduce",
        ]
        for j, p in enumerate(m.programs):
            lowered = lower_program(m.placement, m.hierarchy, p, result.reduce_axes, shape, name=f"p{j}")
            if lowered.func is None:  # the semantics and the types agree (tested); never expected
                raise RuntimeError(f"program {j} of matrix {format_matrix(m.matrix)} does not lower: {lowered.error}")
            funcs.append(lowered.func)
            t = f" {_seconds(m.times[j])}" if m.times else ""
            head.append(f"// @p{j}:{t} {m.notation(j)}")
        path = folder / f"matrix{i}.mlir"
        text = "\n".join(head) + "\n" + _print(module_of(m.placement, funcs)) + "\n"
        out = open_output("distir-synth", str(path))
        try:
            out.write(text)
        finally:
            out.close()
        written.append(path)
    return written


if __name__ == "__main__":
    sys.exit(main())
