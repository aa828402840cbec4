"""``fuse-allreduce{targets=...}``: CoCoNet's AllReduce fuse. A ReduceScatter, the
computations on its slices and the AllGathers of their results become one
``coll.fused_all_reduce`` (CoCoNet's FusedAllReduce, ``fuse(RS-C-AG)``)::

    all_gather(f(reduce_scatter(x)))  =  fused_all_reduce(x) { f }

The region runs on this rank's reduced slice (its block argument); it takes every
computation that reads the slices (maps, dropout, cast, matmul, reduce_tensor, inner
all_reduces such as LAMB's norm combination) and the take_slices of outer replicated
values that only those computations read. Each AllGather (over the ReduceScatter's
axes) of a region value becomes a result with ``gather`` true; a region value used
elsewhere stays sliced (``gather`` false: ``m`` and ``v`` after ``slice-state``). Ops
that read region values but cannot run in the region (a send, a gathered value) move
after the fused op. Valid when the dependencies allow it (CoCoNet: "only if the
dependencies in the DFG after fusion are preserved"), which the plan guarantees.

``targets`` names ReduceScatters (``%avg_rs``); with none, every ReduceScatter with at
least one AllGather of its computed slices. A named ReduceScatter without such an
AllGather is an error. Example (Adam after ``slice-state``)::

    %avg_rs = coll.reduce_scatter avg %g dim 0 : ... [local] -> ... [sliced<0>]
    %p_s = dist.take_slice %p dim 0 : ...
    %p1_s, %m1_s, %v1_s = dist.map(%p_s, %m, %v, %avg_rs, ...) ...
    %p1 = coll.all_gather %p1_s : ...
    func.return %p1, %m1_s, %v1_s : ...

becomes::

    %p1, %m1_s, %v1_s = coll.fused_all_reduce avg %g dim 0 gather [true, false, false] : ... -> (... [replicated], ... [sliced<0>], ... [sliced<0>]) {
    ^bb0(%avg_rs: ... [sliced<0>]):
      %p_s = dist.take_slice %p dim 0 : ...
      %p1_s, %m1_s, %v1_s = dist.map(%p_s, %m, %v, %avg_rs, ...) ...
      coll.yield %p1_s, %m1_s, %v1_s : ...
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll
from distir.passes.fusion import ancestor_in, forward_plan, fuse
from distir.passes.support import BlockOrder, Targets, apply_all_or_nothing, fail, returns_split


def fuse_reduce_scatter(rs: coll.ReduceScatterOp, order: BlockOrder | None = None) -> str | None:
    """Fuse ``rs``, the computations on its slices and their AllGathers; return why
    not, or None when done."""
    axes = list(rs.axes)
    order = order or BlockOrder()
    plan = forward_plan(rs, coll.AllGatherOp, axes, order)
    if not plan.finishes:
        return f"no coll.all_gather over axes {axes} of its result or of computations on it"
    region_ops = set(plan.region)
    finishes = set(plan.finishes)
    yields: list[SSAValue] = []
    flags: list[bool] = []
    types = []
    replaced: list[SSAValue] = []
    for ag in plan.finishes:
        yields.append(ag.operands[0])
        flags.append(True)
        types.append(ag.results[0].type)
        replaced.append(ag.results[0])
    block = plan.block
    for v in [rs.result, *(r for op in plan.region for r in op.results)]:
        outside = [
            u for u in v.uses if ancestor_in(u.operation, block) not in region_ops and u.operation not in finishes
        ]
        if outside:
            yields.append(v)
            flags.append(False)
            types.append(v.type)
            replaced.append(v)
    options = {"op": rs.option("op"), "dim": rs.option("dim"), "axes": axes, "gather": None if all(flags) else flags}

    def make(region, result_types) -> Operation:
        return coll.FusedAllReduceOp.make([rs.input], list(result_types), [region], **options)

    fused = fuse(plan, [rs.result], yields, make, types, replaced, [rs, *plan.finishes], order)
    for r, g in zip(fused.results, flags):
        # a sliced result is the sliced value itself (m after slice-state): drop `_s`
        if not g and r.name_hint and r.name_hint.endswith("_s"):
            r.name_hint = r.name_hint[:-2]
    return None


@dataclass(frozen=True)
class FuseAllReducePass(ModulePass):
    """ReduceScatter + sliced computations + AllGather -> coll.fused_all_reduce; see the
    module docstring."""

    name = "fuse-allreduce"

    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        def run(module: ModuleOp) -> None:
            with returns_split(module):
                fuse_all(module)

        def fuse_all(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            rss = [o for o in module.walk() if isinstance(o, coll.ReduceScatterOp)]
            targets.require_known("reduce_scatter results", [r.result for r in rss])
            for name in targets.wanted:
                targets.require(
                    name, any(isinstance(v.owner, coll.ReduceScatterOp) for v in targets.values(name)), "is not the result of a coll.reduce_scatter"
                )
            order = BlockOrder()
            for rs in rss:
                if rs.parent is None or not targets.selects(rs.result):
                    continue
                if any(isinstance(p, coll.FusedCollectiveOp | coll.OverlapOp) for p in _parents(rs)):
                    continue
                why = fuse_reduce_scatter(rs, order)
                if why is not None and not targets.all:
                    fail(self.name, f"target %{targets.name(rs.result)}: cannot fuse into a coll.fused_all_reduce: {why}")

        apply_all_or_nothing(op, run, self.targets)


def _parents(op: Operation):
    p = op.parent_op()
    while p is not None:
        yield p
        p = p.parent_op()
