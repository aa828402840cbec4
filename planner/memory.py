"""Memory per rank of a placed program, from the program.

Every argument buffer lives through the step (an in-place result is written into its
argument's buffer); every other value lives from the op that defines it to its last use
in program order (an overlap's or a fused collective's inner values inside it). The
peak is the largest sum over program points, per rank: each buffer's size is its
block's (``layout.local_shape``; a ``local`` value is whole).

The arguments are told apart by their role in the step, from the program alone:
**optimizer state** is an argument written in place whose new value feeds another
in-place result (AdamW's moments feed the parameter update), **parameters** the other
arguments written in place, **gradients** the values an update reads that are neither
(an argument, or values computed by the step: live from the backward pass to the
update), **inputs** the remaining arguments; **activations** are the other values live
at the peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from distir.dialects import layout
from distir.dialects.dist import TensorType, element_bytes, resolve_grids
from distir.dialects.fast import walk

CATEGORIES = ("parameters", "gradients", "optimizer state", "inputs", "activations")


@dataclass
class Memory:
    """Bytes per rank (the largest rank's) by category at the peak, and the total."""

    total: int
    by_category: dict[str, int] = field(default_factory=dict)
    peak_at: str = ""

    def describe(self) -> str:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.by_category.items() if v)
        return f"{format_bytes(self.total)} ({parts})"


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _bytes(v: SSAValue, grids) -> int:
    t = v.type
    if not isinstance(t, TensorType):
        return 0
    sizes = grids[t.mesh_name].sizes
    return math.prod(layout.local_shape(t.get_shape(), t.get_placements(), sizes)) * element_bytes(t.element_type)


def roles(f: func.FuncOp) -> dict[SSAValue, str]:
    """The role of each argument, and of the values the optimizer update reads that
    are computed by the step (gradients): module doc."""
    ret = f.body.block.last_op
    if not isinstance(ret, func.ReturnOp):
        return {}
    inplace: dict[int, SSAValue] = {}
    for i, v in enumerate(ret.operands):
        attrs = f.res_attrs.data[i].data if f.res_attrs is not None else {}
        if "dist.inplace" in attrs:
            inplace[attrs["dist.inplace"].value.data] = v  # type: ignore[attr-defined]
    results = set(inplace.values())
    # the update: values that flow only into in-place results (backwards from them)
    update: set[Operation] = set()
    work = [v.owner for v in results if isinstance(v.owner, Operation)]
    while work:
        op = work.pop()
        if op in update:
            continue
        if all(u.operation in update or u.operation is ret for r in op.results for u in r.uses):
            update.add(op)
            for x in op.operands:
                if isinstance(x.owner, Operation) and x.owner not in update:
                    work.append(x.owner)
    def feeds_other(result: SSAValue) -> bool:
        seen, todo = set(), [u.operation for u in result.uses]
        while todo:
            op = todo.pop()
            if op in seen or op is ret:
                continue
            seen.add(op)
            for r in op.results:
                if r in results and r is not result:
                    return True
                todo += [u.operation for u in r.uses]
        return False

    out: dict[SSAValue, str] = {}
    args = f.body.block.args
    for i, a in enumerate(args):
        if i in inplace:
            out[a] = "optimizer state" if feeds_other(inplace[i]) else "parameters"
    for op in update:
        for x in op.operands:
            if isinstance(x.type, TensorType) and x not in out and (x.owner not in update):
                out[x] = "gradients"
    for a in args:
        out.setdefault(a, "inputs")
    return out


def memory_per_rank(module: ModuleOp, ranks: int, func_name: str | None = None) -> Memory:
    """The peak memory of one rank (module doc)."""
    f = next(o for o in module.ops if isinstance(o, func.FuncOp) and o.body.blocks and (func_name is None or o.sym_name.data == func_name))
    grids = resolve_grids(module, ranks)
    role = roles(f)
    block = f.body.block
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    end = len(ops)
    last: dict[SSAValue, int] = {}

    for region in f.regions:  # each op nested in f at the position of its top-level op
        for b in region.blocks:
            for op in b.ops:
                p = position.get(op, end)
                for inner in walk(op) if op.regions else (op,):
                    for x in inner.operands:
                        last[x] = max(last.get(x, -1), p)
    base: dict[str, int] = {c: 0 for c in CATEGORIES}
    for a in block.args:
        base[role.get(a, "inputs")] += _bytes(a, grids)
    ret = block.last_op
    inplace_results = set()
    if isinstance(ret, func.ReturnOp) and f.res_attrs is not None:
        for i, v in enumerate(ret.operands):
            if "dist.inplace" in f.res_attrs.data[i].data:
                inplace_results.add(v)
    delta_act = [0] * (end + 2)
    delta_grad = [0] * (end + 2)
    for i, op in enumerate(ops):
        for r in op.results:
            if r in inplace_results:
                continue
            n = _bytes(r, grids)
            stop = last.get(r, i)
            d = delta_grad if role.get(r) == "gradients" else delta_act
            d[i] += n
            d[stop + 1] -= n
    best, best_at, act, grad = sum(base.values()), -1, 0, 0
    split = (0, 0)
    for i in range(end):
        act += delta_act[i]
        grad += delta_grad[i]
        total = sum(base.values()) + act + grad
        if total > best:
            best, best_at, split = total, i, (act, grad)
    by = dict(base)
    by["activations"] += split[0]
    by["gradients"] += split[1]
    at = ops[best_at].name if best_at >= 0 else "the start"
    return Memory(best, {c: by[c] for c in CATEGORIES}, at)
