"""Does a pass keep a runnable program runnable? The check behind
``test/test_pass_runnability.py`` and ``bench/pass_runnability.py``.

    outcome = check_pipelines(prog, PIPELINES, backends=("interpret", "local"))
    assert not outcome.failures, outcome.report()

For a random program (``support/programs.py``, generated for ``prog.ranks`` ranks) and
every pipeline of ``PIPELINES`` (every registered pass, alone and after the passes that
prepare its work), on each backend:

* the original runs on ``prog.ranks`` ranks (it is generated to), or the program is
  skipped on that backend when the backend rejects it with a diagnostic (``local``
  runs at most 64 ranks, some element types, ...);
* the pipeline either rewrites the program or refuses it with a diagnostic (a
  ``PassFailedException`` or ``InputRejected``; never another exception);
* the transformed program runs on the same inputs and agrees with the original
  (``runtime/equivalence.py``'s tolerances). On a mesh whose sizes the program fixes,
  a transformed program that the backend rejects is a failure: the pass made a
  runnable program unrunnable. On a ``[?]`` mesh the passes do not know the rank count
  (``split-allreduce`` picks a dim by the rule of its docstring), so a rejection with
  a diagnostic is allowed there and counted (``outcome.rejected``); any other exception
  is a failure everywhere.

The lowering passes (``lower-to-kernels``, ``lower-collectives`` and the rest of
``lowering/pipeline.py``) run inside every ``local`` run; the pipelines name the ones a
user may run on their own. A result with ``rt``/``nccl`` ops runs on ``local`` only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.utils.exceptions import PassFailedException

from distir.dialects.diagnostics import InputRejected
from distir.passes.pipeline import apply_pipeline
from distir.runtime import npz
from distir.runtime.backend import get_backend
from distir.runtime.equivalence import compare_outputs, program_precision, signature_mismatch

RANK_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8)

MESHES: tuple[tuple[int, ...], ...] = ((1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (1, 2))
"""Meshes of 1 to 8 ranks."""

PIPELINES: tuple[str, ...] = (
    "expand-collectives",
    "expand-collectives,form-collectives",
    "expand-collectives,commute-maps,cancel-primitives",
    "commute-maps",
    "commute-maps{direction=down}",
    "fuse-maps",
    "split-allreduce",
    "split-allreduce{strategy=reduce-bcast}",
    "split-allreduce,reorder-allgather",
    "split-allreduce{strategy=reduce-bcast},reorder-broadcast",
    "split-allreduce,reorder-send",
    "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce",
    "split-allreduce,reorder-allgather,fuse-maps,slice-state,fuse-allreduce",
    "split-allreduce{strategy=reduce-bcast},reorder-broadcast,fuse-collectives",
    "slice-state",
    "overlap",
    "overlap{chunks=3}",
    "overlap{chunks=2 order=ring}",
    "overlap{order=remote_first granularity=tile}",
    "split-allreduce,reorder-allgather,fuse-allreduce,overlap{chunks=2}",
    "combine-collectives",
    "canonicalize",
    "fix-mesh-sizes{ranks=RANKS}",
    "fix-mesh-sizes{ranks=RANKS},combine-collectives,lower-buckets",
    "overlap{chunks=2},lower-overlap",
    "synthesize-reductions",
)
"""Every registered pass (``passes/registry.py``), alone and after the passes that give
it work; ``RANKS`` is replaced by the program's rank count."""


@dataclass
class Outcome:
    """What ``check_pipelines`` saw for one program."""

    ran: Counter = field(default_factory=Counter)  # (pipeline, backend) -> runs that agreed
    refused: Counter = field(default_factory=Counter)  # pipeline -> programs a pass refused
    rejected: list[str] = field(default_factory=list)  # [?] meshes: transformed rejected
    failures: list[str] = field(default_factory=list)

    def report(self) -> str:
        return "\n\n".join(self.failures)


def lowering_stage(module) -> bool:
    """Whether a lowering pass left ``rt``/``nccl`` ops (``lower-overlap``'s chunks, ...),
    which only the ``local`` backend runs."""
    return any(op.name.startswith(("rt.", "nccl.")) for op in module.walk())


def _static(module) -> bool:
    from distir.dialects.dist import MeshOp

    return all(s is not None for op in module.ops if isinstance(op, MeshOp) for s in op.declared_sizes)


def _run(backend: str, module, func: str, inputs: dict | None, ranks: int, seed: int) -> tuple[str, object]:
    """("ok", outputs), ("rejected", diagnostic) or ("error", what went wrong)."""
    try:
        if inputs is None:
            f = npz.select_function(module, func)
            inputs = npz.prepare_inputs(module, f, ranks, None, seed)
        return "ok", (inputs, get_backend(backend).run(module, func, inputs, ranks, seed))
    except InputRejected as e:
        return "rejected", str(e)
    except Exception as e:  # noqa: BLE001 - an internal error is a finding
        return "error", f"{type(e).__name__}: {e}"


def check_pipelines(
    prog,
    pipelines: Sequence[str] = PIPELINES,
    backends: Sequence[str] = ("interpret",),
    seed: int = 3,
    outcome: Outcome | None = None,
    rank_counts: Sequence[int] = RANK_COUNTS,
) -> Outcome:
    """Run ``prog`` and every pipeline's result on each backend (module doc). A program
    on a ``[?]`` mesh also runs on the other ``rank_counts`` on ``interpret``: where the
    original runs, the transformed one runs and agrees or is rejected with a diagnostic;
    where it does not, both are diagnostics."""
    out = outcome if outcome is not None else Outcome()
    original = prog.module()
    static = _static(original)
    f = npz.select_function(original, prog.func)
    # (backend, ranks) -> (inputs, outputs) of the original, or None where it is rejected
    reference: dict[tuple[str, int], tuple | None] = {}
    runs = [(b, prog.ranks) for b in backends]
    if not static:
        runs += [("interpret", m) for m in rank_counts if m != prog.ranks]
    for b, m in runs:
        status, value = _run(b, original, prog.func, None, m, seed)
        if status == "error":
            out.failures.append(f"the original fails on {b}, {m} ranks: {value}\n{prog.text}")
        elif status == "rejected" and b == "interpret" and m == prog.ranks:
            out.failures.append(f"the original does not run on interpret: {value}\n{prog.text}")
        if status != "error":
            reference[(b, m)] = value if status == "ok" else None  # type: ignore[assignment]
    if reference.get(("interpret", prog.ranks)) is None:
        return out
    for spec in pipelines:
        pipeline = spec.replace("RANKS", str(prog.ranks))
        try:
            module = apply_pipeline(prog.module(), pipeline)
        except (PassFailedException, InputRejected):
            out.refused[spec] += 1
            continue
        except Exception as e:  # noqa: BLE001 - an internal error of a pass is a finding
            out.failures.append(f"{pipeline}: the pass raised {type(e).__name__}: {e}\n{prog.text}")
            continue
        g = npz.select_function(module, prog.func)
        grids = npz.resolve_grids(original, prog.ranks)
        why = signature_mismatch(f, g, grids, npz.resolve_grids(module, prog.ranks))
        if why:
            out.failures.append(f"{pipeline}: the signature changed: {why}\n--- before\n{prog.text}\n--- after\n{module}")
            continue
        fixed = "fix-mesh-sizes" in pipeline  # written for prog.ranks only
        for (b, m), ref in reference.items():
            if (b == "interpret" and lowering_stage(module)) or (fixed and m != prog.ranks):
                continue
            where = f"{pipeline} on {b}, {m} ranks"
            inputs = None if ref is None else dict(zip(npz.argument_names(g), ref[0].values()))
            status, value = _run(b, module, prog.func, inputs, m, seed)
            if status == "error":
                out.failures.append(f"{where}: internal error {value}\n--- before\n{prog.text}\n--- after\n{module}")
            elif ref is None:
                continue  # the original is rejected here too
            elif status == "rejected":
                if static:
                    out.failures.append(f"{where}: the original runs, the transformed program is rejected: {value}\n--- before\n{prog.text}\n--- after\n{module}")
                else:
                    out.rejected.append(f"{where}: {value}")
            else:
                c = compare_outputs(ref[1], value[1], "original", "transformed", program_precision(f, g))  # type: ignore[index]
                if not c:
                    out.failures.append(f"{where}: results differ: {c.message}\n--- before\n{prog.text}\n--- after\n{module}")
                else:
                    out.ran[(spec, b)] += 1
    return out
