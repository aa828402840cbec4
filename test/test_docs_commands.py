"""Every command of the documentation runs as written.

The ```sh blocks of the pages under docs/ (as test_readme.py does for the README): each
block runs here, its commands in order, in a fresh directory that sees the repository's
``examples/`` and ``bench/``, with this interpreter's console scripts first on ``PATH``
(distir's tools through the tests' warm server: ``support/tools.py``).
Installation steps (``python -m venv``, ``. .venv/bin/activate``, ``pip install``) are
left out, as in the README's test.

A block that needs what this machine or CI's time does not give (a GPU, a launcher job
of minutes, a calibration of this machine) is preceded by a comment naming the test that
exercises its commands instead::

    <!-- docs-test: exercised by test/tuning/test_calibrate.py (a minute of measuring) -->

and this test checks that the named test exists and runs the command's tool.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import tools

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GENERATED = {"design.md"}  # a verbatim copy of the contract: its blocks are the contract's examples
INSTALL = re.compile(r"^(python3? -m venv \S+|\. \S+/bin/activate|pip install .*)$")
MARK = re.compile(r"<!-- docs-test: exercised by (?P<test>\S+)(?P<why>.*?)-->")


def blocks() -> list[tuple[str, int, list[str], str | None]]:
    """(page, block number, commands, the test that exercises them instead or None)."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        rel = str(page.relative_to(DOCS))
        if rel in GENERATED:
            continue
        text = page.read_text()
        for i, m in enumerate(re.finditer(r"(?m)^```sh\n(.*?)^```", text, re.S)):
            before = text[: m.start()].rstrip().splitlines()
            mark = MARK.search(before[-1]) if before else None
            lines = m.group(1).replace("\\\n", " ").splitlines()
            commands = [c.strip() for ln in lines if ln.strip() for c in ln.split(" && ") if not INSTALL.match(c.strip())]
            out.append((rel, i, commands, mark["test"] if mark else None))
    return out


BLOCKS = blocks()
RUN = [(p, i, cmds) for p, i, cmds, t in BLOCKS if t is None and cmds]
ELSEWHERE = [(p, i, cmds, t) for p, i, cmds, t in BLOCKS if t is not None]


def tool_of(command: str) -> str:
    """The program a command runs (``distir-tune``, ``train_gpt.py``, ``mkdocs``)."""
    words = [w for w in command.split() if not w.startswith("-")]
    for w in words:
        if w in ("mpiexec", "torchrun", "python", "python3", "bash", "nice"):
            continue
        if w.isdigit():
            continue
        return Path(w).name
    return words[0]


@pytest.mark.parametrize("page,index,commands", RUN, ids=[f"{p}#{i}" for p, i, _ in RUN])
def test_docs_block_runs(page, index, commands, tmp_path):
    for name in ("examples", "bench"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, PATH=os.pathsep.join([tools.folder(), str(Path(sys.executable).parent), os.environ.get("PATH", "")]), COLUMNS="100")
    for cmd in commands:
        r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"docs/{page} block {index}: `{cmd}` exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        assert "Traceback" not in r.stderr, r.stderr
        if "--compare" in cmd:  # the pages say what a comparison prints
            assert "results agree" in r.stdout, r.stdout


@pytest.mark.parametrize("page,index,commands,test", ELSEWHERE, ids=[f"{p}#{i}" for p, i, _, _ in ELSEWHERE])
def test_a_block_not_run_here_is_exercised_by_a_named_test(page, index, commands, test):
    path = ROOT / test
    assert path.exists(), f"docs/{page} block {index} names {test}, which does not exist"
    text = path.read_text()
    for cmd in commands:
        tool = tool_of(cmd)
        assert tool in text or tool.removesuffix(".py") in text, f"docs/{page} block {index}: {test} does not run {tool} (`{cmd}`)"


def test_the_convention_is_used():
    assert RUN and all(cmds for _, _, cmds in RUN)
    assert len({p for p, _, _ in RUN}) >= 5
