"""distir as a user installs it elsewhere: the wheel built from this checkout, installed
into a fresh virtual environment, runs every tool and the examples from another
directory, with the examples read from the installed package.

To stay cheap the fresh environment installs the wheel alone (``--no-deps --no-index``)
and sees this environment's packages (xDSL, numpy, ...) through a ``.pth`` line: a path
line adds the folder only, so this checkout's editable install (itself a ``.pth`` hook
in that folder) stays out, and ``import distir`` finds the wheel's copy.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", ".venv", "venv", ".cache", "site", "build", "dist", "*.egg-info", "__pycache__", "Output", "test", "bench", ".pytest_cache", ".hypothesis")


def run(cmd: list[str], env: dict, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout (no stale build/ of an earlier build)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-q", "-w", str(tmp / "dist"), str(src)], env, tmp)
    (whl,) = (tmp / "dist").glob("distir-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> tuple[Path, dict]:
    """A fresh virtual environment with the wheel installed; (its bin/, its environment)."""
    tmp = tmp_path_factory.mktemp("venv")
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    (purelib / "distir-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "-q", "--no-deps", "--no-index", str(wheel)], env, tmp)
    return env_dir / "bin", env


def test_the_wheel_carries_the_examples_the_licence_and_the_extras(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for f in (ROOT / "examples").rglob("*"):
        if f.is_file() and f.suffix in (".mlir", ".py") and "__pycache__" not in f.parts:
            assert f"distir/examples/{f.relative_to(ROOT / 'examples')}" in names, f
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: MIT" in meta
    for extra in ("torch", "jax"):
        assert f"Provides-Extra: {extra}" in meta


def test_each_tool_and_example_runs_from_another_directory(venv, tmp_path):
    bindir, env = venv
    py = str(bindir / "python")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([py, "-c", "import distir, distir.examples as e; print(distir.__file__); print(e.__path__[0])"], env, elsewhere).stdout.split()
    assert str(bindir.parent) in where[0], f"distir imported from {where[0]}, not the fresh environment"
    examples = Path(where[1])
    # every console script the wheel installs (a new tool is covered by itself)
    scripts = sorted(p.name for p in bindir.iterdir() if p.name.startswith("distir-"))
    assert {"distir-opt", "distir-run", "distir-tune", "distir-synth", "distir-import"} <= set(scripts)
    for s in scripts:
        assert run([str(bindir / s), "--version"], env, elsewhere).stdout.startswith(f"{s} 0.")
    run(["distir-opt", str(examples / "adam.mlir"), "-p", "split-allreduce,reorder-allgather", "-o", "adam_rs_ag.mlir"], env, elsewhere)
    out = run(["distir-run", "adam_rs_ag.mlir", "--ranks", "2", "--backend", "interpret", "--compare", str(examples / "adam.mlir")], env, elsewhere).stdout
    assert "results agree" in out
    out = run(["distir-tune", str(examples / "sgd.mlir"), "--ranks", "16", "--model", "dgx2", "--sizes", "2^20"], env, elsewhere).stdout
    assert "best: 2^20:" in out
    run(["distir-synth", "--hierarchy", "4,16", "--axes", "4,16", "--reduce-axes", "0", "--topology", "p2-a100", "--nodes", "4", "--algorithm", "tree"], env, elsewhere)
    # the papers' schedules read their programs from the installed package
    code = "from distir.tuning.schedule import PAPER_SCHEDULES\nfor ps in PAPER_SCHEDULES: ps.run()\nprint(len(PAPER_SCHEDULES))"
    assert int(run([py, "-c", code], env, elsewhere).stdout) > 5
    # a JAX example writes its program here, and distir-import reads it
    run([py, str(examples / "jax" / "tp_mlp.py"), "jax"], env, elsewhere)
    assert "coll.all_reduce" in run(["distir-import", "jax/tp_mlp.mlir"], env, elsewhere).stdout
    # the PyTorch example, one rank, two steps, on text that ships with distir
    out = run([py, str(examples / "pytorch" / "train_gpt.py"), "--layers", "1", "--width", "32", "--heads", "2", "--steps", "2"], env, elsewhere).stdout
    assert "loss" in out
    assert out.startswith("train_gpt.py: 2 steps of a 1-layer GPT (width 32) on 1 rank(s); the first step builds")  # said first


def test_without_torch_the_error_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "distir.frameworks.pytorch"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails as if it were not installed
    with pytest.raises(ModuleNotFoundError, match=r"distir.frameworks.pytorch needs torch, which is not installed: pip install 'distir\[torch\]'"):
        from distir.frameworks.pytorch import AdamW  # noqa: F401
