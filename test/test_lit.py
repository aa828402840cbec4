"""Runs the lit/FileCheck suite (test/**/*.mlir) once and reports each file as a test.

The RUN lines' distir tools and FileCheck run in a warm server (``support/zygote.py``: each is a fork
of a process that has imported them, rather than a new Python process importing NumPy,
xDSL and distir: the suite's CPU time is mostly those imports)."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
LIT_FILES = sorted(p for p in HERE.rglob("*.mlir") if "Output" not in p.parts and "inputs" not in p.parts)


@pytest.fixture(scope="session")
def tool_server(tmp_path_factory):
    """The environment under which the distir tools' shims run in the warm server
    (``support/zygote.py``), while the session lasts."""
    from support import zygote

    work = tmp_path_factory.mktemp("tools")
    sock = work / "zygote.sock"
    server = subprocess.Popen([sys.executable, str(HERE / "support" / "zygote.py"), str(sock)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready", "the tools' test server did not start"
        yield {**os.environ, "DISTIR_ZYGOTE": str(sock), "DISTIR_TOOL_SHIMS": str(zygote.write_shims(work / "shims", BIN))}
    finally:
        server.terminate()
        server.wait()


@pytest.fixture(scope="session")
def lit_results(tmp_path_factory, tool_server):
    out = tmp_path_factory.mktemp("lit") / "results.xml"
    lit = BIN / "lit"
    cmd = [str(lit) if lit.exists() else "lit", "-q", f"-j{os.cpu_count() or 2}", "--xunit-xml-output", str(out), str(HERE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=tool_server)
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


SHIMMED_RUNS = [
    (["distir-opt", "%examples/adam.mlir", "-p", "split-allreduce,reorder-allgather"], None),
    (["distir-opt", "%examples/invalid.mlir"], None),
    (["distir-opt", "-"], 'func.func @f() { "x"() : () -> () }\n'),
    (["distir-opt", "--no-such-flag"], None),
    (["distir-import", "%examples/adam.mlir"], None),
    (["filecheck", "%examples/adam.mlir"], "no CHECK line to match\n"),
    (["filecheck", "%tests/passes/fuse-maps.mlir"], "what fuse-maps does not print\n"),
    (["filecheck", "--version"], None),
]


@pytest.mark.parametrize("argv,stdin", SHIMMED_RUNS, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_a_shimmed_tool_does_what_the_installed_tool_does(argv, stdin, tool_server, tmp_path):
    """The lit suite's shims (the tools run in the warm server) print what the installed
    tools print, on stdout and stderr, and exit as they do: what lit checks is what
    users run."""
    args = [a.replace("%examples", str(HERE.parent / "examples")).replace("%tests", str(HERE)) for a in argv[1:]]
    shim = Path(tool_server["DISTIR_TOOL_SHIMS"]) / argv[0]
    real = subprocess.run([str(BIN / argv[0]), *args], input=stdin, capture_output=True, text=True, cwd=tmp_path)
    shimmed = subprocess.run([str(shim), *args], input=stdin, capture_output=True, text=True, cwd=tmp_path, env=tool_server)
    assert (shimmed.returncode, shimmed.stdout, shimmed.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.stdout or real.stderr
