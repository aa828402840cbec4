"""The suite's parallelism: pyproject's ``addopts`` asks pytest-xdist for
``--numprocesses=auto`` (``-n auto``) with ``--dist=loadfile`` (each test file runs
whole on one worker, so a file's module-scoped fixtures, such as its batched mpiexec
and XLA jobs, run once) and ``--no-loadscope-reorder``: files are handed to the workers
in the order of the collection, where the longest end-to-end files (``LONGEST``) come
first, longest first, so that the two workers finish together instead of one running
a file of two minutes alone at the end (pytest-xdist's own order is by number of
tests, which put the launched jobs and batches of a few tests last).

``auto`` is one worker per usable core for a run of the suite or of folders (the
README's ``python -m pytest -q test``), and no workers (plain pytest in this process)
when the run names test files or single tests: a quick run of one file starts no worker
processes, and ``-n N`` on the command line still chooses N. Without pytest-xdist the
long options are accepted and ignored (``pytest_addoption``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]  # test_suite_order.py runs the ordering on a made-up suite


LONGEST = {
    "frameworks/test_launchers.py": 223,
    "test_lit.py": 163,
    "runtime/test_nccl_simulator.py": 147,
    "test_docs_commands.py": 138,
    "lowering/test_cuda_codegen.py": 121,
    "planner/test_plan.py": 113,
    "tuning/test_search.py": 99,
    "dialects/test_examples.py": 93,
    "tools/test_cli_conformance.py": 89,
    "frameworks/test_optimizers_threads.py": 89,
    "tuning/test_tune_cli.py": 83,
    "frontends/test_run_mpi_jax.py": 83,
    "frontends/test_export_roundtrip.py": 81,
    "frontends/test_jax_oracle.py": 80,
    "planner/test_plan_mpi.py": 73,
    "runtime/test_local.py": 73,
    "runtime/test_distir_run.py": 72,
    "tuning/test_calibrate.py": 66,
    "test_differential.py": 61,
    "planner/test_plan_gpt.py": 60,
    "frameworks/test_faults_launched.py": 57,
    "runtime/test_mpi.py": 55,
    "test_pass_runnability.py": 46,
    "runtime/test_cuda_kernels_simulator.py": 46,
    "test_readme.py": 45,
    "frontends/test_export_sdy.py": 43,
    "planner/test_plan_cli.py": 40,
    "test_random_pipelines.py": 37,
    "test_wheel.py": 36,
    "frameworks/test_custom_ops.py": 33,
    "tools/test_opt_cli.py": 31,
    "tools/test_run_mpi.py": 30,
}
"""The slowest end-to-end files (launched jobs, batches of subprocesses, lit), by
seconds of a worker in a profile of the whole suite (``--durations=0``, 2026-11-28,
2 cores at load 4): only their order matters. ``test_suite_order.py`` checks that each
still exists."""

HERE = Path(__file__).parent


def pytest_collection_modifyitems(session, config, items) -> None:
    """The files of ``LONGEST`` first, longest first; the others after them in the
    collection's order (a stable sort: a file's tests stay together, in order)."""
    weight: dict[Path, int] = {}

    def of(item) -> int:
        path = Path(item.path)
        if path not in weight:
            try:
                weight[path] = LONGEST.get(path.relative_to(HERE).as_posix(), 0)
            except ValueError:  # a test outside test/ (none today)
                weight[path] = 0
        return weight[path]

    items.sort(key=lambda item: -of(item))


def pytest_addoption(parser, pluginmanager) -> None:
    """Without pytest-xdist (an environment installed before it joined the ``test``
    extra), ``--numprocesses`` and ``--dist`` of pyproject's ``addopts`` are accepted and the suite
    runs in this process, as it did before."""
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist-absent", "without pytest-xdist: -n and --dist are accepted and ignored")
    group.addoption("--numprocesses", dest="numprocesses", default=None, help="ignored: pytest-xdist is not installed")
    group.addoption("--dist", dest="dist", default="no", help="ignored: pytest-xdist is not installed")
    group.addoption("--no-loadscope-reorder", dest="loadscopereorder", action="store_false", help="ignored: pytest-xdist is not installed")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    named = [a for a in config.args if a.endswith((".py", ".mlir")) or "::" in a]
    if named or config.getoption("keyword") or config.getoption("markexpr"):
        return 0
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
