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
from xdsl.ir import Block, Operation, SSAValue

from distir.dialects import dist
from distir.dialects.dist import TensorType, tensor_type
from distir.dialects.fast import clone, walk
from distir.dialects.placements import UNPLACED
from distir.frontends.partition import Lay, partition_decided
from distir.planner.graph import Graph
from distir.planner.meshes import Mesh
from distir.planner.strategies import Layout, Strategy, fixed_layout
from distir.synthesis.lower import meshes as placement_meshes

HW, MESH = "hw", "mesh"


class _Emitter:
    def __init__(self, block):
        self.block = block

    def emit(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op


def materialize(g: Graph, mesh: Mesh, chosen: Sequence[Strategy]) -> ModuleOp:
    """The plan as a dist/coll program (module doc); ``chosen[n]`` is node n's strategy."""
    return _partitioned(g, mesh, lambda n: chosen[n].results[0], chosen)


def annotated(g: Graph, mesh: Mesh, arguments: dict[int, Layout]) -> ModuleOp:
    """The program with only its arguments placed (``arguments``: argument node ->
    layout, replicated when absent; a fixed argument keeps its placement), everything
    else placed by the partitioner's propagation: a plan written by hand as an annotated
    program (``bench/plan.py``'s data, ZeRO and Megatron plans)."""
    from distir.planner.strategies import arg_strategies

    def layout_of(n: int) -> Layout:
        node = g.nodes[n]
        if node.fixed is not None:
            return arg_strategies(g, node, mesh.sizes)[0].results[0]
        return arguments.get(n, Layout.replicated(len(g.values[node.results[0]].shape)))

    return _partitioned(g, mesh, layout_of, None)


def _partitioned(g: Graph, mesh: Mesh, arg_layout, chosen: Sequence[Strategy] | None) -> ModuleOp:
    """The program in the partitioner's global form on ``mesh``, partitioned: with the
    decided ``chosen`` strategies, or (None) by propagation from the arguments."""
    from distir.frontends.partition import partition_module
    from distir.frontends.sdy import from_global, to_global

    naxes = len(mesh.sizes)
    hw, logical = placement_meshes(mesh.placement, HW, MESH)
    nf = clone(g.function)  # one copy; its values are retyped where they are
    block = nf.body.block
    old_ops = list(g.function.body.block.ops)
    new_ops = list(block.ops)
    unplaced = (UNPLACED,) * naxes
    nodes_of = {n.op: n for n in g.nodes if n.op is not None}
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    # every op the graph does not hold (boundary chains of fixed placements, identities
    # of a one-device program) goes; its results are the values they stand for
    value: dict[int, SSAValue] = {}
    lays: dict[SSAValue, Lay] = {}
    op_axes: dict[Operation, dict[int, int]] = {}
    for old, new in zip(old_ops, new_ops):
        node = nodes_of.get(old)
        if node is None:
            continue
        k = 0
        for r in new.results:
            if isinstance(r.type, TensorType):
                t = r.type
                r._type = tensor_type(t.get_shape(), t.element_type, MESH, unplaced)  # noqa: SLF001 (retyped in place, as sizes.substitute does)
                value[node.results[k]] = r
                if chosen is not None:
                    lays[r] = chosen[node.id].results[k].lay()
                k += 1
        if chosen is not None:
            op_axes[new] = chosen[node.id].op_axes()
    # the arguments, placed as chosen, joined into their logical values
    em = _Emitter(block)
    start = new_ops[0] if new_ops else ret
    arg_types = []
    chains: list[Operation] = []
    for a in block.args:
        t = a.type
        if not isinstance(t, TensorType):
            arg_types.append(t)
            continue
        n = g.arg_node[a.index]
        lay = arg_layout(n)
        a._type = tensor_type(t.get_shape(), t.element_type, MESH, tuple(lay.placements(naxes)))  # noqa: SLF001
        arg_types.append(a.type)
        em.block = _Before(block, start, chains)
        x: SSAValue = a
        for axis, kind in lay.partial:
            # partial sums become their logical value by the reduction they stand for
            x = em.emit(dist.ReduceOp.of(x, op=kind, axis=axis)).results[0]
        value[g.nodes[n].results[0]] = to_global(em, x)
    # every use of an old value now reads the value the graph says
    for old, new in zip(old_ops, new_ops):
        node = nodes_of.get(old)
        if node is None:
            continue
        if any(x is not None for x in node.operands):
            new.operands = [value[x] if x is not None else v for x, v in zip(node.operands, new.operands)]
    # results: placed from their logical values (an in-place result as its argument)
    em.block = _Before(block, ret, chains)
    outs = []
    for r in g.results:
        x = value[r.value]
        v = g.values[r.value]
        if r.inplace is not None and r.inplace in g.arg_node:
            target = arg_layout(g.arg_node[r.inplace]).placements(naxes)
            outs.append(from_global(em, x, target, "the function's result"))
        elif r.fixed is not None:
            target = fixed_layout(g, r.fixed, len(v.shape), naxes, f"result %{v.name}").placements(naxes)
            outs.append(from_global(em, x, target, "the function's result"))
        else:
            outs.append(x)
    ret.operands = outs
    # the ops the graph does not hold go, last first (their results have no use left)
    for old, new in reversed(list(zip(old_ops, new_ops))):
        if old in nodes_of or new is ret:
            continue
        new.detach()
        new.erase(safe_erase=False)
    nf.function_type = FunctionType.from_lists(arg_types, [o.type for o in outs])
    module = ModuleOp([hw, logical, nf])
    if chosen is not None:
        partition_decided(module, nf, lays, op_axes)
    else:
        partition_module(module, {})
    _drop_casts(nf)
    name_values(nf)
    return module


class _Before:
    """An emitter's block that inserts before an anchor op (and remembers what it
    inserted)."""

    def __init__(self, block: Block, anchor: Operation, log: list[Operation]):
        self.block, self.anchor, self.log = block, anchor, log

    def add_op(self, op: Operation) -> None:
        self.block.insert_op_before(op, self.anchor)
        self.log.append(op)



def _drop_casts(f: func.FuncOp) -> None:
    """``from_global`` writes a partial-sum target as a cast the partitioner resolves;
    none is left after it (checked)."""
    for op in walk(f):
        if isinstance(op, UnrealizedConversionCastOp):
            raise RuntimeError("a partial-sum result was left unresolved (a bug in distir-plan)")


def layouts_of(g: Graph, chosen: Sequence[Strategy]) -> dict[int, Layout]:
    """The layout of every value under the chosen strategies."""
    out: dict[int, Layout] = {}
    for node in g.nodes:
        for k, r in enumerate(node.results):
            out[r] = chosen[node.id].results[k]
    return out


SHORT = {"all_reduce": "ar", "reduce_scatter": "rs", "all_gather": "ag", "all_to_all": "a2a", "broadcast": "bc", "take_slice": "ts"}


def name_values(f: func.FuncOp) -> None:
    """Give every value a name of its own (``%ag3``: a value an all_gather made; a
    second ``%x`` becomes ``%x1``), so that schedules name each collective the
    partitioner inserted (``targets=ag3``) the same way in the plan, in the tuner's
    programs and in the pipelines it composes (passes derive the names of the values
    they make from these: ``%ag3_rs``)."""
    taken = {a.name_hint for a in f.body.block.args if a.name_hint}
    count = 0
    for op in walk(f):
        if op is f:
            continue
        for r in op.results:
            hint = r.name_hint
            if hint is None or hint in taken:
                if hint is None:
                    kind = op.name.split(".", 1)[-1]
                    hint = SHORT.get(kind, kind.split("_")[0][:4] or "v")
                # (xDSL drops a name's ``_<digits>`` suffix: its printer's own)
                stem = hint.rstrip("0123456789")
                while f"{stem}{count}" in taken:
                    count += 1
                hint = f"{stem}{count}"
                count += 1
            r.name_hint = hint
            taken.add(hint)
