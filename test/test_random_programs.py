"""Random programs (``support/programs.py``) check the interpreter's internal consistency:

* every collective means its functional-primitive definition: the program with every
  collective expanded into primitives (fused collectives unfused, ``coll.overlap``
  inlined first) gives the same outputs on the same inputs;
* every result is held exactly as its placements say (the ranks that hold it, the
  buffer shapes, the dtype), and all replicas of a block agree (checked while the
  outputs are collected).

The expansion is written here with the dialect builders, independently of the
``expand-collectives`` pass, following the definitions of DESIGN §3 over several axes:
``all_reduce = repl(reduce(x))``, ``reduce_scatter = slice(reduce(x))``, ``all_gather =
repl(join(x))``, ``reduce = store(reduce(x), root)``, ``broadcast = repl(load(x))``,
``all_to_all = slice(join(x))``, ``send = store(load(x), to)`` (``permute`` is no
composition of them and stays); over axes [a, b] the
group rank is row-major over the axes as listed, so slices and stores go in listed
order (a outermost) and joins innermost first (b, then a). An integer ``avg`` over several
axes is expanded as sums over each axis followed by one truncating division by the group
size (averaging axis by axis would truncate each partial average).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from support.programs import COLLECTIVES, KINDS, UNEVEN_MESHES, examples, programs
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, IntegerType, ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue

from distir.dialects import coll, dist, layout
from distir.dialects.dist import MeshOp, TensorType
from distir.runtime import npz, run_function
from distir.runtime.equivalence import compare_outputs, program_precision
from distir.runtime.values import DistValue, numpy_dtype, rank_coords, stores

RANDOM_PROGRAMS = examples(500)
UNEVEN_PROGRAMS = examples(200)
# Collectives drawn three times as often as the other kinds.
WEIGHTED = KINDS + tuple(f"coll.{k}" for k in COLLECTIVES) * 2


def _primitive_chain(op: Operation, x: SSAValue, opts: dict, result_type, sizes) -> list[Operation]:
    """Primitive ops computing collective ``op`` (a class) on ``x``; the last one is given
    ``result_type`` (the same layout, spelled as the original)."""
    axes = list(opts["axes"])
    chain: list[Operation] = []

    def step(cls, **kw):
        v = chain[-1].results[0] if chain else x
        chain.append(cls.of(v, sizes=sizes, **kw))

    def digits(rank):
        return layout.at_digits(rank, [sizes[a] for a in axes])

    if op in (coll.AllReduceOp, coll.ReduceScatterOp, coll.ReduceOp):
        elt = x.type.element_type
        exact_avg = opts["op"] == "avg" and len(axes) > 1 and isinstance(elt, IntegerType)
        for a in axes:
            step(dist.ReduceOp, op="sum" if exact_avg else opts["op"], axis=a)
        if exact_avg:
            chain.append(_divide(chain[-1].results[0], math.prod(sizes[a] for a in axes)))
    if op in (coll.AllGatherOp, coll.AllToAllOp):
        for a in reversed(axes):
            step(dist.JoinOp, axis=a)
    if op in (coll.BroadcastOp, coll.SendOp):
        for a in axes:
            step(dist.LoadOp, axis=a)
    if op in (coll.AllReduceOp, coll.AllGatherOp, coll.BroadcastOp):
        for a in axes:
            step(dist.ReplOp, axis=a)
    if op in (coll.ReduceScatterOp, coll.AllToAllOp):
        for a in axes:
            step(dist.SliceOp, dim=opts["dim"], axis=a)
    if op in (coll.ReduceOp, coll.SendOp):
        target = opts["root"] if op is coll.ReduceOp else opts["to"]
        for a, d in zip(axes, digits(target)):
            step(dist.StoreOp, rank=d, axis=a)
    last = chain[-1]
    assert layout.same_layout(last.results[0].type.get_placements(), result_type.get_placements())
    chain[-1] = type(last).make([last.operands[0]], [result_type], **last.options())
    return chain


def _divide(v: SSAValue, n: int) -> Operation:
    """``dist.map`` dividing an integer tensor by ``n``, truncating toward zero."""
    elt = v.type.element_type
    body = Block(arg_types=[elt])
    k = arith.ConstantOp(IntegerAttr(n, elt))
    q = arith.DivSIOp(body.args[0], k.result)
    body.add_ops([k, q, dist.YieldOp.build(operands=[[q.result]])])
    return dist.MapOp.make([v], [v.type], [Region(body)])


def _sizes(module: ModuleOp, t: TensorType, ranks: int) -> tuple[int, ...]:
    for m in module.ops:
        if isinstance(m, MeshOp) and m.mesh_name == t.mesh_name:
            return m.grid(ranks).sizes
    raise AssertionError(f"no mesh @{t.mesh_name}")


def _replace(op: Operation, new_ops: list[Operation], new_values: list[SSAValue]) -> None:
    block = op.parent_block()
    assert block is not None
    block.insert_ops_before(new_ops, op)
    for r, v in zip(op.results, new_values, strict=True):
        r.replace_all_uses_with(v)
    op.detach()
    op.erase()


def _inline(block: Block, before: Operation, args: list[SSAValue]) -> list[SSAValue]:
    """Move ``block``'s ops before ``before`` (block args -> ``args``); returns the values
    its terminator yields."""
    for a, v in zip(block.args, args, strict=True):
        a.replace_all_uses_with(v)
    target = before.parent_block()
    assert target is not None
    yields: list[SSAValue] = []
    for inner in list(block.ops):
        if isinstance(inner, coll.YieldOp):
            yields = list(inner.operands)
            break
        inner.detach()
        target.insert_op_before(inner, before)
    return yields


def expand(module: ModuleOp, ranks: int) -> ModuleOp:
    """Inline overlaps, unfuse fused collectives, expand every collective to primitives."""
    changed = True
    while changed:
        changed = False
        for op in list(module.walk()):
            if isinstance(op, coll.OverlapOp):
                ys = _inline(op.body.block, op, [])
                for r, v in zip(op.results, ys, strict=True):
                    r.replace_all_uses_with(v)
                op.detach()
                op.erase()
                changed = True
                break
            if isinstance(op, coll.FusedCollectiveOp):
                block = op.body.block
                args: list[SSAValue] = list(op.operands)
                if op.FIRST is not None:
                    opts = op.first_options()
                    firsts = [op.FIRST.make([x], [a.type], **opts) for x, a in zip(op.operands, block.args)]
                    op.parent_block().insert_ops_before(firsts, op)  # type: ignore[union-attr]
                    args = [f.results[0] for f in firsts]
                ys = _inline(block, op, args)
                outs = []
                for y, t, flag in zip(ys, op.result_types, op.gather_flags()):
                    if flag:
                        fin = op.FINISH.make([y], [t], axes=op.option("axes"))  # type: ignore[union-attr]
                        op.parent_block().insert_op_before(fin, op)  # type: ignore[union-attr]
                        y = fin.results[0]
                    outs.append(y)
                _replace(op, [], outs)
                changed = True
                break
            if isinstance(op, coll.CollectiveOp) and not isinstance(op, coll.PermuteOp):  # no primitives make a permute
                opts = op.options()
                chain = _primitive_chain(type(op), op.operands[0], opts, op.result.type, _sizes(module, op.result.type, ranks))
                _replace(op, chain, [chain[-1].results[0]])
                changed = True
                break
    return module


def check_held_as_placed(value) -> None:
    """The ranks filing a buffer, its shape and dtype are what the type says."""
    if not isinstance(value, DistValue):
        return
    placements = value.placements
    coords = rank_coords(value.grid)
    want_ranks = [r for r in range(value.grid.ranks) if stores(placements, coords[r])]
    assert sorted(value.buffers) == want_ranks
    for r, b in value.buffers.items():
        shape = layout.local_shape(value.shape, placements, value.grid.sizes, coords[r])  # the rank's own block
        assert b.shape == shape and b.dtype == numpy_dtype(value.type.element_type)


@settings(
    max_examples=RANDOM_PROGRAMS,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(programs(kinds=WEIGHTED))
def test_collectives_mean_their_primitive_expansion(prog):
    original = run_function(prog.module(), prog.func, None, prog.ranks, seed=7)
    for v in original.results:
        check_held_as_placed(v)
    expanded = expand(prog.module(), prog.ranks)
    expanded.verify()
    assert not any(op.name.startswith("coll.") and op.name != "coll.permute" for op in expanded.walk())
    primitive = run_function(expanded, prog.func, original.inputs, prog.ranks)
    precision = program_precision(*npz.functions(expanded))
    c = compare_outputs(primitive.outputs, original.outputs, "expanded", "original", precision)
    assert c, f"{c.message}\n{prog.text}"


@settings(
    max_examples=UNEVEN_PROGRAMS,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(programs(kinds=WEIGHTED, meshes=UNEVEN_MESHES, free_dims=True))
def test_collectives_mean_their_primitive_expansion_on_uneven_blocks(prog):
    """The same on dims of 0, 1 and primes over 1, 2, 3, 5, 6, 7 and 8 ranks: blocks of
    ceil(s/n), the last ranks holding fewer elements or none."""
    test_collectives_mean_their_primitive_expansion.hypothesis.inner_test(prog)  # type: ignore[attr-defined]


def test_expansion_of_a_known_program_is_primitives_only():
    # A fixed program, to show what the expansion produces (and that it can fail).
    text = """dist.mesh @grid shape = [2, 2]
func.func @f(%x: !dist.tensor<8xf32, @grid, [local, local]>) -> !dist.tensor<8xf32, @grid, [sliced<0, 1>, sliced<0, 0>]> {
  %y = coll.reduce_scatter sum %x dim 0 axes [1, 0] : !dist.tensor<8xf32, @grid, [local, local]> -> !dist.tensor<8xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
  func.return %y : !dist.tensor<8xf32, @grid, [sliced<0, 1>, sliced<0, 0>]>
}"""
    from distir.dialects.context import parse_module

    module = expand(parse_module(text), 4)
    names = [op.name for op in module.walk() if op.name.startswith("dist.") and op.name != "dist.mesh"]
    assert names == ["dist.reduce", "dist.reduce", "dist.slice", "dist.slice"]
    x = np.arange(32, dtype=np.float32).reshape(2, 2, 8)
    a = run_function(text, "f", {"x": x}, 4)
    b = run_function(module, "f", {"x": x}, 4)
    np.testing.assert_array_equal(a.outputs[0], b.outputs[0])
    # rank (a0, a1) holds block a1 * 2 + a0 of the sum: group order follows `axes [1, 0]`
    total = x.sum(axis=(0, 1))
    for r, buf in b.results[0].buffers.items():
        a0, a1 = divmod(r, 2)
        np.testing.assert_array_equal(buf, total[(a1 * 2 + a0) * 2 : (a1 * 2 + a0) * 2 + 2])
