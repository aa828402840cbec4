"""The StableHLO + sdy export re-imports to an equivalent program. Every example, case of
``export-cases.mlir`` and schedule of ``examples/schedules`` (meshes fixed for 1, 2 and 4
ranks where they fit) and every front-end sample as ``distir-import`` reads it (at its
meshes' rank count) is exported, read back by ``distir-import``'s reader
(``frontends/program.import_program``), and both programs run on the same random inputs
must agree (``runtime/equivalence.equivalent``, what ``distir-run --compare`` runs) on
the ``interpret`` backend, and on ``local`` for the examples and cases. The command
line itself (``distir-import``, then ``distir-run --compare`` on both backends) is run
on the examples at 4 ranks.

A program whose export uses a StableHLO op the importer does not read yet is an
expected failure, checked to fail for exactly that reason (``IMPORTER_GAPS``): the
device's coordinates (``partition_id``, for a take_slice of a computed value or dropout
and embedding bags on sliced values), ``gather`` (embedding bags) and
``collective_permute`` (``coll.send``, until distir has ``coll.permute``).
"""

import subprocess
import sys
from pathlib import Path

import pytest
from export_programs import RANDOM, runs, text_of
from xdsl.utils.exceptions import ParseError

from distir.dialects.context import make_context, parse_module
from distir.frontends.export import export_module
from distir.frontends.program import import_program
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
from distir.runtime.equivalence import equivalent

IMPORTER_GAPS = ("stablehlo.partition_id", "stablehlo.gather", "stablehlo.collective_permute")
"""StableHLO ops the sdy export writes and ``distir-import`` does not read yet."""

RUNS = [(n, f, r) for n, f, r in runs() if n not in RANDOM and (r in (1, 2, 4) or n.startswith("imported/"))]
LOCAL = [(n, f, r) for n, f, r in RUNS if not n.startswith(("schedules/", "imported/"))]
BIN = Path(sys.executable).parent
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def exported(name: str, ranks: int):
    module = parse_module(text_of(name))
    FixMeshSizesPass(ranks=ranks).apply(make_context(), module)
    return module, export_module(module, "sdy")


def reimported(name: str, ranks: int):
    """(the program with its meshes fixed, the program distir-import reads from its export);
    an expected failure when the export needs an op of ``IMPORTER_GAPS``."""
    module, text = exported(name, ranks)
    try:
        back = import_program(text, f"{name}.sdy.mlir").module
    except ParseError as e:
        gap = next((op for op in IMPORTER_GAPS if f"'{op}'" in str(e)), None)
        if gap is None:
            raise
        pytest.xfail(f"distir-import does not read '{gap}' yet")
    return module, back


@pytest.mark.parametrize("name,func,ranks", RUNS, ids=[f"{n}:{f}:{r}" for n, f, r in RUNS])
def test_reimported_export_computes_the_same_on_interpret(name, func, ranks):
    module, back = reimported(name, ranks)
    report = equivalent(module, back, ranks, trials=1, seed=3, func_a=func, func_b=func)
    assert report, report.message


@pytest.mark.parametrize("name,func,ranks", LOCAL, ids=[f"{n}:{f}:{r}" for n, f, r in LOCAL])
def test_reimported_export_computes_the_same_on_local(name, func, ranks):
    module, back = reimported(name, ranks)
    report = equivalent(module, back, ranks, trials=1, seed=3, func_a=func, func_b=func, backend_a="local", backend_b="local")
    assert report, report.message


def test_most_programs_round_trip():
    """The expected failures stay the exception: three in five runs re-import (86 of 134
    when this was written; the gaps are ``IMPORTER_GAPS``, nothing else)."""
    imported = 0
    for name, _, ranks in RUNS:
        try:
            import_program(exported(name, ranks)[1], name)
            imported += 1
        except ParseError as e:
            assert any(f"'{op}'" in str(e) for op in IMPORTER_GAPS), str(e)
    assert 5 * imported >= 3 * len(RUNS), f"{imported} of {len(RUNS)} exports re-import"


CLI_EXAMPLES = ["adam", "sgd", "lamb", "megatron_mlp", "megatron_attention", "moe", "transformer_decode"]


@pytest.mark.parametrize("backend", ["interpret", "local"])
@pytest.mark.parametrize("example", CLI_EXAMPLES)
def test_distir_import_and_run_compare(tmp_path, example, backend):
    module = parse_module(text_of(example))  # the example at small sizes
    original = tmp_path / f"{example}.mlir"
    original.write_text(str(module))
    sdy = tmp_path / f"{example}.sdy.mlir"
    r = subprocess.run([BIN / "distir-opt", original, "-p", "fix-mesh-sizes{ranks=4}", "--emit", "sdy", "-o", sdy], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    back = tmp_path / f"{example}.back.mlir"
    r = subprocess.run([BIN / "distir-import", sdy, "-o", back], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([BIN / "distir-run", original, "--ranks", "4", "--backend", backend, "--compare", back], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "results agree" in r.stdout
