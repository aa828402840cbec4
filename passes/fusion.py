"""Planning and execution shared by ``fuse-allreduce`` and ``fuse-collectives``: which
computations go into a fused collective's region, and how the fused op replaces them.

A *forward* plan starts at a collective ``first`` (ReduceScatter, Reduce, AllToAll) and
takes, in block order, every computation reading what it produces (directly or through
computations already taken): the region runs on ``first``'s result. With a finishing
collective kind (AllGather for a fused all-reduce), the finishing collectives of region
values over the same axes are absorbed as the fused op's gather. An op that reads
region values but cannot be taken (a send, a fused op, a gathered value) is *tainted*:
so is everything reading it, and it will follow the fused op.

A *backward* plan starts at a finishing collective (AllGather, Broadcast) and takes the
computations whose results only feed it or each other.

Computations are the local ``dist`` ops (maps, dropout, cast, take_slice, matmul,
reduce_tensor) plus inner all_reduces in a forward plan (LAMB's norms), and a
``coll.send`` in a backward plan (the pipeline's fused P2P + computation). A forward
plan also takes the take_slices of outer values that only region ops read.

Execution (``fuse``) moves the taken ops into the region in order, places the fused op
after the last of them and moves after it the ops that read its results.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from distir.dialects import coll, dist
from distir.passes.support import BlockOrder, make_yield

LOCAL_COMPUTATIONS = (
    dist.MapOp,
    dist.DropoutOp,
    dist.CastOp,
    dist.TakeSliceOp,
    dist.MatmulOp,
    dist.ReduceTensorOp,
)


@dataclass
class Plan:
    """The ops a fused collective takes in: ``region`` (block order) and ``finishes``
    (finishing collectives of region values, absorbed as the fused op's gather)."""

    block: Block
    region: list[Operation] = field(default_factory=list)
    finishes: list[Operation] = field(default_factory=list)


def ancestor_in(op: Operation, block: Block) -> Operation | None:
    cur: Operation | None = op
    while cur is not None and cur.parent_block() is not block:
        cur = cur.parent_op()
    return cur


def all_operands(op: Operation) -> list[SSAValue]:
    """Operands of ``op`` and of the ops nested in its regions."""
    out = list(op.operands)
    for r in op.regions:
        for inner in r.walk():
            out.extend(inner.operands)
    return out


def _takeable_forward(op: Operation) -> bool:
    if isinstance(op, dist.MapOp):
        return True
    return isinstance(op, (*LOCAL_COMPUTATIONS, coll.AllReduceOp)) and not op.regions


def forward_plan(first: Operation, finish_kind: type | None = None, finish_axes: Sequence[int] = (), order: BlockOrder | None = None) -> Plan:
    """The forward plan of ``first`` (see the module doc). The ops that read what
    ``first`` produces are found through its results' uses, transitively, and looked
    at in block order (``order``, shared by the callers that plan many collectives of
    one block): the cost is the number of uses reached, not the block's length."""
    block = first.parent_block()
    assert block is not None
    order = order or BlockOrder()
    plan = Plan(block)
    inside: set[SSAValue] = set(first.results)
    reads_inside: set[Operation] = set()
    reads_tainted: set[Operation] = set()
    start = order.key(first)
    heap: list[tuple[float, int, Operation]] = []
    queued: set[Operation] = set()

    def reached(values: Sequence[SSAValue], flags: set[Operation]) -> None:
        for v in values:
            for use in v.uses:
                a = ancestor_in(use.operation, block)
                if a is None or a is first:
                    continue
                flags.add(a)
                if a not in queued:
                    queued.add(a)
                    heapq.heappush(heap, (order.key(a), len(queued), a))

    reached(first.results, reads_inside)
    while heap:
        key, _, op = heapq.heappop(heap)
        if key <= start:
            continue
        if op in reads_tainted:
            reached(op.results, reads_tainted)
        elif (
            finish_kind is not None
            and isinstance(op, finish_kind)
            and list(op.axes) == list(finish_axes)
            and op.operands[0] in inside
        ):
            plan.finishes.append(op)
            reached(op.results, reads_tainted)  # the gathered value exists only after the fused op
        elif _takeable_forward(op):
            plan.region.append(op)
            inside.update(op.results)
            reached(op.results, reads_inside)
        else:
            reached(op.results, reads_tainted)
    # take_slices of outer values that only region ops read
    members = set(plan.region)
    for op in list(plan.region):
        for v in all_operands(op):
            ts = v.owner
            if isinstance(ts, dist.TakeSliceOp) and ts not in members and ts.parent_block() is block:
                users = {ancestor_in(u.operation, block) for u in ts.result.uses}
                if users and users <= members:
                    plan.region.append(ts)
                    members.add(ts)
    plan.region.sort(key=order.key)
    return plan


def backward_plan(finish: Operation, allow_send: bool = True, order: BlockOrder | None = None) -> Plan:
    """The backward plan of ``finish``: its operands' producers, transitively, looked at
    in reverse block order; an op is taken when all its users are taken."""
    block = finish.parent_block()
    assert block is not None
    order = order or BlockOrder()
    plan = Plan(block)
    members: set[Operation] = {finish}
    kinds = (*LOCAL_COMPUTATIONS, coll.SendOp) if allow_send else LOCAL_COMPUTATIONS
    heap: list[tuple[float, int, Operation]] = []
    queued: set[Operation] = set()

    def producers(op: Operation) -> None:
        for v in op.operands:
            p = v.owner
            if isinstance(p, Operation) and p.parent_block() is block and p not in queued:
                queued.add(p)
                heapq.heappush(heap, (-order.key(p), len(queued), p))

    producers(finish)
    limit = order.key(finish)
    while heap:
        negkey, _, op = heapq.heappop(heap)
        if -negkey >= limit:
            continue
        if not isinstance(op, kinds) or (op.regions and not isinstance(op, dist.MapOp)) or not op.results:
            continue
        users = {ancestor_in(u.operation, block) for r in op.results for u in r.uses}
        if users and users <= members:
            members.add(op)
            plan.region.append(op)
            producers(op)
    plan.region.sort(key=order.key)
    return plan


def fuse(
    plan: Plan,
    args: Sequence[SSAValue],
    yields: Sequence[SSAValue],
    make: Callable[[Region, Sequence[Attribute]], Operation],
    result_types: Sequence[Attribute],
    replaced: Sequence[SSAValue],
    erase: Sequence[Operation],
    order: BlockOrder | None = None,
) -> Operation:
    """Build the fused op (``make(region, result_types)``) whose region runs
    ``plan.region`` with ``args`` as block arguments and yields ``yields``; every use of
    ``replaced[i]`` outside the region becomes a use of result i; ``erase`` (the first
    and finishing collectives) goes away."""
    block = plan.block
    order = order or BlockOrder()
    taken = set(plan.region) | set(plan.finishes) | set(erase)
    last = max(taken, key=order.key)
    anchor = last.next_op
    assert anchor is not None, "a fused op needs an op after it (the block's terminator at least)"

    body = Block(arg_types=[a.type for a in args])
    for v, a in zip(args, body.args):
        a.name_hint = v.name_hint
    for op in plan.region:
        op.detach()
        order.forget(op)
        body.add_op(op)
    inner = {v: a for v, a in zip(args, body.args)}
    for v, a in inner.items():
        v.replace_uses_with_if(a, lambda use: ancestor_in(use.operation, body) is not None)
    body.add_op(make_yield(coll.YieldOp, [inner.get(y, y) for y in yields]))
    fused = make(Region(body), result_types)
    block.insert_op_before(fused, anchor)
    order.place(fused)
    for old, new in zip(replaced, fused.results):
        new.name_hint = old.name_hint
        old.replace_uses_with_if(new, lambda use: ancestor_in(use.operation, body) is None)
    for op in reversed(list(erase)):
        op.detach()
        order.forget(op)
        op.erase()
    # ops before the fused op that read its results (the tainted ones) now follow it, in
    # their order: the users of its results before it, transitively
    limit = order.key(fused)
    after: set[Operation] = set()
    work = list(fused.results)
    while work:
        v = work.pop()
        for use in v.uses:
            a = ancestor_in(use.operation, block)
            if a is not None and a is not fused and a not in after and order.key(a) < limit:
                after.add(a)
                work.extend(a.results)
    moved = order.sort(after)
    prev = fused
    for op in moved:
        op.detach()
        block.insert_op_after(op, prev)
        prev = op
    order.place_run(moved)
    return fused
