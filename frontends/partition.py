"""``partition``: give every global value a placement and insert the collectives that
reconcile them.

Input: a function whose computation runs on *global* values -- ``unplaced`` on every mesh
axis, the logical values of a program as JAX writes it -- connected to placed values by
boundaries: a *source* (``dist.join``/``drop``/``reduce``/``load`` chains from a placed
value to its logical value: an argument, the result of a collective) and a *sink*
(``dist.slice``/``repl``/``store`` chains, or an ``unrealized_conversion_cast`` to
partial sums, from a global value to a placed one: a result, a constraint, an explicit
collective's operand). The front ends (``sdy.py``, ``shard.py``) produce exactly this,
and a program written by hand in that style partitions the same way.

Output: ordinary dist/coll IR in which every value is placed; the global ops are the
same ops on placed values, and between a value's placement and what a use needs, the
collectives of DTensor's transition table (``reshard``)::

    local      -> replicated : coll.all_reduce      local     -> sliced<d> : coll.reduce_scatter
    sliced<d>  -> replicated : coll.all_gather      sliced<d> -> sliced<e> : coll.all_to_all
    replicated -> sliced<d>  : dist.take_slice      at<r>     -> replicated: coll.broadcast

**Rules.** (1) Boundaries keep their placements: arguments, results, constraints
(``sdy.sharding_constraint``, ``shard.shard``) and explicit collectives are never
changed. (2) Propagation, in both directions, by factors as Shardy does: each op maps
dims of its operands and results to factors (an element-wise op: one factor per result
dim; ``dist.matmul``: batch, M, N and the contracted K; ``dist.reduce_tensor``: kept
dims and reduced dims; ``transpose``/``reshape``: the dims they move;
``dist.embedding_bag``: the bags, and the table's rows as a summed factor); a factor takes
the mesh axes slicing any of its dims and gives them to the dims of the other values
that have none, when the axes are not used elsewhere in that value or by another factor
of the op and they divide the dim. A value's first assignment wins; ops are visited
from a worklist seeded in program order (deterministic). A contracted or reduced factor
sliced on an axis leaves partial results (``local``, with the reduction's kind) there;
partial sums pass through the ops that only move elements (``moves_only``: transpose,
reshape, extract_slice, a concat of parts all partial over the axis), so that a scan's
stacked gradients are reduced once.
(3) Materialisation, in program order: each op computes on its operands resharded to
what its factors need (a ``dist.map`` operand: ``operand_placements`` of the result), and
its result type follows from its rule; partial results are reduced where a use needs
them whole (``all_reduce``) or sliced (``reduce_scatter``); a use that wants a dim
sliced gets ``take_slice`` (no communication). (4) Resharding plans per axis: gather what
the target does not slice the same way (innermost first; ``all_to_all`` when the axis
moves to another dim), reduce partial sums, then slice (outermost first).

**Open values.** In a manual computation over some of the mesh axes a value is placed on
its manual axes by the program (``local``: each device's own) and unplaced on the free
ones. Such a value is *open*: its layout pins what the program places (``Lay.pinned``,
and the slices of a manual axis as dims) and the partitioner decides the rest, as for a
global value. A boundary primitive between open values (``dist.slice``/``repl`` pinning a
manual axis at the body's entry, ``join``/``drop``/``reduce`` freeing it at its exit)
emits nothing itself: its result is its operand resharded to the result's layout; a
view (``to_local``/``from_local``) or a collective on open values keeps its free axes on
the dims its manual axes do not slice.

With ``remarks=true`` each inserted collective is reported (``partition_module`` returns
them; ``distir-import --remarks`` prints them): what it is, on which value, why.

Before::

    func.func @f(%x: !dist.tensor<8x16xf32, @m, [replicated]>, %w: !dist.tensor<16x32xf32, @m, [sliced<0>]>)
        -> !dist.tensor<8x32xf32, @m, [replicated]> {
      %xg = dist.drop %x : ... [replicated] -> ... [unplaced]
      %wg = dist.join %w : ... [sliced<0>] -> ... [unplaced]
      %y = dist.matmul %xg, %wg : (... [unplaced], ... [unplaced]) -> !dist.tensor<8x32xf32, @m, [unplaced]>
      %r = dist.repl %y : ... [unplaced] -> ... [replicated]
      func.return %r : ...
    }

After::

    %0 = dist.take_slice %x dim 1 : ... [replicated] -> !dist.tensor<8x16xf32, @m, [sliced<1>]>
    %y = dist.matmul %0, %w : (..., ...) -> !dist.tensor<8x32xf32, @m, [local]>
    %1 = coll.all_reduce sum %y : ... [local] -> !dist.tensor<8x32xf32, @m, [replicated]>
    func.return %1 : ...
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, UnrealizedConversionCastOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.lexer import Span

from distir.dialects import coll, dist, layout
from distir.dialects.diagnostics import InputRejected
from distir.dialects.dist import RuleError, TensorType
from distir.dialects.placements import LOCAL, REPLICATED, At, Local, Placement, Replicated, Sliced, Unplaced, sliced

SOURCE_PRIMS = (dist.JoinOp, dist.DropOp, dist.ReduceOp, dist.LoadOp)
LINEAR = (dist.TransposeOp, dist.ReshapeOp, dist.ExtractSliceOp, dist.ConcatOp)
"""Ops that partial sums (``local``) pass through unreduced: they only move elements, so
the sum of the moved parts is the moved sum, bit for bit (a concat of parts that are all
partial over an axis is partial over it). A ``reduce_tensor`` over dims of size 1 is a reshape (``moves_only``)."""
SINK_PRIMS = (dist.SliceOp, dist.ReplOp, dist.StoreOp)


def moves_only(op: Operation) -> bool:
    """Whether ``op`` only moves the elements of its operands (``LINEAR``, or a sum
    ``reduce_tensor`` whose reduced dims all have size 1: the bias gradient of a
    [1, 1, N] block): partial sums pass through it exactly."""
    if isinstance(op, LINEAR):
        return True
    if isinstance(op, dist.ReduceTensorOp) and op.option("op") == "sum":
        shape = _tensor_shape(op.input) or ()
        return all(shape[d] == 1 for d in op.option("dims"))
    return False


class PartitionError(InputRejected):
    """A program the partitioner cannot place (the message says where and why)."""


# ======================================================================================
# Layouts during propagation
# ======================================================================================


@dataclass
class Lay:
    """A value's layout being decided: the mesh axes slicing each dim (outermost first)
    and the axes holding partial results (with the reduction kind)."""

    dims: list[tuple[int, ...]]
    pending: dict[int, str] = field(default_factory=dict)
    pinned: dict[int, Placement] = field(default_factory=dict)
    """Axes the value is placed on by the program itself, not ``unplaced``: the manual
    axes of a manual computation over some of the mesh axes (``local``: each device's
    own value), and what its collectives make of them."""

    def used(self) -> set[int]:
        return {a for d in self.dims for a in d} | set(self.pending) | set(self.pinned)

    def placements(self, naxes: int) -> list[Placement]:
        out: list[Placement] = [REPLICATED] * naxes
        for d, axes in enumerate(self.dims):
            for k, a in enumerate(axes):
                out[a] = sliced(d, k) if len(axes) > 1 else sliced(d)
        for a in self.pending:
            out[a] = LOCAL
        for a, p in self.pinned.items():
            out[a] = p
        return out


def lay_of(t: TensorType, kinds: dict[int, str] | None = None) -> Lay:
    ps = t.get_placements()
    dims = [tuple(layout.slicing_axes(ps, d)) for d in range(t.rank)]
    pending = {a: (kinds or {}).get(a, "sum") for a, p in enumerate(ps) if isinstance(p, Local)}
    return Lay(dims, pending)


def is_global(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and all(isinstance(p, Unplaced) for p in t.get_placements())


def is_open(v: SSAValue) -> bool:
    """Unplaced on some mesh axis: a global value, or a value of a manual computation over
    some of the axes (placed on its manual axes, unplaced on the free ones)."""
    t = v.type
    return isinstance(t, TensorType) and any(isinstance(p, Unplaced) for p in t.get_placements())


def lay_of_open(t: TensorType) -> Lay:
    """The layout an open value starts with: what its type places (slices are pinned as
    dims, ``local``/``replicated`` axes pinned), the rest to be decided."""
    ps = t.get_placements()
    dims = [tuple(a for a in layout.slicing_axes(ps, d)) for d in range(t.rank)]
    pinned = {a: p for a, p in enumerate(ps) if not isinstance(p, (Unplaced, Sliced))}
    return Lay(dims, {}, pinned)


def is_placed(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and not any(isinstance(p, Unplaced) for p in t.get_placements())


# ======================================================================================
# Factors: how an op's dims correspond (the propagation rules)
# ======================================================================================


@dataclass
class Factor:
    """Dims of an op's values that are one loop of its computation. ``reduce`` names the
    reduction kind of a factor that does not reach the results."""

    dims: list[tuple[SSAValue, int]]
    reduce: str | None = None


def factors(op: Operation) -> list[Factor] | None:
    """The op's factors, or None for an op the partitioner does not know (it then runs
    on replicated operands)."""
    rule = FACTORS.get(type(op))
    if rule is None and isinstance(op, coll.CollectiveOp):
        rule = _f_view
    return rule(op) if rule is not None else None


def _tensor_shape(v: SSAValue) -> tuple[int, ...] | None:
    return v.type.get_shape() if isinstance(v.type, TensorType) else None


def _f_map(op: dist.MapOp) -> list[Factor]:
    res = list(op.outputs)
    shape = res[0].type.get_shape()  # type: ignore[attr-defined]
    out = []
    for d in range(len(shape)):
        dims = [(r, d) for r in res]
        for x in op.inputs:
            s = _tensor_shape(x)
            if s is None:
                continue
            j = d - (len(shape) - len(s))
            if j >= 0 and s[j] == shape[d]:
                dims.append((x, j))
        out.append(Factor(dims))
    return out


def _f_same(op: Operation) -> list[Factor]:
    x, r = op.operands[0], op.results[0]
    return [Factor([(x, d), (r, d)]) for d in range(len(_tensor_shape(r) or ()))]


def _f_matmul(op: dist.MatmulOp) -> list[Factor]:
    a, b, r = op.lhs, op.rhs, op.result
    ra, rb, rr = len(_tensor_shape(a) or ()), len(_tensor_shape(b) or ()), len(_tensor_shape(r) or ())
    out = []
    for i in range(ra - 2):
        dims = [(a, i), (r, i)]
        if rb > 2:
            dims.append((b, i))
        out.append(Factor(dims))
    out.append(Factor([(a, ra - 2), (r, rr - 2)]))
    out.append(Factor([(b, rb - 1), (r, rr - 1)]))
    out.append(Factor([(a, ra - 1), (b, rb - 2)], reduce="sum"))
    return out


def _f_reduce_tensor(op: dist.ReduceTensorOp) -> list[Factor]:
    x, r = op.input, op.result
    dims = op.option("dims")
    kind = op.option("op")
    keep = [d for d in range(len(_tensor_shape(x) or ())) if d not in dims]
    out = [Factor([(x, d), (r, k)]) for k, d in enumerate(keep)]
    out += [Factor([(x, d)], reduce=kind) for d in dims]
    return out


def _f_transpose(op: Operation) -> list[Factor]:
    x, r = op.operands[0], op.results[0]
    perm = op.option("perm")  # type: ignore[attr-defined]
    return [Factor([(x, p), (r, k)]) for k, p in enumerate(perm)]


def _f_reshape(op: Operation) -> list[Factor]:
    x, r = op.operands[0], op.results[0]
    pairs = dist.reshape_major_dims(_tensor_shape(x) or (), _tensor_shape(r) or ())
    return [Factor([(x, i), (r, j)]) for i, j in pairs]


def _f_iota(op: Operation) -> list[Factor]:
    r = op.results[0]
    return [Factor([(r, d)]) for d in range(len(_tensor_shape(r) or ()))]


def _f_extract(op: Operation) -> list[Factor]:
    x, r = op.operands[0], op.results[0]
    return [Factor([(x, d), (r, d)]) for d in op.full_dims()]  # type: ignore[attr-defined]


def _f_concat(op: Operation) -> list[Factor]:
    r = op.results[0]
    dim = op.option("dim")  # type: ignore[attr-defined]
    return [Factor([*((x, d) for x in op.operands), (r, d)]) for d in range(len(_tensor_shape(r) or ())) if d != dim]


def _f_embedding_bag(op: dist.EmbeddingBagOp) -> list[Factor]:
    """The table dim (of a 3-d table), the bags and, in sum mode, the table's rows: a
    table sliced on its rows leaves partial sums (each rank adds the rows it holds)."""
    t, i, r = op.table, op.indices, op.result
    lead = len(_tensor_shape(t) or ()) - 2
    out = [Factor([(t, 0), (i, 0), (r, 0)])] if lead else []
    out.append(Factor([(i, lead), (r, lead)]))
    if op.option("mode") == "sum":
        out.append(Factor([(t, lead)], reduce="sum"))
    return out


def _f_view(op: Operation) -> list[Factor]:
    """``to_local``/``from_local`` (and a collective) on open values: each dim carries its
    free axes, except the dims that the axes whose placement changes slice."""
    x, r = op.operands[0], op.results[0]
    tx, tr_ = x.type, r.type
    assert isinstance(tx, TensorType) and isinstance(tr_, TensorType)
    px, pr = tx.get_placements(), tr_.get_placements()
    changed = [a for a in range(len(px)) if px[a] != pr[a]] + list(getattr(op, "axes", ()))
    touched = {p.dim.data for ps in (px, pr) for a in changed for p in [ps[a]] if isinstance(p, Sliced)}
    if isinstance(op, (coll.AllToAllOp, coll.ReduceScatterOp)):
        touched.add(op.option("dim"))  # type: ignore[attr-defined]
    return [Factor([(x, d), (r, d)]) for d in range(tx.rank) if d not in touched]


def _f_scatter_add(op: dist.ScatterAddOp) -> list[Factor]:
    """The table dim (of 3-d operands), the result's rows (a result sliced on them adds
    only the rows each rank holds), the row width, and the bags as a summed factor
    (bags sliced over ranks leave partial sums)."""
    i, u, r = op.indices, op.updates, op.result
    lead = len(_tensor_shape(i) or ()) - 2
    out = [Factor([(i, 0), (u, 0), (r, 0)])] if lead else []
    out.append(Factor([(r, lead)]))
    out.append(Factor([(u, lead + 1), (r, lead + 1)]))
    out.append(Factor([(i, lead), (u, lead)], reduce="sum"))
    return out


def _f_sort(op: dist.SortOp) -> list[Factor]:
    """Every dim but the sorted one, shared by all operands and results."""
    dim = op.option("dim")
    vals = [*op.inputs, *op.outputs]
    rank = len(_tensor_shape(op.outputs[0]) or ())
    return [Factor([(v, d) for v in vals]) for d in range(rank) if d != dim]


FACTORS = {
    dist.MapOp: _f_map,
    dist.EmbeddingBagOp: _f_embedding_bag,
    dist.ScatterAddOp: _f_scatter_add,
    dist.SortOp: _f_sort,
    dist.CastOp: _f_same,
    dist.DropoutOp: _f_same,
    dist.MatmulOp: _f_matmul,
    dist.ReduceTensorOp: _f_reduce_tensor,
    dist.TransposeOp: _f_transpose,
    dist.ReshapeOp: _f_reshape,
    dist.IotaOp: _f_iota,
    dist.ExtractSliceOp: _f_extract,
    dist.ConcatOp: _f_concat,
    # on open values only (in a manual computation over some axes): see ``collect``
    dist.SliceOp: _f_same,
    dist.ReplOp: _f_same,
    dist.JoinOp: _f_same,
    dist.DropOp: _f_same,
    dist.ReduceOp: _f_same,
    dist.ToLocalOp: _f_view,
    dist.FromLocalOp: _f_view,
}
PRIMS = (*SOURCE_PRIMS, *SINK_PRIMS)
"""The boundary primitives: on open values they pin or free an axis (``place_op``)."""


# ======================================================================================
# The partitioner
# ======================================================================================


@dataclass
class Remark:
    op: Operation | None
    text: str


class Partitioner:
    def __init__(self, f: func.FuncOp, sizes: dict[str, tuple[int, ...]], spans: dict[Operation, Span], axis_names: dict[str, tuple[str, ...]] | None = None):
        self.f = f
        self.axis_names_of = axis_names or {}
        self.block = f.body.block
        self.sizes = sizes
        self.spans = spans
        self.lay: dict[SSAValue, Lay] = {}
        self.sources: dict[SSAValue, tuple[SSAValue, list[Operation]]] = {}  # global -> (placed, chain)
        self.sinks: list[tuple[SSAValue, SSAValue, list[Operation]]] = []  # (global, placed, chain)
        self.global_ops: list[Operation] = []
        self.op_axes: dict[Operation, dict[int, int]] = {}
        self.real: dict[SSAValue, SSAValue] = {}
        self.kinds: dict[SSAValue, dict[int, str]] = {}
        self.remarks: list[Remark] = []
        self.current: Operation | None = None
        self.resharded: dict[tuple, SSAValue] = {}
        self.made: dict[tuple, dict[str, Attribute]] = {}  # ``properties_of``
        self._factors: dict[Operation, list[Factor] | None] = {}  # ``factors_of``

    # ------------------------------------------------------------------ diagnostics
    def fail(self, op: Operation | None, msg: str) -> PartitionError:
        from distir.dialects.verifier import located

        return PartitionError(located(op, f"partition: {msg}", self.spans))

    def name(self, v: SSAValue) -> str:
        """``%name``, or what computes the value and where."""
        if v.name_hint:
            return f"%{v.name_hint}"
        owner = v.owner
        if isinstance(owner, Operation):
            span = self.spans.get(owner)
            where = f" (line {span.get_location().line})" if span is not None else ""
            return f"the result of '{owner.name}'{where}"
        return "a block argument"

    def mesh_sizes(self, t: TensorType) -> tuple[int, ...]:
        s = self.sizes.get(t.mesh_name)
        if s is None:
            raise self.fail(self.current, f"mesh @{t.mesh_name} needs static axis sizes")
        return s

    # ------------------------------------------------------------------ structure
    def collect(self) -> bool:
        """Find the global ops and the boundaries; False when there is nothing global."""
        chain_ops: set[Operation] = set()
        for arg in self.block.args:
            if is_global(arg):
                raise self.fail(self.f, f"argument {self.name(arg)} has no placement (give it one)")
        for op in self.block.ops:
            if op in chain_ops:
                continue
            if isinstance(op, SOURCE_PRIMS) and is_placed(op.operands[0]):
                chain = self._follow_open(op, SOURCE_PRIMS, is_global)
                g = chain[-1].results[0]
                self.sources[g] = (op.operands[0], chain)
                # partial sums keep the reduction their source chain completes them by
                kinds = {r.option("axis"): r.option("op") for r in chain if isinstance(r, dist.ReduceOp)}
                if kinds:
                    self.kinds[op.operands[0]] = kinds
                chain_ops.update(chain)
                continue
            if isinstance(op, SINK_PRIMS) and is_open(op.operands[0]):
                chain = self._follow_open(op, SINK_PRIMS, is_placed)
                if is_placed(chain[-1].results[0]):
                    self.sinks.append((op.operands[0], chain[-1].results[0], chain))
                    chain_ops.update(chain)
                    continue
                if is_global(op.operands[0]) and not any(isinstance(u.operation, dist.ToLocalOp) for c in chain for u in c.results[0].uses):
                    raise self.fail(op, f"{self.name(op.operands[0])} is placed only partly ('{op.name}' chain does not end placed)")
            if isinstance(op, UnrealizedConversionCastOp) and len(op.operands) == 1 and is_global(op.operands[0]) and is_placed(op.results[0]):
                self.sinks.append((op.operands[0], op.results[0], [op]))
                chain_ops.add(op)
                continue
            if any(is_open(v) for v in (*op.operands, *op.results)):
                if isinstance(op, func.ReturnOp):
                    continue
                if op.regions and not isinstance(op, dist.MapOp):
                    raise self.fail(op, f"'{op.name}' on unplaced values is not supported")
                bad = [v for v in (*op.operands, *op.results) if isinstance(v.type, TensorType) and not is_open(v)]
                if bad:
                    raise self.fail(op, f"'{op.name}' mixes placed and unplaced values")
                self.global_ops.append(op)
        return bool(self.global_ops or self.sources or self.sinks)

    def _follow_open(self, op: Operation, kinds: tuple, done) -> list[Operation]:
        """``op`` and the ops of ``kinds`` that follow it one by one (each the only user of
        the one before), up to a value that is ``done`` or where the chain ends."""
        chain = [op]
        while not done(chain[-1].results[0]):
            users = [u.operation for u in chain[-1].results[0].uses]
            if len(users) != 1 or not isinstance(users[0], kinds):
                break
            chain.append(users[0])
        return chain

    # ------------------------------------------------------------------ propagation
    def init_layouts(self) -> None:
        for g, (p, _) in self.sources.items():
            lay = lay_of(p.type, self.kinds.get(p))  # type: ignore[arg-type]
            for a, q in enumerate(g.type.get_placements()):  # type: ignore[attr-defined]
                if not isinstance(q, (Unplaced, Sliced)):
                    lay.pending.pop(a, None)
                    lay.pinned[a] = q
            self.lay[g] = lay
        for op in self.global_ops:
            for v in (*op.operands, *op.results):
                if isinstance(v.type, TensorType) and v not in self.lay and is_open(v):
                    self.lay[v] = lay_of_open(v.type)
            if isinstance(op, dist.ReduceOp) and op.results[0] in self.lay:
                # a manual axis freed by a sum: partial sums the uses reduce
                self.lay[op.results[0]].pending[op.option("axis")] = op.option("op")  # type: ignore[attr-defined]

    def propagate(self) -> None:
        users: dict[SSAValue, list[object]] = {}
        units: list[object] = list(self.global_ops) + [s for s in range(len(self.sinks))]
        for u in units:
            for v in self._values(u):
                users.setdefault(v, []).append(u)
        queue = deque(units)
        queued = set(range(len(units)))
        index = {id(u): i for i, u in enumerate(units)}
        while queue:
            u = queue.popleft()
            queued.discard(index[id(u)])
            for v in self._visit(u):
                for w in users.get(v, ()):
                    if index[id(w)] not in queued:
                        queued.add(index[id(w)])
                        queue.append(w)

    def _values(self, u: object) -> list[SSAValue]:
        if isinstance(u, int):
            return [self.sinks[u][0]]
        assert isinstance(u, Operation)
        return [v for v in (*u.operands, *u.results) if v in self.lay]

    def _visit(self, u: object) -> list[SSAValue]:
        """Propagate through one op (or sink); the values whose layout changed."""
        changed: list[SSAValue] = []
        if isinstance(u, int):
            g, placed, _ = self.sinks[u]
            target = lay_of(placed.type)  # type: ignore[arg-type]
            lay = self.lay.get(g)
            if lay is None:
                return changed
            for d, axes in enumerate(target.dims):
                if axes and self._assign(g, d, axes):
                    changed.append(g)
            return changed
        op = u
        assert isinstance(op, Operation)
        if moves_only(op):
            changed += self._pass_pending(op)
        fs = factors(op)
        if not fs:
            return changed
        taken = self.op_axes.setdefault(op, {})
        for i, f in enumerate(fs):
            axes = self._factor_axes(f, taken, i)
            if not axes or (isinstance(op, dist.ReshapeOp) and not self._divided(f, axes)):
                continue
            for a in axes:
                taken[a] = i
            if f.reduce is not None:
                for r in op.results:
                    lay = self.lay.get(r)
                    if lay is None:
                        continue
                    if not (set(axes) & lay.used()):
                        for a in axes:
                            lay.pending[a] = f.reduce
                        changed.append(r)
            for v, d in f.dims:
                if v in self.lay and self._assign(v, d, axes):
                    changed.append(v)
        return changed

    def _pass_pending(self, op: Operation) -> list[SSAValue]:
        """Partial sums flow through ops that only move elements (a sum of transposed
        parts is the transpose of the sum; a concat of parts partial over an axis, the
        parts of a scan's stacked gradients, is partial over it), so that the reduction
        happens once, later, next to the computation that needs it (where CoCoNet's
        fusions apply). An axis passes when every operand is partial (sum) over it."""
        r = op.results[0]
        lxs, lr = [self.lay.get(x) for x in op.operands], self.lay.get(r)
        if lr is None or any(lx is None for lx in lxs):
            return []
        common = set.intersection(*({a for a, k in lx.pending.items() if k == "sum"} for lx in lxs))  # type: ignore[union-attr]
        new = {a: "sum" for a in common if a not in lr.used()}
        if not new:
            return []
        lr.pending.update(new)
        return [r]

    def _factor_axes(self, f: Factor, taken: dict[int, int], i: int) -> tuple[int, ...]:
        for v, d in f.dims:
            lay = self.lay.get(v)
            if lay is None or not lay.dims[d]:
                continue
            axes = lay.dims[d]
            if all(taken.get(a, i) == i for a in axes):
                return axes
        return ()

    def _divided(self, f: Factor, axes: tuple[int, ...]) -> bool:
        """Whether ``axes`` divide every dim of the factor: a reshape keeps a dim sliced
        only so (uneven blocks of a dim merged or split hold other elements on each side:
        ``ReshapeOp.blocks_error``; 8 heads of a 64-wide projection over 16 ranks), else
        its operand is gathered first."""
        for v, d in f.dims:
            t = v.type
            sizes = self.sizes.get(t.mesh_name) if isinstance(t, TensorType) else None
            if sizes is not None and None not in sizes:
                if t.get_shape()[d] % math.prod(sizes[a] for a in axes):  # type: ignore[union-attr,operator]
                    return False
        return True

    def _assign(self, v: SSAValue, d: int, axes: tuple[int, ...]) -> bool:
        lay = self.lay[v]
        if lay.dims[d]:
            return False
        if set(axes) & lay.used():
            return False
        lay.dims[d] = tuple(axes)  # a dim the axes do not divide: blocks of ceil(s/n), as Shardy pads
        return True

    # ------------------------------------------------------------------ materialisation
    def materialize(self) -> None:
        self.sources_of: dict[SSAValue, list[SSAValue]] = {}
        for g, (p, chain) in self.sources.items():
            self.real[g] = p
            self.sources_of.setdefault(p, []).append(g)
        sinks_by_first = {chain[0]: (g, q) for g, q, chain in self.sinks}
        global_set = set(self.global_ops)
        old: list[Operation] = []
        for op in list(self.block.ops):
            self.current = op
            if op in sinks_by_first:
                g, q = sinks_by_first[op]
                x = self.real_of(g, op)
                y = self.reshard(x, q.type.get_placements(), _user_name(q))  # type: ignore[attr-defined]
                q.replace_all_uses_with(y)
                for g2 in self.sources_of.get(q, ()):
                    self.real[g2] = y
                continue
            if isinstance(op, func.ReturnOp):
                new_operands = []
                for v in op.operands:
                    if is_global(v):
                        x = self.real_of(v, op)
                        t = x.type
                        assert isinstance(t, TensorType)
                        ps = [REPLICATED if isinstance(p, Local) else p for p in t.get_placements()]
                        new_operands.append(self.reshard(x, ps, "the function's result"))
                    else:
                        new_operands.append(v)
                op.operands = new_operands
                continue
            if op not in global_set:
                continue
            self.place_op(op)
        for g, q, chain in self.sinks:
            old.extend(chain)
        for g, (p, chain) in self.sources.items():
            old.extend(chain)
        old.extend(self.global_ops)
        order = {op: i for i, op in enumerate(self.block.ops)}
        for op in sorted(set(old), key=lambda o: order.get(o, -1), reverse=True):
            for r in op.results:
                if r.uses:
                    raise self.fail(op, f"{self.name(r)} is still used after partitioning (internal)")
            op.detach()
            op.erase()
        ret = self.block.last_op
        if isinstance(ret, func.ReturnOp):
            self.f.function_type = FunctionType.from_lists([a.type for a in self.block.args], [v.type for v in ret.operands])

    def real_of(self, g: SSAValue, user: Operation) -> SSAValue:
        x = self.real.get(g)
        if x is None:
            raise self.fail(user, f"{self.name(g)} is used before it is placed (internal)")
        return x

    def target(self, g: SSAValue) -> list[Placement]:
        t = g.type
        assert isinstance(t, TensorType)
        return self.lay[g].placements(len(t.get_placements()))

    def place_op(self, op: Operation) -> None:
        """Emit ``op`` on placed operands, before the old op. A boundary primitive on open
        values (pinning or freeing a manual axis) emits nothing itself: its result is its
        operand resharded to the result's layout."""
        if isinstance(op, PRIMS):
            r = op.results[0]
            self.real[r] = self.reshard(self.real_of(op.operands[0], op), self.target(r), f"'{op.name}'")
            return
        new = self.build(op, False)
        if new is None:
            new = self.build(op, True)
        if new is None:
            raise self.fail(op, f"no placement of the operands of '{op.name}' gives a valid op")
        self.block.insert_op_before(new, op)
        if op in self.spans:
            self.spans[new] = self.spans[op]
        fs = None
        for r, n in zip(op.results, new.results):
            if r.name_hint:
                n.name_hint = r.name_hint
            self.real[r] = n
            if isinstance(n.type, TensorType):
                if fs is None:
                    fs = self.factors_of(op) or []  # once per op (a map has as many results as it likes)
                kinds = {}
                for a, p in enumerate(n.type.get_placements()):
                    if isinstance(p, Local):
                        kinds[a] = self._reduce_kind(op, fs, a)
                self.kinds[n] = kinds

    def _reduce_kind(self, op: Operation, fs: list[Factor], axis: int) -> str:
        taken = self.op_axes.get(op, {})
        i = taken.get(axis)
        if i is not None and i < len(fs) and fs[i].reduce is not None:
            return fs[i].reduce
        for f in fs:
            if f.reduce is not None:
                return f.reduce
        return "sum"

    def operand_targets(self, op: Operation, replicate: bool) -> list[list[Placement] | None]:
        """What each operand must be placed as (None: not a tensor)."""
        out: list[list[Placement] | None] = []
        for x in op.operands:
            t = x.type
            if not isinstance(t, TensorType):
                out.append(None)
                continue
            base: list[Placement] = [REPLICATED] * len(t.get_placements())
            lay = self.lay.get(x)
            if lay is not None:  # what the program itself places (manual axes) stays
                own = lay.placements(len(base))
                for a, p in enumerate(t.get_placements()):
                    if not isinstance(p, Unplaced):
                        base[a] = own[a]
            out.append(base)
        if replicate:
            return out
        if isinstance(op, dist.MapOp):
            rt_ = op.outputs[0].type
            assert isinstance(rt_, TensorType)
            want = rt_.with_(placements=self.target(op.outputs[0]))
            return [dist.operand_placements(want, x.type.get_shape()) if isinstance(x.type, TensorType) else None for x in op.operands]
        fs = self.factors_of(op)
        if moves_only(op) and op.results[0] in self.lay:
            for a in self.lay[op.results[0]].pending:
                for tgt in out:
                    if tgt is not None:
                        tgt[a] = LOCAL
        if not fs:
            return out
        taken = self.op_axes.get(op, {})
        for i, f in enumerate(fs):
            axes = self._materialized_axes(op, f, i, taken)
            if axes and isinstance(op, dist.ReshapeOp) and not self._divided(f, axes):
                axes = ()  # the operand gathered, the result sliced after (no communication)
            for v, d in f.dims:
                for k, x in enumerate(op.operands):
                    if x is v and out[k] is not None:
                        for n, a in enumerate(axes):
                            out[k][a] = sliced(d, n) if len(axes) > 1 else sliced(d)  # type: ignore[index]
        return out

    def factors_of(self, op: Operation) -> list[Factor] | None:
        """``factors(op)`` of a global op, once (placing it asks twice; the op's operands
        and results stay while it is placed)."""
        if op not in self._factors:
            self._factors[op] = factors(op)
        return self._factors[op]

    def _materialized_axes(self, op: Operation, f: Factor, i: int, taken: dict[int, int]) -> tuple[int, ...]:
        """The axes of a factor as decided: the result's dim for a factor that reaches a
        result, the axes the results are partial over for a reduction factor."""
        if f.reduce is None:
            for v, d in f.dims:
                if v in op.results and v in self.lay:
                    return self.lay[v].dims[d]
            return tuple(a for a, j in sorted(taken.items()) if j == i)
        axes = tuple(a for a, j in sorted(taken.items()) if j == i)
        res = [r for r in op.results if r in self.lay]
        return tuple(a for a in axes if all(a in self.lay[r].pending for r in res))

    def build(self, op: Operation, replicate: bool) -> Operation | None:
        """``op`` on its operands resharded as its factors need (or all replicated);
        None when the op's rule rejects those placements (nothing is emitted then)."""
        targets = self.operand_targets(op, replicate)
        in_types = [x.type.with_(placements=tgt) if tgt is not None else x.type for x, tgt in zip(op.operands, targets)]  # type: ignore[attr-defined]
        try:
            types = result_types(op, in_types, None if replicate else self.target, self)
        except (RuleError, VerifyException, ValueError):
            return None
        operands = []
        for x, tgt in zip(op.operands, targets):
            operands.append(x if tgt is None else self.reshard(self.real_of(x, op), tgt, f"'{op.name}'"))
        cls = type(op)
        # the global op is erased once every op is placed: its regions (a map's body)
        # move to the placed op instead of being copied
        regions = [op.detach_region(r) for r in list(op.regions)]
        if isinstance(op, dist.DistOp):
            return cls.make_with(operands, types, regions, dict(op.attributes), self.properties_of(op))
        raise self.fail(op, f"cannot place '{op.name}'")

    def properties_of(self, op: dist.DistOp) -> dict[str, Attribute]:
        """The properties ``make`` gives a copy of ``op`` made from its options: read once
        per class and properties (a model's layers repeat their ops), each op its own
        dict."""
        try:
            key = (type(op), tuple(op.properties.items()))
            got = self.made.get(key)
        except TypeError:  # an attribute that does not hash
            return type(op).properties_of(op.options())
        if got is None:
            got = self.made[key] = type(op).properties_of(op.options())
        return dict(got)

    # ------------------------------------------------------------------ resharding
    def emit(self, op: Operation, x: SSAValue, what: str, why: str) -> SSAValue:
        assert self.current is not None
        self.block.insert_op_before(op, self.current)
        if self.current in self.spans:
            self.spans[op] = self.spans[self.current]
        if isinstance(op, (coll.CollectiveOp, dist.TakeSliceOp)):
            t = x.type
            assert isinstance(t, TensorType)
            self.remarks.append(Remark(self.current, f"{what} of {self.name(x)} ({t.format_shape()}x{t.element_type}): {why}{self.padding_note(op, t)}"))
        y = op.results[0]
        if y.name_hint is None:
            y.name_hint = op.name.rsplit(".", 1)[-1]  # %all_reduce: a name a pipeline's targets can give
        if x in self.kinds:
            self.kinds[y] = {a: k for a, k in self.kinds[x].items() if isinstance(y.type.get_placements()[a], Local)}  # type: ignore[attr-defined]
        return y

    def padding_note(self, op: Operation, t: TensorType) -> str:
        """``; moves N padding bytes per rank (...)`` for a collective over a dim the
        ranks do not divide (NCCL's equal counts: blocks of the largest block's size)."""
        if not isinstance(op, coll.CollectiveOp):
            return ""
        sizes = self.mesh_sizes(t)
        r = op.result.type
        assert isinstance(r, TensorType)
        pad = type(op).padding(t, r, op.options(), sizes)
        if not pad:
            return ""
        item = dist.element_bytes(t.element_type)
        dims = sorted({*layout.uneven_dims(t.get_shape(), t.get_placements(), sizes), *layout.uneven_dims(r.get_shape(), r.get_placements(), sizes)})
        blocks = "; ".join(layout.describe_uneven(r.get_shape() if d in layout.sliced_dims(r.get_placements()) else t.get_shape(), r.get_placements() if d in layout.sliced_dims(r.get_placements()) else t.get_placements(), sizes, d) for d in dims)
        return f"; moves {pad * item} padding bytes per rank ({blocks})"

    def reshard(self, x: SSAValue, target: Sequence[Placement], use: str) -> SSAValue:
        """``x`` placed as ``target`` (DTensor's transition table, per axis)."""
        t = x.type
        assert isinstance(t, TensorType)
        target = list(target)
        if layout.same_layout(t.get_placements(), target):
            return x
        key = (x, layout.canonical(target))
        if key in self.resharded:
            return self.resharded[key]
        y = self._reshard(x, target, use)
        self.resharded[key] = y
        return y

    def _reshard(self, x: SSAValue, target: list[Placement], use: str) -> SSAValue:
        t = x.type
        assert isinstance(t, TensorType)
        fmt = layout.format_placements
        why = f"{fmt(t.get_placements())} -> {fmt(target)} for {use}"
        try:
            steps = reshard_steps(t, target, self.kinds.get(x, {}), self.axis_names(t))
        except ReshardError as e:
            raise self.fail(self.current, f"cannot place {self.name(x)} as {e} for {use}") from None
        for st in steps:
            x = self.emit(st.cls.make([x], [st.result], **st.options), x, st.what, why)
        return x

    def axis_names(self, t: TensorType) -> list[str]:
        names = self.axis_names_of.get(t.mesh_name)
        return list(names) if names else [f"axis {a}" for a in range(len(t.get_placements()))]


class ReshardError(Exception):
    """No sequence of the transition table turns a value into the target (the message
    names the target and why)."""


@dataclass(frozen=True)
class ReshardStep:
    """One op of a resharding: ``cls.make([x], [result], **options)``; ``what`` says it
    in words (a remark)."""

    cls: type
    options: dict
    result: TensorType
    what: str

    @property
    def kind(self) -> str:
        """``all_gather``, ``reduce_scatter``, ``take_slice``, ... (the op's name without
        its dialect)."""
        return self.cls.name.split(".", 1)[1]

    @property
    def axes(self) -> list[int]:
        return list(self.options.get("axes", [self.options.get("axis", 0)]))


def reshard_steps(t: TensorType, target: Sequence[Placement], kinds: dict[int, str] | None = None, axis_names: Sequence[str] | None = None) -> list[ReshardStep]:
    """The ops that turn a value of type ``t`` into one placed as ``target``, per axis
    (the transition table of the module doc; planned here, emitted by the partitioner,
    costed by the planner): broadcast ``at<r>`` holders; gather (or all_to_all) what the
    target does not slice the same way, innermost first; reduce partial sums
    (``kinds``: the reduction of each ``local`` axis, default sum) with a reduce_scatter
    where the target slices next, else an all_reduce; slice what the target slices,
    outermost first (``take_slice``); last ``at<r>`` targets. ``ReshardError`` when no
    sequence does it (e.g. a target that wants partial sums of a whole value)."""
    target = list(target)
    kinds = kinds or {}
    names = list(axis_names) if axis_names else [f"axis {a}" for a in range(len(target))]
    fmt = layout.format_placements
    steps: list[ReshardStep] = []

    def step(cls, what: str, **options) -> None:
        nonlocal t
        result = cls.infer([t], None, {**{kw.keyword: kw.default for kw in cls.KEYWORDS if kw.default is not None}, **options})[0]
        steps.append(ReshardStep(cls, options, result, what))
        t = result

    # at<r> holders first: broadcast to every rank of the axis
    for a, p in enumerate(t.get_placements()):
        if isinstance(p, At) and not (isinstance(target[a], At) and target[a] == p):
            step(coll.BroadcastOp, f"coll.broadcast over {names[a]}", axes=[a])
    # 1. gather (or all_to_all) what the target does not slice the same way: an
    #    all_to_all when an axis can move to the dim the target slices by it, else the
    #    gathers of axes the target does not want elsewhere first (they may open one)
    while True:
        cur = t.get_placements()
        pending = []
        for d in sorted(layout.sliced_dims(cur)):
            have, want = layout.slicing_axes(cur, d), layout.slicing_axes(target, d)
            k = 0
            while k < len(have) and k < len(want) and have[k] == want[k]:
                k += 1
            if k < len(have):
                pending.append((d, have[-1]))
        if not pending:
            break

        def movable(st: tuple[int, int]) -> int | None:
            d, a = st
            tp = target[a]
            if isinstance(tp, Sliced) and tp.dim.data != d:
                e = tp.dim.data
                before = layout.slicing_axes(target, e)
                if layout.slicing_axes(cur, e) == before[: before.index(a)]:
                    return e
            return None

        moves = [(st, movable(st)) for st in pending if movable(st) is not None]
        if moves:
            (d, a), e = moves[0]
            step(coll.AllToAllOp, f"coll.all_to_all over {names[a]} (dim {d} -> {e})", dim=e, axes=[a])
            continue
        wanted_elsewhere = lambda st: isinstance(target[st[1]], Sliced) and target[st[1]].dim.data != st[0]  # noqa: E731
        d, a = next((st for st in pending if not wanted_elsewhere(st)), pending[0])
        step(coll.AllGatherOp, f"coll.all_gather over {names[a]} (dim {d})", axes=[a])
    # 2. partial results: reduce_scatter where the target slices next, else all_reduce
    to_reduce: dict[str, list[int]] = {}
    for a, p in enumerate(t.get_placements()):
        if not isinstance(p, Local) or isinstance(target[a], Local):
            continue
        kind = kinds.get(a, "sum")
        tp = target[a]
        if isinstance(tp, Sliced):
            e = tp.dim.data
            want = layout.slicing_axes(target, e)
            if layout.slicing_axes(t.get_placements(), e) == want[: want.index(a)]:
                step(coll.ReduceScatterOp, f"coll.reduce_scatter {kind} over {names[a]} (dim {e})", op=kind, dim=e, axes=[a])
                continue
        to_reduce.setdefault(kind, []).append(a)
    for kind, axes in to_reduce.items():
        step(coll.AllReduceOp, f"coll.all_reduce {kind} over {', '.join(names[a] for a in axes)}", op=kind, axes=axes)
    # 3. slice what the target slices, outermost first
    for d in sorted(layout.sliced_dims(target)):
        for a in layout.slicing_axes(target, d):
            cur = t.get_placements()
            if isinstance(cur[a], Sliced) and cur[a].dim.data == d:
                continue
            if not isinstance(cur[a], Replicated):
                raise ReshardError(f"{fmt(target)} ({cur[a]} on axis {names[a]})")
            step(dist.TakeSliceOp, f"dist.take_slice over {names[a]} (dim {d})", dim=d, axis=a)
    # 4. what is left: at<r> targets, partial-sum targets
    for a, (p, q) in enumerate(zip(t.get_placements(), target)):
        if isinstance(q, At) and isinstance(p, Replicated):
            step(dist.DropOp, "dist.drop", axis=a)
            step(dist.StoreOp, "dist.store", rank=q.rank.data, axis=a)
        elif isinstance(q, Local) and not isinstance(p, Local):
            raise ReshardError(f"{fmt(target)}: it is {p} on axis {names[a]}, and cannot become partial sums (unreduced)")
    if not layout.same_layout(t.get_placements(), target):
        raise ReshardError(f"{fmt(target)} (it is {fmt(t.get_placements())})")
    return steps


def _user_name(q: SSAValue) -> str:
    """What a sink places a value for: a result, a constraint, an op."""
    users = [u.operation for u in q.uses]
    if any(isinstance(u, func.ReturnOp) for u in users):
        return "the function's result"
    if any(isinstance(u, SOURCE_PRIMS) for u in users):
        return "a sharding constraint"
    return f"'{users[0].name}'" if users else "a use"


def result_types(op: Operation, in_types: list[Attribute], target, part: Partitioner) -> list[Attribute]:
    """The result types of ``op`` on operands of ``in_types``: the op's rule (``infer``),
    or for a ``dist.map`` (``iota``, ``scatter_add``) the target placements (its operands
    were placed to match; the op's verifier checks the rule)."""
    if isinstance(op, (dist.MapOp, dist.IotaOp, dist.ScatterAddOp)):
        rt_ = op.results[0].type
        assert isinstance(rt_, TensorType)
        ps = target(op.results[0]) if target is not None else [REPLICATED] * len(rt_.get_placements())
        types = [r.type.with_(placements=ps) for r in op.results]  # type: ignore[attr-defined]
        if isinstance(op, dist.ScatterAddOp):
            dist.ScatterAddOp.check(in_types[0], in_types[1], types[0])
        return types
    if isinstance(op, (dist.ToLocalOp, dist.FromLocalOp)):
        rt_ = op.results[0].type
        assert isinstance(rt_, TensorType)
        if target is not None:
            return [rt_.with_(placements=target(op.results[0]))]
        return [rt_.with_(placements=[REPLICATED if isinstance(p, Unplaced) else p for p in rt_.get_placements()])]
    if isinstance(op, dist.CastOp):
        t = in_types[0]
        assert isinstance(t, TensorType)
        return [t.with_(element_type=op.result.type.element_type)]  # type: ignore[attr-defined]
    cls = type(op)
    if not isinstance(op, dist.DistOp):
        raise ValueError(f"cannot place '{op.name}'")
    if hasattr(cls, "result_types_for"):
        return cls.result_types_for(op, in_types)  # type: ignore[attr-defined]
    t0 = next((t for t in in_types if isinstance(t, TensorType)), None)
    sizes = part.mesh_sizes(t0) if t0 is not None else None
    return cls.infer(in_types, sizes, op.options())


def mesh_table(module: ModuleOp) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[str, ...]]]:
    sizes: dict[str, tuple[int, ...]] = {}
    names: dict[str, tuple[str, ...]] = {}
    for op in module.ops:
        if isinstance(op, dist.MeshOp):
            s = op.sizes()
            if all(x is not None for x in s):
                sizes[op.mesh_name] = tuple(s)  # type: ignore[arg-type]
            names[op.mesh_name] = op.axis_names or tuple(f"axis {a}" for a in range(op.rank))
    return sizes, names


def partition_module(module: ModuleOp, spans: dict[Operation, Span] | None = None) -> list[Remark]:
    """Partition every function of ``module`` in place; the remarks, one per inserted
    collective."""
    if spans is None:
        from distir.dialects.frontend import source_spans

        spans = dict(source_spans(module))
    sizes, names = mesh_table(module)
    remarks: list[Remark] = []
    for f in [op for op in module.ops if isinstance(op, func.FuncOp)]:
        p = Partitioner(f, sizes, spans, names)
        if not p.collect():
            continue
        p.init_layouts()
        p.propagate()
        p.materialize()
        remarks.extend(p.remarks)
    return remarks


def partition_decided(
    module: ModuleOp,
    f: func.FuncOp,
    layouts: dict[SSAValue, Lay],
    op_axes: dict[Operation, dict[int, int]],
    spans: dict[Operation, Span] | None = None,
) -> list[Remark]:
    """Partition ``f`` (a function of ``module`` in the form of the module doc) with the
    layout of its global values and the factor of each mesh axis of its ops decided by
    the caller, the planner (``planner/``), instead of propagated: rules (1), (3) and
    (4) only. ``layouts`` maps global values (op results) to their ``Lay``; ``op_axes``
    maps each global op to ``{mesh axis: index in factors(op)}``. The remarks, one per
    inserted collective."""
    sizes, names = mesh_table(module)
    p = Partitioner(f, sizes, spans if spans is not None else {}, names)
    if not p.collect():
        return []
    p.init_layouts()
    p.lay.update(layouts)
    p.op_axes.update(op_axes)
    p.materialize()
    return p.remarks


def format_remark(r: Remark, spans: dict[Operation, Span]) -> str:

    msg = f"remark: partition: inserted {r.text}"
    span = spans.get(r.op) if r.op is not None else None
    if span is None:
        return msg
    return f"{span.get_location()}: {msg}"


@dataclass(frozen=True)
class PartitionPass(ModulePass):
    """Place every unplaced value and insert the collectives (see the module doc)."""

    name = "partition"

    remarks: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        import sys

        from distir.dialects.frontend import source_spans

        spans = dict(source_spans(op))
        found = partition_module(op, spans)
        if self.remarks:
            for r in found:
                print(format_remark(r, spans), file=sys.stderr)
