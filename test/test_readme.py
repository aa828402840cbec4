"""Every command of the README runs as written.

The README's ``sh`` blocks are its commands: the quick start (install + the main job, then
the test line), the worked example and the tools' examples. Each block runs here, its
commands in order, in a fresh directory that sees the repository's ``examples/`` and
``bench/`` (so the files a command writes land there, not in the repository), with this
interpreter's console scripts first on ``PATH``. Only the installation steps and the test
line itself are left out: CI (``.ci/run``) does those, and that it runs the README's test
line verbatim is checked here too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEST_LINE = "python -m pytest -q test"
# What CI does instead of this test: create the environment, install, run the suite.
INSTALL = re.compile(r"^(python3? -m venv \S+|\. \S+/bin/activate|pip install .*)$")


def sh_blocks(text: str) -> list[list[str]]:
    """The lines of every ```sh block, in order."""
    return [[ln for ln in block.splitlines() if ln.strip()] for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)]


def runnable(line: str) -> list[str]:
    """The commands of one README line that this test runs: its ``&&``-separated steps
    less the installation steps and the test line."""
    steps = [s.strip() for s in line.split(" && ")]
    return [s for s in steps if not INSTALL.match(s) and s != TEST_LINE]


BLOCKS = sh_blocks(README.read_text())
RUNNABLE = [(i, cmds) for i, block in enumerate(BLOCKS) if (cmds := [c for ln in block for c in runnable(ln)])]


def test_quick_start_is_install_and_main_job_then_the_test_line():
    first = BLOCKS[0]
    assert len(first) == 2, first
    steps = first[0].split(" && ")
    assert [s for s in steps if INSTALL.match(s)] == steps[:-1], "line 1: the install, then the main job"
    assert "pip install -e '.[test]'" in steps, "the first install a reader sees is the CPU-only one"
    assert steps[-1].startswith("distir-tune ") and "--ranks" in steps[-1]
    assert first[1] == TEST_LINE


def test_ci_runs_the_readme_test_line_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TEST_LINE in ci
    assert any(ln.startswith("pip install") and "gpu" in ln for ln in ci), "CI keeps the gpu extra for the simulator tests"


def test_the_readme_is_a_front_door():
    assert len(README.read_text().splitlines()) <= 250


@pytest.mark.parametrize("index,commands", RUNNABLE, ids=[f"block{i}" for i, _ in RUNNABLE])
def test_readme_block_runs(index, commands, tmp_path):
    for name in ("examples", "bench"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for cmd in commands:
        r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"README block {index}: `{cmd}` exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        assert "Traceback" not in r.stderr, r.stderr
        if "--compare" in cmd:  # the README says what a comparison prints
            assert "results agree" in r.stdout, r.stdout
