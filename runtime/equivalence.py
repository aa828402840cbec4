"""Do two programs mean the same thing? Run both on the same inputs and compare.

``equivalent(module_a, module_b, ranks)`` runs function ``func_a`` of ``module_a`` and
``func_b`` of ``module_b`` (default: each module's only function, or the function of
``module_b`` with ``func_a``'s name) on ``trials`` sets of random inputs (seeds ``seed``,
``seed + 1``, ...) and compares the outputs; it returns an ``EquivalenceReport`` that is
truthy when they agree and whose ``message`` reports the first mismatching output and
element, both values and the tolerance otherwise. Inputs are matched by position, so
the two functions need the same argument types (names may differ).

Tolerances, by element type (``TOLERANCES``): integers and booleans must be equal;
floats agree at an element when

    |a - b| <= rtol * |b| + atol * max|b| + tiny

where ``max|b|`` is the largest finite magnitude of that output of the second program
(a norm-wise floor for values that cancel) and ``tiny`` the type's smallest normal
number. NaN agrees with NaN and an infinity with the same infinity.

=========  =======  =======  ==============================================
type       rtol     atol     why
=========  =======  =======  ==============================================
f16        1e-2     1e-3     11-bit significand, rounded once per op
bf16       4e-2     8e-3     8-bit significand
f32        1e-5     1e-6     reassociated sums (e.g. hierarchical reductions)
f64        1e-12    1e-13
=========  =======  =======  ==============================================

A float output is only as precise as the least precise float type its program computes
in: an f32 result cast to f64 carries f32 rounding. ``equivalent`` and ``distir-run
--compare`` therefore compare float outputs with the looser of the output's tolerance and
that of the narrowest float type any value of either function has
(``program_precision``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import ResultsDiffer
from distir.dialects.dist import TensorType
from distir.runtime import npz
from distir.runtime.backend import get_backend
from distir.runtime.values import BFLOAT16, local_axes, value_dtype

TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-2, 1e-3),
    "bfloat16": (4e-2, 8e-3),
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-13),
}


def tolerance(dtype: np.dtype) -> tuple[float, float] | None:
    """(rtol, atol) for a float dtype; None for exact comparison."""
    return TOLERANCES.get(np.dtype(dtype).name)


def program_precision(*funcs) -> np.dtype | None:
    """The least precise float dtype of any value (arguments, op results, block arguments,
    tensor elements) of the given functions, or None if they compute with no float."""
    from distir.dialects.dist import TensorType
    from distir.runtime.values import UnsupportedType, numpy_dtype

    worst: np.dtype | None = None
    for f in funcs:
        for op in f.walk():
            values = [*op.results, *(a for r in op.regions for b in r.blocks for a in b.args)]
            for v in values:
                t = v.type.element_type if isinstance(v.type, TensorType) else v.type
                try:
                    dt = numpy_dtype(t)
                except UnsupportedType:
                    continue
                tol = tolerance(dt)
                if tol is not None and (worst is None or tol[0] > tolerance(worst)[0]):  # type: ignore[index]
                    worst = dt
    return worst


def _looser(dtype: np.dtype, precision: np.dtype | None) -> tuple[float, float] | None:
    tol = tolerance(dtype)
    if tol is None or precision is None:
        return tol
    other = tolerance(precision)
    return other if other is not None and other[0] > tol[0] else tol


def describe_tolerance(dtype: np.dtype) -> str:
    tol = tolerance(dtype)
    if tol is None:
        return "exact"
    return f"rtol {tol[0]:g} + atol {tol[1]:g} x max|ref|"


@dataclass
class Comparison:
    """The result of comparing two output lists."""

    ok: bool
    message: str
    max_abs_diff: float = 0.0
    tolerance: str = "exact"

    def __bool__(self) -> bool:
        return self.ok


def _plain(v) -> str:
    """A numpy scalar as a plain number (``1.0082842``, not ``np.float32(1.0082842)``)."""
    return str(v)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == BFLOAT16


def compare_arrays(a: np.ndarray, b: np.ndarray, what: str, precision: np.dtype | None = None) -> Comparison:
    """Compare output ``a`` (first program) with ``b`` (second, the reference); a float
    output gets at least the tolerance of ``precision`` (see ``program_precision``)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return Comparison(False, f"{what}: shapes differ: {a.shape} vs {b.shape}")
    if a.dtype != b.dtype:
        return Comparison(False, f"{what}: dtypes differ: {a.dtype.name} vs {b.dtype.name}")
    tol = _looser(a.dtype, precision)
    if tol is None:
        bad = a != b
        diff = 0.0
        if a.size and a.dtype != np.bool_:
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        if not bad.any():
            return Comparison(True, f"{what}: equal", diff, "exact")
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return Comparison(False, f"{what} differs at {list(i)}: {_plain(a[i])} vs {_plain(b[i])} (tolerance: exact)", diff, "exact")
    rtol, atol = tol
    work = np.float64 if a.dtype == np.float64 else np.float32
    x, y = a.astype(work), b.astype(work)
    finite = np.isfinite(y)
    scale = float(np.max(np.abs(y[finite]))) if finite.any() else 0.0
    tiny = float(np.finfo(np.float16 if a.dtype == np.float16 else work).tiny)
    if a.dtype == BFLOAT16:
        tiny = float(np.finfo(np.float32).tiny)
    with np.errstate(all="ignore"):
        d = np.abs(x - y)
        allowed = rtol * np.abs(y) + (atol * scale + tiny)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        bad = ~same & ~(d <= allowed)
    both = np.isfinite(x) & finite
    diff = float(np.max(d[both])) if both.any() else 0.0
    desc = f"rtol {rtol:g} + atol {atol:g} x max|ref| {scale:.6g}"
    if not bad.any():
        return Comparison(True, f"{what}: agree", diff, desc)
    i = tuple(int(k) for k in np.argwhere(bad)[0])
    return Comparison(
        False,
        f"{what} differs at {list(i)}: {_plain(x[i])} vs {_plain(y[i])} (abs diff {d[i]:.6g} > tolerance {allowed[i]:.6g}: {desc})",
        diff,
        desc,
    )


def compare_outputs(
    outs_a: Sequence[np.ndarray],
    outs_b: Sequence[np.ndarray],
    label_a: str = "a",
    label_b: str = "b",
    precision: np.dtype | None = None,
) -> Comparison:
    """Compare two output lists element by element; the first mismatch is reported."""
    if len(outs_a) != len(outs_b):
        return Comparison(False, f"{label_a} has {len(outs_a)} results, {label_b} has {len(outs_b)}")
    worst, tol = 0.0, "exact"
    for i, (a, b) in enumerate(zip(outs_a, outs_b)):
        c = compare_arrays(a, b, f"result{i}", precision)
        if not c:
            return Comparison(False, f"{c.message} [{label_a} vs {label_b}]", c.max_abs_diff, c.tolerance)
        if c.max_abs_diff >= worst:
            worst, tol = c.max_abs_diff, c.tolerance
    return Comparison(True, f"results agree (max abs diff {worst:.3g}, tolerance {tol})", worst, tol)


@dataclass
class EquivalenceReport:
    """Truthy when the two programs agreed on every trial; ``message`` says why not."""

    ok: bool
    message: str
    trials: int
    max_abs_diff: float = 0.0
    tolerance: str = "exact"

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.message


def _holders(t, grids) -> tuple[tuple[int, ...], ...] | None:
    """For a value stacked over the ranks of its ``local`` axes: the global ranks that
    hold each block, in the npz array's row-major order of blocks; None otherwise."""
    if not isinstance(t, TensorType):
        return None
    axes = local_axes(t.get_placements())
    if not axes:
        return None
    grid = npz.grid_of(grids, t)
    others = [a for a in range(len(grid.sizes)) if a not in axes]
    blocks = grid.grid.transpose(list(axes) + others).reshape(math.prod(grid.sizes[a] for a in axes), -1)
    return tuple(tuple(sorted(map(int, b))) for b in blocks)


def restacked(ta, tb, grids_a, grids_b) -> bool:
    """Whether values of types ``ta`` and ``tb`` are the same per-rank blocks stacked over
    differently shaped meshes (a view ``[4]`` and its root ``[2, 2]``): the same element
    type and block shape, and the same ranks holding each block in row-major order, so
    that one npz array is a reshape of the other."""
    if not (isinstance(ta, TensorType) and isinstance(tb, TensorType)):
        return False
    if ta.get_shape() != tb.get_shape() or value_dtype(ta) != value_dtype(tb):
        return False
    ha = _holders(ta, grids_a)
    return ha is not None and ha == _holders(tb, grids_b)


def inputs_for(fb, grids_b, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The input arrays of the first function (by position) as ``fb``'s inputs, each
    reshaped to ``fb``'s stacking where the two differ (``restacked``)."""
    out = {}
    for (name, t), a in zip(npz.signature(fb), arrays):
        shape = npz.expected_array(t, grids_b)[0]
        out[name] = a if np.shape(a) == shape else np.reshape(a, shape)
    return out


def outputs_as(fa, fb, grids_a, grids_b, outs_a: Sequence[np.ndarray], outs_b: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``fb``'s outputs, each restacked like ``fa``'s where the two are ``restacked``."""
    return [
        b.reshape(a.shape) if np.shape(a) != np.shape(b) and restacked(ta, tb, grids_a, grids_b) else b
        for a, b, ta, tb in zip(outs_a, outs_b, npz.result_types(fa), npz.result_types(fb))
    ]


def signature_mismatch(fa, fb, grids_a, grids_b) -> str | None:
    """Why two functions cannot run on the same inputs (argument arrays by position, up
    to ``restacked``; result count), or None."""
    sa, sb = npz.signature(fa), npz.signature(fb)
    if len(sa) != len(sb):
        return f"@{fa.sym_name.data} takes {len(sa)} arguments, @{fb.sym_name.data} takes {len(sb)}"
    for i, ((na, ta), (nb, tb)) in enumerate(zip(sa, sb)):
        ea, eb = npz.expected_array(ta, grids_a), npz.expected_array(tb, grids_b)
        if ea != eb and not restacked(ta, tb, grids_a, grids_b):
            return (
                f"argument {i} differs: '{na}' takes a {npz._fmt_shape(ea[0])} {ea[1].name} array, "
                f"'{nb}' a {npz._fmt_shape(eb[0])} {eb[1].name} array"
            )
    ra, rb = npz.result_types(fa), npz.result_types(fb)
    if len(ra) != len(rb):
        return f"@{fa.sym_name.data} has {len(ra)} results, @{fb.sym_name.data} has {len(rb)}"
    return None


def equivalent(
    module_a: ModuleOp | str,
    module_b: ModuleOp | str | None,
    ranks: int,
    trials: int = 3,
    seed: int = 0,
    func_a: str | None = None,
    func_b: str | None = None,
    backend_a: str = "interpret",
    backend_b: str = "interpret",
    reference: dict | None = None,
) -> EquivalenceReport:
    """Run ``func_a`` of ``module_a`` and ``func_b`` of ``module_b`` (``None``: the same
    module) on the same random inputs, ``trials`` times, and compare (see the module
    doc for the tolerances). ``reference`` (a dict the caller keeps) remembers the runs
    of ``module_a`` by seed and input bounds: comparing many programs with one reference
    program (the tuner's checks) runs it once."""
    from distir.runtime.interpreter import as_module

    ma = as_module(module_a)
    mb = ma if module_b is None else as_module(module_b)
    fa = npz.select_function(ma, func_a, "func_a")
    if func_b is None and mb is not ma and len(npz.functions(mb)) > 1:
        func_b = fa.sym_name.data
    fb = npz.select_function(mb, func_b, "func_b")
    label_a, label_b = f"@{fa.sym_name.data}", f"@{fb.sym_name.data}"
    grids_a, grids_b = npz.resolve_grids(ma, ranks, npz.used_meshes(ma, fa)), npz.resolve_grids(mb, ranks, npz.used_meshes(mb, fb))
    why = signature_mismatch(fa, fb, grids_a, grids_b)
    if why:
        return EquivalenceReport(False, f"signatures differ: {why}", 0)
    run_a, run_b = get_backend(backend_a), get_backend(backend_b)
    npz.check_sizes(fb, grids_b, ranks)
    bounds = npz.index_bounds(fa)
    names_a, names_b = npz.argument_names(fa), npz.argument_names(fb)
    for nb, hi in npz.index_bounds(fb).items():
        na = names_a[names_b.index(nb)]
        bounds[na] = min(hi, bounds.get(na, hi))
    precision = program_precision(fa, fb)
    worst, tol = 0.0, "exact"
    for trial in range(trials):
        key = (id(ma), fa.sym_name.data, backend_a, ranks, seed + trial, tuple(sorted(bounds.items())))
        try:
            if reference is not None and key in reference:
                inputs, outs_a = reference[key]
            else:
                inputs = npz.prepare_inputs(ma, fa, ranks, None, seed + trial, grids=grids_a, bounds=bounds)
                outs_a = run_a.run(ma, fa.sym_name.data, inputs, ranks, seed + trial)
                if reference is not None:
                    reference[key] = (inputs, outs_a)
            inputs_b = inputs_for(fb, grids_b, [inputs[na] for na in names_a])
            outs_b = run_b.run(mb, fb.sym_name.data, inputs_b, ranks, seed + trial)
        except ResultsDiffer as e:
            return EquivalenceReport(False, f"trial {trial} (seed {seed + trial}): {e}", trial + 1)
        outs_b = outputs_as(fa, fb, grids_a, grids_b, outs_a, outs_b)
        c = compare_outputs(outs_a, outs_b, label_a, label_b, precision)
        if not c:
            return EquivalenceReport(False, f"trial {trial} (seed {seed + trial}): {c.message}", trial + 1, c.max_abs_diff, c.tolerance)
        if c.max_abs_diff >= worst:
            worst, tol = c.max_abs_diff, c.tolerance
    return EquivalenceReport(
        True,
        f"{label_a} and {label_b} agree on {trials} trial(s) on {ranks} rank(s) (max abs diff {worst:.3g}, tolerance {tol})",
        trials,
        worst,
        tol,
    )
