"""Shared fixtures of the front-end tests: the JAX programs, lowered and run by JAX once
per session (``jax_programs.py``, in a subprocess so that ``XLA_FLAGS`` applies)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def jax_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("jax")
    proc = subprocess.run([sys.executable, str(HERE / "jax_programs.py"), str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out
