"""``combine-collectives{bucket-bytes=33554432}``: independent collectives of the same kind,
group, reduction, options and element type become one collective over all their
operands, up to ``bucket-bytes`` of operands each (PyTorch DDP's gradient buckets, XLA's
all-reduce combiner, CoCoNet's scattered tensors, §6.4).

The combined form is a fused collective with one operand per member (CoCoNet: one
collective over a list of tensors). Plain collectives get a region that only yields
its arguments; fused collectives concatenate their regions and ``gather`` flags::

    all_reduce(x1) ; all_reduce(x2)          = fused_all_reduce(x1, x2) { yield }
    reduce_scatter(x1) ; reduce_scatter(x2)  = fused_reduce_scatter(x1, x2) { yield }
    all_gather / reduce / broadcast / all_to_all likewise
    fused_c(x1){f1} ; fused_c(x2){f2}        = fused_c(x1, x2){f1; f2}

Valid when

* the members are independent (no member reads, directly or through other ops, what
  another produces), which the plan guarantees: collectives are taken in block order
  into the open bucket of their kind, and a bucket closes at the first op that reads
  one of its members' results; the combined op is placed there;
* they run on the same group: the same mesh, ``axes`` and options, and the same ranks
  taking part (the same ``at<r>`` placements on the other axes: with ``at<r>`` only
  the ranks holding the value take part);
* the combined op has a layout that carries every member. An all_reduce is combined
  as a ``fused_all_reduce`` whose region sees each member reduce-scattered along one
  ``dim`` (the same for all members of a bucket): a dim no other mesh axis already
  slices, the first one the group divides. A dim another axis slices
  would nest the group's blocks inside that axis's blocks, which is not the plain
  ``sliced<dim>`` block a combined buffer holds (an all_reduce over ``dp`` of
  ``[local, sliced<0>]`` on a 2x4 mesh keeps dim 0 out of the choice and takes dim 1
  if ``dp`` divides it). Where no such dim is divided by the group, the one with the
  least padding (uneven blocks). Members whose dim differs go to different buckets;
  an all_reduce with every dim sliced by other axes (or before the group size is
  known: the default lowering runs this pass after ``fix-mesh-sizes``) stays as it
  is. Other collectives carry their own ``dim``, which each member's verifier has
  checked.

0-d all_reduces, sends and collectives inside regions stay as they are. A collective
larger than ``bucket-bytes`` on its own is left alone.

The lowering (``lower-buckets``) then runs each combined collective as one call over
one buffer holding its operands side by side, and the maps that follow as one kernel
over that buffer. Example::

    %a = coll.all_reduce avg %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
    %b = coll.all_reduce avg %y : !dist.tensor<32xf32, @world, [local]> -> !dist.tensor<32xf32, @world, [replicated]>

on a mesh of 4 ranks becomes::

    %a, %b = coll.fused_all_reduce avg %x, %y dim 0 : (..., ...) -> (..., ...) {
    ^bb0(%x_s: !dist.tensor<64xf32, @world, [sliced<0>]>, %y_s: !dist.tensor<32xf32, @world, [sliced<0>]>):
      coll.yield %x_s, %y_s : ...
    }
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll, layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import At, Sliced
from distir.passes.support import ancestor_in, fail, gc_paused, infer_type, make_yield, mesh_sizes, replace_values, slice_dim

DEFAULT_BUCKET_BYTES = 32 * 1024 * 1024
"""Operand bytes of one combined collective (the logical size of its operands)."""

COMBINED: dict[type[coll.CollectiveOp], type[coll.FusedCollectiveOp]] = {f.PLAIN: f for f in coll.fused_collectives()}
"""Each collective and its fused form, which carries several operands."""


def _bytes(t: Attribute) -> int:
    assert isinstance(t, TensorType)
    n = 1
    for d in t.get_shape():
        n *= d
    width = getattr(t.element_type, "bitwidth", None) or getattr(getattr(t.element_type, "width", None), "data", 32)
    return n * max(1, width // 8)


def _options_key(options: dict) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in options.items() if k != "gather"))


def _ar_dim(op: coll.AllReduceOp) -> int | None:
    """The dim a combined all_reduce slices (module doc): among the dims no other mesh
    axis slices, the first one the (known) group divides, else the one with the least
    padding (``support.slice_dim``)."""
    t = op.input.type
    assert isinstance(t, TensorType)
    sizes = mesh_sizes(op, t)
    if sizes is None or any(sizes[a] is None for a in op.axes):
        return None
    taken = {p.dim.data for p in t.get_placements() if isinstance(p, Sliced)}
    free = [d for d in range(t.rank) if d not in taken]
    return slice_dim(t, layout.group_size(sizes, list(op.axes)), free) if free else None


def _taking_part(t: TensorType, axes) -> tuple:
    """Which ranks of the other axes take part in a collective over ``axes`` of a value
    of type ``t``: the ``at<r>`` placements elsewhere (part of the group)."""
    return tuple((a, p.rank.data) for a, p in enumerate(t.get_placements()) if a not in axes and isinstance(p, At))


def candidate(op: Operation) -> tuple[tuple, int] | None:
    """(bucket key, operand bytes) of a collective that may be combined, else None."""
    if isinstance(op, coll.FusedCollectiveOp):
        types = [v.type for v in op.inputs]
        if not types or not all(isinstance(t, TensorType) for t in types):
            return None
        t = types[0]
        assert isinstance(t, TensorType)
        if any(x.element_type != t.element_type or x.mesh_name != t.mesh_name for x in types):  # type: ignore[attr-defined]
            return None
        axes = list(op.option("axes"))
        part = _taking_part(t, axes)
        if any(_taking_part(x, axes) != part for x in types):  # type: ignore[arg-type]
            return None
        key = (type(op), t.mesh_name, t.element_type, _options_key(op.options()), part)
        return key, sum(_bytes(x) for x in types)
    if type(op) not in COMBINED:
        return None
    t = op.input.type  # type: ignore[attr-defined]
    if not isinstance(t, TensorType) or t.rank == 0:
        return None
    options = op.options()  # type: ignore[attr-defined]
    if isinstance(op, coll.AllReduceOp):
        d = _ar_dim(op)
        if d is None:
            return None
        options = {**options, "dim": d}
    key = (type(op), t.mesh_name, t.element_type, _options_key(options), _taking_part(t, list(op.option("axes"))))  # type: ignore[attr-defined]
    return key, _bytes(t)


@dataclass
class Bucket:
    key: tuple
    members: list[Operation] = field(default_factory=list)
    nbytes: int = 0
    limit: int = 1 << 62
    """Block index of the first op reading a member's result."""
    anchor: Operation | None = None
    """The op the combined collective goes before."""


def plan_buckets(block: Block, bucket_bytes: int) -> list[Bucket]:
    """The buckets of ``block``'s collectives, in the order they are placed (see the
    module doc): one walk of the block plus the members' uses and operands.

    A bucket is placed before its *anchor*, the first op that reads one of its members'
    results. Collectives join the open bucket of their kind in block order; one that
    comes after the anchor joins (moving up to it) when everything it reads is defined
    before the anchor, which also rules out reading what a member produces."""
    ops = list(block.ops)
    index = {op: i for i, op in enumerate(ops)}
    never = 1 << 62
    accepting: dict[tuple, Bucket] = {}
    member_of: dict[Operation, Bucket] = {}
    closing: list[tuple[int, int, Bucket]] = []
    buckets: list[Bucket] = []
    count = 0

    def defined_at(v: SSAValue, reader: Operation) -> int:
        """Where ``v`` will be defined, as a block index (-1: before the block)."""
        owner = v.owner
        if not isinstance(owner, Operation):
            return -1
        top = ancestor_in(owner, block)
        if top is None or top is reader:
            return -1  # defined in an enclosing region, or inside the reader itself
        b = member_of.get(top)
        if b is not None:  # produced by the combined op, at its anchor
            return index[b.anchor] if b.anchor is not None else never
        return index[top]

    def reads_until(op: Operation) -> int:
        """The latest definition of what ``op`` (and its regions) read."""
        values = list(op.operands) + [v for r in op.regions for inner in r.walk() for v in inner.operands]
        return max((defined_at(v, op) for v in values), default=-1)

    for i, op in enumerate(ops):
        while closing and closing[0][0] <= i:
            at, _, b = heapq.heappop(closing)
            if b.anchor is None and at == b.limit:
                b.anchor = op
        got = candidate(op)
        if got is None:
            continue
        key, nbytes = got
        if nbytes > bucket_bytes:
            continue
        b = accepting.get(key)
        if b is not None and (b.nbytes + nbytes > bucket_bytes or (b.anchor is not None and reads_until(op) >= index[b.anchor])):
            b = None
        if b is None:
            b = accepting[key] = Bucket(key)
            buckets.append(b)
        b.members.append(op)
        member_of[op] = b
        b.nbytes += nbytes
        if b.anchor is None:
            first_use = min((index.get(ancestor_in(u.operation, block), never) for r in op.results for u in r.uses), default=never)  # type: ignore[arg-type]
            if first_use < b.limit:
                b.limit = first_use
                count += 1
                heapq.heappush(closing, (first_use, count, b))
    for b in buckets:
        if b.anchor is None:
            b.anchor = block.last_op
    out = [b for b in buckets if len(b.members) > 1]
    out.sort(key=lambda b: index[b.anchor])  # type: ignore[index]
    return out


def _combined_plain(members: list[Operation]) -> Operation:
    """The fused collective of plain collectives ``members`` (a region yielding its
    arguments)."""
    first = members[0]
    cls = COMBINED[type(first)]
    options = dict(first.options())  # type: ignore[attr-defined]
    if isinstance(first, coll.AllReduceOp):
        options["dim"] = _ar_dim(first)
    inputs = [m.operands[0] for m in members]
    t = inputs[0].type
    sizes = mesh_sizes(first, t)  # type: ignore[arg-type]
    if cls.FIRST is not None:
        first_opts = {k: v for k, v in options.items() if k in {kw.keyword for kw in cls.FIRST.KEYWORDS} | {cls.FIRST.KIND}}
        arg_types = [infer_type(cls.FIRST, [x.type], sizes, **first_opts) for x in inputs]
    else:
        arg_types = [x.type for x in inputs]
    body = Block(arg_types=arg_types)  # type: ignore[arg-type]
    for a, x in zip(body.args, inputs):
        a.name_hint = f"{x.name_hint}_s" if x.name_hint else None
    body.add_op(make_yield(coll.YieldOp, list(body.args)))
    return cls.make(inputs, [m.results[0].type for m in members], [Region(body)], **options)


def _combined_fused(members: list[Operation]) -> Operation:
    """One fused collective running the members' regions one after the other."""
    first = members[0]
    assert isinstance(first, coll.FusedCollectiveOp)
    inputs: list[SSAValue] = []
    arg_types: list[Attribute] = []
    for m in members:
        inputs += list(m.inputs)  # type: ignore[attr-defined]
        arg_types += [a.type for a in m.body.block.args]  # type: ignore[attr-defined]
    body = Block(arg_types=arg_types)
    yields: list[SSAValue] = []
    flags: list[bool] = []
    k = 0
    for m in members:
        old = m.body.block  # type: ignore[attr-defined]
        for a in old.args:
            body.args[k].name_hint = a.name_hint
            a.replace_all_uses_with(body.args[k])
            k += 1
        term = old.last_op
        assert isinstance(term, coll.YieldOp)
        yields += list(term.values)
        flags += list(m.gather_flags())  # type: ignore[attr-defined]
        for inner in list(old.ops):
            if inner is term:
                continue
            inner.detach()
            body.add_op(inner)
    body.add_op(make_yield(coll.YieldOp, yields))
    options = dict(first.options())
    if type(first).FINISH is not None:
        options["gather"] = None if all(flags) else flags
    result_types = [r.type for m in members for r in m.results]
    return type(first).make(inputs, result_types, [Region(body)], **options)


def combine(bucket: Bucket) -> Operation:
    """Replace the bucket's members by one combined collective before its anchor."""
    members = bucket.members
    new = _combined_fused(members) if isinstance(members[0], coll.FusedCollectiveOp) else _combined_plain(members)
    block = members[0].parent_block()
    assert block is not None and bucket.anchor is not None
    block.insert_op_before(new, bucket.anchor)
    olds = [r for m in members for r in m.results]
    for old, r in zip(olds, new.results):
        r.name_hint = old.name_hint
    replace_values(dict(zip(olds, new.results)))  # one update of a return of many values
    for m in members:
        m.detach()
        m.erase()
    return new


@dataclass(frozen=True)
class CombineCollectivesPass(ModulePass):
    """Combine independent collectives of one kind into one over all their operands;
    see the module docstring."""

    name = "combine-collectives"

    bucket_bytes: int = DEFAULT_BUCKET_BYTES

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        with gc_paused():
            self._apply(ctx, op)

    def _apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.bucket_bytes < 1:
            fail(self.name, f"bucket-bytes must be at least 1, got {self.bucket_bytes}")
        for f in [o for o in op.ops if isinstance(o, func.FuncOp)]:
            if not f.body.blocks:
                continue
            for bucket in plan_buckets(f.body.block, self.bucket_bytes):
                combine(bucket)
