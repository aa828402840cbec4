"""``reorder-broadcast{targets=...}``: CoCoNet's Broadcast reorder, the AllGather reorder's
twin. A computation on the result of a Broadcast runs on the root only, and the
Broadcast moves after it::

    f(broadcast(x), r) = broadcast(f(x, store(drop(r), root)))

``x`` is held by the root (``at<r>``); the computation's other replicated operands are
restricted to the root (``dist.drop`` then ``dist.store``: the root keeps its replica,
no data moves); an operand that is itself broadcast from the same root is read before
its Broadcast. The same computations as ``reorder-allgather`` qualify (map, dropout,
cast, matmul, reduce_tensor, which stays a reduction on the root). ``targets`` names
Broadcasts (everything on them moves, transitively) or computations. New values:
``%out_s`` (on the root) and ``%out`` (its Broadcast). Example::

    %b = coll.broadcast %x : ... [at<0>] -> ... [replicated]
    %y = dist.map(%b, %s) : (..., f32) -> ... [replicated] { ... }

becomes ``%y_s = dist.map(%x, %s) -> [at<0>]`` and ``%y = coll.broadcast %y_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll, dist, layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import At
from distir.passes.reorder_allgather import Mover, NotSliceable, run_reorder
from distir.passes.support import (
    apply_all_or_nothing,
    display,
    same_type,
    set_name,
    try_build,
)


@dataclass
class BroadcastMover(Mover):
    """Moves computations before a Broadcast: they run on the root."""

    def before_type(self, c: coll.CollectiveOp, operand: TensorType, result: TensorType) -> TensorType:
        x = c.input.type
        assert isinstance(x, TensorType)
        pl = list(result.get_placements())
        for a in c.axes:
            pl[a] = x.get_placements()[a]
        return result.with_(placements=layout.tidy(pl))

    PLACE_VERB = "restricted to the root"
    PLACED = "on the root is"

    def restrict(self, v: SSAValue, want: TensorType, at: Operation, axes: list[int], sizes) -> SSAValue:
        """Broadcast: drop then store at the root's rank, per axis, before ``at``."""
        cur = v
        ops: list[Operation] = []
        for a in axes:
            drop = dist.DropOp.of(cur, sizes=sizes, axis=a)
            rank = want.get_placements()[a]
            assert isinstance(rank, At)
            store = try_build(lambda: dist.StoreOp.of(drop.result, sizes=sizes, rank=rank.rank.data, axis=a))
            if store is None:
                raise NotSliceable(f"operand {display(v)} cannot be placed at rank {rank.rank.data}")
            ops += [drop, store]
            cur = store.results[0]
        if same_type(cur.type, want):
            self.insert(ops, at)
            set_name(cur, v.name_hint, "_s")
        return cur

    def matmul_other(self, c: coll.CollectiveOp, v: SSAValue, at: Operation) -> SSAValue:
        owner = v.owner
        if isinstance(owner, self.kind) and list(owner.axes) == list(c.axes):
            return owner.input
        t = v.type
        assert isinstance(t, TensorType)
        return self.operand(c, v, self.before_type(c, t, t), at)

    def reduce_rule(self, c, rt: dist.ReduceTensorOp, x: SSAValue, sizes) -> list[Operation]:
        part = dist.ReduceTensorOp.of(x, sizes=sizes, op=rt.option("op"), dims=list(rt.option("dims")))
        set_name(part.results[0], rt.result.name_hint, "_s")
        return [part, self.finish(c, part.results[0], sizes)]


@dataclass(frozen=True)
class ReorderBroadcastPass(ModulePass):
    """Move computations on Broadcast results before the Broadcast; see the module docstring."""

    name = "reorder-broadcast"

    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        apply_all_or_nothing(
            op,
            lambda m: run_reorder(self.name, coll.BroadcastOp, BroadcastMover(coll.BroadcastOp, {}), m, self.targets, "broadcast"),
            self.targets,
        )
