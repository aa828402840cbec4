"""Programs with many tensors: tune one independent part per class, apply the answer
to every part of the class, and decide the buckets on the whole program.

A model's data-parallel step is one function made of independent **units**, one per
parameter tensor: the gradient's collective and the maps of the update (the Llama-7B
Adam step of ``examples/optimizer_step.py`` has 291). A unit is a connected component of
the function's ops, joined through the values they share (results and tensor
arguments; shared scalars such as the learning rate and the ``func.return`` join
nothing). Units alike as functions of their own (``explore.structure_key``: the same IR up to names)
are one **class** (the Llama step has six: the embedding and head, the attention
projections, the MLP's gate and up projections, its down projection, the norms), and
the schedules of a unit do not depend on the other units, so:

1. each class's first unit, as a program of its own (``Unit.program``), is tuned like
   any program (``tuner.tune``: explored, checked, predicted);
2. the schedule each class picks at a size becomes one pipeline for the whole program
   (``compose``): the class's passes with every ``targets`` name replaced by the names
   of the same values in every unit of the class, the classes' passes interleaved step
   by step (the first step of every schedule is the same ``fuse-maps``), passes of one
   kind and options merged into one with all their targets;
3. the whole program is predicted with that pipeline as written and with its
   collectives combined into larger buckets (``combine-collectives`` after
   ``fix-mesh-sizes``: the default lowering combines up to 32 MiB), against the program
   as written.

That the composed pipeline does on every unit what the class's schedule did on the
first (and so what its interpreter check ran) is checked structurally: every unit of
the result prints as the class's schedule does, up to names (``realized``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FunctionType, IntegerAttr, ModuleOp, i64
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from distir.dialects.dist import TensorType
from distir.dialects.fast import Kinds, clone, walk
from distir.passes.support import printed_names
from distir.tuning.explore import structure_key

MANY_UNITS = 2
"""From this many units on, a program is tuned unit class by unit class."""

BUCKETS = (256 << 20, 2 << 30)
"""Bucket sizes (bytes) tried besides the default lowering's 32 MiB."""


@dataclass
class Unit:
    """An independent part of a function: its ops (in block order), the function
    arguments it reads and the function results it produces (indices, in order)."""

    ops: list[Operation]
    args: list[int]
    results: list[int]
    key: tuple = ()
    """``structure_key`` of ``program()``: units with one key form a class."""
    _program: ModuleOp | None = field(default=None, repr=False)
    _values: list[SSAValue] = field(default_factory=list, repr=False)
    """The unit's values in ``program()``'s order (arguments, then results of ops in
    walk order), as values of the original function."""

    def program(self, module: ModuleOp, f: func.FuncOp) -> ModuleOp:
        """The unit as a module of its own: the meshes of ``module`` and one function
        named like ``f`` over the unit's arguments, returning its results (in-place
        results still written into their arguments)."""
        if self._program is not None:
            return self._program
        args = [f.body.block.args[i] for i in self.args]
        block = Block(arg_types=[a.type for a in args])
        mapping: dict[SSAValue, SSAValue] = {}
        for new, old in zip(block.args, args):
            new.name_hint = old.name_hint
            mapping[old] = new
        values: list[SSAValue] = list(args)
        for op in self.ops:
            block.add_op(clone(op, mapping))
            values += [v for o in op.walk() for v in o.results]
        ret = f.body.block.last_op
        assert isinstance(ret, func.ReturnOp)
        outs = [mapping[ret.operands[i]] for i in self.results]
        block.add_op(func.ReturnOp(*outs))
        position = {a: k for k, a in enumerate(self.args)}
        res_attrs = None
        if f.res_attrs is not None:
            attrs = []
            for i in self.results:
                d = dict(f.res_attrs.data[i].data)
                inplace = d.get("dist.inplace")
                if isinstance(inplace, IntegerAttr) and inplace.value.data in position:
                    d["dist.inplace"] = IntegerAttr(position[inplace.value.data], i64)
                attrs.append(DictionaryAttr(d))
            res_attrs = ArrayAttr(attrs)
        arg_attrs = ArrayAttr([f.arg_attrs.data[i] for i in self.args]) if f.arg_attrs is not None else None
        fn = func.FuncOp(
            f.sym_name.data,
            FunctionType.from_lists([a.type for a in args], [v.type for v in outs]),
            Region(block),
            arg_attrs=arg_attrs,
            res_attrs=res_attrs,
        )
        out = ModuleOp([o.clone() for o in module.ops if not isinstance(o, func.FuncOp)] + [fn])
        self._program = out
        self._values = values
        return out


_RETURN = Kinds(func.ReturnOp)
_TENSOR = Kinds(TensorType)


def _joined(f: func.FuncOp):
    """(the body's block, its ops but the return, each op's index, the union-find's
    ``find`` over op indices and then argument indices ``len(ops) + i``): the ops
    joined through the values they share (module doc)."""
    block = f.body.block
    ops = [o for o in block.ops if not _RETURN(o)]
    parent = list(range(len(ops) + len(block.args)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    index = {op: k for k, op in enumerate(ops)}
    n = len(ops)
    for k, op in enumerate(ops):
        for inner in walk(op) if op.regions else (op,):  # (most ops have no body: no walk)
            for v in inner.operands:
                owner = v.owner
                if owner is block:  # an argument of the function
                    if _TENSOR(v.type) and v.type.rank > 0:  # type: ignore[attr-defined]
                        union(k, n + v.index)  # type: ignore[attr-defined]
                elif owner in index:
                    union(k, index[owner])  # type: ignore[index]
    return block, ops, index, find


def most_in_one_unit(f: func.FuncOp, count: Callable[[Operation], int]) -> int:
    """The largest sum of ``count`` over the ops of one unit of ``f`` (0 when it has
    none): what summing it over each of ``units(f)`` gives, without making the units
    (their arguments and results)."""
    _, ops, _, find = _joined(f)
    totals: dict[int, int] = {}
    for k, op in enumerate(ops):
        c = count(op)
        if c:
            root = find(k)
            totals[root] = totals.get(root, 0) + c
    return max(totals.values(), default=0)


def units(f: func.FuncOp) -> list[Unit]:
    """The independent parts of ``f`` (module doc), in block order of their first op."""
    block, ops, index, find = _joined(f)
    n = len(ops)
    groups: dict[int, Unit] = {}
    for k, op in enumerate(ops):
        groups.setdefault(find(k), Unit([], [], [])).ops.append(op)
    for root, unit in groups.items():
        used: set[int] = set()
        for op in unit.ops:
            for inner in walk(op) if op.regions else (op,):
                used.update(v.index for v in inner.operands if v.owner is block)  # type: ignore[attr-defined]
        unit.args = sorted(used)
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    for i, v in enumerate(ret.operands):
        if isinstance(v, BlockArgument):
            root = find(n + v.index)
        else:
            root = find(index[v.owner])  # type: ignore[index]
        if root in groups:
            groups[root].results.append(i)
        else:
            groups[root] = Unit([], [v.index], [i])  # type: ignore[union-attr]
    return sorted(groups.values(), key=lambda u: index[u.ops[0]] if u.ops else -1)


@dataclass
class UnitClass:
    """Units that print alike: ``units[0]`` is tuned for all."""

    units: list[Unit]

    @property
    def first(self) -> Unit:
        return self.units[0]


def classes(module: ModuleOp, f: func.FuncOp) -> list[UnitClass]:
    """The units of ``f`` grouped by their structure (module doc)."""
    out: dict[str, UnitClass] = {}
    for u in units(f):
        u.key = structure_key(u.program(module, f))
        out.setdefault(u.key, UnitClass([])).units.append(u)
    return list(out.values())


def names(module: ModuleOp, f: func.FuncOp, cls: UnitClass, whole: dict[SSAValue, str] | None = None) -> list[dict[str, str]]:
    """For each unit of the class, the names its values print with in ``module``
    (``whole``: ``printed_names(module)``, printed once for all classes), keyed by the
    names of the same values in the first unit's own program."""
    whole = whole if whole is not None else printed_names(module)
    first = cls.first
    prog = first.program(module, f)
    own = printed_names(prog)
    first_names = [own[v] for v in _program_values(prog)]
    out = []
    for u in cls.units:
        u.program(module, f)
        out.append({a: whole[v] for a, v in zip(first_names, u._values)})  # noqa: SLF001
    return out


def _program_values(prog: ModuleOp) -> list[SSAValue]:
    """The values of a unit program in ``Unit._values``' order."""
    fn = next(o for o in prog.ops if isinstance(o, func.FuncOp))
    values: list[SSAValue] = list(fn.body.block.args)
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            continue
        values += [v for o in op.walk() for v in o.results]
    return values


# --------------------------------------------------------------------------------------
# One pipeline for the whole program
# --------------------------------------------------------------------------------------


def retarget(p: ModulePass, renames: Sequence[dict[str, str]]) -> ModulePass:
    """``p`` acting on the values its targets name in every unit (``names``). A target
    an earlier pass made (``%avg_rs`` of a split ``%avg``) is the unit's name of the
    value it was made from with the same suffix; a target that names nothing of a unit
    is a ``ValueError`` (never a pass without targets, which would act everywhere)."""
    targets = getattr(p, "targets", None)
    if not targets:
        return p
    new = tuple(dict.fromkeys(_rename(t, r) for r in renames for t in targets))
    return dataclasses.replace(p, targets=new)


def _rename(target: str, renames: dict[str, str]) -> str:
    if target in renames:
        return renames[target]
    base = max((k for k in renames if target.startswith(k + "_")), key=len, default=None)
    if base is None:
        raise ValueError(f"target %{target} names no value of the part")
    return renames[base] + target[len(base) :]


def compose(per_class: Sequence[tuple[Sequence[ModulePass], Sequence[dict[str, str]]]]) -> tuple[ModulePass, ...]:
    """One pipeline from each class's passes and its units' names (module doc): step k
    of every class after step k-1 of every class; in one step, passes of one kind with
    the same options (their targets aside) merged into one."""
    out: list[ModulePass] = []
    longest = max((len(ps) for ps, _ in per_class), default=0)
    for k in range(longest):
        start = len(out)
        for ps, renames in per_class:
            if k >= len(ps):
                continue
            p = retarget(ps[k], renames)
            for j in range(start, len(out)):
                if _same_kind(p, out[j]):
                    out[j] = _merge(out[j], p)
                    break
            else:
                out.append(p)
    return tuple(out)


def _same_kind(p: ModulePass, q: ModulePass) -> bool:
    if type(p) is not type(q):
        return False
    fields = [f.name for f in dataclasses.fields(p) if f.name != "targets"]  # type: ignore[arg-type]
    return all(getattr(p, f) == getattr(q, f) for f in fields)


def _merge(q: ModulePass, p: ModulePass) -> ModulePass:
    """One pass doing what ``q`` and ``p`` do (a pass without targets acts everywhere)."""
    tq, tp = getattr(q, "targets", ()), getattr(p, "targets", ())
    if not tq or not tp:
        return q if not tq else p
    return dataclasses.replace(q, targets=tuple(dict.fromkeys((*tq, *tp))))


def combinable(program: ModuleOp) -> bool:
    """Whether the default lowering's buckets (``combine-collectives``, 32 MiB) hold two
    or more of the unit's largest collective."""
    from distir.dialects import coll
    from distir.passes.combine_collectives import DEFAULT_BUCKET_BYTES

    largest = 0
    for op in program.walk():
        if isinstance(op, coll.CollectiveOp) and isinstance(op.input.type, TensorType):
            t = op.input.type
            width = getattr(t.element_type, "bitwidth", 32)
            largest = max(largest, math.prod(t.get_shape()) * max(1, width // 8))
    return 0 < largest <= DEFAULT_BUCKET_BYTES // 2


def signature(f: func.FuncOp, ops: Sequence[Operation] | None = None) -> tuple:
    """What the structure of a unit comes down to, without printing it: every op's name,
    options and result types in walk order, and the types of the arguments it reads."""
    out: list = []
    for op in ops if ops is not None else [o for o in f.body.block.ops if not isinstance(o, func.ReturnOp)]:
        for o in op.walk():
            out.append((o.name, tuple(o.properties.items()), tuple(r.type for r in o.results), len(o.operands)))
    return tuple(out)


def realized(module: ModuleOp, expected: Sequence[ModuleOp]) -> bool:
    """Whether every unit of ``module``'s function has the ``signature`` of one of the
    ``expected`` programs (each class's schedule): the composed pipeline did on every
    unit what the class's schedule does on its first."""
    f = next(o for o in module.ops if isinstance(o, func.FuncOp))
    want = {signature(next(o for o in e.ops if isinstance(o, func.FuncOp))) for e in expected}
    return all(signature(f, u.ops) in want for u in units(f))
