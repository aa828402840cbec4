"""Machinery shared by the rewrite passes: target names, diagnostics, all-or-nothing
application, and small builders for the ops the passes create.

Targets. Every transformation pass takes ``targets`` (SSA names without ``%``, as
CoCoNet names the stages of a schedule). A name is matched against the name the value
has when the module is printed (``%sum``, ``%sum_rs``), so what a user reads in the
output is what they can target in the next pass. A pass fails with a diagnostic when a
target names no value, or names a value the pass may not rewrite; it then leaves the IR
as it was (``apply_all_or_nothing``).

Names of new values. A pass gives the values it creates names derived from the value
they replace: ``%sum`` split into ``%sum_rs`` and ``%sum_ag``, the sliced version of
``%out`` is ``%out_s``, a partial (``local``) result is ``%n_part``.
"""

from __future__ import annotations

import contextlib
import gc
import io
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, UnrealizedConversionCastOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.printer import Printer
from xdsl.utils.exceptions import PassFailedException, VerifyException

from distir.dialects import dist, layout
from distir.dialects.dist import MeshOp, TensorType
from distir.dialects.fast import walk
from distir.dialects.format import REQUIRED
from distir.dialects.placements import Placement


# --------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------


class PassDiagnostic(PassFailedException):
    """A pass request that names nothing or that the rewrite rules forbid."""


def fail(pass_name: str, msg: str) -> NoReturn:
    raise PassDiagnostic(f"'{pass_name}' pass: {msg}")


# --------------------------------------------------------------------------------------
# Names and targets
# --------------------------------------------------------------------------------------


def printed_names(root: Operation) -> dict[SSAValue, str]:
    """The name (without ``%``) each SSA value of ``root`` gets when printed."""
    printer = Printer(stream=io.StringIO())
    printer.print_op(root)
    return dict(printer._ssa_values)  # noqa: SLF001 - the printer is the authority on names


def display(value: SSAValue, names: dict[SSAValue, str] | None = None) -> str:
    if names is not None and value in names:
        return f"%{names[value]}"
    return f"%{value.name_hint}" if value.name_hint else "an unnamed value"


class Targets:
    """The ``targets`` option of a pass, resolved against a module's printed names.

    The printed names are computed (by printing the module once) only when the pass was
    given targets or needs a name for a diagnostic: without targets a pass acts
    wherever it applies and never prints. Inside ``scratch(module, names)`` they are
    the names given."""

    def __init__(self, pass_name: str, targets: Sequence[str], module: ModuleOp):
        self.pass_name = pass_name
        self.wanted = tuple(t.removeprefix("%") for t in targets)
        self.module = module
        self._names: dict[SSAValue, str] | None = _KNOWN_NAMES.pop(module, None)  # (``scratch``)
        self._by_name: dict[str, list[SSAValue]] | None = None
        self.used: set[str] = set()

    @property
    def names(self) -> dict[SSAValue, str]:
        if self._names is None:
            self._names = printed_names(self.module)
        return self._names

    @property
    def by_name(self) -> dict[str, list[SSAValue]]:
        if self._by_name is None:
            self._by_name = {}
            for value, name in self.names.items():
                self._by_name.setdefault(name, []).append(value)
        return self._by_name

    @property
    def all(self) -> bool:
        """No targets given: the pass acts wherever it applies."""
        return not self.wanted

    def name(self, value: SSAValue) -> str | None:
        return self.names.get(value)

    def selects(self, value: SSAValue) -> bool:
        """Whether the pass may act on the op producing ``value`` (or on this argument)."""
        if self.all:
            return True
        name = self.names.get(value)
        return name is not None and name in self.wanted

    def values(self, name: str) -> list[SSAValue]:
        return self.by_name.get(name, [])

    def require_known(self, what: str, candidates: Iterable[SSAValue] = ()) -> None:
        """Fail for a target that names no value at all."""
        for t in self.wanted:
            if t not in self.by_name:
                shown = sorted({display(v, self.names) for v in candidates})
                hint = f" ({what} here: {', '.join(shown)})" if shown else f" (the module has no {what})"
                fail(self.pass_name, f"target %{t} names no value{hint}")

    def require(self, name: str, ok: bool, why: str) -> None:
        if not ok:
            fail(self.pass_name, f"target %{name}: {why}")


@contextlib.contextmanager
def gc_paused():
    """No automatic garbage collection inside: a pass allocates many small objects while
    the whole module is alive, and each full collection walks every live object, which
    made passes on large modules superlinear (measured: lower-collectives 5.8x the time
    for 4x the tensors with collections, 3.8x without). The garbage (erased ops) is
    collected after the pass as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def collections_of_new_objects():
    """Inside, a collection (``gc.collect()``, as ``plan`` runs after each tuning) scans
    only the objects made inside: those alive on entry are set aside (``gc.freeze``) and
    given back to the collector on leaving (``gc.unfreeze``; both move a list, whatever
    its length). A full collection walks every object the process holds, the caller's
    too: 0.33 s each in a test process holding other programs, 16 of 116 s of
    test_plan.py's CPU. A cycle of objects alive on entry that becomes garbage inside is
    collected after, as usual. Where objects are already frozen (the caller's own
    use of ``gc.freeze``, which ``unfreeze`` would undo) it does nothing."""
    global _SETTING_ASIDE
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    _SETTING_ASIDE = True
    try:
        yield
    finally:
        _SETTING_ASIDE = False
        gc.unfreeze()


_SETTING_ASIDE = False
"""Inside ``collections_of_new_objects``, where it froze the objects alive on entry."""


def collect_garbage() -> None:
    """``gc.collect()``; inside ``collections_of_new_objects``, what survives it is set
    aside too, so that the next collection scans only the objects made after this one
    (given back with the rest on leaving). The planner collects after each plan it
    tunes: the plans, graph and integer programs made before survive every collection,
    and were scanned again by each (12 collections of 1.6 s each in a plan of the JAX
    GPT step)."""
    gc.collect()
    if _SETTING_ASIDE:
        gc.freeze()


def set_aside() -> bool:
    """Inside ``collections_of_new_objects``: every object alive now is set aside too
    (``gc.freeze``: moved, not scanned), so that the next collection scans only what is
    made after it; whether it did (outside, it does nothing). The planner sets its plan
    aside before it lowers a copy of the plan's program to predict it, and collects
    after: the copy, garbage by then, is scanned alone, where the one collection when
    the plan ended scanned every object the plan made (0.7 s of a 10 s plan of the
    24-layer GPT step at 256 ranks, 557,000 of its 1.44 million objects garbage: the
    two copies)."""
    if _SETTING_ASIDE:
        gc.freeze()
    return _SETTING_ASIDE


@contextlib.contextmanager
def returns_split(module: ModuleOp):
    """Inside, every ``func.return`` reads each value through its own one-operand
    placeholder (``builtin.unrealized_conversion_cast``, inserted just before the
    return); on leaving, the return reads the placeholders'
    operands again and they are erased. xDSL copies an op's whole operand tuple each time
    one of its operands is replaced, so a pass that replaces the n returned values of a
    model-scale step one by one (fuse-allreduce, reorder-allgather) would cost O(n^2);
    through the placeholders each replacement is O(1). The placeholders are ordinary
    users for the pass (an op after every computation that is neither a computation nor
    a collective), as the return is. (Every return, not only long ones, so that the pass
    behaves the same on small programs as at model scale.)"""
    split: list[tuple[func.ReturnOp, list[Operation]]] = []
    for ret in [o for o in walk(module) if isinstance(o, func.ReturnOp) and o.operands]:
        block = ret.parent_block()
        assert block is not None
        holders = [UnrealizedConversionCastOp.get([v], [v.type]) for v in ret.operands]
        for h in holders:
            block.insert_op_before(h, ret)
        ret.operands = [h.results[0] for h in holders]
        split.append((ret, holders))
    try:
        yield
    finally:
        for ret, holders in split:
            ret.operands = [h.operands[0] for h in holders]
            for h in holders:
                h.detach()
                h.erase()

_SCRATCH: weakref.WeakSet[Operation] = weakref.WeakSet()
_KNOWN_NAMES: dict[Operation, dict[SSAValue, str]] = {}


@contextlib.contextmanager
def scratch(module: ModuleOp, names: dict[SSAValue, str] | None = None):
    """Inside, passes may leave ``module`` half rewritten when they reject a request:
    its owner throws it away then (the tuner's exploration applies each pass to a copy
    of its own), so ``apply_all_or_nothing`` skips its protective copy.

    ``names``: ``printed_names(module)`` as it is on entering, known to the owner (the
    names of the program it copied, through the copy's value map): the first
    ``Targets`` made on ``module`` inside takes them instead of printing the module.
    (Passes make their ``Targets`` before rewriting anything; the one-operand
    placeholders of ``returns_split``, which some passes insert first, come last in
    the printed function, so every other value keeps the name it had.)"""
    _SCRATCH.add(module)
    if names is not None:
        _KNOWN_NAMES[module] = names
    try:
        yield module
    finally:
        _SCRATCH.discard(module)
        _KNOWN_NAMES.pop(module, None)


def apply_all_or_nothing(module: ModuleOp, body: Callable[[ModuleOp], None], targets: Sequence[str] | None = None) -> None:
    """Run ``body`` on a copy of ``module`` and, if it returns, move the result into
    ``module``; if it raises, ``module`` is left exactly as it was.

    Passes reject a request only when it names targets (without targets a pass skips
    what it may not rewrite), so a pass that passes its (empty) ``targets`` runs in
    place: the copy, the one whole-module cost of a pass besides its own work, is paid
    only when a rejection can happen (and not on a ``scratch`` module)."""
    if (targets is not None and not targets) or module in _SCRATCH:
        with gc_paused():
            body(module)
        return
    with gc_paused():
        work = module.clone()
        body(work)
    old = module.body.block
    new = work.body.block
    work.body.detach_block(new)
    module.body.detach_block(old)
    module.body.add_block(new)
    old.erase(safe_erase=False)


def replace_values(mapping: dict[SSAValue, SSAValue]) -> None:
    """Every use of each key becomes a use of its value, each using op updated once:
    xDSL copies an op's whole operand tuple per replaced operand, so replacing the n
    values a ``func.return`` returns one by one costs O(n^2)."""
    ops: dict[Operation, None] = {}
    for old in mapping:
        for use in old.uses:
            ops[use.operation] = None
    for op in ops:
        op.operands = [mapping.get(v, v) for v in op.operands]


def set_name(value: SSAValue, base: str | None, suffix: str = "") -> None:
    """Name a new value after the one it replaces (no name when the base has none)."""
    if base:
        value.name_hint = f"{base}{suffix}"


def hint(value: SSAValue) -> str | None:
    return value.name_hint


# --------------------------------------------------------------------------------------
# IR queries
# --------------------------------------------------------------------------------------


def functions(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in walk(module) if isinstance(op, func.FuncOp)]


def tensor_type(value: SSAValue) -> TensorType | None:
    return value.type if isinstance(value.type, TensorType) else None


def mesh_of(op: Operation, t: TensorType) -> MeshOp | None:
    try:
        return dist.lookup_mesh(op, t)
    except VerifyException:
        return None


def mesh_sizes(op: Operation, t: TensorType) -> tuple[int | None, ...] | None:
    mesh = mesh_of(op, t)
    return None if mesh is None else mesh.sizes()


def group_size(op: Operation, t: TensorType, axes: Sequence[int]) -> int | None:
    sizes = mesh_sizes(op, t)
    return None if sizes is None else layout.group_size(sizes, axes)


def slice_dim(t: TensorType, n: int | None, among: Sequence[int] | None = None) -> int | None:
    """The dim to cut ``t`` along over a group of ``n`` ranks (None: not known yet) when
    any dim will do (any of ``among``, when given): the first one the group divides
    (equal blocks, no padding), else the one with the least padding (blocks of
    ceil(s/n): n * ceil(s/n) over s), the larger on a tie; None for a 0-d tensor."""
    shape = t.get_shape()
    dims = list(range(len(shape)) if among is None else among)
    for d in dims:
        if n is None or shape[d] % n == 0:
            return d
    if not dims:
        return None
    assert n is not None
    return min(dims, key=lambda d: (n * layout.ceil_div(shape[d], n) / max(shape[d], 1), -shape[d], d))


def inside_fused_or_overlap(op: Operation) -> bool:
    """Whether ``op`` sits in the region of a fused collective or a ``coll.overlap``."""
    from distir.dialects import coll

    p = op.parent_op()
    while p is not None:
        if isinstance(p, coll.FusedCollectiveOp | coll.OverlapOp):
            return True
        p = p.parent_op()
    return False


def ancestor_in(op: Operation, block: Block) -> Operation | None:
    """The op of ``block`` that is ``op`` or contains it."""
    cur: Operation | None = op
    while cur is not None and cur.parent_block() is not block:
        cur = cur.parent_op()
    return cur


def users_in(value: SSAValue, block: Block) -> list[Operation]:
    """The ops of ``block`` that use ``value`` directly or inside their regions."""
    out: dict[Operation, None] = {}
    for use in value.uses:
        a = ancestor_in(use.operation, block)
        if a is not None:
            out[a] = None
    return list(out)


def index_in_block(block: Block) -> dict[Operation, int]:
    return {op: i for i, op in enumerate(block.ops)}


class BlockOrder:
    """Positions of ops in their blocks, so that "is A before B" costs O(1) instead of a
    walk of the block (xDSL's ``is_before_in_block``).

    Keys are numbered per block when first asked for, then maintained: a pass that
    inserts or moves an op calls ``place(op)`` afterwards, which gives it a key between
    its neighbours' (renumbering the block only when the gap is used up, which takes
    about 50 insertions into one gap). Erased ops are simply never asked for again."""

    def __init__(self) -> None:
        self._key: dict[Operation, float] = {}
        self._numbered: set[Block] = set()

    def _number(self, block: Block) -> None:
        for i, op in enumerate(block.ops):
            self._key[op] = float(i)
        self._numbered.add(block)

    def key(self, op: Operation) -> float:
        k = self._key.get(op)
        if k is None:
            block = op.parent_block()
            assert block is not None, "BlockOrder.key of an op outside any block"
            if block in self._numbered:
                self.place(op)
            else:
                self._number(block)
            k = self._key[op]
        return k

    def before(self, a: Operation, b: Operation) -> bool:
        """Whether ``a`` comes strictly before ``b`` (ops of the same block)."""
        return self.key(a) < self.key(b)

    def place(self, op: Operation) -> None:
        """Give ``op`` (just inserted or moved in its block) a key between its
        neighbours'."""
        block = op.parent_block()
        assert block is not None
        if block not in self._numbered:
            self._number(block)
            return
        prev, nxt = op.prev_op, op.next_op
        lo = self._key.get(prev) if prev is not None else -1.0
        hi = self._key.get(nxt) if nxt is not None else None
        if lo is None or (nxt is not None and hi is None):
            self._number(block)
            return
        if hi is None:
            self._key[op] = lo + 1.0
            return
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            self._number(block)
            return
        self._key[op] = mid

    def place_run(self, ops: Sequence[Operation]) -> None:
        """``place`` for consecutive ops just inserted (or moved) together."""
        if not ops:
            return
        block = ops[0].parent_block()
        assert block is not None
        if block not in self._numbered:
            self._number(block)
            return
        prev, nxt = ops[0].prev_op, ops[-1].next_op
        lo = self._key.get(prev) if prev is not None else -1.0
        hi = self._key.get(nxt) if nxt is not None else (lo + len(ops) + 1 if lo is not None else None)
        if lo is None or hi is None:
            self._number(block)
            return
        step = (hi - lo) / (len(ops) + 1)
        keys = [lo + step * (i + 1) for i in range(len(ops))]
        if not all(a < b for a, b in zip([lo, *keys], [*keys, hi])):
            self._number(block)
            return
        for op, k in zip(ops, keys):
            self._key[op] = k

    def forget(self, op: Operation) -> None:
        """``op`` left its block (erased, or moved into another block)."""
        self._key.pop(op, None)

    def sort(self, ops: Iterable[Operation]) -> list[Operation]:
        return sorted(ops, key=self.key)


def defined_before(value: SSAValue, op: Operation, order: BlockOrder | None = None) -> bool:
    """Whether ``value`` is available at ``op`` (same block or an enclosing one)."""
    owner = value.owner
    if isinstance(owner, Block):
        cur: Operation | None = op
        while cur is not None:
            if cur.parent_block() is owner:
                return True
            cur = cur.parent_op()
        return False
    assert isinstance(owner, Operation)
    block = owner.parent_block()
    if block is None:
        return False
    a = ancestor_in(op, block)
    if a is None or a is owner:
        return False
    return order.before(owner, a) if order is not None else owner.is_before_in_block(a)


def inexact_average(kind: str | None, t, axes_count: int) -> bool:
    """Whether an average over several mesh axes, done axis by axis, differs from the
    average over the whole group: for integers, truncating each partial average loses
    what the whole sum would keep (floats only round differently)."""
    from xdsl.dialects.builtin import IntegerType

    return kind == "avg" and axes_count > 1 and isinstance(getattr(t, "element_type", t), IntegerType)


def same_placements(a: Sequence[Placement], b: Sequence[Placement]) -> bool:
    return layout.same_layout(a, b)


def same_type(a: Attribute, b: Attribute) -> bool:
    """Type equality with layouts compared by meaning."""
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        return (
            a.get_shape() == b.get_shape()
            and a.element_type == b.element_type
            and a.mesh_name == b.mesh_name
            and layout.same_layout(a.get_placements(), b.get_placements())
        )
    return a == b


def try_build(build: Callable[[], Operation]) -> Operation | None:
    """Build an op whose result types are inferred; None when its rule rejects the operands."""
    try:
        return build()
    except VerifyException:
        return None


def is_dead(op: Operation) -> bool:
    return all(not r.uses for r in op.results)


def erase_dead(ops: Iterable[Operation]) -> None:
    """Erase ops without uses, and then their operands' producers among ``ops`` that die
    (a worklist: each op is looked at once per use it loses)."""
    pending = {op for op in ops if op.parent is not None}
    work = [op for op in pending]
    while work:
        op = work.pop()
        if op not in pending or op.parent is None or not is_dead(op):
            continue
        pending.discard(op)
        producers = [v.owner for v in op.operands if isinstance(v.owner, Operation) and v.owner in pending]
        op.detach()
        op.erase()
        work.extend(producers)


# --------------------------------------------------------------------------------------
# Map bodies
# --------------------------------------------------------------------------------------


def clone_map(src: dist.MapOp, operands: Sequence[SSAValue], result_types: Sequence[Attribute]) -> dist.MapOp:
    """A copy of ``src`` on other operands (same element types) giving other result types."""
    return dist.MapOp.make(list(operands), list(result_types), [src.body.clone()])


def new_block_region(arg_types: Sequence[Attribute]) -> tuple[Region, Block]:
    block = Block(arg_types=list(arg_types))
    return Region(block), block


# --------------------------------------------------------------------------------------
# Types of collectives and maps built before they are placed in a module
# --------------------------------------------------------------------------------------


def infer_type(cls, operand_types: Sequence[Attribute], sizes, **options) -> Attribute | None:
    """The result type ``cls.infer`` gives, or None when the rule rejects the operands."""
    full = {kw.keyword: kw.default for kw in cls.KEYWORDS if kw.default is not None and kw.default is not REQUIRED}
    full.update(options)
    try:
        return cls.infer(list(operand_types), sizes, full)[0]
    except (dist.RuleError, KeyError, TypeError, ValueError):
        return None


def map_fits(operands: Sequence[SSAValue], result: TensorType) -> bool:
    """Whether a ``dist.map`` over ``operands`` may give ``result`` (the placement rule of
    ``dist.map``: every tensor operand placed as the result, through broadcasting)."""
    shapes = [v.type.get_shape() for v in operands if isinstance(v.type, TensorType)]
    b = dist.broadcast_shapes(shapes) if shapes else ()
    if b is None or dist.broadcast_shapes([b, result.get_shape()]) != result.get_shape():
        return False
    for v in operands:
        t = v.type
        if isinstance(t, TensorType):
            if t.mesh_name != result.mesh_name:
                return False
            if not layout.same_layout(t.get_placements(), dist.operand_placements(result, t.get_shape())):
                return False
    return True


def place_like(result: TensorType, shape: Sequence[int]) -> list[Placement]:
    """The placements a map operand of ``shape`` needs next to a result placed as ``result``."""
    return dist.operand_placements(result, shape)


def make_yield(cls, values: Sequence[SSAValue]) -> Operation:
    """A ``coll.yield`` or ``dist.yield`` of ``values``."""
    return cls.create(operands=list(values))
