"""``distir-plan --check``: run a plan against the program it came from.

Both programs run on the same random inputs (``runtime/npz.py``: each argument's
logical value, drawn once from the program's own signature; the plan takes each as its
placement says) and their results are compared with ``runtime/equivalence.py``'s
tolerances: the program on one rank (a one-device program; a program with fixed
placements on the plan's rank count) and the plan on its ranks, with each backend asked
for (``interpret``, ``local``), the program on the same backend as the plan (they then
differ only in where and in what order they compute). At model sizes nothing runs on one machine: ``reduced`` shrinks both
programs first (every dim d becomes gcd(d, k) for a k that every mesh axis divides, as
the tuner's checks do, and small enough that the ranks' arguments stay within the
tuner's bound), so the plan's placements stay valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import ResultsDiffer


@dataclass
class CheckResult:
    backend: str
    ranks: int
    ok: bool
    message: str


def reduced(original: ModuleOp, plan: ModuleOp, ranks: int, factor: int = 8) -> tuple[ModuleOp, ModuleOp]:
    """Both programs with every dim d replaced by gcd(d, ranks * f), f = ``factor``, or
    4 or 2 where the plan's arguments would hold more than the tuner's checks do on all
    ranks (``explore.check_mapping``: a Llama-7B step on 64 ranks at 128, not 512)."""
    from distir.tuning.explore import CHECK_FACTORS, check_mapping
    from distir.tuning.sizes import substitute

    mapping = check_mapping(plan, ranks, [f for f in CHECK_FACTORS if f <= factor], also=(original,))
    return substitute(original, mapping), substitute(plan, mapping)


def run_check(original: ModuleOp, plan: ModuleOp, ranks: int, backends: Sequence[str] = ("interpret", "local"), seed: int = 0, one_device: bool = True) -> list[CheckResult]:
    """Run ``plan`` on ``ranks`` ranks and ``original`` (on one rank when
    ``one_device``) on the same inputs with each backend; one result per backend."""
    from distir.runtime import npz
    from distir.runtime.backend import get_backend
    from distir.runtime.equivalence import compare_outputs, inputs_for, program_precision

    fa = npz.select_function(original, None, "func")
    fb = npz.select_function(plan, fa.sym_name.data, "func")
    ranks_a = 1 if one_device else ranks
    grids_a, grids_b = npz.resolve_grids(original, ranks_a), npz.resolve_grids(plan, ranks)
    bounds = npz.index_bounds(fa)
    inputs = npz.prepare_inputs(original, fa, ranks_a, None, seed, grids=grids_a, bounds=bounds)
    names = npz.argument_names(fa)
    inputs_b = inputs_for(fb, grids_b, [inputs[n] for n in names])
    precision = program_precision(fa, fb)
    out = []
    for backend in backends:
        try:
            # the program runs on the same backend as the plan: the two differ only in
            # where and in what order they compute, not in the kernels' arithmetic
            expected = get_backend(backend if backend != "mpi" else "local").run(original, fa.sym_name.data, inputs, ranks_a, seed)
            got = get_backend(backend).run(plan, fb.sym_name.data, inputs_b, ranks, seed)
        except ResultsDiffer as e:
            out.append(CheckResult(backend, ranks, False, str(e)))
            continue
        c = compare_outputs(expected, got, f"@{fa.sym_name.data} on {ranks_a} rank(s)", f"the plan on {ranks} ranks ({backend})", precision)
        out.append(CheckResult(backend, ranks, bool(c), c.message))
    return out
