"""Runs many programs on the ``mpi`` backend in one ``mpiexec`` job (test helper).

    mpiexec -n N python test/runtime/mpi_batch.py JOBS.json REPORT.json [--every]

``JOBS.json`` is a list of ``{"id", "text", "func", "ranks", "seed"}`` (optionally
``"shared_memory": false``: ranks exchange messages only, as across nodes); the jobs whose
``ranks`` is N run (with ``--every``, every job of at most N ranks, on the first
``ranks`` processes: one launch for all rank counts), each compared on rank 0 with the
reference interpreter; rank 0 writes
``{"id": {"ok": bool, "message": str, "paths": {...}}}`` to ``REPORT.json``, ``paths``
counting rank 0's zero-copy executions (``tiles``: fused tile operators through shared
memory; ``fused``: fused all-reduces as one zero-copy kernel) and the others.
"""

import json
import sys
from pathlib import Path

from mpi4py import MPI

from distir.dialects.context import parse_module
from distir.runtime import host, tiles
from distir.runtime.equivalence import compare_outputs
from distir.runtime.executor import LoweredProgram
from distir.runtime.interpreter import interpret
from distir.runtime.mpi import MpiRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/, for support/
from support.batch_gc import one_job  # noqa: E402

PATHS: dict[str, int] = {}


def _count(name):
    def wrap(fn):
        def spy(*args, **kwargs):
            done = fn(*args, **kwargs)
            key = f"{name} {'zero-copy' if done else 'other'}"
            PATHS[key] = PATHS.get(key, 0) + 1
            return done

        return spy

    return wrap


tiles.run_shared = _count("tiles")(tiles.run_shared)
host.HostDevice.zero_copy_fused = _count("fused")(host.HostDevice.zero_copy_fused)


def run_job(job: dict, comm, every: bool) -> dict[str, dict]:
    """The job on ``comm``; rank 0's report entry for it (the other ranks': none)."""
    module = parse_module(job["text"])
    PATHS.clear()
    try:
        program = LoweredProgram.build(module, job["func"], job["ranks"])
        runner = MpiRunner(program, shared_memory=job.get("shared_memory", True), comm=comm)
        inputs = program.prepare_inputs({}, job["seed"])
        runner.bind(inputs)
        got = runner.outputs(runner.step())
        if every:
            runner.close()
        if comm.Get_rank() == 0:
            want = interpret(module, job["func"], inputs, job["ranks"], job["seed"])
            c = compare_outputs(want, got, "interpret", "mpi")
            return {job["id"]: {"ok": c.ok, "message": c.message, "paths": dict(PATHS)}}
    except Exception as e:  # noqa: BLE001 - reported per job
        return {job["id"]: {"ok": False, "message": f"{type(e).__name__}: {e}"}}
    return {}


def main(jobs_path: str, report_path: str, every: bool = False) -> int:
    world = MPI.COMM_WORLD
    jobs = json.load(open(jobs_path))
    report = {}
    comms = {world.Get_size(): world}
    for job in jobs:
        n = job["ranks"]
        if n != world.Get_size() and not (every and n < world.Get_size()):
            continue
        if n not in comms:  # the first n processes
            comms[n] = world.Split(0 if world.Get_rank() < n else MPI.UNDEFINED, world.Get_rank())
        comm = comms[n]
        if comm == MPI.COMM_NULL:
            continue
        with one_job():
            report.update(run_job(job, comm, every))
    if world.Get_rank() == 0:
        json.dump(report, open(report_path, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--every" in sys.argv[3:]))
