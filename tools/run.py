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

Under ``mpiexec -n N`` (``--backend mpi``/``nccl``) every process does its own
preparation (parsing, inputs, lowering), then the ranks agree, in one small collective
before the first data collective, on the program (a hash of the file), the function, the
rank count, the seed and each input's dtype, shape and checksum. An error on any rank, or
ranks that would run different things, stops every rank with exit 1 and one diagnostic
(printed by rank 0) naming the failing rank; ``--trust-inputs`` skips the input
checksums (shapes and dtypes are still compared). A rank that fails after the start
prints its diagnostic and ends its process, which makes mpiexec end the others.
``--timeout S`` bounds the whole run: after S seconds every rank prints the op it waits
in (the first rank whose clock runs out tells the others) and the job ends with exit 1.

Exit codes: 0 success; 1 input rejected (parse, verify, bad option, bad npz, a rank
count the program cannot run on, ranks that disagree, --timeout); 2 the results of
--compare disagree (the first mismatching element is reported); 3 internal error.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from distir.dialects.diagnostics import Terminated
from distir.tools.diagnostics import Exit, InputRejected, ResultsDiffer, check_text, describe, make_parser, read_input, run_tool

if TYPE_CHECKING:  # the rest is imported once the arguments are parsed (--help at once)
    import argparse

    import numpy as np
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.dialects.func import FuncOp

BACKEND_NAMES = ("interpret", "local", "mpi", "nccl")
"""The backends ``--backend`` names in its help (``runtime/backend.BACKENDS``; the
help is written without importing the runtime)."""


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("distir-run", "Run a distir program on N (simulated or real) ranks.")
    p.add_argument("file", metavar="FILE", help="the program (.mlir), or - for standard input")
    p.add_argument("--ranks", type=int, metavar="N", help="number of ranks (default: the size of a static mesh, or N under mpiexec -n N)")
    p.add_argument(
        "--backend",
        metavar="NAME",
        help=f"{', '.join(BACKEND_NAMES[:-1])} or {BACKEND_NAMES[-1]} (default: local)",
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
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="stop with a diagnostic (the op each rank waits in) if the run takes longer than S seconds",
    )
    p.add_argument(
        "--trust-inputs",
        action="store_true",
        help="under mpiexec: do not compare the checksums of the inputs the ranks read (shapes and dtypes still)",
    )
    return p


class _Located(InputRejected):
    """A parse or verification diagnostic (printed as it is, with its location)."""


def read_source(path: str) -> bytes:
    """The bytes of a program file (``-``: standard input): not empty, not binary."""
    data = read_input(path, check=False)
    try:
        check_text(data, "stdin" if path == "-" else path)
    except InputRejected as e:
        raise _Located(str(e)) from None
    return data


def read_module(path: str, data: bytes | None = None) -> ModuleOp:
    """Parse and verify a program file (``-``: standard input), with located diagnostics."""
    from xdsl.utils.exceptions import ParseError, VerifyException

    from distir.dialects.context import make_context
    from distir.dialects.frontend import decode_source
    from distir.frontends.program import read_program

    name = "<stdin>" if path == "-" else path
    if data is None:
        data = read_source(path)
    try:
        module, _ = read_program(decode_source(data, name), name, make_context(), verify=True)
    except (ParseError, VerifyException) as e:
        raise _Located(str(e)) from None
    return module


def _describe(t) -> str:
    from distir.dialects.dist import TensorType
    from distir.dialects.layout import format_placements

    if isinstance(t, TensorType):
        return f"{t.format_shape()}x{t.element_type} on @{t.mesh_name} {format_placements(t.get_placements())}"
    return str(t)


def _summary(func: FuncOp, ranks: int, backend: str, outputs: Sequence[np.ndarray]) -> str:
    from distir.runtime import npz

    lines = [f"@{func.sym_name.data} on {ranks} rank(s), backend {backend}: {len(outputs)} result(s)"]
    for i, (t, a) in enumerate(zip(npz.result_types(func), outputs)):
        shape = "x".join(map(str, a.shape)) or "scalar"
        lines.append(f"  result{i}: {_describe(t)} -> {shape} {a.dtype.name}")
    return "\n".join(lines)


def _compare_target(args, module: ModuleOp, func: FuncOp, sources: dict[str, bytes]) -> tuple[ModuleOp, FuncOp]:
    from distir.runtime import npz

    if args.compare is not None:
        if args.compare == "-" and args.file == "-":
            raise InputRejected("distir-run: FILE and --compare cannot both read standard input")
        other = read_module(args.compare, sources.get(args.compare))
        name = args.compare_func
        if name is None and len(npz.functions(other)) != 1:
            name = func.sym_name.data
        return other, npz.select_function(other, name, "--compare-func")
    if args.compare_func is None:
        return module, func
    return module, npz.select_function(module, args.compare_func, "--compare-func")


class MpiSession:
    """This process's part in an MPI job (``mpiexec -n N distir-run ...``): the start-up
    agreement (``runtime/mpi.agree``) and what happens on an error (see the module doc)."""

    def __init__(self) -> None:
        from mpi4py import MPI

        from distir.runtime.mpi import forget_mpich_segments

        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        forget_mpich_segments(self.world)  # nothing left in /dev/shm if the job is killed
        self.agreed = False
        self.deadline: float | None = None

    @staticmethod
    def launched() -> bool:
        """Whether this process was started by mpiexec with other ranks (from the
        launcher's environment, without initialising MPI)."""
        for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
            try:
                if int(os.environ.get(var, "1")) > 1:
                    return True
            except ValueError:
                pass
        return False

    def agree(self, fingerprint: dict[str, str] | None, failure: tuple[int, str] | None = None) -> None:
        """Agree with the other ranks; an ``Exit`` (message on rank 0 only) unless every
        rank is ready to run the same thing."""
        from distir.runtime.mpi import StartupStalled, agree, stop_job

        try:
            outcome = agree(self.world, fingerprint, failure, self.deadline)
        except StartupStalled as e:
            print(f"distir-run: rank {self.rank}: no result within the --timeout: {e}", file=sys.stderr, flush=True)
            stop_job(1)
        self.agreed = True
        if not outcome.ok:
            raise Exit(outcome.code, outcome.message if outcome.report else None)

    def fail_late(self, e: BaseException) -> None:
        """A failure on this rank after the agreement: report it and end the job."""
        from distir.runtime.mpi import stop_job

        code, msg = describe("distir-run", e)
        msg = msg.removeprefix("distir-run: ")
        if self.rank != 0:
            time.sleep(0.3)  # if every rank fails alike, rank 0's report ends the job first
        print(f"distir-run: rank {self.rank}: {msg}", file=sys.stderr, flush=True)
        stop_job(code)


WATCHDOG_GRACE = 30.0
"""Under MPI, how long a rank that reached --timeout waits for the other ranks to report
where they wait (they do at once unless one cannot: the wait is event-driven)."""


def _available_memory() -> int:
    """Bytes of memory available to this process now."""
    import psutil

    return psutil.virtual_memory().available


def check_arguments(func: FuncOp, grids) -> None:
    """Every argument can be given as an array, and all of them fit in memory (a
    diagnostic now rather than an allocation failure later)."""
    import math

    from distir.runtime import npz
    from distir.runtime.values import UnsupportedType

    total = 0
    for name, t in npz.signature(func):
        try:
            shape, dtype = npz.expected_array(t, grids)
        except UnsupportedType as e:
            raise InputRejected(f"distir-run: argument '{name}' of @{func.sym_name.data}: {e}") from None
        total += math.prod(shape) * dtype.itemsize
    available = _available_memory()
    if total > available:
        raise InputRejected(
            f"distir-run: the arguments of @{func.sym_name.data} need {total / 2**30:.4g} GiB, "
            f"more than the {available / 2**30:.1f} GiB of memory available"
        )


def _fingerprint(args, sources: dict[str, bytes], func: str, ranks: int, backend: str, given: dict) -> dict[str, str]:
    """What the ranks of an MPI job must agree on before they start."""
    from distir.runtime.mpi import inputs_fingerprint, program_digest

    fp = {"program" if i == 0 else "compared program": program_digest(data) for i, data in enumerate(sources.values())}
    fp.update({"function": f"@{func}", "ranks": str(ranks), "backend": backend, "seed": str(args.seed)})
    for opt in ("compare_func", "compare_backend", "scatter_args"):
        if getattr(args, opt):
            fp[opt.replace("_", "-")] = str(getattr(args, opt))
    fp.update(inputs_fingerprint(given, checksums=not args.trust_inputs))
    return fp


def _run(argv: Sequence[str] | None, session: MpiSession | None) -> int:
    args = build_parser().parse_args(argv)
    # The compiler is imported now, before --timeout's clock starts (as when it was
    # imported with this module): the clock bounds the run, not Python's start-up.
    import numpy as np

    import distir.dialects.context  # noqa: F401 - read_module's
    import distir.dialects.verifier  # noqa: F401 - read_module's
    import distir.lowering.pipeline  # noqa: F401 - dist_view's
    from distir.passes.pipeline import did_you_mean
    from distir.runtime import npz
    from distir.runtime.backend import BACKENDS, default_backend_name, get_backend
    from distir.runtime.equivalence import compare_outputs, inputs_for, outputs_as, program_precision, signature_mismatch

    phase = ["reading the program and inputs"]
    prepared = None

    def where() -> str:
        return prepared.where() if prepared is not None else phase[0]

    watchdog = None
    if args.timeout is not None:
        if args.timeout <= 0:
            raise InputRejected(f"distir-run: --timeout must be positive, got {args.timeout:g}")
        from distir.runtime.mpi import Watchdog

        # under MPI the watchdog waits for the other ranks' reports (each says where it
        # waits) for at most WATCHDOG_GRACE seconds; the start-up agreement waits for it
        watchdog = Watchdog(args.timeout, f"rank {session.rank}" if session else "", where, grace=WATCHDOG_GRACE, comm=session.world if session else None)
    backend_name = args.backend or default_backend_name()
    if backend_name not in BACKENDS:
        raise InputRejected(f"distir-run: unknown backend '{backend_name}'{did_you_mean(backend_name, list(BACKENDS))} (choose from {', '.join(BACKENDS)})")
    if session is not None and backend_name not in ("mpi", "nccl"):
        raise InputRejected(
            f"distir-run: under mpiexec, run with --backend mpi or nccl (one process per rank); "
            f"--backend {backend_name} would run every rank in each of the {session.world.Get_size()} processes"
        )
    sources = {args.file: read_source(args.file)}
    module = read_module(args.file, sources[args.file])
    if args.func is not None and args.func.removeprefix("@") not in {f.sym_name.data for f in npz.functions(module)}:
        names = [f.sym_name.data for f in npz.functions(module)]
        raise InputRejected(
            f"distir-run: no function @{args.func.removeprefix('@')} in the module (functions: {', '.join('@' + n for n in names) or 'none'})"
            + did_you_mean(args.func.removeprefix("@"), names)
        )
    source_func = npz.select_function(module, args.func)
    from distir.lowering.pipeline import (
        dist_view,  # an already lowered program: its dist-level signature
    )

    func = dist_view(source_func)
    backend = get_backend(backend_name)
    ranks = args.ranks
    if ranks is None:
        ranks = npz.static_ranks(module, source_func)  # only the meshes the function uses
    if ranks is None and hasattr(backend, "launched_ranks"):
        ranks = backend.launched_ranks()  # mpiexec -n N: one rank per process
    if ranks is None:
        raise InputRejected("distir-run: give --ranks N: the program's meshes do not fix the rank count")
    from distir.lowering.pipeline import is_lowered

    if backend_name == "interpret" and is_lowered(module):
        raise InputRejected("distir-run: the program is lowered (rt/nccl ops): the interpreter runs dist/coll-level programs; use --backend local, mpi or nccl")
    grids = npz.resolve_grids(module, ranks, npz.used_meshes(module, source_func))
    check_arguments(func, grids)
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
    if args.inputs and (session is None or session.rank == 0):
        drawn = [n for n in inputs if n not in given]
        if drawn:
            print(
                f"distir-run: note: {args.inputs} has no array for {', '.join(repr(n) for n in drawn)}: "
                f"drawn at random (--seed {args.seed})",
                file=sys.stderr,
            )

    compare = None
    if args.compare is not None or args.compare_func is not None or args.compare_backend is not None:
        if args.compare is not None and args.compare != args.file:
            sources[args.compare] = read_source(args.compare)
        if args.compare_backend is not None and args.compare_backend not in BACKENDS:
            raise InputRejected(
                f"distir-run: unknown backend '{args.compare_backend}'{did_you_mean(args.compare_backend, list(BACKENDS))} "
                f"(choose from {', '.join(BACKENDS)})"
            )
        other_module, other_func = _compare_target(args, module, func, sources)
        other_grids = npz.resolve_grids(other_module, ranks, npz.used_meshes(other_module, other_func))
        why = signature_mismatch(func, other_func, grids, other_grids)
        if why:
            raise InputRejected(f"distir-run: cannot compare @{func.sym_name.data} with @{other_func.sym_name.data}: {why}")
        npz.check_sizes(other_func, other_grids, ranks)
        compare = (other_module, other_func)

    run_inputs = {**inputs, **pieces} if pieces else inputs
    scatter = list(pieces)
    if session is not None:
        # Everything local is done: agree with the other ranks before communicating.
        phase[0] = "preparing the run (lowering, buffers)"
        if backend_name == "mpi":
            prepared = backend.prepare(module, func.sym_name.data, run_inputs, ranks, args.seed, scatter)  # type: ignore[attr-defined]
        phase[0] = "the start-up agreement of the ranks (not every rank has reached it)"
        session.agree(_fingerprint(args, sources, func.sym_name.data, ranks, backend_name, {**given, **pieces}))
        phase[0] = "the run"
    else:
        phase[0] = f"the run on backend {backend_name} ({ranks} ranks)"
    if prepared is not None:
        scattered_outputs = outputs = prepared.execute()
    elif pieces:
        scattered_outputs = backend.run(module, func.sym_name.data, run_inputs, ranks, args.seed, scatter=scatter)  # type: ignore[call-arg]
    else:
        outputs = backend.run(module, func.sym_name.data, inputs, ranks, args.seed)
    if pieces:
        outputs = [np.concatenate(o, axis=-1) if isinstance(o, list) else o for o in scattered_outputs]
    # Under mpiexec every process runs this; only the rank that reports prints and writes.
    quiet = not getattr(backend, "is_output_rank", True)
    if args.outputs and not quiet:
        if pieces:
            npz.save_npz(args.outputs, scattered.flatten_outputs(scattered_outputs))
        else:
            npz.save_npz(args.outputs, outputs)
    if not quiet:
        print(_summary(func, ranks, backend_name, outputs))

    if compare is not None:
        other_module, other_func = compare
        inputs_b = inputs_for(other_func, other_grids, list(inputs.values()))
        other_backend = get_backend(args.compare_backend) if args.compare_backend else backend
        prepared = None
        phase[0] = "the run of the comparison"
        other_outputs = other_backend.run(other_module, other_func.sym_name.data, inputs_b, ranks, args.seed)
        where_ = f"{args.compare}:" if args.compare else ""
        label_a, label_b = f"@{func.sym_name.data}", f"{where_}@{other_func.sym_name.data}"
        if args.compare_backend:
            label_a, label_b = f"{label_a} on {backend_name}", f"{label_b} on {args.compare_backend}"
        precision = program_precision(source_func, other_func)
        other_outputs = outputs_as(func, other_func, grids, other_grids, outputs, other_outputs)
        c = compare_outputs(outputs, other_outputs, label_a, label_b, precision)
        if not c:
            if quiet:
                return 2
            raise ResultsDiffer(f"distir-run: results differ: {c.message}")
        if not quiet:
            print(f"{c.message} [{label_a} vs {label_b}]")
    if watchdog is not None:
        watchdog.stop()
    return 0


def _run_tool(argv: Sequence[str] | None) -> int:
    session = MpiSession() if MpiSession.launched() else None
    try:
        try:
            return _run(argv, session)
        except _Located:
            raise
        except InputRejected as e:
            msg = str(e)
            raise InputRejected(msg if msg.startswith("distir-run:") else f"distir-run: {msg}") from None
    except ResultsDiffer as e:
        if session is not None and session.rank != 0:
            raise Exit(2) from None  # every rank has the verdict; rank 0 reports it
        msg = str(e)
        raise ResultsDiffer(msg if msg.startswith("distir-run:") else f"distir-run: {msg}") from None
    except (Exit, KeyboardInterrupt, SystemExit, Terminated):
        raise
    except BaseException as e:
        if session is None:
            raise
        from distir.runtime.mpi import Disagreement

        if isinstance(e, Disagreement):  # the comparison's run: agreed inside the backend
            raise Exit(e.code, str(e) if e.report else None) from None
        if not session.agreed:
            session.agree(None, describe("distir-run", e))
        session.fail_late(e)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-run", lambda: _run_tool(argv))


if __name__ == "__main__":
    sys.exit(main())
