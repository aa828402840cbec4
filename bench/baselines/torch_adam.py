"""PyTorch on the CPU: 2 processes, torch.distributed (gloo) all_reduce of the gradient
and torch.optim.Adam(fused=True), one thread per process. Prints the median step time
of rank 0 (JSON).

    python bench/baselines/torch_adam.py N REPS

Memory: about 0.5 GB per worker process at N = 2^24 (estimated: p, g, m, v and the
gradient's copy). Exits at once with a message when PyTorch is not installed.
"""

import json
import multiprocessing as mp
import os
import queue
import socket
import statistics
import sys
import time


def worker(rank: int, world: int, port: int, n: int, reps: int, out) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(rank)
    p = torch.nn.Parameter(torch.rand(n))
    g = torch.rand(n)
    opt = torch.optim.Adam([p], lr=1e-3, fused=True)

    def step():
        p.grad = g.clone() if p.grad is None else p.grad.copy_(g)
        dist.all_reduce(p.grad)
        p.grad.div_(world)
        opt.step()

    times = []
    for i in range(reps + 2):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        dist.barrier()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(statistics.median(times))
    dist.destroy_process_group()


def main(n: int, reps: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, 2, port, n, reps, q)) for r in range(2)]
    for p in procs:
        p.start()
    median = None
    while median is None:
        try:
            median = q.get(timeout=1)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                sys.exit(f"a PyTorch worker failed (exit {[p.exitcode for p in procs]})")
    for p in procs:
        p.join()
    print(json.dumps({"median_s": median}))


if __name__ == "__main__":
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        sys.exit("PyTorch is not installed (pip install torch==2.13.0 for the CPU wheel)")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(int(sys.argv[1]), int(sys.argv[2]))
