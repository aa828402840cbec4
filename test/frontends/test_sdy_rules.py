"""Shardy's verifier rules (its ``verifiers.cc``), which distir's importer applies too: a
program Shardy rejects is a located diagnostic, not a module. One test per rule, each
program written from the rule; the valid neighbour of each is imported."""

from __future__ import annotations

import pytest
from oracle import assert_rejected

from distir.frontends.program import import_program

MESH = 'sdy.mesh @m = <["x"=2, "y"=4]>\n'


def program(arg: str, body: str, result: str = "") -> str:
    """One function on @m: ``%arg0`` sharded as ``arg`` (none when empty), ``body`` on
    line 3 computing ``%0``."""
    attr = f" {{sdy.sharding = #sdy.sharding<@m, {arg}>}}" if arg else ""
    res = f" {{sdy.sharding = #sdy.sharding<@m, {result}>}}" if result else ""
    return MESH + f"func.func @main(%arg0: tensor<8x16xf32>{attr}) -> (tensor<8x16xf32>{res}) {{\n  {body}\n  return %0 : tensor<8x16xf32>\n}}\n"


def test_valid_collectives_import():
    """The neighbours of the programs below that follow the rules."""
    for arg, body in [
        ('[{"x"}, {"y"}]', '%0 = sdy.all_gather [{}, {"y"}] %arg0 out_sharding=<@m, [{"x"}, {}]> : tensor<8x16xf32>'),
        ('[{"x"}, {"y"}]', '%0 = sdy.all_gather [{}, {"y":(2)2}] %arg0 out_sharding=<@m, [{"x"}, {"y":(1)2}]> : tensor<8x16xf32>'),
        ('[{"x"}, {}]', '%0 = sdy.all_slice [{}, {"y"}] %arg0 out_sharding=<@m, [{"x"}, {"y"}]> : tensor<8x16xf32>'),
        ('[{"x"}, {}]', '%0 = sdy.all_to_all [{"x"}: 0->1] %arg0 out_sharding=<@m, [{}, {"x"}]> : tensor<8x16xf32>'),
        ('[{}, {}], unreduced={"y"}', '%0 = sdy.all_reduce {"y"} %arg0 out_sharding=<@m, [{}, {}]> : tensor<8x16xf32>'),
        ('[{"x"}, {}]', '%0 = sdy.collective_permute %arg0 out_sharding=<@m, [{"y":(1)2}, {}]> : tensor<8x16xf32>'),
    ]:
        import_program(program(arg, body), "ok.mlir")


# ------------------------------------------------------------------ collectives


def test_collective_over_an_axis_the_operand_is_not_sharded_on():
    """all_gather removes its axes from the end of each dim's sharding: y does not end
    dim 0's sharding {"x"}."""
    body = '%0 = sdy.all_gather [{"y"}, {}] %arg0 out_sharding=<@m, [{"x"}, {}]> : tensor<8x16xf32>'
    assert_rejected(program('[{"x"}, {}]', body), r"3:8\n.*'sdy.all_gather' gathers axis \"y\" of dim 0, but the operand's dim 0 is sharded \{\"x\"\}")


def test_collective_over_an_axis_that_is_not_the_innermost():
    """all_gather of x from dim 0 sharded {"x", "y"}: only the innermost axis (y) can go."""
    body = '%0 = sdy.all_gather [{"x"}, {}] %arg0 out_sharding=<@m, [{"y"}, {}]> : tensor<8x16xf32>'
    assert_rejected(program('[{"x", "y"}, {}]', body), r"3:8\n.*gathers axis \"x\" of dim 0, but the operand's dim 0 is sharded \{\"x\", \"y\"\}: it must end with that axis")


def test_collective_on_an_operand_without_sharding():
    """all_gather, all_to_all and collective_permute need the operand's sharding."""
    for op in ('sdy.all_gather [{}, {}]', "sdy.collective_permute", 'sdy.all_to_all [{"x"}: 0->1]'):
        text = MESH + (
            "func.func @main(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {\n"
            "  %n = stablehlo.negate %arg0 : tensor<8x16xf32>\n"
            f"  %0 = {op} %n out_sharding=<@m, [{{}}, {{}}]> : tensor<8x16xf32>\n"
            "  return %0 : tensor<8x16xf32>\n}\n"
        )
        assert_rejected(text, rf"4:8\n.*'{op.split()[0]}' of %n, which has no sharding: Shardy requires one on the operand of this collective")


def test_result_sharding_must_be_what_the_collective_makes():
    """Each collective's out_sharding is its operand's sharding changed by the op."""
    cases = [
        ('[{"x"}, {"y"}]', '%0 = sdy.all_gather [{}, {"y"}] %arg0 out_sharding=<@m, [{}, {}]> : tensor<8x16xf32>', 0, '{"x"}', "{}"),
        ('[{"x"}, {}]', '%0 = sdy.all_slice [{}, {"y"}] %arg0 out_sharding=<@m, [{}, {"y"}]> : tensor<8x16xf32>', 0, '{"x"}', "{}"),
        ('[{}, {}], unreduced={"y"}', '%0 = sdy.reduce_scatter [{}, {"y"}] %arg0 out_sharding=<@m, [{}, {"x"}]> : tensor<8x16xf32>', 1, '{"y"}', '{"x"}'),
        ('[{"x"}, {"y"}]', '%0 = sdy.all_to_all [{"x"}: 0->1] %arg0 out_sharding=<@m, [{}, {"x"}]> : tensor<8x16xf32>', 1, '{"y", "x"}', '{"x"}'),
        ('[{"x"}, {}], unreduced={"y"}', '%0 = sdy.all_reduce {"y"} %arg0 out_sharding=<@m, [{}, {}]> : tensor<8x16xf32>', 0, '{"x"}', "{}"),
    ]
    for arg, body, dim, want, got in cases:
        op = body.split()[2]
        assert_rejected(program(arg, body), rf"3:8\n.*'{op}' gives dim {dim} the sharding {want} from its operand's, but its out_sharding says {got}")


def test_all_to_all_dims_must_be_distinct_and_in_range():
    cases = [
        ('[{"x"}: 0->2]', "target dim 2 is out of range for a tensor of rank 2"),
        ('[{"x"}: -1->1]', "source dim -1 is out of range"),
        ('[{"x"}: 0->0]', "dim 0 is the source or target of two moves"),
        ('[{"x"}: 0->1, {"y"}: 1->0]', "dim 1 is the source or target of two moves"),
        ("[]", r"moves nothing \(its parameter list is empty\)"),
    ]
    for moves, msg in cases:
        body = f"%0 = sdy.all_to_all {moves} %arg0 out_sharding=<@m, [{{}}, {{\"x\"}}]> : tensor<8x16xf32>"
        assert_rejected(program('[{"x"}, {}]', body), rf"3:8\n.*{msg}")


def test_all_to_all_sources_ascend():
    text = MESH + (
        "func.func @main(%arg0: tensor<8x16x4x4xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {\"x\"}, {\"y\"}, {}]>}) -> tensor<8x16x4x4xf32> {\n"
        '  %0 = sdy.all_to_all [{"y"}: 2->0, {"x"}: 1->3] %arg0 out_sharding=<@m, [{"y"}, {}, {}, {"x"}]> : tensor<8x16x4x4xf32>\n'
        "  return %0 : tensor<8x16x4x4xf32>\n}\n"
    )
    assert_rejected(text, r"3:8\n.*source dims must ascend \(1 comes after 2\)")


def test_all_reduce_axis_must_be_unreduced_in_the_operand():
    """A reduction axis may not slice or replicate the operand, nor stay unreduced in the
    result; the axes come in the mesh's order."""
    cases = [
        ('[{"y"}, {}]', '{"y"}', '[{"y"}, {}]', r"'sdy.all_reduce' over \"y\", which slices or replicates its operand"),
        ('[{}, {}], replicated={"y"}', '{"y"}', "[{}, {}]", r"'sdy.all_reduce' over \"y\", which slices or replicates its operand"),
        ('[{}, {}], unreduced={"y"}', '{"y"}', '[{}, {}], unreduced={"y"}', r"'sdy.all_reduce' over \"y\", which its out_sharding leaves unreduced"),
        ('[{}, {}], unreduced={"x", "y"}', '{"y", "x"}', "[{}, {}]", r"its axes \{\"y\", \"x\"\} are not in the mesh's order"),
    ]
    for arg, axes, out, msg in cases:
        body = f"%0 = sdy.all_reduce {axes} %arg0 out_sharding=<@m, {out}> : tensor<8x16xf32>"
        assert_rejected(program(arg, body), rf"3:8\n.*{msg}")


def test_all_reduce_other_than_sum_is_named():
    body = '%0 = sdy.all_reduce max {"y"} %arg0 out_sharding=<@m, [{}, {}]> : tensor<8x16xf32>'
    assert_rejected(program('[{}, {}], unreduced={"y"}', body), r"3:23\n.*'sdy.all_reduce' with reduction 'max' is not supported")


def test_collective_axes_are_named_once():
    body = '%0 = sdy.all_gather [{"x"}, {"x"}] %arg0 out_sharding=<@m, [{}, {}]> : tensor<8x16xf32>'
    assert_rejected(program('[{"x"}, {"x"}]', body).replace('[{"x"}, {"x"}]>', '[{"x"}, {"y"}]>', 1), r"3:\d+\n.*'sdy.all_gather' names axis \"x\" twice")


def test_collective_permute_between_meshes_of_other_axes_or_the_same_devices():
    text = MESH + 'sdy.mesh @n = <["x"=2, "y"=4]>\nsdy.mesh @o = <["y"=4, "x"=2]>\n' + (
        "func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@m, [{\"x\"}, {}]>}) -> tensor<8x16xf32> {\n"
        '  %0 = sdy.collective_permute %arg0 out_sharding=<@MESH, [{"y"}, {}]> : tensor<8x16xf32>\n'
        "  return %0 : tensor<8x16xf32>\n}\n"
    )
    assert_rejected(text.replace("@MESH", "@n"), r"5:8\n.*from mesh @m to @n, which has the same devices in the same order")
    with pytest.raises(Exception, match="differ"):
        import_program(text.replace("@MESH", "@o"), "bad.mlir")


# ------------------------------------------------------------------ axis references


@pytest.mark.parametrize(
    "ref,msg",
    [
        ('"y":(2)1', r'sub-axis "y":\(2\)1: its size must be greater than 1'),
        ('"y":(0)2', r'sub-axis "y":\(0\)2: its pre-size must be at least 1'),
        ('"y":(1)4', r'sub-axis "y":\(1\)4 is the whole axis "y": write "y"'),
        ('"y":(2)4', r'sub-axis "y":\(2\)4 does not divide axis "y" of size 4'),
        ('"y":(1)2, "y":(2)2', r'consecutive sub-axes "y":\(1\)2, "y":\(2\)2 are one sub-axis'),
    ],
)
def test_sub_axes_follow_shardys_rules(ref, msg):
    text = program(f"[{{}}, {{{ref}}}]", "%0 = stablehlo.negate %arg0 : tensor<8x16xf32>")
    assert_rejected(text, rf"2:\d+\n.*{msg}")


def test_sub_axes_that_do_not_refine_one_another():
    """"a":(1)2 and "a":(3)2 of an axis of 6 are valid in Shardy, but no one split of the
    axis holds both: a diagnostic at the mesh."""
    text = 'sdy.mesh @m = <["a"=6]>\nfunc.func @main(%arg0: tensor<6xf32> {sdy.sharding = #sdy.sharding<@m, [{"a":(1)2}]>}) -> (tensor<6xf32> {sdy.sharding = #sdy.sharding<@m, [{"a":(3)2}]>}) {\n  return %arg0 : tensor<6xf32>\n}\n'
    assert_rejected(text, r"1:1\n.*the sub-axes of \"a\" used in this module split it in factors that do not refine one another")


def test_replicated_axes_in_the_mesh_order():
    text = program('[{}, {}], replicated={"y", "x"}', "%0 = stablehlo.negate %arg0 : tensor<8x16xf32>")
    assert_rejected(text, r"2:\d+\n.*the replicated axes \{\"y\", \"x\"\} are not in the mesh's order")


@pytest.mark.parametrize(
    "dim,msg",
    [
        ('{"y"}p9999999999999999999', "priority p9999999999999999999 does not fit a 64-bit integer"),
        ('{"y"}p01', "priority p01 has leading zeros"),
        ("{}p1", r"a closed dim sharding without axes cannot have a priority \(p1\)"),
    ],
)
def test_priorities(dim, msg):
    assert_rejected(program(f"[{{}}, {dim}]", "%0 = stablehlo.negate %arg0 : tensor<8x16xf32>"), rf"2:\d+\n.*{msg}")
    import_program(program('[{}, {"y"}p3]', "%0 = stablehlo.negate %arg0 : tensor<8x16xf32>"), "ok.mlir")


# ------------------------------------------------------------------ attributes, manual computations


def test_sharding_attribute_kinds():
    """An op carries one sharding per result (``#sdy.sharding_per_value``), an argument
    one ``#sdy.sharding``; a clause given twice is a diagnostic."""
    op = MESH + 'func.func @main(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {\n  %0 = stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>} : tensor<8x16xf32>\n  return %0 : tensor<8x16xf32>\n}\n'
    assert_rejected(op, r"3:8\n.*the sdy.sharding of 'stablehlo.negate' must be #sdy.sharding_per_value")
    arg = MESH + 'func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>}) -> tensor<8x16xf32> {\n  return %arg0 : tensor<8x16xf32>\n}\n'
    assert_rejected(arg, r"2:17\n.*the sdy.sharding of argument %arg0 must be one #sdy.sharding")
    assert_rejected(program('[{}, {}], replicated={"x"}, replicated={"y"}', "%0 = stablehlo.negate %arg0 : tensor<8x16xf32>"), r"2:\d+\n.*the sharding gives 'replicated' twice")


MANUAL = MESH + """func.func @main(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {{
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{{}}, {in_dim}]>] out_shardings=[<@m, [{{}}, {in_dim}]>] manual_axes={{"y"}} (%arg1: tensor<8x{local}xf32>) {{
    %1 = stablehlo.negate %arg1 {attr}: tensor<8x{local}xf32>
    sdy.return %1 : tensor<8x{local}xf32>
  }} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}}
"""


def test_manual_axes_come_first_in_a_manual_computations_shardings():
    assert_rejected(MANUAL.format(in_dim='{"x", "y"}', local=2, attr=""), r"3:\d+\n.*names a free axis before a manual one in dim 1 \(\{\"x\", \"y\"\}\): the manual axes come first")
    import numpy as np

    from distir.runtime import interpret

    module = import_program(MANUAL.format(in_dim='{"y", "x"}', local=4, attr=""), "ok.mlir").module
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(interpret(module, "main", {"arg0": x}, ranks=8)[0], -x)


def test_an_op_in_a_manual_body_cannot_shard_over_a_manual_axis():
    attr = '{sdy.sharding = #sdy.sharding_per_value<[<@m, [{"y"}, {}]>]>} '
    assert_rejected(MANUAL.format(in_dim='{"y"}', local=4, attr=attr), r"4:10\n.*names \"y\", a manual axis of the enclosing manual computation")


def test_shardys_own_metadata_attributes_are_accepted():
    """The names Shardy's passes record (``ir/constants.h``: the original function name,
    a function's manual axes, propagation edges and sharding origins) are not
    misspellings: such a program imports (67 of Shardy's test programs carry them)."""
    text = MESH + (
        'func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>, sdy.sharding_origins = {}}) -> tensor<8x16xf32>'
        ' attributes {sdy.original_func_name = "f", sdy.func_manual_axes = #sdy<manual_axes{}>} {\n'
        "  %0 = stablehlo.negate %arg0 {sdy.sharding_origin_name = \"n\"} : tensor<8x16xf32>\n  return %0 : tensor<8x16xf32>\n}\n"
    )
    import_program(text, "ok.mlir")
