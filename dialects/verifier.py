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

**Incremental verification.** A module that verified is remembered with a fingerprint of
each op (``Checked``): its operands and their types, its result types, properties,
attributes and block argument types, everything an op verifier reads besides the
symbols it looks up. ``ensure_verified(module)`` then verifies only what changed since:
the ops whose fingerprint differs or that are new, their ancestors (an op verifies its
regions' terminators), and everything inside a region-holding op that changed (but its
properties alone where its body's ops do not read them: ``BODY_READS_PROPERTIES``
false, as ``coll.overlap``'s chunks and order). A change
of a top-level op (a mesh, a function's signature, a kernel: what others look up by
symbol) or the removal of one re-verifies every op. Scopes are checked over the whole
module when an op is new, gone, moved or reads other values (``scopes=False`` leaves
that to a later full check). Fingerprints cost about a
twentieth of verifying an op, so a pipeline of passes over a 50,000-op program verifies
after each pass for a fraction of what its passes take (``bench/compile_scaling.py``).

Most of an op's verification is xDSL's generic IRDL checks (the constraints on its
operand and result types, properties, attributes and region arguments), which read
nothing but those: a module remembers the op shapes (``_irdl_key``: the op's class and
those parts of its fingerprint) that passed them, and an op of a known shape runs only
the rest (where it stands in its block, its traits, its own verifier, which may read
producers, parents or symbols). A copy (``verified_clone``) inherits the shapes, so
thousands of ops a lowering builds alike are checked generically once. The
``IsolatedFromAbove`` trait's walk of a function is left to the scope check, which
covers it (step 1: an isolated op's regions see no value from outside).
This is how every pipeline distir runs (``passes/pipeline.run_passes``, the default
lowering) keeps its guarantee that nothing that does not verify is transformed further
or executed.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from xdsl.dialects.builtin import SymbolRefAttr
from xdsl.ir import Block, ErasedSSAValue, Operation, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import IRDLOperation, OpDef
from xdsl.irdl import operations as irdl_operations
from xdsl.traits import IsolatedFromAbove, IsTerminator, NoTerminator, OpTrait
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.lexer import Span

from distir.dialects.fast import OpMemo, clone, walk

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


@functools.cache
def _irdl_parts(cls: type[Operation]) -> tuple[OpDef, Callable[[Operation], None] | None] | None:
    """(IRDL definition, the class's own ``verify_``) of an op class whose ``verify_`` is
    the one ``irdl_op_definition`` generates (``op_def.verify(op)``, then the class's
    own verifier); None for any other class (it is always verified whole)."""
    fn = cls.__dict__.get("verify_")
    if not issubclass(cls, IRDLOperation) or fn is None or getattr(fn, "__closure__", None) is None:
        return None
    code = fn.__code__
    if code.co_filename != irdl_operations.__file__ or code.co_name != "verify_":
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__), strict=True))
    op_def, own = cells.get("op_def"), cells.get("custom_verify")
    if set(cells) - {"op_def", "custom_verify"} or op_def is not cls.get_irdl_definition():
        return None
    if own is Operation.verify_:
        own = None  # the class has no verifier of its own
    elif getattr(getattr(own, "__code__", None), "co_filename", None) == irdl_operations.__file__:
        return None  # a subclass of another op: its inherited verifier checks IRDL constraints too
    return op_def, own


def _irdl_key(op: Operation, fp: tuple) -> tuple:
    """What xDSL's generic IRDL checks of ``op`` read, from its fingerprint: the op's
    class, operand and result types (their number included), properties, attributes,
    and its regions' blocks with their argument types (an op with successors is
    always verified whole)."""
    return (type(op), *fp[2:7])


def _verify_op(op: Operation, fp: tuple | None = None, irdl_ok: set[tuple] | None = None) -> None:
    """Verify ``op`` (not its nested ops) as ``op.verify`` does. With its fingerprint
    ``fp`` and ``irdl_ok`` (the keys, ``_irdl_key``, of ops whose IRDL constraints held),
    an op whose key is known runs all but xDSL's generic constraint checks of operands,
    results, regions, properties and attributes, which read only what the key holds:
    the same outcome, without them. Its traits and its own verifier (which may read
    producers, parents or symbols) always run."""
    parts = _irdl_parts(type(op)) if fp is not None and irdl_ok is not None else None
    key = _irdl_key(op, fp) if parts is not None and not op.successors else None
    try:
        if key is None or key not in irdl_ok:
            op.verify(verify_nested_ops=False)
            if key is not None:
                irdl_ok.add(key)
        else:
            _verify_known(op, *parts)
    except VerifyException as e:
        for trait in sorted(op.traits, key=lambda t: (type(t).__name__, repr(t))):
            try:
                trait.verify(op)
            except VerifyException as first:
                raise first from None
        raise e


def _verify_known(op: Operation, op_def: OpDef, own: Callable[[Operation], None] | None) -> None:
    """``op.verify(verify_nested_ops=False)`` of an op without successors whose IRDL
    constraints are known to hold: ``Operation.verify``'s checks of the op's place
    (its operands exist, a terminator ends its block), its traits and its own verifier,
    with xDSL's messages and error wrapping."""
    if any(isinstance(v, ErasedSSAValue) for v in op.operands):
        raise ValueError("Erased SSA value is used by the operation")
    block = op.parent
    region = block.parent if block is not None else None
    if region is not None and block.last_op is op:
        blocks = len(region.blocks)
        holder = region.parent
        if blocks == 1 and holder is not None and not holder.has_trait(NoTerminator) and not op.has_trait(IsTerminator):
            raise VerifyException(f"Operation {op.name} terminates block in single-block region but is not a terminator")
        if blocks > 1 and not op.has_trait(IsTerminator):
            raise VerifyException(f"Operation {op.name} terminates block in multi-block region but is not a terminator")
    try:
        for trait in op_def.traits:
            if not isinstance(trait, IsolatedFromAbove):  # the scope check's (module doc)
                trait.verify(op)
        if own is not None:
            own(op)
    except VerifyException as err:
        op.emit_error(f"Operation does not verify: {err}", err)


_RULES: list[set[tuple]] = []
"""Inside ``verify_module``: the keys of the ops whose own checks held (``rules_held``)."""


def rules_held() -> set[tuple] | None:
    """While ``verify_module`` verifies a module, the keys an op's own verifier records
    once its checks hold for one op: a verifier that reads only what its key holds (the
    op's class, types, properties and the symbols they name, which stay put while the
    module is verified) skips the checks for the next op with the same key (a model's
    program repeats its layers' ops). None outside."""
    return _RULES[-1] if _RULES else None


def verify_module(module: Operation, spans: Spans | None = None, line_offset: int = 0, note: str = "") -> None:
    """Verify ``module`` (scopes first, then every op, nested ops first); raise a
    ``VerifyException`` whose text is the located diagnostic (``note`` is added to the
    message in parentheses: which pass produced the program)."""
    suffix = f" ({note})" if note else ""
    found = check_scopes(module, spans)
    if found is not None:
        op, why = found
        raise VerifyException(located(op, f"'{op.name}' op {why}{suffix}", spans, line_offset))
    fps = _fingerprints(module)
    irdl_ok = _SHAPES.pop(module, None)
    if irdl_ok is None:
        irdl_ok = set()
    _RULES.append(set())
    try:
        for op in walk(module, region_first=True):
            try:
                _verify_op(op, fps.get(id(op)), irdl_ok)
            except VerifyException as e:
                msg = str(e).removeprefix("Operation does not verify: ")
                raise VerifyException(located(op, msg + suffix, spans, line_offset)) from None
    finally:
        _RULES.pop()
    _VERIFIED[module] = Checked(fps, _top(module), irdl_ok)


# --------------------------------------------------------------------------------------
# Incremental verification
# --------------------------------------------------------------------------------------


def _names_symbol(fp: tuple, memo: dict[int, bool]) -> bool:
    """Whether an op with fingerprint ``fp`` names a symbol in its types or attributes
    (a ``!dist.tensor``'s mesh, ``rt.launch``'s kernel, ``func.call``'s callee).
    ``memo`` holds the answer per attribute ``id`` (ops share their types: a result's
    type is its users' operand type), valid while the fingerprints hold the attributes."""

    def names(a) -> bool:
        known = memo.get(id(a))
        if known is None:
            known = memo[id(a)] = isinstance(a, SymbolRefAttr) or (
                isinstance(a, ParametrizedAttribute) and any(isinstance(p, SymbolRefAttr) for p in a.parameters)
            )
        return known

    for t in fp[2]:
        if names(t):
            return True
    for t in fp[3]:
        if names(t):
            return True
    for items in (fp[4], fp[5]):
        for _, v in items:
            if names(v):
                return True
    return any(names(t) for blocks in fp[6] for ts in blocks for t in ts)


def _walk(op: Operation):
    """The ops nested in ``op``, nested ops before their holder (``walk(region_first=
    True)`` without its generator per op and region)."""
    for r in op.regions:
        for b in r.blocks:
            o = b._first_op  # noqa: SLF001
            while o is not None:
                if o.regions:
                    yield from _walk(o)
                yield o
                o = o._next_op  # noqa: SLF001


def _fingerprints(module: Operation) -> dict[int, tuple]:
    """The fingerprint of every op of ``module`` by ``id``, nested ops first: what its
    verifier reads, besides the symbols it looks up (equal fingerprints, equal outcome).

    Item 0 is the op itself (which keeps it alive: its ``id`` is not reused while the
    fingerprints are held), where it is (its block, the op before it) and the values it
    reads: an op whose item 0 alone changed needs no op verifier, only the scope check,
    since op verifiers read their operands' types, not the values (except an op that
    says otherwise, ``READS_PRODUCERS``: some ``rt`` ops check which op produced an
    operand, item 1). Then the operand and result types, properties, attributes and
    block argument types."""
    out: dict[int, tuple] = {}
    for op in _walk(module):
        operands = op._operands  # noqa: SLF001 - a new tuple whenever an operand changes
        results = op.results
        regions = op.regions
        props = op.properties
        attrs = op.attributes
        out[id(op)] = (
            (op, op.parent, op._prev_op, operands),  # noqa: SLF001
            operands if getattr(op, "READS_PRODUCERS", False) else None,
            tuple([v._type for v in operands]) if operands else (),  # noqa: SLF001
            tuple([r._type for r in results]) if results else (),  # noqa: SLF001
            tuple(props.items()) if props else (),
            tuple(attrs.items()) if attrs else (),
            tuple([tuple([tuple([x._type for x in b.args]) for b in r.blocks]) for r in regions]) if regions else (),  # noqa: SLF001
        )
    return out


@dataclass
class Checked:
    """A module as it last verified: the fingerprint of every op (``_fingerprints``),
    its top-level ops (the symbols other ops look up), and the ops' IRDL keys
    (``_irdl_key``) whose generic constraint checks held, which a copy shares with its
    original (a key holds for any module: what one copy learns, the others skip; the
    tuner's hundreds of copies of one program check each op shape once)."""

    ops: dict[int, tuple]
    top: tuple[Operation, ...]
    irdl_ok: set[tuple] = dataclasses.field(default_factory=set)  # ``_irdl_key``s seen to hold


_VERIFIED: OpMemo[Checked] = OpMemo("verified")


_SHAPES: weakref.WeakKeyDictionary[Operation, set[tuple]] = weakref.WeakKeyDictionary()
"""Modules not verified yet and the IRDL keys they may take as holding (``share_shapes``)."""


def share_shapes(copy: Operation, original: Operation) -> None:
    """When ``copy`` (a copy of ``original`` changed before it verified, e.g. with other
    shapes) is verified, it skips the generic IRDL checks of the op shapes seen to hold
    in ``original`` and its copies, and what it learns they learn."""
    checked = _VERIFIED.get(original)
    if checked is not None:
        _SHAPES[copy] = checked.irdl_ok


def _record(module: Operation, irdl_ok: set[tuple] | None = None) -> Checked:
    checked = Checked(_fingerprints(module), _top(module), irdl_ok if irdl_ok is not None else set())
    _VERIFIED[module] = checked
    return checked


def _top(module: Operation) -> tuple[Operation, ...]:
    return tuple(op for r in module.regions for b in r.blocks for op in b.ops)


def forget(module: Operation) -> None:
    """Forget that ``module`` verified (its next ``ensure_verified`` checks every op)."""
    _VERIFIED.pop(module, None)


def verified_clone(
    module: Operation, spans: bool = True, value_mapper: dict[SSAValue, SSAValue] | None = None, unchanged: bool = False
) -> Operation:
    """A copy of ``module``, which is verified first (``ensure_verified``): the copy is
    known to verify, and keeps the source positions of the original's ops (unless
    ``spans`` is false: a copy whose diagnostics need none). ``value_mapper`` (``fast.clone``'s, as
    xDSL's) receives each value of ``module`` mapped to its copy. ``unchanged``: the
    caller knows that ``ensure_verified`` passed on ``module`` and that it has not
    changed since (the tuner's explored programs, only read once verified): it is not
    looked at again (what ``ensure_verified`` costs even then is a walk of every op)."""
    from distir.dialects.frontend import copy_spans

    if not unchanged or module not in _VERIFIED:
        ensure_verified(module)
    out = clone(module, value_mapper)  # xDSL's copy, in one walk
    if spans:
        copy_spans(module, out)
    _record(out, _VERIFIED[module].irdl_ok)
    return out


def ensure_verified(module: Operation, spans: Spans | None = None, line_offset: int = 0, note: str = "", scopes: bool = True) -> None:
    """Verify ``module``: only what changed since it last verified (module doc), every op
    when it never did. Raises ``VerifyException`` as ``verify_module`` does; on success
    the module is remembered as verified. ``scopes=False`` leaves the scope check to
    the caller."""
    if spans is None:
        from distir.dialects.frontend import source_spans

        spans = source_spans(module)
    suffix = f" ({note})" if note else ""
    before = _VERIFIED.pop(module, None)
    if before is None:
        verify_module(module, spans, line_offset, note)
        return
    now = _fingerprints(module)
    old_fps = before.ops
    changed: list[Operation] = []  # new, or an op verifier may see it differently
    kept = 0
    moved = False  # an op is new, elsewhere or reads other values: the scopes may differ
    for key, fp in now.items():
        old = old_fps.get(key)
        if old is None:
            changed.append(fp[0][0])
            moved = True
            continue
        kept += 1
        if old != fp:
            if old[1:] != fp[1:]:
                changed.append(fp[0][0])
            if old[0] != fp[0]:
                moved = True  # moved, or reads other values: scopes
    gone = [fp for key, fp in old_fps.items() if key not in now] if kept < len(old_fps) else []
    if scopes and (moved or gone):
        found = check_scopes(module, spans)
        if found is not None:
            op, why = found
            raise VerifyException(located(op, f"'{op.name}' op {why}{suffix}", spans, line_offset))
    top = _top(module)
    # A symbol that changed or went away (a mesh, a kernel, a function): every op that
    # names a symbol may see it differently.
    renamed = any((fp := now.get(id(op))) is None or fp[1:] != old_fps[id(op)][1:] for op in before.top)
    todo: set[Operation] = set()
    if renamed:
        memo: dict[int, bool] = {}
        todo.update(fp[0][0] for fp in now.values() if _names_symbol(fp, memo))
    for op in changed:
        old = old_fps.get(id(op))
        if old is not None and op.regions and old[4:] != now[id(op)][4:]:
            if old[5:] == now[id(op)][5:] and not getattr(op, "BODY_READS_PROPERTIES", True):
                continue  # only its properties changed, which no op of its body reads
            todo.update(op.walk())  # its regions' view of it changed: all of them
    holders = [h for fp in gone if isinstance(b := fp[0][1], Block) and (h := b.parent_op()) is not None]
    up: set[Operation] = set()  # ops whose ancestors are in todo
    for op in [*changed, *holders, *(todo if renamed else ())]:
        cur: Operation | None = op
        while cur is not None and cur not in up:
            up.add(cur)
            todo.add(cur)
            cur = cur.parent_op()
    irdl_ok = before.irdl_ok
    if todo:  # nested ops first, as verify_module
        for op in [*(fp[0][0] for fp in now.values()), module]:
            if op in todo:
                try:
                    _verify_op(op, now.get(id(op)), irdl_ok)
                except VerifyException as e:
                    msg = str(e).removeprefix("Operation does not verify: ")
                    raise VerifyException(located(op, msg + suffix, spans, line_offset)) from None
    _VERIFIED[module] = Checked(now, top, irdl_ok)
