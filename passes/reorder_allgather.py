"""``reorder-allgather{targets=...}``: CoCoNet's AllGather reorder. A computation on the
result of an AllGather runs on the slices instead, and the AllGather moves after it::

    f(all_gather(x), r) = all_gather(f(x, take_slice(r)))

The sliced computation reads the AllGather's input instead of its output, its other
replicated operands become ``dist.take_slice`` along the gathered dim (an operand that
is itself gathered the same way is read before its AllGather; an operand broadcast
along the gathered dim stays replicated), and each of its results gets its own
AllGather. Valid when the computation can be sliced along the gathered dim (CoCoNet's
rule): ``dist.map`` whose result keeps that dim, ``dist.dropout`` (its random stream is
keyed by the logical element index), ``dist.cast``, ``dist.matmul`` gathered on a
row/batch dim of ``lhs`` or the column dim of ``rhs``, and ``dist.reduce_tensor``::

    reduce_tensor(all_gather(x), dims)  = all_reduce(reduce_tensor(x, dims))   gathered dim in dims
                                        = all_gather(reduce_tensor(x, dims))   otherwise

(partial results on the slices, combined by an all_reduce of the same kind: this is
how LAMB's norms end up computed on slices; an integer ``avg`` is not, since truncated
partial averages do not average to the average).

``targets`` names either AllGathers (``%sum_ag``: all computations on it move, and
those on the AllGathers this creates, transitively, as CoCoNet's ``reorder(agSum,
comps)``), or computations (``%out``: that computation moves past the AllGather of one
of its operands). No targets: every AllGather, transitively. A named computation that
cannot be sliced is an error. New values: ``%out_s`` (sliced computation), ``%out``
(its AllGather), ``%r_s`` (a take_slice), ``%n_part`` (partial reductions). Example::

    %sum_ag = coll.all_gather %sum_rs : ... [sliced<0>] -> ... [replicated]
    %out = dist.map(%sum_ag, %r) : (..., ...) -> ... [replicated] { ... }

becomes::

    %r_s = dist.take_slice %r dim 0 : ... [replicated] -> ... [sliced<0>]
    %out_s = dist.map(%sum_rs, %r_s) : (..., ...) -> ... [sliced<0>] { ... }
    %out = coll.all_gather %out_s : ... [sliced<0>] -> ... [replicated]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll, dist, layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import Replicated
from distir.passes.support import (
    BlockOrder,
    Targets,
    apply_all_or_nothing,
    clone_map,
    defined_before,
    display,
    erase_dead,
    fail,
    map_fits,
    mesh_sizes,
    place_like,
    returns_split,
    same_type,
    set_name,
    try_build,
)


class NotSliceable(Exception):
    """The computation cannot move past the collective; the message says why."""


@dataclass
class Mover:
    """Moves computations past one kind of finishing collective (AllGather here,
    Broadcast in ``reorder-broadcast``). ``c`` is the collective, ``x`` its input."""

    kind: type[coll.CollectiveOp]
    cache: dict[tuple, SSAValue]
    order: BlockOrder = field(default_factory=BlockOrder)

    def insert(self, ops: Sequence[Operation], at: Operation) -> None:
        """Insert ``ops`` before ``at`` (keeping the block order index up to date)."""
        block = at.parent_block()
        assert block is not None
        block.insert_ops_before(list(ops), at)
        self.order.place_run(list(ops))

    # ------------------------------------------------------------ per-collective rules
    def before_type(self, c: coll.CollectiveOp, operand: TensorType, result: TensorType) -> TensorType:
        """The type a computation result of type ``result`` has when computed before
        ``c``, given that its operand from ``c`` has type ``operand`` (after ``c``)."""
        x = c.input.type
        assert isinstance(x, TensorType)
        axes = list(c.axes)
        d = layout.innermost_slicing(x.get_placements(), axes)
        assert d is not None
        shift = result.rank - operand.rank
        dr = d + shift
        if dr < 0 or operand.get_shape()[d] != result.get_shape()[dr]:
            raise NotSliceable(f"its result does not keep the gathered dim {d} of {display(c.result)} (broadcast)")
        return result.with_(placements=layout.add_slicing(result.get_placements(), dr, axes))

    PLACE_VERB = "sliced"  # in diagnostics: "must be replicated on axes [..] to be sliced"
    PLACED = "sliced is"  # "operand %x sliced is T, expected U"

    def place(self, c: coll.CollectiveOp, v: SSAValue, want: TensorType, at: Operation) -> SSAValue:
        """``v`` placed as ``want`` on ``c``'s axes (``restrict`` builds the ops), reusing
        what an earlier move built for the same value."""
        t = v.type
        assert isinstance(t, TensorType)
        axes = list(c.axes)
        key = (v, tuple(axes), str(want.get_placements()))
        if key in self.cache:
            return self._reuse(self.cache[key], at)
        if not all(isinstance(t.get_placements()[a], Replicated) for a in axes):
            raise NotSliceable(
                f"operand {display(v)} is {layout.format_placements(t.get_placements())}, it must be replicated "
                f"on axes {axes} to be {self.PLACE_VERB}"
            )
        cur = self.restrict(v, want, at, axes, mesh_sizes(at, t))
        if not same_type(cur.type, want):
            raise NotSliceable(f"operand {display(v)} {self.PLACED} {cur.type}, expected {want}")
        self.cache[key] = cur
        return cur

    def restrict(self, v: SSAValue, want: TensorType, at: Operation, axes: list[int], sizes) -> SSAValue:
        """AllGather: a take_slice of the replicated value per axis, before ``at``."""
        cur = v
        for a in axes:
            p = want.get_placements()[a]
            op = try_build(lambda: dist.TakeSliceOp.of(cur, sizes=sizes, dim=p.dim.data, axis=a))  # type: ignore[union-attr]
            if op is None:
                raise NotSliceable(f"operand {display(v)} cannot be sliced along dim {p.dim.data}")  # type: ignore[union-attr]
            self.insert([op], at)
            set_name(op.results[0], v.name_hint, "_s")
            cur = op.results[0]
        return cur

    def matmul_other(self, c: coll.CollectiveOp, v: SSAValue, at: Operation) -> SSAValue:
        """The other operand of a matmul moved before ``c`` (AllGather: unchanged, the
        matmul rule slices the result through a replicated operand)."""
        owner = v.owner
        if isinstance(owner, self.kind) and list(owner.axes) == list(c.axes):
            return owner.input
        return v

    def finish(self, c: coll.CollectiveOp, v: SSAValue, sizes) -> Operation:
        return self.kind.of(v, sizes=sizes, axes=list(c.axes))

    def reduce_rule(self, c, rt: dist.ReduceTensorOp, x: SSAValue, sizes) -> list[Operation]:
        """reduce_tensor(all_gather(x)) on the slices."""
        xt = x.type
        assert isinstance(xt, TensorType)
        axes = list(c.axes)
        d = layout.innermost_slicing(xt.get_placements(), axes)
        dims = list(rt.option("dims"))
        if d in dims and rt.option("op") == "avg" and isinstance(xt.element_type, IntegerType):
            raise NotSliceable("an integer average of partial averages is not the average")
        part = dist.ReduceTensorOp.of(x, sizes=sizes, op=rt.option("op"), dims=dims)
        base = rt.result.name_hint
        if d in dims:
            set_name(part.results[0], base, "_part")
            done = coll.AllReduceOp.of(part.results[0], sizes=sizes, op=rt.option("op"), axes=axes)
        else:
            set_name(part.results[0], base, "_s")
            done = self.finish(c, part.results[0], sizes)
        return [part, done]

    # ------------------------------------------------------------ shared engine
    def _reuse(self, v: SSAValue, at: Operation) -> SSAValue:
        if not defined_before(v, at, self.order):
            owner = v.owner
            assert isinstance(owner, Operation)
            owner.detach()
            self.insert([owner], at)
        return v

    def operand(self, c: coll.CollectiveOp, v: SSAValue, want: TensorType, at: Operation) -> SSAValue:
        """The sliced (or root-held) version of computation operand ``v``."""
        t = v.type
        if not isinstance(t, TensorType) or same_type(t, want):
            return v
        owner = v.owner
        if isinstance(owner, self.kind) and list(owner.axes) == list(c.axes) and same_type(owner.input.type, want):
            return owner.input
        return self.place(c, v, want, at)

    def move(self, op: Operation, c: coll.CollectiveOp) -> list[Operation]:
        """Rewrite computation ``op`` (an operand of which is ``c``'s result) to run before
        ``c``; return the new collectives. Raises NotSliceable, leaving ``op`` in place."""
        x = c.input
        sizes = mesh_sizes(op, x.type)  # type: ignore[arg-type]
        block = op.parent_block()
        assert block is not None
        if isinstance(op, dist.MapOp):
            res0 = op.outputs[0].type
            assert isinstance(res0, TensorType)
            new_t = self.before_type(c, c.result.type, res0)  # type: ignore[arg-type]
            operands = []
            for v in op.inputs:
                t = v.type
                operands.append(self.operand(c, v, t.with_(placements=place_like(new_t, t.get_shape())), op) if isinstance(t, TensorType) else v)
            if not map_fits(operands, new_t):
                raise NotSliceable("its operands cannot all be placed like the sliced result")
            new = clone_map(op, operands, [new_t.with_(element_type=r.type.element_type) for r in op.outputs])  # type: ignore[attr-defined]
            computed = list(new.outputs)
            ops: list[Operation] = [new]
        elif isinstance(op, (dist.DropoutOp, dist.CastOp)):
            r = op.results[0]
            new_t = self.before_type(c, c.result.type, r.type)  # type: ignore[arg-type]
            new = type(op).make([x], [new_t], **op.options())
            computed = [new.results[0]]
            ops = [new]
        elif isinstance(op, dist.MatmulOp):
            new = self._matmul(op, c, sizes)
            computed = [new.results[0]]
            ops = [new]
        elif isinstance(op, dist.ReduceTensorOp):
            ops = self.reduce_rule(c, op, x, sizes)
            self.insert(ops, op)
            op.result.replace_all_uses_with(ops[-1].results[0])
            ops[-1].results[0].name_hint = op.result.name_hint
            op.detach()
            op.erase()
            return [ops[-1]] if isinstance(ops[-1], self.kind) else []
        else:
            raise NotSliceable(f"'{op.name}' is not a computation that can be sliced")
        finishes: list[Operation] = []
        for old, v in zip(op.results, computed):
            f = try_build(lambda: self.finish(c, v, sizes))
            if f is None or not same_type(f.results[0].type, old.type):
                raise NotSliceable(f"'{self.kind.name}' of the sliced result does not give back {old.type}")
            set_name(v, old.name_hint, "_s")
            f.results[0].name_hint = old.name_hint
            finishes.append(f)
        self.insert([*ops, *finishes], op)
        for old, f in zip(op.results, finishes):
            old.replace_all_uses_with(f.results[0])
        op.detach()
        op.erase()
        return finishes

    def _matmul(self, op: dist.MatmulOp, c: coll.CollectiveOp, sizes) -> Operation:
        lhs, rhs = op.lhs, op.rhs
        tries: list[tuple[SSAValue, SSAValue]] = []
        lx = c.input if lhs is c.result else self.matmul_other(c, lhs, op)
        rx = c.input if rhs is c.result else self.matmul_other(c, rhs, op)
        tries.append((lx, rx))
        for lhs_new, rhs_new in tries:
            new = try_build(lambda: dist.MatmulOp.of(lhs_new, rhs_new, sizes=sizes))
            if new is None:
                continue
            f = try_build(lambda: self.finish(c, new.results[0], sizes))
            if f is not None and same_type(f.results[0].type, op.result.type):
                return new
        raise NotSliceable(
            f"the matmul rule gives no placement that {self.kind.name} turns back into "
            f"{layout.format_placements(op.result.type.get_placements())}"  # type: ignore[attr-defined]
        )


def _collective_operands(op: Operation, kind) -> list[coll.CollectiveOp]:
    out = []
    for v in op.operands:
        if isinstance(v.owner, kind) and v.owner not in out:
            out.append(v.owner)
    return out


def run_reorder(
    pass_name: str,
    kind: type[coll.CollectiveOp],
    mover: Mover,
    module: ModuleOp,
    target_names: tuple[str, ...],
    what: str,
    extra_rule: Callable[[Operation, coll.CollectiveOp], str | None] | None = None,
) -> None:
    """The reorder driver shared by reorder-allgather and reorder-broadcast."""
    with returns_split(module):
        targets = Targets(pass_name, target_names, module)
        colls = [o for o in module.walk() if isinstance(o, kind)]
        targets.require_known(f"{what} results", [c.result for c in colls])
        named_colls: list[coll.CollectiveOp] = []
        named_ops: list[Operation] = []
        for name in targets.wanted:
            for v in targets.values(name):
                owner = v.owner
                if isinstance(owner, kind):
                    named_colls.append(owner)
                elif isinstance(owner, Operation):
                    if not _collective_operands(owner, kind):
                        fail(pass_name, f"target %{name}: '{owner.name}' has no {kind.name} operand to reorder with")
                    named_ops.append(owner)
                else:
                    fail(pass_name, f"target %{name}: a function argument is neither a {kind.name} nor a computation")
        created: list[Operation] = []
        queue: deque[coll.CollectiveOp] = deque(colls if targets.all else named_colls)

        def try_move(user: Operation, c: coll.CollectiveOp, explicit: bool) -> None:
            try:
                new = mover.move(user, c)
            except NotSliceable as e:
                if explicit:
                    fail(
                        pass_name,
                        f"target {display(user.results[0], targets.names) if user.results else user.name}: "
                        f"'{user.name}' cannot be reordered with {kind.name} {display(c.result, targets.names)}: {e}",
                    )
                return
            created.extend(new)
            queue.extend(n for n in new if isinstance(n, kind))
            if not c.result.uses:
                c.detach()
                c.erase()

        while queue:
            c = queue.popleft()
            if c.parent is None:
                continue
            block = c.parent_block()
            for use in list(c.result.uses):
                user = use.operation
                if user.parent is None or user.parent_block() is not block or user.regions and not isinstance(user, dist.MapOp):
                    continue
                if c.parent is None:
                    break
                try_move(user, c, explicit=False)
        for op in named_ops:
            cs = _collective_operands(op, kind)
            try_move(op, cs[0], explicit=True)
        erase_dead(created)


@dataclass(frozen=True)
class ReorderAllGatherPass(ModulePass):
    """Move computations on AllGather results before the AllGather; see the module
    docstring."""

    name = "reorder-allgather"

    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        apply_all_or_nothing(
            op,
            lambda m: run_reorder(self.name, coll.AllGatherOp, Mover(coll.AllGatherOp, {}), m, self.targets, "all_gather"),
            self.targets,
        )

