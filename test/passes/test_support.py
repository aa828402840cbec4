"""The passes' shared helpers (passes/support.py) that the other tests do not reach
through a pass: ``clone``, the one-walk copy of a program, and
``collections_of_new_objects``, the planner's collections that leave the caller's objects alone."""

from __future__ import annotations

import gc
import weakref

from xdsl.dialects.builtin import ModuleOp, i32
from xdsl.dialects.test import TestOp as Op  # (not named Test*: pytest would collect it)
from xdsl.ir import Operation, SSAValue

from distir.dialects.context import parse_module
from distir.dialects.fast import clone
from distir.passes.support import collect_garbage, collections_of_new_objects, set_aside

MAP_PROGRAM = """
dist.mesh @m shape = [2]
func.func @f(%x: !dist.tensor<4x8xf32, @m, [sliced<0>]>, %w: !dist.tensor<8x8xf32, @m, [replicated]>) -> !dist.tensor<4x8xf32, @m, [replicated]> {
  %y = dist.matmul %x, %w : (!dist.tensor<4x8xf32, @m, [sliced<0>]>, !dist.tensor<8x8xf32, @m, [replicated]>) -> !dist.tensor<4x8xf32, @m, [sliced<0>]>
  %z = dist.map(%y, %x) : (!dist.tensor<4x8xf32, @m, [sliced<0>]>, !dist.tensor<4x8xf32, @m, [sliced<0>]>) -> !dist.tensor<4x8xf32, @m, [sliced<0>]> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    %t = arith.mulf %s, %a : f32
    dist.yield %t : f32
  }
  %r = coll.all_gather %z : !dist.tensor<4x8xf32, @m, [sliced<0>]> -> !dist.tensor<4x8xf32, @m, [replicated]>
  func.return %r : !dist.tensor<4x8xf32, @m, [replicated]>
}
"""


def _uses(root: Operation) -> list:
    """Every value's name and its uses in use-list order, as (user, operand index) by
    position in the walk: what passes iterate over."""
    position = {op: k for k, op in enumerate(root.walk())}
    values: list[SSAValue] = []
    for op in root.walk():
        for region in op.regions:
            for block in region.blocks:
                values += block.args
        values += op.results
    return [(v.name_hint, [(position[u.operation], u.index) for u in v.uses]) for v in values]


def test_clone_is_xdsls_copy_with_regions_names_and_use_order():
    module = parse_module(MAP_PROGRAM)
    mine, theirs = clone(module), module.clone()
    assert str(mine) == str(theirs) == str(module)
    assert _uses(mine) == _uses(theirs)
    # a copy: no value of the original is used by it, nor the other way round
    originals = {v for op in module.walk() for v in op.results}
    assert not any(v in originals for op in mine.walk() for v in op.operands)
    assert _uses(module) == _uses(theirs)


def test_clone_maps_a_use_that_comes_before_its_definition():
    """A graph region may use a value before the op that defines it: the copy's use
    reads the copy's value, as xDSL's clone has it."""
    later = Op(result_types=[i32])
    first = Op(operands=[later.results[0]], result_types=[i32])
    module = ModuleOp([first, later])
    copy = clone(module)
    a, b = list(copy.body.block.ops)
    assert a.operands[0] is b.results[0]
    assert _uses(copy) == _uses(module.clone())
    assert len(list(later.results[0].uses)) == 1  # the original's uses are untouched


def test_clone_keeps_what_xdsls_copy_keeps_of_names_properties_and_locations():
    """The copy's ops are made directly (``fast.new_op``), not through xDSL's builder:
    the same fields, a name hint re-read as xDSL's setter reads it (``x_1_2`` stored as
    ``x_1`` copies as ``x``), properties and attributes copied, not shared."""
    from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr

    module = parse_module(MAP_PROGRAM)
    f = next(o for o in module.walk() if o.name == "func.func")
    mm = next(o for o in module.walk() if o.name == "dist.matmul")
    mm.results[0].name_hint = "x_1_2"
    mm.attributes["note"] = StringAttr("kept")
    mm.location = FileLineColLoc(StringAttr("a.mlir"), IntAttr(3), IntAttr(4))
    mine, theirs = clone(module), module.clone()
    assert str(mine) == str(theirs)
    for a, b, o in zip(mine.walk(), theirs.walk(), module.walk()):
        assert type(a) is type(b) and vars(a).keys() == vars(b).keys()
        assert a.properties == b.properties and a.properties is not o.properties
        assert a.attributes == b.attributes and a.attributes is not o.attributes
        assert a.location == b.location
        assert [r.name_hint for r in a.results] == [r.name_hint for r in b.results]
        assert [vars(r).keys() for r in a.results] == [vars(r).keys() for r in b.results]
    assert mm.results[0].name_hint == "x_1"
    assert next(o for o in mine.walk() if o.name == "dist.matmul").results[0].name_hint == "x"
    assert next(o for o in mine.walk() if o.name == "func.func").sym_name == f.sym_name


class _Node:
    """A cyclic object: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _tracked(obj) -> bool:
    """Whether a collection would scan ``obj`` (frozen objects are in no generation).
    Asked only where the objects alive before the test are frozen: the list is short."""
    return any(o is obj for o in gc.get_objects())


def test_collections_inside_scan_only_the_objects_made_inside_and_give_the_rest_back():
    before = _Node()
    with collections_of_new_objects():
        inside = _Node()
        assert not _tracked(before) and _tracked(inside)
        dead = weakref.ref(inside)
        del inside
        gc.collect()
        assert dead() is None  # garbage made inside is collected inside
        doomed = weakref.ref(before)
        del before  # garbage that was alive on entry: collected after, as usual
        gc.collect()
        assert doomed() is not None
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert doomed() is None


def test_collections_of_new_objects_leaves_the_callers_frozen_objects_frozen():
    gc.freeze()
    try:
        kept = _Node()
        with collections_of_new_objects():
            assert _tracked(kept)  # nothing more is frozen
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_set_aside_leaves_the_next_collection_the_objects_made_after_it():
    # the planner sets its plan aside before it lowers a copy to predict it: the
    # collection after scans the copy alone
    assert set_aside() is False and gc.get_freeze_count() == 0  # outside: nothing
    with collections_of_new_objects():
        kept = _Node()
        assert set_aside() is True
        assert not _tracked(kept)
        copy = _Node()
        dead = weakref.ref(copy)
        assert _tracked(copy)
        del copy
        collect_garbage()
        assert dead() is None
    assert gc.get_freeze_count() == 0 and _tracked(kept)


def test_a_collection_inside_sets_its_survivors_aside_until_leaving():
    # the planner collects after each plan it tunes: what survives one collection (its
    # plans, graph, integer programs) is not scanned again by the next
    with collections_of_new_objects():
        survivor = _Node()
        collect_garbage()
        assert not _tracked(survivor)
        later = _Node()
        dead = weakref.ref(later)
        del later
        collect_garbage()
        assert dead() is None
    assert gc.get_freeze_count() == 0  # given back with the rest
    collect_garbage()  # outside: a plain collection, nothing set aside
    assert gc.get_freeze_count() == 0
