"""``overlap{chunks=N order=natural|ring|remote_first granularity=chunk|tile targets=...}``:
CoCoNet's ``overlap`` transformation, and the fused computation-collective operators of
the fused-operator paper. A producer -> collective chain (matmul -> all_reduce,
matmul -> fused_all_reduce, reduce_scatter -> send -> all_gather, reduce_scatter ->
fused_all_gather, embedding_bag -> all_to_all) is wrapped in a ``coll.overlap`` that
means exactly that chain.

``granularity=chunk`` (the default): lowering runs the chain in ``chunks`` pieces so
that the communication of chunk i overlaps the computation of chunk i+1, starting at
chunk ``order`` (``ring``: rank n starts at chunk n, CoCoNet; ``remote_first``: chunks
bound for other ranks first).

``granularity=tile``: the chain becomes one fused operator whose tiles are the unit of
both computation and communication: each destination rank's block of the producer's
result is cut into ``chunks`` tiles, computed in ``order`` (``remote_first``: tiles
bound for other ranks first, own tiles last, the paper's communication-aware schedule;
``natural``: destination 0 first, the paper's communication-oblivious baseline;
``ring``: own tiles first) and each sent (stored straight into the destination rank's
buffer where ranks share memory) as soon as it is computed. Accepted chains (see
``coll.tile_chain_problem``): ``dist.matmul -> coll.all_reduce | coll.reduce_scatter``
(GEMV/GEMM + AllReduce), ``dist.embedding_bag -> coll.all_to_all`` (embedding +
All-to-All) and ``dist.matmul [-> dist.map | dist.cast ...] -> coll.all_to_all`` (GEMM +
All-to-All, the maps an epilogue applied to each tile). Only the producer -> collective
part of a longer chain is wrapped (in MoE, the expert GEMM and the combine all_to_all,
not the dispatch before it); chains of other shapes are left alone, and a target in
no accepted chain is an error naming the reason.

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

becomes (``overlap{chunks=4 order=ring}``)::

    %sum = coll.overlap chunks 4 order ring -> ... [replicated] {
      %layer = dist.matmul %in, %w : ...
      %sum_1 = coll.all_reduce sum %layer : ...
      coll.yield %sum_1 : ...
    }

and with ``overlap{order=remote_first granularity=tile}`` into
``coll.overlap chunks 4 order remote_first granularity tile -> ... { same chain }``.
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


def maximal_chains(ops: list[Operation]) -> list[list[Operation]]:
    """The maximal chains through ``ops``, each once."""
    seen: set[Operation] = set()
    out = []
    for o in ops:
        if o not in seen:
            chain = chain_of(o)
            seen.update(chain)
            out.append(chain)
    return out


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


TILE_EPILOGUE = (dist.MapOp, dist.CastOp)
TILE_PRODUCERS = (dist.MatmulOp, dist.EmbeddingBagOp)


def tile_segment(chain: list[Operation], at: int) -> tuple[list[Operation] | None, str]:
    """The producer -> [maps] -> collective segment of ``chain`` holding ``chain[at]``
    that one fused tile operator can run, or (None, why not)."""
    end = next((i for i in range(at, len(chain)) if _collective(chain[i])), None)
    if end is None:
        return None, "no collective follows it in its chain"
    start = end - 1
    while start >= 0 and isinstance(chain[start], TILE_EPILOGUE):
        start -= 1
    if start < 0 or not isinstance(chain[start], TILE_PRODUCERS):
        return None, f"'{chain[end].name}' is not fed by a dist.matmul or dist.embedding_bag (through maps only)"
    if at < start:
        return None, f"'{chain[at].name}' comes before the producer of the fused operator"
    segment = chain[start : end + 1]
    problem = coll.tile_chain_problem(segment)
    return (None, problem) if problem is not None else (segment, "")


def tile_segments(chain: list[Operation]) -> list[list[Operation]]:
    """Every segment of ``chain`` that one fused tile operator can run."""
    out = []
    for i, op in enumerate(chain):
        if _collective(op):
            seg, _ = tile_segment(chain, i)
            if seg is not None:
                out.append(seg)
    return out


def wrap(chain: list[Operation], chunks: int, order: str, granularity: str = "chunk") -> Operation:
    block = chain[-1].parent_block()
    assert block is not None
    last = chain[-1]
    body = Block()
    ov = coll.OverlapOp.make([], list(last.result_types), [Region(body)], chunks=chunks, order=order, granularity=granularity)
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
    granularity: str = "chunk"
    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.chunks < 1:
            fail(self.name, f"chunks must be at least 1, got {self.chunks}")
        if self.order not in coll.ORDERS:
            fail(self.name, f"order must be one of {', '.join(coll.ORDERS)}, got '{self.order}'")
        if self.granularity not in coll.GRANULARITIES:
            fail(self.name, f"granularity must be one of {', '.join(coll.GRANULARITIES)}, got '{self.granularity}'")
        if self.granularity == "tile":
            apply_all_or_nothing(op, self.run_tiles)
            return

        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            ops = [o for o in module.walk() if _eligible(o) and not inside_fused_or_overlap(o)]
            targets.require_known("chain ops", [r for o in ops for r in o.results])
            chains: list[list[Operation]] = []
            if targets.all:
                for chain in maximal_chains(ops):
                    trimmed = _trim(chain, set())
                    if trimmed is not None:
                        chains.append(trimmed)
            else:
                by_head: dict[Operation, set[Operation]] = {}
                for name, owner in self.targeted(targets, ops):
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

    def run_tiles(self, module: ModuleOp) -> None:
        """``granularity=tile``: wrap each fused-operator segment (see the module doc)."""
        targets = Targets(self.name, self.targets, module)
        ops = [o for o in module.walk() if _eligible(o) and not inside_fused_or_overlap(o)]
        targets.require_known("chain ops", [r for o in ops for r in o.results])
        segments: dict[Operation, list[Operation]] = {}
        if targets.all:
            for chain in maximal_chains(ops):
                for seg in tile_segments(chain):
                    segments[seg[0]] = seg
        else:
            for name, owner in self.targeted(targets, ops):
                chain = chain_of(owner)
                seg, why = tile_segment(chain, chain.index(owner))
                if seg is None:
                    fail(self.name, f"target %{name}: no fused tile operator holds '{owner.name}': {why}")
                segments[seg[0]] = seg
        for seg in segments.values():
            wrap(seg, self.chunks, self.order, "tile")

    def targeted(self, targets: Targets, ops: list[Operation]):
        """(name, op) of every targeted op; a target that no chain can hold is an error."""
        eligible = set(ops)
        for name in targets.wanted:
            for v in targets.values(name):
                owner = v.owner
                if not isinstance(owner, Operation) or owner not in eligible:
                    fail(self.name, f"target %{name}: not a computation or collective that a chain can hold")
                yield name, owner

