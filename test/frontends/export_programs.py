"""The programs the exporter tests run: the examples and their schedules (at small
sizes) and the cases of ``export-cases.mlir``, each with the rank counts it verifies on;
the JAX, Shardy and MLIR shard programs of the front-end tests as ``distir-import``
reads them (``imported/<file>``, at their meshes' rank counts); and random programs
(``support/programs.py``, drawn deterministically) at the rank count they are written
for."""

from __future__ import annotations

import functools
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException

from distir.dialects.context import make_context, parse_module
from distir.frontends.program import import_program
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
from distir.runtime import npz
from distir.tuning.sizes import reduced

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RANKS = (1, 2, 4, 8)
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

UNEVEN: dict[tuple[str, int], str] = {
    ("case/mm_rs_ag", 8): "'coll.reduce_scatter' op cannot be exported to {target}: dim 0 of size 4 over the 8 ranks of axis 0: blocks of 1, 1, 1, 1, 0, 0, 0, 0: {why}",
}
"""The runs (program, ranks) that slice a dim the ranks do not divide (blocks of different
sizes, issue 28), which neither export can write (docs/export.md), with the diagnostic
each exporter must give (``{target}`` and ``{why}``: the exporter's ``TARGET`` and
``UNEVEN``). The export tests assert that diagnostic for these runs and a working export
for every other: a new uneven run fails them until it is listed here."""


def refusal(name: str, ranks: int, exporter) -> str | None:
    """The diagnostic ``exporter`` (a class of ``frontends/export*.py``) must give for the
    run, or None when it must export it."""
    msg = UNEVEN.get((name, ranks))
    return None if msg is None else msg.format(target=exporter.TARGET, why=exporter.UNEVEN)


def text_of(name: str) -> str:
    return RANDOM[name][0] if name in RANDOM else PROGRAMS[name]


@functools.lru_cache(maxsize=1)
def runs() -> list[tuple[str, str, int]]:
    """(program, function, ranks) for every function of every program at every rank
    count it fits."""
    out: list[tuple[str, str, int]] = [(name, func, ranks) for name, (_, func, ranks) in RANDOM.items()]
    for name, text in PROGRAMS.items():
        funcs = [f.sym_name.data for f in npz.functions(parsed(text))]
        for ranks in RANKS + (IMPORTED_RANKS if name.startswith("imported/") else ()):
            if fits(text, ranks):
                out += [(name, f, ranks) for f in funcs]
    return out
