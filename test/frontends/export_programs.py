"""The programs the exporter tests run: the examples and their schedules (at small
sizes), the cases of ``export-cases.mlir`` and those of ``export-uneven.mlir`` (dims the
ranks do not divide: ``uneven/<name>``, at 3, 5, 6 and 7 ranks), each with the rank
counts it verifies on;
the JAX, Shardy and MLIR shard programs of the front-end tests as ``distir-import``
reads them (``imported/<file>``, at their meshes' rank counts); and random programs
(``support/programs.py``, drawn deterministically) at the rank count they are written
for."""

from __future__ import annotations

import functools
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException

from distir.dialects import layout
from distir.dialects.context import make_context, parse_module
from distir.dialects.dist import TensorType, lookup_mesh
from distir.frontends.program import import_program
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
from distir.runtime import npz
from distir.tuning.sizes import reduced

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RANKS = (1, 2, 4, 8)
UNEVEN_RANKS = (3, 5, 6, 7)
"""The rank counts of ``export-uneven.mlir``'s programs: primes, and dims of 7, 11, 13
and 2 that none of them divide."""
IMPORTED_RANKS = (16,)  # a JAX sample's mesh may be larger


def _texts() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted((ROOT / "examples").glob("*.mlir")) + sorted((ROOT / "examples" / "schedules").glob("*.mlir")):
        if path.name == "invalid.mlir":
            continue
        name = str(path.relative_to(ROOT / "examples")).removesuffix(".mlir")
        # every dim d becomes gcd(d, 16): small, and sliceable by 1, 2, 4 and 8 ranks
        out[name] = str(reduced(parse_module(path.read_text(), str(path)), 16))
    for chunk in (HERE / "export-cases.mlir").read_text().split("// -----"):
        name = next(f.sym_name.data for f in npz.functions(parse_module(chunk)))
        out[f"case/{name}"] = chunk
    for chunk in (HERE / "export-uneven.mlir").read_text().split("// -----"):
        name = next(f.sym_name.data for f in npz.functions(parse_module(chunk)))
        out[f"uneven/{name}"] = chunk
    for path in sorted(HERE.glob("jax-*.mlir")) + sorted(HERE.glob("sdy-*.mlir")) + sorted(HERE.glob("shard-*.mlir")):
        out[f"imported/{path.stem}"] = str(import_program(path.read_text(), str(path)).module)
    return out


@functools.lru_cache(maxsize=None)
def parsed(text: str) -> ModuleOp:
    return parse_module(text)


def fits(text: str, ranks: int) -> bool:
    """Whether the program verifies with its meshes fixed for ``ranks`` ranks."""
    module = parsed(text).clone()
    try:
        FixMeshSizesPass(ranks=ranks).apply(make_context(), module)
        module.verify()
    except DiagnosticException:
        return False
    return True


def _random_programs(count: int) -> dict[str, tuple[str, str, int]]:
    """``count`` random programs, the same on every run: name -> (text, function, ranks)."""
    from hypothesis import HealthCheck, given, settings
    from support.programs import programs

    out: dict[str, tuple[str, str, int]] = {}

    @settings(max_examples=count, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(programs(max_ops=6))
    def collect(prog):
        out.setdefault(f"random/{len(out)}", (prog.text, prog.func, prog.ranks))

    collect()
    return out


PROGRAMS = _texts()
"""name -> program text (``adam``, ``schedules/adam_fused``, ``case/grad_avg``)."""

RANDOM = _random_programs(30)
"""``random/<i>`` -> (text, function, ranks)."""


def _uneven_random_programs(count: int) -> tuple[dict[str, tuple[str, str, int]], int]:
    """``count`` random programs whose dims are primes, ones and zeros on meshes of 1 to 8
    ranks (``support/programs.py``'s ``free_dims``: most slice a dim the ranks do not
    divide), the same on every run, drawn until ``count`` export to StableHLO + sdy;
    with the number drawn."""
    from hypothesis import HealthCheck, given, settings
    from support.programs import UNEVEN_MESHES, programs

    from distir.frontends.export import export_module

    drawn: list = []

    @settings(max_examples=2 * count, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(programs(max_ops=6, meshes=UNEVEN_MESHES, free_dims=True))
    def collect(prog):
        drawn.append(prog)

    collect()
    out: dict[str, tuple[str, str, int]] = {}
    for k, prog in enumerate(drawn):
        module = parse_module(prog.text)
        FixMeshSizesPass(ranks=prog.ranks).apply(make_context(), module)
        try:
            export_module(module, "sdy")
        except DiagnosticException:
            continue
        out[f"uneven-random/{len(out)}"] = (prog.text, prog.func, prog.ranks)
        if len(out) == count:
            return out, k + 1
    return out, len(drawn)


UNEVEN_RANDOM, UNEVEN_DRAWN = _uneven_random_programs(40)
"""``uneven-random/<i>`` -> (text, function, ranks): random programs on dims the ranks
seldom divide that the sdy export writes (the others stop at a diagnostic of
``export-invalid.mlir``'s kinds), and how many were drawn to find them."""

def refusal(name: str, ranks: int, exporter) -> str | None:
    """The diagnostic ``exporter`` (a class of ``frontends/export*.py``) must give for the
    run, or None when it must export it. An exporter that pads (``PADS``: sdy) exports
    every run; one that does not (MLIR 19's mesh) refuses a run with a sliced dim the
    ranks do not divide (``case/mm_rs_ag`` at 8 ranks, every ``uneven/`` program) at the
    first such type: the function's signature, then the ops' results in order."""
    if exporter.PADS:
        return None
    module = parsed(text_of(name)).clone()
    FixMeshSizesPass(ranks=ranks).apply(make_context(), module)
    for f in npz.functions(module):
        typed = [(f, t) for t in [*f.function_type.inputs.data, *f.function_type.outputs.data]]
        typed += [(op, r.type) for op in f.walk() for r in op.results]
        for op, t in typed:
            if not isinstance(t, TensorType):
                continue
            mesh = lookup_mesh(op, t)
            placements, sizes = mesh.to_root(t.get_placements()), mesh.root().sizes()
            for d in layout.uneven_dims(t.get_shape(), placements, sizes):
                why = layout.describe_uneven(t.get_shape(), placements, sizes, d)
                return f"'{op.name}' op cannot be exported to {exporter.TARGET}: {why}: {exporter.UNEVEN}"
    return None


def text_of(name: str) -> str:
    if name in RANDOM:
        return RANDOM[name][0]
    return UNEVEN_RANDOM[name][0] if name in UNEVEN_RANDOM else PROGRAMS[name]


@functools.lru_cache(maxsize=1)
def runs() -> list[tuple[str, str, int]]:
    """(program, function, ranks) for every function of every program at every rank
    count it fits."""
    out: list[tuple[str, str, int]] = [(name, func, ranks) for name, (_, func, ranks) in RANDOM.items()]
    for name, text in PROGRAMS.items():
        funcs = [f.sym_name.data for f in npz.functions(parsed(text))]
        counts = UNEVEN_RANKS if name.startswith("uneven/") else RANKS + (IMPORTED_RANKS if name.startswith("imported/") else ())
        for ranks in counts:
            if fits(text, ranks):
                out += [(name, f, ranks) for f in funcs]
    return out
