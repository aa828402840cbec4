"""A plan as a program: the function on the chosen mesh, every value placed as the
integer program chose, the collectives inserted by the partitioner.

``materialize(graph, mesh, strategies)`` writes the program in the partitioner's global
form on the mesh (``dist.mesh @hw``: the hardware split into the placement's factor
axes; ``dist.mesh @mesh``: the logical axes, a view of it, as P²'s placements are
written, DESIGN §2): each argument placed as chosen and joined into its logical value,
the program's ops on logical values, each result placed from its logical value (an
in-place result as its argument). It then hands the layout of every value and the
factor of every mesh axis of every op to ``partition.partition_decided``, which emits
the ops on placed values and the collectives of its transition table between them:
the planner decides, the partitioner materialises, one rule for both. The function
keeps its name, its argument names and its results' attributes, so the same inputs run
the plan and the program it came from.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, UnrealizedConversionCastOp
from xdsl.ir import Block, Operation, Region, SSAValue

from distir.dialects import dist
from distir.dialects.dist import TensorType
from distir.dialects.placements import UNPLACED
from distir.frontends.partition import Lay, partition_decided
from distir.planner.graph import Graph
from distir.planner.meshes import Mesh
from distir.planner.strategies import Layout, Strategy, fixed_layout
from distir.synthesis.lower import meshes as placement_meshes

HW, MESH = "hw", "mesh"


class _Emitter:
    def __init__(self, block: Block):
        self.block = block

    def emit(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op


def materialize(g: Graph, mesh: Mesh, chosen: Sequence[Strategy]) -> ModuleOp:
    """The plan as a dist/coll program (module doc); ``chosen[n]`` is node n's strategy."""
    from distir.frontends.sdy import from_global, to_global

    naxes = len(mesh.sizes)
    hw, logical = placement_meshes(mesh.placement, HW, MESH)
    f = g.function
    old_args = list(f.body.block.args)
    arg_types = []
    for a in old_args:
        t = a.type
        if isinstance(t, TensorType):
            n = g.arg_node[a.index]
            arg_types.append(TensorType(t.get_shape(), t.element_type, MESH, chosen[n].results[0].placements(naxes)))
        else:
            arg_types.append(t)
    block = Block(arg_types=arg_types)
    em = _Emitter(block)
    for new, old in zip(block.args, old_args):
        new.name_hint = old.name_hint
    value: dict[int, SSAValue] = {}
    for a, new in zip(old_args, block.args):
        if isinstance(a.type, TensorType):
            n = g.nodes[g.arg_node[a.index]]
            value[n.results[0]] = to_global(em, new)
    scalars = {old: new for old, new in zip(old_args, block.args) if not isinstance(old.type, TensorType)}
    lays: dict[SSAValue, Lay] = {}
    op_axes: dict[Operation, dict[int, int]] = {}
    unplaced = [UNPLACED] * naxes
    for node in g.nodes:
        if node.is_arg:
            continue
        op = node.op
        assert op is not None
        operands = []
        for x, v in zip(node.operands, op.operands):
            operands.append(value[x] if x is not None else scalars.get(v, v))
        types = [TensorType(r.type.get_shape(), r.type.element_type, MESH, unplaced) if isinstance(r.type, TensorType) else r.type for r in op.results]
        new = type(op).make(operands, types, [r.clone() for r in op.regions], dict(op.attributes), **op.options())
        em.emit(new)
        s = chosen[node.id]
        k = 0
        for old_r, new_r in zip(op.results, new.results):
            new_r.name_hint = old_r.name_hint
            if isinstance(old_r.type, TensorType):
                value[node.results[k]] = new_r
                lays[new_r] = s.results[k].lay()
                k += 1
        op_axes[new] = s.op_axes()
    outs = []
    for r in g.results:
        x = value[r.value]
        v = g.values[r.value]
        if r.inplace is not None and r.inplace in g.arg_node:
            target = chosen[g.arg_node[r.inplace]].results[0].placements(naxes)
            outs.append(from_global(em, x, target, "the function's result"))
        elif r.fixed is not None:
            target = fixed_layout(g, r.fixed, len(v.shape), naxes, f"result %{v.name}").placements(naxes)
            outs.append(from_global(em, x, target, "the function's result"))
        else:
            outs.append(x)
    block.add_op(func.ReturnOp(*outs))
    nf = func.FuncOp(f.sym_name.data, FunctionType.from_lists(arg_types, [o.type for o in outs]), Region(block), arg_attrs=f.arg_attrs, res_attrs=f.res_attrs)
    module = ModuleOp([hw, logical, nf])
    partition_decided(module, nf, lays, op_axes)
    _drop_casts(nf)
    name_values(nf)
    return module


SHORT = {"all_reduce": "ar", "reduce_scatter": "rs", "all_gather": "ag", "all_to_all": "a2a", "broadcast": "bc", "take_slice": "ts"}


def name_values(f: func.FuncOp) -> None:
    """Give every unnamed value a name (``%ag3``: the third value an all_gather made), so
    that schedules can name the collectives the partitioner inserted
    (``targets=ag3``), in the plan and in the tuner's pipelines alike."""
    taken = {v.name_hint for op in f.walk() for v in op.results if v.name_hint}
    taken |= {a.name_hint for a in f.body.block.args if a.name_hint}
    count = 0
    for op in f.body.block.ops:
        for r in op.results:
            if r.name_hint:
                continue
            stem = SHORT.get(op.name.split(".", 1)[-1], op.name.split(".", 1)[-1].split("_")[0][:4] or "v")
            while f"{stem}{count}" in taken:
                count += 1
            r.name_hint = f"{stem}{count}"
            taken.add(r.name_hint)
            count += 1


def _drop_casts(f: func.FuncOp) -> None:
    """``from_global`` writes a partial-sum target as a cast the partitioner resolves;
    none is left after it (checked)."""
    for op in f.walk():
        if isinstance(op, UnrealizedConversionCastOp):
            raise RuntimeError("a partial-sum result was left unresolved (a bug in distir-plan)")


def layouts_of(g: Graph, chosen: Sequence[Strategy]) -> dict[int, Layout]:
    """The layout of every value under the chosen strategies."""
    out: dict[int, Layout] = {}
    for node in g.nodes:
        for k, r in enumerate(node.results):
            out[r] = chosen[node.id].results[k]
    return out
