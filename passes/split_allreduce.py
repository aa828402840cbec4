"""``split-allreduce{strategy=rs-ag|reduce-bcast dim=D root=0 targets=...}``: CoCoNet's
``split`` transformation. An AllReduce is a ReduceScatter followed by an AllGather
(``rs-ag``, CoCoNet's ARSplitRSAG), or a Reduce to one rank followed by a Broadcast
(``reduce-bcast``)::

    repl(reduce(x)) = repl(join(slice(reduce(x))))    all_reduce = all_gather . reduce_scatter
    repl(reduce(x)) = repl(load(store(reduce(x), r))) all_reduce = broadcast . reduce

The split always keeps the meaning (CoCoNet: "always valid"), along any dim: a dim the
group does not divide is cut in blocks of ceil(s/n), the last ranks holding fewer
elements or none (DESIGN §2), which the lowering lays out padded. The dim is ``dim``
when given. Without ``dim`` the pass prefers a dim whose blocks are equal, so that no
collective moves padding: among the dims the group divides when its size is known
(all of them when it is ``?``), the one that keeps blocks equal on the most rank
counts: the dim whose size shares the largest factor with ``G``, the extents the
function already slices over the group's axes (the rank counts the program runs on
divide them), the largest dim when nothing is sliced there; the earliest among equals.
When the group divides no dim, the dim with the least padding (the padded size over
the size, then the largest dim). So ``2x48`` all-reduced over 4 ranks splits dim 1, a
``[?]`` mesh whose other tensors are sliced 64 ways splits ``2x48`` along dim 1
(equal blocks on 1, 2, 4, 8 and 16 ranks), and ``6x3`` over 4 ranks splits dim 0
(blocks of 2, 2, 2, 0: 8 rows for 6, against 4 columns for 3). A 0-d all_reduce has no
dim to slice and is left alone (named in ``targets``: an error). ``%sum`` becomes
``%sum_rs`` and ``%sum_ag`` (or ``%sum_reduce`` and ``%sum_bcast``); uses of ``%sum``
read the last one. Example::

    %sum = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>

becomes::

    %sum_rs = coll.reduce_scatter sum %x dim 0 : ... [local] -> ... [sliced<0>]
    %sum_ag = coll.all_gather %sum_rs : ... [sliced<0>] -> ... [replicated]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from distir.dialects import coll, layout
from distir.dialects.dist import MeshOp, RuleError, TensorType
from distir.passes.support import (
    Targets,
    apply_all_or_nothing,
    fail,
    mesh_sizes,
    set_name,
)

STRATEGIES = ("rs-ag", "reduce-bcast")


def sliced_extents(module: ModuleOp) -> dict[tuple[str, int], int]:
    """(mesh, axis) -> the gcd of the extents of every dim some value of ``module``
    slices over that axis (divided by the known sizes of the other axes slicing it):
    every rank count the axis may take divides it. Axes that slice nothing are absent."""
    sizes_of = {m.mesh_name: m.sizes() for m in module.ops if isinstance(m, MeshOp)}
    out: dict[tuple[str, int], int] = {}
    seen: set[TensorType] = set()
    for op in module.walk():
        values = list(op.results) + [a for r in op.regions for b in r.blocks for a in b.args]
        for v in values:
            t = v.type
            if not isinstance(t, TensorType) or t in seen:
                continue
            seen.add(t)
            sizes = sizes_of.get(t.mesh_name)
            pl = t.get_placements()
            for d in layout.sliced_dims(pl):
                axes = layout.slicing_axes(pl, d)
                for a in axes:
                    others = [sizes[b] if sizes is not None and b < len(sizes) else None for b in axes if b != a]
                    extent = t.get_shape()[d] // math.prod(s for s in others if s is not None)
                    key = (t.mesh_name, a)
                    out[key] = math.gcd(out.get(key, 0), extent)
    return out


def _scatter_error(t: TensorType, sizes: Sequence[int | None] | None, dim: int, axes: Sequence[int]) -> str | None:
    """Why ``t`` may not be reduce-scattered along ``dim`` over ``axes``, or None."""
    try:
        coll.ReduceScatterOp.infer([t], sizes, {"op": "sum", "dim": dim, "axes": list(axes)})
    except RuleError as e:
        return str(e)
    return None


def _padding(t: TensorType, sizes: Sequence[int | None] | None, dim: int, axes: Sequence[int]) -> float:
    """Padded size over size of ``dim`` cut over ``axes`` (1: equal blocks, or sizes not
    known yet)."""
    n = layout.group_size(sizes or [None] * len(t.get_placements()), list(axes))
    (out,) = coll.ReduceScatterOp.infer([t], sizes, {"op": "sum", "dim": dim, "axes": list(axes)})
    if n is None or not layout.uneven_dims(t.get_shape(), out.get_placements(), sizes or []):
        return 1.0
    outer = layout.slicing_counts(t.get_placements(), sizes, dim)  # type: ignore[arg-type]
    s = t.get_shape()[dim]
    return n * layout.ceil_div(layout.max_block(s, outer), n) / max(s, 1)


def choose_dim(t: TensorType, sizes: Sequence[int | None] | None, axes: Sequence[int], extents: dict[tuple[str, int], int]) -> int | None:
    """The dim ``rs-ag`` splits ``t`` along when none is given (module docstring), or
    None when ``t`` has none."""
    g = 0
    for a in axes:
        g = math.gcd(g, extents.get((t.mesh_name, a), 0))
    best: tuple[float, int, int] | None = None
    for d, size in enumerate(t.get_shape()):
        if _scatter_error(t, sizes, d, axes) is not None:
            continue
        pad = _padding(t, sizes, d, axes)
        score = math.gcd(size, g) if g else size
        key = (-pad, score if pad == 1.0 else size, -d)
        if best is None or key > best:
            best = key
    return None if best is None else -best[2]


def _split(ar: coll.AllReduceOp, strategy: str, dim: int | None, root: int, extents: dict[tuple[str, int], int]) -> tuple[list[Operation] | None, str]:
    """The ops replacing ``ar``, or None and why it may not be split."""
    t = ar.input.type
    assert isinstance(t, TensorType)
    sizes = mesh_sizes(ar, t)
    axes = list(ar.axes)
    base = ar.result.name_hint
    if strategy == "rs-ag":
        if t.rank == 0:
            return None, "a 0-d all_reduce has no dim to reduce-scatter along"
        if dim is None:
            dim = choose_dim(t, sizes, axes, extents)
            if dim is None:
                whys = [_scatter_error(t, sizes, d, axes) for d in range(t.rank)]
                return None, whys[0] if t.rank == 1 else f"no dim fits: {'; '.join(w for w in whys if w)}"  # type: ignore[return-value]
        if not 0 <= dim < t.rank:
            return None, f"dim {dim} is out of range for a tensor of rank {t.rank}"
        why = _scatter_error(t, sizes, dim, axes)
        if why:
            return None, why
        rs = coll.ReduceScatterOp.of(ar.input, sizes=sizes, op=ar.option("op"), dim=dim, axes=axes)
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
    dim: int | None = None
    root: int = 0
    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.strategy not in STRATEGIES:
            fail(self.name, f"strategy must be one of {', '.join(STRATEGIES)}, got '{self.strategy}'")

        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            ars = [o for o in module.walk() if isinstance(o, coll.AllReduceOp)]
            extents = sliced_extents(module) if self.dim is None and ars else {}
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
                ops, why = _split(ar, self.strategy, self.dim, self.root, extents)
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
