"""Running synthesized programs: each one's lowering must compute what one
``coll.all_reduce`` over the reduction axes computes.

``check_programs`` lowers the given programs of a placement into one module (with the
reference ``@allreduce``), runs the reference once and every program on the same inputs
with a backend (``interpret`` or ``local``), and returns the programs whose outputs
differ. The inputs are small integers stored as float32, so every order of summation
gives the same bits and the comparison is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distir.dialects.verifier import ensure_verified
from distir.runtime.backend import get_backend
from distir.synthesis.hierarchy import SynthesisHierarchy
from distir.synthesis.language import Program, notation
from distir.synthesis.lower import lower_program, module_of, reference, tensor_length
from distir.synthesis.matrices import DevicePlacement


@dataclass
class Mismatch:
    index: int
    program: str
    detail: str


def check_programs(
    placement: DevicePlacement,
    hierarchy: SynthesisHierarchy,
    programs: Sequence[Program],
    reduce_axes: Sequence[int],
    backend: str = "interpret",
    length: int = 16,
    seed: int = 0,
) -> list[Mismatch]:
    """Programs (by index into ``programs``) whose outputs differ from the all_reduce's."""
    n = tensor_length(placement, reduce_axes, length)
    funcs = [reference(placement, reduce_axes, [n])]
    bad: list[Mismatch] = []
    names = {}
    for i, p in enumerate(programs):
        lowered = lower_program(placement, hierarchy, p, reduce_axes, [n], name=f"p{i}")
        if lowered.func is None:
            bad.append(Mismatch(i, notation(hierarchy, p), f"does not lower: {lowered.error}"))
            continue
        funcs.append(lowered.func)
        names[i] = f"p{i}"
    module = module_of(placement, funcs)
    ensure_verified(module)  # remembered: the backends verify it again for nothing
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 9, size=(*placement.axes, n)).astype(np.float32)
    run = get_backend(backend).run
    ranks = placement.ranks
    (want,) = run(module, "allreduce", {"x": x}, ranks, seed)
    by_name = {f.sym_name.data: f for f in funcs}
    for i, name in names.items():
        # one program per module: a backend that lowers the whole module pays for one
        single = module if backend == "interpret" else module_of(placement, [by_name[name].clone()])
        (got,) = run(single, name, {"x": x}, ranks, seed)
        if got.shape != want.shape or not np.array_equal(got, want):
            diff = "shapes differ" if got.shape != want.shape else f"max abs diff {np.abs(got - want).max()}"
            bad.append(Mismatch(i, notation(hierarchy, programs[i]), diff))
    return bad
