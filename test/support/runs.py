"""Runs of distir programs that tests share: one program on the ``local`` backend against
the reference interpreter, many programs on the ``mpi`` backend in one
``mpiexec`` job per rank count (``runtime/mpi_batch.py``), and the NCCL calls each rank
issues (a ``RecordingComm`` around the local backend's communicator: the calls the
``nccl`` backend makes, checked without a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from distir.dialects.context import parse_module
from distir.runtime.equivalence import compare_outputs
from distir.runtime.executor import LoweredProgram
from distir.runtime.interpreter import interpret
from distir.runtime.local import LocalBackend, LocalRunner
from distir.runtime.mpi import mpiexec_path
from distir.runtime.recording import RecordingComm

MPI_BATCH = Path(__file__).resolve().parents[1] / "runtime" / "mpi_batch.py"


def agree_on_local(module, func: str, ranks: int) -> None:
    """``func`` of ``module`` computes on the ``local`` backend what the reference
    interpreter computes (random inputs, seeded by ``ranks``)."""
    want = interpret(module, func, None, ranks, seed=ranks)
    got = LocalBackend().run(module, func, {}, ranks, seed=ranks)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message


def run_mpi_batch(jobs: list[dict], workdir: Path, one_launch: bool = False) -> dict[str, dict]:
    """Run ``jobs`` (``mpi_batch.py``'s format) in one mpiexec job per rank count (with
    ``one_launch``, in one job of the largest count, each on its first processes); the
    report by job id (an entry ``mpiexec -n N`` when a job died without one)."""
    (workdir / "jobs.json").write_text(json.dumps(jobs))
    report: dict[str, dict] = {}
    counts = sorted({j["ranks"] for j in jobs})
    for n in counts[-1:] if one_launch else counts:
        out = workdir / f"report{n}.json"
        proc = subprocess.run(
            [mpiexec_path(), "-n", str(n), sys.executable, str(MPI_BATCH), str(workdir / "jobs.json"), str(out), *(["--every"] if one_launch else [])],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if out.exists():
            report.update(json.loads(out.read_text()))
        else:
            report[f"mpiexec -n {n}"] = {"ok": False, "message": proc.stderr[-2000:]}
    return report


def record(text: str, ranks: int, func: str | None = None) -> list[list[str]]:
    """Each rank's NCCL calls, as ``str(Call)``; the recorded run's results must equal
    the interpreter's."""
    module = parse_module(text)
    program = LoweredProgram.build(module, func, ranks)
    logs: list[list] = [[] for _ in range(ranks)]
    runner = LocalRunner(program, comm_wrapper=lambda c: RecordingComm(c, logs[c.rank]))
    inputs = program.prepare_inputs({}, 0)
    try:
        runner.bind(inputs)
        got = runner.outputs(runner.step())
    finally:
        runner.close()
    c = compare_outputs(interpret(module, func, inputs, ranks, 0), got, "interpret", "recorded")
    assert c.ok, c.message
    return [[str(call) for call in log] for log in logs]
