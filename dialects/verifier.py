"""Verification of a whole module, with located and deterministic diagnostics.

    verify_module(module, spans)     # VerifyException: file:line:col, the line, the rule

Two steps, the first before any op verifier, pass or backend sees the program:

1. **Scopes: region isolation and dominance** (``check_scopes``). Every operand must be
   visible where it is used: defined earlier in the same block, or in a block that
   encloses the use (a block argument of it, or an op before the one that holds the
   use). A value defined inside a region is not visible outside it: not after the op
   that holds the region, not in a sibling op's region. An op whose regions are isolated
   (xDSL's ``IsolatedFromAbove`` trait: ``func.func``, kernels; or ``IsolatedBody``:
   ``dist.map``) sees no value from outside them. Values of a region's entry block are visible in its other blocks;
   the values of another block only in that block (distir has no branches). xDSL's
   parser resolves a name used before its definition to the later definition, even
   one in another region; this step rejects exactly those programs.
2. **Every op's own verifier**, nested ops first (as ``Operation.verify`` does), with an
   op's traits checked in a fixed order, so that an op that breaks two rules always
   reports the same one (xDSL keeps traits in a set).

``spans`` maps ops to their source position (``frontend.parse_source``); an op without
one (made by a pass) is reported at its nearest ancestor that has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.traits import IsolatedFromAbove, OpTrait
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.lexer import Span

Spans = Mapping[Operation, Span]


def located(op: Operation | None, msg: str, spans: Spans | None, line_offset: int = 0) -> str:
    """``msg`` headed by the source position of ``op`` (or of its nearest ancestor that
    has one), as MLIR prints diagnostics."""
    spans = spans or {}
    while op is not None:
        span = spans.get(op)
        if span is not None:
            return dataclasses.replace(span, line_offset=line_offset).print_with_context(msg)
        op = op.parent_op()
    return msg


def _line(op: Operation | None, spans: Spans | None) -> str:
    span = (spans or {}).get(op) if op is not None else None
    return f" (line {span.get_location().line})" if span is not None else ""


def _name(v: SSAValue) -> str:
    return f"%{v.name_hint}" if v.name_hint else "an unnamed value"


class IsolatedBody(OpTrait):
    """The op's regions use only values defined inside them, as with xDSL's
    ``IsolatedFromAbove``, but the printer keeps one naming scope (``%x`` inside and
    outside stay distinct names). Checked by ``check_scopes``."""

    def verify(self, op: Operation) -> None:
        pass  # check_scopes checks every op's scopes in one pass over the module


def _isolated(op: Operation) -> bool:
    return op.has_trait(IsolatedFromAbove) or op.has_trait(IsolatedBody)


# --------------------------------------------------------------------------------------
# Step 1: scopes
# --------------------------------------------------------------------------------------


def check_scopes(root: Operation, spans: Spans | None = None) -> tuple[Operation, str] | None:
    """The first use (in program order) of a value that is not visible where it is used,
    as (the using op, why), or None. Linear in the size of the program."""

    def region(r: Region, visible: set[SSAValue]) -> tuple[Operation, str] | None:
        entry_defs: list[SSAValue] = []
        for i, block in enumerate(r.blocks):
            defs: list[SSAValue] = list(block.args)
            visible.update(block.args)
            for op in block.ops:
                for index, v in enumerate(op.operands):
                    if v not in visible:
                        return op, _why_not_visible(op, index, v, spans)
                isolated = _isolated(op)
                for sub in op.regions:
                    found = region(sub, set() if isolated else visible)
                    if found is not None:
                        return found
                visible.update(op.results)
                defs.extend(op.results)
            if i == 0:
                entry_defs = defs
            else:
                visible.difference_update(defs)
        visible.difference_update(entry_defs)
        return None

    for r in root.regions:
        found = region(r, set())
        if found is not None:
            return found
    return None


def _enclosing(op: Operation) -> list[tuple[Block, Operation]]:
    """(block, the ancestor of ``op`` in that block) for every block enclosing ``op``,
    innermost first."""
    out = []
    cur: Operation | None = op
    while cur is not None and cur.parent is not None:
        out.append((cur.parent, cur))
        cur = cur.parent_op()
    return out


def _why_not_visible(op: Operation, index: int, v: SSAValue, spans: Spans | None) -> str:
    what = f"operand {index} ({_name(v)})"
    try:
        owner = v.owner
    except ValueError:  # xDSL's placeholder for a name used before its definition
        # The parser resolves placeholders when the name is defined; one left in an op
        # was defined while the op itself was being parsed: inside its own region.
        return f"operand {index} is defined inside the op's own region, after its use"
    def_op = owner if isinstance(owner, Operation) else None
    def_block = owner if isinstance(owner, Block) else (def_op.parent if def_op is not None else None)
    if def_block is None or (def_op is not None and def_op.parent is None):
        return f"{what} is not defined in the program"
    chain = _enclosing(op)
    for depth, (block, ancestor) in enumerate(chain):
        if block is not def_block:
            continue
        # Defined in a block that encloses the use: across an isolated op, or later.
        for _, inner in chain[1 : depth + 1]:
            if _isolated(inner):
                return (
                    f"{what} is defined outside the enclosing '{inner.name}'{_line(inner, spans)}, "
                    f"whose regions may use only values defined inside them"
                )
        if def_op is op:
            return f"{what} is a result of the op itself"
        if def_op is ancestor:
            return f"{what} is a result of the enclosing '{def_op.name}'"
        return f"{what} is used before its definition{_line(def_op, spans)}"
    # Defined in a block that does not enclose the use: find the op holding it.
    enclosing_blocks = {id(b) for b, _ in chain}
    holder: Operation | None = None
    cur: Block | None = def_block
    while cur is not None and id(cur) not in enclosing_blocks:
        holder = cur.parent_op()
        cur = holder.parent if holder is not None else None
    if cur is None or holder is None:
        return f"{what} is not defined in the program"
    if holder.is_ancestor(op):
        return f"{what} is defined in another block of the region, which does not dominate this use"
    return f"{what} is defined inside the region of another '{holder.name}'{_line(holder, spans)} and is not visible here"


# --------------------------------------------------------------------------------------
# Step 2: op verifiers
# --------------------------------------------------------------------------------------


def _verify_op(op: Operation) -> None:
    try:
        op.verify(verify_nested_ops=False)
    except VerifyException as e:
        for trait in sorted(op.traits, key=lambda t: (type(t).__name__, repr(t))):
            try:
                trait.verify(op)
            except VerifyException as first:
                raise first from None
        raise e


def verify_module(module: Operation, spans: Spans | None = None, line_offset: int = 0, note: str = "") -> None:
    """Verify ``module`` (scopes first, then every op, nested ops first); raise a
    ``VerifyException`` whose text is the located diagnostic (``note`` is added to the
    message in parentheses: which pass produced the program)."""
    suffix = f" ({note})" if note else ""
    found = check_scopes(module, spans)
    if found is not None:
        op, why = found
        raise VerifyException(located(op, f"'{op.name}' op {why}{suffix}", spans, line_offset))
    for op in module.walk(region_first=True):
        try:
            _verify_op(op)
        except VerifyException as e:
            msg = str(e).removeprefix("Operation does not verify: ")
            raise VerifyException(located(op, msg + suffix, spans, line_offset)) from None
