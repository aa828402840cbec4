"""``distir-run``: run a program on N ranks (DESIGN §5).

    distir-run FILE|- [--ranks N] [--backend interpret|local|mpi|nccl] [--inputs in.npz]
               [--outputs out.npz] [--seed S] [--func NAME]
               [--compare OTHER.mlir] [--compare-func NAME] [--compare-backend NAME]
               [--scatter-args NAMES]

``--ranks`` defaults to the rank count of a module whose meshes are all static, else,
under ``mpiexec -n N`` with ``--backend mpi``/``nccl``, to N.
``--func`` defaults to the module's only function. ``--inputs`` follows the in.npz
convention of ``runtime/npz.py`` (arguments it lacks are drawn at random from
``--seed``); ``--outputs`` writes ``result0``, ``result1``, ... ``--compare`` runs the
same function of another file (or the function ``--compare-func`` of it), and
``--compare-func`` alone another function of the same file, on the same inputs and with
the same backend, and fails unless the outputs agree within the tolerances of
``runtime/equivalence.py``. ``--compare-backend`` runs the comparison side on another
backend (``--backend local --compare-backend interpret`` checks the runtime against the
reference interpreter; alone it compares FILE's function on the two backends). Under
``mpiexec`` (``--backend mpi``/``nccl``) only rank 0 prints and writes ``--outputs``.
``--scatter-args g,p,m,v`` runs the program on scattered tensors (``runtime/scattered.py``):
each named 1-D argument is given in ``--inputs`` as pieces ``g.0``, ``g.1``, ... (all
named arguments with the same piece lengths), used without packing; in-place results of
them are written back as ``result<i>.<j>`` pieces.

Exit codes: 0 success; 1 input rejected (parse, verify, bad option, bad npz, a rank
count the program cannot run on); 2 the results of --compare disagree (the first
mismatching element is reported); 3 internal error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.utils.exceptions import ParseError, VerifyException

from distir.dialects.context import make_context
from distir.dialects.dist import TensorType
from distir.dialects.layout import format_placements
from distir.runtime import npz
from distir.runtime.backend import default_backend_name, get_backend
from distir.runtime.equivalence import (
    compare_outputs,
    program_precision,
    signature_mismatch,
)
from distir.tools.diagnostics import InputRejected, ResultsDiffer, run_tool
from distir.tools.opt import LocatingParser, verify_located


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="distir-run",
        description="Run a distir program on N (simulated or real) ranks.",
    )
    p.add_argument("file", metavar="FILE", help="the program (.mlir), or - for standard input")
    p.add_argument("--ranks", type=int, metavar="N", help="number of ranks (default: the size of a static mesh, or N under mpiexec -n N)")
    p.add_argument(
        "--backend",
        metavar="NAME",
        help=f"interpret, local, mpi or nccl (default: {default_backend_name()})",
    )
    p.add_argument("--inputs", metavar="IN.npz", help="input arrays by argument name (missing ones are random)")
    p.add_argument("--outputs", metavar="OUT.npz", help="write the results as result0, result1, ...")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the random inputs (default 0)")
    p.add_argument("--func", metavar="NAME", help="function to run (default: the only one)")
    p.add_argument("--compare", metavar="OTHER.mlir", help="run the same function of another file and compare")
    p.add_argument("--compare-func", metavar="NAME", help="compare with this function (of FILE, or of --compare's file)")
    p.add_argument(
        "--scatter-args",
        metavar="NAMES",
        help="comma-separated 1-D arguments given as lists of pieces (NAME.0, NAME.1, ... in --inputs), run without packing (local, mpi)",
    )
    p.add_argument(
        "--compare-backend",
        metavar="NAME",
        help="run the comparison on this backend (default: --backend); alone, compare FILE's function on both backends",
    )

    def error(message: str):
        raise InputRejected(f"distir-run: {message}")

    p.error = error  # type: ignore[method-assign]
    return p


class _Located(InputRejected):
    """A parse or verification diagnostic (printed as it is, with its location)."""


def read_module(path: str) -> ModuleOp:
    """Parse and verify a program file (``-``: standard input), with located diagnostics."""
    name = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    except OSError as e:
        raise InputRejected(f"distir-run: cannot read {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputRejected(f"{name}: input is not UTF-8 text (byte {e.start})") from None
    try:
        parser = LocatingParser(make_context(), text, name)
        module = parser.parse_module()
        verify_located(module, parser.op_spans)
    except (ParseError, VerifyException) as e:
        raise _Located(str(e)) from None
    return module


def _describe(t) -> str:
    if isinstance(t, TensorType):
        return f"{t.format_shape()}x{t.element_type} on @{t.mesh_name} {format_placements(t.get_placements())}"
    return str(t)


def _summary(func: FuncOp, ranks: int, backend: str, outputs: Sequence[np.ndarray]) -> str:
    lines = [f"@{func.sym_name.data} on {ranks} rank(s), backend {backend}: {len(outputs)} result(s)"]
    for i, (t, a) in enumerate(zip(npz.result_types(func), outputs)):
        shape = "x".join(map(str, a.shape)) or "scalar"
        lines.append(f"  result{i}: {_describe(t)} -> {shape} {a.dtype.name}")
    return "\n".join(lines)


def _compare_target(args, module: ModuleOp, func: FuncOp) -> tuple[ModuleOp, FuncOp]:
    if args.compare is not None:
        if args.compare == "-" and args.file == "-":
            raise InputRejected("distir-run: FILE and --compare cannot both read standard input")
        other = read_module(args.compare)
        name = args.compare_func
        if name is None and len(npz.functions(other)) != 1:
            name = func.sym_name.data
        return other, npz.select_function(other, name, "--compare-func")
    if args.compare_func is None:
        return module, func
    return module, npz.select_function(module, args.compare_func, "--compare-func")


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    module = read_module(args.file)
    source_func = npz.select_function(module, args.func)
    from distir.lowering.pipeline import (
        dist_view,  # an already lowered program: its dist-level signature
    )

    func = dist_view(source_func)
    backend_name = args.backend or default_backend_name()
    backend = get_backend(backend_name)
    ranks = args.ranks
    if ranks is None:
        ranks = npz.static_ranks(module)
    if ranks is None and hasattr(backend, "launched_ranks"):
        ranks = backend.launched_ranks()  # mpiexec -n N: one rank per process
    if ranks is None:
        raise InputRejected("distir-run: give --ranks N: the program's meshes do not fix the rank count")
    from distir.lowering.pipeline import is_lowered

    if backend_name == "interpret" and is_lowered(module):
        raise InputRejected("distir-run: the program is lowered (rt/nccl ops): the interpreter runs dist/coll-level programs; use --backend local, mpi or nccl")
    grids = npz.resolve_grids(module, ranks)
    given = npz.load_npz(args.inputs) if args.inputs else {}
    pieces: dict = {}
    if args.scatter_args:
        # Scattered tensors (runtime/scattered.py): the logical value is checked and
        # used for --compare; the backend gets the pieces.
        from distir.runtime import scattered

        if not getattr(backend, "supports_scatter", False):
            raise InputRejected(f"distir-run: backend '{backend_name}' does not take --scatter-args (use local or mpi)")
        given, pieces = scattered.logical_inputs(given, [n.strip() for n in args.scatter_args.split(",") if n.strip()])
    inputs = npz.prepare_inputs(module, func, ranks, given, args.seed, source=args.inputs or "inputs", grids=grids)
    if args.inputs:
        drawn = [n for n in inputs if n not in given]
        if drawn:
            print(
                f"distir-run: note: {args.inputs} has no array for {', '.join(repr(n) for n in drawn)}: "
                f"drawn at random (--seed {args.seed})",
                file=sys.stderr,
            )

    compare = None
    if args.compare is not None or args.compare_func is not None or args.compare_backend is not None:
        other_module, other_func = _compare_target(args, module, func)
        other_grids = npz.resolve_grids(other_module, ranks)
        why = signature_mismatch(func, other_func, grids, other_grids)
        if why:
            raise InputRejected(f"distir-run: cannot compare @{func.sym_name.data} with @{other_func.sym_name.data}: {why}")
        npz.check_sizes(other_func, other_grids, ranks)
        compare = (other_module, other_func)

    if pieces:
        scattered_outputs = backend.run(module, func.sym_name.data, {**inputs, **pieces}, ranks, args.seed, scatter=list(pieces))
        outputs = [np.concatenate(o, axis=-1) if isinstance(o, list) else o for o in scattered_outputs]
    else:
        outputs = backend.run(module, func.sym_name.data, inputs, ranks, args.seed)
    # Under mpiexec every process runs this; only the rank that reports prints and writes.
    quiet = not getattr(backend, "is_output_rank", True)
    if args.outputs and not quiet:
        if pieces:
            np.savez(args.outputs, **scattered.flatten_outputs(scattered_outputs))
        else:
            npz.save_npz(args.outputs, outputs)
    if not quiet:
        print(_summary(func, ranks, backend_name, outputs))

    if compare is not None:
        other_module, other_func = compare
        names_b = npz.argument_names(other_func)
        inputs_b = {nb: a for nb, a in zip(names_b, inputs.values())}
        other_backend = get_backend(args.compare_backend) if args.compare_backend else backend
        other_outputs = other_backend.run(other_module, other_func.sym_name.data, inputs_b, ranks, args.seed)
        where = f"{args.compare}:" if args.compare else ""
        label_a, label_b = f"@{func.sym_name.data}", f"{where}@{other_func.sym_name.data}"
        if args.compare_backend:
            label_a, label_b = f"{label_a} on {backend_name}", f"{label_b} on {args.compare_backend}"
        precision = program_precision(source_func, other_func)
        c = compare_outputs(outputs, other_outputs, label_a, label_b, precision)
        if not c:
            if quiet:
                return 2
            raise ResultsDiffer(f"distir-run: results differ: {c.message}")
        if not quiet:
            print(f"{c.message} [{label_a} vs {label_b}]")
    return 0


def _run_tool(argv: Sequence[str] | None) -> int:
    try:
        return _run(argv)
    except _Located:
        raise
    except InputRejected as e:
        msg = str(e)
        raise InputRejected(msg if msg.startswith("distir-run:") else f"distir-run: {msg}") from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-run", lambda: _run_tool(argv))


if __name__ == "__main__":
    sys.exit(main())
