"""Lowering of ``coll.overlap``: the chain it holds, chunk by chunk."""

from __future__ import annotations

from distir.dialects import coll


def lower_overlap(lowering, op: coll.OverlapOp) -> None:
    """Lower the chain as it is (one chunk)."""
    block = op.body.block
    term = block.last_op
    for inner in block.ops:
        if inner is not term:
            lowering.lower_op(inner)
    for r, y in zip(op.outputs, term.values):  # type: ignore[union-attr]
        lowering.buf[r] = lowering.input(y)
