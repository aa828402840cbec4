"""The program the planner places, as a graph: its logical values, its ops with their
factors (the partitioner's rules, ``frontends/partition.py``), its arguments (free or
fixed) and results, and the classes of ops that look alike (repeated layers).

The planner reads two forms of a function (one function per module, or ``func_name``):

* **a one-device program**: every mesh of the module has one rank (a plain
  ``jax.jit(f).lower(x)`` imports so, on a mesh ``["_"]`` of size 1; a distir program
  on ``dist.mesh @world shape = [1]``). Every placement is the planner's to choose;
  collectives and ``take_slice``/``remesh`` over one rank are identities and are
  dropped;
* **the partitioner's global form** (``frontends/partition.py``'s module doc): the
  computation on ``unplaced`` values; an argument typed ``unplaced`` is the planner's
  to place (free), a placed argument keeps its placement (fixed: its source chain says
  it, e.g. a gradient of partial sums ``local``), and so does a result placed by a sink
  chain. A fixed placement on a one-axis mesh (``[?]`` or ``[N]``) means the same over
  all N ranks on any mesh the planner tries (``local`` on every axis, ``sliced<d>`` on
  every axis in order: the same blocks on the same ranks); on a mesh of several axes
  the planner keeps that mesh's shape.

Values are numbered (``Value``); nodes are the tensor arguments (``ArgNode``) and the
ops (``OpNode``) in program order. Each op's ``factors`` are ``partition.factors`` with
its values replaced by their numbers: a strategy of the op gives each mesh axis to at
most one factor (``strategies.py``).

**Classes** (AutoParallel's clustering of repeated layers): nodes that look alike for
``ROUNDS`` steps of their neighbourhood -- the op and its attributes, its shapes, then
the classes of its producers and users, refined as in the Weisfeiler-Lehman test --
form one class, and the integer program gives a class one strategy. The 24 layers of a
GPT step are then the few distinct layers near the ends and one class per op of the
middle layers: the program's size stops mattering. Giving alike nodes one strategy is a
restriction of the search (every plan it finds is valid); layers that differ in
anything the model sees (shapes, ops, what they connect to) are never merged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from distir.dialects import coll, dist, layout
from distir.dialects.diagnostics import InputRejected
from distir.dialects.dist import TensorType, element_bytes
from distir.dialects.placements import At, Local, Placement, Replicated, Sliced, Unplaced
from distir.frontends import partition

ROUNDS = 4
"""Refinement rounds of the classes: nodes alike within this many hops are one class."""


class PlanError(InputRejected):
    """A program the planner cannot take (the message says where and why)."""


@dataclass
class Value:
    """A logical tensor: its shape and element type, the node and result index that
    produce it, and its uses (node, operand slot)."""

    id: int
    shape: tuple[int, ...]
    element_type: Attribute
    producer: int
    index: int
    name: str
    uses: list[tuple[int, int]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * element_bytes(self.element_type)


@dataclass
class Fixed:
    """A placement the program fixes: per axis of the program's own mesh, and the
    reduction of each ``local`` axis."""

    placements: tuple[Placement, ...]
    kinds: dict[int, str] = field(default_factory=dict)


@dataclass
class Node:
    """An argument (``op`` None, ``arg`` its index) or an op; ``operands`` the numbers of
    its tensor operands (None for a scalar), ``results`` of its results."""

    id: int
    operands: list[int | None]
    results: list[int]
    op: Operation | None = None
    arg: int | None = None
    factors: list[tuple[list[tuple[int, int]], str | None]] | None = None
    """``partition.factors(op)``: per factor, its (value, dim) pairs and reduction kind;
    None for an op without factors (it runs on replicated operands)."""
    fixed: Fixed | None = None
    """A fixed argument's placement (None: free)."""
    position: int = -1
    """Index in program order among the ops (-1 for an argument)."""

    @property
    def is_arg(self) -> bool:
        return self.op is None


@dataclass
class Result:
    """A function result: the value returned, the argument it is written into
    (``dist.inplace``), or a fixed placement (a sink chain)."""

    value: int
    inplace: int | None = None
    fixed: Fixed | None = None


@dataclass
class Graph:
    module: ModuleOp
    function: func.FuncOp
    values: list[Value]
    nodes: list[Node]
    results: list[Result]
    one_device: bool
    mesh_sizes: tuple[int | None, ...]
    """The program's own mesh (the one its fixed placements refer to)."""
    arg_node: dict[int, int]
    """Argument index -> node."""
    classes: list[list[int]] = field(default_factory=list)
    class_of: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    """Per node, what it is without its neighbours (``tokens``): nodes of one kind cost
    the same under the same strategy (the projections of every layer, wherever they
    sit)."""
    peaks: dict[int, list[tuple[int, list[int]]]] = field(default_factory=dict, repr=False, compare=False)
    """``peak_points`` by count, found once (every mesh shape's integer program asks)."""
    skeleton: object = field(default=None, repr=False, compare=False)
    """``ilp.Skeleton``: what the integer program takes from the graph alone (its edges
    between classes, its arguments and live values per class, its element-wise runs),
    found once (every mesh shape's integer program asks)."""

    @property
    def ops(self) -> list[Node]:
        return [n for n in self.nodes if not n.is_arg]

    def describe(self) -> str:
        return f"{len(self.nodes)} nodes ({sum(1 for n in self.nodes if n.is_arg)} arguments), {len(self.values)} values, {len(self.classes)} classes"


# ======================================================================================
# Reading the function
# ======================================================================================


IDENTITIES = (coll.AllReduceOp, coll.AllGatherOp, coll.ReduceScatterOp, coll.BroadcastOp, coll.AllToAllOp, coll.ReduceOp, dist.TakeSliceOp, dist.RemeshOp)
"""Ops that are identities on one rank (dropped from a one-device program)."""


def _function(module: ModuleOp, func_name: str | None) -> func.FuncOp:
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    if func_name is not None:
        f = next((op for op in funcs if op.sym_name.data == func_name), None)
        if f is None:
            raise PlanError(f"no function @{func_name} (functions: {', '.join('@' + g.sym_name.data for g in funcs) or 'none'})")
        return f
    public = [f for f in funcs if f.sym_visibility is None or f.sym_visibility.data != "private"]
    if len(public) != 1:
        raise PlanError(f"the program has {len(public)} public functions ({', '.join('@' + g.sym_name.data for g in public)}): name one with --func")
    return public[0]


def _meshes(module: ModuleOp) -> dict[str, dist.MeshOp]:
    return {op.mesh_name: op for op in module.ops if isinstance(op, dist.MeshOp)}


def read_graph(module: ModuleOp, func_name: str | None = None) -> Graph:
    """The graph of ``module``'s function (module doc); a ``PlanError`` names what the
    planner cannot take."""
    f = _function(module, func_name)
    meshes = _meshes(module)
    block = f.body.block
    used = set()
    for v in [*block.args, *(r for op in block.walk() for r in op.results)]:
        if isinstance(v.type, TensorType):
            used.add(v.type.mesh_name)
    sizes = {name: m.sizes() for name, m in meshes.items()}
    if not used:
        raise PlanError(f"@{f.sym_name.data} has no tensor values: nothing to place")
    one_device = all(sizes.get(m) is not None and all(s == 1 for s in sizes[m]) for m in used)
    if not one_device and len(used) > 1:
        raise PlanError(f"@{f.sym_name.data} uses several meshes ({', '.join('@' + m for m in sorted(used))}): the planner places a program on one mesh")
    mesh_sizes = tuple(sizes[next(iter(used))]) if len(used) == 1 else (1,)
    if not one_device and len(mesh_sizes) > 1 and any(s is None for s in mesh_sizes):
        raise PlanError(f"mesh @{next(iter(used))} has several axes and a dynamic size: give its sizes, or write the program for one device")
    return _Reader(module, f, one_device, mesh_sizes).read()


class _Reader:
    def __init__(self, module: ModuleOp, f: func.FuncOp, one_device: bool, mesh_sizes: tuple[int | None, ...]):
        from distir.dialects.frontend import source_spans

        self.module = module
        self.f = f
        self.one_device = one_device
        self.mesh_sizes = mesh_sizes
        self.spans = dict(source_spans(module))
        self.values: list[Value] = []
        self.nodes: list[Node] = []
        self.vid: dict[SSAValue, int] = {}
        self.chain_ops: set[Operation] = set()

    def fail(self, op: Operation | None, msg: str) -> PlanError:
        from distir.dialects.verifier import located

        return PlanError(located(op, f"distir-plan: {msg}", self.spans))

    def new_value(self, v: SSAValue, producer: int, index: int) -> int:
        t = v.type
        assert isinstance(t, TensorType)
        i = len(self.values)
        name = v.name_hint or (f"arg{v.index}" if isinstance(v, BlockArgument) else f"v{i}")
        self.values.append(Value(i, t.get_shape(), t.element_type, producer, index, name))
        self.vid[v] = i
        return i

    def read(self) -> Graph:
        block = self.f.body.block
        arg_node: dict[int, int] = {}
        for a in block.args:
            if not isinstance(a.type, TensorType):
                continue
            n = len(self.nodes)
            node = Node(n, [], [], arg=a.index)
            self.nodes.append(node)
            arg_node[a.index] = n
            fixed, logical = self.argument(a)
            node.fixed = fixed
            node.results = [self.new_value(a, n, 0)]
            if logical is not a:
                self.vid[logical] = node.results[0]
        position = 0
        ret: func.ReturnOp | None = None
        for op in block.ops:
            if op in self.chain_ops:
                continue
            if isinstance(op, func.ReturnOp):
                ret = op
                continue
            if self.one_device and isinstance(op, IDENTITIES) and len(op.operands) == 1 and len(op.results) == 1:
                src = self.vid.get(op.operands[0])
                if src is None:
                    raise self.fail(op, f"'{op.name}' on a value the planner does not know")
                self.vid[op.results[0]] = src
                continue
            if not self.one_device:
                if isinstance(op, partition.SINK_PRIMS):
                    continue  # a result's sink chain (read with the return)
                tensors = [v for v in (*op.operands, *op.results) if isinstance(v.type, TensorType)]
                if not all(partition.is_global(v) for v in tensors):
                    raise self.fail(op, f"'{op.name}' computes on placed values: the planner places programs written on logical (unplaced) values, or for one device")
            if isinstance(op, (coll.CollectiveOp,)) or (op.regions and not isinstance(op, dist.MapOp)):
                raise self.fail(op, f"'{op.name}' is not something the planner places (a computation it can slice: maps, matmuls, reductions, ...)")
            if not isinstance(op, dist.DistOp) and any(isinstance(v.type, TensorType) for v in op.results):
                raise self.fail(op, f"'{op.name}' is not a dist op the planner knows")
            n = len(self.nodes)
            operands: list[int | None] = []
            for x in op.operands:
                if isinstance(x.type, TensorType):
                    if x not in self.vid:
                        raise self.fail(op, f"'{op.name}' uses a value the planner does not know")
                    operands.append(self.vid[x])
                else:
                    operands.append(None)
            node = Node(n, operands, [], op=op, position=position)
            position += 1
            self.nodes.append(node)
            node.results = [self.new_value(r, n, i) for i, r in enumerate(op.results) if isinstance(r.type, TensorType)]
            fs = partition.factors(op)
            if fs is not None:
                node.factors = [([(self.vid[v], d) for v, d in fc.dims if v in self.vid], fc.reduce) for fc in fs]
        for node in self.nodes:
            for k, x in enumerate(node.operands):
                if x is not None:
                    self.values[x].uses.append((node.id, k))
        results = self.returns(ret)
        g = Graph(self.module, self.f, self.values, self.nodes, results, self.one_device, self.mesh_sizes, arg_node)
        g.kind = tokens(g)
        g.class_of, g.classes = classify(g, g.kind)
        return g

    # -- boundaries ----------------------------------------------------------------------
    def argument(self, a: BlockArgument) -> tuple[Fixed | None, SSAValue]:
        """(fixed placement or None, the argument's logical value)."""
        t = a.type
        assert isinstance(t, TensorType)
        if self.one_device or all(isinstance(p, Unplaced) for p in t.get_placements()):
            return None, a
        users = [u.operation for u in a.uses]
        if len(users) != 1 or not isinstance(users[0], partition.SOURCE_PRIMS):
            raise self.fail(self.f, f"argument %{a.name_hint or a.index} is placed but not joined into a logical value (a chain of dist.join/drop/reduce/load): give it 'unplaced' placements to let the planner place it, or write the program on logical values")
        chain = [users[0]]
        while not partition.is_global(chain[-1].results[0]):
            nxt = [u.operation for u in chain[-1].results[0].uses]
            if len(nxt) != 1 or not isinstance(nxt[0], partition.SOURCE_PRIMS):
                raise self.fail(chain[-1], f"the chain of argument %{a.name_hint or a.index} does not end in a logical value")
            chain.append(nxt[0])
        self.chain_ops.update(chain)
        kinds = {op.option("axis"): op.option("op") for op in chain if isinstance(op, dist.ReduceOp)}
        for p in t.get_placements():
            if not isinstance(p, (Replicated, Sliced, Local, At)):
                raise self.fail(self.f, f"argument %{a.name_hint or a.index}: placement {p} cannot be fixed")
        return Fixed(t.get_placements(), kinds), chain[-1].results[0]

    def returns(self, ret: func.ReturnOp | None) -> list[Result]:
        if ret is None:
            return []
        out = []
        for i, v in enumerate(ret.operands):
            if not isinstance(v.type, TensorType):
                raise self.fail(ret, f"result {i} is a scalar: the planner places tensors only")
            inplace = None
            attrs = self.f.res_attrs.data[i].data if self.f.res_attrs is not None else {}
            if "dist.inplace" in attrs:
                inplace = attrs["dist.inplace"].value.data  # type: ignore[attr-defined]
            fixed = None
            if not self.one_device and not partition.is_global(v):
                chain = []
                x = v
                while isinstance(x.owner, partition.SINK_PRIMS):
                    chain.append(x.owner)
                    x = x.owner.operands[0]
                if not chain or not partition.is_global(x):
                    raise self.fail(ret, f"result {i} is placed but not made from a logical value (a chain of dist.slice/repl/store)")
                fixed = Fixed(v.type.get_placements())  # type: ignore[attr-defined]
                v = x
            if v not in self.vid:
                raise self.fail(ret, f"result {i} is a value the planner does not know")
            out.append(Result(self.vid[v], inplace, fixed))
        return out


# ======================================================================================
# Classes of alike nodes
# ======================================================================================


def _digest(*parts: object) -> int:
    return hash(parts)


def _body_key(op: Operation) -> tuple:
    if not op.regions:
        return ()
    return tuple((o.name, tuple(o.properties.values()), tuple(r.type for r in o.results)) for r in op.regions for b in r.blocks for o in b.ops)


def tokens(g: Graph) -> list[int]:
    """What each node is, without its neighbours: op, attributes, shapes, (argument)
    fixed placement and whether a result is written into it; equal tokens, equal nodes
    (labels are compared within one run only)."""
    inplace = {r.inplace for r in g.results if r.inplace is not None}
    returned: dict[int, list[tuple[bool, bool]]] = {}
    for r in g.results:
        returned.setdefault(g.values[r.value].producer, []).append((r.inplace is not None, r.fixed is not None))
    out = []
    for node in g.nodes:
        if node.is_arg:
            v = g.values[node.results[0]]
            fixed = tuple(node.fixed.placements) if node.fixed else None
            out.append(_digest("arg", v.shape, v.element_type, fixed, node.arg in inplace))
            continue
        op = node.op
        assert op is not None
        types = tuple(x.type for x in (*op.operands, *op.results))
        opts = tuple(op.properties.items())
        out.append(_digest(op.name, types, opts, _body_key(op), tuple(sorted(returned.get(node.id, ())))))
    return out


def classify(g: Graph, label: list[int] | None = None, rounds: int = ROUNDS) -> tuple[list[int], list[list[int]]]:
    """(class of each node, the nodes of each class), classes numbered by their first
    node (module doc); ``label``: the nodes' ``tokens`` when known."""
    label = tokens(g) if label is None else label
    users: list[list[tuple[int, int, int]]] = [[] for _ in g.nodes]  # (result index, user, slot)
    for n in g.nodes:
        for k, x in enumerate(n.operands):
            if x is not None:
                v = g.values[x]
                users[v.producer].append((v.index, n.id, k))
    for _ in range(rounds):
        new = []
        for n in g.nodes:
            ins = tuple((k, label[g.values[x].producer], g.values[x].index) for k, x in enumerate(n.operands) if x is not None)
            outs = tuple(sorted((i, label[u], k) for i, u, k in users[n.id]))
            new.append(_digest(label[n.id], ins, outs))
        if len(set(new)) == len(set(label)):
            label = new
            break
        label = new
    index: dict[int, int] = {}
    class_of = []
    classes: list[list[int]] = []
    for n in g.nodes:
        c = index.setdefault(label[n.id], len(classes))
        if c == len(classes):
            classes.append([])
        classes[c].append(n.id)
        class_of.append(c)
    return class_of, classes


def liveness(g: Graph) -> tuple[list[int], list[int]]:
    """(first, last) op position at which each value is live: from its producer (an
    argument: -1) to its last use (a result: past the last op)."""
    end = max((n.position for n in g.nodes if not n.is_arg), default=0) + 1
    first = [g.nodes[v.producer].position for v in g.values]
    last = list(first)
    for v in g.values:
        for u, _ in v.uses:
            last[v.id] = max(last[v.id], g.nodes[u].position)
    for r in g.results:
        last[r.value] = end
    return first, last


def peak_points(g: Graph, count: int = 3) -> list[tuple[int, list[int]]]:
    """The ``count`` op positions where the most bytes of intermediate values (not
    arguments) are live on one device, with the values live there: where the memory of
    a plan peaks (the planner's memory constraints are stated there)."""
    got = g.peaks.get(count)
    if got is None:
        got = g.peaks[count] = _peak_points(g, count)
    return got


def _peak_points(g: Graph, count: int) -> list[tuple[int, list[int]]]:
    first, last = liveness(g)
    n_ops = max((n.position for n in g.nodes if not n.is_arg), default=-1) + 1
    delta = [0] * (n_ops + 2)
    # a result written in place (``dist.inplace``) is its argument's buffer, counted
    # with the arguments (as ``memory.memory_per_rank`` counts it)
    written = {r.value for r in g.results if r.inplace is not None}
    for v in g.values:
        if g.nodes[v.producer].is_arg or v.id in written:
            continue
        delta[first[v.id]] += v.nbytes
        delta[min(last[v.id], n_ops) + 1] -= v.nbytes
    live, acc = [], 0
    for p in range(n_ops):
        acc += delta[p]
        live.append(acc)
    order = sorted(range(n_ops), key=lambda p: (-live[p], p))
    chosen: list[int] = []
    for p in order:
        if len(chosen) == count:
            break
        if all(abs(p - q) > 1 for q in chosen):
            chosen.append(p)
    out = []
    for p in sorted(chosen):
        out.append((p, [v.id for v in g.values if not g.nodes[v.producer].is_arg and v.id not in written and first[v.id] <= p <= last[v.id]]))
    return out


def nbytes_of(shape: Sequence[int], element_type: Attribute) -> int:
    return math.prod(shape) * element_bytes(element_type)
