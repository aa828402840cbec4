"""The ``dist`` dialect: meshes, distributed tensor types, functional primitives and the
local (communication-free) computations of distir.

Values of type ``!dist.tensor<SHAPExELT, @mesh, [placements]>`` carry their logical
(global) shape and one placement per mesh axis (see ``placements.py``). The functional
primitives of CoCoNet change the placement on one mesh axis (``axis``, default 0)::

    dist.slice {dim}  unplaced -> sliced<dim>      dist.join    sliced<d> -> unplaced
    dist.repl         unplaced -> replicated       dist.drop    replicated -> unplaced
    dist.store {rank} unplaced -> at<rank>         dist.load    at<r> -> unplaced
    dist.reduce {op}  local -> unplaced (element-wise over the ranks of the axis)

and the local ops compute without communication: ``dist.map``, ``dist.take_slice``,
``dist.matmul``, ``dist.reduce_tensor``, ``dist.cast``, ``dist.dropout``,
``dist.embedding_bag``, ``dist.scatter_add``, ``dist.sort`` and ``dist.remesh``, and the layout ops the front ends need for
StableHLO: ``dist.transpose``, ``dist.reshape``, ``dist.iota``, ``dist.extract_slice``
and ``dist.concat``. ``dist.to_local`` and ``dist.from_local`` see the same per-rank
buffers as another placement (for per-device programs). Every op verifies shapes, element types,
meshes and placements, and reports a broken rule as
``'dist.op' op <what was expected>, got <what was found>``.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Collection, Sequence
from typing import Any, ClassVar, NoReturn

from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    DenseArrayBase,
    FunctionType,
    IntAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import (
    HasCanonicalizationPatternsTrait,
    HasParent,
    IsTerminator,
    Pure,
    SymbolOpInterface,
    SymbolTable,
)
from xdsl.utils.exceptions import VerifyException

from distir.dialects import layout
from distir.dialects.diagnostics import MAX_RANKS
from distir.dialects.fast import OpMemo
from distir.dialects.format import I64_MAX, REDUCTIONS, FormattedOp, Kw, parse_int
from distir.dialects.placements import (
    LOCAL,
    REPLICATED,
    UNPLACED,
    At,
    Local,
    Placement,
    Replicated,
    Sliced,
    sliced,
    Unplaced,
    parse_placement,
)
from distir.dialects.verifier import IsolatedBody, rules_held

# ======================================================================================
# Types
# ======================================================================================


def is_scalar_type(t: Attribute) -> bool:
    """Builtin scalar element types distir computes with (f16, bf16, f32, f64, iN)."""
    return isinstance(t, (IntegerType, AnyFloat))


def _shortest(placements: Sequence[Placement]) -> Sequence[Placement]:
    """The placements in their shortest spelling (``layout.tidy``): a nesting order that
    is the default (``[sliced<0, 0>, sliced<0, 1>]``) is written ``[sliced<0>, sliced<0>]``,
    so that one layout is one type (the passes build the short form; a return of the
    long one compared unequal). Placements whose orders do not check are kept as written
    for the verifier to name."""
    if not any(isinstance(p, Sliced) and p.order.data >= 0 for p in placements):
        return placements
    if layout.check_orders(placements) is not None:
        return placements
    return layout.tidy(placements)


@irdl_attr_definition
class TensorType(ParametrizedAttribute, TypeAttribute):
    """A distributed tensor: logical shape, element type, mesh and one placement per mesh
    axis, e.g. ``!dist.tensor<1024x768xf16, @world, [sliced<0>]>``. A 0-d tensor is
    written with no dims: ``!dist.tensor<f32, @world, [local]>``."""

    name = "dist.tensor"

    shape: ArrayAttr[IntAttr]
    element_type: Attribute
    mesh: SymbolRefAttr
    placements: ArrayAttr[Placement]

    def __init__(
        self,
        shape: Sequence[int],
        element_type: Attribute,
        mesh: str | SymbolRefAttr,
        placements: Sequence[Placement],
    ):
        if isinstance(mesh, str):
            mesh = SymbolRefAttr(mesh)
        super().__init__(ArrayAttr([IntAttr(d) for d in shape]), element_type, mesh, ArrayAttr(_shortest(placements)))

    def __hash__(self) -> int:
        # computed once (the dataclass's own hash walks every parameter each time): types
        # key the lowering's and the verifier's caches, asked for tens of thousands of
        # times per model-sized program
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.shape, self.element_type, self.mesh, self.placements))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}  # (a string's hash differs by process)

    # --- accessors ------------------------------------------------------------------
    def get_shape(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    @property
    def rank(self) -> int:
        return len(self.shape.data)

    @property
    def mesh_name(self) -> str:
        return self.mesh.root_reference.data

    def get_placements(self) -> tuple[Placement, ...]:
        return tuple(self.placements.data)

    def with_(
        self,
        shape: Sequence[int] | None = None,
        element_type: Attribute | None = None,
        mesh: str | None = None,
        placements: Sequence[Placement] | None = None,
    ) -> TensorType:
        return tensor_type(
            self.get_shape() if shape is None else tuple(shape),
            self.element_type if element_type is None else element_type,
            self.mesh_name if mesh is None else mesh,
            self.get_placements() if placements is None else tuple(placements),
        )

    def format_shape(self) -> str:
        return "x".join(str(d) for d in self.get_shape()) or "scalar"

    # --- syntax ---------------------------------------------------------------------
    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        # A program names the same few types thousands of times (every operand and result):
        # the text of one, from '<' to its '>', parses to the same parameters wherever it
        # is, so each distinct text is parsed once per process (``_PARSED``).
        at = parser.pos
        body = _TYPE_BODY.match(parser.lexer.input.content, at)
        if body is not None:
            known = _PARSED.get(body.group())
            if known is not None:
                parser._resume_from(body.end())  # noqa: SLF001 - past the '>', as parse_punctuation would
                return known
        parser.parse_punctuation("<")
        start = parser.pos
        dims, elt = parser.parse_ranked_shape()
        if any(d > I64_MAX for d in dims):
            parser.raise_error(f"!dist.tensor dimension {max(dims)} is out of range for i64", start, parser.pos)
        if any(d < 0 for d in dims):
            parser.raise_error("!dist.tensor shapes are static: '?' is allowed only in mesh shapes")
        parser.parse_punctuation(",")
        mesh = parser.parse_optional_symbol_name()
        if mesh is None:
            parser.raise_error("expected a mesh symbol such as @world")
        parser.parse_punctuation(",")
        placements = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: parse_placement(parser), " in the placement list"
        )
        end = parser.pos
        parser.parse_punctuation(">")
        why = cls.layout_error(len(dims), placements)
        if why:
            parser.raise_error(f"!dist.tensor {why}", end)
        params = (ArrayAttr([IntAttr(d) for d in dims]), elt, SymbolRefAttr(mesh), ArrayAttr(_shortest(placements)))
        if body is not None and body.end() == end + 1:  # the text parsed is the text matched
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[body.group()] = params
        return params

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        for d in self.get_shape():
            printer.print_string(f"{d}x")
        printer.print_attribute(self.element_type)
        printer.print_string(f", @{self.mesh_name}, [")
        printer.print_string(", ".join(str(p) for p in self.get_placements()))
        printer.print_string("]>")

    @staticmethod
    def layout_error(rank: int, placements: Sequence[Placement]) -> str | None:
        """Why placements cannot describe a tensor of this rank (mesh-independent), or None."""
        for p in placements:
            if isinstance(p, Sliced) and p.dim.data >= rank:
                return f"of rank {rank} cannot be sliced on dim {p.dim.data}"
        return layout.check_orders(placements)

    def verify(self) -> None:
        if not is_scalar_type(self.element_type):
            raise VerifyException(f"!dist.tensor element type must be an integer or float type, got {self.element_type}")
        why = self.layout_error(self.rank, self.get_placements())
        if why:
            raise VerifyException(f"!dist.tensor {why}")


_TYPE_BODY = re.compile(r"<[^<>]*(?:<[^<>]*>[^<>]*)*>")
"""A ``!dist.tensor``'s text from its '<' to its '>' (placements nest one level:
``sliced<0>``)."""
_PARSED: dict[str, tuple[Attribute, ...]] = {}
"""The parameters of each ``!dist.tensor`` text parsed without error (``parse_parameters``)."""
_PARSED_MAX = 1 << 16


@functools.lru_cache(maxsize=4096)
def tensor_type(shape: tuple[int, ...], element_type: Attribute, mesh: str, placements: tuple[Placement, ...]) -> TensorType:
    """``TensorType(...)``, built (and verified) once per distinct type: passes derive
    types by the thousand on model-scale programs, and types are immutable."""
    return TensorType(shape, element_type, mesh, placements)


# ======================================================================================
# Meshes
# ======================================================================================


@irdl_op_definition
class MeshOp(IRDLOperation):
    """A named grid of ranks, numbered row-major.

    ``dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]`` declares a 2x? grid (``?`` is
    fixed when the program runs). A view of another mesh covers the same ranks with axes
    that are row-major products of the parent's axes, in the order listed, so axes can be
    merged, split and permuted; ranks keep the parent's numbering::

        dist.mesh @hw shape = [2, 4] axes = ["node", "gpu"]
        dist.mesh @world shape = [8] view @hw [[0, 1]]
    """

    name = "dist.mesh"

    sym_name = prop_def(StringAttr)
    shape = prop_def(DenseArrayBase)
    axes = opt_prop_def(ArrayAttr[StringAttr])
    view = opt_prop_def(SymbolRefAttr)
    factors = opt_prop_def(ArrayAttr[DenseArrayBase])

    traits = traits_def(SymbolOpInterface())

    @staticmethod
    def create_mesh(
        name: str,
        sizes: Sequence[int | None],
        axis_names: Sequence[str] | None = None,
        view: str | None = None,
        factors: Sequence[Sequence[int]] | None = None,
    ) -> MeshOp:
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "shape": DenseArrayBase.from_list(i64, [-1 if s is None else s for s in sizes]),
        }
        if axis_names is not None:
            props["axes"] = ArrayAttr([StringAttr(a) for a in axis_names])
        if view is not None:
            props["view"] = SymbolRefAttr(view)
            props["factors"] = ArrayAttr([DenseArrayBase.from_list(i64, list(f)) for f in factors or []])
        return MeshOp.build(properties=props)

    # --- accessors ------------------------------------------------------------------
    @property
    def mesh_name(self) -> str:
        return self.sym_name.data

    @property
    def declared_sizes(self) -> tuple[int | None, ...]:
        return tuple(None if s < 0 else s for s in self.shape.get_values())  # type: ignore[operator]

    @property
    def rank(self) -> int:
        return len(self.shape.get_values())

    @property
    def axis_names(self) -> tuple[str, ...] | None:
        return None if self.axes is None else tuple(a.data for a in self.axes.data)

    @property
    def factor_lists(self) -> tuple[tuple[int, ...], ...]:
        if self.factors is None:
            return ()
        return tuple(tuple(f.get_values()) for f in self.factors.data)  # type: ignore[misc]

    def parent_mesh(self) -> MeshOp | None:
        if self.view is None:
            return None
        p = _lookup(self, self.view)
        return p if isinstance(p, MeshOp) else None

    def sizes(self) -> tuple[int | None, ...]:
        """Axis sizes as far as they are known before running (`?` left as None).

        Remembered while the mesh's properties, its parent (a view's) and the parent's
        sizes stay the same: verifying and lowering a model's program ask once per
        tensor, and a view's answer took a symbol lookup and two unpacked arrays."""
        memo = self.__dict__.get("_sizes_memo")
        if memo is not None:
            shape, view, factors, parent, psizes, out = memo
            if shape is self.shape and view is self.view and factors is self.factors and (
                parent is None or (parent.parent_op() is self.parent_op() and parent.sizes() is psizes and _sym_name(parent) == view.root_reference.data)
            ):
                return out
        own = self.declared_sizes
        parent = self.parent_mesh()
        psizes = None
        if parent is None:
            out = own
        else:
            psizes = parent.sizes()
            sized = []
            for s, f in zip(own, self.factor_lists):
                if s is None and f and all(psizes[a] is not None for a in f if a < len(psizes)):
                    s = math.prod(psizes[a] for a in f if a < len(psizes))  # type: ignore[misc]
                sized.append(s)
            out = tuple(sized)
        if parent is None and self.view is not None:
            return out  # an unknown parent: the verifier says so; nothing to remember
        self.__dict__["_sizes_memo"] = (self.shape, self.view, self.factors, parent, psizes, out)
        return out

    def grid(self, ranks: int) -> layout.MeshGrid:
        """The mesh with its sizes fixed for a run on ``ranks`` ranks."""
        parent = self.parent_mesh()
        if parent is None:
            return layout.base_grid(self.mesh_name, layout.resolve_sizes(self.declared_sizes, ranks))
        g = layout.view_grid(self.mesh_name, parent.grid(ranks), self.factor_lists)
        for a, (want, got) in enumerate(zip(self.declared_sizes, g.sizes)):
            if want is not None and want != got:
                raise layout.LayoutError(f"axis {a} of view @{self.mesh_name} has size {want}, its factors give {got}")
        return g

    def root(self) -> MeshOp:
        return self.parent_mesh() or self

    def to_root(self, placements: Sequence[Placement]) -> list[Placement]:
        """The same layout seen on the root mesh (the parent of a view)."""
        parent = self.parent_mesh()
        if parent is None:
            return list(placements)
        return layout.view_to_parent(placements, self.factor_lists, parent.sizes(), parent.rank)

    # --- syntax ---------------------------------------------------------------------
    @classmethod
    def parse(cls, parser: Parser) -> MeshOp:
        name = parser.parse_symbol_name()
        parser.parse_keyword("shape")
        parser.parse_punctuation("=")
        sizes = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: None if parser.parse_optional_punctuation("?") else parse_int(parser)
        )
        axis_names = None
        if parser.parse_optional_keyword("axes"):
            parser.parse_punctuation("=")
            axis_names = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_str_literal)
        view = factors = None
        if parser.parse_optional_keyword("view"):
            view = parser.parse_symbol_name().data
            factors = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE,
                lambda: parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int(parser)),
            )
        attrs = parser.parse_optional_attr_dict()
        op = cls.create_mesh(name.data, sizes, axis_names, view, factors)
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer):
        printer.print_string(f" @{self.mesh_name} shape = [")
        printer.print_string(", ".join("?" if s is None else str(s) for s in self.declared_sizes))
        printer.print_string("]")
        if self.axis_names is not None:
            printer.print_string(" axes = [" + ", ".join(f'"{a}"' for a in self.axis_names) + "]")
        if self.view is not None:
            printer.print_string(f" view @{self.view.root_reference.data} [")
            printer.print_string(", ".join("[" + ", ".join(map(str, f)) + "]" for f in self.factor_lists))
            printer.print_string("]")
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        sizes = self.declared_sizes
        if not sizes:
            fail(self, "mesh must have at least one axis")
        if any(s is not None and s < 1 for s in self.shape.get_values() if s != -1):  # type: ignore[operator]
            fail(self, f"mesh axis sizes must be positive or '?', got {layout.format_sizes(sizes)}")
        devices = math.prod(s for s in sizes if s is not None)
        if devices > MAX_RANKS:
            fail(self, f"mesh {layout.format_sizes(sizes)} has {devices} ranks: distir handles meshes of at most {MAX_RANKS} ranks")
        if self.axis_names is not None:
            if len(self.axis_names) != len(sizes):
                fail(self, f"mesh has {len(sizes)} axes but {len(self.axis_names)} axis names")
            if len(set(self.axis_names)) != len(self.axis_names):
                fail(self, "mesh axis names must be distinct")
        if self.view is None:
            if self.factors is not None:
                fail(self, "mesh factors are given only with 'view'")
            if sum(s is None for s in sizes) > 1:
                fail(self, "a mesh may leave only one axis size as '?'")
            return
        parent = _lookup(self, self.view)
        if not isinstance(parent, MeshOp):
            fail(self, f"view parent @{self.view.root_reference.data} is not a mesh")
        if parent.view is not None:
            fail(self, f"view parent @{parent.mesh_name} must not itself be a view")
        factors = self.factor_lists
        if len(factors) != len(sizes):
            fail(self, f"view has {len(sizes)} axes but {len(factors)} factor lists")
        used = [a for f in factors for a in f]
        for f in factors:
            if not f:
                fail(self, "each view axis must be the product of at least one parent axis")
        if sorted(used) != list(range(parent.rank)):
            fail(
                self,
                f"view axes must be products of distinct parent axes covering all {parent.rank} axes of "
                f"@{parent.mesh_name}, got {[list(f) for f in factors]}",
            )
        psizes = parent.declared_sizes
        for a, (s, f) in enumerate(zip(sizes, factors)):
            fs = [psizes[b] for b in f]
            if s is not None and all(x is not None for x in fs) and s != math.prod(fs):  # type: ignore[arg-type]
                fail(
                    self,
                    f"view axis {a} has size {s} but parent axes {list(f)} of @{parent.mesh_name} "
                    f"have {math.prod(fs)} ranks",  # type: ignore[arg-type]
                )


# ======================================================================================
# Shared verification helpers
# ======================================================================================


class RuleError(Exception):
    """A broken placement rule; the message omits the op name (``fail`` adds it)."""


def element_bytes(t: Attribute) -> int:
    """Bytes of one element of builtin type ``t`` (i1: one byte, as numpy's bool)."""
    width = getattr(t, "bitwidth", None) or getattr(getattr(t, "width", None), "data", 32)
    return max(1, int(width) // 8)


def called(module: Operation, f: Operation) -> list[Operation]:
    """``f`` and the functions of ``module`` it calls, directly or not (``func.call``)."""
    from xdsl.dialects.func import CallOp, FuncOp

    funcs = {o.sym_name.data: o for o in module.regions[0].block.ops if isinstance(o, FuncOp)}
    out, todo = [f], [f]
    while todo:
        for op in todo.pop().walk():
            if isinstance(op, CallOp):
                g = funcs.get(op.callee.root_reference.data)
                if g is not None and g not in out:
                    out.append(g)
                    todo.append(g)
    return out


def used_meshes(module: Operation, f: Operation) -> set[str]:
    """The meshes function ``f`` of ``module`` runs on: those its values' types (and
    those of the functions it calls), its ops' ``mesh`` properties and (lowered) its
    ``rt.dist_type`` name, and the meshes they are views of. Only these constrain the
    rank count of a run of ``f``."""
    names: set[str] = set()

    def note(t: Attribute) -> None:
        if isinstance(t, TensorType):
            names.add(t.mesh_name)
        elif isinstance(t, ArrayAttr | FunctionType):
            for x in (t.data if isinstance(t, ArrayAttr) else (*t.inputs.data, *t.outputs.data)):
                note(x)

    for g in called(module, f):
        for a in g.attributes.values():
            note(a)
        for op in g.walk():
            for v in (*op.results, *(x for r in op.regions for b in r.blocks for x in b.args)):
                note(v.type)
            mesh = op.properties.get("mesh")
            if isinstance(mesh, SymbolRefAttr):
                names.add(mesh.root_reference.data)
    meshes = {op.mesh_name: op for op in module.regions[0].block.ops if isinstance(op, MeshOp)}
    todo = list(names)
    while todo:
        m = meshes.get(todo.pop())
        parent = m.parent_mesh() if m is not None else None
        if parent is not None and parent.mesh_name not in names:
            names.add(parent.mesh_name)
            todo.append(parent.mesh_name)
    return names


def alone(module: Operation, f: Operation) -> Operation:
    """``module`` itself when ``f`` is its only function and uses every mesh, else a new
    module of copies of ``f``, the functions it calls, the meshes they use
    (``used_meshes``) and the other ops that are neither (kernels): what a run of ``f``
    lowers, so that other functions and meshes constrain nothing."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.dialects.func import FuncOp

    used = used_meshes(module, f)
    funcs = called(module, f)
    ops = list(module.regions[0].block.ops)
    keep = [o for o in ops if o in funcs or (isinstance(o, MeshOp) and o.mesh_name in used) or not isinstance(o, FuncOp | MeshOp)]
    if len(keep) == len(ops):
        return module
    return ModuleOp([o.clone() for o in keep])


def resolve_grids(module: Operation, ranks: int, only: Collection[str] | None = None) -> dict[str, layout.MeshGrid]:
    """Every mesh of ``module`` (of ``only``, when given: the meshes a function uses,
    ``used_meshes``) with its sizes fixed for a run on ``ranks`` ranks
    (``InputRejected`` when ``ranks`` does not fit one)."""
    from distir.dialects.diagnostics import InputRejected, check_rank_count

    check_rank_count(ranks)
    grids = {}
    for op in module.regions[0].block.ops:
        if isinstance(op, MeshOp) and (only is None or op.mesh_name in only):
            try:
                grids[op.mesh_name] = op.grid(ranks)
            except layout.LayoutError as e:
                hint = ""
                if op.declared_sizes == (1,) * op.rank and op.view is None:
                    hint = " (a program for one device, as a plain jax.jit lowering imports, runs on 1 rank; distir-plan distributes it)"
                raise InputRejected(
                    f"--ranks {ranks} does not fit mesh @{op.mesh_name} of shape "
                    f"{layout.format_sizes(op.declared_sizes)}: {e}{hint}"
                ) from None
    return grids


def fail(op: Operation, msg: str) -> NoReturn:
    raise VerifyException(f"'{op.name}' op {msg}")


_SYMBOLS: OpMemo[dict[str, Operation]] = OpMemo("symbols")


def _lookup(op: Operation, ref: SymbolRefAttr | str) -> Operation | None:
    """The symbol ``ref`` names, from ``op``'s closest symbol table. Top-level names are
    found through a table of the symbols built once and rebuilt only when it is stale
    (xDSL's lookup scans the module, which made verifying a lowered module with a
    kernel per op quadratic)."""
    name = ref if isinstance(ref, str) else ref.root_reference.data if not ref.nested_references.data else None
    anchor: Operation | None = op
    while anchor is not None and not _holds_symbols(type(anchor)):
        anchor = anchor.parent_op()
    if name is None or anchor is None:
        try:
            return SymbolTable.lookup_symbol(op, ref)
        except ValueError:
            return None
    table = _SYMBOLS.get(anchor)
    hit = table.get(name) if table is not None else None
    if hit is not None and hit.parent_op() is anchor and _sym_name(hit) == name:
        return hit
    table = {}
    for o in anchor.regions[0].block.ops:
        n = _sym_name(o)
        if n is not None:
            table.setdefault(n, o)
    _SYMBOLS[anchor] = table
    return table.get(name)


@functools.cache
def _holds_symbols(cls: type[Operation]) -> bool:
    """``cls.has_trait(SymbolTable)`` (a class's traits are fixed), asked once per class:
    every lookup climbs from an op to its module."""
    return cls.has_trait(SymbolTable)


def _sym_name(op: Operation) -> str | None:
    a = op.properties.get("sym_name") or op.attributes.get("sym_name")
    return a.data if isinstance(a, StringAttr) else None


def lookup_mesh(op: Operation, t: TensorType) -> MeshOp:
    mesh = _lookup(op, t.mesh)
    if not isinstance(mesh, MeshOp):
        fail(op, f"unknown mesh @{t.mesh_name}: declare it with dist.mesh")
    return mesh


def check_tensor(op: Operation, t: Attribute, what: str) -> None:
    """Check a tensor type against its mesh: one placement per axis, ranks in range. A
    sliced dim need not be divisible by the ranks slicing it (``layout.dim_block``)."""
    if not isinstance(t, TensorType):
        return
    mesh = lookup_mesh(op, t)
    sizes = mesh.sizes()
    n = len(t.get_placements())
    if n != len(sizes):
        fail(op, f"{what} has {n} placement(s) but mesh @{mesh.mesh_name} has {len(sizes)} axes")
    for a, p in enumerate(t.get_placements()):
        if isinstance(p, At) and sizes[a] is not None and p.rank.data >= sizes[a]:  # type: ignore[operator]
            fail(op, f"{what} is at<{p.rank.data}> on axis {a}, which has only {sizes[a]} ranks")


def expect_type(op: Operation, what: str, found: Attribute, expected: Attribute) -> None:
    """Compare a declared type with the type the op's rule gives; layouts compare by
    meaning (``sliced<0>`` equals ``sliced<0, 0>``)."""
    if isinstance(found, TensorType) and isinstance(expected, TensorType):
        if found.get_shape() != expected.get_shape():
            fail(op, f"{what} shape must be {expected.format_shape()}, got {found.format_shape()}")
        if found.element_type != expected.element_type:
            fail(op, f"{what} element type must be {expected.element_type}, got {found.element_type}")
        if found.mesh_name != expected.mesh_name:
            fail(op, f"{what} must be on mesh @{expected.mesh_name}, got @{found.mesh_name}")
        if not layout.same_layout(found.get_placements(), expected.get_placements()):
            fail(
                op,
                f"{what} placements must be {layout.format_placements(expected.get_placements())}, "
                f"got {layout.format_placements(found.get_placements())}",
            )
    elif found != expected:
        fail(op, f"{what} type must be {expected}, got {found}")


def need_tensor(t: Attribute, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise RuleError(f"{what} must be a !dist.tensor, got {t}")
    return t


def need_placement(t: TensorType, axis: int, kind: type[Placement], what: str = "operand") -> Placement:
    p = t.get_placements()[axis]
    if not isinstance(p, kind):
        word = {Sliced: "sliced", At: "at<r>"}.get(kind, kind.name.removeprefix("dist."))  # type: ignore[attr-defined]
        raise RuleError(f"{what} must be {word} on axis {axis}, got {p}")
    return p


def check_axis(axis: int, t: TensorType) -> None:
    if not 0 <= axis < len(t.get_placements()):
        raise RuleError(
            f"0-based mesh axis index {axis} is out of bounds: the mesh @{t.mesh_name} has "
            f"{len(t.get_placements())} axes"
        )


def check_axes(axes: Sequence[int], t: TensorType) -> None:
    if not axes:
        raise RuleError("axes must name at least one mesh axis")
    if len(set(axes)) != len(axes):
        raise RuleError(f"axes must be distinct, got {list(axes)}")
    for a in axes:
        check_axis(a, t)


def check_dim(dim: int, t: TensorType, what: str = "dim") -> None:
    if not 0 <= dim < t.rank:
        raise RuleError(f"{what} {dim} is out of range for a tensor of rank {t.rank}")


def group_rank_digits(rank: int, sizes: Sequence[int | None], axes: Sequence[int], what: str) -> list[int] | None:
    """Digits of a rank of the group over ``axes``; None if the sizes are not static."""
    gs = [sizes[a] for a in axes]
    if any(s is None for s in gs):
        if len(axes) == 1:
            return [rank]
        return None
    n = math.prod(gs)  # type: ignore[arg-type]
    if not 0 <= rank < n:
        raise RuleError(f"{what} {rank} is out of range for a group of {n} ranks")
    return layout.at_digits(rank, gs)  # type: ignore[arg-type]


class DistOp(FormattedOp):
    """Base of ops whose result types follow from their operands: subclasses implement
    ``infer`` (a classmethod, so that builders and passes can use it before the op
    exists) and verification compares it with the declared result types."""

    INFER: ClassVar[bool] = True

    def options(self) -> dict[str, Any]:
        out = {kw.keyword: self.option(kw.keyword) for kw in self.KEYWORDS}
        if self.KIND is not None:
            out[self.KIND] = self.option(self.KIND)
        return out

    # Subclasses with INFER define
    #   @classmethod infer(cls, in_types, sizes, options) -> list[Attribute]
    # raising RuleError when the operands break the op's rule; `sizes` are the mesh axis
    # sizes (None where unknown, or None altogether).

    @classmethod
    def of(cls, *operands, sizes: Sequence[int | None] | None = None, **options: Any):
        """Build the op with inferred result types: ``AllReduceOp.of(x, op="sum")``."""
        full = {kw.keyword: kw.default for kw in cls.KEYWORDS if kw.default is not None}
        full.update(options)
        try:
            types = cls.infer([o.type for o in operands], sizes, full)
        except RuleError as e:
            raise VerifyException(f"'{cls.name}' op {e}") from None
        return cls.make(list(operands), types, **options)

    def mesh_sizes(self) -> tuple[int | None, ...] | None:
        for v in itertools.chain(self.operands, self.results):  # no copy: combined ops have thousands
            if isinstance(v.type, TensorType):
                return lookup_mesh(self, v.type).sizes()
        return None

    def verify_(self) -> None:
        held = rules_held() if type(self).verify_rule in _KEYED_RULES else None
        key = self._rule_key() if held is not None else None
        try:
            if key is not None and key in held:  # an op alike verified before (``verifier.rules_held``)
                return
        except TypeError:  # an attribute that does not hash: checked every time
            key = None
        for i, v in enumerate(self.operands):
            check_tensor(self, v.type, "operand" if len(self.operands) == 1 else f"operand {i}")
        for i, v in enumerate(self.results):
            check_tensor(self, v.type, "result" if len(self.results) == 1 else f"result {i}")
        if self.KIND is not None and self.option(self.KIND) not in REDUCTIONS:
            fail(self, f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.option(self.KIND)}")
        try:
            self.verify_rule()
        except RuleError as e:
            fail(self, str(e))
        if key is not None:
            held.add(key)  # type: ignore[union-attr]

    def _rule_key(self) -> tuple | None:
        """What ``verify_`` reads (with a rule of ``_KEYED_RULES``): the class, the
        operand and result types, the properties, the mesh op each tensor type names and
        a map's body (argument types, ops, yielded types); None when a mesh is missing
        (the checks say so)."""
        types = (*self.operand_types, *self.result_types)
        meshes = []
        for t in types:
            if isinstance(t, TensorType):
                mesh = _lookup(self, t.mesh)
                if not isinstance(mesh, MeshOp):
                    return None
                meshes.append(mesh)
        body = None
        if self.regions:  # a map's body: its argument types, its ops and what it yields
            blocks = list(self.regions[0].blocks)
            if len(self.regions) != 1 or len(blocks) != 1:
                return None
            b = blocks[0]
            last = b.last_op
            body = (tuple(a.type for a in b.args), tuple((o.name, type(o)) for o in b.ops),
                    None if last is None else tuple(v.type for v in last.operands))
        return (type(self), len(self.operands), types, tuple(self.properties.items()), tuple(meshes), body)

    def verify_rule(self) -> None:
        if not self.INFER:
            return
        expected = self.infer(self.operand_types, self.mesh_sizes(), self.options())
        for i, (found, want) in enumerate(zip(self.result_types, expected, strict=True)):
            expect_type(self, "result" if len(expected) == 1 else f"result {i}", found, want)


class DistCanonicalization(HasCanonicalizationPatternsTrait):
    """The canonicalization patterns of the ``dist``/``coll`` ops, which xDSL's
    ``canonicalize`` pass applies; they live in ``passes/canonicalize.py``."""

    def get_patterns(self, op: type[Operation]):
        from distir.passes.canonicalize import patterns_for

        return patterns_for(op)

    @classmethod
    def get_canonicalization_patterns(cls):
        from distir.passes.canonicalize import all_patterns

        return all_patterns()


def tensors_along(in_types: Sequence[Attribute], dim: int) -> tuple[list[TensorType], int]:
    """The operands of an op over a dim of its first operand (``concat``, ``sort``): at
    least one, tensors on one mesh, ``dim`` a dim of the first."""
    if not in_types:
        raise RuleError("needs at least one operand")
    ts = [need_tensor(t, f"operand {i}") for i, t in enumerate(in_types)]
    same_mesh(ts)
    check_dim(dim, ts[0])
    return ts, dim


def same_mesh(types: Sequence[Attribute]) -> str | None:
    meshes = {t.mesh_name for t in types if isinstance(t, TensorType)}
    if len(meshes) > 1:
        raise RuleError(f"operands must be on one mesh, got {', '.join('@' + m for m in sorted(meshes))}")
    return next(iter(meshes), None)


# ======================================================================================
# Functional primitives
# ======================================================================================

AXIS = Kw("axis", "int", 0)


class PrimitiveOp(DistOp):
    """A functional primitive on one mesh axis; the other axes keep their placements."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    # Each primitive defines
    #   @classmethod transition(cls, t, axis, sizes, options) -> list[Placement]

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "operand")
        axis = options.get("axis", 0)
        check_axis(axis, t)
        return [t.with_(placements=cls.transition(t, axis, sizes, options))]


@irdl_op_definition
class ReduceOp(PrimitiveOp):
    """``reduce``: the element-wise reduction over the ranks of ``axis`` of a local value;
    the result is the logical value, held by no rank.

    ``%r = dist.reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [unplaced]>``
    """

    name = "dist.reduce"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXIS,)

    @classmethod
    def transition(cls, t, axis, sizes, options):
        need_placement(t, axis, Local)
        return layout.replace_axes(t.get_placements(), [axis], UNPLACED)


@irdl_op_definition
class SliceOp(PrimitiveOp):
    """``slice``: split dim ``dim`` of an unplaced value in equal blocks; rank i of ``axis``
    holds block i.

    ``%s = dist.slice %x dim 0 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [sliced<0>]>``
    """

    name = "dist.slice"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"), AXIS)

    @classmethod
    def transition(cls, t, axis, sizes, options):
        need_placement(t, axis, Unplaced)
        check_dim(options["dim"], t)
        return layout.add_slicing(t.get_placements(), options["dim"], [axis])


def _innermost(t: TensorType, axes: Sequence[int], what: str = "operand") -> int:
    for a in axes:
        need_placement(t, a, Sliced, what)
    dim = layout.innermost_slicing(t.get_placements(), axes)
    if dim is None:
        raise RuleError(
            f"{what} axes {list(axes)} must be the innermost slicing of one dim, got "
            f"{layout.format_placements(t.get_placements())}"
        )
    return dim


@irdl_op_definition
class JoinOp(PrimitiveOp):
    """``join``: concatenate the blocks of a value sliced on ``axis`` into the logical value.

    ``%j = dist.join %s : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<64xf32, @world, [unplaced]>``
    """

    name = "dist.join"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXIS,)

    @classmethod
    def transition(cls, t, axis, sizes, options):
        _innermost(t, [axis])
        return layout.replace_axes(t.get_placements(), [axis], UNPLACED)


@irdl_op_definition
class ReplOp(PrimitiveOp):
    """``repl``: every rank of ``axis`` gets a copy of the logical value.

    ``%r = dist.repl %x : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [replicated]>``
    """

    name = "dist.repl"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXIS,)

    @classmethod
    def transition(cls, t, axis, sizes, options):
        need_placement(t, axis, Unplaced)
        return layout.replace_axes(t.get_placements(), [axis], REPLICATED)


@irdl_op_definition
class DropOp(PrimitiveOp):
    """``drop``: forget the replicas of a replicated value (inverse of ``repl``).

    ``%d = dist.drop %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [unplaced]>``
    """

    name = "dist.drop"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXIS,)

    @classmethod
    def transition(cls, t, axis, sizes, options):
        need_placement(t, axis, Replicated)
        return layout.replace_axes(t.get_placements(), [axis], UNPLACED)


@irdl_op_definition
class StoreOp(PrimitiveOp):
    """``store``: put the logical value on rank ``rank`` of ``axis`` only.

    ``%s = dist.store %x rank 0 : !dist.tensor<64xf32, @world, [unplaced]> -> !dist.tensor<64xf32, @world, [at<0>]>``
    """

    name = "dist.store"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("rank", "int"), AXIS)

    @classmethod
    def transition(cls, t, axis, sizes, options):
        need_placement(t, axis, Unplaced)
        rank = options["rank"]
        if sizes is not None:
            group_rank_digits(rank, sizes, [axis], "rank")
        if rank < 0:
            raise RuleError(f"rank must be non-negative, got {rank}")
        return layout.replace_axes(t.get_placements(), [axis], At(rank))


@irdl_op_definition
class LoadOp(PrimitiveOp):
    """``load``: the logical value of a value held by one rank of ``axis``.

    ``%l = dist.load %x : !dist.tensor<64xf32, @world, [at<0>]> -> !dist.tensor<64xf32, @world, [unplaced]>``
    """

    name = "dist.load"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (AXIS,)

    @classmethod
    def transition(cls, t, axis, sizes, options):
        need_placement(t, axis, At)
        return layout.replace_axes(t.get_placements(), [axis], UNPLACED)


# ======================================================================================
# Local computation
# ======================================================================================


def broadcast_shapes(shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """PyTorch/numpy broadcasting of logical shapes, or None if they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        big = dims - {1}
        if len(big) > 1:
            return None
        out.append(big.pop() if big else 1)
    return tuple(out)


def operand_placements(result: TensorType, shape: Sequence[int]) -> list[Placement]:
    """Placements a map operand of logical ``shape`` must have so that it lines up with a
    result placed as ``result``: sliced dims map through broadcasting, and an operand that
    broadcasts along a sliced dim must be replicated there."""
    rshape, rp = result.get_shape(), result.get_placements()
    shift = len(rshape) - len(shape)
    out: list[Placement] = []
    orders: dict[int, list[int]] = {}
    for a, p in enumerate(rp):
        if isinstance(p, Sliced):
            j = p.dim.data - shift
            if j >= 0 and shape[j] == rshape[p.dim.data]:
                out.append(sliced(j))
                orders.setdefault(j, [x for x in layout.slicing_axes(rp, p.dim.data)])
            else:
                out.append(REPLICATED)
        else:
            out.append(p)
    return layout.with_orders(out, orders)


@irdl_op_definition
class MapOp(DistOp):
    """``map``: a pointwise computation. The body computes one element from the scalar
    elements of the operands (``arith``/``math`` ops, ended by ``dist.yield``). Tensor
    operands broadcast as in PyTorch; builtin scalars (``f32``) are replicated scalars.
    All operands share the result's placements (an operand broadcast along a sliced dim
    is replicated there). The body sees only its block arguments and the values it defines
    (``IsolatedBody``). ``map`` commutes with every functional primitive.

    ::

        %c = dist.map(%a, %s) : (!dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
        ^bb0(%x: f32, %y: f32):
          %z = arith.mulf %x, %y : f32
          dist.yield %z : f32
        }
    """

    name = "dist.map"
    PAREN_OPERANDS: ClassVar[bool] = True
    INFER: ClassVar[bool] = False
    inputs = var_operand_def()
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(Pure(), DistCanonicalization(), IsolatedBody())

    def verify_rule(self) -> None:
        if not self.outputs:
            raise RuleError("must have at least one result")
        mesh = same_mesh([*self.operand_types, *self.result_types])
        res0: TensorType = self.result_types[0]  # type: ignore[assignment]
        for i, t in enumerate(self.result_types):
            assert isinstance(t, TensorType)
            if t.get_shape() != res0.get_shape() or not layout.same_layout(t.get_placements(), res0.get_placements()):
                raise RuleError(f"results must share shape and placements, result {i} differs from result 0")
        for i, t in enumerate(self.operand_types):
            if not isinstance(t, TensorType) and not is_scalar_type(t):
                raise RuleError(f"operand {i} must be a !dist.tensor or a scalar, got {t}")
        shapes = [t.get_shape() for t in self.operand_types if isinstance(t, TensorType)]
        if mesh is not None:
            bshape = broadcast_shapes(shapes) if shapes else ()
            if bshape is None:
                raise RuleError(f"operand shapes {', '.join('x'.join(map(str, s)) or 'scalar' for s in shapes)} do not broadcast")
            if bshape != res0.get_shape() and broadcast_shapes([bshape, res0.get_shape()]) != res0.get_shape():
                raise RuleError(
                    f"result shape {res0.format_shape()} is not the broadcast of the operand shapes "
                    f"{'x'.join(map(str, bshape)) or 'scalar'}"
                )
        for i, t in enumerate(self.operand_types):
            if isinstance(t, TensorType):
                want = operand_placements(res0, t.get_shape())
                if not layout.same_layout(t.get_placements(), want):
                    raise RuleError(
                        f"operands must have the same placements as the result: operand {i} is "
                        f"{layout.format_placements(t.get_placements())}, expected {layout.format_placements(want)}"
                    )
        self._verify_body()

    def _verify_body(self) -> None:
        block = self.body.block
        if len(block.args) != len(self.inputs):
            raise RuleError(f"body must have {len(self.inputs)} arguments (one per operand), got {len(block.args)}")
        for i, (arg, t) in enumerate(zip(block.args, self.operand_types)):
            elt = t.element_type if isinstance(t, TensorType) else t
            if arg.type != elt:
                raise RuleError(f"body argument {i} must be {elt}, got {arg.type}")
        for op in block.ops:
            if not (op.name.startswith(("arith.", "math.")) or isinstance(op, YieldOp)):
                raise RuleError(f"body may hold only arith and math ops, got '{op.name}'")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise RuleError("body must end with dist.yield")
        if len(term.values) != len(self.outputs):
            raise RuleError(f"body yields {len(term.values)} value(s) for {len(self.outputs)} result(s)")
        for i, (v, t) in enumerate(zip(term.values, self.result_types)):
            if v.type != t.element_type:  # type: ignore[attr-defined]
                raise RuleError(f"body yields {v.type} for result {i} of element type {t.element_type}")  # type: ignore[attr-defined]


_KEYED_RULES = (DistOp.verify_rule, MapOp.verify_rule)
"""The rules that read only what ``DistOp._rule_key`` holds (``verify_`` checks them
once per alike op while a module is verified)."""


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a ``dist.map`` body: the scalar results of one element."""

    name = "dist.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), HasParent(MapOp))
    assembly_format = "attr-dict ($values^ `:` type($values))?"


@irdl_op_definition
class TakeSliceOp(DistOp):
    """``take_slice``: each rank of ``axis`` keeps its block of a replicated value along
    ``dim`` (no communication): ``slice(drop(x))``.

    ``%s = dist.take_slice %p dim 0 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [sliced<0>]>``
    """

    name = "dist.take_slice"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"), AXIS)
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), DistCanonicalization())

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "operand")
        axis = options.get("axis", 0)
        check_axis(axis, t)
        need_placement(t, axis, Replicated)
        check_dim(options["dim"], t)
        return [t.with_(placements=layout.add_slicing(t.get_placements(), options["dim"], [axis]))]


@irdl_op_definition
class MatmulOp(DistOp):
    """``matmul``: ``lhs[..., M, K] x rhs[K, N] -> [..., M, N]`` (``rhs`` may carry the same
    batch dims as ``lhs``). Placement rules per mesh axis, after CoCoNet and DTensor:
    both sliced on the contracted dim -> ``local`` (partial sums); ``lhs`` sliced on a
    batch or row dim x replicated -> sliced on that dim; replicated x ``rhs`` sliced on
    its last dim -> sliced on the last dim; local x replicated (either side) -> local;
    local x local -> local (each rank multiplies its own values); equal replicated /
    at<r> / unplaced placements are kept.

    ``%y = dist.matmul %x, %w : (!dist.tensor<8x64xf32, @world, [sliced<1>]>, !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<8x32xf32, @world, [local]>``
    """

    name = "dist.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, in_types, sizes, options):
        a = need_tensor(in_types[0], "lhs")
        b = need_tensor(in_types[1], "rhs")
        same_mesh([a, b])
        sa, sb = a.get_shape(), b.get_shape()
        if len(sa) < 2 or len(sb) < 2:
            raise RuleError(f"operands must have rank >= 2, got {a.format_shape()} and {b.format_shape()}")
        if len(sb) != 2 and sb[:-2] != sa[:-2]:
            raise RuleError(f"rhs must be 2-d or share the batch dims of lhs, got {a.format_shape()} and {b.format_shape()}")
        if sa[-1] != sb[-2]:
            raise RuleError(f"contracted dims differ: lhs {a.format_shape()} has {sa[-1]}, rhs {b.format_shape()} has {sb[-2]}")
        if a.element_type != b.element_type:
            raise RuleError(f"operand element types differ: {a.element_type} and {b.element_type}")
        rshape = (*sa[:-1], sb[-1])
        ra, rb, rr = len(sa), len(sb), len(rshape)
        pa, pb = a.get_placements(), b.get_placements()
        out: list[Placement] = []
        orders: dict[int, list[int]] = {}
        for axis, (x, y) in enumerate(zip(pa, pb)):
            r = cls._rule(x, y, ra, rb, rr)
            if r is None:
                raise RuleError(f"no matmul placement rule for lhs {x} and rhs {y} on axis {axis}")
            out.append(r)
        ka, kb = layout.slicing_axes(pa, ra - 1), layout.slicing_axes(pb, rb - 2)
        if ka != kb:
            raise RuleError(
                f"the contracted dim must be sliced by the same axes in the same nesting order on both sides, "
                f"got lhs {layout.format_placements(pa)} and rhs {layout.format_placements(pb)}"
            )
        for d in layout.sliced_dims(out):
            src = pa if d < rr - 1 else pb
            sd = d if d < rr - 1 else rb - 1
            orders[d] = [ax for ax in layout.slicing_axes(src, sd) if isinstance(out[ax], Sliced)]
        return [TensorType(rshape, a.element_type, a.mesh, layout.with_orders(out, orders))]

    @staticmethod
    def _rule(x: Placement, y: Placement, ra: int, rb: int, rr: int) -> Placement | None:
        xs = x.dim.data if isinstance(x, Sliced) else None
        ys = y.dim.data if isinstance(y, Sliced) else None
        if xs == ra - 1 and ys == rb - 2:
            return LOCAL
        if xs is not None and xs < ra - 1:
            if isinstance(y, Replicated) and (rb == 2 or xs == ra - 2):
                return sliced(xs)
            if rb > 2 and ys == xs and xs < ra - 2:
                return sliced(xs)
            return None
        if isinstance(x, Replicated) and ys == rb - 1:
            return sliced(rr - 1)
        if isinstance(x, Local) and isinstance(y, (Replicated, Local)) or isinstance(x, Replicated) and isinstance(y, Local):
            return LOCAL
        if isinstance(x, (Replicated, Unplaced)) and x == y:
            return x
        if isinstance(x, At) and x == y:
            return x
        return None


@irdl_op_definition
class ReduceTensorOp(DistOp):
    """``reduce_tensor``: reduce a tensor over its own ``dims`` (CoCoNet's ReduceTensor and
    Norm). A dim that is sliced on an axis leaves partial results there (``local``), which
    a ``coll.all_reduce`` of the same kind completes: ``avg`` divides each rank's sum by
    the dim's size over the ranks slicing it (its block's extent where they divide it),
    so that the all-reduce avg of the partials is the mean; ``max``/``min`` of an empty
    block is the reduction's identity.

    ``%n = dist.reduce_tensor sum %x dims [0] : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<f32, @world, [local]>``
    """

    name = "dist.reduce_tensor"
    KIND: ClassVar[str | None] = "op"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dims", "ints"),)
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "operand")
        dims = list(options["dims"])
        if len(set(dims)) != len(dims):
            raise RuleError(f"dims must be distinct, got {dims}")
        for d in dims:
            check_dim(d, t, "reduced dim")
        keep = [d for d in range(t.rank) if d not in dims]
        shape = [t.get_shape()[d] for d in keep]
        out: list[Placement] = []
        orders: dict[int, list[int]] = {}
        for p in t.get_placements():
            if isinstance(p, Sliced):
                out.append(LOCAL if p.dim.data in dims else sliced(keep.index(p.dim.data)))
            else:
                out.append(p)
        for d in layout.sliced_dims(t.get_placements()):
            if d not in dims:
                orders[keep.index(d)] = layout.slicing_axes(t.get_placements(), d)
        return [t.with_(shape=shape, placements=layout.with_orders(out, orders))]


@irdl_op_definition
class CastOp(DistOp):
    """``cast``: convert the element type; the layout is unchanged.

    ``%h = dist.cast %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf16, @world, [local]>``
    """

    name = "dist.cast"
    INFER: ClassVar[bool] = False
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_rule(self) -> None:
        t, r = self.input.type, self.result.type
        assert isinstance(t, TensorType) and isinstance(r, TensorType)
        expect_type(self, "result", r, t.with_(element_type=r.element_type))


@irdl_op_definition
class DropoutOp(DistOp):
    """``dropout``: zero each element with probability ``p`` and scale the others by
    1/(1-p). The mask comes from a counter-based generator keyed by (``seed``, logical
    element index), so slicing commutes with dropout.

    ``%d = dist.dropout %x p 0.1 seed 7 : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>``
    """

    name = "dist.dropout"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("p", "float"), Kw("seed", "int"))
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(DistCanonicalization())

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "operand")
        if not 0.0 <= options["p"] < 1.0:
            raise RuleError(f"p must be in [0, 1), got {options['p']}")
        if not isinstance(t.element_type, AnyFloat):
            raise RuleError(f"operand element type must be a float type, got {t.element_type}")
        return [t]


@irdl_op_definition
class EmbeddingBagOp(DistOp):
    """``embedding_bag``: ``table[..., R, D]``, ``indices[..., B, L]`` -> ``[..., B, D]``: row
    ``b`` of the result combines (``mode`` sum, mean or max) the ``L`` table rows listed
    in ``indices[..., b, :]``; an optional leading dim indexes several tables.
    Placements per axis: equal placements are kept (both sliced on the table dim stays
    sliced there); replicated table x indices sliced on the bag dim -> sliced on the bag
    dim; a table sliced on its rows x replicated indices -> ``local`` (sum mode only:
    each rank adds the rows it holds).

    ``%e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<4x100x16xf32, @world, [sliced<0>]>, !dist.tensor<4x32x2xi32, @world, [sliced<0>]>) -> !dist.tensor<4x32x16xf32, @world, [sliced<0>]>``
    """

    name = "dist.embedding_bag"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("mode", "word", "sum", ("sum", "mean", "max")),)
    table = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "table")
        i = need_tensor(in_types[1], "indices")
        same_mesh([t, i])
        st, si = t.get_shape(), i.get_shape()
        if len(st) not in (2, 3) or len(si) != len(st):
            raise RuleError(f"table and indices must both be 2-d or both 3-d, got {t.format_shape()} and {i.format_shape()}")
        lead = len(st) - 2
        if st[:lead] != si[:lead]:
            raise RuleError(f"table and indices must agree on the table dim, got {st[0]} and {si[0]}")
        if not isinstance(i.element_type, IntegerType):
            raise RuleError(f"indices must have an integer element type, got {i.element_type}")
        out: list[Placement] = []
        for axis, (x, y) in enumerate(zip(t.get_placements(), i.get_placements())):
            xs = x.dim.data if isinstance(x, Sliced) else None
            ys = y.dim.data if isinstance(y, Sliced) else None
            if x == y and not (xs is not None and xs >= lead):
                out.append(x)
            elif isinstance(x, Replicated) and ys == lead:
                out.append(sliced(lead))
            elif xs == lead and isinstance(y, Replicated) and options["mode"] == "sum":
                out.append(LOCAL)
            else:
                raise RuleError(f"no embedding_bag placement rule for table {x} and indices {y} on axis {axis}")
        shape = (*si[:-1], st[-1])
        return [TensorType(shape, t.element_type, t.mesh, layout.tidy(out))]


@irdl_op_definition
class ScatterAddOp(DistOp):
    """``scatter_add``: the adjoint of ``embedding_bag`` sum. ``indices[..., B, L]`` and
    ``updates[..., B, D]`` -> ``[..., R, D]`` (R from the result type): row ``r`` of the
    result is the sum of ``updates[..., b, :]`` over the ``(b, l)`` with
    ``indices[..., b, l] == r``, in the order of ``(b, l)``; an index outside ``[0, R)``
    adds nothing (StableHLO's ``scatter`` skips it); an optional leading dim indexes
    several tables. It is the gradient of an embedding lookup (``jnp.take``'s, the
    ``table.at[ids].add(u)`` of JAX).

    Placements per axis (indices, updates -> result): equal replicated, unplaced,
    at<r> or local placements are kept (local: each device adds its own updates at its
    own indices, as in a manual computation; the sum over devices is the scatter of
    all of them); replicated indices and updates -> also sliced on the
    result's rows (each rank adds the updates of the rows it holds: the gradient of a
    vocabulary-sliced table); both sliced on the leading dim -> sliced on it; replicated
    indices, updates sliced on their last dim -> sliced on the last dim; both sliced on
    the bag dim -> ``local`` (each rank adds its own bags: partial sums).

    ``%g = dist.scatter_add %i, %u : (!dist.tensor<32x1xi32, @world, [replicated]>, !dist.tensor<32x16xf32, @world, [replicated]>) -> !dist.tensor<100x16xf32, @world, [sliced<0>]>``
    """

    name = "dist.scatter_add"
    INFER: ClassVar[bool] = False
    indices = operand_def(TensorType)
    updates = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_rule(self) -> None:
        self.check(self.indices.type, self.updates.type, self.result.type)

    @classmethod
    def check(cls, i: Attribute, u: Attribute, r: Attribute) -> None:
        """Raise ``RuleError`` unless ``r`` is a result of indices ``i`` and updates ``u``."""
        i, u, r = need_tensor(i, "indices"), need_tensor(u, "updates"), need_tensor(r, "result")
        same_mesh([i, u, r])
        si, su, sr = i.get_shape(), u.get_shape(), r.get_shape()
        if len(si) not in (2, 3) or len(su) != len(si) or len(sr) != len(si):
            raise RuleError(f"indices, updates and result must all be 2-d or all 3-d, got {i.format_shape()}, {u.format_shape()} and {r.format_shape()}")
        lead = len(si) - 2
        if si[:-1] != su[:-1] or sr[:lead] != si[:lead] or sr[-1] != su[-1]:
            raise RuleError(f"indices [.., B, L] and updates [.., B, D] give a result [.., R, D]: got {i.format_shape()}, {u.format_shape()} and {r.format_shape()}")
        if not isinstance(i.element_type, IntegerType):
            raise RuleError(f"indices must have an integer element type, got {i.element_type}")
        if u.element_type != r.element_type:
            raise RuleError(f"result element type must be the updates' {u.element_type}, got {r.element_type}")
        pi, pu, pr = i.get_placements(), u.get_placements(), r.get_placements()
        for axis, (x, y, z) in enumerate(zip(pi, pu, pr)):
            if not cls._rule(x, y, z, lead):
                raise RuleError(f"no scatter_add placement rule for indices {x}, updates {y} and result {z} on axis {axis}")
        for d in [0, lead + 1] if lead else [1]:  # the table dim and the row width
            if layout.slicing_axes(pu, d) != layout.slicing_axes(pr, d):
                raise RuleError(f"dim {d} must be sliced by the same axes in the same order in the updates and the result")

    @staticmethod
    def _rule(x: Placement, y: Placement, z: Placement, lead: int) -> bool:
        xs = x.dim.data if isinstance(x, Sliced) else None
        ys = y.dim.data if isinstance(y, Sliced) else None
        zs = z.dim.data if isinstance(z, Sliced) else None
        if isinstance(x, (Replicated, Unplaced, At, Local)) and x == y:
            return z == x or (isinstance(x, Replicated) and zs == lead)
        if lead and xs == 0 and ys == 0:
            return zs == 0
        if isinstance(x, Replicated) and ys == lead + 1:
            return zs == lead + 1
        if xs == lead and ys == lead:
            return isinstance(z, Local)
        return False


@irdl_op_definition
class SortOp(DistOp):
    """``sort``: the operands reordered along ``dim`` by the keys of operand 0, ascending
    and stable (equal keys keep their order); the other operands (an index ``iota``
    for an argsort) move with their keys. Float keys are ordered as JAX's ``jnp.sort``
    orders them: -0.0 equals +0.0, NaN after everything and equal to NaN; integer keys
    are signed. All operands share shape and placements, and so do the results;
    ``dim`` is not sliced. On a ``local`` axis each device sorts its own values (a
    manual computation's per-device values); sorting is not linear, so partial sums
    are reduced before a sort (``partition`` does) unless the program means each
    device's own.

    ``%s, %i = dist.sort %x, %j dim 1 : (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>) -> (!dist.tensor<8x16xf32, @world, [sliced<0>]>, !dist.tensor<8x16xi32, @world, [sliced<0>]>)``
    """

    name = "dist.sort"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"),)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, in_types, sizes, options):
        ts, dim = tensors_along(in_types, options["dim"])
        t0 = ts[0]
        if not is_scalar_type(t0.element_type) or t0.element_type == IntegerType(1):
            raise RuleError(f"keys must be floats or integers (not i1), got {t0.element_type}")
        for i, t in enumerate(ts):
            if t.get_shape() != t0.get_shape():
                raise RuleError(f"operand {i} of shape {t.format_shape()} is not operand 0's {t0.format_shape()}")
            if not layout.same_layout(t.get_placements(), t0.get_placements()):
                raise RuleError(f"operands must share placements, operand {i} differs from operand 0")
        ps = t0.get_placements()
        if dim in layout.sliced_dims(ps):
            raise RuleError(f"the sorted dim {dim} must not be sliced, got {layout.format_placements(ps)}")
        return list(ts)


@irdl_op_definition
class RemeshOp(DistOp):
    """``remesh``: see a value on a view of its mesh, or on the parent of a view. No data
    moves: the layout on the common parent mesh must be the same (``local``,
    ``replicated`` and ``unplaced`` hold on every factor axis, ``sliced<d>`` becomes
    ``sliced<d>`` on each factor with the first factor outermost, ``at<r>`` becomes
    ``at<>`` at the digits of r).

    ``%h = dist.remesh %x : !dist.tensor<1024xf32, @world, [local]> -> !dist.tensor<1024xf32, @hw, [local, local]>``
    """

    name = "dist.remesh"
    INFER: ClassVar[bool] = False
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_rule(self) -> None:
        t, r = self.input.type, self.result.type
        assert isinstance(t, TensorType) and isinstance(r, TensorType)
        if t.get_shape() != r.get_shape() or t.element_type != r.element_type:
            raise RuleError(
                f"result must keep shape and element type {t.format_shape()}x{t.element_type}, "
                f"got {r.format_shape()}x{r.element_type}"
            )
        mt, mr = lookup_mesh(self, t), lookup_mesh(self, r)
        if mt.root() is not mr.root():
            raise RuleError(f"meshes @{mt.mesh_name} and @{mr.mesh_name} are not views of one mesh")
        try:
            pt, pr = mt.to_root(t.get_placements()), mr.to_root(r.get_placements())
        except layout.LayoutError as e:
            raise RuleError(str(e)) from None
        if layout.same_layout(pt, pr):
            why = remesh_blocks_error(t, mt, r, mr)
            if why:
                raise RuleError(why)
        else:
            fmt = layout.format_placements
            root = mt.root().mesh_name
            seen = "" if mr.mesh_name == root else f" (that is {fmt(pr)} on @{root})"
            raise RuleError(
                f"result placements {fmt(r.get_placements())} on @{mr.mesh_name}{seen} do not keep the operand's "
                f"layout {fmt(t.get_placements())} on @{mt.mesh_name}, which is {fmt(pt)} on @{root}"
            )


def remesh_blocks_error(t: TensorType, mt: MeshOp, r: TensorType, mr: MeshOp, ranks: int | None = None) -> str | None:
    """Why some rank holds another block of ``t`` seen on ``mr`` than on ``mt`` (a dim the
    ranks do not divide, sliced over merged axes on one side and nested on the other),
    or None. Unknown sizes are checked when ``ranks`` fixes them."""
    if ranks is None:
        sizes = mt.root().sizes()
        if any(s is None for s in sizes):
            return None
        ranks = math.prod(sizes)  # type: ignore[arg-type]
    try:
        gt, gr = mt.grid(ranks), mr.grid(ranks)
    except layout.LayoutError:
        return None
    shape = t.get_shape()
    if not layout.uneven_dims(shape, t.get_placements(), gt.sizes) and not layout.uneven_dims(shape, r.get_placements(), gr.sizes):
        return None
    for rank in range(ranks):
        a = layout.block(shape, t.get_placements(), gt.sizes, gt.coords(rank))
        b = layout.block(shape, r.get_placements(), gr.sizes, gr.coords(rank))
        if a != b:
            d = next(k for k in range(len(shape)) if a[k] != b[k])
            return (
                f"rank {rank} holds elements {a[d].start}..{a[d].stop} of dim {d} on @{mt.mesh_name} but {b[d].start}..{b[d].stop} "
                f"on @{mr.mesh_name}: the ranks do not divide the dim ({shape[d]}), so its blocks over merged axes differ from its "
                f"nested blocks and remesh, which moves no data, cannot relate them"
            )
    return None


# ======================================================================================
# Layout ops (StableHLO's transpose, reshape, iota, slice, concatenate) and the
# per-device views of a value (to_local, from_local)
# ======================================================================================


def _permuted(t: TensorType, perm: Sequence[int]) -> list[Placement]:
    """Placements of ``t`` after its dims are permuted (result dim k is dim perm[k])."""
    ps = t.get_placements()
    out: list[Placement] = []
    for p in ps:
        out.append(sliced(list(perm).index(p.dim.data)) if isinstance(p, Sliced) else p)
    orders = {list(perm).index(d): layout.slicing_axes(ps, d) for d in layout.sliced_dims(ps)}
    return layout.with_orders(out, orders)


@irdl_op_definition
class TransposeOp(DistOp):
    """``transpose``: permute the dims (result dim k is operand dim ``perm[k]``); a sliced
    dim stays sliced where it moves.

    ``%t = dist.transpose %x perm [1, 0] : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<64x8xf32, @world, [sliced<0>]>``
    """

    name = "dist.transpose"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("perm", "ints"),)
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, in_types, sizes, options):
        t = need_tensor(in_types[0], "operand")
        perm = list(options["perm"])
        if sorted(perm) != list(range(t.rank)):
            raise RuleError(f"perm must be a permutation of 0..{t.rank - 1}, got {perm}")
        shape = [t.get_shape()[p] for p in perm]
        return [t.with_(shape=shape, placements=_permuted(t, perm))]


def reshape_groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """The dims of shapes ``a`` and ``b`` (equal element counts) in minimal groups of
    equal products, in order; a dim of size 1 outside a group is a group of its own."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i < len(a) and a[i] == 1:
            groups.append(([i], []))
            i += 1
            continue
        if j < len(b) and b[j] == 1:
            groups.append(([], [j]))
            j += 1
            continue
        if i >= len(a) or j >= len(b):
            raise RuleError(f"shapes {list(a)} and {list(b)} have different element counts")
        gi, gj, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                if i >= len(a):
                    raise RuleError(f"shapes {list(a)} and {list(b)} have different element counts")
                gi.append(i)
                pa *= a[i]
                i += 1
            else:
                if j >= len(b):
                    raise RuleError(f"shapes {list(a)} and {list(b)} have different element counts")
                gj.append(j)
                pb *= b[j]
                j += 1
        groups.append((gi, gj))
    return groups


def reshape_major_dims(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    """Pairs (dim of ``a``, dim of ``b``): the outermost dims of size > 1 of each group
    of ``reshape_groups`` (the only dims a sliced value may keep sliced)."""
    out = []
    for gi, gj in reshape_groups(a, b):
        ii = [d for d in gi if a[d] > 1]
        jj = [d for d in gj if b[d] > 1]
        if ii and jj:
            out.append((ii[0], jj[0]))
    return out


@irdl_op_definition
class ReshapeOp(DistOp):
    """``reshape``: the same elements in row-major order in another shape. Each rank
    reshapes its block, so a sliced dim must be the outermost dim (of size > 1) of the
    dims it is merged with or split into; it becomes the outermost dim of the result's
    group (whose size the slicing must divide).

    ``%r = dist.reshape %x : !dist.tensor<8x64xf32, @world, [sliced<1>]> -> !dist.tensor<8x4x16xf32, @world, [sliced<1>]>``
    """

    name = "dist.reshape"
    INFER: ClassVar[bool] = False
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @staticmethod
    def result_placements(t: TensorType, shape: Sequence[int]) -> list[Placement]:
        a = t.get_shape()
        if math.prod(a) != math.prod(shape):
            raise RuleError(f"cannot reshape {t.format_shape()} ({math.prod(a)} elements) to {'x'.join(map(str, shape)) or 'scalar'} ({math.prod(shape)} elements)")
        ps = t.get_placements()
        major = dict(reshape_major_dims(a, shape))
        out: list[Placement] = []
        for axis, p in enumerate(ps):
            if isinstance(p, Sliced):
                d = p.dim.data
                if d not in major:
                    raise RuleError(
                        f"operand is sliced on dim {d} on axis {axis}, which is not the outermost dim of the dims the reshape "
                        f"merges or splits it with: gather it first"
                    )
                out.append(sliced(major[d]))
            else:
                out.append(p)
        orders = {major[d]: layout.slicing_axes(ps, d) for d in layout.sliced_dims(ps)}
        return layout.with_orders(out, orders)

    @classmethod
    def result_type(cls, t: TensorType, shape: Sequence[int], sizes: Sequence[int | None] | None = None) -> TensorType:
        try:
            ps = cls.result_placements(t, shape)
        except RuleError as e:
            raise VerifyException(f"'{cls.name}' op {e}") from None
        return t.with_(shape=tuple(shape), placements=ps)

    @classmethod
    def result_types_for(cls, op: Operation, in_types: Sequence[Attribute]) -> list[Attribute]:
        t = need_tensor(in_types[0], "operand")
        r = op.results[0].type
        assert isinstance(r, TensorType)
        return [t.with_(shape=r.get_shape(), placements=cls.result_placements(t, r.get_shape()))]

    @staticmethod
    def blocks_error(t: TensorType, shape: Sequence[int], sizes: Sequence[int | None]) -> str | None:
        """Why some rank's block does not reshape into its block of the result (the
        ranks do not divide a sliced dim the same way before and after), or None."""
        if any(s is None for s in sizes):
            return None
        return ReshapeOp._blocks_error(t, tuple(shape), tuple(sizes))  # type: ignore[arg-type]

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def _blocks_error(t: TensorType, shape: tuple[int, ...], sizes: tuple[int, ...]) -> str | None:
        """``blocks_error`` once per (type, shape, sizes): it visits every rank, and a
        model's layers reshape the same types again and again."""
        a, ps = t.get_shape(), t.get_placements()
        if math.prod(a) != math.prod(shape):  # no reshape at all (sizes substituted unevenly: the tuner's checks)
            return f"shapes {list(a)} and {list(shape)} have different element counts"
        for gi, gj in reshape_groups(a, shape):
            ii = [d for d in gi if a[d] > 1]
            jj = [d for d in gj if shape[d] > 1]
            if not ii or not jj or ii[0] not in layout.sliced_dims(ps):
                continue
            d, e = ii[0], jj[0]
            inner_a = math.prod(a[k] for k in gi if k > d)
            inner_b = math.prod(shape[k] for k in gj if k > e)
            counts = layout.slicing_counts(ps, sizes, d)  # type: ignore[arg-type]
            for r in range(math.prod(counts)):
                digits = layout.at_digits(r, counts)
                (o1, n1), (o2, n2) = layout.dim_block(a[d], counts, digits), layout.dim_block(shape[e], counts, digits)
                if (o1 * inner_a, n1 * inner_a) != (o2 * inner_b, n2 * inner_b):
                    return (
                        f"block {r} of dim {d} (elements {o1 * inner_a}..{(o1 + n1) * inner_a}) is not block {r} of the result's "
                        f"dim {e} (elements {o2 * inner_b}..{(o2 + n2) * inner_b}): the ranks slice the two dims differently, gather first"
                    )
        return None

    def verify_rule(self) -> None:
        t, r = self.input.type, self.result.type
        assert isinstance(t, TensorType) and isinstance(r, TensorType)
        if t.element_type != r.element_type:
            raise RuleError(f"result element type must be {t.element_type}, got {r.element_type}")
        expect_type(self, "result", r, t.with_(shape=r.get_shape(), placements=self.result_placements(t, r.get_shape())))
        why = self.blocks_error(t, r.get_shape(), lookup_mesh(self, t).sizes())
        if why:
            raise RuleError(why)


@irdl_op_definition
class IotaOp(DistOp):
    """``iota``: the tensor whose elements count along ``dim`` (element [i0, .., in] is
    i_dim), in the result's element type. Every rank holding the value holds its block
    of it (a ``local`` value: the whole iota on every rank).

    ``%i = dist.iota dim 1 : () -> !dist.tensor<4x32xi32, @world, [sliced<1>]>``
    """

    name = "dist.iota"
    INFER: ClassVar[bool] = False
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"),)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_rule(self) -> None:
        r = self.result.type
        assert isinstance(r, TensorType)
        check_dim(self.option("dim"), r)


@irdl_op_definition
class ExtractSliceOp(DistOp):
    """``extract_slice``: elements ``offsets[d] + strides[d] * i`` of each dim d (the
    result's shape gives the count), StableHLO's ``slice``. A dim that is sliced across
    ranks must be taken whole (offset 0, stride 1, full size); placements are kept.

    ``%s = dist.extract_slice %x offsets [0, 2] strides [1, 2] : !dist.tensor<8x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x4xf32, @world, [sliced<0>]>``
    """

    name = "dist.extract_slice"
    INFER: ClassVar[bool] = False
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("offsets", "ints"), Kw("strides", "ints"))
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def get(cls, x: SSAValue, offsets: Sequence[int], sizes: Sequence[int], strides: Sequence[int]) -> ExtractSliceOp:
        t = x.type
        assert isinstance(t, TensorType)
        r = t.with_(shape=tuple(sizes))
        try:
            cls.check(t, r, offsets, strides)
        except RuleError as e:
            raise VerifyException(f"'{cls.name}' op {e}") from None
        return cls.make([x], [r], offsets=list(offsets), strides=list(strides))

    def full_dims(self) -> list[int]:
        t, r = self.input.type, self.result.type
        assert isinstance(t, TensorType) and isinstance(r, TensorType)
        return [d for d, (o, s, n, m) in enumerate(zip(self.option("offsets"), self.option("strides"), r.get_shape(), t.get_shape())) if o == 0 and s == 1 and n == m]

    @classmethod
    def result_types_for(cls, op: Operation, in_types: Sequence[Attribute]) -> list[Attribute]:
        t = need_tensor(in_types[0], "operand")
        r = op.results[0].type
        assert isinstance(r, TensorType)
        new = t.with_(shape=r.get_shape())
        cls.check(t, new, op.option("offsets"), op.option("strides"))  # type: ignore[attr-defined]
        return [new]

    @staticmethod
    def check(t: TensorType, r: TensorType, offsets: Sequence[int], strides: Sequence[int]) -> None:
        shape, out = t.get_shape(), r.get_shape()
        if not len(offsets) == len(strides) == len(shape) == len(out):
            raise RuleError(f"offsets and strides need one entry per dim of {t.format_shape()}")
        for d, (o, s, n, m) in enumerate(zip(offsets, strides, out, shape)):
            if s < 1 or o < 0 or (n > 0 and o + (n - 1) * s >= m):
                raise RuleError(f"dim {d}: {n} element(s) from {o} by {s} do not fit in size {m}")
        ps = t.get_placements()
        for d in layout.sliced_dims(ps):
            if not (offsets[d] == 0 and strides[d] == 1 and out[d] == shape[d]):
                raise RuleError(f"dim {d} is sliced across ranks: it must be taken whole")
        if t.element_type != r.element_type:
            raise RuleError(f"result element type must be {t.element_type}, got {r.element_type}")

    def verify_rule(self) -> None:
        t, r = self.input.type, self.result.type
        assert isinstance(t, TensorType) and isinstance(r, TensorType)
        self.check(t, r.with_(placements=t.get_placements()), self.option("offsets"), self.option("strides"))
        expect_type(self, "result", r, t.with_(shape=r.get_shape()))


@irdl_op_definition
class ConcatOp(DistOp):
    """``concat``: the operands one after the other along ``dim`` (StableHLO's
    ``concatenate``). The operands share their placements; ``dim`` is not sliced.

    ``%c = dist.concat %a, %b dim 1 : (!dist.tensor<8x4xf32, @world, [sliced<0>]>, !dist.tensor<8x2xf32, @world, [sliced<0>]>) -> !dist.tensor<8x6xf32, @world, [sliced<0>]>``
    """

    name = "dist.concat"
    KEYWORDS: ClassVar[tuple[Kw, ...]] = (Kw("dim", "int"),)
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, in_types, sizes, options):
        ts, dim = tensors_along(in_types, options["dim"])
        t0 = ts[0]
        total = 0
        for i, t in enumerate(ts):
            s0, s = list(t0.get_shape()), list(t.get_shape())
            if len(s) != len(s0) or any(x != y for k, (x, y) in enumerate(zip(s, s0)) if k != dim):
                raise RuleError(f"operand {i} of shape {t.format_shape()} does not match {t0.format_shape()} outside dim {dim}")
            if t.element_type != t0.element_type:
                raise RuleError(f"operand {i} has element type {t.element_type}, operand 0 {t0.element_type}")
            if not layout.same_layout(t.get_placements(), t0.get_placements()):
                raise RuleError(f"operands must share placements, operand {i} differs from operand 0")
            total += s[dim]
        if dim in layout.sliced_dims(t0.get_placements()):
            raise RuleError(f"dim {dim} is sliced across ranks: gather it first")
        shape = list(t0.get_shape())
        shape[dim] = total
        return [t0.with_(shape=shape)]


def _view_rule(op: DistOp, src: TensorType, dst: TensorType, local_side: str) -> None:
    """Shared rule of ``to_local``/``from_local``: same elements, same per-rank buffer
    shape, and on each axis where the placements differ, ``local`` on ``local_side``
    and replicated or sliced on the other."""
    if src.element_type != dst.element_type:
        raise RuleError(f"result element type must be {src.element_type}, got {dst.element_type}")
    mesh = lookup_mesh(op, src)
    if lookup_mesh(op, dst) is not mesh:
        raise RuleError(f"result must be on mesh @{src.mesh_name}, got @{dst.mesh_name}")
    sizes = mesh.sizes()
    for a, (p, q) in enumerate(zip(src.get_placements(), dst.get_placements())):
        if p == q or (isinstance(p, Sliced) and isinstance(q, Sliced) and p.dim == q.dim):
            continue
        loc, other = (p, q) if local_side == "operand" else (q, p)
        kinds = (Replicated, Sliced, At) if local_side == "operand" else (Replicated, Sliced)
        if not isinstance(loc, Local) or not isinstance(other, kinds):
            want = "operand local and result replicated, sliced or at<r>" if local_side == "operand" else "operand replicated or sliced and result local"
            raise RuleError(f"axis {a}: {want}, got {p} -> {q}")
        if sizes[a] is None:
            raise RuleError(f"axis {a} of @{mesh.mesh_name} needs a static size")
    if any(s is None for s in sizes):
        return
    a_shape = layout.local_shape(src.get_shape(), src.get_placements(), sizes)  # type: ignore[arg-type]
    b_shape = layout.local_shape(dst.get_shape(), dst.get_placements(), sizes)  # type: ignore[arg-type]
    if a_shape != b_shape:
        raise RuleError(f"each rank's buffer must keep its shape: {'x'.join(map(str, a_shape)) or 'scalar'} becomes {'x'.join(map(str, b_shape)) or 'scalar'}")
    why = view_blocks_error(src, dst, sizes)  # type: ignore[arg-type]
    if why:
        raise RuleError(why)


def view_blocks_error(src: TensorType, dst: TensorType, sizes: Sequence[int]) -> str | None:
    """Why ``to_local``/``from_local`` cannot keep every rank's buffer: an axis turns a
    dim the ranks do not divide from sliced to local or back (a local value has one
    shape on every rank), or None."""
    for a, (p, q) in enumerate(zip(src.get_placements(), dst.get_placements())):
        for t, x in ((src, p), (dst, q)):
            if p != q and isinstance(x, Sliced) and x.dim.data in layout.uneven_dims(t.get_shape(), t.get_placements(), sizes):
                return (
                    f"axis {a}: a local value has one shape on every rank, and the ranks' blocks differ: "
                    f"{layout.describe_uneven(t.get_shape(), t.get_placements(), sizes, x.dim.data)}"
                )
    return None


class _ViewOp(DistOp):
    """Base of ``to_local``/``from_local``: the same per-rank buffers, another meaning;
    ``LOCAL_SIDE`` says which side is ``local`` where the placements differ."""

    LOCAL_SIDE: ClassVar[str] = "result"
    INFER: ClassVar[bool] = False
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_rule(self) -> None:
        t, r = self.input.type, self.result.type
        assert isinstance(t, TensorType) and isinstance(r, TensorType)
        _view_rule(self, t, r, self.LOCAL_SIDE)


@irdl_op_definition
class ToLocalOp(_ViewOp):
    """``to_local``: each rank's buffer, as its own value (DTensor's ``to_local``): on
    the axes where the result is ``local``, a replicated value becomes the list of its
    copies and a sliced value the list of its blocks (the result's shape is the block's).
    No data moves. Per-device programs (``sdy.manual_computation``) compute on these.

    ``%l = dist.to_local %x : !dist.tensor<64xf32, @world, [sliced<0>]> -> !dist.tensor<16xf32, @world, [local]>``
    """

    name = "dist.to_local"
    LOCAL_SIDE: ClassVar[str] = "result"


@irdl_op_definition
class FromLocalOp(_ViewOp):
    """``from_local``: the ranks' own values seen as one distributed value (DTensor's
    ``from_local``): on the axes where the operand is ``local`` and the result sliced, the
    ranks' values are the blocks of the result (rank i's value is block i); where the
    result is replicated, the ranks' values must be equal (the interpreter checks it);
    where it is ``at<r>``, rank r's value is the value. No data moves.

    ``%g = dist.from_local %l : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [sliced<0>]>``
    """

    name = "dist.from_local"
    LOCAL_SIDE: ClassVar[str] = "operand"


Dist = Dialect(
    "dist",
    [
        MeshOp,
        ReduceOp,
        SliceOp,
        JoinOp,
        ReplOp,
        DropOp,
        StoreOp,
        LoadOp,
        MapOp,
        YieldOp,
        TakeSliceOp,
        MatmulOp,
        ReduceTensorOp,
        CastOp,
        DropoutOp,
        EmbeddingBagOp,
        ScatterAddOp,
        SortOp,
        RemeshOp,
        TransposeOp,
        ReshapeOp,
        IotaOp,
        ExtractSliceOp,
        ConcatOp,
        ToLocalOp,
        FromLocalOp,
    ],
    [TensorType, Replicated, Sliced, Local, At, Unplaced],
)
