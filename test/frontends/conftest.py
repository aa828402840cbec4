"""Shared fixtures of the front-end tests: the JAX programs, lowered and run by JAX once
per session (``jax_programs.py``, in a subprocess so that ``XLA_FLAGS`` applies)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def jax_dir(tmp_path_factory) -> Path:
    """The programs' folder, made once per test run: under pytest-xdist the workers share
    it (the first to get the lock writes it, the others wait for it)."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else tmp_path_factory.getbasetemp()
    out = shared / "jax"
    with FileLock(str(shared / "jax.lock")):
        if not (out / "done").exists():
            out.mkdir(exist_ok=True)
            proc = subprocess.run([sys.executable, str(HERE / "jax_programs.py"), str(out)], capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr
            (out / "done").write_text("")
    return out
