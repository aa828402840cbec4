"""synthesis/simulate.py: predicted times of programs; the simulator orders P²'s Table 3
matrices as P²'s measurements do and finds Table 4's wins over AllReduce."""

import pytest

from distir.synthesis.driver import synthesize
from distir.synthesis.hierarchy import synthesis_hierarchy
from distir.synthesis.language import enumerate_programs, notation
from distir.synthesis.matrices import DevicePlacement
from distir.synthesis.simulate import allreduce_program, program_time, step_times
from distir.tuning.topology import get_topology

A100, V100 = get_topology("p2-a100", nodes=4), get_topology("p2-v100", nodes=4)
NBYTES = 4 * 2**29 * 4  # P²: 2^29 x nodes float32 per GPU


def allreduce_time(topology, hierarchy, matrix, axis, algorithm):
    p = DevicePlacement.standard(matrix, hierarchy)
    return program_time(p, synthesis_hierarchy(p, [axis]), allreduce_program(), topology, NBYTES, algorithm)


# Table 3: per parallelism axes, the matrices in increasing measured time, for each
# reduction axis and NCCL algorithm (the order is the same for ring and tree).
TABLE3 = [
    ("A", A100, (4, 16), {"A1": ((1, 2), (4, 8)), "A2": ((2, 1), (2, 16))}, ["A1", "A2"], ["A2", "A1"]),
    ("B", A100, (4, 16), {"B1": ((1, 4), (4, 4)), "B2": ((2, 2), (2, 8)), "B3": ((4, 1), (1, 16))}, ["B1", "B2", "B3"], ["B3", "B2", "B1"]),
    ("C", A100, (4, 16), {"C1": ((1, 8), (4, 2)), "C2": ((2, 4), (2, 4)), "C3": ((4, 2), (1, 8))}, ["C1", "C2", "C3"], ["C3", "C2", "C1"]),
    ("E", V100, (4, 8), {"E1": ((1, 8), (4, 1)), "E2": ((2, 4), (2, 2)), "E3": ((4, 2), (1, 4))}, ["E1", "E2", "E3"], ["E3", "E2", "E1"]),
]


@pytest.mark.parametrize("algorithm", ["ring", "tree"])
@pytest.mark.parametrize("name, topology, hierarchy, matrices, order0, order1", TABLE3)
def test_table3_orders(name, topology, hierarchy, matrices, order0, order1, algorithm):
    for axis, order in ((0, order0), (1, order1)):
        times = {k: allreduce_time(topology, hierarchy, m, axis, algorithm) for k, m in matrices.items()}
        assert sorted(times, key=times.get) == order, (axis, times)


# Table 4's cases where a synthesized program beats AllReduce (bold in the paper)
TABLE4_WINS = [
    ("F2", get_topology("p2-a100", nodes=2), (2, 16), (8, 4), (0,), "ring", ((2, 4), (1, 4))),
    ("G1", A100, (4, 16), (4, 16), (0,), "tree", ((1, 4), (4, 4))),
    ("G2", A100, (4, 16), (4, 16), (0,), "tree", ((4, 1), (1, 16))),
    ("H2", A100, (4, 16), (16, 2, 2), (0, 2), "ring", ((2, 8), (2, 1), (1, 2))),
    ("I1", A100, (4, 16), (2, 2, 16), (0, 2), "ring", ((2, 1), (2, 1), (1, 16))),
    ("J1", A100, (4, 16), (64,), (0,), "tree", ((4, 16),)),
    ("K1", V100, (4, 8), (8, 2, 2), (0, 2), "ring", ((2, 4), (2, 1), (1, 2))),
    ("L1", V100, (4, 8), (32,), (0,), "ring", ((4, 8),)),
]


@pytest.mark.parametrize("name, topology, hierarchy, axes, reduce_axes, algorithm, matrix", TABLE4_WINS)
def test_table4_synthesized_programs_beat_allreduce(name, topology, hierarchy, axes, reduce_axes, algorithm, matrix):
    result = synthesize(hierarchy, axes, reduce_axes, topology, algorithm)
    (m,) = [m for m in result.matrices if m.matrix == matrix]
    assert m.times[0] == m.allreduce_s  # program 0 is the single AllReduce
    assert m.times[m.best] < 0.95 * m.allreduce_s and m.beating_allreduce >= 1


def test_allreduce_stays_best_inside_one_node():
    # F1 puts the reduction axis inside a node: nothing beats the AllReduce (P²'s Result 3)
    result = synthesize((2, 16), (8, 4), (0,), get_topology("p2-a100", nodes=2), "ring")
    assert result.matrices[0].matrix == ((1, 8), (2, 2)) and result.matrices[0].best == 0


def test_step_times_by_hand():
    # ReduceScatter in the node, AllReduce across the 4 nodes, AllGather in the node, on
    # [[4,16]] of p2-a100: 16 rings of 4 GPUs share each NIC with a sixteenth of the data
    p = DevicePlacement.standard(((4, 16),), (4, 16))
    h = synthesis_hierarchy(p, [0])
    (prog,) = [q for q in enumerate_programs(h) if notation(h, q) == "(node, InsideGroup, ReduceScatter) (node, Parallel(root), AllReduce) (node, InsideGroup, AllGather)"]
    s = 1e9
    rs, ar, ag = step_times(p, h, prog, A100, s, "ring")
    assert rs == pytest.approx(15 / 16 * s / 270e9 + 15e-6)
    assert ar == pytest.approx(16 * 2 * 3 / 4 * (s / 16) / 8e9 + 6 * 5e-6)
    assert ag == pytest.approx(rs)
