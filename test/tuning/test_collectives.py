"""tuning/collectives.py: alpha-beta times of collectives, checked on hand-computed cases."""

import pytest

from distir.dialects.diagnostics import InputRejected
from distir.tuning.collectives import collective_cost, collective_time
from distir.tuning.topology import Device, Level, PeakTflops, Topology, get_topology

A100x4 = get_topology("p2-a100", nodes=4)  # node: 8 GB/s, 5 us; gpu: 270 GB/s, 1 us
S = 1e9
NIC, NVS = 8e9, 270e9
NET_A, NVL_A = 5e-6, 1e-6


def approx(x):
    return pytest.approx(x, rel=1e-12)


def test_ring_allreduce_on_one_level():
    gpus = list(range(16))
    assert collective_time(A100x4, "all_reduce", [gpus], S) == approx(2 * 15 / 16 * S / NVS + 2 * 15 * NVL_A)


def test_ring_reduce_scatter_and_all_gather_move_half():
    gpus = list(range(4))
    expect = 3 / 4 * S / NVS + 3 * NVL_A
    assert collective_time(A100x4, "reduce_scatter", [gpus], S) == approx(expect)
    assert collective_time(A100x4, "all_gather", [gpus], S) == approx(expect)


def test_reduce_and_broadcast_pipeline_the_buffer_along_a_chain():
    group = [0, 16, 32, 48]  # one GPU per node
    expect = S / NIC + 3 * NET_A
    assert collective_time(A100x4, "reduce", [group], S) == approx(expect)
    assert collective_time(A100x4, "broadcast", [group], S) == approx(expect)


def test_send_crosses_one_level():
    assert collective_time(A100x4, "send", [[3, 19]], S) == approx(S / NIC + NET_A)
    assert collective_time(A100x4, "send", [[3, 4]], S) == approx(S / NVS + NVL_A)


def test_tree_allreduce_two_nodes_sends_the_buffer_once():
    # two trees of one edge each, half the buffer up and down per tree: S out of each NIC
    assert collective_time(A100x4, "all_reduce", [[0, 16]], S, "tree") == approx(S / NIC + 2 * NET_A)


def test_tree_allreduce_four_nodes_is_logarithmic_in_latency():
    # inner nodes have 3 edges in one tree and 1 in the other: 4 x S/2 out of the busiest NIC
    t = collective_time(A100x4, "all_reduce", [[0, 16, 32, 48]], S, "tree")
    assert t == approx(4 * S / 2 / NIC + 2 * 2 * NET_A)
    lat, per_byte = collective_cost(A100x4, "all_reduce", [[0, 16, 32, 48]], "tree")
    assert lat == approx(4 * NET_A) and per_byte == approx(2 / NIC)


def test_hierarchical_ring_pays_the_slowest_level_it_spans():
    # ring 0 -> 1 -> 16 -> 17 -> 0: one edge out of each NIC, latency of the node level
    t = collective_time(A100x4, "all_reduce", [[0, 1, 16, 17]], S)
    assert t == approx(2 * 3 / 4 * S / NIC + 6 * NET_A)


def test_concurrent_groups_share_a_nodes_nic():
    one = collective_time(A100x4, "all_reduce", [[0, 16]], S)
    sixteen = collective_time(A100x4, "all_reduce", [[g, 16 + g] for g in range(16)], S)
    assert one == approx(S / NIC + 2 * NET_A)
    assert sixteen == approx(16 * S / NIC + 2 * NET_A)
    # groups inside nodes do not touch the NIC: running them alongside costs nothing more
    mixed = [[g, 16 + g] for g in range(16)] + [[32 + g for g in range(16)]]
    assert collective_time(A100x4, "all_reduce", mixed, S) == approx(sixteen)


def test_concurrent_groups_share_a_pcie_domain_uplink():
    t = Topology(
        "pcie",
        (Level("node", 2, 100.0, 5.0), Level("domain", 2, 100.0, 1.0, uplink_GBps=10.0), Level("gpu", 2, 100.0, 1.0)),
        Device("x", 1.0, PeakTflops(1.0, 1.0, 1.0)),
    )
    # GPUs 0 and 1 share domain 0 of node 0; both send to node 1 through its 10 GB/s uplink
    assert collective_time(t, "send", [[0, 4]], S) == approx(S / 10e9 + 5e-6)
    assert collective_time(t, "send", [[0, 4], [1, 5]], S) == approx(2 * S / 10e9 + 5e-6)
    # from different domains, each has its uplink: the NIC (100 GB/s, 2 flows) binds
    assert collective_time(t, "send", [[0, 4], [2, 6]], S) == approx(S / 10e9 + 5e-6)


def test_auto_picks_nccls_choice():
    group = [0, 16, 32, 48]
    small, large = 1024, 1e9
    for n in (small, large):
        ring = collective_time(A100x4, "all_reduce", [group], n, "ring")
        tree = collective_time(A100x4, "all_reduce", [group], n, "tree")
        assert collective_time(A100x4, "all_reduce", [group], n, "auto") == min(ring, tree)
    assert collective_time(A100x4, "all_reduce", [group], small, "tree") < collective_time(A100x4, "all_reduce", [group], small, "ring")
    assert collective_time(A100x4, "all_reduce", [group], large, "ring") < collective_time(A100x4, "all_reduce", [group], large, "tree")
    # tree only exists for all_reduce: the others run as ring
    assert collective_time(A100x4, "reduce_scatter", [group], large, "tree") == collective_time(A100x4, "reduce_scatter", [group], large)


def test_in_network_reduction_with_auto():
    t = Topology("nvls", (Level("gpu", 8, 100.0, 1.0, in_network_reduction=True),), Device("x", 1.0, PeakTflops(1.0, 1.0, 1.0)))
    assert collective_time(t, "all_reduce", [list(range(8))], S, "auto") == approx(S / 100e9 + 2e-6)
    assert collective_time(t, "all_reduce", [list(range(8))], S, "ring") == approx(2 * 7 / 8 * S / 100e9 + 14e-6)


def test_trivial_groups_cost_nothing():
    assert collective_time(A100x4, "all_reduce", [[5]], S) == 0.0
    assert collective_time(A100x4, "all_reduce", [], S) == 0.0


@pytest.mark.parametrize(
    "args, message",
    [
        (("all_to_all", [[0, 1]], S), "unknown collective 'all_to_all'"),
        (("all_reduce", [[0, 1]], S, "butterfly"), "unknown algorithm 'butterfly'"),
        (("all_reduce", [[0, 64]], S), "device 64 .* out of range"),
        (("all_reduce", [[0, 0]], S), "lists a device twice"),
        (("send", [[0, 1, 2]], S), "source, destination"),
    ],
)
def test_bad_requests_are_diagnostics(args, message):
    with pytest.raises(InputRejected, match=message):
        collective_time(A100x4, *args)


@pytest.mark.parametrize("name,nodes", [("dgx2", 16), ("p2-a100", 4), ("dgx2", 1)])
def test_a_large_group_of_sends_is_priced_as_each_send_is(monkeypatch, name, nodes):
    """An all-to-all's sends (every ordered pair of each group: 65,280 pairs over 256
    devices) are priced with numpy (``_sends_cost``) as the general path prices each
    send: the same latency, seconds per byte and time at every size."""
    import random

    from distir.tuning import collectives

    topology = get_topology(name, nodes)
    n = topology.ranks
    rng = random.Random(7)
    priced = 0
    for k in (n, 16, 4):
        perm = list(range(n))
        if k < n:
            rng.shuffle(perm)
        groups = [perm[i : i + k] for i in range(0, n - n % k, k)]
        pairs = tuple((a, b) for g in groups for a in g for b in g if a != b)
        if len(pairs) <= collectives.SEND_PAIRS_IN_NUMPY:
            continue  # the general path's already
        priced += 1
        fast = collectives._cost.__wrapped__(topology, "send", pairs, "ring")
        with monkeypatch.context() as m:
            m.setattr(collectives, "SEND_PAIRS_IN_NUMPY", len(pairs))
            each = collectives._cost.__wrapped__(topology, "send", pairs, "ring")
        assert len(each.terms) == len(pairs)  # the general path: a term per send
        assert (fast.latency, fast.per_byte) == (each.latency, each.per_byte)
        assert [fast(b) for b in (0, 1, 4096, 1e6, 3.3e9)] == [each(b) for b in (0, 1, 4096, 1e6, 3.3e9)]
        assert set(fast.terms) == set(each.terms)
    assert priced >= 2


@pytest.mark.parametrize("name,nodes", [("dgx2", 16), ("p2-a100", 4), ("dgx2", 1)])
def test_an_all_to_all_costs_what_its_pairs_of_sends_cost(name, nodes):
    """``all_to_all_cost`` (the pairs made with numpy, the groups checked once) gives the
    floats ``collective_cost`` gives for the list of every ordered pair of each group,
    for groups of every size (a few pairs: the general path) and in any order; a
    group naming a device twice or one out of range is still refused."""
    import random

    from distir.tuning.collectives import all_to_all_cost

    topology = get_topology(name, nodes)
    n = topology.ranks
    rng = random.Random(11)
    for k in (n, 16, 8, 2):
        perm = list(range(n))
        rng.shuffle(perm)
        groups = [perm[i : i + k] for i in range(0, n - n % k, k)]
        pairs = [(a, b) for g in groups for a in g for b in g if a != b]
        assert all_to_all_cost(topology, groups) == collective_cost(topology, "send", pairs), (k, len(pairs))
    with pytest.raises(InputRejected, match="twice"):
        all_to_all_cost(topology, [[0, 1, 1]])
    with pytest.raises(InputRejected, match="out of range"):
        all_to_all_cost(topology, [[0, n]])
