"""``overlap{chunks=N order=natural|ring|remote_first targets=...}``: CoCoNet's
``overlap`` transformation. A producer -> collective chain (matmul -> all_reduce,
matmul -> fused_all_reduce, reduce_scatter -> send -> all_gather, reduce_scatter ->
fused_all_gather, embedding_bag -> all_to_all) is wrapped in a ``coll.overlap`` that
means exactly that chain; lowering runs it in ``chunks`` pieces so that the
communication of chunk i overlaps the computation of chunk i+1, starting at chunk
``order`` (``ring``: rank n starts at chunk n, CoCoNet; ``remote_first``: chunks bound
for other ranks first, the fused-operator paper).

A chain is a sequence of ops, each reading the single result of the previous one,
which has no other use; its ops are computations (matmul, embedding_bag, map, dropout,
cast) and collectives (plain and fused), and it holds at least one collective and two
ops. Valid only for producer-consumer chains (CoCoNet's rule), which this is by
construction. With no targets every maximal chain is wrapped, up to its last collective
(computations after it are consumers, left outside); targets name ops of a chain
(``%layer``, ``%out``), and the chain is wrapped from the first named op to the later of
its last collective and the last named op. A target in no chain is an error. Example::

    %layer = dist.matmul %in, %w : ... -> ... [local]
    %sum = coll.all_reduce sum %layer : ... [local] -> ... [replicated]

becomes::

    %sum = coll.overlap chunks 4 order ring -> ... [replicated] {
      %layer = dist.matmul %in, %w : ...
      %sum_1 = coll.all_reduce sum %layer : ...
      coll.yield %sum_1 : ...
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass

from distir.dialects import coll, dist
from distir.passes.support import (
    Targets,
    apply_all_or_nothing,
    fail,
    inside_fused_or_overlap,
    make_yield,
)

COMPUTATIONS = (dist.MatmulOp, dist.EmbeddingBagOp, dist.MapOp, dist.DropoutOp, dist.CastOp)


def _collective(op: Operation) -> bool:
    return isinstance(op, (coll.CollectiveOp, coll.FusedCollectiveOp))


def _eligible(op: Operation) -> bool:
    return isinstance(op, COMPUTATIONS) or _collective(op)


def _next(op: Operation) -> Operation | None:
    """The op continuing the chain after ``op``: the single user of its single result."""
    if len(op.results) != 1:
        return None
    use = op.results[0].get_unique_use()
    if use is None:
        return None
    user = use.operation
    if user.parent_block() is not op.parent_block() or not _eligible(user):
        return None
    return user


def _prev(op: Operation) -> Operation | None:
    for v in op.operands:
        p = v.owner
        if isinstance(p, Operation) and _eligible(p) and _next(p) is op:
            return p
    return None


def chain_of(op: Operation) -> list[Operation]:
    """The maximal chain through ``op``."""
    head = op
    while (p := _prev(head)) is not None:
        head = p
    chain = [head]
    while (n := _next(chain[-1])) is not None:
        chain.append(n)
    return chain


def _trim(chain: list[Operation], keep: set[Operation]) -> list[Operation] | None:
    """The chain from its first op in ``keep`` (its head when ``keep`` is empty) to its
    last collective or last op in ``keep``, whichever comes later; None when that holds
    no collective or a single op."""
    start = min((i for i, o in enumerate(chain) if o in keep), default=0)
    ends = [i for i, o in enumerate(chain) if (_collective(o) or o in keep) and i >= start]
    out = chain[start : max(ends) + 1] if ends else []
    if not any(_collective(o) for o in out):
        return None
    return out if len(out) >= 2 else None


def wrap(chain: list[Operation], chunks: int, order: str) -> Operation:
    block = chain[-1].parent_block()
    assert block is not None
    last = chain[-1]
    body = Block()
    ov = coll.OverlapOp.make([], list(last.result_types), [Region(body)], chunks=chunks, order=order)
    block.insert_op_after(ov, last)
    for op in chain:
        op.detach()
        body.add_op(op)
    body.add_op(make_yield(coll.YieldOp, list(last.results)))
    for old, new in zip(last.results, ov.results):
        new.name_hint = old.name_hint
        old.replace_uses_with_if(new, lambda use: use.operation.parent_block() is not body)
    return ov


@dataclass(frozen=True)
class OverlapPass(ModulePass):
    """Wrap producer -> collective chains in coll.overlap; see the module docstring."""

    name = "overlap"

    chunks: int = 4
    order: str = "natural"
    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.chunks < 1:
            fail(self.name, f"chunks must be at least 1, got {self.chunks}")
        if self.order not in coll.ORDERS:
            fail(self.name, f"order must be one of {', '.join(coll.ORDERS)}, got '{self.order}'")

        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            ops = [o for o in module.walk() if _eligible(o) and not inside_fused_or_overlap(o)]
            targets.require_known("chain ops", [r for o in ops for r in o.results])
            chains: list[list[Operation]] = []
            if targets.all:
                seen: set[Operation] = set()
                for o in ops:
                    if o in seen:
                        continue
                    chain = chain_of(o)
                    seen.update(chain)
                    trimmed = _trim(chain, set())
                    if trimmed is not None:
                        chains.append(trimmed)
            else:
                by_head: dict[Operation, set[Operation]] = {}
                for name in targets.wanted:
                    for v in targets.values(name):
                        owner = v.owner
                        if not isinstance(owner, Operation) or owner not in ops:
                            fail(self.name, f"target %{name}: not a computation or collective that a chain can hold")
                        chain = chain_of(owner)
                        if _trim(chain, set()) is None:
                            fail(
                                self.name,
                                f"target %{name}: '{owner.name}' is in no producer -> collective chain "
                                "(each op must read the single, single-use result of the previous one)",
                            )
                        by_head.setdefault(chain[0], set()).add(owner)
                for head, keep in by_head.items():
                    trimmed = _trim(chain_of(head), keep)
                    if trimmed is None:
                        shown = ", ".join(sorted(f"%{targets.name(o.results[0])}" for o in keep))
                        fail(self.name, f"targets {shown}: from the first of them the chain holds a single op")
                    chains.append(trimmed)
            for chain in chains:
                wrap(chain, self.chunks, self.order)

        apply_all_or_nothing(op, run, self.targets)

