"""What a tool's process imports: its ``main`` run in a fresh interpreter, as the console
script runs it, and the names of the modules loaded when it returned.

The tests that use it guard start-up by counting work rather than timing it: a package a
tool imports without needing it costs tens to hundreds of milliseconds of CPU in every
process that runs the tool (the suite starts hundreds)."""

from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = """
import json, sys
from {module} import main
sys.argv[0] = "{module}"
try:
    code = main()
except SystemExit as e:
    code = e.code
print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}), file=sys.stderr)
"""

HEAVY = frozenset({"numpy", "numba", "llvmlite", "scipy", "mpi4py", "torch", "jax", "matplotlib", "rich", "ml_dtypes"})
"""Packages none of the parser, the verifier, the passes and the printer needs."""


def imported_by(module: str, *argv: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``module``'s ``main`` on ``argv`` (it must succeed): the finished process and
    the modules it had imported."""
    r = subprocess.run([sys.executable, "-c", _SCRIPT.format(module=module), *argv], capture_output=True, text=True, timeout=120)
    report = json.loads(r.stderr.splitlines()[-1])
    assert report["code"] in (0, None), r.stderr
    return r, report["modules"]


def packages(modules: list[str]) -> set[str]:
    """The top-level packages of ``modules``."""
    return {m.split(".")[0] for m in modules}
