"""Every file in examples/ parses, verifies, prints back to text that parses to the same
IR (custom and generic form), and stock xdsl-opt parses it too; distir-opt prints the
generic form and reads a program from stdin."""

import subprocess
from io import StringIO
from pathlib import Path

import pytest
from support import tools
from xdsl.printer import Printer

from distir.dialects.context import parse_module

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.mlir") if p.name != "invalid.mlir")


def run(tool, *args, stdin=None):
    """The tool (through the tests' warm server: ``support/tools.py``) on ``args``."""
    return subprocess.run([tools.path(tool), *args], input=stdin, capture_output=True, text=True)


def test_contract_examples_are_present():
    names = {p.name for p in EXAMPLES}
    for want in ["adam.mlir", "hierarchical_allreduce.mlir", "megatron_attention.mlir", "pipeline_layer.mlir", "primitives.mlir"]:
        assert want in names
    for want in ["lamb.mlir", "sgd.mlir", "megatron_mlp.mlir", "dlrm_embedding.mlir", "moe.mlir"]:
        assert want in names


def generic_form(module) -> str:
    out = StringIO()
    Printer(stream=out, print_generic_format=True).print_op(module)
    return out.getvalue()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_example_round_trips(path):
    module = parse_module(path.read_text(), str(path))
    text = str(module)
    assert str(parse_module(text)) == text
    generic = generic_form(module)
    assert '"dist.' in generic or '"coll.' in generic
    assert str(parse_module(generic)) == text
    stock = run("xdsl-opt", str(path))
    assert stock.returncode == 0, stock.stderr
    assert stock.stdout.strip() == text.strip()


def test_distir_opt_prints_the_generic_form_and_reads_it_back():
    """The same through the tool (one example: the printing is the same for all of them,
    checked in this process above): ``--print-op-generic`` and a program on stdin."""
    path = ROOT / "examples" / "megatron_attention.mlir"
    text = str(parse_module(path.read_text()))
    generic = run("distir-opt", str(path), "--print-op-generic")
    assert generic.returncode == 0, generic.stderr
    assert generic.stdout.strip() == generic_form(parse_module(text)).strip()
    back = run("distir-opt", "-", stdin=generic.stdout)
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == text.strip()
