"""synthesis/lower.py: placements as view meshes, programs as coll ops; distir's
placement typing accepts exactly the programs P²'s semantics accepts."""

import pytest

from distir.dialects.context import parse_module
from distir.synthesis.hierarchy import synthesis_hierarchy
from distir.synthesis.language import enumerate_programs, instructions, parse_program
from distir.synthesis.lower import lower_program, meshes, module_of, reference, tensor_length, typed_programs, typed_step
from distir.synthesis.matrices import DevicePlacement
from distir.synthesis.semantics import Invalid, final_state, initial_state, step

CASES = [  # (hierarchy, matrix, reduce axes): one level, two levels, collapsed axes, three levels
    ((4, 16), ((1, 4), (4, 4)), (0,)),
    ((4, 16), ((2, 2), (2, 8)), (0,)),
    ((4, 16), ((2, 8), (2, 1), (1, 2)), (0, 2)),
    ((2, 2, 4), ((2, 1, 2), (1, 2, 2)), (0, 1)),
]


def setup(hierarchy, matrix, reduce_axes):
    p = DevicePlacement.standard(matrix, hierarchy)
    return p, synthesis_hierarchy(p, reduce_axes)


@pytest.mark.parametrize("hierarchy, matrix, reduce_axes", CASES)
def test_types_accept_exactly_the_semantically_valid_programs(hierarchy, matrix, reduce_axes):
    p, h = setup(hierarchy, matrix, reduce_axes)
    assert typed_programs(p, h, reduce_axes) == set(enumerate_programs(h, exact=True))


@pytest.mark.parametrize("hierarchy, matrix, reduce_axes", CASES)
def test_every_step_is_judged_alike(hierarchy, matrix, reduce_axes):
    """From every state a valid prefix reaches, each instruction is valid under Fig. 8
    exactly when distir's rules (the ops' verifiers and P²'s form) accept it."""
    p, h = setup(hierarchy, matrix, reduce_axes)
    _, start = next(iter(_typed_start(p, reduce_axes)))
    frontier = {(initial_state(h.devices), start)}
    final = final_state(h)
    seen = 0
    while frontier:
        nxt = set()
        for state, t in frontier:
            for ins in instructions(h):
                s2, t2 = step(h, state, ins), typed_step(p, h, t, ins)
                assert isinstance(s2, Invalid) == isinstance(t2, str), (ins, s2, t2)
                seen += 1
                if not isinstance(s2, Invalid) and s2 != final:
                    nxt.add((s2, t2))
        frontier = nxt
    assert seen > 0


def _typed_start(p, reduce_axes):
    from xdsl.dialects.builtin import Float32Type

    from distir.dialects import dist
    from distir.dialects.placements import LOCAL

    yield None, dist.TensorType([tensor_length(p, reduce_axes)], Float32Type(), "hw", [LOCAL] * len(p.sizes))


def test_lowered_programs_verify_and_print_as_view_meshes():
    p, h = setup((4, 16), ((2, 2), (2, 8)), (0,))
    hw, logical = meshes(p)
    funcs = [reference(p, [0], [64])]
    for i, prog in enumerate(enumerate_programs(h)):
        lowered = lower_program(p, h, prog, [0], [64], name=f"p{i}")
        assert lowered.func is not None, lowered.error
        funcs.append(lowered.func)
    module = module_of(p, funcs)
    module.verify()
    text = str(module)
    assert 'dist.mesh @hw shape = [2, 2, 2, 8] axes = ["node_p0", "node_p1", "gpu_p0", "gpu_p1"]' in text
    assert 'dist.mesh @logical shape = [4, 16] axes = ["p0", "p1"] view @hw [[0, 2], [1, 3]]' in text
    assert parse_module(text)  # prints and parses back, verified


def test_figure4_programs_are_rejected_by_distirs_rules():
    p = DevicePlacement.standard(((1, 1, 2, 2), (1, 2, 1, 2)), (1, 2, 2, 4), ("rack", "server", "CPU", "GPU"))
    h = synthesis_hierarchy(p, [1])
    a = lower_program(p, h, parse_program(h, "(server, InsideGroup, ReduceScatter) (server, InsideGroup, AllReduce)"), [1], [64])
    assert a.func is None and "step 2" in a.error and "'coll.all_reduce' op operand must be local on axis 3, got sliced<0>" in a.error
    b = lower_program(p, h, parse_program(h, "(server, Parallel(root), AllReduce) (root, InsideGroup, AllReduce)"), [1], [64])
    assert b.func is None and "'coll.all_reduce' op operand must be local on axis 0, got replicated" in b.error
