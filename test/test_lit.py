"""Runs the lit/FileCheck suite (test/**/*.mlir) once and reports each file as a test."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).parent
LIT_FILES = sorted(p for p in HERE.rglob("*.mlir") if "Output" not in p.parts and "inputs" not in p.parts)


@pytest.fixture(scope="session")
def lit_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("lit") / "results.xml"
    lit = Path(sys.executable).parent / "lit"
    cmd = [str(lit) if lit.exists() else "lit", "-q", f"-j{os.cpu_count() or 2}", "--xunit-xml-output", str(out), str(HERE)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    results = {}
    for case in ET.parse(out).getroot().iter("testcase"):
        # lit reports test/a/b/c.mlir as classname "distir.a.b", name "c.mlir"
        folder = case.get("classname", "").split(".", 1)[1:]
        name = "/".join([*(f.replace(".", "/") for f in folder), case.get("name", "")])
        failure = case.find("failure")
        skipped = case.find("skipped")
        results[name] = (failure.text if failure is not None else None, skipped is not None)
    return results, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", LIT_FILES, ids=lambda p: str(p.relative_to(HERE)))
def test_lit_file(path, lit_results):
    results, log = lit_results
    rel = str(path.relative_to(HERE))
    assert rel in results, f"lit did not run {rel}:\n{log}"
    failure, _skipped = results[rel]
    assert failure is None, failure
