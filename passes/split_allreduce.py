"""``split-allreduce{strategy=rs-ag|reduce-bcast dim=0 root=0 targets=...}``: CoCoNet's
``split`` transformation. An AllReduce is a ReduceScatter followed by an AllGather
(``rs-ag``, CoCoNet's ARSplitRSAG), or a Reduce to one rank followed by a Broadcast
(``reduce-bcast``)::

    repl(reduce(x)) = repl(join(slice(reduce(x))))    all_reduce = all_gather . reduce_scatter
    repl(reduce(x)) = repl(load(store(reduce(x), r))) all_reduce = broadcast . reduce

The split always keeps the meaning (CoCoNet: "always valid"); ``rs-ag`` slices along
``dim``, which the group must divide when its size is known (when it is ``?``, a run on
a rank count that does not divide it is rejected at run time). A 0-d all_reduce has no
dim to slice and is left alone. ``%sum`` becomes ``%sum_rs`` and ``%sum_ag`` (or
``%sum_reduce`` and ``%sum_bcast``); uses of ``%sum`` read the last one. Example::

    %sum = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>

becomes::

    %sum_rs = coll.reduce_scatter sum %x dim 0 : ... [local] -> ... [sliced<0>]
    %sum_ag = coll.all_gather %sum_rs : ... [sliced<0>] -> ... [replicated]
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from distir.dialects import coll, layout
from distir.dialects.dist import TensorType
from distir.passes.support import (
    Targets,
    apply_all_or_nothing,
    fail,
    mesh_sizes,
    set_name,
)

STRATEGIES = ("rs-ag", "reduce-bcast")


def _split(ar: coll.AllReduceOp, strategy: str, dim: int, root: int) -> tuple[list[Operation] | None, str]:
    """The ops replacing ``ar``, or None and why it may not be split."""
    t = ar.input.type
    assert isinstance(t, TensorType)
    sizes = mesh_sizes(ar, t)
    axes = list(ar.axes)
    base = ar.result.name_hint
    if strategy == "rs-ag":
        if t.rank == 0:
            return None, "a 0-d all_reduce has no dim to reduce-scatter along"
        if not 0 <= dim < t.rank:
            return None, f"dim {dim} is out of range for a tensor of rank {t.rank}"
        rs = coll.ReduceScatterOp.of(ar.input, sizes=sizes, op=ar.option("op"), dim=dim, axes=axes)
        why = layout.divisibility_error(t.get_shape(), rs.result.type.get_placements(), sizes or [])
        if why:
            return None, why
        ag = coll.AllGatherOp.of(rs.result, sizes=sizes, axes=axes)
        set_name(rs.result, base, "_rs")
        set_name(ag.result, base, "_ag")
        return [rs, ag], ""
    n = layout.group_size(sizes, axes) if sizes is not None else None
    if n is not None and not 0 <= root < n:
        return None, f"root {root} is out of range for a group of {n} ranks"
    if n is None and len(axes) > 1:
        return None, "a root over several axes needs their sizes to be static"
    red = coll.ReduceOp.of(ar.input, sizes=sizes, op=ar.option("op"), root=root, axes=axes)
    bc = coll.BroadcastOp.of(red.result, sizes=sizes, axes=axes)
    set_name(red.result, base, "_reduce")
    set_name(bc.result, base, "_bcast")
    return [red, bc], ""


@dataclass(frozen=True)
class SplitAllReducePass(ModulePass):
    """Split AllReduces into ReduceScatter + AllGather or Reduce + Broadcast; see the
    module docstring."""

    name = "split-allreduce"

    strategy: str = "rs-ag"
    dim: int = 0
    root: int = 0
    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.strategy not in STRATEGIES:
            fail(self.name, f"strategy must be one of {', '.join(STRATEGIES)}, got '{self.strategy}'")

        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            ars = [o for o in module.walk() if isinstance(o, coll.AllReduceOp)]
            targets.require_known("all_reduce results", [a.result for a in ars])
            for name in targets.wanted:
                targets.require(
                    name,
                    any(isinstance(v.owner, coll.AllReduceOp) for v in targets.values(name)),
                    f"is not the result of a coll.all_reduce (it comes from {_producer_name(targets.values(name))})",
                )
            for ar in ars:
                if not targets.selects(ar.result):
                    continue
                ops, why = _split(ar, self.strategy, self.dim, self.root)
                if ops is None:
                    if not targets.all:
                        fail(self.name, f"target %{targets.name(ar.result)}: cannot split with strategy {self.strategy}: {why}")
                    continue
                block = ar.parent_block()
                assert block is not None
                block.insert_ops_before(ops, ar)
                ar.result.replace_all_uses_with(ops[-1].results[0])
                ar.detach()
                ar.erase()

        apply_all_or_nothing(op, run, self.targets)


def _producer_name(values) -> str:
    for v in values:
        owner = v.owner
        return f"'{owner.name}'" if isinstance(owner, Operation) else "a block argument"
    return "nothing"
