"""Any parameter list torch.optim accepts, distir's optimizers accept, and train alike
(rank threads against torch.optim on averaged gradients): several dtypes (one arena
each), ``add_param_group`` after construction (the arenas laid out again, the state
carried over), non-contiguous parameters (their layout kept) and gradients; frozen
parameters and tied weights are in test_features.py. A misuse torch.optim rejects gets
torch's error type and message."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import torch_training as tt
from support.threads import on_threads, results

from distir.dialects.diagnostics import InputRejected
from distir.frameworks import pytorch as dp
from distir.runtime import step as steps

STEPS = 6


class Mixed(torch.nn.Module):
    """An f32 body, an f64 head and a transposed (non-contiguous) weight of its own."""

    def __init__(self):
        super().__init__()
        with tt._INIT:  # rank threads share torch's generator
            torch.manual_seed(5)
            self.body = torch.nn.Linear(8, 16)
            self.w = torch.nn.Parameter(torch.randn(16, 12).t())  # 12x16, strides (1, 12)
            self.head = torch.nn.Linear(12, 1).double()

    def forward(self, x):
        h = torch.tanh(self.body(x)) @ self.w.t()
        return self.head(torch.tanh(h).double())


def data(step: int, rank: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g, dtype=torch.float64)


def loss_of(net, step, rank):
    x, y = data(step, rank)
    return (net(x) - y).pow(2).mean()


def reference(make_opt, ranks: int, grow=None):
    """torch.optim on the ranks' averaged gradients (``grow(net, opt)`` after step 2)."""
    net = Mixed()
    opt = make_opt(net)
    for s in range(STEPS):
        if s == 3 and grow:
            grow(net, opt)
        grads = []
        for r in range(ranks):
            opt.zero_grad()
            loss_of(net, s, r).backward()
            grads.append([None if p.grad is None else p.grad.clone() for p in net.parameters()])
        for p, *gs in zip(net.parameters(), *grads):
            p.grad = None if gs[0] is None else sum(gs[1:], gs[0]) / ranks
        opt.step()
    return net, opt


def distir(make_opt, ranks: int, grow=None):
    comms = steps.local_comms(ranks)

    def rank(r):
        net = Mixed()
        opt = make_opt(net, comms[r])
        for s in range(STEPS):
            if s == 3 and grow:
                grow(net, opt)
            opt.zero_grad()
            loss_of(net, s, r).backward()
            opt.step()
        return net, opt, opt.state_dict()  # collective: on every rank's thread

    return results(on_threads(ranks, rank, timeout=120))


def test_several_dtypes_and_a_transposed_parameter():
    """An f32 and an f64 arena (one fused step each, two pipelines), the transposed
    parameter keeps its strides (as the model made it) and trains as torch's does."""
    ref, _ = reference(lambda net: torch.optim.AdamW(net.parameters(), lr=1e-2, foreach=False), 2)
    for net, opt, sd in distir(lambda net, comm: dp.AdamW(net.parameters(), lr=1e-2, comm=comm), 2):
        assert len(opt.pipelines) == 2
        assert net.w.stride() == (1, 12) and not net.w.is_contiguous()
        assert net.w.grad.stride() == (1, 12)
        tt.assert_params_close(net, ref, tol=1e-6)
        index = {id(p): i for i, p in enumerate(net.parameters())}
        assert sd["state"][index[id(net.w)]]["exp_avg"].stride() == (1, 12)  # torch's layout: zeros_like the parameter
        assert sd["state"][index[id(net.head.weight)]]["exp_avg"].dtype == torch.float64


def test_add_param_group_after_construction():
    """The head joins after 3 steps with its own lr: the arenas are laid out again, the
    body's state (and step count) carried over, as torch.optim does."""

    def make(net, comm=None):
        params = [net.body.weight, net.body.bias, net.w]
        if comm is None:
            return torch.optim.AdamW(params, lr=1e-2, foreach=False)
        return dp.AdamW(params, lr=1e-2, comm=comm)

    def grow(net, opt):
        opt.add_param_group({"params": list(net.head.parameters()), "lr": 3e-3, "weight_decay": 0.0})

    ref, ropt = reference(make, 2, grow)
    for net, opt, a in distir(make, 2, grow):
        tt.assert_params_close(net, ref, tol=1e-6)
        assert float(opt.state[net.body.weight]["step"]) == float(ropt.state[ref.body.weight]["step"]) == STEPS
        assert float(opt.state[net.head.weight]["step"]) == STEPS - 3
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in ropt.param_groups]
        b = ropt.state_dict()
        for k in b["state"]:
            torch.testing.assert_close(a["state"][k]["exp_avg_sq"], b["state"][k]["exp_avg_sq"], rtol=1e-5, atol=1e-9)


def test_a_non_contiguous_gradient_is_taken():
    """A gradient replaced by a non-contiguous tensor (torch.optim takes any layout) is
    copied into the arena."""

    def run(make, comm=None):
        with tt._INIT:
            torch.manual_seed(0)
            net = torch.nn.Linear(8, 8)
        opt = make(net.parameters()) if comm is None else make(net.parameters(), comm)
        for s in range(3):
            opt.zero_grad()
            net(torch.randn(4, 8, generator=torch.Generator().manual_seed(s))).pow(2).mean().backward()
            net.weight.grad = net.weight.grad.t().contiguous().t()
            assert not net.weight.grad.is_contiguous()
            opt.step()
        return net

    ref = run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False))
    (comm,) = steps.local_comms(1)
    net = run(lambda ps, c: dp.SGD(ps, lr=0.1, momentum=0.9, comm=c), comm)
    tt.assert_params_close(net, ref, tol=1e-7)


def _leaf():
    return torch.zeros(3, requires_grad=True)


MISUSES = {
    "empty": lambda cls, **k: cls([], **k),
    "a bare tensor": lambda cls, **k: cls(_leaf(), **k),
    "a non-leaf tensor": lambda cls, **k: cls([_leaf() * 2], **k),
    "negative lr": lambda cls, **k: cls([_leaf()], lr=-1.0, **k),
    "bad beta": lambda cls, **k: cls([_leaf()], betas=(1.5, 0.9), **k),
    "a parameter in two groups": lambda cls, **k: (lambda t: cls([{"params": [t]}, {"params": [t]}], **k))(_leaf()),
}


@pytest.mark.parametrize("misuse", list(MISUSES))
def test_a_misuse_gets_torchs_error(misuse):
    """torch's type (code that catches torch's error catches it) and message, raised on
    every rank after their agreement (so it is also InputRejected, naming the rank)."""
    make = MISUSES[misuse]
    with pytest.raises(Exception) as want:
        make(torch.optim.AdamW)
    comms = steps.local_comms(2)
    for got in on_threads(2, lambda r: make(dp.AdamW, comm=comms[r]), timeout=120):
        assert isinstance(got, type(want.value)) and isinstance(got, InputRejected), repr(got)
        assert f"rank 0: AdamW: {want.value}" in str(got) and f"rank 1: AdamW: {want.value}" in str(got)


def test_state_dict_of_a_bf16_model_loads_in_torch_and_back():
    """Half-precision parameters: ``state_dict`` adds the f32 master weights (torch's
    AdamW ignores the key and casts the moments to the parameters' dtype); loading a
    checkpoint without them starts the master weights from the parameters."""
    (comm,) = steps.local_comms(1)
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 4).to(torch.bfloat16)
    opt = dp.AdamW(net.parameters(), lr=1e-2, comm=comm)
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(2, 8, dtype=torch.bfloat16)).float().pow(2).mean().backward()
        opt.step()
    sd = opt.state_dict()
    assert sd["state"][0]["master"].dtype == torch.float32 and sd["state"][0]["exp_avg"].dtype == torch.float32
    assert torch.equal(sd["state"][0]["master"].to(torch.bfloat16), net.weight.detach())
    back = torch.optim.AdamW(net.parameters(), lr=1e-2)
    back.load_state_dict(sd)
    assert back.state[net.weight]["exp_avg"].dtype == torch.bfloat16
    again = dp.AdamW(net.parameters(), lr=1e-2, comm=comm)
    again.load_state_dict(back.state_dict())
    np.testing.assert_array_equal(again.state[net.weight]["master"].numpy(), net.weight.detach().float().reshape(-1).numpy())


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP in one process (no_dist) says so
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dcp_checkpoint_round_trip_and_into_torch(dtype, tmp_path):
    """``sharded_state_dict`` through ``torch.distributed.checkpoint`` in one process
    (the 4-to-2-rank case is in test_launchers.py): the state comes back equal, the
    transposed parameter's state in its layout, bf16 parameters with their f32 master
    weights; torch's AdamW loads the same checkpoint through DCP."""
    import torch.distributed.checkpoint as dcp

    (comm,) = steps.local_comms(1)

    def trained():
        net = Mixed()
        net.body.to(dtype)
        net.w.data = net.w.data.to(dtype)
        opt = dp.AdamW(net.parameters(), lr=1e-2, comm=comm)
        for s in range(3):
            opt.zero_grad()
            x, y = data(s, 0)
            h = torch.tanh(net.body(x.to(dtype))) @ net.w.t()
            (net.head(torch.tanh(h).double()) - y).pow(2).mean().backward()
            opt.step()
        return net, opt

    net, opt = trained()
    dcp.save({"optim": opt.sharded_state_dict()}, checkpoint_id=tmp_path / "ck", no_dist=True)
    fresh = Mixed()
    fresh.body.to(dtype)
    fresh.w.data = fresh.w.data.to(dtype)
    again = dp.AdamW(fresh.parameters(), lr=1e-2, comm=comm)
    state = {"optim": again.sharded_state_dict()}
    dcp.load(state, checkpoint_id=tmp_path / "ck", no_dist=True)
    again.load_sharded_state_dict(state["optim"])
    a, b = opt.state_dict(), again.state_dict()
    assert a["state"].keys() == b["state"].keys()
    for k, entry in a["state"].items():
        assert entry.keys() == b["state"][k].keys()
        for name, t in entry.items():
            assert torch.equal(t, b["state"][k][name]) and t.stride() == b["state"][k][name].stride(), (k, name)
    if dtype == torch.bfloat16:
        assert "master" in a["state"][0]
    ref = torch.optim.AdamW(Mixed().parameters(), lr=1e-2)
    tsd = ref.state_dict()
    tsd["state"] = {k: {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                    for k, p in enumerate(ref.param_groups[0]["params"])}
    dcp.load({"optim": tsd}, checkpoint_id=tmp_path / "ck", no_dist=True)
    for k, entry in tsd["state"].items():
        torch.testing.assert_close(entry["exp_avg"], a["state"][k]["exp_avg"].to(entry["exp_avg"].dtype), rtol=0, atol=0)
