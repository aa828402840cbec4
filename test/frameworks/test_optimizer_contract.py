"""The ``torch.optim.Optimizer`` contract of distir's optimizers: param groups with their
own hyperparameters, lr schedulers, parameters without gradients, ``zero_grad``,
``state_dict``/``load_state_dict`` in torch's format (a checkpoint moves between distir's
AdamW and ``torch.optim.AdamW`` both ways and training continues to the same losses), and
misuse rejected with a clear error on every rank, without a hang."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import torch_training as tt
from support.threads import on_threads, results

from distir.frameworks import pytorch as dp
from distir.runtime import step as steps


@pytest.fixture(scope="module")
def corpus():
    return tt.data()


train = tt.train


def assert_same(a, b, tol=1e-5):
    a, b = np.asarray(a), np.asarray(b)
    assert (np.abs(a - b) / np.abs(b)).max() <= tol, (a, b)


@pytest.mark.parametrize(
    "make_sched",
    [
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=5, gamma=0.5),
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)),
        lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=3e-3, total_steps=20),
    ],
    ids=["StepLR", "LambdaLR", "OneCycleLR"],
)
def test_lr_schedulers_drive_the_step(make_sched, corpus):
    ref = tt.model()
    ropt = torch.optim.AdamW(tt.groups(ref, "adamw"), lr=1e-3, foreach=False)
    rsched = make_sched(ropt)
    expected = train(ref, ropt, corpus, range(20), sched=rsched)
    net = tt.model()
    opt = dp.AdamW(tt.groups(net, "adamw"), lr=1e-3)
    got = train(net, opt, corpus, range(20), sched=make_sched(opt))
    assert_same(got, expected)
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in ropt.param_groups]


def test_param_groups_keep_their_hyperparameters(corpus):
    ref = tt.model()
    params = list(ref.parameters())
    spec = lambda ps: [  # noqa: E731
        {"params": ps[:3], "lr": 2e-3, "betas": (0.8, 0.9), "weight_decay": 0.3},
        {"params": ps[3:], "eps": 1e-6},
    ]
    ropt = torch.optim.AdamW(spec(params), lr=1e-3, foreach=False)
    expected = train(ref, ropt, corpus, range(10))
    net = tt.model()
    opt = dp.AdamW(spec(list(net.parameters())), lr=1e-3)
    assert_same(train(net, opt, corpus, range(10)), expected)
    tt.assert_params_close(net, ref)


class TwoHeads(torch.nn.Module):
    """A model whose second head is used on odd steps only: its parameters have no
    gradient on even steps and torch.optim skips them (their step count lags)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.body = torch.nn.Linear(8, 8)
        self.a = torch.nn.Linear(8, 1)
        self.b = torch.nn.Linear(8, 1)

    def forward(self, x, odd):
        h = torch.tanh(self.body(x))
        return (self.b if odd else self.a)(h)


@pytest.mark.parametrize("algorithm", ["adamw", "sgd"])
def test_parameters_without_gradients_are_skipped(algorithm):
    def run(make):
        net = TwoHeads()
        opt = make(net.parameters())
        torch.manual_seed(4)
        for s in range(12):
            x = torch.randn(16, 8)
            opt.zero_grad()
            net(x, s % 3 == 1).pow(2).mean().backward()
            opt.step()
        return net, opt

    if algorithm == "adamw":
        ref, ropt = run(lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False))
        net, opt = run(lambda ps: dp.AdamW(ps, lr=1e-2))
    else:
        ref, ropt = run(lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, foreach=False))
        net, opt = run(lambda ps: dp.SGD(ps, lr=1e-2, momentum=0.9))
    tt.assert_params_close(net, ref, tol=1e-6)
    if algorithm == "adamw":
        assert float(opt.state[net.b.weight]["step"]) == float(ropt.state[ref.b.weight]["step"]) == 4


def test_zero_grad_without_none_updates_every_parameter():
    def run(make):
        net = TwoHeads()
        opt = make(net.parameters())
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
        for s in range(3):  # head b has a gradient on step 0 only: zeros after that
            opt.zero_grad(set_to_none=False)
            net(x, s == 0).pow(2).mean().backward()
            opt.step()
        return net

    ref = run(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.5, foreach=False))
    net = run(lambda ps: dp.AdamW(ps, lr=1e-2, weight_decay=0.5))
    tt.assert_params_close(net, ref, tol=1e-6)


def test_state_dict_has_torch_format(corpus):
    ref = tt.model()
    ropt = torch.optim.AdamW(tt.groups(ref, "adamw"), lr=1e-3, foreach=False)
    train(ref, ropt, corpus, range(3))
    net = tt.model()
    opt = dp.AdamW(tt.groups(net, "adamw"), lr=1e-3)
    train(net, opt, corpus, range(3))
    a, b = opt.state_dict(), ropt.state_dict()
    assert a["state"].keys() == b["state"].keys()
    for k in b["state"]:
        assert a["state"][k].keys() == b["state"][k].keys()
        for name, v in b["state"][k].items():
            assert a["state"][k][name].shape == v.shape and a["state"][k][name].dtype == v.dtype
            torch.testing.assert_close(a["state"][k][name], v, rtol=1e-5, atol=1e-7)
    assert [sorted(g) for g in a["param_groups"]] == [sorted(g) for g in b["param_groups"]]


def ddp_emulated(net, opt, corpus, steps_range, ranks):
    """DDP's averaging + a torch optimizer in one process (losses of rank 0)."""
    return [row[0] for row in tt.ddp_steps(net, opt, corpus, steps_range, ranks)]


def distir_threads(ranks, corpus, steps_range, start=None):
    """distir's AdamW on ``ranks`` threads from ``start`` (model and optimizer state dicts,
    or None); rank 0's losses, its model, and every rank's optimizer state dict."""
    comms = steps.local_comms(ranks)

    def rank(r):
        net = tt.model()
        if start is not None:
            net.load_state_dict(start[0])
        opt = dp.AdamW(tt.groups(net, "adamw"), lr=1e-3, weight_decay=0.1, comm=comms[r])
        if start is not None:
            opt.load_state_dict(start[1])
        losses = train(net, opt, corpus, steps_range, rank=r)
        return losses, net, opt.state_dict()

    return results(on_threads(ranks, rank))


def test_checkpoints_move_between_distir_and_torch(corpus):
    ranks = 2
    ref = tt.model()
    ropt = torch.optim.AdamW(tt.groups(ref, "adamw"), lr=1e-3, weight_decay=0.1, foreach=False)
    uninterrupted = ddp_emulated(ref, ropt, corpus, range(20), ranks)

    # distir for 10 steps, then torch.optim.AdamW from distir's checkpoint
    first = distir_threads(ranks, corpus, range(10))
    losses, net, sd = first[0]
    assert_same(losses, uninterrupted[:10])
    resumed = tt.model()
    resumed.load_state_dict(net.state_dict())
    topt = torch.optim.AdamW(tt.groups(resumed, "adamw"), lr=1e-3, weight_decay=0.1, foreach=False)
    topt.load_state_dict(sd)
    assert_same(ddp_emulated(resumed, topt, corpus, range(10, 20), ranks), uninterrupted[10:])

    # torch for 10 steps, then distir from torch's checkpoint
    half = tt.model()
    hopt = torch.optim.AdamW(tt.groups(half, "adamw"), lr=1e-3, weight_decay=0.1, foreach=False)
    ddp_emulated(half, hopt, corpus, range(10), ranks)
    second = distir_threads(ranks, corpus, range(10, 20), start=(half.state_dict(), hopt.state_dict()))
    for losses, net, _ in second[:1]:
        assert_same(losses, uninterrupted[10:])
    tt.assert_params_close(second[0][1], ref)


@pytest.mark.parametrize("schedule", ["ar", "auto:dgx2", "auto", "fuse-maps,split-allreduce,reorder-allgather,fuse-allreduce"])
def test_every_schedule_trains_the_same(schedule, corpus, tmp_path, monkeypatch):
    # a cache directory of its own: 'auto' on a machine without 'distir-tune --calibrate'
    # falls back to the fused schedule (sliced state), whatever this machine's cache holds
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ranks, n = 2, 12
    ref_losses, ref = tt.reference("adamw", ranks, n, corpus)
    losses, nets, opts = tt.distir_threads("adamw", ranks, n, corpus, schedule=schedule)
    assert_same(losses, ref_losses)
    tt.assert_params_close(nets[0], ref)
    state = opts[0].state_bytes()
    if schedule in ("ar", "fuse-maps,split-allreduce,reorder-allgather,fuse-allreduce"):
        assert opts[0].pipelines[0].startswith("fuse-maps") and "slice-state" not in opts[0].pipelines[0]
        assert state == opts[1].state_bytes() >= 2 * 4 * sum(p.numel() for p in ref.parameters())  # whole state
    else:
        assert "slice-state{targets=m,v" in opts[0].pipelines[0]  # the state (and the group ids of the two param groups)


def test_sgd_state_dict_moves_between_distir_and_torch(corpus):
    spec = dict(lr=0.05, momentum=0.9, dampening=0.1)
    ref = tt.model()
    ropt = torch.optim.SGD(ref.parameters(), **spec, foreach=False)
    expected = train(ref, ropt, corpus, range(8))
    half = tt.model()
    hopt = torch.optim.SGD(half.parameters(), **spec, foreach=False)
    train(half, hopt, corpus, range(4))
    net = tt.model()
    net.load_state_dict(half.state_dict())
    opt = dp.SGD(net.parameters(), **spec)
    opt.load_state_dict(hopt.state_dict())
    assert train(net, opt, corpus, range(4, 8)) == expected[4:]  # SGD is bit-exact
    sd = opt.state_dict()
    assert all(set(st) == {"momentum_buffer"} for st in sd["state"].values())  # torch's keys
    back = torch.optim.SGD(ref.parameters(), **spec, foreach=False)
    back.load_state_dict(sd)
