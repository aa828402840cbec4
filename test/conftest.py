"""The suite's parallelism: pyproject's ``addopts`` asks pytest-xdist for
``--numprocesses=auto`` (``-n auto``) with ``--dist=loadfile`` (each test file runs
whole on one worker, so a file's module-scoped fixtures, such as its batched mpiexec
and XLA jobs, run once) and ``--no-loadscope-reorder``: files are handed to the workers
in the order of the collection, where the longest end-to-end files (``LONGEST`` of
``support/suite_order.py``) come
first, longest first, so that the two workers finish together instead of one running
a file of two minutes alone at the end (pytest-xdist's own order is by number of
tests, which put the launched jobs and batches of a few tests last).

``auto`` is one worker per usable core for a run of the suite or of folders (the
README's ``python -m pytest -q test``), and no workers (plain pytest in this process)
when the run names test files or single tests: a quick run of one file starts no worker
processes, and ``-n N`` on the command line still chooses N. Without pytest-xdist the
long options are accepted and ignored (``pytest_addoption``).

Every MPI job the tests launch has more ranks than the cores left to it (two workers on
two cores): its ranks sleep while they wait in MPI calls rather than spin
(``runtime/mpi.py``'s ``YIELD``, set here for the jobs the tests start with ``mpiexec``
themselves; distir's own launches set it when the ranks outnumber the cores). Spinning
ranks took a third more CPU in the MPI tests.

The workers collect garbage as distir's tools do (``tools.diagnostics.collect_less``):
less often than CPython's default, which walked every program the tests hold in full
collections that freed nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.suite_order import LONGEST, longest_first

os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")  # runtime/mpi.py's YIELD

from distir.tools.diagnostics import collect_less  # noqa: E402

collect_less()  # the tests build programs in this process as the tools do (4-5% of their CPU)

pytest_plugins = ["pytester"]  # test_suite_order.py runs the ordering on a made-up suite


@pytest.fixture(scope="session", autouse=True)
def temporary_files_in_the_sessions_folder(tmp_path_factory):
    """The processes the tests start write their temporary files (``TMPDIR``) in this
    session's folder, which pytest removes with its other runs' folders: ``torchrun``
    leaves a ``torchelastic_*`` folder in the temporary folder at every launch (about
    ten per suite run in ``/tmp`` before)."""
    folder = tmp_path_factory.mktemp("tmpdir")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    yield
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before


def pytest_collection_modifyitems(session, config, items) -> None:
    longest_first(items, LONGEST, Path(__file__).parent)


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
