"""distir's optimizers on the models people train (``support/torch_features.py``), on
rank threads against torch.optim on averaged gradients: a frozen embedding and tied
output weights, bf16 with fp32 master weights, f16 with loss scaling and an injected
inf (the step skipped on every rank), clipping at 1.0, 4 accumulated micro-batches (no
communication until the step), and torch.autocast with fp32 parameters. The same cases
run in launched jobs in test_launchers.py."""

from __future__ import annotations

import pytest
from support import torch_features as tf
from support import torch_training as tt
from support.threads import on_threads, results

from distir.runtime import step as steps


@pytest.fixture(scope="module")
def corpus():
    return tt.data()


CASES = [(c, 2) for c in tf.CASES] + [("frozen_tied", 4), ("bf16", 4)]


@pytest.mark.parametrize("case, ranks", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_case_equals_torch(case, ranks, corpus):
    comms = steps.local_comms(ranks)
    reports = results(on_threads(ranks, lambda r: tf.run_case(case, r, ranks, comms[r], corpus)))
    ref = tf.reference(case, ranks, corpus)
    for report in reports:
        tf.check(report, ref)


def test_a_step_keeps_torchs_thread_count(corpus):
    """A clipped step runs Numba's parallel kernels on the caller's thread, which set
    OpenMP's thread count torch shares: the training script's torch.set_num_threads(1)
    must still hold after it (it became 2, and torch's bf16 backward then summed in
    another order than the reference's)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tf.run_case("clip", 0, 1, steps.local_comms(1)[0], corpus)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
