"""distir's distributed optimizers (``frameworks/pytorch.py``) on ranks as threads equal
DDP's gradient averaging + ``torch.optim`` (or the reference LAMB) over 200 steps of a tiny
GPT, at every step, on 2 and 4 ranks (Adam and Nesterov SGD, variants of the same
programs, on 2); the optimizer state is sliced over the ranks."""

from __future__ import annotations

import numpy as np
import pytest
from support import torch_training as tt

STEPS = 200


@pytest.fixture(scope="module")
def corpus():
    return tt.data()


CASES = [(a, n) for a in ("adamw", "sgd", "lamb") for n in (2, 4)] + [("adam", 2), ("sgd-nesterov", 2)]


@pytest.mark.parametrize("algorithm, ranks", CASES, ids=[f"{a}-{n}" for a, n in CASES])
def test_equals_ddp_and_torch_optim(algorithm, ranks, corpus):
    ref_losses, ref = tt.reference(algorithm, ranks, STEPS, corpus)
    losses, nets, opts = tt.distir_threads(algorithm, ranks, STEPS, corpus)
    rel = np.abs(losses - ref_losses) / np.abs(ref_losses)
    assert rel.max() <= 1e-5, f"loss differs by {rel.max():.3g} relative at step {int(rel.max(axis=1).argmax())}"
    for net in nets:
        tt.assert_params_close(net, ref)
    # ZeRO-1: each rank holds 1/ranks of the state torch holds (up to the arena's padding)
    torch_bytes = sum(v.numel() * v.element_size() for st in ref_opt_state(ref, algorithm, corpus) for v in st)
    for opt in opts:
        assert torch_bytes / ranks <= opt.state_bytes() <= torch_bytes / ranks * 1.1  # the arenas' padding


def ref_opt_state(net, algorithm, corpus):
    """The state tensors torch.optim keeps for ``net`` after one step."""
    _, ref = tt.reference(algorithm, 1, 1, corpus)
    opt = tt.torch_optimizer(algorithm, tt.groups(ref, algorithm))
    for p in ref.parameters():
        p.grad = p.detach().clone()
    opt.step()
    return [[v for k, v in st.items() if k != "step" and hasattr(v, "numel")] for st in opt.state.values()]
