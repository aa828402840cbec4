"""``slice-state{targets=...}``: CoCoNet's ``asSlice`` + ``dead`` (ZeRO-style sliced
optimizer state). A function argument that

* is updated in place (a result carries ``{dist.inplace = N}`` for it),
* is read only through ``dist.take_slice`` (as ``reorder-allgather`` leaves ``m`` and
  ``v`` of Adam), and
* whose in-place update is an AllGather of a value sliced like that take_slice,

becomes a sliced argument and result: every rank keeps only its slice of the state
between steps, the take_slice disappears (the argument is the slice) and so does the
AllGather of the update (the slice is written back in place). By the identity
``take_slice(all_gather(y)) = y`` the state a caller sees is the same logical value;
only its layout changes, to ``1/n`` of the memory on each of ``n`` ranks.

**This changes the function signature**: the argument and its in-place result types
become ``sliced<d>`` on the gathered axes (inputs and outputs are still logical values,
so ``distir-run`` and ``equivalent`` read and write the same arrays). Functions called
with ``func.call`` are left alone. ``targets`` names the arguments (``m,v``); with no
targets every eligible argument is sliced, parameters included (ZeRO-3); CoCoNet's Adam
schedule slices only ``m`` and ``v``. Example::

    func.func @adam(..., %m: !dist.tensor<64xf32, @world, [replicated]>, ...)
        -> (..., !dist.tensor<64xf32, @world, [replicated]> {dist.inplace = 2 : i64}, ...) {
      %m_s = dist.take_slice %m dim 0 : ... [replicated] -> ... [sliced<0>]
      %m1_s = dist.map(%m_s, ...) ...
      %m1 = coll.all_gather %m1_s : ... [sliced<0>] -> ... [replicated]
      func.return ..., %m1, ...

becomes ``%m: !dist.tensor<64xf32, @world, [sliced<0>]>``, ``%m1_s = dist.map(%m, ...)``
and ``func.return ..., %m1_s, ...`` with result type ``[sliced<0>]``.

A **read-only** argument named in ``targets`` (no result updates it) that is read only
through ``dist.take_slice`` becomes sliced the same way, by the same identity: every rank
keeps only the slice it reads (constant per-element data of an optimizer, such as which
parameter group each element belongs to). With no targets, only in-place state is
sliced.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, IntegerAttr, ModuleOp
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from distir.dialects import coll, dist
from distir.passes.support import (
    Targets,
    apply_all_or_nothing,
    erase_dead,
    fail,
    functions,
    same_type,
)


def _inplace_result(f: func.FuncOp, index: int) -> int | None:
    if f.res_attrs is None:
        return None
    for j, attrs in enumerate(f.res_attrs.data):
        a = attrs.data.get("dist.inplace")
        if isinstance(a, IntegerAttr) and a.value.data == index:
            return j
    return None


def _take_slice_chain(arg: SSAValue) -> tuple[list[Operation], SSAValue] | str:
    """The take_slice ops reading ``arg`` (possibly a chain, one per axis) and the sliced
    value, or why the argument is read some other way."""
    chain: list[Operation] = []
    cur = arg
    while True:
        users = [u.operation for u in cur.uses]
        if not users:
            break
        if not chain and any(not isinstance(u, dist.TakeSliceOp) for u in users):
            bad = next(u for u in users if not isinstance(u, dist.TakeSliceOp))
            return f"it is read by '{bad.name}', not only through dist.take_slice"
        if chain and not all(isinstance(u, dist.TakeSliceOp) for u in users):
            break
        first = users[0]
        assert isinstance(first, dist.TakeSliceOp)
        for u in users[1:]:
            assert isinstance(u, dist.TakeSliceOp)
            if u.options() != first.options():
                return "it is sliced in different ways"
            u.result.replace_all_uses_with(first.result)
            u.detach()
            u.erase()
        chain.append(first)
        cur = first.result
    if not chain:
        return "it is not read through dist.take_slice"
    return chain, cur


def _chain_type(arg: SSAValue):
    """What ``_take_slice_chain`` would find, without changing the IR: the type of the
    sliced value, or why the argument is read some other way."""
    level = [arg]
    depth = 0
    while True:
        users = [u.operation for v in level for u in v.uses]
        if not users:
            break
        if not all(isinstance(u, dist.TakeSliceOp) for u in users):
            if depth == 0:
                bad = next(u for u in users if not isinstance(u, dist.TakeSliceOp))
                return f"it is read by '{bad.name}', not only through dist.take_slice"
            break
        first = users[0]
        if any(u.options() != first.options() for u in users[1:]):  # type: ignore[attr-defined]
            return "it is sliced in different ways"
        level = [u.results[0] for u in users]
        depth += 1
    if depth == 0:
        return "it is not read through dist.take_slice"
    return level[0].type


def _gathered_from(v: SSAValue, want) -> tuple[list[Operation], SSAValue] | None:
    """The AllGathers ending in ``v`` and the value of type ``want`` they gather."""
    ags: list[Operation] = []
    cur = v
    while not same_type(cur.type, want):
        owner = cur.owner
        if not isinstance(owner, coll.AllGatherOp):
            return None
        ags.append(owner)
        cur = owner.input
    return ags, cur


def _inplace_results(f: func.FuncOp) -> dict[int, int]:
    """argument index -> index of the result updating it in place."""
    out: dict[int, int] = {}
    if f.res_attrs is None:
        return out
    for j, attrs in enumerate(f.res_attrs.data):
        a = attrs.data.get("dist.inplace")
        if isinstance(a, IntegerAttr):
            out.setdefault(a.value.data, j)
    return out


def _slice_argument(
    f: func.FuncOp,
    arg: BlockArgument,
    called: set[str],
    inplace: dict[int, int] | None = None,
    pending: Pending | None = None,
    read_only: bool = False,
) -> str | None:
    """Make ``arg`` sliced; return why it cannot be, or None when done. With
    ``pending``, the new results, the AllGathers to drop and the function type are
    left for ``pending.finish()`` (once for all the arguments of a function). With
    ``read_only``, an argument no result updates is sliced too (module doc)."""
    if f.sym_name.data in called:
        return f"@{f.sym_name.data} is called with func.call, its signature must stay"
    j = (inplace if inplace is not None else _inplace_results(f)).get(arg.index)
    if j is None and not read_only:
        return f"no result of @{f.sym_name.data} updates it in place ({{dist.inplace = {arg.index}}})"
    ret = f.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    got = _chain_type(arg)
    if isinstance(got, str):
        return got if j is not None else f"no result of @{f.sym_name.data} updates it in place ({{dist.inplace = {arg.index}}}) and {got}"
    want = got
    if j is not None and _gathered_from(ret.operands[j], want) is None:
        return f"its in-place update is not an all_gather of a value placed {want}"
    # the checks passed (without changing anything): now rewrite
    chain, sliced = _take_slice_chain(arg)  # type: ignore[misc]
    new_arg = Rewriter.replace_value_with_new_type(arg, want)
    sliced.replace_all_uses_with(new_arg)
    for op in reversed(chain):
        op.detach()
        op.erase()
    own = pending or Pending(f)
    if j is not None:
        ags, update = _gathered_from(ret.operands[j], want)  # type: ignore[misc]
        own.results[j] = update
        own.gathers += ags
    if pending is None:
        own.finish()
    return None


class Pending:
    """Changes to a function's results and type, made once after slicing its arguments."""

    def __init__(self, f: func.FuncOp):
        self.f = f
        self.results: dict[int, SSAValue] = {}
        self.gathers: list[Operation] = []

    def finish(self) -> None:
        ret = self.f.body.block.last_op
        assert isinstance(ret, func.ReturnOp)
        if self.results:
            ret.operands = [self.results.get(i, v) for i, v in enumerate(ret.operands)]
        erase_dead(self.gathers)
        self.f.function_type = FunctionType.from_lists([a.type for a in self.f.body.block.args], [v.type for v in ret.operands])


@dataclass(frozen=True)
class SliceStatePass(ModulePass):
    """Keep in-place state that is only used sliced as sliced arguments (ZeRO); see the
    module docstring."""

    name = "slice-state"

    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            fs = functions(module)
            args = [a for f in fs for a in f.body.block.args]
            targets.require_known("function arguments", args)
            for name in targets.wanted:
                targets.require(
                    name, any(isinstance(v, BlockArgument) and v in args for v in targets.values(name)), "is not a function argument"
                )
            called = {o.callee.root_reference.data for o in module.walk() if isinstance(o, func.CallOp)}
            for f in fs:
                inplace = _inplace_results(f)
                pending = Pending(f)
                for arg in list(f.body.block.args):
                    if not targets.selects(arg):
                        continue
                    if not isinstance(arg.type, dist.TensorType):
                        if not targets.all:
                            fail(self.name, f"target %{targets.name(arg)}: is a {arg.type} scalar, not a !dist.tensor")
                        continue
                    why = _slice_argument(f, arg, called, inplace, pending, read_only=not targets.all)
                    if why is not None and not targets.all:
                        fail(self.name, f"target %{targets.name(arg)}: cannot keep the argument sliced: {why}")
                pending.finish()

        apply_all_or_nothing(op, run, self.targets)
