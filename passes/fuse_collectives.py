"""``fuse-collectives{targets=...}``: the rest of CoCoNet's fused collectives (Table 2;
``fuse-allreduce`` makes ``coll.fused_all_reduce``). Two shapes:

* a collective followed by computations on what it produces: the computations run in
  the region, on that value (``FIRST`` collectives)::

      f(reduce_scatter(x))   ->  coll.fused_reduce_scatter(x) { f }
      f(reduce(x, root))     ->  coll.fused_reduce(x)         { f }   (on the root)
      f(all_to_all(x))       ->  coll.fused_all_to_all(x)     { f }

  Every computed value used after the fused op is a (not gathered) result. Computations
  are taken as ``fuse-allreduce`` takes them (``passes/fusion.py``).

* computations whose results only feed an AllGather or a Broadcast: they run in the
  region on this rank's slice (or on the root) and the collective finishes the result
  (``FINISH`` collectives)::

      all_gather(f(x))       ->  coll.fused_all_gather(x)     { f }
      broadcast(f(x))        ->  coll.fused_broadcast(x)      { f }

  The region may start with a ``coll.send``: that is CoCoNet's fused P2P + computation
  of the pipeline schedule, ``fuse(P2P-C)``, whose result the AllGather then gathers
  on the receiving stage. The fused op's operands are the outer values placed on the
  collective's axes as its input is (sliced, or at the root); other outer values are
  read inside the region directly.

The first shape is tried first. ``targets`` names the collectives (their results); with
none, every collective with computations to take. A named collective without any is an
error. Example::

    %y = coll.reduce_scatter sum %x dim 0 : ... [local] -> ... [sliced<0>]
    %z = dist.map(%y, %s) : (..., f32) -> ... [sliced<0>] { ... }

becomes::

    %z = coll.fused_reduce_scatter sum %x dim 0 : ... [local] -> ... [sliced<0>] {
    ^bb0(%y: ... [sliced<0>]):
      %z_1 = dist.map(%y, %s) ...
      coll.yield %z_1 : ...
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll
from distir.dialects.dist import TensorType
from distir.dialects.placements import At, Sliced
from distir.passes.fusion import ancestor_in, backward_plan, forward_plan, fuse
from distir.passes.support import (
    BlockOrder,
    Targets,
    apply_all_or_nothing,
    fail,
    inside_fused_or_overlap,
    returns_split,
)

# The fused collectives with a first collective and no finishing one, by that first
# collective, and those with only a finishing one, by that.
FIRST_FUSED: dict[type, type[coll.FusedCollectiveOp]] = {
    f.FIRST: f for f in coll.fused_collectives() if f.FIRST is not None and f.FINISH is None
}
FINISH_FUSED: dict[type, type[coll.FusedCollectiveOp]] = {
    f.FINISH: f for f in coll.fused_collectives() if f.FINISH is not None and f.FIRST is None
}


def fuse_first(c: coll.CollectiveOp, order: BlockOrder) -> str | None:
    """c followed by computations -> fused op with FIRST = c; why not, or None."""
    plan = forward_plan(c, order=order)
    if not plan.region:
        return "no computation reads its result"
    members = set(plan.region)
    block = plan.block
    yields: list[SSAValue] = []
    for v in [c.result, *(r for op in plan.region for r in op.results)]:
        if any(ancestor_in(u.operation, block) not in members for u in v.uses):
            yields.append(v)
    cls = FIRST_FUSED[type(c)]
    options = c.options()

    def make(region, types) -> Operation:
        return cls.make([c.input], list(types), [region], **options)

    fuse(plan, [c.result], yields, make, [v.type for v in yields], yields, [c], order)
    return None


def fuse_finish(c: coll.CollectiveOp, order: BlockOrder) -> str | None:
    """computations feeding only c -> fused op with FINISH = c; why not, or None."""
    plan = backward_plan(c, order=order)
    if not plan.region:
        return "no computation feeds it alone"
    x = c.input.type
    assert isinstance(x, TensorType)
    axes = list(c.axes)
    members = set(plan.region)
    block = plan.block

    def like_input(v: SSAValue) -> bool:
        t = v.type
        if not isinstance(t, TensorType):
            return False
        for a in axes:
            p, q = t.get_placements()[a], x.get_placements()[a]
            if isinstance(q, Sliced) and not isinstance(p, Sliced):
                return False
            if isinstance(q, At) and not isinstance(p, At):
                return False
        return True

    args: list[SSAValue] = []
    for op in plan.region:
        for v in op.operands:
            owner = v.owner
            inside = isinstance(owner, Operation) and ancestor_in(owner, block) in members
            if not inside and v not in args and like_input(v):
                args.append(v)
    if not args:
        return "the computations read no value placed like its operand"
    cls = FINISH_FUSED[type(c)]
    options = {"axes": axes}

    def make(region, types) -> Operation:
        return cls.make(args, list(types), [region], **options)

    fuse(plan, args, [c.input], make, [c.result.type], [c.result], [c], order)
    return None


@dataclass(frozen=True)
class FuseCollectivesPass(ModulePass):
    """Fuse computations into reduce_scatter, reduce, all_to_all, all_gather and
    broadcast; see the module docstring."""

    name = "fuse-collectives"

    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kinds = (*FIRST_FUSED, *FINISH_FUSED)

        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            colls = [o for o in module.walk() if isinstance(o, kinds)]
            targets.require_known("fusable collective results", [c.result for c in colls])
            for name in targets.wanted:
                targets.require(
                    name,
                    any(isinstance(v.owner, kinds) for v in targets.values(name)),
                    "is not the result of a reduce_scatter, reduce, all_to_all, all_gather or broadcast",
                )
            order = BlockOrder()
            for first_pass in (True, False):
                for c in colls:
                    if c.parent is None or not targets.selects(c.result) or inside_fused_or_overlap(c):
                        continue
                    if (type(c) in FIRST_FUSED) != first_pass:
                        continue
                    name = targets.name(c.result)
                    why = fuse_first(c, order) if first_pass else fuse_finish(c, order)
                    if why is not None and not targets.all:
                        fail(self.name, f"target %{name}: cannot fuse '{c.name}' with computations: {why}")

        def split(module: ModuleOp) -> None:
            with returns_split(module):
                run(module)

        apply_all_or_nothing(op, split, self.targets)

