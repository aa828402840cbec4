"""Mistakes of training scripts on rank threads (``local_comms``): each ends on every rank
with one message naming the rank and the cause, within 30 s, or works as ``torch.optim``
and DDP do (``docs/robustness.md``, "Training jobs"). The launched jobs (mpiexec,
torchrun) are in ``test_faults_launched.py``."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from support import torch_training as tt
from support.threads import on_threads, results

from distir.dialects.diagnostics import InputRejected
from distir.frameworks import pytorch as dp
from distir.runtime import step as steps
from distir.runtime.comm import CommError

LIMIT = 30.0
"""Seconds within which every rank of a failing job must have stopped."""


def net(seed: int = 0, width: int = 8):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(width, 8), torch.nn.Linear(8, 1))


def batch(r: int, s: int = 0):
    g = torch.Generator().manual_seed(100 * s + r)
    return torch.randn(4, 8, generator=g)


def every_rank_stops(fn, ranks: int = 2) -> list[BaseException]:
    """Run ``fn(rank, comm)`` on rank threads: every rank must raise within ``LIMIT``."""
    comms = steps.local_comms(ranks)
    start = time.monotonic()
    outs = on_threads(ranks, lambda r: fn(r, comms[r]), timeout=LIMIT + 30)
    assert time.monotonic() - start <= LIMIT, f"the ranks took {time.monotonic() - start:.1f} s to stop"
    for r, e in enumerate(outs):
        assert isinstance(e, BaseException), f"rank {r} did not stop: {e!r}"
    return outs


def rejected_everywhere(fn, ranks: int = 2) -> list[str]:
    outs = every_rank_stops(fn, ranks)
    for r, e in enumerate(outs):
        assert isinstance(e, InputRejected), f"rank {r}: {e!r}"
    assert len({str(e) for e in outs}) == 1, outs  # one message, the same on every rank
    return [str(e) for e in outs]


# ---------------------------------------------------------------------------- hangs


def test_an_exception_on_one_rank_thread_stops_its_peers():
    """Rank 1 raises between two steps (a bug in the script): rank 0, waiting for it in
    the next step, raises CommError naming rank 1."""

    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m.parameters(), comm=comm)
        for s in range(3):
            opt.zero_grad()
            m(batch(r, s)).sum().backward()
            if r == 1 and s == 1:
                raise ValueError("a bug in rank 1's loop")
            opt.step()

    outs = every_rank_stops(rank)
    assert isinstance(outs[1], ValueError)
    assert isinstance(outs[0], CommError) and "rank 1 stopped (its thread ended) while rank 0 waited for it" in str(outs[0])


def test_add_param_group_on_one_rank_stops_its_peers():
    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m[0].parameters(), comm=comm)
        if r == 1:
            opt.add_param_group({"params": list(m[1].parameters())})
        m(batch(r)).sum().backward()
        opt.step()

    outs = every_rank_stops(rank)
    assert "rank 1" in str(outs[0]), outs


def test_a_wait_longer_than_the_timeout_gives_up():
    comms = steps.local_comms(2, timeout=0.5)

    def rank(r):
        if r == 1:
            time.sleep(3)  # alive, but not in the collective
            return "late"
        a = np.ones(4)
        comms[0].all_reduce(a, a, 4, "sum", steps.SyncStream(0))

    outs = on_threads(2, rank, timeout=30)
    assert isinstance(outs[0], CommError) and "rank 0 waited 0.5 s in a collective for its peers and gave up" in str(outs[0])


def test_one_rank_skipping_step_is_found_at_its_next_step():
    """Rank 1 skips ``optimizer.step()`` once: its next step would pair with rank 0's
    previous one. The ranks count the backward passes since the last step."""

    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m.parameters(), comm=comm)
        for s in range(4):
            opt.zero_grad()
            m(batch(r, s)).sum().backward()
            if not (r == 1 and s == 1):
                opt.step()

    msg = rejected_everywhere(rank)[0]
    assert "the backward passes since the last step() (a rank that skipped step() or ran another backward): rank 0 has 1, rank 1 has 2" in msg


@pytest.mark.parametrize("case", ["frozen", "sparse"])
def test_a_parameter_frozen_or_sparse_on_one_rank(case):
    def rank(r, comm):
        m = torch.nn.Sequential(torch.nn.Embedding(10, 8, sparse=case == "sparse" and r == 1), torch.nn.Linear(8, 1))
        if case == "frozen" and r == 1:
            m[1].bias.requires_grad_(False)
        opt = dp.AdamW(m.parameters(), comm=comm)
        m(torch.tensor([1, 2, 3])).sum().backward()
        opt.step()

    msg = rejected_everywhere(rank)[0]
    if case == "frozen":
        assert "group 0: rank 0 has 3 float32 tensors (10x8, 1x8, 1), rank 1 has 3 float32 tensors (10x8, 1x8, 1 frozen)" in msg
    else:
        assert "rank 1: parameter 0 of group 0 (shape [10, 8]): its gradient is sparse (torch.sparse_coo)" in msg


def test_sparse_gradients_are_rejected_on_every_rank():
    def rank(r, comm):
        m = torch.nn.Embedding(10, 8, sparse=True)
        opt = dp.SGD(m.parameters(), lr=0.1, comm=comm)
        m(torch.tensor([1, 2])).sum().backward()  # no error inside backward
        opt.step()

    msg = rejected_everywhere(rank)[0]
    assert msg.startswith("rank 0: parameter 0 of group 0 (shape [10, 8]): its gradient is sparse") and "; rank 1: " in msg


def test_a_bf16_tensor_to_a_compiled_op_on_one_rank():
    from support import torch_ops

    def rank(r, comm):
        f = dp.compile(torch_ops.decode_program(), pipeline=torch_ops.DECODE_PIPELINE, comm=comm)
        args = list(torch_ops.shards(r, 2)[1])
        if r == 0:
            args[0] = args[0].to(torch.bfloat16)
        f(*args)

    msg = rejected_everywhere(rank)[0]
    assert msg.startswith("rank 0: argument ") and "got a torch torch.bfloat16 tensor on cpu" in msg


def test_state_dict_on_one_rank_alone():
    """The usual checkpoint idiom (``if rank == 0: torch.save(opt.state_dict())``) works:
    rank 0 reads its peers' state slices from the memory they share."""
    comms = steps.local_comms(2)
    corpus = tt.data()

    def rank(r):
        m = tt.model()
        opt = dp.AdamW(tt.groups(m, "adamw"), lr=1e-3, comm=comms[r])
        tt.train(m, opt, corpus, range(3), rank=r)
        alone = opt.state_dict() if r == 0 else None
        tt.train(m, opt, corpus, range(3, 4), rank=r)  # rank 1 went on meanwhile
        return alone, opt

    (alone, _), _ = results(on_threads(2, rank, timeout=120))
    ref = tt.model()
    ropt = torch.optim.AdamW(tt.groups(ref, "adamw"), lr=1e-3, foreach=False)
    tt.ddp_steps(ref, ropt, corpus, range(3), 2)
    expected = ropt.state_dict()["state"]
    assert alone["state"].keys() == expected.keys()
    for k, st in expected.items():
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(alone["state"][k][name], st[name], rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------- silent divergence


def test_ranks_must_agree_on_the_schedule():
    def rank(r, comm):
        dp.AdamW(net().parameters(), comm=comm, schedule="fused" if r == 0 else "ar")

    msg = rejected_everywhere(rank)[0]
    assert "ranks [1] differ from rank 0 in their calls of the optimizer (schedule=: rank 0 has 'fused', rank 1 has 'ar')" in msg


def test_ranks_must_agree_on_the_hyperparameters():
    def rank(r, comm):
        dp.AdamW(net().parameters(), lr=1e-3 * (1 + r), comm=comm)

    assert "group 0 options: rank 0 has amsgrad=False, betas=(0.9, 0.999), " in rejected_everywhere(rank)[0]


def test_a_learning_rate_changed_on_one_rank_is_found_at_step():
    def rank(r, comm):
        m = net()
        opt = dp.SGD(m.parameters(), lr=0.1, comm=comm)
        if r == 1:
            opt.param_groups[0]["lr"] = 0.2
        m(batch(r)).sum().backward()
        opt.step()

    assert "the hyperparameters: rank 0 has dampening=0.0, " in rejected_everywhere(rank)[0]


def test_ranks_start_from_rank_0s_parameters_as_under_ddp():
    """Models initialised differently on each rank: distir broadcasts rank 0's
    parameters at construction, as DDP does; training then equals DDP + torch.optim from
    rank 0's model (``tt.ddp_steps``)."""
    corpus = tt.data()
    comms = steps.local_comms(2)

    def rank(r):
        with tt._INIT:
            torch.manual_seed(r)  # a different model on each rank
            m = tt.T.GPT(**tt.TINY)
        opt = dp.AdamW(tt.groups(m, "adamw"), lr=1e-3, comm=comms[r])
        return tt.train(m, opt, corpus, range(5), rank=r), m

    out = results(on_threads(2, rank, timeout=120))
    with tt._INIT:
        torch.manual_seed(0)
        ref = tt.T.GPT(**tt.TINY)
    ropt = torch.optim.AdamW(tt.groups(ref, "adamw"), lr=1e-3, foreach=False)
    expected = np.array(tt.ddp_steps(ref, ropt, corpus, range(5), 2))
    for r, (losses, m) in enumerate(out):
        np.testing.assert_allclose(losses, expected[:, r], rtol=1e-5)
        tt.assert_params_close(m, ref)


def test_parameters_rebound_after_construction_keep_training_as_in_torch():
    """``vector_to_parameters`` (``p.data = ...``) after the optimizer was made: the new
    tensors are adopted at the next step (their values move into the arena) and training
    goes on as ``torch.optim``'s does on the rebound parameters."""
    corpus = tt.data()
    comms = steps.local_comms(2)

    def run(make_opt, ddp, rank=0):
        m = tt.model()
        opt = make_opt(m)
        step = (lambda s: tt.ddp_steps(m, opt, corpus, range(s, s + 1), 2)[0][0]) if ddp else (
            lambda s: tt.train(m, opt, corpus, range(s, s + 1), rank=rank)[0])
        losses = [step(s) for s in range(3)]
        flat = torch.nn.utils.parameters_to_vector(m.parameters()).detach()
        torch.nn.utils.vector_to_parameters(flat * 0.5, m.parameters())
        losses += [step(s) for s in range(3, 6)]
        return losses, m

    ref_losses, ref = run(lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=False), ddp=True)
    out = results(on_threads(2, lambda r: run(lambda m: dp.AdamW(m.parameters(), lr=1e-3, comm=comms[r]), False, r), timeout=120))
    np.testing.assert_allclose(out[0][0], ref_losses, rtol=1e-5)
    for _, m in out:
        tt.assert_params_close(m, ref)


def test_a_parameter_rebound_on_one_rank_only():
    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m.parameters(), comm=comm)
        if r == 1:
            m[0].weight.data = torch.zeros(8, 8)
        m(batch(r)).sum().backward()
        opt.step()

    msg = rejected_everywhere(rank)[0]
    assert "the parameters rebound since the last step(): rank 0 has [], rank 1 has [(0, 0)]" in msg


@pytest.mark.parametrize("new, what", [(torch.zeros(2), "torch.float32 tensor of shape [2]"), (torch.zeros(1, dtype=torch.float64), "torch.float64 tensor of shape [1]")])
def test_a_parameter_rebound_to_another_shape_or_dtype(new, what):
    def rank(r, comm):
        m = net()
        opt = dp.AdamW(m.parameters(), comm=comm)
        m[1].bias.data = new.clone()
        opt.step()

    assert f"parameter 3 of group 0 (shape [1]) was rebound after the optimizer was made to a torch.strided {what}" in rejected_everywhere(rank)[0]


@pytest.mark.parametrize("flag", ["maximize", "amsgrad", "capturable", "differentiable"])
def test_torch_flags_distir_does_not_implement_are_refused(flag):
    """torch.optim.AdamW(maximize=True) climbs the loss; distir's AdamW would descend: it
    refuses the flag (at construction and in a loaded state dict) instead of ignoring
    it."""
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    ref = torch.optim.AdamW([p], lr=0.1, foreach=False, **{flag: True})
    if flag == "maximize":
        ref.step()
        assert (p.detach() > 1).all()  # torch went up the gradient

    def build(r, comm):
        dp.AdamW(net().parameters(), comm=comm, **{flag: True})

    assert f"AdamW: group 0: {flag}=True is not supported" in rejected_everywhere(build)[0]

    def load(r, comm):
        m = net()
        opt = dp.AdamW(m.parameters(), comm=comm)
        sd = torch.optim.AdamW(net().parameters(), foreach=False, **{flag: True}).state_dict()
        opt.load_state_dict(sd)

    assert f"AdamW.load_state_dict: group 0 of the state dict: {flag}=True is not supported" in rejected_everywhere(load)[0]


def test_a_flag_set_on_one_rank_only():
    def rank(r, comm):
        dp.SGD(net().parameters(), lr=0.1, comm=comm, maximize=r == 1)

    msg = rejected_everywhere(rank)[0]
    assert msg.startswith("rank 1: SGD: group 0: maximize=True is not supported")


def test_another_models_state_is_refused_on_every_rank():
    other = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 1))
    ropt = torch.optim.AdamW(other.parameters(), foreach=False)
    other(torch.randn(2, 8)).sum().backward()
    ropt.step()
    sd = ropt.state_dict()

    def rank(r, comm):
        dp.AdamW(net().parameters(), comm=comm).load_state_dict(sd)

    msg = rejected_everywhere(rank)[0]
    assert "'exp_avg' of parameter 0 of group 0 has 48 elements in the state dict, the parameter 64 (shape [8, 8]): it is another model's state" in msg


def test_another_optimizers_state_is_refused():
    m = net()
    ropt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, foreach=False)
    m(torch.randn(2, 8)).sum().backward()
    ropt.step()

    def rank(r, comm):
        dp.AdamW(net().parameters(), comm=comm).load_state_dict(ropt.state_dict())

    assert "parameter 0 of group 0 has state ['momentum_buffer'] in the state dict: it is another optimizer's state" in rejected_everywhere(rank)[0]


def test_the_same_parameter_twice_in_a_group():
    """torch.optim warns (and updates such a parameter twice per step); distir refuses."""
    m = net()
    with pytest.warns(UserWarning, match="duplicate parameters"):
        torch.optim.AdamW([m[0].weight, m[0].weight], foreach=False)

    def rank(r, comm):
        mm = net()
        dp.AdamW([mm[0].weight, mm[0].bias, mm[0].weight], comm=comm)

    assert "parameter 2 of group 0 is parameter 0 again: pass each parameter once" in rejected_everywhere(rank)[0]


def test_step_compile_of_malformed_text():
    with pytest.raises(InputRejected, match="the program is not valid distir IR: <string>:1:14"):
        steps.compile("func.func @f(", ranks=2)
