"""Shared fixtures of the front-end tests: the JAX programs, lowered and run by JAX once
(``jax_programs.py``, in a subprocess so that ``XLA_FLAGS`` applies).

JAX's files depend only on the sources that make them (``SOURCES``) and on the versions
of JAX, jaxlib and numpy: they are kept in the user's cache folder
(``~/.cache/distir/test-jax/KEY``, ``platformdirs``), KEY a hash of all of those, and a
later run with the same sources and versions copies them instead of running JAX again
(about 30 s of CPU). Any change to a source or a version makes another KEY; set
``DISTIR_TEST_JAX_CACHE=0`` to run JAX every time."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SOURCES = (HERE / "jax_programs.py", HERE / "jax_constructs.py", HERE.parents[1] / "examples" / "jax" / "gpt_step.py")
"""What ``jax_programs.py`` runs: itself, the constructs it adds, the GPT step it imports."""


def cache_key() -> str:
    h = hashlib.sha256()
    for path in SOURCES:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in ("jax", "jaxlib", "numpy"):
        try:
            h.update(f"{dist}={metadata.version(dist)}\0".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none\0".encode())
    return h.hexdigest()[:20]


def cached_folder() -> Path | None:
    """Where this key's files are kept, or None when the cache is off."""
    if os.environ.get("DISTIR_TEST_JAX_CACHE", "1") == "0":
        return None
    import platformdirs

    return Path(platformdirs.user_cache_dir("distir")) / "test-jax" / cache_key()


@pytest.fixture(scope="session")
def jax_dir(tmp_path_factory) -> Path:
    """The programs' folder, made once per test run: under pytest-xdist the workers share
    it (the first to get the lock writes it, the others wait for it)."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else tmp_path_factory.getbasetemp()
    out = shared / "jax"
    with FileLock(str(shared / "jax.lock")):
        if not (out / "done").exists():
            kept = cached_folder()
            if kept is not None and (kept / "done").exists():
                shutil.copytree(kept, out, dirs_exist_ok=True)
                return out
            out.mkdir(exist_ok=True)
            proc = subprocess.run([sys.executable, str(HERE / "jax_programs.py"), str(out)], capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr
            (out / "done").write_text("")
            if kept is not None:
                staging = kept.with_name(kept.name + f".{os.getpid()}")
                shutil.copytree(out, staging, dirs_exist_ok=True)
                try:
                    staging.rename(kept)  # whole or not at all: another run may be writing it too
                except OSError:
                    shutil.rmtree(staging, ignore_errors=True)
    return out
