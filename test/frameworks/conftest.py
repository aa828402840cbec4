"""The PyTorch bridge's tests run torch on one intra-op thread, as their launched jobs do
(``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)`` in ``support/torch_training.py``):
the tiny GPT's matrices are too small for a second thread to help, and its OpenMP threads
spin-wait for each other whenever the machine's cores are busy (the rank threads of
``distir_threads``, other processes), which made a 200-step reference run take 10 times
as long. The computations and their checks are the same."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="package", autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
