"""One rank of a training job with a mistake or a fault in it (``test_faults_launched.py``,
``bench/faults.py``):

    mpiexec -n 2 python test/support/torch_faults.py CASE[,CASE...] DIR
    torchrun --nproc-per-node 2 test/support/torch_faults.py CASE[,CASE...] DIR

trains a small model with distir's AdamW (over MPI under mpiexec, over the default gloo
process group under torchrun) for a few steps, with each CASE's mistake in turn:

  raise       rank 1 raises ValueError in its loop at step 2
  exit        rank 1 calls sys.exit(0) at step 2
  skip        rank 1 skips optimizer.step() at step 1; every rank prints "skip: rank R
              rejected: MESSAGE" (the next step finds it) and goes on
  state_dict  rank 0 alone takes opt.state_dict() at step 2 (the checkpoint idiom);
              every rank prints "state_dict: rank R ok" at the end
  init        each rank's model starts from its own seed; the job trains with DDP +
              torch.optim.AdamW and with distir's AdamW and every rank prints
              "init: rank R ok" when both end with the same parameters (torchrun)
  kill:K      rank 1 kills itself (SIGKILL) in the middle of step 3, at kill point K
              (``KILL_POINTS``)

Every rank writes DIR/shm-R.txt, the /dev/shm files it maps (right after the optimizer
is made; the victim of ``kill`` again just before it dies), and the victim writes
DIR/killed.txt with the time of the kill (``time.time()``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from distir.examples.pytorch import train_gpt as T

KILL_POINTS = ("agreement", "update", "broadcast", "timer")
"""Where ``kill:K`` strikes: in the step's agreement of the ranks (its first collective),
in the group's update (the fused collective), in a broadcast (a rebound parameter makes
step() broadcast rank 0's values), or at a random moment within the next 0.2 s of
training (steps, forward and backward)."""


def shm_files() -> list[str]:
    """The /dev/shm files this process maps (their names, removed or not)."""
    with open("/proc/self/maps") as f:
        fields = [line.split() for line in f]
    return sorted({x[5] for x in fields if len(x) > 5 and x[5].startswith("/dev/shm/")})


def record_shm(out: Path, rank: int) -> None:
    with open(out / f"shm-{rank}.txt", "a") as f:
        f.write("\n".join(shm_files()) + "\n")


def die(out: Path, rank: int) -> None:
    record_shm(out, rank)
    (out / "killed.txt").write_text(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)


def model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def batch(rank: int, s: int) -> torch.Tensor:
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(1000 * s + rank))


def arm_kill(point: str, out: Path, rank: int) -> None:
    """Make the next distir step on this rank die at ``point``."""
    from distir.frameworks import optimizers as core
    from distir.frameworks import pytorch as dp

    if point == "agreement":
        agree = dp.steps.agree

        def dying(comm, *args, **kwargs):
            die(out, rank)

        dp.steps.agree = dying
        del agree
    elif point == "update":
        core.ArenaGroup.run = lambda self, *a, **k: die(out, rank)
    elif point == "broadcast":
        core.ArenaGroup.broadcast_parameters = lambda self, *a, **k: die(out, rank)
    elif point == "timer":  # at a random moment of the steps that follow
        import random
        import threading

        threading.Timer(random.uniform(0.0, 0.2), die, (out, rank)).start()
    else:
        raise SystemExit(f"unknown kill point {point!r} (one of {', '.join(KILL_POINTS)})")


def main(cases: str, out: Path) -> int:
    torch.set_num_threads(1)
    if "RANK" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, comm = dist.get_rank(), None
    else:
        from mpi4py import MPI

        rank, comm = MPI.COMM_WORLD.Get_rank(), "mpi"
    for case in cases.split(","):
        if case == "init":
            init_case(rank)
        else:
            train(case, rank, comm, out)
    finish(comm)
    return 0


def train(case: str, rank: int, comm, out: Path) -> None:
    from distir.dialects.diagnostics import InputRejected
    from distir.frameworks import pytorch as dp

    net = model()
    opt = dp.AdamW(net.parameters(), lr=1e-2, comm=comm)
    record_shm(out, rank)
    kill = case.partition(":")[2] if case.startswith("kill:") else None
    alone = None
    try:
        for s in range(40 if kill else 6):
            opt.zero_grad()
            net(batch(rank, s)).pow(2).mean().backward()
            if rank == 1 and s == 2 and case == "raise":
                raise ValueError("a bug in rank 1's training loop")
            if rank == 1 and s == 2 and case == "exit":
                sys.exit(0)
            if rank == 1 and s == 3 and kill:
                arm_kill(kill, out, rank)
            if kill == "broadcast" and s == 3:  # a rebound parameter: step() broadcasts rank 0's values
                net[0].bias.data = net[0].bias.detach().clone()
            if case == "skip" and rank == 1 and s == 1:
                continue
            opt.step()
            if case == "state_dict" and rank == 0 and s == 2:
                alone = opt.state_dict()
    except InputRejected as e:
        if case != "skip":
            raise
        print(f"skip: rank {rank} rejected: {e}", flush=True)
        return
    if case == "state_dict":
        together = opt.state_dict()
        if rank == 0:
            # alone (after step 3) holds every rank's slice: none of it is left at zero
            assert all(bool((st["exp_avg_sq"] > 0).all()) for st in alone["state"].values()), "a peer's slice is missing"
            assert all(float(st["step"]) == 3 for st in alone["state"].values())
            assert all(float(st["step"]) == 6 for st in together["state"].values())
        print(f"state_dict: rank {rank} ok", flush=True)


def init_case(rank: int) -> None:
    """Ranks that start from different parameters: DDP broadcasts rank 0's at
    construction, distir too; both train to the same parameters."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from distir.frameworks import pytorch as dp

    finals = {}
    for which in ("ddp", "distir"):
        net = model(seed=rank)
        if which == "ddp":
            call, opt = DDP(net), torch.optim.AdamW(net.parameters(), lr=1e-2, foreach=False)
        else:
            call, opt = net, dp.AdamW(net.parameters(), lr=1e-2)
        for s in range(4):
            opt.zero_grad()
            call(batch(rank, s)).pow(2).mean().backward()
            opt.step()
        finals[which] = torch.nn.utils.parameters_to_vector(net.parameters()).detach().clone()
    gathered = [torch.zeros_like(finals["distir"]) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, finals["distir"])
    assert all(torch.equal(g, gathered[0]) for g in gathered), "the ranks' parameters differ"
    diff = float((finals["ddp"] - finals["distir"]).abs().max())
    assert diff <= 1e-5, f"distir and DDP differ by {diff}"
    print(f"init: rank {rank} ok", flush=True)


# ======================================================================================
# The launching side (the tests and bench/faults.py)
# ======================================================================================

TORCH_LEFTOVERS = re.compile(r"torchelastic_\w+|torchinductor_\w+")
"""What every torchrun job leaves in its temporary folder, failed or not: torchrun's log
folder and inductor's cache (torch's, not the fault's)."""


def launch(launcher: str, cases: str, out: Path, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    """Run this worker on 2 ranks under ``launcher`` with its own temporary folder
    (``out/tmp``): (the finished job, the time it ended at)."""
    from distir.runtime.mpi import mpiexec_path

    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if launcher == "torchrun":
        cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2", __file__, cases, str(out)]
    else:
        cmd = [mpiexec_path(), "-n", "2", sys.executable, __file__, cases, str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.time()


def leftovers(out: Path) -> list[str]:
    """What a finished job launched by ``launch`` left behind: its processes, the
    /dev/shm files its ranks mapped, anything but torch's own folders in its temporary
    folder."""
    import psutil

    def alive() -> list[str]:
        return [f"process {' '.join(p.info['cmdline'])}" for p in psutil.process_iter(["cmdline", "status"])
                if p.pid != os.getpid() and p.info["status"] != psutil.STATUS_ZOMBIE and str(out) in " ".join(p.info["cmdline"] or [])]

    deadline = time.monotonic() + 10  # a rank the launcher killed may take a moment to go
    found = alive()
    while found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = alive()
    mapped = {line.strip() for f in out.glob("shm-*.txt") for line in f.read_text().splitlines() if line.strip()}
    if not mapped:
        found.append("(the ranks recorded no /dev/shm file)")
    found += [f"file {name}" for name in sorted(mapped) if os.path.exists(name)]
    found += [f"file {p}" for p in (out / "tmp").iterdir() if not TORCH_LEFTOVERS.fullmatch(p.name)]
    return found


def kill_message(launcher: str, proc: subprocess.CompletedProcess) -> bool:
    """Whether the launcher said which rank (mpiexec: which process) died of SIGKILL."""
    if launcher == "mpiexec":
        return "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)" in proc.stdout + proc.stderr
    return re.search(r"rank\s*: 1 \(local_rank: 1\)\s+exitcode\s*: -9", proc.stderr) is not None


def finish(comm) -> None:
    if comm is None:
        import torch.distributed as dist

        dist.barrier()  # no rank tears gloo down while a peer still exchanges
        dist.destroy_process_group()


if __name__ == "__main__":
    T.leave(main(sys.argv[1], Path(sys.argv[2])))
