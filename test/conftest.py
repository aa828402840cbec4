"""The suite's parallelism: pyproject's ``addopts`` asks pytest-xdist for ``-n auto``
with ``--dist loadfile`` (each test file runs whole on one worker, so a file's
module-scoped fixtures, such as its batched mpiexec and XLA jobs, run once).

``auto`` is one worker per usable core for a run of the suite or of folders (the
README's ``python -m pytest -q test``), and no workers (plain pytest in this process)
when the run names test files or single tests: a quick run of one file starts no worker
processes, and ``-n N`` on the command line still chooses N."""

from __future__ import annotations

import os


def pytest_xdist_auto_num_workers(config) -> int:
    named = [a for a in config.args if a.endswith((".py", ".mlir")) or "::" in a]
    if named or config.getoption("keyword") or config.getoption("markexpr"):
        return 0
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
