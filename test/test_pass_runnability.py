"""A pass never makes a runnable program unrunnable (issue 20).

Random programs (``support/programs.py`` with ``free_dims``: dims of 0, 1 and primes,
which the ranks seldom divide, sliced or not: blocks of ceil(s/n), some empty) on meshes
of 1 to 8 ranks go through every registered pass
(``support/runnability.PIPELINES``); where the original runs, the transformed program
runs on the same inputs and agrees, on ``interpret`` and (fewer programs, since the
``local`` backend compiles kernels) on ``local``. A program on a ``[?]`` mesh also runs on
the other rank counts, where an unrunnable program must be a diagnostic, never an
internal error (``support/runnability.py`` says what is checked exactly).

``bench/pass_runnability.py --count N`` runs the same check on more programs.

The decode-style program of the issue (a GEMV's partial sums all-reduced: ``2x48``
over 4 ranks) is checked by name: split along dim 1, it runs wherever the original
does, on both backends, through ``distir-run``; forced along dim 0 (2 rows over 4
ranks: blocks of 1, 1, 0, 0) it runs too.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from support.programs import programs
from support.runnability import MESHES, RANK_COUNTS, check_pipelines

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline
from distir.tools.run import main as distir_run

INTERPRET_PROGRAMS = 30  # CI: well under a minute; bench/pass_runnability.py runs thousands
LOCAL_PROGRAMS = 6

SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=INTERPRET_PROGRAMS, **SETTINGS)
@given(programs(meshes=MESHES, free_dims=True))
def test_every_pass_keeps_runnable_programs_runnable(prog):
    outcome = check_pipelines(prog, backends=("interpret",))
    assert not outcome.failures, outcome.report()


@settings(max_examples=LOCAL_PROGRAMS, **SETTINGS)
@given(programs(max_ops=5, meshes=MESHES, free_dims=True))
def test_every_pass_keeps_runnable_programs_runnable_on_local(prog):
    outcome = check_pipelines(prog, backends=("interpret", "local"))
    assert not outcome.failures, outcome.report()


MPI_PROGRAMS = 8
MPI_PIPELINES = ("split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce", "split-allreduce,reorder-allgather,slice-state,fuse-allreduce", "overlap{chunks=2}", "combine-collectives")


def _uneven_programs_on_3_ranks(n: int) -> list:
    got: list = []

    @settings(max_examples=n, **SETTINGS)
    @given(programs(max_ops=5, meshes=((3,),), free_dims=True))
    def grab(prog):
        got.append(prog)

    grab()
    return got


@pytest.mark.mpi
def test_uneven_programs_and_their_transforms_run_on_mpi(tmp_path):
    """Random programs on 3 ranks whose dims are 0, 1 and primes (blocks of ceil(s/3),
    some empty), and what the pipelines make of them, in one batched mpiexec job: each
    equals the interpreter (which checks the transformed against the original)."""
    from support.runs import run_mpi_batch

    from distir.runtime import equivalent

    jobs = []
    for i, prog in enumerate(_uneven_programs_on_3_ranks(MPI_PROGRAMS)):
        jobs.append({"id": f"p{i}", "text": prog.text, "func": prog.func, "ranks": 3, "seed": 1})
        for k, pipeline in enumerate(MPI_PIPELINES):
            try:
                module = apply_pipeline(prog.module(), pipeline)
            except Exception:  # noqa: BLE001 - a refused request: nothing to run
                continue
            assert equivalent(prog.text, module, 3, trials=1, func_a=prog.func)
            jobs.append({"id": f"p{i}-{k}", "text": str(module), "func": prog.func, "ranks": 3, "seed": 1})
    report = run_mpi_batch(jobs, tmp_path)
    bad = {k: v["message"] for k, v in report.items() if not v["ok"]}
    assert not bad and len(report) == len(jobs), bad


GEMV = """dist.mesh @world shape = [?]
func.func @gemv(%x: !dist.tensor<2x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x48xf32, @world, [sliced<0>]>) -> !dist.tensor<2x48xf32, @world, [replicated]> {
  %p = dist.matmul %x, %w : (!dist.tensor<2x64xf32, @world, [sliced<1>]>, !dist.tensor<64x48xf32, @world, [sliced<0>]>) -> !dist.tensor<2x48xf32, @world, [local]>
  %y = coll.all_reduce sum %p : !dist.tensor<2x48xf32, @world, [local]> -> !dist.tensor<2x48xf32, @world, [replicated]>
  func.return %y : !dist.tensor<2x48xf32, @world, [replicated]>
}
"""
SPLIT = "split-allreduce{strategy=rs-ag}"
FUSED = "split-allreduce{strategy=rs-ag},reorder-allgather,fuse-maps,fuse-allreduce"


def _write(tmp_path, name: str, pipeline: str | None) -> str:
    module = parse_module(GEMV)
    if pipeline:
        module = apply_pipeline(module, pipeline)
    path = tmp_path / name
    path.write_text(str(module))
    return str(path)


@pytest.mark.parametrize("pipeline", [SPLIT, FUSED])
@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_gemv_runs_wherever_the_original_runs(tmp_path, capsys, pipeline, backend):
    original = _write(tmp_path, "gemv.mlir", None)
    split = _write(tmp_path, "split.mlir", pipeline)
    assert "dim 1" in open(split).read()
    for ranks in RANK_COUNTS:
        before = distir_run([original, "--ranks", str(ranks), "--backend", backend])
        after = distir_run([split, "--ranks", str(ranks), "--backend", backend, "--compare", original])
        err = capsys.readouterr().err
        assert after == before, f"{ranks} ranks: exit {after}, the original exits {before}: {err}"
        assert before == 0, err  # 64 over 3 or 6 ranks: blocks of 22, 22, 20 and 11, .., 9


@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_gemv_split_along_dim_0_runs_on_4_ranks(tmp_path, capsys, backend):
    # dim 0 of size 2 over 4 ranks: blocks of 1, 1, 0, 0 (the last ranks hold none)
    original = _write(tmp_path, "gemv.mlir", None)
    path = _write(tmp_path, "dim0.mlir", "split-allreduce{dim=0},reorder-allgather,fuse-maps,fuse-allreduce")
    code = distir_run([path, "--ranks", "4", "--backend", backend, "--compare", original])
    assert code == 0, capsys.readouterr().err
    assert distir_run([path, "--ranks", "2", "--backend", backend]) == 0


def test_lower_overlap_cuts_every_result_of_a_map_alike():
    # Found by the property test: a two-result map whose second result nothing reads,
    # in an overlapped chain, was cut along one result only (an invalid dist.map).
    t = "!dist.tensor<4xf64, @world, [{}]>"
    text = f"""dist.mesh @world shape = [2]
func.func @f(%x: {t.format("local")}) -> {t.format("replicated")} {{
  %y = coll.overlap chunks 2 -> {t.format("replicated")} {{
    %a, %b = dist.map(%x) : ({t.format("local")}) -> ({t.format("local")}, {t.format("local")}) {{
    ^bb0(%e: f64):
      %n = arith.negf %e : f64
      dist.yield %n, %e : f64, f64
    }}
    %s = coll.all_reduce sum %a : {t.format("local")} -> {t.format("replicated")}
    coll.yield %s : {t.format("replicated")}
  }}
  func.return %y : {t.format("replicated")}
}}
"""
    module = apply_pipeline(parse_module(text), "lower-overlap")
    maps = [op for op in module.walk() if op.name == "dist.map"]
    assert len(maps) == 2
    for m in maps:
        assert [r.type.get_shape() for r in m.results] == [(2,), (2,)]
    from distir.runtime import equivalent

    assert equivalent(text, module, 2, backend_a="interpret", backend_b="local")


@pytest.mark.parametrize("backend", ["interpret", "local", "mpi", "nccl"])
def test_a_rank_count_the_program_cannot_run_on_is_a_diagnostic_on_every_backend(backend):
    # 6 rows of 4 over 4 ranks are blocks of 8, 8, 8, 0 elements, 24 elements blocks of
    # 6: each rank's block does not reshape into its block of the result.
    from distir.dialects.diagnostics import InputRejected
    from distir.runtime.backend import get_backend

    if backend == "nccl":
        pytest.importorskip("nccl.core", reason="the nccl backend needs the gpu extra")
    t, r = "!dist.tensor<6x4xf32, @world, [sliced<0>]>", "!dist.tensor<24xf32, @world, [sliced<0>]>"
    module = parse_module(f"dist.mesh @world shape = [?]\nfunc.func @f(%x: {t}) -> {r} {{\n  %y = dist.reshape %x : {t} -> {r}\n  func.return %y : {r}\n}}\n")
    runner = get_backend(backend)
    start = runner.prepare if backend == "mpi" else runner.run  # mpi: this rank's part, before any communication
    with pytest.raises(InputRejected, match=r"'dist.reshape' op block 0 of dim 0 \(elements 0..8\) is not block 0 of the result's dim 0 \(elements 0..6\).*\(--ranks 4\)"):
        start(module, "f", {}, 4, 0)
