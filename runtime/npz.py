"""Inputs and outputs of a run (DESIGN §5), shared by every backend.

``in.npz`` holds one array per function argument, named by the argument's SSA name
without ``%`` (``arg<i>`` for an unnamed one):

* the **logical** value for ``replicated``, ``sliced<d>``, ``at<r>`` and ``unplaced``
  placements (the whole tensor, whatever the ranks hold);
* for ``local`` placements, the per-rank values stacked as leading dims: one leading
  dim per ``local`` mesh axis, in axis order, of that axis' size
  (``!dist.tensor<64xf32, @grid, [local, replicated, local]>`` on a 2x3x4 mesh is a
  2x4x64 array);
* builtin scalars (``f32`` arguments) as 0-d arrays.

Dtypes must match exactly (f16 float16, bf16 ``ml_dtypes.bfloat16``, f32 float32, f64
float64, i1 bool, iN intN; an iN argument also takes a uintN array, as its bits). numpy
saves bfloat16 arrays as 2-byte void records; such records are read back as bfloat16. Arguments missing from the file are drawn at random
from the run's seed (``random_inputs``): floats uniform in [0, 1), integers uniform in
[0, 8), indices of an ``embedding_bag`` uniform over the table's rows.

``out.npz`` uses the same convention for the results, named ``result0``, ``result1``, ...
in order: the logical value of each result, after checking that all replicas of a
replicated (or repeated) block agree exactly; an ``at<r>`` result is the value held by
rank r; a ``local`` result is stacked over ranks.

Everything here speaks of function signatures, tensor types and mesh grids only, so the
``interpret``, ``local``, ``mpi`` and ``nccl`` backends share it: ``prepare_inputs`` to
check and complete inputs, ``distribute`` to cut a logical input into per-rank buffers,
``collect`` to assemble a logical output from per-rank buffers.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from distir.dialects import coll, dist, layout
from distir.dialects.diagnostics import InputRejected, ResultsDiffer, check_body
from distir.dialects.dist import MeshOp, TensorType, resolve_grids, used_meshes  # noqa: F401 (resolve_grids, used_meshes: used here and by importers)
from distir.dialects.placements import At, Sliced
from distir.runtime.values import (
    BFLOAT16,
    frozen,
    local_axes,
    rank_coords,
    stores,
    value_dtype,
)

RANDOM_INT_HIGH = 8
"""Random integer inputs are drawn from [0, RANDOM_INT_HIGH) (embedding indices excepted)."""

Signature = list[tuple[str, Attribute]]


# --------------------------------------------------------------------------------------
# Functions and meshes
# --------------------------------------------------------------------------------------


def functions(module: ModuleOp) -> list[FuncOp]:
    return [op for op in module.ops if isinstance(op, FuncOp)]


def select_function(module: ModuleOp, name: str | None, what: str = "--func") -> FuncOp:
    """The function called ``name``; with no name, the module's only function (with a
    body: ``check_body``)."""
    f = _select(module, name, what)
    check_body(f)
    return f


def _select(module: ModuleOp, name: str | None, what: str) -> FuncOp:
    funcs = functions(module)
    names = ", ".join("@" + f.sym_name.data for f in funcs) or "none"
    if name is None:
        if len(funcs) == 1:
            return funcs[0]
        if not funcs:
            raise InputRejected("the module has no function to run")
        raise InputRejected(f"the module has several functions ({names}): choose one with {what}")
    for f in funcs:
        if f.sym_name.data == name.removeprefix("@"):
            return f
    raise InputRejected(f"no function @{name.removeprefix('@')} in the module (functions: {names})")


def argument_names(func: FuncOp) -> list[str]:
    """Input array names: each argument's SSA name without ``%`` (``arg<i>`` if unnamed)."""
    names = []
    for i, a in enumerate(func.body.block.args):
        names.append(a.name_hint or f"arg{i}")
    return names


def signature(func: FuncOp) -> Signature:
    return list(zip(argument_names(func), func.function_type.inputs.data))


def result_types(func: FuncOp) -> list[Attribute]:
    return list(func.function_type.outputs.data)


def inplace_results(func: FuncOp) -> dict[int, int]:
    """result index -> argument index, for results marked ``{dist.inplace = N}``."""
    out: dict[int, int] = {}
    if func.res_attrs is None:
        return out
    for i, attrs in enumerate(func.res_attrs.data):
        a = attrs.data.get("dist.inplace")  # type: ignore[union-attr]
        if a is not None:
            out[i] = a.value.data  # type: ignore[attr-defined]
    return out


def static_ranks(module: ModuleOp, f: FuncOp | None = None) -> int | None:
    """The rank count every mesh of the module (that function ``f`` uses, when given)
    fixes, if they fix one."""
    only = used_meshes(module, f) if f is not None else None
    counts = set()
    for op in module.ops:
        if isinstance(op, MeshOp) and op.parent_mesh() is None and (only is None or op.mesh_name in only):
            sizes = op.declared_sizes
            if any(s is None for s in sizes):
                return None
            counts.add(math.prod(sizes))  # type: ignore[arg-type]
    return counts.pop() if len(counts) == 1 else None


def _type_error(t: TensorType, grid: layout.MeshGrid) -> str | None:
    if len(t.get_placements()) != len(grid.sizes):
        return f"it has {len(t.get_placements())} placements but mesh @{grid.name} has {len(grid.sizes)} axes"
    for a, p in enumerate(t.get_placements()):
        if isinstance(p, At) and p.rank.data >= grid.sizes[a]:
            return f"it is at<{p.rank.data}> on axis {a} of @{grid.name}, which has {grid.sizes[a]} ranks"
    return None


def _rule_error(op: Operation, grids: Mapping[str, layout.MeshGrid], ranks: int) -> str | None:
    """Why an op whose rule depends on the mesh sizes (how the ranks' blocks fall) does
    not hold for this run's sizes, or None."""
    if isinstance(op, dist.ReshapeOp):
        t, r = op.input.type, op.result.type
        return dist.ReshapeOp.blocks_error(t, r.get_shape(), grid_of(grids, t).sizes)  # type: ignore[union-attr, arg-type]
    if isinstance(op, dist.RemeshOp):
        t, r = op.input.type, op.result.type
        return dist.remesh_blocks_error(t, dist.lookup_mesh(op, t), r, dist.lookup_mesh(op, r), ranks)  # type: ignore[arg-type]
    if isinstance(op, (dist.ToLocalOp, dist.FromLocalOp)):
        t, r = op.input.type, op.result.type
        return dist.view_blocks_error(t, r, grid_of(grids, t).sizes)  # type: ignore[arg-type]
    return None


def check_sizes(func: FuncOp, grids: Mapping[str, layout.MeshGrid], ranks: int) -> None:
    """Check every tensor type of ``func`` against the mesh sizes of this run: ``at<r>``
    within the axis, and the rules that depend on how the ranks' blocks fall (reshape,
    remesh, to_local of dims the ranks do not divide): meshes with ``?`` sizes could not
    be checked before."""
    for name, t in signature(func):
        if isinstance(t, TensorType):
            why = _type_error(t, grid_of(grids, t))
            if why:
                raise InputRejected(f"argument '{name}' ({t}): {why} (--ranks {ranks})")
    for op in func.walk():
        why = _rule_error(op, grids, ranks)
        if why:
            raise InputRejected(f"'{op.name}' op {why} (--ranks {ranks})")
        for i, r in enumerate(op.results):
            if isinstance(r.type, TensorType):
                why = _type_error(r.type, grid_of(grids, r.type))
                if why:
                    what = f"result {i}" if len(op.results) > 1 else "result"
                    raise InputRejected(f"'{op.name}' op {what} ({r.type}): {why} (--ranks {ranks})")
        for region in op.regions:  # the slices a fused collective's region works on
            for block in region.blocks:
                for i, a in enumerate(block.args):
                    if isinstance(a.type, TensorType) and op is not func:
                        why = _type_error(a.type, grid_of(grids, a.type))
                        if why:
                            raise InputRejected(f"'{op.name}' op region argument {i} ({a.type}): {why} (--ranks {ranks})")


def grid_of(grids: Mapping[str, layout.MeshGrid], t: TensorType) -> layout.MeshGrid:
    grid = grids.get(t.mesh_name)
    if grid is None:
        raise InputRejected(f"unknown mesh @{t.mesh_name}")
    return grid


# --------------------------------------------------------------------------------------
# Input arrays
# --------------------------------------------------------------------------------------


def expected_array(t: Attribute, grids: Mapping[str, layout.MeshGrid]) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of the npz array of a value of type ``t``."""
    if not isinstance(t, TensorType):
        return (), value_dtype(t)
    grid = grid_of(grids, t)
    lead = tuple(grid.sizes[a] for a in local_axes(t.get_placements()))
    return lead + t.get_shape(), value_dtype(t)


def _describe(t: Attribute, grids: Mapping[str, layout.MeshGrid]) -> str:
    if not isinstance(t, TensorType):
        return f"a 0-d array (builtin scalar {t})"
    la = local_axes(t.get_placements())
    if not la:
        return f"the logical value of {t}"
    grid = grid_of(grids, t)
    axes = ", ".join(f"axis {a} ({grid.sizes[a]} ranks)" for a in la)
    return f"{t} stacked over the ranks of its local {axes}"


def _fmt_shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar (0-d)"


def normalise_array(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Read 2-byte void records (how numpy saves bfloat16) as bfloat16, and an unsigned
    array for a signless integer argument of its width as its bits (JAX's ``uint32``
    random keys for an imported ``tensor<2xui32>`` argument, which distir holds as i32)."""
    if dtype == BFLOAT16 and a.dtype.kind == "V" and a.dtype.itemsize == 2:
        return a.view(BFLOAT16)
    if a.dtype.kind == "u" and dtype.kind == "i" and a.dtype.itemsize == dtype.itemsize:
        return a.view(dtype)
    return a


def check_inputs(sig: Signature, grids: Mapping[str, layout.MeshGrid], arrays: Mapping[str, np.ndarray], source: str = "inputs", allow_missing: bool = True) -> dict[str, np.ndarray]:
    """Check the given input arrays against the signature; returns them keyed by name
    (bfloat16 records normalised). Extra arrays, wrong shapes and wrong dtypes are
    rejected with a message naming the argument, what was expected and what was found;
    so are missing arrays unless ``allow_missing``."""
    names = [n for n, _ in sig]
    extra = [k for k in arrays if k not in names]
    if extra:
        raise InputRejected(
            f"{source}: array '{extra[0]}' matches no argument (arguments: {', '.join(names) or 'none'})"
        )
    out = {}
    for name, t in sig:
        if name not in arrays:
            if not allow_missing:
                shape, dtype = expected_array(t, grids)
                raise InputRejected(
                    f"{source}: argument '{name}' is missing: expected a {_fmt_shape(shape)} {dtype.name} array, "
                    f"{_describe(t, grids)}"
                )
            continue
        shape, dtype = expected_array(t, grids)
        a = normalise_array(np.asarray(arrays[name]), dtype)
        if a.dtype != dtype:
            raise InputRejected(
                f"{source}: argument '{name}' must have dtype {dtype.name} ({_elt(t)}), got {a.dtype.name}"
            )
        if a.shape != shape:
            raise InputRejected(
                f"{source}: argument '{name}' must have shape {_fmt_shape(shape)} ({_describe(t, grids)}), "
                f"got {_fmt_shape(a.shape)}"
            )
        out[name] = a
    return out


def _elt(t: Attribute) -> Attribute:
    return t.element_type if isinstance(t, TensorType) else t


_FORWARDING = (
    dist.SliceOp,
    dist.JoinOp,
    dist.ReplOp,
    dist.DropOp,
    dist.StoreOp,
    dist.LoadOp,
    dist.TakeSliceOp,
    dist.RemeshOp,
)


def _forwards(op) -> bool:
    """Whether ``op`` only moves its operand's elements (a primitive, a view, or a
    collective without a reduction)."""
    return isinstance(op, _FORWARDING) or (isinstance(op, coll.CollectiveOp) and op.KIND is None)


def _source_argument(v: SSAValue, func: FuncOp) -> int | None:
    while True:
        if isinstance(v, BlockArgument):
            return v.index if v.block is func.body.block else None
        op = v.owner
        if not _forwards(op):
            return None
        v = op.operands[0]


def index_bounds(func: FuncOp) -> dict[str, int]:
    """Arguments used (directly or through data movement) as ``embedding_bag`` indices,
    with the number of table rows: random values for them must stay below it."""
    names = argument_names(func)
    out: dict[str, int] = {}
    for op in func.walk():
        if isinstance(op, dist.EmbeddingBagOp):
            i = _source_argument(op.indices, func)
            t = op.table.type
            if i is not None and isinstance(t, TensorType):
                rows = t.get_shape()[-2]
                out[names[i]] = min(rows, out.get(names[i], rows))
    return out


def random_array(shape: Sequence[int], dtype: np.dtype, rng: np.random.Generator, high: int = RANDOM_INT_HIGH) -> np.ndarray:
    """Floats uniform in [0, 1); integers uniform in [0, high); booleans fair."""
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, max(1, high), size=shape, dtype=dtype)
    base = np.float64 if dtype == np.float64 else np.float32
    return np.asarray(rng.random(size=shape, dtype=base)).astype(dtype, copy=False)


def random_inputs(sig: Signature, grids: Mapping[str, layout.MeshGrid], seed: int, names: Sequence[str] | None = None, bounds: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Random arrays for the arguments ``names`` (default: all). Argument i draws from
    ``numpy.random.default_rng([seed, i])``, so each argument's values depend only on the
    seed and its position."""
    bounds = bounds or {}
    out = {}
    for i, (name, t) in enumerate(sig):
        if names is not None and name not in names:
            continue
        shape, dtype = expected_array(t, grids)
        rng = np.random.default_rng([seed % (1 << 63), i])
        out[name] = random_array(shape, dtype, rng, bounds.get(name, RANDOM_INT_HIGH))
    return out


def prepare_inputs(module: ModuleOp, func: FuncOp, ranks: int, given: Mapping[str, np.ndarray] | None = None, seed: int = 0, source: str = "inputs", grids: Mapping[str, layout.MeshGrid] | None = None, bounds: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Check a run's mesh sizes and given inputs, and draw the missing inputs at random
    (integers below ``bounds`` or ``index_bounds(func)``): the complete input dict, in
    argument order."""
    grids = grids if grids is not None else resolve_grids(module, ranks)
    check_sizes(func, grids, ranks)
    sig = signature(func)
    inputs = check_inputs(sig, grids, given or {}, source)
    missing = [n for n, _ in sig if n not in inputs]
    if missing:
        inputs.update(random_inputs(sig, grids, seed, missing, index_bounds(func) if bounds is None else bounds))
    return {n: inputs[n] for n, _ in sig}


def load_npz(path: str) -> dict[str, np.ndarray]:
    """Read an npz file; unreadable files are rejected with the reason."""
    try:
        if not os.path.isfile(path):
            raise FileNotFoundError(path)
        if not zipfile.is_zipfile(path):
            raise InputRejected(f"cannot read {path}: not an npz (zip) archive")
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise InputRejected(f"cannot read {path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise InputRejected(f"cannot read {path} as an npz file: {e}") from None


def save_npz(path: str, outputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> None:
    """Write results as ``result0``, ``result1``, ... (or the arrays of a mapping by
    their names) to exactly ``path`` (``np.savez`` given a name adds ``.npz`` to one
    that lacks it: ``--outputs res.out`` wrote ``res.out.npz``)."""
    arrays = dict(outputs) if isinstance(outputs, Mapping) else {f"result{i}": np.asarray(a) for i, a in enumerate(outputs)}
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise InputRejected(f"cannot write {path}: {e.strerror or e}") from None


# --------------------------------------------------------------------------------------
# Logical values <-> per-rank buffers
# --------------------------------------------------------------------------------------


def distribute(array: np.ndarray, t: Attribute, grid: layout.MeshGrid | None) -> dict[int, np.ndarray] | np.ndarray:
    """Cut a logical input (npz convention) into per-rank buffers: global rank -> buffer,
    for every rank that files one (see ``values``). Buffers are read-only views; ranks
    holding the same block share one view. A builtin scalar stays a 0-d array."""
    if not isinstance(t, TensorType):
        return frozen(np.array(array, dtype=value_dtype(t)))
    assert grid is not None
    placements = t.get_placements()
    la = local_axes(placements)
    coords = rank_coords(grid)
    views: dict[Any, np.ndarray] = {}
    out = {}
    for r in range(grid.ranks):
        c = coords[r]
        if not stores(placements, c):
            continue
        lead = tuple(c[a] for a in la)
        blk = layout.block(t.get_shape(), placements, grid.sizes, c)
        key = (lead, tuple((s.start, s.stop) for s in blk))
        if key not in views:
            views[key] = frozen(array[lead + blk + (Ellipsis,)].view())
        out[r] = views[key]
    return out


def collect(t: Attribute, grid: layout.MeshGrid | None, buffers: Mapping[int, np.ndarray] | np.ndarray, what: str = "result") -> np.ndarray:
    """Assemble the logical value (npz convention) of a value from its per-rank buffers,
    checking that every replica of a block agrees exactly (``ResultsDiffer`` otherwise)."""
    if not isinstance(t, TensorType):
        return np.asarray(buffers)
    assert grid is not None and isinstance(buffers, Mapping)
    placements = t.get_placements()
    la = local_axes(placements)
    coords = rank_coords(grid)
    shape, dtype = expected_array(t, {grid.name: grid})
    first: dict[Any, tuple[int, np.ndarray]] = {}
    for r in sorted(buffers):
        c = coords[r]
        buf = buffers[r]
        lead = tuple(c[a] for a in la)
        blk = layout.block(t.get_shape(), placements, grid.sizes, c)
        key = (lead, tuple((s.start, s.stop) for s in blk), layout.block_key(placements, grid.sizes, c))
        if key in first:
            r0, b0 = first[key]
            if b0 is not buf and not np.array_equal(b0, buf, equal_nan=dtype.kind == "f" or dtype == BFLOAT16):
                bad = tuple(int(i) for i in np.argwhere(~_same_elements(b0, buf))[0])
                raise ResultsDiffer(
                    f"{what}: replicas disagree: ranks {r0} and {r} hold different values at {list(bad)} "
                    f"of their block: {b0[bad]!r} vs {buf[bad]!r} (replicated inputs that differ between the ranks "
                    "give such results: under mpiexec, --trust-inputs skips the check of the inputs' checksums)"
                )
            continue
        first[key] = (r, buf)
    n_lead = math.prod(grid.sizes[a] for a in la)
    n_blocks = math.prod(
        math.prod(grid.sizes[a] for a in layout.slicing_axes(placements, d))
        for d in {p.dim.data for p in placements if isinstance(p, Sliced)}
    )
    if len(first) != n_lead * n_blocks:
        raise RuntimeError(f"{what}: the ranks hold {len(first)} of the {n_lead * n_blocks} blocks of {t}")
    if len(first) == 1:
        ((_, buf),) = first.values()
        return np.asarray(buf).reshape(shape)
    out = np.empty(shape, dtype=dtype)
    for (lead, blk, _), (_, buf) in first.items():
        out[lead + tuple(slice(a, b) for a, b in blk)] = buf
    return out


def _same_elements(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    eq = a == b
    if a.dtype.kind == "f" or a.dtype == BFLOAT16:
        eq |= np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return np.asarray(eq)
