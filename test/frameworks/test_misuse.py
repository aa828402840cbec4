"""Bad use of distir's optimizers and ops gives a clear error on every rank and no hang:
parameters appended to a group's list behind the optimizer's back, a wrong-shape or
wrong-dtype gradient (on one rank only), a rank count that differs from the
communicator's, a param group whose shapes differ across ranks; in threads and in real
2-rank jobs. (What torch.optim accepts is accepted: test_parameters.py.)"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.threads import on_threads

from distir.dialects.diagnostics import InputRejected
from distir.frameworks import pytorch as dp
from distir.runtime import step as steps
from distir.runtime.mpi import mpiexec_path

ROOT = Path(__file__).resolve().parents[2]
MISUSE = ROOT / "test" / "support" / "torch_misuse.py"


def net(width: int = 8, dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, 8), torch.nn.Linear(8, 1)).to(dtype)


def on_every_rank(fn, ranks: int = 2) -> list[str]:
    """Run ``fn(rank, comm)`` on rank threads; every rank must raise InputRejected."""
    comms = steps.local_comms(ranks)
    outs = on_threads(ranks, lambda r: fn(r, comms[r]), timeout=120)
    for r, e in enumerate(outs):
        assert isinstance(e, InputRejected), f"rank {r}: {e!r}"
    return [str(e) for e in outs]


def test_parameters_appended_to_a_group_after_wrapping():
    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m[0].parameters(), comm=comm)
        opt.param_groups[0]["params"].append(m[1].weight)
        m(torch.randn(4, 8)).sum().backward()
        opt.step()

    for msg in on_every_rank(rank):
        assert "changed after wrapping: use add_param_group" in msg


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_wrong_shape_gradient_on_one_rank(bad_rank):
    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m.parameters(), comm=comm)
        m(torch.randn(4, 8)).sum().backward()
        if r == bad_rank:
            m[0].weight.grad.data = torch.zeros(4, 8)
        opt.step()

    for msg in on_every_rank(rank):
        assert f"rank {bad_rank}: parameter 0 of group 0 (shape [8, 8]): its gradient has shape [4, 8]" in msg


def test_wrong_dtype_gradient_on_one_rank():
    def rank(r, comm):
        m = net()
        opt = dp.SGD(m.parameters(), lr=0.1, momentum=0.9, comm=comm)
        m(torch.randn(4, 8)).sum().backward()
        if r == 1:
            m[0].bias.grad.data = m[0].bias.grad.data.double()
        opt.step()

    for msg in on_every_rank(rank):
        assert "rank 1: parameter 1 of group 0 (shape [8]): its gradient is torch.float64, the parameter torch.float32" in msg


def test_group_shapes_differ_across_ranks():
    def rank(r, comm):
        dp.AdamW(net(8 if r == 0 else 9).parameters(), comm=comm)

    for msg in on_every_rank(rank):
        assert "ranks [1] differ from rank 0 in their calls of the optimizer (group 0: rank 0 has 4 float32 tensors (8x8, 8, 1x8, 1), rank 1 has 4 float32 tensors (8x9, 8, 1x8, 1))" in msg


def test_rank_count_differs_from_the_communicator():
    text = (ROOT / "examples" / "transformer_decode.mlir").read_text().replace("shape = [?]", "shape = [2]")

    def rank(r, comm):
        dp.compile(text, comm=comm)

    for msg in on_every_rank(rank, ranks=4):
        assert "2" in msg and "4" in msg


LAUNCHED = [("torchrun", "gradshape"), ("torchrun", "shapes"), ("mpiexec", "dtype"), ("mpiexec", "shapes")]


@pytest.fixture(scope="module")
def launched_job():
    """launcher -> the finished 2-rank job that ran every case of ``LAUNCHED`` for that
    launcher, one after the other (one launch per launcher)."""

    @functools.cache
    def job(launcher: str) -> subprocess.CompletedProcess:
        cases = ",".join(c for a, c in LAUNCHED if a == launcher)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if launcher == "torchrun":
            cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2", str(MISUSE), cases]
        else:
            cmd = [mpiexec_path(), "-n", "2", sys.executable, str(MISUSE), cases]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)

    return job


@pytest.mark.mpi
@pytest.mark.parametrize("launcher, case", LAUNCHED, ids=[f"{a}-{b}" for a, b in LAUNCHED])
def test_misuse_in_a_launched_job(launched_job, launcher, case):
    proc = launched_job(launcher)
    assert proc.returncode == 0, "stdout:\n" + proc.stdout[-2000:] + "\nstderr:\n" + proc.stderr[-3000:]
    for r in range(2):
        assert f"{case}: rank {r} rejected: " in proc.stdout, proc.stdout


def test_gradient_missing_on_one_rank_only():
    """A parameter without a gradient on some ranks only (torch would skip it there and
    update it elsewhere): the ranks would run different steps, so every rank raises."""

    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m.parameters(), comm=comm)
        m(torch.randn(4, 8)).sum().backward()
        if r == 1:
            m[1].bias.grad = None
        opt.step()

    for msg in on_every_rank(rank):
        assert "ranks [1] differ from rank 0 in their calls of the optimizer (the parameters with gradients (and their step counts): " in msg
        assert "rank 0 has group 0 (step 0: 0-3), rank 1 has group 0 (step 0: 0-2; none: 3)" in msg


def test_a_frozen_parameter_that_gets_a_gradient():
    """A parameter frozen when the optimizer was made stays out of its arenas: a
    gradient on it later (unfrozen in place) is reported, not silently ignored."""

    def rank(r, comm):
        m = net()
        m[0].weight.requires_grad_(False)
        opt = dp.AdamW(m.parameters(), comm=comm)
        m[0].weight.requires_grad_(True)
        m(torch.randn(4, 8)).sum().backward()
        opt.step()

    for msg in on_every_rank(rank):
        assert "did not require grad when the optimizer was made, and has a gradient now" in msg and "add_param_group" in msg


def test_torchs_grad_scaler_is_refused():
    """torch.amp.GradScaler would decide on each rank's own gradients whether to skip
    the step: refused on every rank, pointing to distir's."""

    def rank(r, comm):
        m = net(dtype=torch.float16)
        opt = dp.AdamW(m.parameters(), comm=comm)
        scaler = torch.amp.GradScaler("cpu")
        scaler.scale(m(torch.randn(4, 8, dtype=torch.float16)).float().sum()).backward()
        scaler.step(opt)

    for msg in on_every_rank(rank):
        assert "use distir.frameworks.pytorch.GradScaler" in msg


def test_clipping_over_several_dtypes():
    def rank(r, comm):
        m = net()
        m[1].double()
        dp.AdamW(m.parameters(), comm=comm, clip_grad_norm=1.0)

    for msg in on_every_rank(rank):
        assert "clip_grad_norm and loss scaling need every parameter in one arena" in msg and "torch.float64" in msg


def test_a_rejected_add_param_group_leaves_the_optimizer_as_it_was():
    """A group of another dtype cannot join an optimizer that clips (one arena): every
    rank rejects it, and the optimizer goes on training as before."""

    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m[0].parameters(), comm=comm, clip_grad_norm=1.0)
        m[1].double()
        try:
            opt.add_param_group({"params": list(m[1].parameters())})
        except InputRejected as e:
            rejected = str(e)
        m[1].float()
        m(torch.randn(4, 8)).sum().backward()
        opt.step()
        return rejected, len(opt.param_groups)

    comms = steps.local_comms(2)
    for rejected, groups in on_threads(2, lambda r: rank(r, comms[r]), timeout=120):
        assert "need every parameter in one arena" in rejected and groups == 1


def test_parameters_off_the_cpu_are_refused_by_name():
    """The arenas are host memory: a parameter on another device (here torch's ``meta``
    device, as a CUDA one would be on a GPU machine) is refused at construction, naming
    it and its device, on every rank, instead of failing inside numpy."""

    def rank(r, comm):
        m = net()
        m[1].to("meta")
        dp.AdamW(m.parameters(), comm=comm)

    for msg in on_every_rank(rank):
        assert "parameter 2 of group 0 is on meta" in msg and "take CPU parameters only" in msg
