"""``dialects/fast.py``: ``new_op`` makes the op ``create`` makes, ``walk`` lists the
ops ``op.walk()`` yields, in the same order; what ``OpMemo`` keeps about a module goes
with it."""

from __future__ import annotations

import gc
import weakref

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, StringAttr, i32

from distir.dialects import coll, rt
from distir.dialects.context import parse_module
from distir.dialects.fast import new_op, walk

NESTED = """\
dist.mesh @world shape = [4]
func.func @f(%x: !dist.tensor<8xf32, @world, [local]>, %s: f32) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  %z = dist.map(%y, %s) : (!dist.tensor<8xf32, @world, [replicated]>, f32) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    %d = arith.addf %c, %a : f32
    dist.yield %d : f32
  }
  %w = dist.map(%z) : (!dist.tensor<8xf32, @world, [replicated]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%e: f32):
    dist.yield %e : f32
  }
  func.return %w : !dist.tensor<8xf32, @world, [replicated]>
}
"""


def test_walk_lists_the_ops_of_xdsls_walk_in_its_order():
    module = parse_module(NESTED)
    assert walk(module) == list(module.walk())
    assert walk(module, region_first=True) == list(module.walk(region_first=True))
    f = next(o for o in module.ops if o.name == "func.func")
    assert walk(f) == list(f.walk())
    leaf = next(o for o in module.walk() if o.name == "arith.mulf")
    assert walk(leaf) == [leaf] == walk(leaf, region_first=True)


def test_new_op_makes_the_op_create_makes():
    module = parse_module(NESTED)
    y = next(o for o in module.walk() if isinstance(o, coll.AllReduceOp))
    props = {"kernel": rt.kernel_ref("k0")}
    mine = new_op(rt.CallOp, [y.results[0], y.results[0]], [y.results[0].type], props, {"a": StringAttr("b")}, None, ())
    theirs = rt.CallOp.create(operands=[y.results[0], y.results[0]], result_types=[y.results[0].type], properties=props,
                              attributes={"a": StringAttr("b")})
    assert vars(mine).keys() == vars(theirs).keys()
    assert str(mine) == str(theirs)
    assert mine.properties is not props and mine.properties == theirs.properties
    assert mine.location == theirs.location
    # the operand's uses: the same order as create's (the newest first)
    uses = [(u.operation, u.index) for u in y.results[0].uses]
    assert uses[:4] == [(theirs, 1), (theirs, 0), (mine, 1), (mine, 0)]
    # an IRDL op's default properties are filled in, as create does
    c = arith.ConstantOp(IntegerAttr(1, i32))
    a = new_op(arith.AddiOp, [c.result, c.result], [i32], {}, {}, None, ())
    b = arith.AddiOp.create(operands=[c.result, c.result], result_types=[i32])
    assert a.properties == b.properties and "overflowFlags" in a.properties


def test_rt_call_made_directly_is_the_one_built():
    module = parse_module(NESTED)
    y = next(o for o in module.walk() if isinstance(o, coll.AllReduceOp))
    direct = rt.CallOp.get("k1", [y.results[0]], [y.results[0].type])
    built = rt.CallOp.build(properties={"kernel": rt.kernel_ref("k1")}, operands=[[y.results[0]]], result_types=[[y.results[0].type]])
    assert vars(direct).keys() == vars(built).keys() and str(direct) == str(built)
    assert rt.CallOp.get("k1", [y], [y.results[0].type]).operands[0] is y.results[0]  # an op as its result: xDSL's builder


def test_kinds_answers_isinstance_once_per_class():
    from distir.dialects import dist
    from distir.dialects.fast import Kinds

    module = parse_module(NESTED)
    kinds = Kinds(dist.MapOp, coll.CollectiveOp)
    assert [kinds(o) for o in module.walk()] == [isinstance(o, (dist.MapOp, coll.CollectiveOp)) for o in module.walk()]
    assert set(kinds._memo) == {type(o) for o in module.walk()}  # noqa: SLF001


def test_a_module_parsed_verified_and_looked_up_in_is_freed_with_its_records():
    # the records of a module (where its ops came from, what it verified as, its symbol
    # table) name its ops; kept beside it in a WeakKeyDictionary they kept it alive, and
    # every copy the planner and the tuner made of a program stayed in memory
    from distir.dialects.dist import lookup_mesh
    from distir.dialects.frontend import source_spans
    from distir.dialects.verifier import ensure_verified, verified_clone

    module = parse_module(NESTED)
    ensure_verified(module)
    copy = verified_clone(module)  # a copy with the original's spans and verification record
    ensure_verified(copy)
    f = next(o for o in copy.ops if o.name == "func.func")
    assert lookup_mesh(f.body.block.first_op, f.body.block.args[0].type).mesh_name == "world"
    assert source_spans(copy) and source_spans(module)
    refs = [weakref.ref(module), weakref.ref(copy), weakref.ref(f)]
    del module, copy, f
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
