"""Every distir tool behaves alike at its edges (README's "Diagnostics and robustness",
docs/robustness.md): ``--help`` and ``--version`` answer with exit 0 without importing
the compiler; an unknown flag, a missing, empty or binary input, a closed or full
standard output are one-line diagnostics with exit 1; a closed pipe is a normal end
(exit 0, nothing on stderr); never a traceback, never exit 3.

Each tool runs as users run it, a subprocess of its console script, where the process
is what is tested (``--help``, ``--version``, the standard streams); the diagnostics of
its arguments and input run through the tests' warm server (``support/tools.py``: the
same ``main`` in a fork, compared with the installed tools in test_tool_server.py;
~0.3 s of CPU less per run, of some 80). A tool joins the
suite with one line in ``TOOLS``: its name, its arguments with ``{file}`` where its
input file goes, the input's suffix, and the text of a good input.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import tools
from support.fuzz import TOPOLOGY  # a two-level machine of 2 x 4 devices
from support.tool_output import without_progress

BIN = Path(sys.executable).parent

PROGRAM = """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  %s = coll.all_reduce sum %x : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return %s : !dist.tensor<8xf32, @world, [replicated]>
}
"""

ONE_DEVICE_PROGRAM = """dist.mesh @world shape = [1]
func.func @f(%x: !dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = dist.map(%x) : (!dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    %r = arith.mulf %e, %e : f32
    dist.yield %r : f32
  }
  func.return %y : !dist.tensor<8xf32, @world, [replicated]>
}
"""

SHARD_PROGRAM = """shard.grid @g(shape = 2)
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.all_reduce %x on @g grid_axes = [0] reduction = sum : tensor<8xf32> -> tensor<8xf32>
  func.return %s : tensor<8xf32>
}
"""


@dataclass(frozen=True)
class Tool:
    name: str
    args: str  # with {file} where the input goes
    suffix: str
    good: str  # the text of an input the tool accepts

    @property
    def module(self) -> str:
        """The tool's module under ``distir.tools`` (``import`` is a keyword)."""
        name = self.name.removeprefix("distir-")
        return {"import": "importer"}.get(name, name)


TOOLS = [
    Tool("distir-opt", "{file}", ".mlir", PROGRAM),
    Tool("distir-run", "{file} --ranks 2 --backend interpret", ".mlir", PROGRAM),
    Tool("distir-tune", "{file} --ranks 2 --model dgx2", ".mlir", PROGRAM),
    Tool("distir-synth", "--hierarchy 2,4 --axes 2,4 --reduce-axes 0 --topology {file}", ".toml", TOPOLOGY),
    Tool("distir-import", "{file}", ".mlir", SHARD_PROGRAM),
    Tool("distir-plan", "{file} --ranks 2 --model dgx2", ".mlir", ONE_DEVICE_PROGRAM),
]
IDS = [t.name for t in TOOLS]


def run(tool: Tool, args: list[str], stdout=subprocess.PIPE, close_stdout: bool = False, served: bool = False) -> subprocess.CompletedProcess:
    """The tool's console script on ``args`` (``served``: through the warm server)."""

    def closed() -> None:
        os.close(1)

    return subprocess.run(
        [tools.path(tool.name) if served else str(BIN / tool.name), *args], stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=300, preexec_fn=closed if close_stdout else None
    )


def argv(tool: Tool, path: Path) -> list[str]:
    return tool.args.format(file=path).split()


def one_line_diagnostic(r: subprocess.CompletedProcess, *needles: str) -> str:
    err = without_progress(r.stderr.decode("utf-8"))  # not UTF-8 (raw bytes of an input) fails here
    assert r.returncode == 1, f"exit {r.returncode}: {err}"
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    assert err.isprintable() or err[:-1].isprintable(), f"unprintable characters: {err!r}"
    for n in needles:
        assert n in err, f"{n!r} not in {err!r}"
    return err


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_help(tool):
    r = run(tool, ["--help"])
    assert r.returncode == 0 and r.stderr == b""
    assert r.stdout.decode().startswith(f"usage: {tool.name}")


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_version(tool):
    from distir.tools.diagnostics import distir_version

    r = run(tool, ["--version"])
    assert r.returncode == 0 and r.stderr == b""
    out = r.stdout.decode()
    assert out.startswith(f"{tool.name} {distir_version()}") and out.count("\n") == 1


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_unknown_flag_gets_the_closest_one(tool, tmp_path):
    good = tmp_path / f"good{tool.suffix}"
    good.write_text(tool.good)
    one_line_diagnostic(run(tool, [*argv(tool, good), "--no-such-flag"], served=True), f"{tool.name}: error: unrecognized arguments: --no-such-flag")
    # a real long option with a letter dropped from its middle
    options = sorted(set(re.findall(r"(--[a-z][a-z-]{5,})", run(tool, ["--help"], served=True).stdout.decode())) - {"--version"})
    real = options[0]
    typo = real[: len(real) // 2] + real[len(real) // 2 + 1 :]
    one_line_diagnostic(run(tool, [*argv(tool, good), typo], served=True), f"unrecognized arguments: {typo}", f"(did you mean {real}?)")


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_missing_file(tool, tmp_path):
    path = tmp_path / f"missing{tool.suffix}"
    one_line_diagnostic(run(tool, argv(tool, path), served=True), str(path))


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_empty_file(tool, tmp_path):
    path = tmp_path / f"empty{tool.suffix}"
    path.write_text("\n")
    one_line_diagnostic(run(tool, argv(tool, path), served=True), f"{path}: error: the file is empty")


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_binary_file_is_named_not_echoed(tool, tmp_path):
    path = tmp_path / f"binary{tool.suffix}"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8 + b"\x1b[2J" + b"A" * 4096)
    err = one_line_diagnostic(run(tool, argv(tool, path), served=True), f"{path}: error: the file is binary, not text")
    assert "AAAA" not in err and "ELF" not in err


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_closed_stdout(tool, tmp_path):
    path = tmp_path / f"good{tool.suffix}"
    path.write_text(tool.good)
    for args in (["--help"], argv(tool, path)):
        one_line_diagnostic(run(tool, args, close_stdout=True), f"{tool.name}: cannot write to standard output: it is closed")


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_full_device(tool, tmp_path):
    path = tmp_path / f"good{tool.suffix}"
    path.write_text(tool.good)
    with open("/dev/full", "w") as full:
        r = run(tool, argv(tool, path), stdout=full)
    one_line_diagnostic(r, f"{tool.name}: cannot write to standard output: No space left on device")


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_closed_pipe_is_a_normal_end(tool, tmp_path):
    path = tmp_path / f"good{tool.suffix}"
    path.write_text(tool.good)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the tool writes (`| head -0`)
    try:
        r = run(tool, argv(tool, path), stdout=write)
    finally:
        os.close(write)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()


@pytest.mark.parametrize("tool", TOOLS, ids=IDS)
def test_help_and_version_import_no_compiler(tool):
    # --help and --version answer at once: the tool's module and argparse only (opt's
    # --help lists the passes, which needs them).
    module = tool.module
    probe = (
        "import io, sys, contextlib\n"
        f"from distir.tools.{module} import main\n"
        "for flag in sys.argv[1:]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main([flag]) == 0\n"
        "print(sorted(m for m in ('numpy', 'xdsl', 'numba', 'scipy', 'matplotlib') if m in sys.modules))\n"
    )
    flags = ["--version"] if module == "opt" else ["--version", "--help"]
    r = subprocess.run([sys.executable, "-c", probe, *flags], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_help_texts_name_what_the_tools_accept():
    # run and synth write their choices into --help without importing the runtime
    from distir.runtime.backend import BACKENDS, default_backend_name
    from distir.synthesis.driver import DEFAULT_SIZE_LIMIT
    from distir.tools import run as run_tool
    from distir.tools import synth
    from distir.tuning.collectives import ALGORITHMS

    assert run_tool.BACKEND_NAMES == tuple(BACKENDS) and default_backend_name() == "local"
    assert synth.ALGORITHM_NAMES == tuple(ALGORITHMS) and synth.DEFAULT_SIZE_LIMIT == DEFAULT_SIZE_LIMIT


def test_unwritable_output_file(tmp_path):
    path = tmp_path / "good.mlir"
    path.write_text(PROGRAM)
    r = run(TOOLS[0], [str(path), "-o", "/nonexistent/x.mlir"])
    one_line_diagnostic(r, "distir-opt: cannot write /nonexistent/x.mlir: No such file or directory")
    one_line_diagnostic(run(TOOLS[0], [str(path), "-o", "/dev/full"]), "distir-opt: cannot write /dev/full: No space left on device")
    r = run(TOOLS[3], ["--hierarchy", "2,2", "--axes", "2,2", "--reduce-axes", "0", "--nodes", "1", "--json", "/nonexistent/x.json"])
    one_line_diagnostic(r, "distir-synth: cannot write /nonexistent/x.json: No such file or directory")


def test_list_passes_all_keeps_xdsl_pass_names_whole():
    from xdsl.transforms import get_all_passes

    r = run(TOOLS[0], ["--list-passes", "all"])
    assert r.returncode == 0
    listed = r.stdout.decode().split("xDSL's passes")[1].split(":", 1)[1]
    names = {n.strip() for n in listed.replace("\n", " ").split(",")}
    hyphenated = [n for n in get_all_passes() if "-" in n]
    assert hyphenated and all(n in names for n in hyphenated)


def test_as_slice_must_name_in_place_arguments(tmp_path):
    from distir.tools.tune import main as tune

    examples = Path(__file__).parents[2] / "examples"
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert tune([str(examples / "adam.mlir"), "--ranks", "2", "--model", "dgx2", "--as-slice", "q"]) == 1
    assert err.getvalue() == "distir-tune: --as-slice: %q is not updated in place by @adam (its in-place arguments: %p, %m, %v)\n"


@pytest.mark.parametrize("tool", [t for t in TOOLS if t.suffix == ".mlir"], ids=[t.name for t in TOOLS if t.suffix == ".mlir"])
def test_closed_standard_input(tool):
    args = tool.args.format(file="-").split()
    r = subprocess.run([str(BIN / tool.name), *args], capture_output=True, preexec_fn=lambda: os.close(0), timeout=300)
    one_line_diagnostic(r, f"{tool.name}: cannot read standard input: it is closed")
