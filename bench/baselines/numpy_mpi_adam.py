"""The Adam step users write today: mpi4py Allreduce of the gradient, then Adam in plain
numpy. Run under ``mpiexec -n 2``; rank 0 prints the median step time (JSON).

    mpiexec -n 2 python bench/baselines/numpy_mpi_adam.py N REPS

Memory: about 0.7 GB per process at N = 2^24.
"""

import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI


def main(n: int, reps: int) -> None:
    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    rng = np.random.default_rng(comm.Get_rank())
    g = rng.random(n, dtype=np.float32)
    p, m, v = (rng.random(n, dtype=np.float32) for _ in range(3))
    avg = np.empty_like(g)
    lr, b1, b2, eps, t = 1e-3, 0.9, 0.999, 1e-8, 3.0

    def step():
        comm.Allreduce(g, avg, op=MPI.SUM)
        np.divide(avg, size, out=avg)
        m[:] = b1 * m + (1 - b1) * avg
        v[:] = b2 * v + (1 - b2) * avg * avg
        mhat = m / (1 - b1**t)
        vhat = v / (1 - b2**t)
        p[:] = p - lr * mhat / (np.sqrt(vhat) + eps)

    times = []
    for i in range(reps + 2):
        comm.Barrier()
        t0 = time.perf_counter()
        step()
        comm.Barrier()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    if comm.Get_rank() == 0:
        print(json.dumps({"median_s": statistics.median(times)}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
