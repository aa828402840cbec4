"""``lower-buckets``: run a combined collective (``combine-collectives``) as one
collective over one buffer holding its operands side by side, and the same
computation repeated on each of them as one kernel over that buffer (horizontal
fusion).

The operands of a multi-operand ``coll.fused_all_reduce`` are packed into a 1-d
*bucket* (``rt.pack``: every rank's buffers of the members, flattened and
concatenated). Then:

* a region that only yields its arguments (combined all_reduces) becomes one
  ``coll.all_reduce`` of the bucket::

      %a, %b = coll.fused_all_reduce avg %x, %y dim 0 {yield}
      ->  %xb = rt.pack %x, %y ; %ab = coll.all_reduce avg %xb ; %a, %b = rt.unpack %ab

* a region made of one *template* repeated for every member (what
  ``combine-collectives`` makes of per-tensor fused all-reduces: take_slices of outer
  values, maps and casts, the same ops with the same bodies) becomes one fused
  all-reduce of the bucket whose region runs the template once over the bucket's
  slice (outer member values packed too); its gathered results are unpacked.

Each rank then holds a contiguous chunk of the bucket rather than a block of every
member, which computes the same results since nothing sliced leaves the region: a
region with results that stay sliced (``slice-state``), with reductions or random
numbers (which depend on where an element is) is left as it is. After an unpack, the
element-wise ops repeated on every member (the maps of an AR-optimizer step) become
one op over the bucket the same way, and the members used further are unpacked.

``lower-collectives`` bufferizes a pack of function arguments as one buffer that the
runtime lays them out in (the function's ``rt.arenas``), and an unpack as views, so
that a combined step moves no extra bytes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import coll, dist, layout, rt
from distir.dialects.dist import TensorType
from distir.dialects.placements import At, Sliced
from distir.passes.support import BlockOrder, ancestor_in, gc_paused, infer_type, make_yield, mesh_sizes, replace_values, try_build

PASS = "lower-buckets"
ELEMENTWISE = (dist.MapOp, dist.CastOp)


def _numel(t: Attribute) -> int:
    n = 1
    for d in t.get_shape():  # type: ignore[attr-defined]
        n *= d
    return n


def packable(types: Sequence[Attribute]) -> bool:
    """Whether values of these types can share a bucket (one element type and mesh,
    placed alike, every rank holding its whole buffer)."""
    if not types or not all(isinstance(t, TensorType) for t in types):
        return False
    t0 = types[0]
    assert isinstance(t0, TensorType)
    for t in types:
        assert isinstance(t, TensorType)
        if t.element_type != t0.element_type or t.mesh_name != t0.mesh_name:
            return False
        if any(isinstance(p, (Sliced, At)) for p in t.get_placements()):
            return False
        if not layout.same_layout(t.get_placements(), t0.get_placements()):
            return False
    return True


def bucket_type(types: Sequence[Attribute]) -> TensorType:
    t0 = types[0]
    assert isinstance(t0, TensorType)
    return t0.with_(shape=[sum(_numel(t) for t in types)])


def pack(values: Sequence[SSAValue], emit: Callable[[Operation], None], packs: dict[tuple, SSAValue]) -> SSAValue:
    """The bucket of ``values``: the bucket they were unpacked from (same order), one
    packed before (``packs``), or a new ``rt.pack``."""
    first = values[0]
    owner = first.owner
    if isinstance(owner, rt.UnpackOp) and list(owner.members) == list(values):
        return owner.input
    key = tuple(values)
    if key in packs and packs[key].owner.parent is not None:  # type: ignore[union-attr]
        return packs[key]
    p = rt.PackOp.get(values, bucket_type([v.type for v in values]))
    emit(p)
    packs[key] = p.result
    return p.result


# --------------------------------------------------------------------------------------
# Templates: the same ops repeated for every member
# --------------------------------------------------------------------------------------


def attributes_key(op: Operation) -> tuple:
    """An op's properties and attributes, hashable (what tells alike ops apart)."""
    return tuple(sorted(op.properties.items())) + tuple(sorted((k, v) for k, v in op.attributes.items()))


def body_key(block: Block) -> tuple:
    """A hashable description of a region body: equal for bodies that compute alike."""
    ids: dict[SSAValue, tuple] = {a: ("a", i, a.type) for i, a in enumerate(block.args)}
    out = []
    for j, o in enumerate(block.ops):
        out.append((o.name, attributes_key(o), tuple(r.type for r in o.results), tuple(ids.get(v, ("x", v)) for v in o.operands)))
        for k, r in enumerate(o.results):
            ids[r] = ("r", j, k)
    return tuple(out)


def _elementwise_ok(op: Operation) -> bool:
    """A map or cast whose tensor operands all have its result's shape (no broadcast:
    the bucket is flat)."""
    if not isinstance(op, ELEMENTWISE):
        return False
    shape = op.results[0].type.get_shape()  # type: ignore[attr-defined]
    return all(not isinstance(v.type, TensorType) or v.type.get_shape() == shape for v in op.operands)


@dataclass
class Template:
    """Chunks of ops, one per member, that compute alike. ``roles[j][i]`` says what
    operand i of op j reads in every chunk: ``("arg",)`` the member's seed value,
    ``("res", j2, k)`` result k of op j2 of the same chunk, ``("shared", v)`` the same
    value in every chunk, ``("outer", j, i)`` a value of each member from outside."""

    chunks: list[list[Operation]]
    roles: list[list[tuple]]


def match_template(chunks: list[list[Operation]], seeds: list[SSAValue], allowed: Callable[[Operation], bool]) -> Template | None:
    """The template of ``chunks`` (chunk b seeded by ``seeds[b]``), or None when they do
    not compute alike."""
    if not chunks or any(len(c) != len(chunks[0]) for c in chunks):
        return None
    refs: list[list[list[tuple]]] = []
    for c, seed in zip(chunks, seeds):
        local: dict[SSAValue, tuple] = {seed: ("arg",)}
        rows = []
        for j, op in enumerate(c):
            if not allowed(op):
                return None
            rows.append([local.get(v, ("ext", v)) for v in op.operands])
            for k, r in enumerate(op.results):
                local[r] = ("res", j, k)
        refs.append(rows)
    head = chunks[0]
    keys0 = [_op_key(op) for op in head]
    roles: list[list[tuple]] = []
    for j, op in enumerate(head):
        row = []
        for i in range(len(op.operands)):
            r0 = refs[0][j][i]
            if r0[0] != "ext":
                if any(refs[b][j][i] != r0 for b in range(len(chunks))):
                    return None
                row.append(r0)
                continue
            vals = [refs[b][j][i] for b in range(len(chunks))]
            if any(v[0] != "ext" for v in vals):
                return None
            if all(v[1] is r0[1] for v in vals):
                row.append(("shared", r0[1]))
            elif isinstance(r0[1].type, TensorType):
                row.append(("outer", j, i))
            else:
                return None
        roles.append(row)
    for b in range(1, len(chunks)):
        if any(_op_key(op) != k for op, k in zip(chunks[b], keys0)):
            return None
    return Template(chunks, roles)


def _op_key(op: Operation) -> tuple:
    key: tuple = (op.name, attributes_key(op), tuple(r.type.element_type for r in op.results))  # type: ignore[attr-defined]
    if isinstance(op, dist.MapOp):
        key += (body_key(op.body.block),)
    return key


def instantiate(
    t: Template, seed: SSAValue, emit: Callable[[Operation], None], emit_outer: Callable[[Operation], None], sizes, packs: dict[tuple, SSAValue]
) -> list[list[SSAValue]] | None:
    """Build the template once over the bucket ``seed``; outer member values are packed
    with ``emit_outer``. Returns the results of every op, or None when an op's rule
    rejects the bucket types."""
    results: list[list[SSAValue]] = []
    for j, op in enumerate(t.chunks[0]):
        operands: list[SSAValue] = []
        for i, role in enumerate(t.roles[j]):
            if role[0] == "arg":
                operands.append(seed)
            elif role[0] == "res":
                operands.append(results[role[1]][role[2]])
            elif role[0] == "shared":
                operands.append(role[1])
            else:
                members = [c[j].operands[i] for c in t.chunks]
                if not packable([v.type for v in members]):
                    return None
                operands.append(pack(members, emit_outer, packs))
        new = _rebuild(op, operands, sizes)
        if new is None:
            return None
        for r, old in zip(new.results, op.results):
            r.name_hint = f"{old.name_hint}_bucket" if old.name_hint else None
        emit(new)
        results.append(list(new.results))
    return results


def _rebuild(op: Operation, operands: list[SSAValue], sizes) -> Operation | None:
    if isinstance(op, dist.TakeSliceOp):
        return try_build(lambda: dist.TakeSliceOp.of(operands[0], sizes=sizes, dim=0, axis=op.option("axis")))
    tensor = next((v.type for v in operands if isinstance(v.type, TensorType)), None)
    if tensor is None:
        return None
    types = [tensor.with_(element_type=r.type.element_type) for r in op.results]  # type: ignore[attr-defined]
    if isinstance(op, dist.MapOp):
        return dist.MapOp.make(operands, types, [op.body.clone()])
    if isinstance(op, dist.CastOp):
        return dist.CastOp.make(operands, types, **op.options())
    return None


# --------------------------------------------------------------------------------------
# Combined collectives
# --------------------------------------------------------------------------------------


def lower_fused(f: coll.FusedAllReduceOp, packs: dict[tuple, SSAValue]) -> rt.UnpackOp | None:
    """Run a combined fused all-reduce over one bucket; the unpack of its results, or
    None when it is left as it is (see the module doc)."""
    inputs = list(f.inputs)
    n_in = len(inputs)
    if n_in < 2 or not packable([v.type for v in inputs]):
        return None
    block = f.parent_block()
    assert block is not None
    region = f.body.block
    term = region.last_op
    assert isinstance(term, coll.YieldOp)
    ops = [o for o in region.ops if o is not term]
    if len(ops) % n_in or len(f.outputs) % n_in:
        return None
    per = len(ops) // n_in
    n_res = len(f.outputs) // n_in
    flags = f.gather_flags()
    if not all(flags):
        return None  # a sliced result: each rank's chunk of the bucket is not its blocks
    chunks = [ops[b * per : (b + 1) * per] for b in range(n_in)]
    args = list(region.args)
    # where each member's yields come from: its seed or one of its chunk's ops
    yields = list(term.values)
    roles: list[tuple] = []
    for r in range(n_res):
        row = []
        for b in range(n_in):
            y = yields[b * n_res + r]
            if y is args[b]:
                row.append(("arg",))
            elif isinstance(y.owner, Operation) and y.owner in chunks[b]:
                row.append(("res", chunks[b].index(y.owner), list(y.owner.results).index(y)))
            else:
                return None
        if any(x != row[0] for x in row):
            return None
        roles.append(row[0])
    if per:
        template = match_template(chunks, args, lambda o: isinstance(o, dist.TakeSliceOp) or _elementwise_ok(o))
        if template is None:
            return None
    xt = inputs[0].type
    assert isinstance(xt, TensorType)
    sizes = mesh_sizes(f, xt)
    axes = list(f.option("axes"))
    before: list[Operation] = []
    xb = pack(inputs, before.append, packs)
    if not per:
        # combined all_reduces: one all_reduce of the bucket
        new = try_build(lambda: coll.AllReduceOp.of(xb, sizes=sizes, op=f.option("op"), axes=axes))
        if new is None:
            return None
        block.insert_ops_before([*before, new], f)
        results = [new.results[0]]
    else:
        if sizes is None or _numel(xb.type) % layout.group_size(sizes, axes):
            return None
        arg_t = infer_type(coll.ReduceScatterOp, [xb.type], sizes, op=f.option("op"), dim=0, axes=axes)
        if arg_t is None:
            return None
        body = Block(arg_types=[arg_t])
        body.args[0].name_hint = "bucket_s"
        inner: list[Operation] = []
        made = instantiate(template, body.args[0], inner.append, before.append, sizes, packs)
        if made is None:
            return None
        ys = [body.args[0] if role[0] == "arg" else made[role[1]][role[2]] for role in roles]
        body.add_ops([*inner, make_yield(coll.YieldOp, ys)])
        out_types = [infer_type(coll.AllGatherOp, [y.type], sizes, axes=axes) for y in ys]
        if any(t is None for t in out_types):
            return None
        new = coll.FusedAllReduceOp.make([xb], out_types, [Region(body)], op=f.option("op"), dim=0, axes=axes)
        block.insert_ops_before([*before, new], f)
        results = list(new.results)
    unpacks = []
    outputs = list(f.outputs)
    replaced: dict[SSAValue, SSAValue] = {}
    for r, v in enumerate(results):
        members = [outputs[b * n_res + r] for b in range(n_in)]
        u = rt.UnpackOp.get(v, [m.type for m in members])
        block.insert_op_before(u, f)
        for m, nu in zip(members, u.members):
            nu.name_hint = m.name_hint
            replaced[m] = nu
        unpacks.append(u)
    replace_values(replaced)
    f.detach()
    f.erase()
    return unpacks[0] if len(unpacks) == 1 else None


# --------------------------------------------------------------------------------------
# Horizontal fusion after an unpack
# --------------------------------------------------------------------------------------


def horizontal(u: rt.UnpackOp, order: BlockOrder, packs: dict[tuple, SSAValue]) -> None:
    """Run the element-wise ops repeated on every member of ``u`` as one op over the
    bucket (see the module doc)."""
    block = u.parent_block()
    assert block is not None
    n = len(u.members)
    chunk_of: dict[Operation, int] = {}
    value_chunk: dict[SSAValue, int] = {m: b for b, m in enumerate(u.members)}
    heap: list[tuple[float, int, Operation]] = []
    seen: set[Operation] = set()
    counter = 0

    def push_users(v: SSAValue) -> None:
        nonlocal counter
        for use in v.uses:
            a = ancestor_in(use.operation, block)
            if a is not None and a not in seen:
                seen.add(a)
                counter += 1
                heapq.heappush(heap, (order.key(a), counter, a))

    for m in u.members:
        push_users(m)
    while heap:
        _, _, op = heapq.heappop(heap)
        if op.parent_block() is not block or not _elementwise_ok(op):
            continue
        owners = {value_chunk[v] for v in op.operands if v in value_chunk}
        if len(owners) != 1:
            continue
        b = owners.pop()
        chunk_of[op] = b
        for r in op.results:
            value_chunk[r] = b
            push_users(r)
    if not chunk_of:
        return
    chunks: list[list[Operation]] = [[] for _ in range(n)]
    for op in order.sort(chunk_of):
        chunks[chunk_of[op]].append(op)
    template = match_template(chunks, list(u.members), _elementwise_ok)
    if template is None:
        return
    # everything the chunks read from outside must exist at the unpack already
    for j, row in enumerate(template.roles):
        for i, role in enumerate(row):
            vals = [role[1]] if role[0] == "shared" else [c[j].operands[i] for c in template.chunks] if role[0] == "outer" else []
            for v in vals:
                if isinstance(v, BlockArgument):
                    if v.owner is not block:
                        return
                    continue
                top = ancestor_in(v.owner, block)  # type: ignore[arg-type]
                if top is None or top in chunk_of or not order.before(top, u):
                    return
    xt = u.input.type
    assert isinstance(xt, TensorType)
    sizes = mesh_sizes(u, xt)
    new_ops: list[Operation] = []
    outer: list[Operation] = []  # packs first, so that the ops stay one run (one kernel)
    made = instantiate(template, u.input, new_ops.append, outer.append, sizes, packs)
    if made is None:
        return
    members_done: list[Operation] = []
    replaced: dict[SSAValue, SSAValue] = {}
    for j, op in enumerate(template.chunks[0]):
        for k in range(len(op.results)):
            members = [c[j].results[k] for c in template.chunks]
            escaping = [m for m in members if any(ancestor_in(use.operation, block) not in chunk_of for use in m.uses)]
            if not escaping:
                continue
            un = rt.UnpackOp.get(made[j][k], [m.type for m in members])
            members_done.append(un)
            for m, nu in zip(members, un.members):
                nu.name_hint = m.name_hint
                replaced[m] = nu
    replace_values(replaced)
    ops = [*outer, *new_ops, *members_done]
    anchor = u.next_op
    assert anchor is not None
    block.insert_ops_before(ops, anchor)
    order.place_run(ops)
    for c in template.chunks:
        for op in reversed(c):
            op.detach()
            op.erase()
    if all(not m.uses for m in u.members):
        u.detach()
        u.erase()


@dataclass(frozen=True)
class LowerBucketsPass(ModulePass):
    """Combined collectives over one bucket, repeated computations as one over it; see
    the module docstring."""

    name = "lower-buckets"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        with gc_paused():
            self._apply(ctx, op)

    def _apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in [o for o in op.ops if isinstance(o, func.FuncOp)]:
            if not f.body.blocks:
                continue
            packs: dict[tuple, SSAValue] = {}
            for c in [o for o in f.body.block.ops if isinstance(o, coll.FusedAllReduceOp) and len(o.inputs) > 1]:
                u = lower_fused(c, packs)
                if u is not None:
                    horizontal(u, BlockOrder(), packs)  # numbered afresh: combined collectives are few
