"""The tests' warm tool server (``support/tools.py``, ``support/zygote.py``): a tool run
through its shim prints, writes and exits as the installed tool does; a run in another
environment, or with a closed standard stream, is the installed tool's."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from support import tools, zygote

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"

RUNS = [
    ["distir-opt", str(EX / "adam.mlir"), "-p", "split-allreduce,reorder-allgather"],
    ["distir-opt", str(EX / "invalid.mlir")],
    ["distir-run", str(EX / "adam.mlir"), "--ranks", "2", "--backend", "interpret"],
    ["distir-run", str(EX / "adam.mlir"), "--ranks", "2", "--backend", "local", "--func", "nope"],
    ["distir-tune", str(EX / "sgd.mlir"), "--model", "dgx2", "--ranks", "4", "--sizes", "2^10,2^20"],
    ["distir-synth", "--help"],
    ["distir-import", str(ROOT / "test" / "frontends" / "sdy-collectives.mlir")],
    ["xdsl-opt", str(EX / "adam.mlir")],
]


@pytest.mark.parametrize("argv", RUNS, ids=lambda a: " ".join(Path(x).name for x in a))
def test_a_tool_through_the_server_does_what_the_installed_tool_does(argv, tmp_path):
    shimmed = subprocess.run([tools.path(argv[0]), *argv[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert tools.path(argv[0]) != tools.installed(argv[0])  # the server runs it
    real = subprocess.run([tools.installed(argv[0]), *argv[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert (shimmed.returncode, seconds(shimmed.stdout), shimmed.stderr) == (real.returncode, seconds(real.stdout), real.stderr)
    assert real.stdout or real.stderr


def seconds(text: str) -> str:
    """``text`` without the seconds it took (distir-tune says how long each phase took)."""
    return re.sub(r"\d+\.\d+ s\b", "N s", text)


def test_a_plan_through_the_server_is_the_installed_tools(tmp_path):
    # its table says how long each phase took and, past 5 s, how far it is: the program it
    # writes and its exit status are what compare
    argv = [str(ROOT / "test" / "planner" / "inputs" / "mlp_sgd.mlir"), "--ranks", "2", "--model", "p2-a100", "--nodes", "1", "--top", "1"]
    for how, exe in (("shim", tools.path("distir-plan")), ("real", tools.installed("distir-plan"))):
        r = subprocess.run([exe, *argv, "-o", f"{how}.mlir"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert r.returncode == 0 and "best plans on 2 ranks" in r.stdout, r.stderr
    assert (tmp_path / "shim.mlir").read_text() == (tmp_path / "real.mlir").read_text()


def _ask(request: dict) -> bytes:
    """Send the server a request as a shim does; its answer."""
    tools.path("distir-opt")  # started
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s, open(os.devnull, "r+b") as null:
        s.connect(os.environ["DISTIR_ZYGOTE"])
        fd = null.fileno()
        socket.send_fds(s, [json.dumps(request).encode()], [fd, fd, fd])
        return s.recv(64)


def test_another_environment_runs_the_installed_tool():
    # a module imported before the fork read its variables then: numba's NUMBA_*
    base = {"tool": "distir-opt", "argv": ["distir-opt", "--version"], "cwd": str(ROOT)}
    assert _ask({**base, "env": dict(os.environ, NUMBA_ENABLE_CUDASIM="1")}) == b"exec"
    assert _ask({**base, "env": {k: v for k, v in os.environ.items() if k != "HOME"}}) == b"exec"
    # what differs from test to test, or what the tools read only when they run, does not
    assert _ask({**base, "env": dict(os.environ, PYTEST_CURRENT_TEST="x", COLUMNS="77", PATH="/bin")}) == b"0"


def test_a_closed_standard_input_runs_the_installed_tool(tmp_path):
    args = [str(EX / "adam.mlir")]
    closed = subprocess.run([tools.path("distir-opt"), *args], capture_output=True, text=True, preexec_fn=lambda: os.close(0), timeout=120)
    real = subprocess.run([tools.installed("distir-opt"), *args], capture_output=True, text=True, timeout=120)
    assert (closed.returncode, closed.stdout, closed.stderr) == (real.returncode, real.stdout, real.stderr)


def test_the_tools_it_runs_are_the_installed_ones():
    for tool in zygote.TOOLS:
        if tool != "filecheck":
            assert Path(tools.installed(tool)).exists(), tool
