"""Misuse of distir's optimizers on some ranks only, as one rank of a launched job:

    torchrun --nproc-per-node 2 test/support/torch_misuse.py CASE[,CASE...]
    mpiexec -n 2 python test/support/torch_misuse.py CASE[,CASE...]

For each case in turn, each rank prints ``CASE: rank R rejected: MESSAGE`` when the
optimizer raised InputRejected (every rank must: one rank's mistake never leaves the
others waiting, and the job goes on to the next case) or ``CASE: rank R ran``."""

from __future__ import annotations

import os
import sys

import torch

from distir.dialects.diagnostics import InputRejected
from distir.examples.pytorch import train_gpt as T


def scenario(case: str, rank: int, comm) -> None:
    from distir.frameworks import pytorch as dp

    torch.manual_seed(0)
    width = 8 if case != "shapes" or rank == 0 else 9
    net = torch.nn.Sequential(torch.nn.Linear(width, 8), torch.nn.Linear(8, 1))
    opt = dp.AdamW(net.parameters(), lr=1e-3, comm=comm)
    net(torch.randn(4, width)).sum().backward()
    if case == "gradshape" and rank == 1:
        net[0].weight.grad.data = torch.zeros(4, 8)
    if case == "dtype" and rank == 0:
        net[0].bias.grad.data = net[0].bias.grad.data.double()
    opt.step()


def main(cases: str) -> int:
    if "RANK" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, comm = dist.get_rank(), None
    else:
        from mpi4py import MPI

        rank, comm = MPI.COMM_WORLD.Get_rank(), "mpi"
    for case in cases.split(","):
        try:
            scenario(case, rank, comm)
            print(f"{case}: rank {rank} ran", flush=True)
        except InputRejected as e:
            print(f"{case}: rank {rank} rejected: {e}", flush=True)
    if comm is None:
        import torch.distributed as dist

        dist.barrier()  # as train_gpt.py: no rank tears gloo down while a peer still exchanges
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    T.leave(main(sys.argv[1]))
