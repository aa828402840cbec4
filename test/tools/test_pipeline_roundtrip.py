"""Every pipeline a tool prints is accepted by ``distir-opt -p`` as printed.

The tuner names each schedule by the ``-p`` pipeline that produces it (its table, the
header of ``-o``'s file, ``--json``). Over every example and every imported JAX, Shardy
and ``shard`` program: each explored schedule's pipeline reads back as the same passes,
and ``distir-opt -p`` applied to the file as written gives the schedule. Values that
the importer names get names that read as names (``%dot_general_1``, ``%all_reduce``), and a
value named by a number is quoted (``targets="19"``) rather than read as one.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from distir.passes.pipeline import parse_pipeline
from distir.tools.run import read_module
from distir.tuning.explore import explore, only_function

ROOT = Path(__file__).parents[2]
IMPORTED = sorted(
    p for p in (ROOT / "test" / "frontends").glob("*.mlir") if p.read_text().startswith("// RUN: distir-import %s |")
)
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.mlir") if p.name != "invalid.mlir")


def functions(module) -> list[str]:
    from xdsl.dialects import func

    return [op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp)]


def opt(tmp_path: Path, file: Path, pipeline: str) -> str:
    """``distir-opt FILE -p PIPELINE -o OUT``, in this process; the printed result."""
    from distir.tools.opt import main

    out = tmp_path / "out.mlir"
    assert main([str(file), "-p", pipeline, "-o", str(out)]) == 0
    return out.read_text()


@pytest.mark.parametrize("path", EXAMPLES + IMPORTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_explored_pipeline_reads_back_as_its_passes(path, tmp_path):
    module = read_module(str(path))
    deepest = None
    for name in functions(module):
        program = only_function(module, name)
        for c in explore(program).candidates:
            assert parse_pipeline(c.pipeline) == c.passes, c.pipeline
            if len(functions(module)) == 1 and (deepest is None or c.depth > deepest.depth):
                deepest = c
    if deepest is not None and deepest.pipeline:
        # the longest pipeline, given to distir-opt on the file as written
        printed = opt(tmp_path, path, deepest.pipeline)
        assert printed.strip() == str(deepest.module).strip(), deepest.pipeline


def test_imported_values_have_names_that_read_as_names():
    text = str(read_module(str(ROOT / "test" / "frontends" / "jax-tp-mlp-megatron.mlir")))  # 16 ranks, Megatron's shapes
    numbered = re.findall(r"^\s*(%\d+) = (dist|coll)\.", text, flags=re.M)
    assert not numbered, numbered
    assert "%all_reduce = coll.all_reduce sum %dot_general_1" in text


def test_distir_tune_on_an_imported_program_prints_pipelines_distir_opt_accepts(tmp_path, monkeypatch, capsys):
    """The -o file's header, --json and the table of ``distir-tune tp_mlp.mlir --ranks 4
    --model dgx2`` (examples/jax/tp_mlp.py's program: test/frontends/jax-tp-mlp.mlir)."""
    from distir.tools.tune import main

    monkeypatch.setenv("COLUMNS", "400")
    src = ROOT / "test" / "frontends" / "jax-tp-mlp.mlir"
    best, js = tmp_path / "best.mlir", tmp_path / "t.json"
    assert main([str(src), "--ranks", "4", "--model", "dgx2", "--top", "100", "-o", str(best), "--json", str(js)]) == 0
    table = capsys.readouterr().out
    header = best.read_text().splitlines()[1]
    assert header.startswith("//   distir-opt -p ")
    (given,) = shlex.split(header.removeprefix("//   distir-opt -p "))
    body = best.read_text().split("\n", 2)[2]
    assert opt(tmp_path, src, given).strip() == body.strip()
    pipelines = {s["pipeline"] for s in json.loads(js.read_text())["schedules"]} - {""}
    assert any("targets=" in p for p in pipelines)
    for p in pipelines:
        parse_pipeline(p)
    # the table's pipeline column: each row's pipeline whole, as --json has it
    lines = table.splitlines()
    head = next(i for i, line in enumerate(lines) if line.rstrip().endswith("pipeline"))
    col = lines[head].index("pipeline")
    body = lines[head + 1 :]
    body = body[: next(i for i, line in enumerate(body) if not line.strip())]
    rows = [line[col:].strip() for line in body if line[col:].strip() != "(as written)"]
    assert len(rows) > 5 and set(rows) <= pipelines, set(rows) - pipelines
