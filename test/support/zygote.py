"""A warm process that runs distir's command-line tools for the lit suite.

Each ``distir-opt`` of a lit RUN line starts Python and imports NumPy, xDSL and
distir's dialects (about 0.4 s of CPU) before it reads a program of a few lines
(milliseconds); the lit suite makes some 190 such processes. ``test_lit.py`` therefore
starts this server once, with those modules imported, and puts a shim of each tool
first on lit's ``PATH`` (``write_shims``). A shim is a small script that Python runs
without ``site`` (``python -S -E``, ~15 ms); it hands its command line, working
folder, environment and its standard input, output and error (the file descriptors
themselves) to the server, which forks a child that runs the tool's ``main`` exactly
as its console script does, in that folder and environment, reading and writing those
descriptors; the child sends back its exit status, which the shim exits with.

The child is a fresh copy of a process that has only imported modules: what a tool
does (its options, outputs, diagnostics, exit status, files) is what the installed
tool does. The shims are used only while ``test_lit.py`` runs lit (``DISTIR_ZYGOTE``
names the server's socket) and where a pytest test runs a tool for what it computes
(``support/tools.py``); ``lit test`` run by hand, the tests of the command lines
themselves (``test_cli_conformance.py``, signals, start-up) and users run the
installed tools. A shim that cannot reach the server (or hand it its standard
streams: a closed one) runs the installed tool.

With ``--same-environment`` (``support/tools.py``'s server) the server runs a tool only
when the shim's environment is the server's (but for ``VOLATILE``): a module imported
before the fork read its environment variables then (numba's ``NUMBA_*``, XLA's flags),
so a tool run with other variables is answered ``exec`` and the shim runs the
installed tool. The server ends when the process that started it does.

    python test/support/zygote.py SOCKET [--same-environment]     # serve until terminated
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

TOOLS = {
    "distir-opt": "distir.tools.opt",
    "distir-import": "distir.tools.importer",
    "distir-run": "distir.tools.run",
    "distir-tune": "distir.tools.tune",
    "distir-plan": "distir.tools.plan",
    "distir-synth": "distir.tools.synth",
    "filecheck": "filecheck.main",
    "xdsl-opt": "xdsl.tools.xdsl_opt",
}
"""The tools the tests run in the server, and the modules of their ``main``: distir's,
FileCheck's (``filecheck``, a Python package too: 171 of the 174 RUN lines pipe into
it, 0.07 s of CPU each to start) and stock ``xdsl-opt`` (which finds distir's dialects
through their entry points, in the server as installed; 32 runs, 0.27 s of CPU each to
start)."""

WARM = (
    "distir.tools.opt_main", "distir.tools.importer", "distir.tools.run", "filecheck.main",
    # what the tools import once they run (their own modules import these lazily): the
    # dialects and passes, the printer, the lowering, the importer's front ends, the
    # interpreter; without them every child imported them again (half of the lit
    # suite's 37 s of CPU, ~0.1 s per distir-opt); none imports numba or jax
    "distir.tools.opt", "distir.tools.universe", "distir.dialects.context", "distir.passes.support",
    "xdsl.syntax_printer", "xdsl.targets.mlir", "distir.lowering.pipeline", "distir.frontends.program",
    "distir.frontends.stablehlo", "distir.frontends.sdy", "distir.frontends.partition",
    "distir.runtime.interpreter", "distir.runtime.npz", "distir.runtime.equivalence",
    "difflib", "decimal", "fractions", "pickle", "subprocess", "psutil", "ml_dtypes", "hashlib",
    # distir-tune's, distir-plan's and distir-synth's (the planner's integer programs:
    # scipy.optimize, 0.35 s), and numba for the kernels of the local and mpi backends
    "distir.tuning.tuner", "distir.planner.plan", "distir.synthesis.synthesize_reductions", "scipy.optimize", "numba",
)
"""What the server imports before it serves: what the tools import when they start and
when they run."""

MAX_REQUEST = 1 << 20

SHIM = """#!{python} -SE
# distir's test shim for {tool} (test/support/zygote.py): runs it in the lit suite's warm server.
import json, os, socket, sys

REAL = {real!r}
request = {{"tool": {tool!r}, "argv": [{tool!r}, *sys.argv[1:]], "cwd": os.getcwd(), "env": dict(os.environ)}}
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.environ["DISTIR_ZYGOTE"])
    socket.send_fds(s, [json.dumps(request).encode()], [0, 1, 2])
    reply = s.recv(64)
except (KeyError, OSError):  # no server, or a standard stream is closed
    reply = b"exec"
if reply == b"exec":
    os.execv(REAL, [REAL, *sys.argv[1:]])
if not reply:
    sys.stderr.write("{tool}: the test server's child ended without an exit status\\n")
    sys.exit(1)
sys.exit(int(reply))
"""


def write_shims(folder: Path, bindir: Path) -> Path:
    """Write a shim of each tool of ``TOOLS`` into ``folder`` (the real tools are in
    ``bindir``); return ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        path = folder / tool
        path.write_text(SHIM.format(python=sys.executable, tool=tool, real=str(bindir / tool)))
        path.chmod(0o755)
    return folder


VOLATILE = frozenset({"PYTEST_CURRENT_TEST", "PWD", "OLDPWD", "_", "SHLVL", "PATH", "COLUMNS", "LINES", "DISTIR_ZYGOTE", "DISTIR_TOOL_SHIMS"})
"""Variables that differ from test to test or from a shell's and that nothing reads at
import (the tools read the terminal's width and look up programs when they run; the
shims read the server's socket)."""


def environment(env) -> dict[str, str]:
    """``env`` without ``VOLATILE``: what the server compares."""
    return {k: v for k, v in env.items() if k not in VOLATILE}


def serve(path: str, same_environment: bool = False) -> None:
    import importlib

    mine = environment(os.environ)  # what the tool's process would start with
    for name in WARM:
        importlib.import_module(name)
    parent = os.getppid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(64)
    server.settimeout(5)
    print("ready", flush=True)
    while True:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process ended without stopping it
                return
            continue
        conn.settimeout(None)
        try:
            message, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 3)
        except OSError:
            conn.close()
            continue
        request = json.loads(message) if message else None
        if request is not None and same_environment and environment(request["env"]) != mine:
            try:
                conn.send(b"exec")  # the shim runs the installed tool
            except OSError:
                pass
        elif len(fds) == 3 and request is not None and os.fork() == 0:
            server.close()
            _run(conn, request, fds)  # does not return
        conn.close()  # the child holds its own copies: a pipe's end closes when the tool's does
        for fd in fds:
            os.close(fd)


def _run(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: become the tool's process and run its ``main``."""
    import importlib
    import traceback

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the tool waits for its own subprocesses
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    code = 1
    try:
        result = importlib.import_module(TOOLS[request["tool"]]).main()
        code = _status(result)
    except SystemExit as e:
        code = _status(e.code)
    except BaseException:  # what Python does with an uncaught exception
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            pass
    try:
        conn.send(str(code).encode())
    finally:
        os._exit(code)


def _status(value) -> int:
    """The exit status of ``sys.exit(value)``."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


if __name__ == "__main__":
    same = "--same-environment" in sys.argv[2:]
    if not same:  # lit's: no BLAS threads in a process that forks (OpenBLAS also stops its threads at a fork)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    serve(sys.argv[1], same)
