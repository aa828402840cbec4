"""Mistakes and faults of real 2-rank training jobs under ``mpiexec`` and ``torchrun``
(``support/torch_faults.py``): the job ends on every rank within 30 s of the fault with
one message naming the rank and the cause, or the operation works; no process, no
``/dev/shm`` file and nothing in the job's temporary folder is left behind
(``docs/robustness.md``, "Training jobs").

A rank killed (SIGKILL) in the middle of a distir AdamW step is tested once per launcher
here; ``bench/faults.py`` repeats it at every kill point (``torch_faults.KILL_POINTS``),
20 times per launcher."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest
from support import torch_faults

LIMIT = 30.0


def nothing_left(out: Path) -> None:
    """No process of the job runs, none of the /dev/shm files its ranks mapped exists,
    and its temporary folder holds only torch's own folders."""
    left = torch_faults.leftovers(out)
    assert not left, left


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(launcher, cases) -> (finished job, its end time, its folder), launched once."""

    @functools.cache
    def run(launcher: str, cases: str):
        out = tmp_path_factory.mktemp(f"{launcher}-{cases.replace(':', '-').replace(',', '-')}")
        proc, end = torch_faults.launch(launcher, cases, out)
        return proc, end, out

    return run


BATCHED = {"mpiexec": "skip,state_dict", "torchrun": "skip,state_dict,init"}
"""The cases that end well, one job per launcher (DDP needs torchrun's process group)."""


@pytest.mark.mpi
@pytest.mark.parametrize("launcher", ["mpiexec", "torchrun"])
def test_the_usual_checkpoint_and_a_skipped_step(job, launcher):
    """``if rank == 0: opt.state_dict()`` works (rank 0 reads its peers' slices from the
    memory they share); a rank that skips ``optimizer.step()`` once is found at its next
    step, on every rank."""
    proc, _, out = job(launcher, BATCHED[launcher])
    assert proc.returncode == 0, "stdout:\n" + proc.stdout[-2000:] + "\nstderr:\n" + proc.stderr[-3000:]
    for r in range(2):
        assert f"state_dict: rank {r} ok" in proc.stdout
        assert (
            f"skip: rank {r} rejected: ranks [1] differ from rank 0 in their calls of the optimizer (the backward passes since the "
            "last step() (a rank that skipped step() or ran another backward): rank 0 has 1, rank 1 has 2)"
        ) in proc.stdout, proc.stdout
    nothing_left(out)


@pytest.mark.mpi
def test_ranks_start_from_rank_0s_parameters_as_under_ddp(job):
    """Each rank's model from its own seed: DDP + torch.optim.AdamW and distir's AdamW
    (which broadcasts rank 0's parameters at construction, as DDP does) train every rank
    to the same parameters, within 1e-5 of each other."""
    proc, _, out = job("torchrun", BATCHED["torchrun"])
    assert proc.returncode == 0, "stdout:\n" + proc.stdout[-2000:] + "\nstderr:\n" + proc.stderr[-3000:]
    assert "init: rank 0 ok" in proc.stdout and "init: rank 1 ok" in proc.stdout


MPI_ENDS = {
    "raise": "distir: rank 1 left the job (it raised ValueError: a bug in rank 1's training loop) while rank 0 ",
    "exit": "distir: rank 1 left the job (its script returned or called sys.exit) while rank 0 ",
}
"""The start of the one message (rank 1 may find rank 0 waiting for it, or rank 0 find
rank 1 gone: whichever comes first says it)."""


@pytest.mark.mpi
@pytest.mark.parametrize("case", sorted(MPI_ENDS))
def test_a_rank_that_leaves_ends_the_mpi_job(job, case):
    """Under mpiexec a rank that raises, or returns early, while its peer waits for it in
    a collective used to hang the job (its process waits in MPI_Finalize): the job's
    guard ends it with one message."""
    start = time.time()
    proc, end, out = job("mpiexec", case)
    assert proc.returncode != 0
    assert MPI_ENDS[case] in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("distir: rank") == 1, proc.stderr[-3000:]
    assert end - start < 120  # imports included; the hang was forever
    nothing_left(out)


KILLS = [("mpiexec", "update"), ("torchrun", "agreement")]


@pytest.mark.mpi
@pytest.mark.parametrize("launcher, point", KILLS, ids=[f"{a}-{b}" for a, b in KILLS])
def test_a_rank_killed_in_the_middle_of_a_step(job, launcher, point):
    """SIGKILL to rank 1 in the middle of an AdamW step: the launcher ends the other rank
    within 30 s and says which process died of what."""
    proc, end, out = job(launcher, f"kill:{point}")
    assert proc.returncode != 0
    killed = float((out / "killed.txt").read_text())
    assert end - killed <= LIMIT, f"the job ended {end - killed:.1f} s after the kill"
    assert torch_faults.kill_message(launcher, proc), (proc.stdout + proc.stderr)[-3000:]
    nothing_left(out)
