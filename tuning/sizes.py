"""Re-instantiating a program at other sizes: the ``--sizes`` and ``--dim`` of
``distir-tune``.

A program's shapes are static, so the tuner varies the size of a program by
substituting one dimension everywhere it occurs: every ``!dist.tensor`` dimension equal
to ``dim`` becomes ``size`` (in argument, result and value types alike). For the
optimizers the dimension is the element count (``1048576`` in ``examples/adam.mlir``),
which is also the default: the largest dimension of the program. For the model-parallel
and pipeline blocks, whose shapes are ``[B, S, H]``, substituting B (``--dim 8`` in
``examples/megatron_attention.mlir``) varies B×S as CoCoNet's figures do, while the
hidden size stays fixed. A dimension that does not occur in the program is an error.

``parse_sizes`` reads the size list: ``2^10..2^30`` (every power of two in between),
``2^10..2^30:4`` (every 4th power of two), ``1024,4096,65536`` (a list; items may be
powers ``2^k`` too).

Substitution works on the IR (a clone of the module), so a re-instantiated program is
checked by the verifier like any other. Every size runs (a sliced dim the ranks do not
divide is cut in blocks of ceil(s/n), laid out padded); ``fitting`` says, without
substituting anything, where a schedule cannot run at all (its meshes do not fit the
rank count), so that the tuner drops it before checking or lowering it. ``unpadded``
says where no block of a sliced dim is padded.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.ir import Attribute, SSAValue

from distir.dialects.diagnostics import InputRejected
from distir.dialects.dist import TensorType
from distir.dialects.fast import clone, walk
from distir.dialects.verifier import share_shapes

MAX_SIZES = 64
"""Most sizes one ``--sizes`` may list (a guard against a typo like ``2^1..2^1000``)."""


# --------------------------------------------------------------------------------------
# The sizes option
# --------------------------------------------------------------------------------------

_POW = re.compile(r"^\s*([0-9]+)\s*\^\s*([0-9]+)\s*$", re.ASCII)
_INT = re.compile(r"^[0-9][0-9_]*$", re.ASCII)
MAX_SIZE = 1 << 62
"""The largest size (a dimension of a tensor type is a 64-bit integer)."""


def _number(text: str, what: str) -> int:
    t = text.strip()
    m = _POW.match(t)
    if m:
        if len(m.group(1)) > 7 or len(m.group(2)) > 3:
            raise InputRejected(f"{what}: {t} is too large (at most 2^62)")
        value = int(m.group(1)) ** int(m.group(2))
    elif _INT.match(t):
        digits = t.replace("_", "")
        if len(digits) > 19:
            raise InputRejected(f"{what}: {t[:20]}... is too large (at most 2^62)")
        value = int(digits)
    else:
        shown = t if len(t) <= 40 else t[:40] + "..."
        raise InputRejected(f"{what}: expected a positive integer or a power like 2^20 (ASCII digits), got '{shown}'")
    if value > MAX_SIZE:
        raise InputRejected(f"{what}: {t} is too large (at most 2^62)")
    return value


def parse_sizes(spec: str) -> list[int]:
    """The sizes of a ``--sizes`` option (module docstring), in increasing order."""
    what = f"--sizes '{spec if len(spec) <= 40 else spec[:40] + '...'}'"
    spec = spec.strip()
    if not spec:
        raise InputRejected(f"{what}: empty")
    if ".." in spec:
        lo_text, _, rest = spec.partition("..")
        hi_text, _, step_text = rest.partition(":")
        lo, hi = _number(lo_text, what), _number(hi_text, what)
        step = _number(step_text, what) if step_text else 1
        if lo < 1 or hi < lo or step < 1:
            raise InputRejected(f"{what}: a range needs 1 <= first <= last and a positive step")
        if lo & (lo - 1) or hi & (hi - 1):
            raise InputRejected(f"{what}: a range runs over powers of two; its ends must be powers of two (write a list otherwise)")
        exps = range(lo.bit_length() - 1, hi.bit_length(), step)
        sizes = [1 << e for e in exps]
    else:
        sizes = [_number(part, what) for part in spec.split(",") if part.strip() or _fail_empty(what)]
    if any(s < 1 for s in sizes):
        raise InputRejected(f"{what}: sizes must be positive")
    sizes = sorted(set(sizes))
    if len(sizes) > MAX_SIZES:
        raise InputRejected(f"{what}: {len(sizes)} sizes; at most {MAX_SIZES} (use a step: 2^10..2^30:2)")
    return sizes


def _fail_empty(what: str) -> bool:
    raise InputRejected(f"{what}: an empty item in the list")


def format_size(n: int) -> str:
    """``2^20`` for powers of two, the number otherwise."""
    return f"2^{n.bit_length() - 1}" if n > 1 and n & (n - 1) == 0 else str(n)


# --------------------------------------------------------------------------------------
# Dimensions of a program
# --------------------------------------------------------------------------------------


def _tensor_types(module: ModuleOp) -> Iterable[TensorType]:
    for op in walk(module):  # xDSL's walk, in the same order, at a fraction of its cost
        if isinstance(op, func.FuncOp):
            for t in (*op.function_type.inputs.data, *op.function_type.outputs.data):
                if isinstance(t, TensorType):
                    yield t
        for r in op.results:
            if isinstance(r.type, TensorType):
                yield r.type
        for region in op.regions:
            for block in region.blocks:
                for a in block.args:
                    if isinstance(a.type, TensorType):
                        yield a.type


def program_dims(module: ModuleOp) -> Counter[int]:
    """How often each dimension size occurs in the program's tensor types."""
    out: Counter[int] = Counter()
    for t in _tensor_types(module):
        out.update(t.get_shape())
    return out


def choose_dim(module: ModuleOp, dim: int | None) -> int:
    """The dimension ``--sizes`` substitutes: ``dim`` (which must occur) or the largest."""
    dims = program_dims(module)
    if not dims:
        raise InputRejected("the program has no !dist.tensor dimensions to re-instantiate at other sizes")
    if dim is None:
        return max(dims)
    if dim not in dims:
        listed = ", ".join(str(d) for d in sorted(dims))
        raise InputRejected(f"--dim {dim}: no tensor of the program has a dimension of size {dim} (its dimensions: {listed})")
    return dim


# --------------------------------------------------------------------------------------
# Substitution
# --------------------------------------------------------------------------------------


def _map_type(t: Attribute, mapping: Mapping[int, int]) -> Attribute:
    if isinstance(t, TensorType):
        shape = t.get_shape()
        new = tuple(mapping.get(d, d) for d in shape)
        return t if new == shape else t.with_(shape=new)
    return t


def _retype(value: SSAValue, mapping: Mapping[int, int]) -> None:
    new = _map_type(value.type, mapping)
    if new is not value.type:
        # xDSL values keep their type in a plain field; substituting sizes changes no
        # use, so the values are retyped where they are instead of being rebuilt.
        value._type = new  # noqa: SLF001


def substitute(module: ModuleOp, mapping: Mapping[int, int]) -> ModuleOp:
    """A copy of ``module`` in which every tensor dimension ``d`` in ``mapping`` becomes
    ``mapping[d]`` (all at once, so ``{512: 1024, 1024: 3072}`` swaps nothing twice).
    Verifying the copy checks xDSL's generic constraints only on op shapes that the
    original and its copies have not shown to hold (``verifier.share_shapes``)."""
    out = clone(module)
    share_shapes(out, module)
    mapping = {d: s for d, s in mapping.items() if d != s}
    if not mapping:
        return out
    for op in walk(out):
        for r in op.results:
            _retype(r, mapping)
        for region in op.regions:
            for block in region.blocks:
                for a in block.args:
                    _retype(a, mapping)
        if isinstance(op, func.FuncOp):
            ft = op.function_type
            op.function_type = FunctionType.from_lists(
                [_map_type(t, mapping) for t in ft.inputs.data], [_map_type(t, mapping) for t in ft.outputs.data]
            )
    return out


def at_size(module: ModuleOp, dim: int, size: int) -> ModuleOp:
    """The program with dimension ``dim`` replaced by ``size`` everywhere."""
    return substitute(module, {dim: size})


def fitting(module: ModuleOp, ranks: int, dim: int, sizes: Sequence[int]) -> list[bool]:
    """Whether the program, with ``dim`` replaced by each size, can run on ``ranks``
    ranks as far as its types say: its meshes fit ``ranks`` and every ``at<r>`` is inside
    its axis (``runtime.npz.check_sizes``' rules, for all sizes at once). Any size fits
    a sliced dim (blocks of ceil(s/n) where the ranks do not divide it); the few rules
    that depend on how blocks fall (a reshape, a remesh, a ``to_local`` of such a dim)
    are checked when the schedule is built at that size."""
    from distir.dialects.dist import resolve_grids
    from distir.dialects.placements import At

    try:
        grids = resolve_grids(module, ranks)
    except InputRejected:
        return [False] * len(sizes)
    for t in _tensor_types(module):
        grid = grids.get(t.mesh_name)
        if grid is None:
            continue
        placements = t.get_placements()
        if len(placements) != len(grid.sizes):
            return [False] * len(sizes)
        for a, p in enumerate(placements):
            if isinstance(p, At) and p.rank.data >= grid.sizes[a]:
                return [False] * len(sizes)
    return [True] * len(sizes)


def unpadded(module: ModuleOp, ranks: int, dim: int, sizes: Sequence[int]) -> list[bool]:
    """Whether, with ``dim`` replaced by each size, every sliced dimension of the
    program divides by the ranks that slice it, so that no block is padded (a program
    that fits no size is unpadded at none)."""
    from distir.dialects import layout
    from distir.dialects.dist import resolve_grids

    if not any(fitting(module, ranks, dim, sizes)):
        return [False] * len(sizes)
    grids = resolve_grids(module, ranks)
    rules: set[tuple[int, int]] = set()
    for t in _tensor_types(module):
        grid = grids.get(t.mesh_name)
        if grid is None:
            continue
        placements = t.get_placements()
        shape = t.get_shape()
        for d in layout.sliced_dims(placements):
            if d < len(shape):
                n = layout.group_size(grid.sizes, layout.slicing_axes(placements, d))
                if n is not None and n > 1:
                    rules.add((shape[d], n))
    return [all((size if extent == dim else extent) % n == 0 for extent, n in rules) for size in sizes]


def rank_bytes(module: ModuleOp, ranks: int, dim: int, size: int) -> int:
    """Bytes of one rank's share of the function arguments with ``dim`` replaced by
    ``size`` (the largest over ranks: a value ``at<r>`` counts whole)."""
    from distir.dialects import layout
    from distir.dialects.dist import element_bytes, resolve_grids

    grids = resolve_grids(module, ranks)
    total = 0
    for op in module.walk():
        if isinstance(op, func.FuncOp):
            for t in op.function_type.inputs.data:
                if isinstance(t, TensorType) and t.mesh_name in grids:
                    shape = [size if x == dim else x for x in t.get_shape()]
                    local = layout.local_shape(shape, t.get_placements(), grids[t.mesh_name].sizes)
                    total += math.prod(local) * element_bytes(t.element_type)
    return total


def reduced(module: ModuleOp, divisor: int) -> ModuleOp:
    """The program at small shapes for the interpreter check: every dimension d that
    ``divisor`` (the rank counts and chunk counts the schedules slice by) divides becomes
    ``divisor``, a larger one that it does not divide ``divisor + d mod divisor``, so that
    d keeps its remainder modulo every divisor of ``divisor`` (the blocks of ceil(d/n) fall
    the same way: which ranks hold a shorter block, or none), and a smaller one stays;
    equal dims stay equal."""
    dims = program_dims(module)
    return substitute(module, {d: divisor if d % divisor == 0 else divisor + d % divisor if d > divisor else d for d in dims})
