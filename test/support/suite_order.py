"""The order the suite hands out its files (test/conftest.py): the slowest end-to-end
files first, longest first, so the two workers of ``-n auto --dist=loadfile
--no-loadscope-reorder`` finish together."""

from __future__ import annotations

from pathlib import Path

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


def longest_first(items: list, longest: dict[str, int], root: Path) -> None:
    """Sort the collected ``items`` (in place) so the files of ``longest`` (paths relative
    to ``root``) come first, longest first, and the others after them in the
    collection's order (a stable sort: a file's tests stay together, in order)."""
    weight: dict[Path, int] = {}

    def of(item) -> int:
        path = Path(item.path)
        if path not in weight:
            try:
                weight[path] = longest.get(path.relative_to(root).as_posix(), 0)
            except ValueError:  # a test outside root
                weight[path] = 0
        return weight[path]

    items.sort(key=lambda item: -of(item))
