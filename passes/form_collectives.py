"""``form-collectives``: chains of ``dist`` functional primitives become the collectives
they compose; the reverse of ``expand-collectives``: a first-phase run followed by a
second-phase run is the collective whose descriptor's ``PHASES`` they are
(``dialects/collectives/``), e.g.::

    reduce{op}* ; repl*          -> coll.all_reduce {op}
    join*       ; slice{dim}*    -> coll.all_to_all {dim}
    load*       ; store{rank}*   -> coll.send {to}     (to: the group rank of the digits)
    drop        ; slice{dim}     -> dist.take_slice {dim}

The first phase and the second phase act on the same set of mesh axes (one primitive
per axis); the collective's ``axes`` follow the order of the second phase. Every
intermediate value must have a single use; integer averages over several axes are not
formed (see ``expand-collectives``). When maps sit between the two phases, the
chain is the fused form of that collective (CoCoNet Table 2; the fused op whose
``PLAIN`` it is): the maps commute with the second phase (``slice(map(f, u, o)) =
map(f, slice(u), slice(o))``), so they run in the fused op's region on the values the
first collective produces, their other operands placed to match by the same
primitive, e.g. ``reduce ; map* ; slice -> coll.fused_reduce_scatter``; a
``coll.fused_all_reduce`` is sliced along the first dim the group size divides (dim 0
when the size is unknown), else the dim with the least padding (blocks of ceil(s/n)).

Example::

    %r = dist.reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [unplaced]>
    %y = dist.repl %r : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>

becomes ``%y = coll.all_reduce sum %x : ... [local] -> ... [replicated]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from distir.dialects import coll, dist, layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import At, Replicated, Sliced
from distir.passes.support import (
    inexact_average,
    infer_type,
    make_yield,
    map_fits,
    mesh_sizes,
    new_block_region,
    place_like,
    same_type,
    slice_dim,
    try_build,
)

FIRST_WORDS = {dist.ReduceOp: "reduce", dist.JoinOp: "join", dist.LoadOp: "load"}
SECOND_WORDS = {dist.ReplOp: "repl", dist.SliceOp: "slice", dist.StoreOp: "store"}

PLAIN: dict[tuple[str, str], type[coll.CollectiveOp]] = {c.PHASES: c for c in coll.collectives() if c.PHASES is not None}

FUSED: dict[tuple[str, str], type[coll.FusedCollectiveOp]] = {
    f.PLAIN.PHASES: f for f in coll.fused_collectives() if f.PLAIN.PHASES is not None
}


def _single_user(value: SSAValue) -> Operation | None:
    use = value.get_unique_use()
    return use.operation if use is not None else None


def _producer(value: SSAValue) -> Operation | None:
    owner = value.owner
    return owner if isinstance(owner, Operation) else None


def _key(op: Operation) -> tuple:
    """Primitives that can share a run: same op class and options other than the axis."""
    opts = dict(op.options())  # type: ignore[attr-defined]
    opts.pop("axis", None)
    opts.pop("rank", None)
    return (type(op), tuple(sorted(opts.items())))


def _second_run(end: Operation) -> list[Operation]:
    """The run of same-kind second-phase primitives ending at ``end`` (program order)."""
    run = [end]
    while True:
        prev = _producer(run[0].operands[0])
        if prev is None or type(prev) not in SECOND_WORDS or _key(prev) != _key(end) or _single_user(prev.results[0]) is not run[0]:
            return run
        run.insert(0, prev)


def _first_run(last: Operation) -> list[Operation]:
    run = [last]
    while True:
        prev = _producer(run[0].operands[0])
        if prev is None or type(prev) not in FIRST_WORDS or _key(prev) != _key(last) or _single_user(prev.results[0]) is not run[0]:
            return run
        run.insert(0, prev)


def _axis(op: Operation) -> int:
    return op.option("axis")  # type: ignore[attr-defined]


def _group_rank(digits: list[int], sizes, axes: list[int]) -> int | None:
    r = 0
    for d, a in zip(digits, axes):
        s = sizes[a] if sizes is not None else None
        if s is None:
            if len(axes) > 1:
                return None
            return d
        r = r * s + d
    return r


def _options(first: str, second: str, p1: list[Operation], p2: list[Operation], sizes) -> dict | None:
    rank_option = PLAIN[(first, second)].RANK_OPTION
    axes = [_axis(o) for o in p2]
    opts: dict = {"axes": axes}
    if first == "reduce":
        opts["op"] = p1[0].option("op")  # type: ignore[attr-defined]
    if second == "slice":
        opts["dim"] = p2[0].option("dim")  # type: ignore[attr-defined]
    if second == "store":
        rank = _group_rank([o.option("rank") for o in p2], sizes, axes)  # type: ignore[attr-defined]
        if rank is None:
            return None
        assert rank_option is not None
        opts[rank_option] = rank
    return opts


def _chain_end(op: Operation) -> bool:
    """Whether ``op`` ends its run of second-phase primitives."""
    user = _single_user(op.results[0])
    return user is None or type(user) not in SECOND_WORDS or _key(user) != _key(op)


class FormCollective(RewritePattern):
    """first-phase run ; second-phase run (same axes) -> one collective."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if type(op) not in SECOND_WORDS or not _chain_end(op):
            return
        p2 = _second_run(op)
        before = _producer(p2[0].operands[0])
        if before is None or type(before) not in FIRST_WORDS or _single_user(before.results[0]) is not p2[0]:
            return
        p1_all = _first_run(before)
        if len(p1_all) < len(p2):
            return
        p1 = p1_all[len(p1_all) - len(p2):]
        if sorted(_axis(o) for o in p1) != sorted(_axis(o) for o in p2):
            return
        first, second = FIRST_WORDS[type(p1[0])], SECOND_WORDS[type(op)]
        if (first, second) not in PLAIN:
            return
        x = p1[0].operands[0]
        t = x.type
        assert isinstance(t, TensorType)
        sizes = mesh_sizes(op, t)
        opts = _options(first, second, p1, p2, sizes)
        if opts is None or inexact_average(opts.get("op"), t, len(p2)):
            return
        cls = PLAIN[(first, second)]
        new = try_build(lambda: cls.of(x, sizes=sizes, **opts))
        if new is None or not same_type(new.results[0].type, op.results[0].type):
            return
        new.results[0].name_hint = op.results[0].name_hint
        rewriter.replace(op, [new], [new.results[0]])
        for dead in reversed(p1 + p2[:-1]):
            rewriter.erase(dead)


class FormTakeSlice(RewritePattern):
    """slice(drop(x)) on one axis -> take_slice(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dist.SliceOp, rewriter: PatternRewriter, /):
        drop = _producer(op.input)
        if not isinstance(drop, dist.DropOp) or drop.option("axis") != op.option("axis"):
            return
        if _single_user(drop.result) is not op:
            return
        x = drop.input
        t = x.type
        assert isinstance(t, TensorType)
        new = try_build(lambda: dist.TakeSliceOp.of(x, sizes=mesh_sizes(op, t), dim=op.option("dim"), axis=op.option("axis")))
        if new is None or not same_type(new.results[0].type, op.result.type):
            return
        new.results[0].name_hint = op.result.name_hint
        rewriter.replace(op, [new], [new.results[0]])
        rewriter.erase(drop)


# ---------------------------------------------------------------------------- fused


def _fused_dim(t: TensorType, n: int | None) -> int | None:
    """The dim a fused all-reduce slices: the first one the group size divides, else
    the one with the least padding (``support.slice_dim``)."""
    return slice_dim(t, n)


def _map_chain(end: Operation) -> tuple[list[dist.MapOp], SSAValue] | None:
    """The single-use, single-result maps feeding ``end`` and the value they start from
    (a first-phase primitive's result); None when there is no such chain."""
    maps: list[dist.MapOp] = []
    v = end.operands[0]
    user = end
    while True:
        m = _producer(v)
        if not isinstance(m, dist.MapOp) or len(m.outputs) != 1 or _single_user(v) is not user:
            break
        maps.insert(0, m)
        user = m
        first = [w for w in m.inputs if type(_producer(w)) in FIRST_WORDS]
        inner = [w for w in m.inputs if isinstance(_producer(w), dist.MapOp)]
        if len(first) == 1:
            v = first[0]
        elif len(inner) == 1 and not first:
            v = inner[0]
        else:
            return None
    if not maps or type(_producer(v)) not in FIRST_WORDS or _single_user(v) is not maps[0]:
        return None
    shape = v.type.get_shape()  # type: ignore[attr-defined]
    if any(m.outputs[0].type.get_shape() != shape for m in maps):  # type: ignore[attr-defined]
        return None
    return maps, v


class FormFusedCollective(RewritePattern):
    """first-phase run ; map* ; second-phase run -> a fused collective whose region runs
    the maps on what the first collective produces (the maps' other operands are placed
    there by the second phase's primitive)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if type(op) not in SECOND_WORDS or not _chain_end(op):
            return
        p2 = _second_run(op)
        chain = _map_chain(p2[0])
        if chain is None:
            return
        maps, u = chain
        p1_all = _first_run(_producer(u))  # type: ignore[arg-type]
        if len(p1_all) < len(p2):
            return
        p1 = p1_all[len(p1_all) - len(p2):]
        if sorted(_axis(o) for o in p1) != sorted(_axis(o) for o in p2):
            return
        first, second = FIRST_WORDS[type(p1[0])], SECOND_WORDS[type(op)]
        if (first, second) not in FUSED:
            return
        cls = FUSED[(first, second)]
        x = p1[0].operands[0]
        xt = x.type
        assert isinstance(xt, TensorType)
        sizes = mesh_sizes(op, xt)
        opts = _options(first, second, p1, p2, sizes)
        if opts is None or inexact_average(opts.get("op"), xt, len(p2)):
            return
        axes = opts["axes"]
        if cls is coll.FusedAllReduceOp:
            dim = _fused_dim(xt, layout.group_size(sizes, axes) if sizes is not None else None)
            if dim is None:
                return
            opts["dim"] = dim
        fused = _build_fused(cls, x, opts, maps, u, sizes)
        if fused is None or not same_type(fused.results[0].type, op.results[0].type):
            return
        fused.results[0].name_hint = op.results[0].name_hint
        outer = [v for m in maps for v in m.inputs]
        rewriter.replace(op, [fused], [fused.results[0]])
        for dead in [*reversed(p2[:-1]), *reversed(maps), *reversed(p1)]:
            rewriter.erase(dead)
        _erase_unused_drops(outer, rewriter)


def _build_fused(cls, x: SSAValue, opts: dict, maps: list[dist.MapOp], u: SSAValue, sizes) -> Operation | None:
    """The fused op running ``maps`` in its region; None when a placement rule rejects it."""
    axes = opts["axes"]
    xt = x.type
    assert isinstance(xt, TensorType)
    if cls.FIRST is not None:
        first_opts = {k: v for k, v in opts.items() if k in {kw.keyword for kw in cls.FIRST.KEYWORDS} | {cls.FIRST.KIND}}
        arg_t = infer_type(cls.FIRST, [xt], sizes, **first_opts)
    else:
        arg_t = xt
    if not isinstance(arg_t, TensorType):
        return None
    region, block = new_block_region([arg_t])
    ops: list[Operation] = []
    mapping: dict[SSAValue, SSAValue] = {u: block.args[0]}
    for m in maps:
        res_t = arg_t.with_(element_type=m.outputs[0].type.element_type)  # type: ignore[attr-defined]
        operands = []
        for v in m.inputs:
            if v in mapping:
                operands.append(mapping[v])
                continue
            placed = _place_operand(v, res_t, axes, sizes, ops)
            if placed is None:
                return None
            operands.append(placed)
        if not map_fits(operands, res_t):
            return None
        new = dist.MapOp.make(operands, [res_t], [m.body.clone()])
        new.outputs[0].name_hint = m.outputs[0].name_hint
        ops.append(new)
        mapping[m.outputs[0]] = new.outputs[0]
    last = mapping[maps[-1].outputs[0]]
    ops.append(make_yield(coll.YieldOp, [last]))
    block.add_ops(ops)
    out_t = last.type
    if cls.FINISH is not None:
        out_t = infer_type(cls.FINISH, [last.type], sizes, axes=axes)
        if out_t is None:
            return None
    return cls.make([x], [out_t], [region], **opts)


def _place_operand(v: SSAValue, res_t: TensorType, axes, sizes, ops: list[Operation]) -> SSAValue | None:
    """A map operand that is unplaced on ``axes``, placed there as the region's result
    ``res_t`` needs it: sliced (slice), replicated (repl) or at a rank (store). An
    operand that is a replicated value dropped on exactly those axes (``drop`` after
    ``drop``) and must be sliced on all of them is that value's ``take_slice`` on each
    axis instead: no unplaced value enters the region (neither the interpreter nor the
    lowering runs a ``dist.slice`` there, and ``slice(drop(x))`` is ``take_slice(x)``)."""
    t = v.type
    if not isinstance(t, TensorType):
        return v
    want = place_like(res_t, t.get_shape())
    source, dropped = _undropped(v)
    if sorted(dropped) == sorted(axes) and all(isinstance(want[a], Sliced) for a in axes):
        taken: list[Operation] = []
        cur = source
        for a in axes:
            new = try_build(lambda: dist.TakeSliceOp.of(cur, sizes=sizes, dim=want[a].dim.data, axis=a))  # type: ignore[union-attr]
            if new is None:
                break
            taken.append(new)
            cur = new.results[0]
        else:
            ops.extend(taken)
            return cur
    cur = v
    for a in axes:
        p = want[a]
        if isinstance(p, Sliced):
            new = try_build(lambda: dist.SliceOp.of(cur, sizes=sizes, dim=p.dim.data, axis=a))
        elif isinstance(p, At):
            new = try_build(lambda: dist.StoreOp.of(cur, sizes=sizes, rank=p.rank.data, axis=a))
        elif isinstance(p, Replicated):
            new = try_build(lambda: dist.ReplOp.of(cur, sizes=sizes, axis=a))
        else:
            return None
        if new is None:
            return None
        ops.append(new)
        cur = new.results[0]
    return cur


def _undropped(v: SSAValue) -> tuple[SSAValue, list[int]]:
    """The value ``v`` is a chain of single-use ``dist.drop`` of, and the axes dropped."""
    axes: list[int] = []
    while isinstance(d := _producer(v), dist.DropOp) and _single_user(v) is not None:
        axes.append(d.option("axis"))
        v = d.input
    return v, axes


def _erase_unused_drops(values: list[SSAValue], rewriter: PatternRewriter) -> None:
    """Erase the chains of ``dist.drop`` that fed ``values`` and are now unused."""
    for v in values:
        while isinstance(d := _producer(v), dist.DropOp) and not d.result.uses:
            v = d.input
            rewriter.erase(d)


@dataclass(frozen=True)
class FormCollectivesPass(ModulePass):
    """Rewrite chains of ``dist`` primitives into the collectives (and fused collectives)
    they compose, and ``slice(drop(x))`` into ``take_slice``; see the module docstring."""

    name = "form-collectives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FormCollective(), FormFusedCollective(), FormTakeSlice()]),
            apply_recursively=True,
        ).rewrite_module(op)


