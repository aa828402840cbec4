"""Runs several ``distir-run`` command lines in one MPI job (test helper).

    mpiexec -n 4 python test/frontends/mpi_batch.py JOBS.json REPORT.json
    python test/frontends/mpi_batch.py JOBS.json REPORT.json     # one process: 1-rank runs

``JOBS.json`` is a list of ``{"id", "argv"}``, each ``argv`` the arguments of one
``distir-run`` (``--backend mpi``); every process runs them in order with
``distir.tools.run.main``, as ``mpiexec -n 4 distir-run ARGV`` would, and rank 0 rewrites
``REPORT.json`` (``{"id": exit code}``) after each, so that a job that ends the MPI job
leaves the codes of the ones before it. One launch instead of one per program: the
processes' start-up (Python, MPI, distir's imports) is paid once.
"""

import json
import sys
from pathlib import Path

from mpi4py import MPI

from distir.tools import run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/, for support/
from support.batch_gc import one_job  # noqa: E402


def main(jobs_path: str, report_path: str) -> int:
    rank = MPI.COMM_WORLD.Get_rank()
    report: dict[str, int] = {}
    for job in json.loads(Path(jobs_path).read_text()):
        print(f"mpi_batch: job {job['id']}", file=sys.stderr, flush=True)
        with one_job():
            report[job["id"]] = run.main(job["argv"])
        if rank == 0:
            Path(report_path).write_text(json.dumps(report))
        MPI.COMM_WORLD.Barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
