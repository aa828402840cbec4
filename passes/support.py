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

import io
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.printer import Printer
from xdsl.utils.exceptions import PassFailedException, VerifyException

from distir.dialects import dist, layout
from distir.dialects.dist import MeshOp, TensorType
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
    """The ``targets`` option of a pass, resolved against a module's printed names."""

    def __init__(self, pass_name: str, targets: Sequence[str], module: ModuleOp):
        self.pass_name = pass_name
        self.wanted = tuple(t.removeprefix("%") for t in targets)
        self.names = printed_names(module)
        self.by_name: dict[str, list[SSAValue]] = {}
        for value, name in self.names.items():
            self.by_name.setdefault(name, []).append(value)
        self.used: set[str] = set()

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


def apply_all_or_nothing(module: ModuleOp, body: Callable[[ModuleOp], None]) -> None:
    """Run ``body`` on a copy of ``module`` and, if it returns, move the result into
    ``module``; if it raises, ``module`` is left exactly as it was."""
    work = module.clone()
    body(work)
    old = module.body.block
    new = work.body.block
    work.body.detach_block(new)
    module.body.detach_block(old)
    module.body.add_block(new)
    old.erase(safe_erase=False)


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
    return [op for op in module.walk() if isinstance(op, func.FuncOp)]


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
    out: list[Operation] = []
    for use in value.uses:
        a = ancestor_in(use.operation, block)
        if a is not None and a not in out:
            out.append(a)
    return out


def index_in_block(block: Block) -> dict[Operation, int]:
    return {op: i for i, op in enumerate(block.ops)}


def defined_before(value: SSAValue, op: Operation) -> bool:
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
    return a is not None and a is not owner and owner.is_before_in_block(a)


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
    """Erase ops without uses, and then their operands' producers among ``ops`` that die."""
    pending = [op for op in ops if op.parent is not None]
    changed = True
    while changed:
        changed = False
        for op in list(pending):
            if op.parent is not None and is_dead(op):
                op.detach()
                op.erase()
                pending.remove(op)
                changed = True


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
