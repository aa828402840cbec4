"""``python -m distir.runtime.mpi_worker JOB_DIR``: one rank of a run that the ``mpi``
backend started with ``mpiexec`` (see ``mpi.spawn``)."""

import sys

from distir.runtime.mpi import worker_main

if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1]))
