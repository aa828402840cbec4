"""The distir tools as the tests run them for what they compute: each through its shim
in this test process's warm server (``zygote.py``), a fork of a process that has
imported the compiler, instead of a new Python importing it (0.25 s of CPU per
``distir-opt``, 0.45-0.7 s per ``distir-run`` or ``distir-plan``, for some 200 runs in
the suite).

    subprocess.run([tools.path("distir-opt"), "prog.mlir"], ...)

``path(tool)`` is the shim's path once the server runs (started at the first call,
ended with the process), the installed console script where a shim cannot serve: a
tool the server does not run, or ``DISTIR_TEST_TOOLS=installed``. The server runs a
tool only in its own environment (``--same-environment``): a run with other
variables (``env=`` of ``subprocess.run``, ``monkeypatch.setenv``) or a closed
standard stream runs the installed tool. What the tools do is what the installed
ones do (``test_lit.py`` compares their outputs); the tests of the command line
itself (``test_cli_conformance.py``, signals such as Ctrl-C, what a tool imports)
run the installed tools."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from support import zygote

BIN = Path(sys.executable).parent
_state: dict = {}


def installed(tool: str) -> str:
    """The installed console script of ``tool``."""
    return str(BIN / tool)


def path(tool: str) -> str:
    """What to run ``tool`` with: its shim in the warm server, or the installed tool. The
    server is started again when this process's environment changed since it started
    (a test module that sets ``XLA_FLAGS`` for jax, say): it serves only runs in the
    environment it started with."""
    if tool not in zygote.TOOLS or os.environ.get("DISTIR_TEST_TOOLS") == "installed":
        return installed(tool)
    env = zygote.environment(os.environ)
    if _state.get("env") != env:
        if "server" in _state:
            _stop(_state.pop("server"), _state.pop("work"))
        _start()
        _state["env"] = env
    return str(_state["shims"] / tool) if _state["shims"] is not None else installed(tool)


def folder() -> str:
    """The folder to put first on a shell's ``PATH`` for it to run the tools through the
    server (the shims'; a command the server does not run is found further on
    ``PATH``), or the installed tools' folder."""
    shim = Path(path("distir-opt"))
    return str(shim.parent)


def _start() -> None:
    work = Path(tempfile.mkdtemp(prefix="distir-tools-"))
    sock = work / "zygote.sock"
    os.environ["DISTIR_ZYGOTE"] = str(sock)  # before the server starts: its environment is the tests'
    server = subprocess.Popen([sys.executable, str(Path(zygote.__file__)), str(sock), "--same-environment"], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    if server.stdout.readline().strip() != "ready":
        server.kill()
        os.environ.pop("DISTIR_ZYGOTE", None)
        _state["shims"] = None  # the installed tools, then
        return
    _state["shims"] = zygote.write_shims(work / "shims", BIN)
    _state["server"], _state["work"] = server, work
    if not _state.get("registered"):
        atexit.register(lambda: _stop(_state.pop("server"), _state.pop("work")) if "server" in _state else None)
        _state["registered"] = True


def _stop(server: subprocess.Popen, work: Path) -> None:
    os.environ.pop("DISTIR_ZYGOTE", None)
    server.terminate()
    server.wait(timeout=30)
    shutil.rmtree(work)
