"""Incremental verification (dialects/verifier.py ``ensure_verified``): a module that
verified is checked again only where it changed, and every kind of change a pass makes
is seen: a type or property changed in place, an op gone from a region, an op moved
before its operand's definition, a mesh that changed size. Work is counted, not timed."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import StringAttr
from xdsl.utils.exceptions import VerifyException

from distir.dialects import coll, dist
from distir.dialects.context import parse_module
from distir.dialects.verifier import ensure_verified, verified_clone
from distir.examples.optimizer_step import optimizer_step, uniform_parameters

PROGRAM = """\
dist.mesh @world shape = [4]
func.func @f(%x: !dist.tensor<8xf32, @world, [local]>, %s: f32) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  %z = dist.map(%y, %s) : (!dist.tensor<8xf32, @world, [replicated]>, f32) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    dist.yield %c : f32
  }
  func.return %z : !dist.tensor<8xf32, @world, [replicated]>
}
"""


@pytest.fixture
def verified():
    return parse_module(PROGRAM)  # verified and remembered


@pytest.fixture
def counted(monkeypatch):
    """The number of ops whose verifier ran since the fixture was made."""
    from distir.dialects import verifier

    calls: list[str] = []
    real = verifier._verify_op

    def counting(op):
        calls.append(op.name)
        return real(op)

    monkeypatch.setattr(verifier, "_verify_op", counting)
    return calls


def first(module, cls):
    return next(o for o in module.walk() if isinstance(o, cls))


def test_an_unchanged_module_verifies_no_op_again(verified, counted):
    ensure_verified(verified)
    assert counted == []


def test_a_type_changed_in_place_is_seen(verified):
    ar = first(verified, coll.AllReduceOp)
    ar.results[0]._type = ar.operands[0].type  # noqa: SLF001 - what a broken pass might do
    with pytest.raises(VerifyException, match="'coll.all_reduce' op result"):
        ensure_verified(verified)


def test_a_property_changed_in_place_is_seen(verified):
    first(verified, coll.AllReduceOp).properties["op"] = StringAttr("median")
    with pytest.raises(VerifyException, match="reduction must be one of"):
        ensure_verified(verified)


def test_a_terminator_gone_from_a_region_is_seen(verified):
    y = first(verified, dist.YieldOp)
    y.detach()
    y.erase(safe_erase=False)
    with pytest.raises(VerifyException):
        ensure_verified(verified)


def test_an_op_moved_before_its_operand_is_seen(verified):
    m = first(verified, dist.MapOp)
    ar = first(verified, coll.AllReduceOp)
    m.detach()
    ar.parent_block().insert_op_before(m, ar)
    with pytest.raises(VerifyException, match="used before its definition"):
        ensure_verified(verified)


def test_a_mesh_that_changed_shape_verifies_the_ops_on_it_again(verified, counted):
    from xdsl.dialects.builtin import DenseArrayBase, i64

    first(verified, dist.MeshOp).properties["shape"] = DenseArrayBase.from_list(i64, [2, 2])
    with pytest.raises(VerifyException, match="has 1 placement\\(s\\) but mesh @world has 2 axes"):
        ensure_verified(verified)
    assert "arith.mulf" not in counted  # a scalar op names no mesh


def test_one_change_in_a_big_program_verifies_a_few_ops():
    module = parse_module(optimizer_step("sgd", uniform_parameters(300, 64)))  # ~2,700 ops
    copy = verified_clone(module)
    first(copy, coll.AllReduceOp).properties["op"] = StringAttr("max")  # still valid
    from distir.dialects import verifier

    calls = []
    real = verifier._verify_op
    verifier._verify_op = lambda op: (calls.append(op.name), real(op))[1]
    try:
        ensure_verified(copy)
    finally:
        verifier._verify_op = real
    assert sum(1 for _ in copy.walk()) > 2500
    assert sorted(calls) == ["builtin.module", "coll.all_reduce", "func.func"]
