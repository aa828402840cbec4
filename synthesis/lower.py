"""Lowering P²'s placements and reduction programs into distir IR.

A placement becomes two meshes (DESIGN §2): the hardware hierarchy split into factor axes
and the logical parallelism axes as a view of them::

    dist.mesh @hw shape = [2, 2, 2, 8] axes = ["node_p0", "node_p1", "gpu_p0", "gpu_p1"]
    dist.mesh @logical shape = [4, 16] axes = ["p0", "p1"] view @hw [[0, 2], [1, 3]]

A program becomes one function over ``@logical`` that moves the value to ``@hw`` (``dist.
remesh``, no data moves), runs one ``coll`` op per instruction over the factor axes of
the levels its groups span, and moves the result back. ``InsideGroup``, ``Parallel(e)``
and ``Master(e)`` are choices of axes: the levels below the slice (InsideGroup), the
levels from e (exclusive) to the slice (Parallel, Master); Master is the collective on a
value held only by the ``at<0>`` ranks of the factor axes below the slice (DESIGN §3),
which is how distir's types tell it from Parallel. Reductions take ``root 0``,
ReduceScatter slices dim 0. A Broadcast over axes where the value is already
``replicated`` (P²'s rule lets a member hold as much as the root) first forgets those
copies: ``dist.drop`` + ``dist.store rank 0`` on the axis, no data moves. Example,
Reduce-AllReduce-Broadcast on ``[[1,4],[4,4]]`` reducing axis 0::

    %h = dist.remesh %x : !dist.tensor<64xf32, @logical, [local, local]> -> !dist.tensor<64xf32, @hw, [local, local, local]>
    %s1 = coll.reduce sum %h root 0 axes [1] : ... [local, local, local] -> ... [local, at<0>, local]
    ...

Each op is built with the type its rule infers (the rule the verifier applies), so a
program the types reject fails at the op that breaks its rule, with that diagnostic;
``check_form`` adds P²'s form (which ranks hold the value) and the last type must be the
all_reduce's. ``reference`` is the one ``coll.all_reduce`` every program must equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, FunctionType, ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from distir.dialects import coll, dist, layout
from distir.dialects.placements import LOCAL, REPLICATED, At, Replicated
from distir.synthesis.hierarchy import MASTER, Instruction, SynthesisHierarchy
from distir.synthesis.matrices import DevicePlacement

COLL_OPS = {
    "AllReduce": (coll.AllReduceOp, {"op": "sum"}),
    "ReduceScatter": (coll.ReduceScatterOp, {"op": "sum", "dim": 0}),
    "AllGather": (coll.AllGatherOp, {}),
    "Reduce": (coll.ReduceOp, {"op": "sum", "root": 0}),
    "Broadcast": (coll.BroadcastOp, {}),
}


def meshes(placement: DevicePlacement, hw: str = "hw", logical: str = "logical") -> tuple[dist.MeshOp, dist.MeshOp]:
    """The hardware mesh (factor axes) and the logical mesh (a view of it)."""
    hw_mesh = dist.MeshOp.create_mesh(hw, placement.sizes, [f.name for f in placement.factors])
    views = [placement.axis_factors(i) for i in range(len(placement.axes))]
    for i, v in enumerate(views):
        if not v:
            raise ValueError(f"axis {i} of size 1 has no factor axis")
    log_mesh = dist.MeshOp.create_mesh(logical, placement.axes, [f"p{i}" for i in range(len(placement.axes))], view=hw, factors=views)
    return hw_mesh, log_mesh


def instruction_axes(hierarchy: SynthesisHierarchy, ins: Instruction) -> tuple[list[int], list[int]]:
    """(group axes, axes fixed at 0 by Master) over the placement's factor axes."""
    group = [k for j in hierarchy.varying_levels(ins.slice, ins.form) for k in hierarchy.levels[j].factors]
    inner = [k for j in hierarchy.inner_levels(ins.slice, ins.form) for k in hierarchy.levels[j].factors]
    return group, inner


def check_form(placements: Sequence, group: Sequence[int], inner: Sequence[int], kind: str, scope: Sequence[int] | None = None) -> str | None:
    """Why a collective over ``group`` on a value with ``placements`` is not P²'s form
    ``kind`` (None if it is): Master needs the value held only by the ranks at 0 on the
    axes below the slice; InsideGroup and Parallel need every group to hold it. Only the
    axes in ``scope`` (the synthesis hierarchy's; default all) count."""
    scope = set(range(len(placements)) if scope is None else scope)
    held_at = {a for a, p in enumerate(placements) if isinstance(p, At) and a not in group and a in scope}
    if kind == MASTER:
        if held_at != set(inner):
            return f"Master needs the value at<0> exactly on the axes below the slice {sorted(inner)}, it is at<> on {sorted(held_at)}"
    elif held_at:
        return f"{kind} needs every group to hold the value, but it is held only at<> on axes {sorted(held_at)}"
    return None


@dataclass
class Lowered:
    """A lowered program: ``func`` when every op verifies, else ``error`` (the failing
    step and the rule it breaks)."""

    func: func.FuncOp | None
    error: str | None = None


def _forgotten_copies(t: dist.TensorType, ins: Instruction, group: Sequence[int]) -> list[int]:
    """Axes of a Broadcast's group on which the value is already replicated (when some
    other axis of the group holds it at<0>): their copies are forgotten first."""
    if ins.collective != "Broadcast":
        return []
    pl = t.get_placements()
    if not any(isinstance(pl[a], At) for a in group):
        return []
    return [a for a in group if isinstance(pl[a], Replicated)]


def typed_step(placement: DevicePlacement, hierarchy: SynthesisHierarchy, t: dist.TensorType, ins: Instruction) -> dist.TensorType | str:
    """The type after ``ins`` by distir's rules (the ops' ``infer``, which their verifier
    applies, plus P²'s form), or why the rules reject it."""
    group, inner = instruction_axes(hierarchy, ins)
    scope = [k for lv in hierarchy.levels for k in lv.factors]
    bad = check_form(t.get_placements(), group, inner, ins.form.kind, scope)
    if bad:
        return bad
    sizes = placement.sizes
    try:
        for a in _forgotten_copies(t, ins, group):
            (t,) = dist.DropOp.infer([t], sizes, {"axis": a})
            (t,) = dist.StoreOp.infer([t], sizes, {"axis": a, "rank": 0})
        cls, options = COLL_OPS[ins.collective]
        (r,) = cls.infer([t], sizes, {**options, "axes": group})
    except dist.RuleError as e:
        return f"'{COLL_OPS[ins.collective][0].name}' op {e}"
    why = layout.divisibility_error(list(r.get_shape()), r.get_placements(), list(sizes))
    return f"'{COLL_OPS[ins.collective][0].name}' op {why}" if why else r


def _tensor(shape: Sequence[int], element_type: Attribute, mesh: str, placements) -> dist.TensorType:
    return dist.TensorType(list(shape), element_type, mesh, list(placements))


def reference(placement: DevicePlacement, reduce_axes: Sequence[int], shape: Sequence[int], element_type: Attribute | None = None, name: str = "allreduce") -> func.FuncOp:
    """``coll.all_reduce sum`` over the logical ``reduce_axes``."""
    et = element_type or Float32Type()
    tin = _tensor(shape, et, "logical", [LOCAL] * len(placement.axes))
    block = Block(arg_types=[tin])
    block.args[0].name_hint = "x"
    ar = coll.AllReduceOp.of(block.args[0], sizes=placement.axes, op="sum", axes=sorted(reduce_axes))
    ar.result.name_hint = "y"
    block.add_ops([ar, func.ReturnOp(ar.result)])
    return func.FuncOp(name, FunctionType.from_lists([tin], [ar.result.type]), Region(block))


def emit_program(
    placement: DevicePlacement,
    hierarchy: SynthesisHierarchy,
    program: Sequence[Instruction],
    value: SSAValue,
    op_kind: str = "sum",
    base: str = "s",
) -> tuple[list[Operation], SSAValue] | str:
    """The ops of ``program`` applied to ``value`` (on the hardware mesh, ``local`` on the
    reduction factor axes), and the last value; or why distir's rules reject a step."""
    sizes = placement.sizes
    ops: list[Operation] = []
    for i, ins in enumerate(program, start=1):
        group, _ = instruction_axes(hierarchy, ins)
        t = value.type
        assert isinstance(t, dist.TensorType)
        checked = typed_step(placement, hierarchy, t, ins)
        if isinstance(checked, str):
            return f"step {i} ({ins.collective} over axes {group}): {checked}"
        for a in _forgotten_copies(t, ins, group):
            drop = dist.DropOp.of(value, sizes=sizes, axis=a)
            store = dist.StoreOp.of(drop.result, sizes=sizes, axis=a, rank=0)
            ops += [drop, store]
            value = store.result
        cls, options = COLL_OPS[ins.collective]
        if "op" in options:
            options = {**options, "op": op_kind}
        op = cls.of(value, sizes=sizes, axes=group, **options)
        op.result.name_hint = f"{base}{i}"
        ops.append(op)
        value = op.result
    return ops, value


def lower_program(
    placement: DevicePlacement,
    hierarchy: SynthesisHierarchy,
    program: Sequence[Instruction],
    reduce_axes: Sequence[int],
    shape: Sequence[int],
    element_type: Attribute | None = None,
    name: str = "program",
) -> Lowered:
    """``program`` as a distir function equal to ``reference`` (module docstring)."""
    et = element_type or Float32Type()
    n_axes = len(placement.axes)
    tin = _tensor(shape, et, "logical", [LOCAL] * n_axes)
    tout = _tensor(shape, et, "logical", [REPLICATED if i in set(reduce_axes) else LOCAL for i in range(n_axes)])
    block = Block(arg_types=[tin])
    block.args[0].name_hint = "x"
    sizes = placement.sizes
    h = dist.RemeshOp.make([block.args[0]], [_tensor(shape, et, "hw", [LOCAL] * len(sizes))])
    h.result.name_hint = "h"
    emitted = emit_program(placement, hierarchy, program, h.result)
    if isinstance(emitted, str):
        return Lowered(None, emitted)
    ops, value = emitted
    want = [REPLICATED if placement.factors[k].axis in set(reduce_axes) else LOCAL for k in range(len(sizes))]
    got = value.type.get_placements()  # type: ignore[union-attr]
    if not layout.same_layout(list(got), want):
        return Lowered(None, f"the program ends with {layout.format_placements(got)}, not the all_reduce's {layout.format_placements(want)}")
    back = dist.RemeshOp.make([value], [tout])
    back.result.name_hint = "y"
    block.add_ops([h, *ops, back, func.ReturnOp(back.result)])
    return Lowered(func.FuncOp(name, FunctionType.from_lists([tin], [tout]), Region(block)))


def module_of(placement: DevicePlacement, functions: Sequence[func.FuncOp]) -> ModuleOp:
    """A module with the placement's meshes and ``functions``."""
    hw, lg = meshes(placement)
    return ModuleOp([hw, lg, *functions])


def tensor_length(placement: DevicePlacement, reduce_axes: Sequence[int], at_least: int = 1) -> int:
    """The smallest multiple of the reduction group size that is >= ``at_least``: a 1-D
    length every ReduceScatter of a program can slice."""
    g = 1
    for f in placement.factors:
        if f.axis in set(reduce_axes):
            g *= f.size
    return -(-at_least // g) * g


def typed_programs(placement: DevicePlacement, hierarchy: SynthesisHierarchy, reduce_axes: Sequence[int], size_limit: int = 5) -> set[tuple[Instruction, ...]]:
    """Every program of at most ``size_limit`` instructions that distir's rules accept
    (``typed_step`` at every step) and that ends with the all_reduce's type: the
    counterpart, by types, of ``language.enumerate_programs``."""
    from distir.synthesis.language import instructions

    et = Float32Type()
    length = tensor_length(placement, reduce_axes)
    start = _tensor([length], et, "hw", [LOCAL] * len(placement.sizes))
    want = [REPLICATED if f.axis in set(reduce_axes) else LOCAL for f in placement.factors]
    frontier: dict = {start: [()]}
    found: set = set()
    for _ in range(size_limit):
        nxt: dict = {}
        for t, prefixes in frontier.items():
            for ins in instructions(hierarchy):
                r = typed_step(placement, hierarchy, t, ins)
                if isinstance(r, str):
                    continue
                progs = [p + (ins,) for p in prefixes]
                if layout.same_layout(list(r.get_placements()), want):
                    found.update(progs)
                else:
                    nxt.setdefault(r, []).extend(progs)
        frontier = nxt
    return found
