"""The distir ``mpi`` backend's step time for each Adam schedule. Run under
``mpiexec -n 2``; rank 0 prints ``{schedule: median seconds}`` (JSON).

    mpiexec -n 2 python bench/baselines/mpi_step.py N REPS

Memory: about 0.8 GB per process at N = 2^24.
"""

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ADAM_SCHEDULES, adam_text, schedule  # noqa: E402
from mpi4py import MPI  # noqa: E402

from distir.dialects.context import parse_module  # noqa: E402
from distir.runtime.executor import LoweredProgram  # noqa: E402
from distir.runtime.mpi import MpiRunner  # noqa: E402


def main(n: int, reps: int) -> None:
    world = MPI.COMM_WORLD
    out = {}
    for name, pipeline in ADAM_SCHEDULES.items():
        program = LoweredProgram.build(parse_module(schedule(adam_text(n), pipeline)), None, world.Get_size())
        runner = MpiRunner(program)
        runner.bind(program.prepare_inputs({}, 0))
        times = []
        for i in range(reps + 2):
            world.Barrier()
            t0 = time.perf_counter()
            runner.step()
            world.Barrier()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    if world.Get_rank() == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
