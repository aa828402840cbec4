"""The distir ``mpi`` backend's step times for the fused-operator benchmark
(``bench/fused_ops.py``). Run under ``mpiexec -n 2``; rank 0 prints JSON.

    mpiexec -n 2 python bench/baselines/mpi_fused_step.py JOBS.json

``JOBS.json``: ``{"jobs": {name: {"bulk": text, "fused": text, ...}}, "skew": {order:
text}, "reps": n}``. For each job, the bulk and fused programs run with shared memory
(MPI-3 windows: zero-copy within the node) and with messages only, round-robin; the
skew programs run with messages and report each rank's completion time.
"""

import json
import statistics
import sys
import time

from mpi4py import MPI

from distir.dialects.context import parse_module
from distir.runtime.executor import LoweredProgram
from distir.runtime.mpi import MpiRunner


def runner(text: str, shared: bool) -> MpiRunner:
    program = LoweredProgram.build(parse_module(text), None, MPI.COMM_WORLD.Get_size())
    r = MpiRunner(program, shared_memory=shared)
    r.bind(program.prepare_inputs({}, 0))
    return r


def timed(r: MpiRunner) -> float:
    world = MPI.COMM_WORLD
    world.Barrier()
    t = time.perf_counter()
    r.step()
    mine = time.perf_counter() - t
    return world.allreduce(mine, op=MPI.MAX)


def main(path: str) -> None:
    world = MPI.COMM_WORLD
    spec = json.load(open(path))
    reps = spec["reps"]
    times = {}
    for name, texts in spec["jobs"].items():
        runners = {
            "bulk": runner(texts["bulk"], True),
            "fused": runner(texts["fused"], True),
            "bulk msgs": runner(texts["bulk"], False),
            "fused msgs": runner(texts["fused"], False),
        }
        samples = {k: [] for k in runners}
        for i in range(reps + 2):
            for k, r in runners.items():
                t = timed(r)
                if i >= 2:
                    samples[k].append(t)
        times[name] = {k: {"median": statistics.median(v), "min": min(v)} for k, v in samples.items()}
        for r in runners.values():
            r.close()
    skew = {}
    runners = {order: runner(text, False) for order, text in spec["skew"].items()}
    per_rank = {order: [] for order in runners}
    for i in range(spec.get("skew_reps", reps) + 2):
        for order, r in runners.items():
            world.Barrier()
            t = time.perf_counter()
            r.step()
            mine = time.perf_counter() - t
            if i >= 2:
                per_rank[order].append(mine)
    for order, ts in per_rank.items():
        med = statistics.median(ts)
        everyone = world.gather(med, root=0)
        if world.Get_rank() == 0:
            skew[order] = {"rank_ms": [x * 1e3 for x in everyone], "skew": abs(everyone[1] - everyone[0]) / everyone[0]}
    for r in runners.values():
        r.close()
    if world.Get_rank() == 0:
        print(json.dumps({"times": times, "skew": skew}))


if __name__ == "__main__":
    main(sys.argv[1])
