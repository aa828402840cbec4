"""Shardy (``sdy``) + StableHLO, as ``jax.jit(f).lower(*args).as_text()`` prints it, into
``dist`` IR ready for the ``partition`` pass.

A Shardy mesh is a ``dist.mesh`` with the same axes; a sharding is one placement per mesh
axis (Shardy's doc: https://openxla.org/shardy/sharding_representation)::

    #sdy.sharding<@mesh, [{"x", "y"}, {}]>   dim 0 split by x (outer) then y (inner):
                                              [sliced<0, 0>, sliced<0, 1>] on axes (x, y)
    #sdy.sharding<@mesh, [{}, {}], unreduced={"x"}>    partial sums over x: [local, ...]
    an axis in no dim (or in ``replicated={...}``)     replicated
    {"x":(1)2}   a sub-axis: the mesh axis x is split into factor axes ("x:(1)2",
                 "x:(2)2", ...) of a parent mesh ``@<mesh>_sub``, of which the Shardy
                 mesh is a view (``dist.mesh @mesh ... view @mesh_sub [[0, 1], ...]``)
    {?} / {"x", ?}   open dims: the partitioner may slice them further (``partition``)

A mesh with ``device_ids`` (a permutation of its devices) places values by position: the
block at mesh position k (row-major) is distir's rank k, held by device ``device_ids[k]``;
inside a manual computation ``partition_id`` gives that id and ``replica_groups`` /
``source_target_pairs`` name device ids, mapped to positions. A function may use several
meshes that differ only in their device order (Shardy's collective permute between
them keeps the logical value; each mesh's positions are its ranks); partial sums
(``unreduced``) in such a function are rejected, as they would have to follow their
devices from one order to the other. An axis that is not in the mesh, an axis used twice, a dim whose size
the axes do not divide, or a sharding of the wrong rank is a diagnostic at the sharding.

========================================  ==========================================
Shardy op                                 dist IR (before ``partition``)
========================================  ==========================================
``sdy.mesh @m = <["x"=4]>``               ``dist.mesh @m shape = [4] axes = ["x"]``
argument / result ``sdy.sharding``        the argument's / result's placements; the
                                          body computes on the logical value (``join``,
                                          ``drop``, ``reduce`` to ``unplaced``; ``slice``,
                                          ``repl`` back)
``sdy.sharding_constraint %x <S>``        the value placed as S there (``slice``/``repl``
``sdy.reshard %x <S>``, op attribute      to S, ``join``/``drop`` back): kept by
``sdy.sharding = #sdy.sharding_per_value``  ``partition``
``sdy.all_gather [{..}, ..] %x            ``coll.all_gather`` of each listed axis (the
  out_sharding=<S>``                      innermost first) from S with the axes added
``sdy.all_slice [..] %x out_sharding=``   ``dist.take_slice`` of each listed axis
``sdy.all_to_all [{"x"}: 0->1] %x ..``    ``coll.all_to_all dim 1`` over x
``sdy.reduce_scatter [..] %x ..``         ``coll.reduce_scatter sum`` from partial sums
``sdy.all_reduce {"x"} %x ..``            ``coll.all_reduce sum`` over x from partial sums
``sdy.collective_permute %x ..``          ``coll.permute`` of the devices' blocks from the
                                          operand's sharding to out_sharding (each device
                                          gets the block it holds after; a reshard by
                                          ``partition`` when the operand's sharding is not
                                          written down)
``sdy.manual_computation(..)              the body per device (see ``ManualTranslator``): its
  in_shardings=[..] out_shardings=[..]    values ``local`` on the manual axes, StableHLO's
  manual_axes={..} (args) {..}``          collectives in generic form become ``coll`` ops
                                          (``collective_permute``: ``coll.permute``, see
                                          ``plan_permute``)
========================================  ==========================================

Shardy's collectives keep the logical (global) value and change only how it is laid
out, so that is what distir computes: ``all_reduce`` and ``reduce_scatter`` take a value
that is unreduced (``local``) on their axes -- from an unreduced argument or the partial
sums of a ``dot_general`` over a sliced contracted dim.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import FunctionType, IntegerAttr, IntegerType, ModuleOp, UnrealizedConversionCastOp, i64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Span

from distir.dialects import coll, dist, layout
from distir.dialects.collectives.permute import check_pairs
from distir.dialects.diagnostics import MAX_RANKS
from distir.dialects.dist import RuleError, TensorType
from distir.dialects.placements import LOCAL, REPLICATED, UNPLACED, At, Local, Placement, Replicated, Sliced
from distir.dialects.placements import sliced as sliced_placement  # (``sliced`` here: the axes a slicing leaves)
from distir.frontends import device_values, stablehlo, stablehlo_verify
from distir.frontends.device_values import DevVal
from distir.frontends.mlir_text import Dense, Module, OpNode, Reader, TensorT, read_module
from distir.frontends.stablehlo import Translator, Val, shape_of

# ======================================================================================
# Shardings
# ======================================================================================


ONE_DEVICE_AXIS = "_"
"""The axis of the one-rank mesh of a program without ``sdy.mesh`` (or with a mesh of no
axes): a one-device program, every value replicated on that one rank."""


@dataclass(frozen=True)
class AxisRef:
    """A mesh axis, or its sub-axis ``"x":(pre)size`` (the axis split in factors of sizes
    pre, size, rest; this is the second)."""

    name: str
    pre: int = 1
    size: int = 0  # 0: the whole axis

    def text(self) -> str:
        return f'"{self.name}"' + (f":({self.pre}){self.size}" if self.size else "")


@dataclass(frozen=True)
class DimSharding:
    axes: tuple[AxisRef, ...]
    open: bool = False
    priority: int | None = None  # ``p<N>``: Shardy's propagation order (no meaning in distir)


@dataclass(frozen=True)
class Sharding:
    mesh: str
    dims: tuple[DimSharding, ...]
    replicated: tuple[AxisRef, ...] = ()
    unreduced: tuple[AxisRef, ...] = ()
    start: int = 0
    end: int = 0


@dataclass
class Mesh:
    """A Shardy mesh: axis names and sizes, and the factor split of each axis that
    sub-axes need (sizes of the factors, major first)."""

    name: str
    axes: list[tuple[str, int]]
    span: Span
    cuts: dict[str, set[int]] = field(default_factory=dict)
    device_ids: list[int] | None = None

    def size(self, axis: str) -> int | None:
        for n, s in self.axes:
            if n == axis:
                return s
        return None

    def factors(self, axis: str) -> list[tuple[int, int]]:
        """(pre, size) of each factor axis of ``axis``, major first."""
        total = self.size(axis) or 1
        cuts = sorted({1, total, *self.cuts.get(axis, set())})
        return [(a, b // a) for a, b in zip(cuts, cuts[1:])]

    def refinable(self, axis: str) -> bool:
        """Whether the sub-axes used of ``axis`` split it in factors that refine one
        another (each cut divides the next: distir's factor axes)."""
        total = self.size(axis) or 1
        cuts = sorted({1, total, *self.cuts.get(axis, set())})
        return all(b % a == 0 for a, b in zip(cuts, cuts[1:]))

    def refined(self) -> list[tuple[str, int, str, int]]:
        """The parent mesh's axes: (dist axis name, size, Shardy axis, pre). A mesh without
        axes (``<[]>``, or none at all: a one-device program) is one axis ``_`` of size 1."""
        if not self.axes:
            return [(ONE_DEVICE_AXIS, 1, ONE_DEVICE_AXIS, 1)]
        out = []
        for n, s in self.axes:
            fs = self.factors(n)
            if len(fs) <= 1:
                out.append((n, s, n, 1))
            else:
                out += [(f"{n}:({pre}){size}", size, n, pre) for pre, size in fs]
        return out

    @property
    def split(self) -> bool:
        return any(len(self.factors(n)) > 1 for n, _ in self.axes)

    def dist_name(self) -> str:
        return f"{self.name}_sub" if self.split else self.name


def _axis_ref(r: Reader) -> AxisRef:
    name = r.string("an axis name")
    if r.accept(":"):
        r.expect("(", " in a sub-axis")
        pre = r.integer("the sub-axis pre-size")
        r.expect(")")
        size = r.integer("the sub-axis size")
        return AxisRef(name, pre, size)
    return AxisRef(name)


def _axis_set(r: Reader) -> tuple[AxisRef, ...]:
    r.expect("{")
    return tuple(r.items("}", lambda: _axis_ref(r), " or '}' in an axis list"))


def parse_sharding_body(r: Reader, start: int) -> Sharding:
    """``<@mesh, [{"x"}, {}, {?}], replicated={"y"}, unreduced={"z"}>``."""
    r.expect("<", " to open a sharding")
    if r.peek().kind == "sym":
        mesh = r.symbol()
    else:
        raise r.error("expected a mesh symbol (@mesh); inline meshes are not supported")
    r.expect(",", " after the mesh")
    r.expect("[", " to open the dim shardings")
    dims: list[DimSharding] = r.items("]", lambda: _dim_sharding(r), " or ']' between dim shardings")
    replicated: tuple[AxisRef, ...] = ()
    unreduced: tuple[AxisRef, ...] = ()
    seen: set[str] = set()
    while r.accept(","):
        t = r.peek()
        key = r.ident("'replicated' or 'unreduced'")
        if key in seen:
            raise r.error(f"the sharding gives '{key}' twice", t.start, t.end)
        seen.add(key)
        r.expect("=")
        if key == "replicated":
            replicated = _axis_set(r)
        elif key == "unreduced":
            t = r.peek()
            if t.kind == "ident":  # the reduction of the unreduced axes: `unreduced=max{"z"}`
                r.next()
                if t.text != "sum":
                    raise r.error(f"unreduced axes reduced by '{t.text}' are not supported (distir's unreduced values are partial sums)", t.start, t.end)
            unreduced = _axis_set(r)
        else:
            raise r.error(f"unknown sharding clause '{key}'")
    end = r.expect(">", " to close the sharding").end
    return Sharding(mesh, tuple(dims), replicated, unreduced, start, end)


def _dim_sharding(r: Reader) -> DimSharding:
    r.expect("{", " to open a dim sharding")
    axes: list[AxisRef] = []
    is_open = False
    if not r.accept("}"):
        while True:
            if r.accept("?"):
                is_open = True
                r.expect("}", " after '?'")
                break
            axes.append(_axis_ref(r))
            if r.accept("}"):
                break
            r.expect(",", " or '}' in a dim sharding")
    t = r.peek()
    priority = None
    if t.kind == "ident" and t.text.startswith("p") and t.text[1:].isdigit():
        r.next()  # priority: propagation order in Shardy, no meaning here, but Shardy's rules
        digits = t.text[1:]
        if len(digits) > 1 and digits.startswith("0"):
            raise r.error(f"priority {t.text} has leading zeros (Shardy writes p<N>, e.g. p1)", t.start, t.end)
        priority = int(digits)
        if priority >= 2**63:
            raise r.error(f"priority {t.text} does not fit a 64-bit integer", t.start, t.end)
        if not axes and not is_open:
            raise r.error(f"a closed dim sharding without axes cannot have a priority ({t.text})", t.start, t.end)
    return DimSharding(tuple(axes), is_open, priority)


def _sharding_attr(r: Reader, start: int) -> Sharding:
    return parse_sharding_body(r, start)


def _sharding_list(r: Reader) -> list[Sharding]:
    """``[<@m, [..]>, ...]`` (``[]`` allowed; each may be spelled ``#sdy.sharding<..>``)."""
    r.expect("[")

    def one() -> Sharding:
        start = r.peek().start
        if r.peek().kind == "hash" and r.peek().text == "#sdy.sharding":
            r.next()
        return parse_sharding_body(r, start)

    return r.items("]", one)


def _sharding_per_value(r: Reader, start: int) -> list[Sharding]:
    r.expect("<")
    out = _sharding_list(r)
    r.expect(">")
    return out


ATTR_HOOKS = {"#sdy.sharding": _sharding_attr, "#sdy.sharding_per_value": _sharding_per_value}


# ======================================================================================
# Shardy's rules for axis references and shardings (its verifier, ``verifiers.cc``)
# ======================================================================================


def axis_span(ref: AxisRef, size: int) -> tuple[int, int]:
    """(pre-size, next pre-size) of an axis reference on an axis of ``size``."""
    return (ref.pre, ref.pre * ref.size) if ref.size else (1, size)


def check_axis_ref(ref: AxisRef, mesh: Mesh, error) -> None:
    """A sub-axis ``"a":(pre)size`` of an axis of size n: pre >= 1, size > 1, pre * size
    divides n, and it is not the whole axis (which is written ``"a"``)."""
    n = mesh.size(ref.name)
    if n is None or not ref.size:  # an axis not in the mesh: MeshMap.expand says so, where it is used
        return
    if ref.pre < 1:
        raise error(f"sub-axis {ref.text()}: its pre-size must be at least 1")
    if ref.size <= 1:
        raise error(f"sub-axis {ref.text()}: its size must be greater than 1")
    if n % (ref.pre * ref.size):
        raise error(f'sub-axis {ref.text()} does not divide axis "{ref.name}" of size {n}')
    if ref.size == n:
        raise error(f'sub-axis {ref.text()} is the whole axis "{ref.name}": write "{ref.name}"')


def check_axis_list(refs: Sequence[AxisRef], mesh: Mesh, error) -> None:
    """Each reference valid, no two consecutive sub-axes of one axis that are one
    sub-axis (``"x":(1)2, "x":(2)2`` is ``"x"`` on an axis of 4)."""
    for ref in refs:
        check_axis_ref(ref, mesh, error)
    for a, b in zip(refs, refs[1:]):
        if a.name == b.name and a.size and b.size and a.pre * a.size == b.pre:
            raise error(f"consecutive sub-axes {a.text()}, {b.text()} are one sub-axis: write them as one")


def mesh_order(mesh: Mesh, ref: AxisRef) -> tuple[int, int, int]:
    """Shardy's order of axis references: the mesh's axis order, then the sub-axes."""
    index = next((i for i, (n, _) in enumerate(mesh.axes) if n == ref.name), len(mesh.axes))
    n = mesh.size(ref.name) or 1
    pre, nxt = axis_span(ref, n)
    return index, pre, nxt


def check_sharding(s: Sharding, mesh: Mesh, error) -> None:
    """Shardy's rules for a sharding (besides those ``MeshMap.placements`` checks: axes
    used twice, dims the axes do not divide): valid axis lists, and replicated and
    unreduced axes in the mesh's order."""
    for d in s.dims:
        check_axis_list(d.axes, mesh, error)
    for what, refs in (("replicated", s.replicated), ("unreduced", s.unreduced)):
        check_axis_list(refs, mesh, error)
        keys = [mesh_order(mesh, r) for r in refs]
        if keys != sorted(keys):
            raise error(f"the {what} axes {{{', '.join(r.text() for r in refs)}}} are not in the mesh's order")


# ======================================================================================
# Custom forms of the sdy ops
# ======================================================================================


def _mesh(r: Reader, node: OpNode) -> None:
    node.sym = r.symbol("the mesh name")
    r.expect("=")
    if r.peek().kind == "hash":  # #sdy.mesh<...>
        r.next()
    r.expect("<", " to open the mesh")
    axes: list[tuple[str, int]] = []
    if r.accept("["):
        if not r.accept("]"):
            while True:
                t = r.peek()
                name = r.string("an axis name")
                r.expect("=", " after the axis name")
                size = r.integer("the axis size")
                if size < 1:
                    raise r.error(f"axis \"{name}\" has size {size}", t.start, r.pos)
                axes.append((name, size))
                if math.prod(s for _, s in axes) > MAX_RANKS:
                    raise r.error(
                        f"the mesh has {math.prod(s for _, s in axes)} devices with axis \"{name}\" of size {size}: "
                        f"distir handles meshes of at most {MAX_RANKS} devices",
                        t.start,
                        r.pos,
                    )
                if r.accept("]"):
                    break
                r.expect(",", " or ']' between axes")
        if r.accept(","):
            _device_ids(r, node, axes)
    elif r.peek().text == "device_ids":
        _device_ids(r, node, axes)
    r.expect(">", " to close the mesh")
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    node.attrs["axes"] = axes


def _device_ids(r: Reader, node: OpNode, axes: list[tuple[str, int]]) -> None:
    t = r.peek()
    r.keyword("device_ids")
    r.expect("=")
    ids = r.int_list("the device ids")
    n = math.prod(s for _, s in axes)
    if sorted(ids) != list(range(n)):
        raise r.error(f"device_ids must name each of the mesh's {n} devices 0 .. {n - 1} once, got {ids}", t.start, r.pos)
    node.attrs["device_ids"] = ids


def _sharded_value(r: Reader, node: OpNode) -> None:
    """``%x <@mesh, [..]> : T`` (sharding_constraint, reshard)."""
    node.operands = [r.value()]
    node.attrs["sharding"] = parse_sharding_body(r, r.peek().start)
    if r.at("{"):
        node.attrs.update(r.attr_dict())
    r.expect(":")
    t = r.type()
    node.in_types, node.out_types = [t], [t]
    r.check_counts(node)


def _collective(kind: str):
    def hook(r: Reader, node: OpNode) -> None:
        start = r.peek().start
        if kind in ("all_reduce", "reduce_scatter") and r.peek().kind == "ident":
            t = r.next()  # the reduction (Shardy's newest syntax: `sdy.all_reduce max {"y"} ..`)
            if t.text != "sum":
                raise r.error(f"'sdy.{kind}' with reduction '{t.text}' is not supported (distir's unreduced values are partial sums)", t.start, t.end)
        if kind in ("all_gather", "all_slice", "reduce_scatter"):
            r.expect("[", f" to open the axes of 'sdy.{kind}'")
            per_dim: list[tuple[AxisRef, ...]] = []
            if not r.accept("]"):
                while True:
                    per_dim.append(_axis_set(r))
                    if r.accept("]"):
                        break
                    r.expect(",")
            node.attrs["axes"] = per_dim
        elif kind == "all_to_all":
            node.attrs["moves"] = _all_to_all_moves(r)
        elif kind == "all_reduce":
            node.attrs["axes"] = _axis_set(r)
        node.attrs["axes_span"] = (start, r.pos)
        node.operands = [r.value()]
        r.keyword("out_sharding")
        r.expect("=")
        node.attrs["sharding"] = parse_sharding_body(r, r.peek().start)
        if r.at("{"):
            node.attrs.update(r.attr_dict())
        r.expect(":")
        t = r.type()
        node.in_types, node.out_types = [t], [t]
        r.check_counts(node)

    return hook


def _all_to_all_moves(r: Reader) -> list[tuple[tuple[AxisRef, ...], int, int]]:
    """``[{"x"}: 0->1, {"y"}: 2->3]`` or the older ``[{"x": 0->1}]``."""
    r.expect("[")
    out = []
    if r.accept("]"):
        return out
    while True:
        r.expect("{")
        axes = [_axis_ref(r)]
        while r.accept(","):
            axes.append(_axis_ref(r))
        if r.accept("}"):
            r.expect(":")
            src = r.integer("the source dim")
            r.expect("->")
            tgt = r.integer("the target dim")
        else:  # old form: {"x": 0->1} reads the axis as a sub-axis... not supported
            raise r.error("expected '}' then ': SRC->TGT'")
        out.append((tuple(axes), src, tgt))
        if r.accept("]"):
            return out
        r.expect(",")


def _manual(r: Reader, node: OpNode) -> None:
    r.expect("(")
    node.operands = r.values()
    r.expect(")")
    for key in ("in_shardings", "out_shardings"):
        r.keyword(key)
        r.expect("=")
        node.attrs[key] = _sharding_list(r)
    r.keyword("manual_axes")
    r.expect("=")
    node.attrs["manual_axes"] = _axis_set(r)
    r.expect("(", " to open the body's arguments")
    args = r.block_args(")")
    body = r.region()
    if body[0].args:
        raise r.error("the body of sdy.manual_computation takes its arguments before the region")
    body[0].args = args
    node.regions.append(body)
    r.expect(":")
    node.in_types, node.out_types = r.function_type()
    r.check_counts(node)


def _attr_aware(hook):
    """A StableHLO custom form that may carry an attribute dictionary before ``:``
    (``{sdy.sharding = ...}``)."""

    def wrapped(r: Reader, node: OpNode) -> None:
        saved = r.expect

        def expect(text: str, what: str = ""):
            if text == ":" and r.at("{"):
                node.attrs.update(r.attr_dict())
            return saved(text, what)

        r.expect = expect  # type: ignore[method-assign]
        try:
            hook(r, node)
        finally:
            r.expect = saved  # type: ignore[method-assign]

    return wrapped


HOOKS = {name: _attr_aware(h) for name, h in stablehlo.HOOKS.items() if name != "func.func"}
HOOKS["func.func"] = stablehlo.HOOKS["func.func"]
HOOKS.update(
    {
        "sdy.mesh": _mesh,
        "sdy.sharding_constraint": _sharded_value,
        "sdy.reshard": _sharded_value,
        "sdy.all_gather": _collective("all_gather"),
        "sdy.all_slice": _collective("all_slice"),
        "sdy.reduce_scatter": _collective("reduce_scatter"),
        "sdy.all_to_all": _collective("all_to_all"),
        "sdy.all_reduce": _collective("all_reduce"),
        "sdy.collective_permute": _collective("collective_permute"),
        "sdy.manual_computation": _manual,
        "sdy.return": stablehlo.HOOKS["stablehlo.return"],
    }
)


# ======================================================================================
# Placements
# ======================================================================================


class MeshMap:
    """A Shardy mesh as the dist mesh its values live on (factor axes for sub-axes)."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.axes = mesh.refined()
        self.name = mesh.dist_name()

    @property
    def naxes(self) -> int:
        return len(self.axes)

    def sizes(self) -> tuple[int, ...]:
        return tuple(s for _, s, _, _ in self.axes)

    def device_ids(self) -> list[int]:
        """The device id at each position of the mesh (row-major), which is the rank that
        holds a value's block there (``device_ids``, or 0, 1, ...)."""
        return list(self.mesh.device_ids or range(math.prod(self.sizes())))

    def same_devices_as(self, other: MeshMap) -> bool:
        """Whether ``other`` has the same axes (a mesh over the same devices, in another
        order: its values are placed by position, as on this one)."""
        return self.mesh.axes == other.mesh.axes and self.axes == other.axes

    def expand(self, ref: AxisRef, error) -> list[int]:
        """The dist axes (indices) an axis reference covers, major first."""
        size = self.mesh.size(ref.name)
        if size is None:
            names = ", ".join(f'"{n}"' for n, _ in self.mesh.axes) or "none"
            raise error(f'axis "{ref.name}" is not in mesh @{self.mesh.name} (its axes: {names})')
        if not ref.size:
            return [i for i, (_, _, ax, _) in enumerate(self.axes) if ax == ref.name]
        if ref.pre < 1 or size % (ref.pre * ref.size) or ref.size < 1:
            raise error(f'sub-axis {ref.text()} does not divide axis "{ref.name}" of size {size}')
        out = []
        for i, (_, s, ax, pre) in enumerate(self.axes):
            if ax == ref.name and ref.pre <= pre < ref.pre * ref.size:
                out.append(i)
        return out

    def placements(self, s: Sharding, shape: Sequence[int], error) -> list[Placement]:
        """One placement per dist axis for a value of ``shape`` sharded as ``s``."""
        if len(s.dims) != len(shape):
            raise error(f"the sharding has {len(s.dims)} dim(s) for a tensor of rank {len(shape)}")
        out: list[Placement] = [REPLICATED] * self.naxes
        used: dict[int, str] = {}

        def claim(i: int, ref: AxisRef) -> None:
            if i in used:
                raise error(f"axis {ref.text()} is used twice in the sharding")
            used[i] = ref.text()

        for d, ds in enumerate(s.dims):
            axes = [i for ref in ds.axes for i in self.expand(ref, error)]
            for ref in ds.axes:
                for i in self.expand(ref, error):
                    claim(i, ref)
            # A dim the shards do not divide is cut in blocks of ceil(s/n) (Shardy pads it
            # to a multiple of n); over several axes distir nests the blocks (DESIGN §2).
            for k, i in enumerate(axes):
                out[i] = sliced_placement(d, k) if len(axes) > 1 else sliced_placement(d)
        for ref in s.replicated:
            for i in self.expand(ref, error):
                claim(i, ref)
        for ref in s.unreduced:
            for i in self.expand(ref, error):
                claim(i, ref)
                out[i] = LOCAL
        return out


# ======================================================================================
# Boundaries between placed and global values
# ======================================================================================


def to_global(tr: Translator, x: SSAValue) -> SSAValue:
    """The logical value of a placed value (``unplaced`` on every axis): ``dist.reduce``
    of partial sums, ``dist.load`` of a value held by one rank, ``dist.drop`` of replicas,
    ``dist.join`` of slices (the innermost slicing first)."""
    t = x.type
    assert isinstance(t, TensorType)
    ps = t.get_placements()
    for a, p in enumerate(ps):
        if isinstance(p, Local):
            x = tr.emit(dist.ReduceOp.of(x, op="sum", axis=a)).results[0]
        elif isinstance(p, At):
            x = tr.emit(dist.LoadOp.of(x, axis=a)).results[0]
        elif isinstance(p, Replicated):
            x = tr.emit(dist.DropOp.of(x, axis=a)).results[0]
    while True:
        t = x.type
        assert isinstance(t, TensorType)
        dims = sorted(layout.sliced_dims(t.get_placements()))
        if not dims:
            return x
        innermost = layout.slicing_axes(t.get_placements(), dims[0])[-1]
        x = tr.emit(dist.JoinOp.of(x, axis=innermost)).results[0]


def from_global(tr: Translator, x: SSAValue, target: Sequence[Placement], what: str) -> SSAValue:
    """A global value placed as ``target``: ``dist.slice`` (outermost slicing first) and
    ``dist.repl``; partial sums (``local``) cannot be made from a logical value by a
    primitive, so a target with ``local`` axes is an ``unrealized_conversion_cast`` that
    ``partition`` resolves from a value that is already partial there."""
    t = x.type
    assert isinstance(t, TensorType)
    if any(isinstance(p, Local) for p in target):
        cast = UnrealizedConversionCastOp.get([x], [t.with_(placements=list(target))])
        cast.attributes["partition.what"] = _str_attr(what)
        return tr.emit(cast).results[0]
    for d in layout.sliced_dims(list(target)):
        for a in layout.slicing_axes(list(target), d):
            x = tr.emit(dist.SliceOp.of(x, dim=d, axis=a)).results[0]
    for a, p in enumerate(target):
        if isinstance(p, Replicated):
            x = tr.emit(dist.ReplOp.of(x, axis=a)).results[0]
    return x


def _str_attr(s: str):
    from xdsl.dialects.builtin import StringAttr

    return StringAttr(s)


# ======================================================================================
# Import
# ======================================================================================


class SdyImport:
    """Imports one module: meshes, then each public function."""

    def __init__(self, ast: Module):
        self.ast = ast
        self.meshes: dict[str, Mesh] = {}
        self.maps: dict[str, MeshMap] = {}
        self.spans: dict[Operation, Span] = {}

    def error(self, msg: str, start: int, end: int) -> ParseError:
        return ParseError(Span(start, max(end, start + 1), self.ast.source), msg)

    def sharding_error(self, s: Sharding):
        def error(msg: str) -> ParseError:
            return self.error(msg, s.start, s.end)

        return error

    def run(self) -> ModuleOp:
        for node in self.ast.ops:
            if node.name == "sdy.mesh":
                if node.sym in self.meshes:
                    raise self.error(f"mesh @{node.sym} is defined twice", node.span.start, node.span.end)
                self.meshes[node.sym or ""] = Mesh(node.sym or "", node.attrs["axes"], node.span, device_ids=node.attrs.get("device_ids"))
            elif node.name != "func.func":
                raise self.error(f"unsupported op '{node.name}' at module level", node.span.start, node.span.end)
        for s in self._all_shardings():
            mesh = self.meshes.get(s.mesh)
            if mesh is None:
                raise self.error(f"unknown mesh @{s.mesh}", s.start, s.end)
            check_sharding(s, mesh, self.sharding_error(s))
            for ref in [r for d in s.dims for r in d.axes] + list(s.replicated) + list(s.unreduced):
                size = mesh.size(ref.name)
                if ref.size and size is not None and ref.pre >= 1 and ref.size >= 1 and size % (ref.pre * ref.size) == 0:
                    mesh.cuts.setdefault(ref.name, set()).update({ref.pre, ref.pre * ref.size})
        for m in self.meshes.values():
            for axis, _ in m.axes:
                if not m.refinable(axis):
                    used = ", ".join(f'"{axis}":({a})' for a in sorted(m.cuts.get(axis, set())))
                    raise self.error(
                        f'the sub-axes of "{axis}" used in this module split it in factors that do not refine one another (cuts at {used}); '
                        "distir needs one factorisation of each axis",
                        m.span.start,
                        m.span.end,
                    )
        self.maps = {n: MeshMap(m) for n, m in self.meshes.items()}
        out = ModuleOp([])
        for name, m in self.maps.items():
            if m.mesh.split:
                parent = dist.MeshOp.create_mesh(m.name, list(m.sizes()), [a for a, _, _, _ in m.axes])
                factors = [[i for i, (_, _, ax, _) in enumerate(m.axes) if ax == n] for n, _ in m.mesh.axes]
                view = dist.MeshOp.create_mesh(name, [s for _, s in m.mesh.axes], [n for n, _ in m.mesh.axes], m.name, factors)
                out.body.block.add_ops([parent, view])
                self.spans[parent] = self.spans[view] = m.mesh.span
            else:
                op = dist.MeshOp.create_mesh(name, list(m.sizes()), [a for a, _, _, _ in m.axes])
                out.body.block.add_op(op)
                self.spans[op] = m.mesh.span
        publics = [n for n in self.ast.ops if n.name == "func.func" and n.attrs.get("visibility") != "private"]
        if not publics:
            raise self.error("no public function to import", 0, 1)
        default = None
        for n in publics:
            f = self.function(n, out)
            if default is None:
                default = f
        return out

    def _all_shardings(self) -> list[Sharding]:
        out: list[Sharding] = []

        def visit(ops: list[OpNode]) -> None:
            for op in ops:
                for v in op.attrs.values():
                    out.extend(_shardings_in(v))
                for d in op.arg_attrs + op.res_attrs:
                    for v in d.values():
                        out.extend(_shardings_in(v))
                for region in op.regions:
                    for b in region:
                        visit(b.ops)

        visit(self.ast.ops)
        return out

    def mesh_of(self, node: OpNode) -> MeshMap:
        """The mesh a function's shardings use (one per function)."""
        names: set[str] = set()
        shardings: list[Sharding] = []

        def visit(ops: list[OpNode]) -> None:
            for op in ops:
                for v in list(op.attrs.values()) + [x for d in op.arg_attrs + op.res_attrs for x in d.values()]:
                    shardings.extend(_shardings_in(v))
                    names.update(s.mesh for s in _shardings_in(v))
                if op.name in ("func.call", "call") and op.sym and op.sym not in seen:
                    seen.add(op.sym)
                    callee = funcs.get(op.sym)
                    if callee is not None:
                        visit([callee])
                for region in op.regions:
                    for b in region:
                        visit(b.ops)

        funcs = {n.sym: n for n in self.ast.ops if n.name == "func.func"}
        seen: set[str] = set()
        visit([node])
        used = [self.maps[n] for n in self.maps if n in names]
        if any(not used[0].same_devices_as(m) for m in used[1:]):
            raise self.error(
                f"@{node.sym} uses meshes of different axes ({', '.join('@' + n for n in sorted(names))}); one mesh per function "
                "is supported (or meshes that differ only in their device order)",
                node.span.start,
                node.span.end,
            )
        if len({tuple(m.device_ids()) for m in used}) > 1:
            # values are placed by position on each mesh; partial sums would have to follow
            # their devices from one order to the other
            for s in shardings:
                if s.unreduced:
                    raise self.error("unreduced axes in a function whose meshes differ in device order are not supported", s.start, s.end)
        if used:
            return used[0]
        if len(self.maps) == 1:
            return next(iter(self.maps.values()))
        if not self.maps:
            mesh = Mesh("mesh", [], node.span)
            self.meshes["mesh"] = mesh
            self.maps["mesh"] = MeshMap(mesh)
            return self.maps["mesh"]
        raise self.error(f"@{node.sym} has no sharding to say which mesh it runs on", node.span.start, node.span.end)

    def function(self, node: OpNode, out: ModuleOp) -> func.FuncOp:
        mm = self.mesh_of(node)
        if mm.name not in {op.sym_name.data for op in out.ops if isinstance(op, dist.MeshOp)}:
            op = dist.MeshOp.create_mesh(mm.name, list(mm.sizes()), [a for a, _, _, _ in mm.axes])
            out.body.block.add_op(op)
        tr = SdyTranslator(self, mm, self.ast)
        body = node.regions[0][0]
        block = Block()
        tr.block = block
        args: list[Val] = []
        arg_types = []
        for i, ((v, t), attrs) in enumerate(zip(body.args, node.arg_attrs)):
            tt = tr.tensor_t(t, f"argument %{v.name}", node)
            s = attrs.get("sdy.sharding")
            if s is not None and not isinstance(s, Sharding):
                raise ParseError(v.span, f"the sdy.sharding of argument %{v.name} must be one #sdy.sharding<..>")
            placements = self.placements(mm, s, tt.shape) if isinstance(s, Sharding) else [REPLICATED] * mm.naxes
            ty = TensorType(tt.shape, tr.elt(tt.elt, node), mm.name, placements)
            if isinstance(s, Sharding):
                tr.shardings[v.name] = s
            arg = block.insert_arg(ty, len(block.args))
            arg.name_hint = v.name if stablehlo._valid_hint(v.name) else f"arg{i}"
            arg_types.append(ty)
            tr.node = node
            args.append(to_global(tr, arg))
        tr.node = node
        outs = tr.translate_body(body, args)
        if len(outs) != len(node.out_types):
            raise self.error(f"@{node.sym} returns {len(outs)} value(s), its type lists {len(node.out_types)}", node.span.start, node.span.end)
        results = []
        for i, (o, t, attrs) in enumerate(zip(outs, node.out_types, node.res_attrs + [{}] * len(outs))):
            tt = tr.tensor_t(t, f"result {i}", node)
            if shape_of(o) != tt.shape:
                raise self.error(f"@{node.sym} returns {stablehlo._fmt(shape_of(o))} as result {i}, its type says {tt}", node.span.start, node.span.end)
            x = tr.materialize(o)
            s = attrs.get("sdy.sharding")
            if s is not None and not isinstance(s, Sharding):
                raise self.error(f"the sdy.sharding of result {i} of @{node.sym} must be one #sdy.sharding<..>", node.span.start, node.span.end)
            if isinstance(s, Sharding):
                x = from_global(tr, x, self.placements(mm, s, tt.shape), f"result {i}")
            results.append(x)
        ret = func.ReturnOp(*results)
        block.add_op(ret)
        f = func.FuncOp(node.sym or "main", FunctionType.from_lists(arg_types, [r.type for r in results]), Region(block))
        out.body.block.add_op(f)
        self.spans[f] = node.span
        self.spans[ret] = node.span
        return f

    def placements(self, mm: MeshMap, s: Sharding, shape: Sequence[int]) -> list[Placement]:
        if s.mesh != mm.mesh.name and not (s.mesh in self.maps and mm.same_devices_as(self.maps[s.mesh])):
            raise self.error(f"sharding on mesh @{s.mesh} in a function on mesh @{mm.mesh.name}", s.start, s.end)
        return mm.placements(s, shape, self.sharding_error(s))


def _shardings_in(v: Any) -> list[Sharding]:
    if isinstance(v, Sharding):
        return [v]
    if isinstance(v, list):
        return [s for x in v for s in _shardings_in(x)]
    if isinstance(v, dict):
        return [s for x in v.values() for s in _shardings_in(x)]
    return []


class SdyTranslator(Translator):
    """StableHLO translation with the sdy ops of a global (not manual) function body."""

    def __init__(self, imp: SdyImport, mm: MeshMap, ast: Module):
        super().__init__(ast, mm.name, mm.naxes, imp.spans, SDY_HANDLERS)
        self.imp = imp
        self.mm = mm
        self.shardings: dict[str, Sharding] = {}  # the sharding Shardy records for a value, by name

    def bind(self, node: OpNode, values: Sequence[Val]) -> None:
        shardings = node.attrs.get("sdy.sharding")
        if shardings is not None and not isinstance(shardings, list):
            raise self.error(f"the sdy.sharding of '{node.name}' must be #sdy.sharding_per_value<[..]> (one sharding per result)", node)
        if isinstance(shardings, list) and node.name not in SDY_HANDLERS:
            if len(shardings) != len(values):
                raise self.error(f"'{node.name}' has {len(values)} result(s) but {len(shardings)} sharding(s)", node)
            values = [v if isinstance(v, stablehlo.Const) else constrain(self, self.materialize(v), s, "the op's sdy.sharding") for v, s in zip(values, shardings)]
        super().bind(node, values)
        if isinstance(shardings, list):
            self.shardings.update((r.name, s) for r, s in zip(node.results, shardings) if isinstance(s, Sharding))
        if isinstance(node.attrs.get("sharding"), Sharding) and len(node.results) == 1:
            self.shardings[node.results[0].name] = node.attrs["sharding"]
        if node.name == "sdy.manual_computation":
            self.shardings.update(zip((r.name for r in node.results), node.attrs["out_shardings"]))


def constrain(tr: SdyTranslator, x: SSAValue, s: Sharding, what: str) -> SSAValue:
    """``x`` placed as ``s`` here (a user constraint ``partition`` keeps)."""
    placed = from_global(tr, x, tr.imp.placements(tr.mm, s, shape_of(x)), what)
    return to_global(tr, placed)


SDY_HANDLERS: dict[str, stablehlo.Handler] = {}
_sdy = stablehlo.registers(SDY_HANDLERS)


@_sdy("sdy.sharding_constraint", "sdy.reshard")
def _h_constraint(tr: SdyTranslator, node: OpNode) -> list[Val]:
    v = tr.operand(node, 0)
    if isinstance(v, stablehlo.Const):  # a constant is made wherever it is needed
        return [v]
    x = tr.materialize(v)
    return [constrain(tr, x, node.attrs["sharding"], f"'{node.name}'")]


SDY_ATTRS = (
    "sdy.sharding", "sdy.sharding_rule", "sdy.sharding_origins", "sdy.propagation_edges", "sdy.sharding_group_id",
    "sdy.sharding_origin_name", "sdy.block_arg_sharding_origins", "sdy.result_sharding_origins",
    "sdy.block_arg_propagation_edges", "sdy.result_propagation_edges", "sdy.original_func_name", "sdy.func_manual_axes",
)  # fmt: skip
"""Shardy's attribute names on arguments, results, ops and functions (its
``ir/constants.h``: shardings, rules, propagation metadata, the names its import passes
record); another ``sdy.`` name (a misspelling) is a diagnostic, as is a sharding under
another name: either would leave the value replicated without a word."""
SHARDING_KEYS = ("sdy.sharding", "sharding", "in_shardings", "out_shardings", "out_sharding")


def check_attributes(ops: Sequence[OpNode]) -> None:
    """Shardy's attributes where Shardy reads them (see ``SDY_ATTRS``), in ``ops`` and
    their regions."""
    for op in ops:
        for attrs in (op.attrs, *op.arg_attrs, *op.res_attrs):
            for key, value in attrs.items():
                sharding = bool(_shardings_in(value))
                if key.startswith("sdy.") and key not in SDY_ATTRS:
                    hint = " (a sharding is written 'sdy.sharding')" if sharding else ""
                    raise ParseError(op.span, f"unknown Shardy attribute '{key}' on '{op.name}'{hint}")
                if sharding and key not in SHARDING_KEYS:
                    raise ParseError(op.span, f"a #sdy.sharding under '{key}' on '{op.name}': Shardy reads a sharding only as 'sdy.sharding'")
        for region in op.regions:
            for block in region:
                check_attributes(block.ops)


def sdy_import(text: str, name: str) -> tuple[ModuleOp, dict[Operation, Span]]:
    """Read StableHLO + Shardy text into a dist module (before ``partition``) and the
    source position of every op; StableHLO's rules (``stablehlo_verify.py``) and
    Shardy's attribute names are checked first."""
    ast = read_module(text, name, HOOKS, ATTR_HOOKS)
    check_attributes(ast.ops)
    stablehlo_verify.verify(ast)
    imp = SdyImport(ast)
    module = imp.run()
    return module, imp.spans


# ======================================================================================
# Shardy's explicit collectives (global view: the logical value is kept)
# ======================================================================================


def _with_dims(s: Sharding, dims: list[tuple[AxisRef, ...]], unreduced: tuple[AxisRef, ...] = ()) -> Sharding:
    return Sharding(s.mesh, tuple(DimSharding(d) for d in dims), s.replicated, tuple(s.unreduced) + tuple(unreduced), s.start, s.end)


def _per_dim_axes(tr: SdyTranslator, node: OpNode, rank: int) -> list[tuple[AxisRef, ...]]:
    per_dim = node.attrs["axes"]
    if len(per_dim) != rank:
        s, e = node.attrs["axes_span"]
        raise tr.imp.error(f"'{node.name}' lists axes for {len(per_dim)} dim(s) of a tensor of rank {rank}", s, e)
    return per_dim


def _without(tr: SdyTranslator, node: OpNode, out: Sharding, per_dim: list[tuple[AxisRef, ...]], what: str) -> list[tuple[AxisRef, ...]]:
    """The out_sharding's dims without the op's axes, which each dim must end with."""
    dims = []
    for d, cut in enumerate(per_dim):
        have = out.dims[d].axes if d < len(out.dims) else ()
        if len(cut) > len(have) or have[len(have) - len(cut) :] != cut:
            raise tr.error(f"dim {d} of the out_sharding does not end with the {what} axes {{{', '.join(r.text() for r in cut)}}}", node)
        dims.append(have[: len(have) - len(cut)])
    return dims


def _dist_axes(tr: SdyTranslator, node: OpNode, refs: Sequence[AxisRef]) -> list[int]:
    s, e = node.attrs["axes_span"]
    return [a for r in refs for a in tr.mm.expand(r, lambda msg: tr.imp.error(msg, s, e))]


def _each_axis(tr: SdyTranslator, node: OpNode, y: SSAValue, per_dim: list[tuple[AxisRef, ...]], make, innermost_first: bool = False) -> SSAValue:
    """``make(y, dim, axis)`` for each axis listed for each dim, in order (or innermost
    first)."""
    for d, refs in enumerate(per_dim):
        axes = _dist_axes(tr, node, refs)
        for a in reversed(axes) if innermost_first else axes:
            y = tr.emit_checked(lambda: make(y, d, a)).results[0]
    return y


def _explicit(tr: SdyTranslator, node: OpNode, in_sharding: Sharding, steps) -> list[Val]:
    """An explicit collective: the operand placed as ``in_sharding``, then ``steps``
    (dist/coll ops) to the op's out_sharding, then the logical value again."""
    x = tr.materialize(tr.operand(node, 0))
    out = node.attrs["sharding"]
    shape = shape_of(x)
    in_pl = tr.imp.placements(tr.mm, in_sharding, shape)
    out_pl = tr.imp.placements(tr.mm, out, shape)
    y = from_global(tr, x, in_pl, f"the operand of '{node.name}'")
    y = steps(y)
    if not layout.same_layout(y.type.get_placements(), out_pl):  # type: ignore[attr-defined]
        raise tr.error(
            f"'{node.name}' from {layout.format_placements(in_pl)} gives {layout.format_placements(y.type.get_placements())}, "  # type: ignore[attr-defined]
            f"not its out_sharding {layout.format_placements(out_pl)}",
            node,
        )
    return [to_global(tr, y)]


# Shardy's rules for its collectives (``verifiers.cc``), checked against the operand's
# sharding as Shardy records it: a collective must turn it into its out_sharding.


def operand_sharding(tr: SdyTranslator, node: OpNode, rank: int, required: bool) -> Sharding:
    """The sharding Shardy records for the collective's operand (its argument's, its
    op's ``sdy.sharding``, a collective's out_sharding); ``required``: its absence is a
    diagnostic (all_gather, all_to_all, collective_permute), else fully replicated."""
    out: Sharding = node.attrs["sharding"]
    src = tr.shardings.get(node.operands[0].name)
    if src is None:
        if required:
            raise tr.error(f"'{node.name}' of %{node.operands[0].name}, which has no sharding: Shardy requires one on the operand of this collective", node)
        return Sharding(out.mesh, tuple(DimSharding(()) for _ in range(rank)))
    if node.name != "sdy.collective_permute" and src.mesh != out.mesh:
        raise tr.error(f"'{node.name}': the out_sharding's mesh @{out.mesh} is not the operand's @{src.mesh}", node)
    if len(src.dims) != rank or len(out.dims) != rank:
        raise tr.error(f"'{node.name}': the operand's sharding has {len(src.dims)} dim(s), the out_sharding {len(out.dims)}, the tensor {rank}", node)
    return src


def _canon(mesh: Mesh, name: str, pre: int, nxt: int) -> AxisRef:
    n = mesh.size(name) or 1
    return AxisRef(name) if pre == 1 and nxt == n else AxisRef(name, pre, nxt // pre)


def _span(mesh: Mesh, ref: AxisRef) -> tuple[int, int]:
    return axis_span(ref, mesh.size(ref.name) or 1)


def _fmt_axes(refs: Sequence[AxisRef]) -> str:
    return "{" + ", ".join(r.text() for r in refs) + "}"


def gathered(tr: SdyTranslator, node: OpNode, mesh: Mesh, axes: Sequence[AxisRef], gathering: Sequence[AxisRef], dim: int, what: str) -> list[AxisRef]:
    """``axes`` (a dim's sharding) without ``gathering``, which must be its innermost
    axes (a sub-axis may end one)."""
    out = [_canon(mesh, r.name, *_span(mesh, r)) for r in axes]
    for g in reversed(gathering):
        gp, gn = _span(mesh, g)
        if not out or out[-1].name != g.name or not (_span(mesh, out[-1])[0] <= gp and _span(mesh, out[-1])[1] == gn):
            raise tr.error(f"'{node.name}' {what} axis {g.text()} of dim {dim}, but the operand's dim {dim} is sharded {_fmt_axes(axes)}: it must end with that axis", node)
        sp, _ = _span(mesh, out.pop())
        if gp > sp:
            out.append(_canon(mesh, g.name, sp, gp))
    return out


def sliced(mesh: Mesh, axes: Sequence[AxisRef], slicing: Sequence[AxisRef]) -> list[AxisRef]:
    """``axes`` with ``slicing`` appended (a sub-axis that continues the last one merges
    with it)."""
    out = [_canon(mesh, r.name, *_span(mesh, r)) for r in axes]
    for a in slicing:
        ap, an = _span(mesh, a)
        if out and out[-1].name == a.name and out[-1].size and a.size and _span(mesh, out[-1])[1] == ap:
            out[-1] = _canon(mesh, a.name, _span(mesh, out[-1])[0], an)
        else:
            out.append(_canon(mesh, a.name, ap, an))
    return out


def check_result(tr: SdyTranslator, node: OpNode, mesh: Mesh, dim: int, expected: Sequence[AxisRef]) -> None:
    out: Sharding = node.attrs["sharding"]
    got = [_canon(mesh, r.name, *_span(mesh, r)) for r in out.dims[dim].axes]
    if list(expected) != got:
        raise tr.error(f"'{node.name}' gives dim {dim} the sharding {_fmt_axes(expected)} from its operand's, but its out_sharding says {_fmt_axes(got)}", node)


def check_collective_axes(tr: SdyTranslator, node: OpNode, mesh: Mesh, per_dim: Sequence[Sequence[AxisRef]]) -> None:
    """The op's axes: valid, each used once over all dims."""
    s, e = node.attrs["axes_span"]
    error = lambda msg: tr.imp.error(msg, s, e)  # noqa: E731
    seen: list[AxisRef] = []
    for refs in per_dim:
        check_axis_list(refs, mesh, error)
        for r in refs:
            rp, rn = _span(mesh, r)
            if any(q.name == r.name and rp < _span(mesh, q)[1] and _span(mesh, q)[0] < rn for q in seen):
                raise error(f"'{node.name}' names axis {r.text()} twice")
            seen.append(r)


@_sdy("sdy.all_gather")
def _h_all_gather(tr: SdyTranslator, node: OpNode) -> list[Val]:
    out: Sharding = node.attrs["sharding"]
    rank = len(shape_of(tr.operand(node, 0)))
    per_dim = _per_dim_axes(tr, node, rank)
    if len(out.dims) != rank:
        raise tr.error(f"out_sharding has {len(out.dims)} dim(s) for a tensor of rank {rank}", node)
    mesh = tr.imp.meshes[out.mesh]
    check_collective_axes(tr, node, mesh, per_dim)
    src = operand_sharding(tr, node, rank, required=True)
    for d in range(rank):
        check_result(tr, node, mesh, d, gathered(tr, node, mesh, src.dims[d].axes, per_dim[d], d, "gathers"))
    in_s = _with_dims(out, [out.dims[d].axes + per_dim[d] for d in range(rank)])

    return _explicit(tr, node, in_s, lambda y: _each_axis(tr, node, y, per_dim, lambda y, d, a: coll.AllGatherOp.of(y, axes=[a]), True))


@_sdy("sdy.all_slice")
def _h_all_slice(tr: SdyTranslator, node: OpNode) -> list[Val]:
    out: Sharding = node.attrs["sharding"]
    rank = len(shape_of(tr.operand(node, 0)))
    per_dim = _per_dim_axes(tr, node, rank)
    mesh = tr.imp.meshes[out.mesh]
    check_collective_axes(tr, node, mesh, per_dim)
    src = operand_sharding(tr, node, rank, required=False)
    for d in range(rank):
        check_result(tr, node, mesh, d, sliced(mesh, src.dims[d].axes, per_dim[d]))
    in_s = _with_dims(out, _without(tr, node, out, per_dim, "sliced"))

    return _explicit(tr, node, in_s, lambda y: _each_axis(tr, node, y, per_dim, lambda y, d, a: dist.TakeSliceOp.of(y, dim=d, axis=a)))


@_sdy("sdy.all_to_all")
def _h_all_to_all(tr: SdyTranslator, node: OpNode) -> list[Val]:
    out: Sharding = node.attrs["sharding"]
    rank = len(shape_of(tr.operand(node, 0)))
    if len(out.dims) != rank:
        raise tr.error(f"out_sharding has {len(out.dims)} dim(s) for a tensor of rank {rank}", node)
    dims = [list(out.dims[d].axes) for d in range(rank)]
    moves = node.attrs["moves"]
    check_all_to_all(tr, node, rank)
    for axes, src, tgt in reversed(moves):
        if not (0 <= src < rank and 0 <= tgt < rank) or src == tgt:
            raise tr.error(f"all_to_all move {src}->{tgt} is not between two dims of a tensor of rank {rank}", node)
        if tuple(dims[tgt][len(dims[tgt]) - len(axes) :]) != tuple(axes):
            raise tr.error(f"dim {tgt} of the out_sharding does not end with the moved axes", node)
        dims[tgt] = dims[tgt][: len(dims[tgt]) - len(axes)]
        dims[src] = dims[src] + list(axes)
    in_s = _with_dims(out, [tuple(d) for d in dims])

    def steps(y: SSAValue) -> SSAValue:
        for axes, src, tgt in moves:
            da = _dist_axes(tr, node, axes)
            y = tr.emit_checked(lambda: coll.AllToAllOp.of(y, dim=tgt, axes=da)).results[0]
        return y

    return _explicit(tr, node, in_s, steps)


def check_all_to_all(tr: SdyTranslator, node: OpNode, rank: int) -> None:
    """Shardy's all_to_all: at least one move; source and target dims in range, each dim
    in one move at most, sources ascending; each move's axes end its source dim's
    sharding in the operand and are appended to its target dim's; other dims kept."""
    out: Sharding = node.attrs["sharding"]
    moves = node.attrs["moves"]
    mesh = tr.imp.meshes[out.mesh]
    if not moves:
        raise tr.error("'sdy.all_to_all' moves nothing (its parameter list is empty)", node)
    seen: set[int] = set()
    prev = -1
    for axes, src, tgt in moves:
        for what, d in (("source", src), ("target", tgt)):
            if not 0 <= d < rank:
                raise tr.error(f"'sdy.all_to_all': {what} dim {d} is out of range for a tensor of rank {rank}", node)
        for d in (src, tgt):
            if d in seen:
                raise tr.error(f"'sdy.all_to_all': dim {d} is the source or target of two moves (or both of one)", node)
            seen.add(d)
        if src <= prev:
            raise tr.error(f"'sdy.all_to_all': source dims must ascend ({src} comes after {prev})", node)
        prev = src
    check_collective_axes(tr, node, mesh, [a for a, _, _ in moves])
    op_s = operand_sharding(tr, node, rank, required=True)
    for axes, src, tgt in moves:
        check_result(tr, node, mesh, src, gathered(tr, node, mesh, op_s.dims[src].axes, axes, src, "moves"))
        check_result(tr, node, mesh, tgt, sliced(mesh, op_s.dims[tgt].axes, axes))
    for d in range(rank):
        if d not in seen:
            check_result(tr, node, mesh, d, op_s.dims[d].axes)


@_sdy("sdy.reduce_scatter")
def _h_reduce_scatter(tr: SdyTranslator, node: OpNode) -> list[Val]:
    out: Sharding = node.attrs["sharding"]
    rank = len(shape_of(tr.operand(node, 0)))
    per_dim = _per_dim_axes(tr, node, rank)
    mesh = tr.imp.meshes[out.mesh]
    check_collective_axes(tr, node, mesh, per_dim)
    src = operand_sharding(tr, node, rank, required=False)
    for d in range(rank):
        check_result(tr, node, mesh, d, sliced(mesh, src.dims[d].axes, per_dim[d]))
    in_s = _with_dims(out, _without(tr, node, out, per_dim, "scattered"), tuple(r for d in per_dim for r in d))
    return _explicit(tr, node, in_s, lambda y: _each_axis(tr, node, y, per_dim, lambda y, d, a: coll.ReduceScatterOp.of(y, op="sum", dim=d, axes=[a])))


def check_all_reduce(tr: SdyTranslator, node: OpNode) -> None:
    """Shardy's all_reduce: the out_sharding's dims are the operand's; the reduction axes
    valid and in the mesh's order, slicing no dim of the operand, not replicated in it,
    and not unreduced in the result."""
    out: Sharding = node.attrs["sharding"]
    refs: tuple[AxisRef, ...] = node.attrs["axes"]
    rank = len(shape_of(tr.operand(node, 0)))
    mesh = tr.imp.meshes[out.mesh]
    check_collective_axes(tr, node, mesh, [refs])
    keys = [mesh_order(mesh, r) for r in refs]
    if keys != sorted(keys):
        raise tr.error(f"'sdy.all_reduce': its axes {_fmt_axes(refs)} are not in the mesh's order", node)
    src = operand_sharding(tr, node, rank, required=False)
    for d in range(rank):
        check_result(tr, node, mesh, d, src.dims[d].axes)

    def overlaps(r: AxisRef, q: AxisRef) -> bool:
        rp, rn = _span(mesh, r)
        qp, qn = _span(mesh, q)
        return r.name == q.name and rp < qn and qp < rn

    for r in refs:
        if any(overlaps(r, q) for d in src.dims for q in d.axes) or any(overlaps(r, q) for q in src.replicated):
            raise tr.error(f"'sdy.all_reduce' over {r.text()}, which slices or replicates its operand (a reduction axis must be unreduced there)", node)
        if any(overlaps(r, q) for q in out.unreduced):
            raise tr.error(f"'sdy.all_reduce' over {r.text()}, which its out_sharding leaves unreduced", node)


@_sdy("sdy.all_reduce")
def _h_all_reduce(tr: SdyTranslator, node: OpNode) -> list[Val]:
    out: Sharding = node.attrs["sharding"]
    refs = node.attrs["axes"]
    check_all_reduce(tr, node)
    in_s = _with_dims(out, [d.axes for d in out.dims], tuple(refs))

    def steps(y: SSAValue) -> SSAValue:
        axes = _dist_axes(tr, node, refs)
        return tr.emit_checked(lambda: coll.AllReduceOp.of(y, op="sum", axes=axes)).results[0] if axes else y

    return _explicit(tr, node, in_s, steps)


@_sdy("sdy.collective_permute")
def _h_collective_permute(tr: SdyTranslator, node: OpNode) -> list[Val]:
    """Each device gets the block of the logical value that ``out_sharding`` gives it,
    from a device that holds it under the operand's sharding (itself where it can): one
    ``coll.permute`` of the devices' blocks (``dist.to_local``, ``coll.permute``,
    ``dist.from_local``). Shardy requires every dim to keep its number of blocks, so each
    device sends one block and receives one. The operand's sharding is the one Shardy
    records for it (its argument's, its op's ``sdy.sharding`` or out_sharding; without one
    it is a diagnostic, as in Shardy); with unreduced axes, the op is a reshard that
    ``partition`` plans."""
    x = tr.materialize(tr.operand(node, 0))
    out: Sharding = node.attrs["sharding"]
    src = operand_sharding(tr, node, len(shape_of(x)), required=True)
    a, b = tr.imp.meshes[src.mesh], tr.imp.meshes[out.mesh]
    if a.axes != b.axes:
        raise tr.error(f"'sdy.collective_permute' from mesh @{src.mesh} to @{out.mesh}, whose axes differ", node)
    if src.mesh != out.mesh and (a.device_ids or list(range(math.prod(n for _, n in a.axes)))) == (b.device_ids or list(range(math.prod(n for _, n in b.axes)))):
        raise tr.error(f"'sdy.collective_permute' from mesh @{src.mesh} to @{out.mesh}, which has the same devices in the same order (use one mesh)", node)
    if src.unreduced or out.unreduced:
        return [constrain(tr, x, out, "the out_sharding of 'sdy.collective_permute'")]
    sizes = tr.mm.sizes()
    shape = shape_of(x)
    in_pl, out_pl = tr.imp.placements(tr.mm, src, shape), tr.imp.placements(tr.mm, out, shape)
    for d in range(len(shape)):
        before, after = layout.block_index(in_pl, sizes, [0] * len(sizes), d)[1], layout.block_index(out_pl, sizes, [0] * len(sizes), d)[1]
        if before != after:
            raise tr.error(f"'sdy.collective_permute' splits dim {d} in {before} block(s) before and {after} after: a collective permute keeps each dim's number of blocks", node)
    y = from_global(tr, x, in_pl, "the operand of 'sdy.collective_permute'")
    local_t = y.type.with_(shape=layout.local_shape(shape, in_pl, sizes), placements=[LOCAL] * tr.mm.naxes)  # type: ignore[attr-defined]
    v = tr.emit(dist.ToLocalOp.make([y], [local_t])).results[0]
    axes, options = plan_permute(block_moves(in_pl, out_pl, sizes, len(shape)), sizes)
    if options.get("offset") != 0:
        v = tr.emit_checked(lambda: coll.PermuteOp.of(v, sizes=sizes, axes=axes, **options)).results[0]
    z = tr.emit(dist.FromLocalOp.make([v], [y.type.with_(placements=out_pl)])).results[0]  # type: ignore[attr-defined]
    return [to_global(tr, z)]


def block_moves(before: Sequence[Placement], after: Sequence[Placement], sizes: Sequence[int], rank: int) -> list[tuple[int, int]]:
    """(source, target) devices that give every device the block it holds under ``after``
    from a device holding it under ``before`` (the device itself where it already holds
    it), for a tensor of ``rank`` dims; both split every dim in the same number of
    blocks, so each block has as many holders before as after."""
    n = math.prod(sizes)

    def key(placements: Sequence[Placement], device: int) -> tuple[int, ...]:
        coords = layout.at_digits(device, sizes)
        return tuple(layout.block_index(placements, sizes, coords, d)[0] for d in range(rank))

    have = [key(before, r) for r in range(n)]
    need = [key(after, r) for r in range(n)]
    pairs = {t: t for t in range(n) if have[t] == need[t]}
    spare: dict[tuple[int, ...], list[int]] = {}
    for r in range(n):
        if r not in pairs:
            spare.setdefault(have[r], []).append(r)
    for t in range(n):
        if t not in pairs:
            pairs[t] = spare[need[t]].pop(0)
    return sorted((s, t) for t, s in pairs.items())


# ======================================================================================
# Permutations of the devices' values (coll.permute)
# ======================================================================================


def plan_permute(pairs: Sequence[tuple[int, int]], sizes: Sequence[int]) -> tuple[list[int], dict[str, Any]]:
    """The ``coll.permute`` (its ``axes``, and ``offset`` or ``pairs``) that moves device
    s's value to device t for each (s, t) of ``pairs``, device ids of the whole mesh
    (row-major over its axes of ``sizes``, as StableHLO's ``source_target_pairs`` of a
    mesh with the default device order); a device no pair targets gets zeros. The pairs
    name each device at most once as a source and once as a target.

    When every pair moves along one mesh axis a, the same way in every group of devices
    that differ only on a (the common ring step: ``jax.lax.ppermute`` over one mesh axis),
    it is a permute over ``axes [a]`` of a's coordinates; otherwise one over every axis,
    whose group ranks are the device ids. Either is an ``offset k`` when it is a whole
    rotation (i -> i + k mod n; ``offset 0`` moves nothing) and ``pairs`` otherwise::

        mesh [2, 4], pairs [[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4]]
            -> axes [1], offset 1
        mesh [2, 2], pairs [[0, 3], [3, 0]]  -> axes [0, 1], pairs [[0, 3], [3, 0]]
    """
    for a, size in enumerate(sizes):
        moves = _along_axis(pairs, sizes, a)
        if moves is not None:
            return [a], permute_options(moves, size)
    return list(range(len(sizes))), permute_options(dict(pairs), math.prod(sizes))


def _along_axis(pairs: Sequence[tuple[int, int]], sizes: Sequence[int], a: int) -> dict[int, int] | None:
    """The moves i -> j of coordinates on axis ``a`` when ``pairs`` are those moves in
    every group along ``a`` (the other coordinates kept), else None."""
    moves: dict[int, int] = {}
    for s, t in pairs:
        cs, ct = layout.at_digits(s, sizes), layout.at_digits(t, sizes)
        if any(x != y for b, (x, y) in enumerate(zip(cs, ct)) if b != a) or moves.setdefault(cs[a], ct[a]) != ct[a]:
            return None
    return moves if len(pairs) == len(moves) * (math.prod(sizes) // sizes[a]) else None


def permute_options(moves: dict[int, int], n: int) -> dict[str, Any]:
    """``offset k`` (k in (-n/2, n/2]) when ``moves`` rotate all n ranks by k, else the
    ``pairs``, by source."""
    if n and len(moves) == n:
        k = moves.get(0, 0) % n
        if all(moves[i] == (i + k) % n for i in range(n)):
            return {"offset": k - n if k > n // 2 else k}
    return {"pairs": sorted(moves.items())}


# ======================================================================================
# sdy.manual_computation: the body per device
# ======================================================================================


@_sdy("sdy.manual_computation")
def _h_manual(tr: SdyTranslator, node: OpNode) -> list[Val]:
    """The body runs per device: each operand placed as its in_sharding and seen as each
    device's block (``dist.to_local``); every body value is ``local`` on the manual axes
    (the logical shape is the per-device shape); each body result becomes the global value
    its out_sharding says (``dist.from_local``)."""
    mm = tr.mm
    manual = set(_dist_axes_list(tr, node, node.attrs["manual_axes"]))
    names = {r.name for r in node.attrs["manual_axes"]}
    for what, shardings in (("operand", node.attrs["in_shardings"]), ("result", node.attrs["out_shardings"])):
        for i, sh in enumerate(shardings):
            for d, ds in enumerate(sh.dims):
                first_free = next((k for k, r in enumerate(ds.axes) if r.name not in names), len(ds.axes))
                if any(r.name in names for r in ds.axes[first_free:]):
                    raise tr.imp.error(
                        f"the sharding of {what} {i} of 'sdy.manual_computation' names a free axis before a manual one in dim {d} "
                        f"({_fmt_axes(ds.axes)}): the manual axes come first",
                        sh.start,
                        sh.end,
                    )
    if manual != set(range(mm.naxes)):
        return _partly_manual(tr, node, sorted(manual))
    ins, outs = node.attrs["in_shardings"], node.attrs["out_shardings"]
    body = node.regions[0][0]
    if len(ins) != len(node.operands) or len(body.args) != len(node.operands):
        raise tr.error(f"'sdy.manual_computation' has {len(node.operands)} operand(s), {len(ins)} in_sharding(s) and {len(body.args)} body argument(s)", node)
    if len(outs) != len(node.results):
        raise tr.error(f"'sdy.manual_computation' has {len(node.results)} result(s) and {len(outs)} out_sharding(s)", node)
    sizes = mm.sizes()
    args = []
    for i, ((v, t), s) in enumerate(zip(body.args, ins)):
        x = tr.materialize(tr.operand(node, i))
        placed = from_global(tr, x, tr.imp.placements(mm, s, shape_of(x)), f"operand {i} of 'sdy.manual_computation'")
        pt = placed.type
        assert isinstance(pt, TensorType)
        local = layout.local_shape(pt.get_shape(), pt.get_placements(), sizes)
        tt = tr.tensor_t(t, f"body argument %{v.name}", node)
        if tuple(tt.shape) != tuple(local):
            raise ParseError(v.span, f"body argument %{v.name} is {tt}, but each device holds a {stablehlo._fmt(local)} block of operand {i}")
        lt = pt.with_(shape=local, placements=[LOCAL] * mm.naxes)
        args.append(tr.emit(dist.ToLocalOp.make([placed], [lt])).results[0])
    meshes = {sh.mesh for sh in [*ins, *outs]}
    if len(meshes) > 1:
        raise tr.error(f"the shardings of 'sdy.manual_computation' name several meshes ({', '.join('@' + m for m in sorted(meshes))})", node)
    inner = ManualTranslator(tr, tr.imp.maps[meshes.pop()] if meshes else mm)
    results = inner.translate_body(body, args)
    tr.node = node
    if len(results) != len(node.results):
        raise tr.error(f"the body returns {len(results)} value(s) for {len(node.results)} result(s)", node)
    out_vals: list[Val] = []
    for i, (r, s, t) in enumerate(zip(results, outs, node.out_types)):
        rv = inner.materialize(r)
        gt = tr.tensor_t(t, f"result {i}", node)
        pl = tr.imp.placements(mm, s, gt.shape)
        rt_ = rv.type
        assert isinstance(rt_, TensorType)
        want = layout.local_shape(gt.shape, pl, sizes)
        if tuple(want) != rt_.get_shape():
            raise tr.error(f"the body returns {rt_.format_shape()} per device as result {i}, its out_sharding needs {stablehlo._fmt(want)}", node)
        placed_t = rt_.with_(shape=gt.shape, placements=pl)
        y = tr.emit(dist.FromLocalOp.make([rv], [placed_t])).results[0]
        out_vals.append(to_global(tr, y))
    return out_vals


def _partly_manual(tr: SdyTranslator, node: OpNode, manual: list[int]) -> list[Val]:
    """A manual computation over some of the mesh axes (``shard_map(.., axis_names=..)``):
    the body is per device on the manual axes and global on the free ones, which the
    partitioner places as it places the rest of the program. Each operand is pinned to its
    in_sharding's manual axes (``dist.slice``/``dist.repl``) and seen as each device's
    block there (``dist.to_local``: ``local`` on the manual axes, ``unplaced`` on the
    others); each result is the blocks seen as one value (``dist.from_local``) and freed
    (``dist.join``/``dist.drop``). The free axes of the in/out shardings are constraints
    on the operands and results, outside the body."""
    mm = tr.mm
    ins, outs = node.attrs["in_shardings"], node.attrs["out_shardings"]
    body = node.regions[0][0]
    if len(ins) != len(node.operands) or len(body.args) != len(node.operands):
        raise tr.error(f"'sdy.manual_computation' has {len(node.operands)} operand(s), {len(ins)} in_sharding(s) and {len(body.args)} body argument(s)", node)
    if len(outs) != len(node.results):
        raise tr.error(f"'sdy.manual_computation' has {len(node.results)} result(s) and {len(outs)} out_sharding(s)", node)
    meshes = {sh.mesh for sh in [*ins, *outs]}
    if len(meshes) > 1:
        raise tr.error(f"the shardings of 'sdy.manual_computation' name several meshes ({', '.join('@' + m for m in sorted(meshes))})", node)
    sizes = mm.sizes()
    free = [a for a in range(mm.naxes) if a not in manual]

    def split(s: Sharding, shape: Sequence[int], what: str) -> tuple[list[Placement], Sharding | None]:
        """The sharding's placements on the manual axes, and its constraint on the free
        axes (None when it names none of them)."""
        pl = tr.imp.placements(mm, s, shape)
        if any(isinstance(pl[a], Local) for a in manual):
            raise tr.error(f"{what}: unreduced manual axes in a manual computation over some of the mesh axes are not supported", node)
        names = {ax for _, _, ax, _ in (mm.axes[a] for a in free)}
        keep = lambda refs: tuple(r for r in refs if r.name in names)  # noqa: E731
        dims = tuple(DimSharding(keep(d.axes), d.open) for d in s.dims)
        fs = Sharding(s.mesh, dims, keep(s.replicated), keep(s.unreduced), s.start, s.end)
        named = any(d.axes for d in dims) or fs.replicated or fs.unreduced
        return pl, (fs if named else None)

    args = []
    for i, ((v, t), s) in enumerate(zip(body.args, ins)):
        x = tr.materialize(tr.operand(node, i))
        pl, constraint = split(s, shape_of(x), f"operand {i}")
        if constraint is not None:
            x = constrain(tr, x, constraint, f"the in_sharding of operand {i} of 'sdy.manual_computation'")
        y = x
        target = [pl[a] if a in manual else UNPLACED for a in range(mm.naxes)]
        for d in layout.sliced_dims(target):
            for a in layout.slicing_axes(target, d):
                y = tr.emit(dist.SliceOp.of(y, dim=d, axis=a)).results[0]
        for a in manual:
            if isinstance(target[a], Replicated):
                y = tr.emit(dist.ReplOp.of(y, axis=a)).results[0]
        yt = y.type
        assert isinstance(yt, TensorType)
        local = layout.local_shape(yt.get_shape(), yt.get_placements(), sizes)
        tt = tr.tensor_t(t, f"body argument %{v.name}", node)
        if tuple(tt.shape) != tuple(local):
            raise ParseError(v.span, f"body argument %{v.name} is {tt}, but each device holds a {stablehlo._fmt(local)} block of operand {i}")
        body_ps = [LOCAL if a in manual else UNPLACED for a in range(mm.naxes)]
        args.append(tr.emit(dist.ToLocalOp.make([y], [yt.with_(shape=local, placements=body_ps)])).results[0])
    inner = ManualTranslator(tr, tr.imp.maps[meshes.pop()] if meshes else mm, manual)
    results = inner.translate_body(body, args)
    tr.node = node
    if len(results) != len(node.results):
        raise tr.error(f"the body returns {len(results)} value(s) for {len(node.results)} result(s)", node)
    out_vals: list[Val] = []
    for i, (r, s, t) in enumerate(zip(results, outs, node.out_types)):
        rv = inner.materialize(r)
        gt = tr.tensor_t(t, f"result {i}", node)
        pl, constraint = split(s, gt.shape, f"result {i}")
        target = [pl[a] if a in manual else UNPLACED for a in range(mm.naxes)]
        rt_ = rv.type
        assert isinstance(rt_, TensorType)
        want = layout.local_shape(gt.shape, target, sizes)
        if tuple(want) != rt_.get_shape():
            raise tr.error(f"the body returns {rt_.format_shape()} per device as result {i}, its out_sharding needs {stablehlo._fmt(want)}", node)
        y = tr.emit(dist.FromLocalOp.make([rv], [rt_.with_(shape=gt.shape, placements=target)])).results[0]
        for a in manual:
            if isinstance(target[a], Replicated):
                y = tr.emit(dist.DropOp.of(y, axis=a)).results[0]
        while True:
            ps = y.type.get_placements()  # type: ignore[attr-defined]
            dims = sorted(layout.sliced_dims(ps))
            if not dims:
                break
            y = tr.emit(dist.JoinOp.of(y, axis=layout.slicing_axes(ps, dims[0])[-1])).results[0]
        if constraint is not None:
            y = constrain(tr, y, constraint, f"the out_sharding of result {i} of 'sdy.manual_computation'")
        out_vals.append(y)
    return out_vals


def _dist_axes_list(tr: SdyTranslator, node: OpNode, refs: Sequence[AxisRef]) -> list[int]:
    return [a for r in refs for a in tr.mm.expand(r, lambda msg: tr.error(msg, node))]


class ManualTranslator(Translator):
    """The body of a manual computation: every value ``local`` on the (manual) mesh axes,
    StableHLO's collectives over ``replica_groups`` of device ids."""

    def __init__(self, outer: SdyTranslator, mesh: MeshMap, manual: Sequence[int] | None = None):
        super().__init__(outer.module, outer.mesh, outer.naxes, outer.spans, MANUAL_HANDLERS)
        self.manual = list(range(outer.naxes)) if manual is None else list(manual)
        """The manual axes (every axis unless ``shard_map(.., axis_names=..)`` names some):
        body values are ``local`` on them and ``unplaced`` (global) on the others."""
        self.device_ids = mesh.device_ids()
        self.rank_of = {d: r for r, d in enumerate(self.device_ids)}
        for name in SDY_HANDLERS:
            if name not in MANUAL_HANDLERS:
                self.handlers.pop(name, None)
        self.block = outer.block
        self.outer = outer
        self.grid = layout.base_grid(outer.mesh, outer.mm.sizes())
        self._rank: SSAValue | None = None
        self._scalars: dict[tuple, SSAValue] = {}

    def bind(self, node: OpNode, values: Sequence[Val]) -> None:
        """An op's ``sdy.sharding`` inside the body may name only free axes (a hint
        here: the partitioner places the free axes)."""
        shardings = node.attrs.get("sdy.sharding")
        if isinstance(shardings, list):
            mm = self.outer.mm
            for sh in shardings:
                for r in [r for d in sh.dims for r in d.axes] + list(sh.replicated) + list(sh.unreduced):
                    if mm.mesh.size(r.name) is not None and any(a in self.manual for a in mm.expand(r, lambda msg: self.error(msg, node))):
                        raise self.error(f"the sdy.sharding of '{node.name}' names {r.text()}, a manual axis of the enclosing manual computation", node)
        super().bind(node, values)

    def body_placements(self) -> list[Placement]:
        """A body value's placements: ``local`` on the manual axes, ``unplaced`` on the
        free ones."""
        return [LOCAL if a in self.manual else UNPLACED for a in range(self.naxes)]

    def fresh_type(self, shape: Sequence[int], elt) -> TensorType:
        return TensorType(tuple(shape), elt, self.mesh, self.body_placements())

    def sizes(self) -> tuple[int | None, ...] | None:
        return self.outer.mm.sizes()

    def manual_sizes(self) -> tuple[int, ...]:
        sizes = self.outer.mm.sizes()
        return tuple(sizes[a] for a in self.manual)

    def manual_values(self, values: Sequence[Any], what: str) -> tuple[Any, ...]:
        """Per-device values as one per device of the manual axes (row-major over them):
        they must not differ along the free axes, whose devices the body does not tell
        apart."""
        sizes = self.outer.mm.sizes()
        if len(self.manual) == self.naxes:
            return tuple(values)
        msizes = self.manual_sizes()
        out: dict[int, Any] = {}
        for r, x in enumerate(values):
            coords = layout.at_digits(r, sizes)
            m = 0
            for a in self.manual:
                m = m * sizes[a] + coords[a]
            if out.setdefault(m, x) != x:
                raise self.error(f"{what} differs between devices along the free axes of a manual computation over some of the mesh axes")
        return tuple(out[m] for m in range(math.prod(msizes)))

    def rank_value(self) -> SSAValue:
        """Each device's rank (row-major over the mesh) as a 0-d ``i64`` local value: its
        block of ``dist.iota`` over all devices (made once per manual computation)."""
        if self._rank is None:
            sizes = self.manual_sizes()
            ps: list[Placement] = list(self.body_placements())
            for k, a in enumerate(self.manual):
                ps[a] = sliced_placement(0, k) if len(self.manual) > 1 else sliced_placement(0)
            whole = TensorType((math.prod(sizes),), i64, self.mesh, ps)
            io = self.emit(dist.IotaOp.make([], [whole], dim=0)).results[0]
            one = self.emit(dist.ToLocalOp.make([io], [whole.with_(shape=(1,), placements=self.body_placements())])).results[0]
            self._rank = self.reshape(one, ())
            self._rank.name_hint = "rank"
        return self._rank

    def device_scalar(self, v: DevVal) -> SSAValue:
        """A per-device value as a 0-d local value: a ``dist.map`` of the device's rank,
        ``b + sum(a_k * coord_k)`` when the values are affine in the device's coordinates
        (what axis_index and block offsets are), else a select per rank."""
        elt = self.elt(v.elt) if v.elt in stablehlo.ELEMENT else None
        if elt is None:
            raise self.error(f"a per-device value of type {v.elt} is used by '{self.node.name if self.node else '?'}': convert it to a signed type first (as JAX's axis_index does)")
        key = (v.values, v.elt)
        if key in self._scalars:
            return self._scalars[key]
        sizes = self.manual_sizes()
        values = self.manual_values(v.values, f"a per-device value used by '{self.node.name if self.node else '?'}'")
        form = device_values.affine(values, sizes)
        strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]

        def body(args: list[SSAValue]) -> list[Operation]:
            rank = args[0]
            ops: list[Operation] = []

            def const(x: int | float | bool, e) -> SSAValue:
                ops.append(self.const_op(x, e))
                return ops[-1].results[0]

            if form is not None:
                b, a = form
                acc = const(b, i64) if b or not any(a) else None
                for k, ak in enumerate(a):
                    if ak:
                        q = rank
                        if strides[k] != 1:
                            ops.append(arith.DivSIOp(rank, const(strides[k], i64)))
                            q = ops[-1].results[0]
                        ops.append(arith.RemSIOp(q, const(sizes[k], i64)))
                        if ak != 1:
                            ops.append(arith.MuliOp(ops[-1].results[0], const(ak, i64)))
                        term = ops[-1].results[0]
                        if acc is not None:
                            ops.append(arith.AddiOp(acc, term))
                        acc = ops[-1].results[0]
                assert acc is not None
                return ops + _from_i64(acc, elt)
            acc = const(values[-1], elt)
            for r in range(len(values) - 2, -1, -1):
                if values[r] == values[-1]:
                    continue
                eq = arith.CmpiOp(rank, const(r, i64), "eq")
                sel = arith.SelectOp(eq.results[0], const(values[r], elt), acc)
                ops += [eq, sel]
                acc = sel.results[0]
            return ops

        x = self.map_op([self.rank_value()], [i64], (), elt, body)
        self._scalars[key] = x
        return x

    def device_slice(self, x: SSAValue, dims: list[tuple[int, tuple[int, ...], int]]) -> SSAValue:
        """Each device's block: on each listed dim the device starts at its rank in a group
        of mesh axes times the size (the group's values must agree there, as a
        ``dist.take_slice`` of a replicated value needs: ``dist.from_local`` replicated on
        those axes, ``dist.take_slice`` per axis, outermost first, ``dist.to_local``)."""
        sizes = self.outer.mm.sizes()
        t = x.type
        assert isinstance(t, TensorType)
        shape = t.get_shape()
        plan: list[tuple[int, list[int]]] = []
        used: set[int] = set()
        for d, starts, size in dims:
            found = _block_axes(self.manual_values(starts, "a start index of 'stablehlo.dynamic_slice'"), size, shape[d], self.manual_sizes(), {self.manual.index(a) for a in used})
            axes = None if found is None else [self.manual[k] for k in found]
            if axes is None:
                raise self.error(
                    f"'stablehlo.dynamic_slice' starts dim {d} at {list(starts)} on the devices: not each device's block of "
                    "a group of mesh axes (distir reads per-device offsets only as a device taking its block)"
                )
            plan.append((d, axes))
            used.update(axes)
        ps: list[Placement] = [REPLICATED if a in used else p for a, p in enumerate(self.body_placements())]
        y = self.emit(dist.FromLocalOp.make([x], [t.with_(placements=ps)])).results[0]
        for d, axes in plan:
            for a in axes:
                y = self.emit_checked(lambda: dist.TakeSliceOp.of(y, dim=d, axis=a)).results[0]
        yt = y.type
        assert isinstance(yt, TensorType)
        local = layout.local_shape(shape, yt.get_placements(), sizes)
        return self.emit(dist.ToLocalOp.make([y], [yt.with_(shape=local, placements=self.body_placements())])).results[0]

    def group_axes(self, node: OpNode) -> list[int]:
        """The mesh axes whose rank groups are the op's ``replica_groups``."""
        rg = node.attrs.get("replica_groups")
        n = self.grid.ranks
        if rg is None:
            raise self.error(f"'{node.name}' needs replica_groups", node)
        value = rg.value if hasattr(rg, "value") else rg
        groups = [list(g) for g in value] if isinstance(value, list) and value and isinstance(value[0], list) else ([] if not value else None)
        if groups is None or any(not all(isinstance(x, int) and not isinstance(x, bool) for x in g) for g in groups):
            raise self.error(f"'{node.name}' has malformed replica_groups", node)
        if not groups or (len(groups) == 1 and not groups[0]):
            return list(range(self.naxes))
        import itertools

        if sorted(x for g in groups for x in g) != list(range(n)):
            raise self.error(f"replica_groups of '{node.name}' must cover the {n} devices once", node)
        want = sorted(tuple(self.rank_of[x] for x in g) for g in groups)
        for k in range(0, self.naxes + 1):
            for axes in itertools.permutations(range(self.naxes), k):
                if sorted(tuple(g) for g in self.grid.groups(list(axes))) == want:
                    if any(a not in self.manual for a in axes):
                        names = ", ".join(self.outer.mm.axes[a][0] for a in axes if a not in self.manual)
                        raise self.error(f"'{node.name}' is a collective over {names}, which the manual computation leaves automatic", node)
                    return list(axes)
        raise self.error(f"replica_groups of '{node.name}' are not the groups of any mesh axes", node)

    def collective_input(self, node: OpNode) -> SSAValue:
        if len(node.operands) != 1 or len(node.results) != 1:
            raise self.error(f"'{node.name}' of several operands is not supported", node)
        return self.materialize(self.operand(node, 0))

    def local_result(self, y: SSAValue, node: OpNode) -> SSAValue:
        t = y.type
        assert isinstance(t, TensorType)
        local = layout.local_shape(t.get_shape(), t.get_placements(), self.outer.mm.sizes())
        out = self.emit(dist.ToLocalOp.make([y], [t.with_(shape=local, placements=self.body_placements())])).results[0]
        res = node.out_types[0] if node.out_types else None
        if isinstance(res, TensorT) and tuple(res.shape) != tuple(local):
            raise self.error(f"'{node.name}' gives {stablehlo._fmt(local)} per device, its type says {res}", node)
        return out

    def as_sliced(self, x: SSAValue, dim: int, axes: list[int], node: OpNode) -> SSAValue:
        """Each device's value as its block of a value sliced on ``dim`` by ``axes``."""
        t = x.type
        assert isinstance(t, TensorType)
        if not 0 <= dim < t.rank:
            raise self.error(f"dim {dim} is out of range for a tensor of rank {t.rank}", node)
        n = math.prod(self.outer.mm.sizes()[a] for a in axes)
        shape = list(t.get_shape())
        shape[dim] *= n
        ps: list[Placement] = self.body_placements()
        for k, a in enumerate(axes):
            ps[a] = sliced_placement(dim, k) if len(axes) > 1 else sliced_placement(dim)
        return self.emit(dist.FromLocalOp.make([x], [t.with_(shape=shape, placements=ps)])).results[0]


def _from_i64(x: SSAValue, elt) -> list[Operation]:
    """``x`` (i64) as ``elt`` (nothing for i64 itself)."""
    if elt == i64:
        return []
    if isinstance(elt, IntegerType) and elt.width.data == 1:
        z = arith.ConstantOp(IntegerAttr(0, i64))
        return [z, arith.CmpiOp(x, z.results[0], "ne")]
    if isinstance(elt, IntegerType):
        return [arith.TruncIOp(x, elt)]
    return [arith.SIToFPOp(x, elt)]


def _block_axes(starts: Sequence[int], size: int, extent: int, sizes: Sequence[int], used: set[int]) -> list[int] | None:
    """The mesh axes (outermost first) such that each device starts at its rank in its
    group over them (row-major) times ``size``, covering ``extent``; None if none do."""
    import itertools

    free = [a for a in range(len(sizes)) if a not in used and sizes[a] > 1]
    for k in range(1, len(free) + 1):
        for axes in itertools.permutations(free, k):
            if math.prod(sizes[a] for a in axes) * size != extent:
                continue
            ok = True
            for r, s in enumerate(starts):
                coords = layout.at_digits(r, sizes)
                g = 0
                for a in axes:
                    g = g * sizes[a] + coords[a]
                if g * size != s:
                    ok = False
                    break
            if ok:
                return list(axes)
    return None


MANUAL_HANDLERS: dict[str, stablehlo.Handler] = {}
_manual = stablehlo.registers(MANUAL_HANDLERS)


@_manual("sdy.sharding_constraint", "sdy.reshard")
def _m_constraint(tr: ManualTranslator, node: OpNode) -> list[Val]:
    """A constraint in a manual computation over some of the mesh axes: the value placed
    as the sharding says on the free axes there (the manual axes stay each device's own:
    the sharding cannot name them). A sharding that names no axis and leaves every dim
    open constrains nothing (JAX writes ``<@mesh, [{?}, {?}]>`` after each op)."""
    v = tr.operand(node, 0)
    s: Sharding = node.attrs["sharding"]
    if isinstance(v, (stablehlo.Const, DevVal)) or (not any(d.axes or not d.open for d in s.dims) and not s.replicated and not s.unreduced):
        return [v]
    x = tr.materialize(v)
    if len(tr.manual) == tr.naxes:
        raise tr.error(f"'{node.name}' inside a manual computation over every mesh axis constrains nothing that can be placed", node)
    mm = tr.outer.mm
    pl = tr.outer.imp.placements(mm, s, shape_of(x))
    for r in [r for d in s.dims for r in d.axes] + list(s.replicated) + list(s.unreduced):
        if any(a in tr.manual for a in mm.expand(r, lambda msg: tr.error(msg, node))):
            raise tr.error(f"'{node.name}' in a manual computation names its manual axis {r.text()}", node)
    if any(isinstance(pl[a], Local) for a in range(tr.naxes) if a not in tr.manual):
        raise tr.error(f"'{node.name}' with unreduced axes inside a manual computation is not supported", node)
    target = [p if a not in tr.manual else LOCAL for a, p in enumerate(pl)]
    y = x
    for d in layout.sliced_dims(target):
        for a in layout.slicing_axes(target, d):
            y = tr.emit(dist.SliceOp.of(y, dim=d, axis=a)).results[0]
    for a, p in enumerate(target):
        if isinstance(p, Replicated):
            y = tr.emit(dist.ReplOp.of(y, axis=a)).results[0]
    for a, p in enumerate(target):
        if isinstance(p, Replicated):
            y = tr.emit(dist.DropOp.of(y, axis=a)).results[0]
    while True:
        ps = y.type.get_placements()  # type: ignore[attr-defined]
        dims = sorted(layout.sliced_dims(ps))
        if not dims:
            return [y]
        y = tr.emit(dist.JoinOp.of(y, axis=layout.slicing_axes(ps, dims[0])[-1])).results[0]


@_manual("sdy.manual_computation")
def _m_nested_manual(tr: ManualTranslator, node: OpNode) -> list[Val]:
    """A manual computation inside one over some of the axes, over (some of) the others:
    what JAX writes for ``axis_index`` of a manual axis there (``partition_id`` arithmetic
    in a body without operands). Its results are values known per device, used as such by
    the enclosing body; anything else is a diagnostic."""
    mm = tr.outer.mm
    nested = set(_dist_axes_list(tr.outer, node, node.attrs["manual_axes"]))
    if nested & set(tr.manual):
        raise tr.error("a nested 'sdy.manual_computation' names an axis that is already manual", node)
    if node.operands:
        raise tr.error("a nested 'sdy.manual_computation' with operands is not supported (only the per-device index computations JAX writes for axis_index)", node)
    inner = ManualTranslator(tr.outer, tr.outer.imp.maps.get(mm.mesh.name, mm), sorted(set(tr.manual) | nested))
    inner.block = tr.block
    results = inner.translate_body(node.regions[0][0], [])
    tr.node = node
    if len(results) != len(node.results) or not all(isinstance(r, (stablehlo.Const, DevVal)) for r in results):
        raise tr.error("a nested 'sdy.manual_computation' must compute values known per device (partition_id arithmetic, as JAX's axis_index)", node)
    return results


@_manual("stablehlo.partition_id")
def _m_partition_id(tr: ManualTranslator, node: OpNode) -> list[Val]:
    """Each device's id (its rank, row-major over the mesh), known at import time per
    device: a ``DevVal`` that the arithmetic after it folds (``device_values``)."""
    t = stablehlo._result(tr, node)
    if t.shape != () or t.elt not in ("ui32", "i32", "ui64", "i64"):
        raise tr.error(f"'stablehlo.partition_id' gives a tensor<ui32>, its type says {t}", node)
    return [DevVal(tuple(tr.device_ids), t.elt, ())]


def _reduction(tr: ManualTranslator, node: OpNode) -> str:
    if not node.regions:
        raise tr.error(f"'{node.name}' needs a reduction body", node)
    fake = OpNode(node.name, node.span, attrs={}, regions=node.regions)
    kind_op, _ = stablehlo._reducer_kind(tr, fake)
    kind = stablehlo.REDUCE_KINDS.get(kind_op)
    if kind is None:
        raise tr.error(f"'{node.name}' by '{kind_op}' is not supported (add, multiply, maximum, minimum)", node)
    return kind


@_manual("stablehlo.all_reduce")
def _m_all_reduce(tr: ManualTranslator, node: OpNode) -> list[Val]:
    x = tr.collective_input(node)
    kind = _reduction(tr, node)
    axes = tr.group_axes(node)
    if not axes:
        return [x]
    y = tr.emit_checked(lambda: coll.AllReduceOp.of(x, op=kind, axes=axes)).results[0]
    return [tr.local_result(y, node)]


@_manual("stablehlo.all_gather")
def _m_all_gather(tr: ManualTranslator, node: OpNode) -> list[Val]:
    x = tr.collective_input(node)
    dim = stablehlo._attr_int(tr, node, "all_gather_dim")
    axes = tr.group_axes(node)
    if not axes:
        return [x]
    s = tr.as_sliced(x, dim, axes, node)
    y = tr.emit_checked(lambda: coll.AllGatherOp.of(s, axes=axes)).results[0]
    return [tr.local_result(y, node)]


@_manual("stablehlo.reduce_scatter")
def _m_reduce_scatter(tr: ManualTranslator, node: OpNode) -> list[Val]:
    x = tr.collective_input(node)
    dim = stablehlo._attr_int(tr, node, "scatter_dimension")
    kind = _reduction(tr, node)
    axes = tr.group_axes(node)
    if not axes:
        return [x]
    y = tr.emit_checked(lambda: coll.ReduceScatterOp.of(x, op=kind, dim=dim, axes=axes)).results[0]
    return [tr.local_result(y, node)]


@_manual("stablehlo.all_to_all")
def _m_all_to_all(tr: ManualTranslator, node: OpNode) -> list[Val]:
    x = tr.collective_input(node)
    split = stablehlo._attr_int(tr, node, "split_dimension")
    concat = stablehlo._attr_int(tr, node, "concat_dimension")
    count = stablehlo._attr_int(tr, node, "split_count")
    axes = tr.group_axes(node)
    n = math.prod(tr.outer.mm.sizes()[a] for a in axes)
    if count != n:
        raise tr.error(f"split_count {count} is not the group size {n}", node)
    if not axes:
        return [x]
    s = tr.as_sliced(x, concat, axes, node)
    y = tr.emit_checked(lambda: coll.AllToAllOp.of(s, dim=split, axes=axes)).results[0]
    return [tr.local_result(y, node)]


@_manual("stablehlo.collective_permute")
def _m_collective_permute(tr: ManualTranslator, node: OpNode) -> list[Val]:
    """StableHLO's spec: within each process group, ``result@t`` is ``operand@s`` for the
    pair (s, t) of ``source_target_pairs`` naming t, and zeros where no pair does. With a
    ``channel_handle`` of positive handle (as JAX writes) the groups are across
    partitions, so s and t are device ids of the mesh: a ``coll.permute`` planned by
    ``plan_permute`` (over the one axis the pairs move along, or every axis)."""
    x = tr.collective_input(node)
    handle = re.search(r"handle\s*=\s*(-?\d+)", str(getattr(node.attrs.get("channel_handle"), "text", "")))
    sizes = tuple(tr.outer.mm.sizes())
    pairs = _source_target_pairs(tr, node)
    if handle is None or int(handle.group(1)) <= 0:
        replicas = _module_count(tr, "mhlo.num_replicas")
        partitions = _module_count(tr, "mhlo.num_partitions")
        if replicas == 1 and all(p == (0, 0) for p in pairs):  # each device its own group
            return [x] if pairs else [tr.materialize(stablehlo.Const(0, stablehlo.elt_name(x.type.element_type), shape_of(x)))]  # type: ignore[attr-defined]
        if not (partitions == 1 and replicas == math.prod(sizes)):
            raise tr.error(
                "'stablehlo.collective_permute' without a channel_handle of positive handle permutes replicas: distir reads it "
                "where the module makes the mesh's devices its replicas (mhlo.num_partitions = 1, mhlo.num_replicas = "
                f"{math.prod(sizes)}), or gives one replica per device and pairs [[0, 0]] (mhlo.num_replicas = 1); "
                f"this module says num_replicas = {replicas}, num_partitions = {partitions}",
                node,
            )
    pairs = [(tr.rank_of.get(a, a), tr.rank_of.get(b, b)) for a, b in pairs]  # device ids -> ranks
    try:
        check_pairs(pairs, math.prod(sizes))  # the devices as the ranks of one group
    except RuleError as e:
        raise tr.error(f"source_target_pairs of 'stablehlo.collective_permute': {e}", node) from None
    res = node.out_types[0] if node.out_types else None
    if isinstance(res, TensorT) and tuple(res.shape) != shape_of(x):
        raise tr.error(f"'stablehlo.collective_permute' gives each device its operand's shape {stablehlo._fmt(shape_of(x))}, its type says {res}", node)
    axes, options = plan_permute(pairs, sizes)
    if options.get("offset") == 0:
        return [x]
    if any(a not in tr.manual for a in axes):
        raise tr.error("'stablehlo.collective_permute' moves values along mesh axes that the manual computation leaves automatic", node)
    return [tr.emit_checked(lambda: coll.PermuteOp.of(x, sizes=sizes, axes=axes, **options)).results[0]]


def _module_count(tr: ManualTranslator, key: str) -> int | None:
    """``mhlo.num_replicas`` / ``mhlo.num_partitions`` of the module (None if absent)."""
    v = tr.module.attrs.get(key)
    v = getattr(v, "value", v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _source_target_pairs(tr: ManualTranslator, node: OpNode) -> list[tuple[int, int]]:
    """``source_target_pairs = dense<[[s, t], ...]> : tensor<Nx2xi64>`` (a splat or an
    empty literal too)."""
    d = node.attrs.get("source_target_pairs")
    if isinstance(d, Dense) and isinstance(d.type, TensorT) and len(d.type.shape) == 2 and d.type.shape[1] == 2:
        rows = d.value if isinstance(d.value, list) else [[d.value, d.value]] * d.type.shape[0] if d.value is not None else []
        ok = len(rows) == d.type.shape[0] and all(isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in r) for r in rows)
        if ok:
            return [(r[0], r[1]) for r in rows]
    raise tr.error("'stablehlo.collective_permute' needs source_target_pairs = dense<[[source, target], ...]> : tensor<Nx2xi64>", node)
