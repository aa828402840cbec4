"""The cost model's time for ``coll.permute``: one point-to-point transfer per pair on the
topology (2 nodes x 2 GPUs: NIC 10 GB/s and 5 us, GPU links 100 GB/s and 1 us), pairs
that cross nodes sharing the NIC; ranks no pair involves do not wait for the others."""

from __future__ import annotations

import pytest

from tuning.test_cost_model import RING, TWO_BY_TWO, N, predicted

BYTES = 4 * N
NIC = 5e-6 + BYTES / 10e9
GPU_LINK = 1e-6 + BYTES / 100e9
ZERO_FILL = BYTES / 1000e9  # a kernel writing the buffer at the device's memory bandwidth


def permute(clause: str) -> str:
    t = f"!dist.tensor<{N}xf32, @m, [local]>"
    return f"dist.mesh @m shape = [4]\nfunc.func @f(%x: {t}) -> {t} {{\n  %y = coll.permute %x {clause} : {t} -> {t}\n  func.return %y : {t}\n}}\n"


def test_a_ring_step_costs_one_transfer_per_link():
    # 0->1 and 2->3 inside the nodes, 1->2 and 3->0 across: each NIC carries one buffer
    for k in (1, -1):
        assert predicted(permute(f"offset {k}"), TWO_BY_TWO, 4, RING)[0] == pytest.approx(NIC, rel=1e-9)


def test_pairs_across_the_nodes_share_each_nic():
    # offset 2 (= the pairs 0<->2, 1<->3): two buffers leave each node through its NIC
    for clause in ("offset 2", "pairs [[0, 2], [2, 0], [1, 3], [3, 1]]"):
        t = predicted(permute(clause), TWO_BY_TWO, 4, RING)[0]
        assert t == pytest.approx(5e-6 + 2 * BYTES / 10e9, rel=1e-9)


def test_pairs_inside_the_nodes_use_the_gpu_links():
    t = predicted(permute("pairs [[0, 1], [1, 0], [2, 3], [3, 2]]"), TWO_BY_TWO, 4, RING)[0]
    assert t == pytest.approx(GPU_LINK, rel=1e-9)


def test_ranks_outside_the_pairs_do_not_wait():
    # ranks 2 and 3 only fill their results with zeros, at the same time as the swap
    t = predicted(permute("pairs [[0, 1], [1, 0]]"), TWO_BY_TWO, 4, RING)[0]
    assert t == pytest.approx(GPU_LINK, rel=1e-9)


def test_a_source_that_receives_nothing_fills_zeros_after_sending():
    # rank 0 sends to 2 across the NIC, then writes zeros into its own result
    t = predicted(permute("pairs [[0, 2]]"), TWO_BY_TWO, 4, RING)[0]
    assert t == pytest.approx(NIC + ZERO_FILL, rel=1e-9)


def test_a_permute_that_moves_nothing_costs_nothing():
    assert predicted(permute("offset 4"), TWO_BY_TWO, 4, RING)[0] == 0.0
    assert predicted(permute("pairs []"), TWO_BY_TWO, 4, RING)[0] == pytest.approx(ZERO_FILL, rel=1e-9)
