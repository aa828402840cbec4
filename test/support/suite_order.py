"""The order the suite hands out its files (test/conftest.py): the slowest end-to-end
files first, longest first, so the two workers of ``-n auto --dist=loadfile
--no-loadscope-reorder`` finish together."""

from __future__ import annotations

from pathlib import Path

LONGEST = {
    "frameworks/test_launchers.py": 157,
    "frontends/test_run_mpi_jax.py": 148,
    "tuning/test_search.py": 143,
    "tuning/test_tune_cli.py": 121,
    "runtime/test_nccl_simulator.py": 106,
    "planner/test_plan_cli.py": 101,
    "runtime/test_distir_run.py": 97,
    "frontends/test_export_roundtrip.py": 97,
    "test_differential.py": 96,
    "planner/test_plan_gpt.py": 89,
    "test_docs_commands.py": 87,
    "frameworks/test_faults_launched.py": 83,
    "frontends/test_export_sdy.py": 78,
    "test_lit.py": 75,
    "runtime/test_mpi.py": 74,
    "dialects/test_examples.py": 73,
    "planner/test_plan.py": 125,
    "tuning/test_schedules.py": 65,
    "test_random_programs.py": 63,
    "frameworks/test_optimizers_threads.py": 60,
    "test_readme.py": 57,
    "runtime/test_permute.py": 47,
    "frontends/test_export_mesh.py": 46,
    "tuning/test_calibrate.py": 46,
    "test_gpu_check.py": 45,
    "lowering/test_cuda_codegen.py": 44,
    "runtime/test_uneven_workloads.py": 42,
    "tools/test_frontend_fuzz.py": 42,
    "test_pass_runnability.py": 41,
    "tools/test_cli_conformance.py": 41,
    "tools/test_pipeline_roundtrip.py": 40,
    "runtime/test_local.py": 39,
    "tuning/test_units.py": 38,
}
"""The slowest end-to-end files (launched jobs, batches of subprocesses, lit), by
seconds of a worker in a profile of the whole suite (``--durations=0``, 2026-11-28,
2 cores at load 5-9; lit's after its tools moved into a warm server): only their order
matters. ``test_suite_order.py`` checks that each
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
