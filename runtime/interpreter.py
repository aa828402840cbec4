"""The reference interpreter: the executable meaning of ``dist``/``coll`` programs.

It simulates N ranks with numpy. Every value is held as per-rank buffers exactly as its
placements say (``runtime/values.py``): a ``sliced<0>`` value on 4 ranks is 4 blocks,
an ``at<1>`` value is held by rank 1 only, a ``local`` value is one full-shape buffer per
rank. Each op kind has one handler (``HANDLERS``, keyed by op class) that computes the
result buffers from the operand buffers:

* functional primitives implement their definitions over the ranks of their axis;
  a collective runs its descriptor's ``exchange`` (``dialects/collectives/``: what each
  member of a group gets from the members' buffers) on every group of ranks of its
  axes: over several ``axes`` a group is ordered row-major over the axes as listed, new
  slicings nest inside existing ones, and with ``at<r>`` on another axis only the ranks
  holding the value take part. ``avg`` is the sum divided by the group size.
  Reductions run in group order, in f32 for f16/bf16, rounded once.
* local ops run on each rank's buffers: ``dist.map`` evaluates its body over whole arrays
  (``runtime/arith.py``), ``dist.matmul`` multiplies the local blocks (both sliced on the
  contracted dim -> local partial sums), ``dist.reduce_tensor`` reduces the local block
  (a sliced reduced dim -> local partials), ``dist.embedding_bag`` with a row-sliced
  table adds only the rows a rank holds, ``dist.dropout`` draws from the counter-based
  generator of ``dialects/rng.py`` at logical indices, ``dist.remesh`` keeps every rank's
  buffer and changes only the coordinates.
* fused collectives run ``FIRST``, their region, then ``FINISH`` on the results flagged
  in ``gather``; ``coll.overlap`` runs its chain.

Ranks holding the same buffers (replicas) share numpy arrays, and a local op computes
once per distinct set of operand buffers.

Python API::

    from distir.runtime import interpret, run_function
    outs = interpret(module, "adam", {"g": g, ...}, ranks=4)      # logical outputs
    ex = run_function(module, "adam", inputs, ranks=4)
    ex.outputs                 # the same logical outputs (out.npz convention)
    ex.results                 # the result values, per-rank buffers (DistValue)
    ex.allocated_bytes["m1"]   # bytes of %m1's buffer on each rank, e.g. [4096, 4096, ...]
    ex.total_bytes()           # per rank, summed over all SSA values

``allocated_bytes`` maps every tensor SSA value the run creates (arguments included,
named by their SSA name without ``%``; unnamed values ``%<k>``) to the bytes of the
buffer each rank holds for it: the local shape times the element size where the rank
holds the value, 0 where it does not (``at<r>`` elsewhere, ``unplaced``). Values that
reuse an existing buffer allocate nothing: ``dist.remesh`` results, results of regions
that are the region's own values, and function results marked ``{dist.inplace = N}``
(written into argument N's buffer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import SymbolTable

from distir.dialects import coll, dist, layout, rng
from distir.dialects.collectives.base import Group, concat
from distir.dialects.diagnostics import ExecutionError, ExecutionRejected, InputRejected  # noqa: F401 (ExecutionError: the runtime's name)
from distir.dialects.dist import RuleError, TensorType
from distir.dialects.placements import At, Replicated, Sliced
from distir.runtime import npz
from distir.runtime.arith import SCALAR_OPS, UnsupportedOp, eval_body, eval_op
from distir.runtime.values import (
    DistValue,
    UnsupportedType,
    compute_dtype,
    frozen,
    is_float,
    local_nbytes,
    numpy_dtype,
    rank_coords,
    reduce_arrays,
    stores,
    sub_block,
)

Value = DistValue | np.ndarray
"""A run-time value: a distributed tensor, or a builtin scalar as a 0-d array."""


def _fail(op: Operation, msg: str) -> ExecutionRejected:
    return ExecutionRejected(f"'{op.name}' op {msg}")


# ======================================================================================
# Results of a run
# ======================================================================================


@dataclass
class Execution:
    """One run of a function: its logical ``outputs`` (out.npz convention), its result
    ``results`` as per-rank values, and ``allocated_bytes`` (see the module doc)."""

    outputs: list[np.ndarray]
    results: list[Value]
    allocated_bytes: dict[str, list[int]]
    ranks: int
    inputs: dict[str, np.ndarray] = field(default_factory=dict)

    def total_bytes(self) -> list[int]:
        """Bytes allocated on each rank, summed over all SSA values."""
        return [sum(v[r] for v in self.allocated_bytes.values()) for r in range(self.ranks)]


# ======================================================================================
# The interpreter
# ======================================================================================

Handler = Callable[["Interpreter", Any, list[Value]], list[Value]]
HANDLERS: dict[type[Operation], Handler] = {}


def handles(*classes: type[Operation]):
    """Register the handler of one or more op classes."""

    def deco(fn: Handler) -> Handler:
        for c in classes:
            HANDLERS[c] = fn
        return fn

    return deco


class Interpreter:
    """Runs the functions of one module on ``ranks`` simulated ranks."""

    def __init__(self, module: ModuleOp, ranks: int, grids: Mapping[str, layout.MeshGrid] | None = None):
        self.module = module
        self.ranks = ranks
        self.grids = dict(grids) if grids is not None else npz.resolve_grids(module, ranks)
        self.env: dict[SSAValue, Value] = {}
        self.allocated: dict[str, list[int]] = {}
        self._names: dict[SSAValue, str] = {}
        self._taken: set[str] = set()
        self._counted: set[int] = set()
        self._keep: list[Value] = []

    # ---------------------------------------------------------------- values
    def grid(self, t: TensorType) -> layout.MeshGrid:
        return npz.grid_of(self.grids, t)

    def value(self, t: TensorType, buffers: dict[int, np.ndarray]) -> DistValue:
        return DistValue(t, self.grid(t), buffers)

    def _name(self, v: SSAValue) -> str:
        name = self._names.get(v)
        if name is None:
            base = v.name_hint or f"%{len(self._names)}"
            name, k = base, 2
            while name in self._taken:
                name, k = f"{base}#{k}", k + 1
            self._names[v] = name
            self._taken.add(name)
        return name

    def bind(self, ssa: SSAValue, value: Value, alias: bool = False) -> None:
        """Bind an SSA value and record the bytes its buffers take on each rank."""
        self.env[ssa] = value
        if not isinstance(value, DistValue):
            return
        sizes = [0] * self.ranks
        if not alias and id(value) not in self._counted:
            self._counted.add(id(value))
            self._keep.append(value)  # keeps ids unique for the whole run
            coords = rank_coords(value.grid)
            for r in value.buffers:
                if value.holds(r):
                    sizes[r] = local_nbytes(value.type, value.grid.sizes, coords[r])
        self.allocated[self._name(ssa)] = sizes

    # ---------------------------------------------------------------- execution
    def call(self, f: func.FuncOp, args: Sequence[Value]) -> list[Value]:
        return self.run_block(f.body.block, args)

    def run_block(self, block: Block, args: Sequence[Value]) -> list[Value]:
        """Run a block's ops on ``args``; returns the values its terminator passes on."""
        for a, v in zip(block.args, args, strict=True):
            self.bind(a, v)
        for op in block.ops:
            if isinstance(op, (func.ReturnOp, coll.YieldOp, dist.YieldOp)):
                return [self.env[v] for v in op.operands]
            self.run_op(op)
        return []

    def run_op(self, op: Operation) -> None:
        handler = HANDLERS.get(type(op))
        if handler is None:
            raise _fail(op, "is not supported by the interpreter")
        operands = [self.env[v] for v in op.operands]
        try:
            results = handler(self, op, operands)
        except (UnsupportedOp, UnsupportedType) as e:
            raise _fail(op, str(e)) from None
        for r, v in zip(op.results, results, strict=True):
            self.bind(r, v, alias=isinstance(op, (dist.RemeshOp, dist.ToLocalOp, dist.FromLocalOp)))

    # ---------------------------------------------------------------- helpers for handlers
    def local(self, types: Sequence[TensorType], inputs: Sequence[Value], fn: Callable[[list[np.ndarray], int], list[np.ndarray]], key: Callable[[int], Any] | None = None) -> list[DistValue]:
        """A communication-free op: ``fn(operand buffers of rank r, r)`` gives rank r's
        result buffers, for every rank filing the results; computed once per distinct
        operand buffers (and ``key(r)``)."""
        grid = self.grid(types[0])
        coords = rank_coords(grid)
        placements = types[0].get_placements()
        cache: dict[Any, list[np.ndarray]] = {}
        outs: list[dict[int, np.ndarray]] = [{} for _ in types]
        for r in range(grid.ranks):
            if not stores(placements, coords[r]):
                continue
            bufs = [v.buffers[r] if isinstance(v, DistValue) else v for v in inputs]
            k = (tuple(id(b) for b in bufs), key(r) if key else None)
            if k not in cache:
                cache[k] = [frozen(np.asarray(y)) for y in fn(bufs, r)]
            for out, y in zip(outs, cache[k]):
                out[r] = y
        return [self.value(t, o) for t, o in zip(types, outs)]

    def over_groups(self, x: DistValue, axes: Sequence[int], fn: Callable[[list[np.ndarray]], list[np.ndarray | None]]) -> dict[int, np.ndarray]:
        """A primitive: for each group of ranks differing only on ``axes`` whose members
        all hold ``x``, ``fn(member buffers)`` gives each member's result buffer (None:
        the member holds nothing)."""
        return self.exchange(x, axes, fn, every_member=True)  # type: ignore[arg-type]

    def exchange(
        self, x: DistValue, axes: Sequence[int], fn: Callable[[list[np.ndarray | None]], list[np.ndarray | None]], every_member: bool = False
    ) -> dict[int, np.ndarray]:
        """A collective: for each group of ranks differing only on ``axes`` (ordered
        row-major over ``axes`` as listed) of which some member holds ``x`` (every
        member, with ``every_member``), ``fn(member buffers, None where a member holds
        none)`` gives each member's result buffer (None: the member holds nothing)."""
        out: dict[int, np.ndarray] = {}
        cache: dict[tuple[int, ...], list[np.ndarray | None]] = {}
        for group in x.grid.groups(list(axes)):
            bufs = [x.buffers.get(r) for r in group]
            held = [b is not None for b in bufs]
            if not (all(held) if every_member else any(held)):
                continue
            k = tuple(id(b) for b in bufs)
            if k not in cache:
                cache[k] = [None if y is None else frozen(np.asarray(y)) for y in fn(bufs)]
            for r, y in zip(group, cache[k]):
                if y is not None:
                    out[r] = y
        return out


# ======================================================================================
# Functional primitives (one mesh axis each)
# ======================================================================================


def _group_size(x: DistValue, axes: Sequence[int]) -> int:
    return int(np.prod([x.grid.sizes[a] for a in axes], dtype=np.int64))


def _check_rank(op: Operation, x: DistValue, axes: Sequence[int], rank: int, what: str) -> None:
    n = _group_size(x, axes)
    if not 0 <= rank < n:
        raise _fail(op, f"{what} {rank} is out of range for a group of {n} ranks on this run")


def _joined_dim(x: DistValue, axes: Sequence[int]) -> int:
    p = x.placements[axes[0]]
    assert isinstance(p, Sliced)
    return p.dim.data


def _reduce(kind: str, dtype: np.dtype) -> Callable[[list[np.ndarray]], np.ndarray]:
    return lambda bufs: reduce_arrays(bufs, kind, dtype)


@handles(dist.ReduceOp)
def _dist_reduce(it: Interpreter, op: dist.ReduceOp, args: list[Value]) -> list[Value]:
    (x,) = args
    assert isinstance(x, DistValue)
    red = _reduce(op.option("op"), x.dtype)
    bufs = it.over_groups(x, [op.option("axis")], lambda b: [red(b)] * len(b))
    return [it.value(op.result.type, bufs)]


@handles(dist.SliceOp, dist.TakeSliceOp)
def _dist_slice(it: Interpreter, op: dist.SliceOp | dist.TakeSliceOp, args: list[Value]) -> list[Value]:
    # The new slicing nests inside any existing one: within this rank's buffer it is
    # block coords[axis] of sizes[axis].
    (x,) = args
    assert isinstance(x, DistValue)
    axis, dim = op.option("axis"), op.option("dim")
    n = x.grid.sizes[axis]
    coords = rank_coords(x.grid)
    bufs = {r: sub_block(b, dim, coords[r][axis], n) for r, b in x.buffers.items()}
    return [it.value(op.result.type, bufs)]


@handles(dist.JoinOp)
def _dist_join(it: Interpreter, op: dist.JoinOp, args: list[Value]) -> list[Value]:
    (x,) = args
    assert isinstance(x, DistValue)
    axis = op.option("axis")
    dim = _joined_dim(x, [axis])
    bufs = it.over_groups(x, [axis], lambda b: [concat(b, dim)] * len(b))
    return [it.value(op.result.type, bufs)]


@handles(dist.ReplOp, dist.DropOp)
def _dist_same_buffers(it: Interpreter, op: dist.ReplOp | dist.DropOp, args: list[Value]) -> list[Value]:
    # repl: every rank of the axis gets (a copy of) the logical value it already files;
    # drop: the replicas are forgotten, the logical value stays.
    (x,) = args
    assert isinstance(x, DistValue)
    return [it.value(op.result.type, dict(x.buffers))]


@handles(dist.StoreOp)
def _dist_store(it: Interpreter, op: dist.StoreOp, args: list[Value]) -> list[Value]:
    (x,) = args
    assert isinstance(x, DistValue)
    axis, rank = op.option("axis"), op.option("rank")
    _check_rank(op, x, [axis], rank, "rank")
    coords = rank_coords(x.grid)
    return [it.value(op.result.type, {r: b for r, b in x.buffers.items() if coords[r][axis] == rank})]


@handles(dist.LoadOp)
def _dist_load(it: Interpreter, op: dist.LoadOp, args: list[Value]) -> list[Value]:
    (x,) = args
    assert isinstance(x, DistValue)
    axis = op.option("axis")
    p = x.placements[axis]
    assert isinstance(p, At)
    coords = rank_coords(x.grid)
    out = {}
    for group in x.grid.groups([axis]):
        holder = [r for r in group if r in x.buffers]
        if holder:
            assert coords[holder[0]][axis] == p.rank.data
            for r in group:
                out[r] = x.buffers[holder[0]]
    return [it.value(op.result.type, out)]


# ======================================================================================
# Collectives (several axes; also used by the fused collectives): each one's semantics
# on a group is its descriptor's ``exchange`` (``dialects/collectives/``)
# ======================================================================================


def run_collective(it: Interpreter, cls: type[coll.CollectiveOp], op: Operation, x: DistValue, t: TensorType, opts: dict[str, Any]) -> DistValue:
    """Collective ``cls`` with options ``opts`` on ``x``: its ``exchange`` on every group of
    ranks differing only on ``opts["axes"]`` whose members hold ``x``."""
    axes = list(opts["axes"])
    dtype = x.dtype
    group = Group(
        size=_group_size(x, axes),
        operand=x.type,
        axes=tuple(axes),
        sizes=x.grid.sizes,
        reduce=lambda bufs, kind: reduce_arrays(bufs, kind, dtype),
    )
    try:
        return it.value(t, it.exchange(x, axes, lambda bufs: cls.exchange(bufs, opts, group)))
    except RuleError as e:
        raise _fail(op, str(e)) from None


@handles(*coll.collectives())
def _collective(it: Interpreter, op: coll.CollectiveOp, args: list[Value]) -> list[Value]:
    (x,) = args
    assert isinstance(x, DistValue)
    opts = op.options()
    opts["axes"] = list(opts["axes"])
    return [run_collective(it, type(op), op, x, op.result.type, opts)]


@handles(*coll.fused_collectives())
def _fused(it: Interpreter, op: coll.FusedCollectiveOp, args: list[Value]) -> list[Value]:
    # Each operand goes through FIRST, the region runs on the results, and the results
    # flagged in `gather` go through FINISH.
    block = op.body.block
    if op.FIRST is not None:
        opts = op.first_options()
        opts["axes"] = list(op.option("axes"))
        args = [run_collective(it, op.FIRST, op, x, a.type, opts) for x, a in zip(args, block.args)]  # type: ignore[arg-type]
    ys = it.run_block(block, args)
    out: list[Value] = []
    for y, t, flag in zip(ys, op.result_types, op.gather_flags()):
        if flag:
            assert op.FINISH is not None and isinstance(y, DistValue)
            y = run_collective(it, op.FINISH, op, y, t, {"axes": list(op.option("axes"))})  # type: ignore[arg-type]
        out.append(y)
    return out


@handles(coll.OverlapOp)
def _overlap(it: Interpreter, op: coll.OverlapOp, args: list[Value]) -> list[Value]:
    # Means exactly the chain it holds; chunking only changes the schedule.
    return it.run_block(op.body.block, [])


# ======================================================================================
# Local computation
# ======================================================================================


@handles(dist.MapOp)
def _map(it: Interpreter, op: dist.MapOp, args: list[Value]) -> list[Value]:
    types: list[TensorType] = list(op.result_types)  # type: ignore[arg-type]
    grid = it.grid(types[0])
    coords = rank_coords(grid)
    dtypes = [numpy_dtype(t.element_type) for t in types]

    def shape(r: int) -> tuple[int, ...]:
        return layout.local_shape(types[0].get_shape(), types[0].get_placements(), grid.sizes, coords[r])

    def fn(bufs: list[np.ndarray], r: int) -> list[np.ndarray]:
        ys = eval_body(op.body.block, bufs)
        return [np.broadcast_to(np.asarray(y).astype(dt, copy=False), shape(r)) for y, dt in zip(ys, dtypes)]

    return list(it.local(types, args, fn, key=shape))


def matmul(a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a @ b`` computed in ``compute_dtype`` (BLAS for floats) and rounded once."""
    cdt = compute_dtype(dtype)
    a = a.astype(cdt, copy=False)
    b = b.astype(cdt, copy=False)
    if b.ndim == 2 and a.ndim > 2:
        rows = int(np.prod(a.shape[:-1], dtype=np.int64))  # (not -1: a dim may be 0)
        y = np.matmul(np.ascontiguousarray(a).reshape(rows, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
    else:
        y = np.matmul(a, b)
    return y.astype(dtype, copy=False)


@handles(dist.MatmulOp)
def _matmul(it: Interpreter, op: dist.MatmulOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    dt = numpy_dtype(t.element_type)
    return list(it.local([t], args, lambda b, r: [matmul(b[0], b[1], dt)]))


def identity(dtype: np.dtype, kind: str):
    """The identity of ``max``/``min`` in ``dtype``: what an empty block reduces to."""
    if dtype == np.bool_:
        return kind == "min"
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return info.min if kind == "max" else info.max
    return dtype.type(-np.inf if kind == "max" else np.inf)


def reduce_tensor(x: np.ndarray, kind: str, dims: Sequence[int], count: Fraction | float | None = None) -> np.ndarray:
    """Reduce ``x`` over ``dims`` (sum, prod, max, min, avg = mean), in compute_dtype.
    ``avg`` divides the sum by ``count`` (default: the elements reduced; ``rt``'s float
    counts are ratios of small integers)."""
    axis = tuple(dims)
    if isinstance(count, float):
        count = Fraction(count).limit_denominator(1 << 24)
    cdt = compute_dtype(x.dtype)
    with np.errstate(all="ignore"):
        if kind == "sum":
            y = np.sum(x, axis=axis, dtype=cdt)
        elif kind == "prod":
            y = np.prod(x, axis=axis, dtype=cdt)
        elif kind == "max":
            y = np.max(x, axis=axis, initial=identity(x.dtype, "max")) if axis else x
        elif kind == "min":
            y = np.min(x, axis=axis, initial=identity(x.dtype, "min")) if axis else x
        elif kind == "avg":
            if count is None:
                count = Fraction(int(np.prod([x.shape[d] for d in axis], dtype=np.int64)))
            s = np.sum(x, axis=axis, dtype=cdt)
            if np.issubdtype(cdt, np.integer):
                y = np.sign(s) * ((np.abs(s) * count.denominator) // count.numerator)
            elif count.denominator == 1:
                y = np.divide(s, cdt.type(count.numerator), dtype=cdt)
            else:
                y = np.divide(s, cdt.type(float(count)), dtype=cdt)
        else:
            raise ValueError(f"unknown reduction '{kind}'")
    return np.asarray(y).astype(x.dtype, copy=False)


@handles(dist.ReduceTensorOp)
def _reduce_tensor(it: Interpreter, op: dist.ReduceTensorOp, args: list[Value]) -> list[Value]:
    kind, dims = op.option("op"), op.option("dims")
    x = args[0]
    assert isinstance(x, DistValue)
    count = layout.avg_count(x.shape, x.placements, x.grid.sizes, dims)
    return list(it.local([op.result.type], args, lambda b, r: [reduce_tensor(b[0], kind, dims, count)]))  # type: ignore[list-item]


@handles(dist.CastOp)
def _cast(it: Interpreter, op: dist.CastOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    dt = numpy_dtype(t.element_type)

    def fn(b: list[np.ndarray], r: int) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [b[0].astype(dt)]

    return list(it.local([t], args, fn))


@handles(dist.DropoutOp)
def _dropout(it: Interpreter, op: dist.DropoutOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    grid = it.grid(t)
    coords = rank_coords(grid)
    shape, placements = t.get_shape(), t.get_placements()
    p, seed = op.option("p"), op.option("seed")

    def block(r: int) -> tuple[slice, ...]:
        return layout.block(shape, placements, grid.sizes, coords[r])

    def key(r: int) -> tuple[tuple[int, int], ...]:
        return tuple((s.start, s.stop) for s in block(r))

    return list(it.local([t], args, lambda b, r: [_dropout(b[0], p, seed, shape, block(r))], key))


def embedding_bag(table: np.ndarray, indices: np.ndarray, mode: str, row0: int, rows: int, dtype: np.dtype) -> np.ndarray:
    """Bags of rows of ``table`` (this rank's rows ``row0 ..``; a table of ``rows`` rows
    in all): rows a rank does not hold contribute 0 (sum mode of a row-sliced table)."""
    cdt = compute_dtype(dtype)
    lead = table.ndim - 2
    held = table.shape[-2]
    loc = indices.astype(np.int64) - row0
    valid = (loc >= 0) & (loc < held)
    safe = np.where(valid, loc, 0)
    if held == 0:  # an empty block of rows: nothing to add
        return np.zeros((*indices.shape[:-1], table.shape[-1]), dtype=dtype)
    if lead:
        g = table[np.arange(table.shape[0])[:, None, None], safe]
    else:
        g = table[safe]
    g = g.astype(cdt, copy=False)
    if not valid.all():
        g = np.where(valid[..., None], g, cdt.type(0))
    if mode == "sum":
        y = g.sum(axis=-2, dtype=cdt)
    elif mode == "mean":
        y = g.sum(axis=-2, dtype=cdt) / cdt.type(g.shape[-2])
    else:
        y = g.max(axis=-2)
    return np.asarray(y).astype(dtype, copy=False)


@handles(dist.EmbeddingBagOp)
def _embedding_bag(it: Interpreter, op: dist.EmbeddingBagOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    table = args[0]
    assert isinstance(table, DistValue)
    rows = table.shape[-2]
    dt = numpy_dtype(t.element_type)
    mode = op.option("mode")
    coords = rank_coords(table.grid)
    row_dim = len(table.shape) - 2

    def fn(b: list[np.ndarray], r: int) -> list[np.ndarray]:
        idx = b[1]
        if idx.size and (idx.min() < 0 or idx.max() >= rows):
            bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
            raise _fail(op, f"index {bad} is out of range for a table of {rows} rows")
        row0 = layout.block(table.shape, table.placements, table.grid.sizes, coords[r])[row_dim].start
        return [embedding_bag(b[0], idx, mode, row0, rows, dt)]

    return list(it.local([t], args, fn, key=lambda r: table.block(r)[row_dim].start))


def scatter_add(indices: np.ndarray, updates: np.ndarray, row0: int, held: int, dtype: np.dtype) -> np.ndarray:
    """The rows ``row0 .. row0 + held`` of ``scatter_add(indices, updates)``: each update
    row added to the row its index names, in the order of the (bag, position) pairs;
    indices outside the rows held add nothing. In compute_dtype, rounded once."""
    cdt = compute_dtype(dtype)
    lead = indices.ndim - 2
    loc = indices.astype(np.int64) - row0
    valid = (loc >= 0) & (loc < held)
    shape = (*updates.shape[:lead], held, updates.shape[-1])
    out = np.zeros(shape, cdt)
    rows = np.broadcast_to(updates[..., :, None, :], (*indices.shape, updates.shape[-1])).astype(cdt)
    if lead:
        t = np.broadcast_to(np.arange(indices.shape[0])[:, None, None], indices.shape)
        np.add.at(out, (t[valid], loc[valid]), rows[valid])
    else:
        np.add.at(out, loc[valid], rows[valid])
    return out.astype(dtype, copy=False)


@handles(dist.ScatterAddOp)
def _scatter_add(it: Interpreter, op: dist.ScatterAddOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    grid = it.grid(t)
    coords = rank_coords(grid)
    row_dim = t.rank - 2
    dt = numpy_dtype(t.element_type)

    def block(r: int) -> slice:
        return layout.block(t.get_shape(), t.get_placements(), grid.sizes, coords[r])[row_dim]

    def fn(b: list[np.ndarray], r: int) -> list[np.ndarray]:
        rs = block(r)  # indices outside it (or outside the table) add nothing
        return [scatter_add(b[0], b[1], rs.start, rs.stop - rs.start, dt)]

    return list(it.local([t], args, fn, key=lambda r: block(r).start))


def sort_along(arrays: Sequence[np.ndarray], dim: int) -> list[np.ndarray]:
    """``arrays`` reordered along ``dim`` by the keys of ``arrays[0]``: ascending, stable,
    -0.0 equal to +0.0 and NaN last (numpy's order of floats), integers signed."""
    keys = arrays[0]
    if is_float(keys.dtype) and keys.dtype.itemsize < 4:
        keys = keys.astype(np.float32)  # exact; numpy sorts f16/bf16 no better
    order = np.argsort(keys, axis=dim, kind="stable")
    return [np.take_along_axis(a, order, axis=dim) for a in arrays]


@handles(dist.SortOp)
def _sort(it: Interpreter, op: dist.SortOp, args: list[Value]) -> list[Value]:
    dim = op.option("dim")
    return list(it.local([r.type for r in op.outputs], args, lambda b, r: sort_along(b, dim)))  # type: ignore[misc]


@handles(dist.RemeshOp)
def _remesh(it: Interpreter, op: dist.RemeshOp, args: list[Value]) -> list[Value]:
    # The same global rank keeps the same buffer; only its coordinates change.
    (x,) = args
    assert isinstance(x, DistValue)
    return [it.value(op.result.type, dict(x.buffers))]


@handles(dist.TransposeOp)
def _transpose(it: Interpreter, op: dist.TransposeOp, args: list[Value]) -> list[Value]:
    perm = op.option("perm")
    return list(it.local([op.result.type], args, lambda b, r: [np.ascontiguousarray(np.transpose(b[0], perm))]))  # type: ignore[list-item]


@handles(dist.ReshapeOp)
def _reshape(it: Interpreter, op: dist.ReshapeOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    grid = it.grid(t)
    coords = rank_coords(grid)

    def shape(r: int) -> tuple[int, ...]:
        return layout.local_shape(t.get_shape(), t.get_placements(), grid.sizes, coords[r])

    return list(it.local([t], args, lambda b, r: [np.reshape(b[0], shape(r))], key=shape))


@handles(dist.IotaOp)
def _iota(it: Interpreter, op: dist.IotaOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    grid = it.grid(t)
    coords = rank_coords(grid)
    shape, placements, dim = t.get_shape(), t.get_placements(), op.option("dim")
    dt = numpy_dtype(t.element_type)

    def rows(r: int) -> slice:
        return layout.block(shape, placements, grid.sizes, coords[r])[dim]

    def fn(b: list[np.ndarray], r: int) -> list[np.ndarray]:
        s = rows(r)
        local = layout.local_shape(shape, placements, grid.sizes, coords[r])
        idx = np.arange(s.start, s.stop).astype(dt)
        view = [1] * len(shape)
        view[dim] = len(idx)
        return [np.broadcast_to(idx.reshape(view), local)]

    return list(it.local([t], args, fn, key=lambda r: tuple((s.start, s.stop) for s in layout.block(shape, placements, grid.sizes, coords[r]))))


@handles(dist.ExtractSliceOp)
def _extract_slice(it: Interpreter, op: dist.ExtractSliceOp, args: list[Value]) -> list[Value]:
    t: TensorType = op.result.type  # type: ignore[assignment]
    sliced = layout.sliced_dims(t.get_placements())
    index = tuple(
        slice(None) if d in sliced else slice(o, o + (n - 1) * s + 1 if n else o, s)
        for d, (o, s, n) in enumerate(zip(op.option("offsets"), op.option("strides"), t.get_shape()))
    )
    return list(it.local([t], args, lambda b, r: [np.ascontiguousarray(b[0][index])]))


@handles(dist.ConcatOp)
def _concat_op(it: Interpreter, op: dist.ConcatOp, args: list[Value]) -> list[Value]:
    dim = op.option("dim")
    return list(it.local([op.result.type], args, lambda b, r: [np.concatenate(b, axis=dim)]))  # type: ignore[list-item]


@handles(dist.ToLocalOp, dist.FromLocalOp)
def _view_as(it: Interpreter, op: dist.ToLocalOp | dist.FromLocalOp, args: list[Value]) -> list[Value]:
    # Every rank keeps its buffer; only the meaning changes. A replicated result of
    # from_local must have equal buffers on the ranks of each group.
    (x,) = args
    assert isinstance(x, DistValue)
    t: TensorType = op.result.type  # type: ignore[assignment]
    if isinstance(op, dist.FromLocalOp):
        axes = [a for a, (p, q) in enumerate(zip(x.placements, t.get_placements())) if p != q and isinstance(q, Replicated)]
        if axes:
            for group in x.grid.groups(axes):
                bufs = [x.buffers[r] for r in group if r in x.buffers]
                if any(not np.array_equal(bufs[0], b, equal_nan=bufs[0].dtype.kind == "f") for b in bufs[1:]):
                    raise _fail(op, f"ranks {list(group)} hold different values for a result that is replicated over axes {axes}")
    held = {r: b for r, b in x.buffers.items() if stores(t.get_placements(), rank_coords(x.grid)[r])}
    return [it.value(t, held)]


@handles(func.CallOp)
def _call(it: Interpreter, op: func.CallOp, args: list[Value]) -> list[Value]:
    callee = SymbolTable.lookup_symbol(it.module, op.callee)
    if not isinstance(callee, func.FuncOp):
        raise _fail(op, f"callee {op.callee} is not a function of the module")
    return it.call(callee, args)


def _scalar_op(it: Interpreter, op: Operation, args: list[Value]) -> list[Value]:
    # arith/math on builtin scalars outside a dist.map body.
    if any(isinstance(a, DistValue) for a in args):
        raise _fail(op, "on !dist.tensor values must be inside a dist.map body")
    return [frozen(np.asarray(y)) for y in eval_op(op, args)]  # type: ignore[arg-type]


for _cls in SCALAR_OPS:
    HANDLERS[_cls] = _scalar_op


# ======================================================================================
# Python API
# ======================================================================================


def as_module(module: ModuleOp | str) -> ModuleOp:
    """A module, parsing and verifying text."""
    if isinstance(module, ModuleOp):
        return module
    from distir.dialects.context import parse_module

    return parse_module(module)


def run_function(module: ModuleOp | str, func_name: str | None = None, inputs: Mapping[str, np.ndarray] | None = None, ranks: int = 1, seed: int = 0) -> Execution:
    """Run function ``func_name`` (default: the only one) of ``module`` on ``ranks``
    simulated ranks. ``inputs`` follow the in.npz convention (``runtime/npz.py``);
    missing ones are drawn at random from ``seed``. Returns an ``Execution`` with the
    logical outputs, the per-rank result values and the allocation statistics. The
    module is verified first (``VerifyException``), unless it verified and has not
    changed since."""
    from distir.dialects.verifier import ensure_verified

    module = as_module(module)
    ensure_verified(module)  # never runs a program that does not verify (free when it did)
    f = npz.select_function(module, func_name)
    grids = npz.resolve_grids(module, ranks)
    full = npz.prepare_inputs(module, f, ranks, inputs, seed, grids=grids)
    it = Interpreter(module, ranks, grids)
    args: list[Value] = []
    for (name, t), a in zip(npz.signature(f), full.values()):
        if isinstance(t, TensorType):
            args.append(it.value(t, npz.distribute(a, t, it.grid(t))))  # type: ignore[arg-type]
        else:
            args.append(npz.distribute(a, t, None))  # type: ignore[arg-type]
    results = it.call(f, args)
    ret = f.body.block.last_op
    assert ret is not None
    for i in npz.inplace_results(f):
        v = ret.operands[i]
        if v.owner is not f.body.block and v in it._names:
            it.allocated[it._names[v]] = [0] * ranks
    outputs = []
    for i, (v, t) in enumerate(zip(results, npz.result_types(f))):
        if isinstance(v, DistValue):
            outputs.append(npz.collect(t, v.grid, v.buffers, f"result{i}"))
        else:
            outputs.append(npz.collect(t, None, v, f"result{i}"))
    return Execution(outputs, results, it.allocated, ranks, full)


def interpret(module: ModuleOp | str, func: str | None = None, inputs: Mapping[str, np.ndarray] | None = None, ranks: int = 1, seed: int = 0) -> list[np.ndarray]:
    """Run a function with the reference interpreter; returns its logical outputs (the
    out.npz convention: replicas checked, ``local`` stacked, ``at<r>`` from rank r)."""
    return run_function(module, func, inputs, ranks, seed).outputs


def _dropout(x: np.ndarray, p: float, seed: int, shape: Sequence[int], block: Sequence[slice]) -> np.ndarray:
    """Dropout of ``x``, the block ``block`` of a tensor of logical ``shape``."""
    out = np.empty(x.shape, dtype=x.dtype)
    cdt = compute_dtype(x.dtype)
    scale = cdt.type(1.0 / (1.0 - p))
    threshold = rng.keep_threshold(p)
    for where, idx in rng.block_indices(shape, block):
        keep = rng.uniform_bits(seed, idx) >= threshold
        piece = np.multiply(x[where], scale, dtype=cdt)
        out[where] = np.where(keep.reshape(piece.shape), piece, cdt.type(0))
    return out
