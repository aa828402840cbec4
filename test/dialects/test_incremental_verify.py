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

    def counting(op, *args):
        calls.append(op.name)
        return real(op, *args)

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
    verifier._verify_op = lambda op, *args: (calls.append(op.name), real(op, *args))[1]
    try:
        ensure_verified(copy)
    finally:
        verifier._verify_op = real
    assert sum(1 for _ in copy.walk()) > 2500
    assert sorted(calls) == ["builtin.module", "coll.all_reduce", "func.func"]


def test_a_type_changed_in_place_in_a_region_is_seen_although_its_kind_verified(verified):
    """The verifier skips xDSL's generic IRDL checks for op shapes seen to satisfy them
    (class, operand and result types, properties, attributes); a new shape is checked."""
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import f64

    mul = first(verified, arith.MulfOp)
    mul.results[0]._type = f64  # noqa: SLF001 - what a broken pass might do
    with pytest.raises(VerifyException, match="attribute f32 expected from variable 'T', but got f64"):
        ensure_verified(verified)


def test_ops_of_a_verified_shape_skip_the_generic_irdl_checks(monkeypatch, counted):
    """Re-verifying every op on a mesh that changed size runs each op's own verifier
    again, but xDSL's generic constraint checks only for op shapes not seen before."""
    from xdsl.irdl import OpDef

    from distir.dialects.context import make_context
    from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
    from distir.passes.pipeline import run_passes

    module = parse_module(optimizer_step("sgd", uniform_parameters(300, 64)))  # ~2,700 ops
    generic: list[str] = []
    real = OpDef.verify
    monkeypatch.setattr(OpDef, "verify", lambda self, op: (generic.append(op.name), real(self, op))[1])
    run_passes(module, [FixMeshSizesPass(ranks=2)], make_context())
    assert sum(1 for n in counted if n.startswith(("coll.", "dist."))) >= 900  # the ops on the mesh
    assert sorted(generic) == ["builtin.module", "dist.mesh"], generic  # the mesh's new shape; the module has no key


def test_every_distir_op_has_its_generic_irdl_checks_recognised():
    """The skip above reads xDSL's generated ``verify_`` (the IRDL definition, then the
    op's own verifier); should an xDSL release change its shape, ops would be verified
    whole again (correct, but the cost of verifying after every pass goes back up)."""
    from xdsl.dialects.arith import Arith

    from distir.dialects.coll import Coll
    from distir.dialects.dist import Dist
    from distir.dialects.nccl import Nccl
    from distir.dialects.rt import Rt
    from distir.dialects.verifier import _irdl_parts

    for dialect in (Dist, Coll, Rt, Nccl, Arith):
        for cls in dialect.operations:
            parts = _irdl_parts(cls)
            assert parts is not None and parts[0] is cls.get_irdl_definition(), cls.name
    own = _irdl_parts(coll.AllReduceOp)[1]
    assert own is not None and own.__qualname__.endswith(".verify_")  # its own verifier still runs


def test_an_overlaps_options_changed_verify_it_alone_and_no_scopes(monkeypatch, counted):
    """The tuner's overlap variants change only a ``coll.overlap``'s chunks or order,
    which no op of its body reads (``BODY_READS_PROPERTIES``): the overlap and its
    ancestors verify again, not its body, and the scopes are not walked (no op moved);
    an option it rejects is still seen."""
    from pathlib import Path

    from xdsl.dialects.builtin import IntegerAttr, i64

    from distir.dialects import verifier

    text = (Path(__file__).parents[2] / "examples/schedules/megatron_mlp_ol_fused.mlir").read_text()
    module = parse_module(text)
    walked: list[object] = []
    real = verifier.check_scopes
    monkeypatch.setattr(verifier, "check_scopes", lambda *a: (walked.append(a[0]), real(*a))[1])
    counted.clear()  # parsing verified every op
    ol = first(module, coll.OverlapOp)
    ol.properties["chunks"] = IntegerAttr(8, i64)
    ensure_verified(module)
    assert sorted(counted) == ["builtin.module", "coll.overlap", "func.func"] and walked == []
    ol.properties["chunks"] = IntegerAttr(0, i64)
    with pytest.raises(VerifyException, match="chunks must be at least 1"):
        ensure_verified(module)


def test_a_new_op_still_walks_the_scopes(verified, monkeypatch):
    from distir.dialects import verifier

    walked: list[object] = []
    real = verifier.check_scopes
    monkeypatch.setattr(verifier, "check_scopes", lambda *a: (walked.append(a[0]), real(*a))[1])
    m = first(verified, dist.MapOp)
    m.parent_block().insert_op_before(m.clone(), m)
    ensure_verified(verified)
    assert walked == [verified]


def _reductions(n: int, last: str = "replicated") -> str:
    ops = "\n".join(
        f"  %y{i} = coll.all_reduce sum %x : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [{last if i == n - 1 else 'replicated'}]>"
        for i in range(n))
    return f"""\
dist.mesh @world shape = [4]
func.func @f(%x: !dist.tensor<8xf32, @world, [local]>) {{
{ops}
  func.return
}}
"""


def test_alike_ops_check_their_rule_once_per_verification(monkeypatch):
    """A model's program repeats its layers' ops: verifying it infers a dist op's
    results once per alike op (class, types, properties, meshes), not once per op."""
    from distir.dialects.verifier import verify_module

    module = parse_module(_reductions(200), verify=False)
    rules: list[str] = []
    real = dist.DistOp.verify_rule
    monkeypatch.setattr(dist.DistOp, "verify_rule", lambda self: (rules.append(self.name), real(self))[1])
    monkeypatch.setattr(dist, "_KEYED_RULES", (dist.DistOp.verify_rule, dist.MapOp.verify_rule))
    verify_module(module)
    assert rules == ["coll.all_reduce"]
    verify_module(module)  # each verification checks once again: nothing kept between them
    assert rules == ["coll.all_reduce"] * 2


def test_alike_maps_check_their_rule_once_and_a_different_body_again(monkeypatch):
    from distir.dialects.verifier import verify_module

    def maps(bodies: list[str]) -> str:
        t = "!dist.tensor<8xf32, @world, [replicated]>"
        ops = "\n".join(f"""  %m{i} = dist.map(%x) : ({t}) -> {t} {{
  ^bb0(%a: f32):
    %c = arith.{b} %a, %a : f32
    dist.yield %c : f32
  }}""" for i, b in enumerate(bodies))
        return f"dist.mesh @world shape = [4]\nfunc.func @f(%x: {t}) {{\n{ops}\n  func.return\n}}\n"

    module = parse_module(maps(["mulf"] * 50 + ["addf"]), verify=False)
    rules: list[str] = []
    real = dist.MapOp.verify_rule
    monkeypatch.setattr(dist.MapOp, "verify_rule", lambda self: (rules.append(self.name), real(self))[1])
    monkeypatch.setattr(dist, "_KEYED_RULES", (dist.DistOp.verify_rule, dist.MapOp.verify_rule))
    verify_module(module)
    assert rules == ["dist.map"] * 2  # one per body


def test_an_op_unlike_the_ones_verified_before_is_checked():
    from distir.dialects.verifier import verify_module

    module = parse_module(_reductions(20, last="sliced<0>"), verify=False)
    with pytest.raises(VerifyException, match="coll.all_reduce"):
        verify_module(module)
