"""The integer program that places every value on one mesh (Alpa §4.2, AutoParallel).

**Variables.** For each class c of alike nodes (``graph.classify``) and each of its
strategies i (``strategies.py``), a binary ``x[c,i]``: the class runs strategy i. For
each edge e between two classes -- an op of class v reading, at operand slot k, result
j of a node of class u -- a continuous ``y[e,i,t] >= 0`` for every strategy pair.

**Constraints.**

* one strategy per class: ``sum_i x[c,i] = 1``;
* the edge variables are the product of their ends' choices (Alpa's linearisation):
  ``sum_t y[e,i,t] = x[u,i]`` and ``sum_i y[e,i,t] = x[v,t]``; with one-hot ``x`` this
  leaves exactly ``y[e,i,t] = x[u,i] x[v,t]``, so ``y`` needs no integrality;
* memory per rank, at each of the program's memory peaks p (``graph.peak_points``):
  ``sum_c sum_i m_p[c,i] x[c,i] <= M`` where ``m_p[c,i]`` is the bytes per rank of the
  class's arguments (parameters, optimizer state: every argument is live throughout)
  and of its values live at p, laid out by strategy i.

**Objective.** Minimise the predicted step time
``sum_c sum_i n_c w[c,i] x[c,i] + sum_e n_e sum_{i,t} R_e[i,t] y[e,i,t]``: ``w[c,i]``
the seconds of the class's op on each rank's blocks, ``R_e[i,t]`` those of the
collectives that turn the producer's layout under i into the layout the user needs
under t (``costs.py``: both from the cost model), ``n_c``/``n_e`` how many nodes and
edges the class and the edge stand for. An edge inside a class (a class feeding itself)
is its diagonal, added to ``w``; an edge whose end has one strategy (a fixed argument)
is a row or column of ``R``, added to the other end's ``w``. Results cost their
resharding: into the argument they are written into (an edge to it), into a fixed
placement, or, free, into their own layout with partial sums completed.

**What the lowering runs as one** (``Group``; a variable ``z[g]`` in [0, 1] each).
The lowering combines independent AllReduces of one kind into one call over one bucket
(``combine-collectives``, ``lower-buckets``: a data-parallel step's gradients) and runs
consecutive element-wise ops of one iteration space as one kernel
(``lower-to-kernels``). Their members' costs leave out what they share (a bucket's
latency, its bytes priced at the tangent of the cost model's curve at the bucket's
size: ``costs.py``; a kernel's launch), and each group pays it once:
``+ sum_g s_g z[g]`` with ``z[g] >= sum`` of the variables of any one member that
carries it (an edge's pairs whose resharding has an AllReduce of the group, a
class's strategies of the group's layout). Which collectives can share a bucket is
decided as the lowering decides it, on the program's order (``_combined``), which
kernels as it fuses them (``_kernels``); alike groups (the layers') are one variable
with their count, so the program still grows with the distinct ops. A group of one
member, or one always on, is that member's cost (``Group.folded``).

Solved by HiGHS (``scipy.optimize.milp``). With the memory constraints infeasible, the
same program minimising the largest peak instead gives the smallest memory per rank
the mesh allows (what ``distir-plan`` reports when no plan fits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from distir.lowering.lower_to_kernels import ELEMENTWISE as KERNEL_ELEMENTWISE
from distir.planner.costs import BUCKET_BYTES, Charge, Costs, ShapeCosts
from distir.planner.graph import Graph
from distir.planner.strategies import Layout, Strategy, arg_strategies, op_strategies


LEADERS = ("dist.matmul", "dist.embedding_bag", "dist.iota")
"""Ops that always get variables of their own: where the integer program decides
(everything else follows its main operand, module doc, unless that operand comes from
a class of one strategy, a fixed argument: the op then decides too, or the cast of a
``local`` gradient would always be replicated (an AllReduce) and the update of a
replicated parameter too (its state gathered): ZeRO-1's reduce-scattered gradient
and update on the state's slices could not be written)."""


@dataclass
class Edge:
    """An edge between two root classes in layout space: ``cost[a, b]`` is the seconds of
    one such edge when the producer's strategy falls in group ``a`` (``left[i]``: the
    group of root strategy i) and the user's in group ``b`` (``right[t]``)."""

    u: int
    v: int
    count: int
    cost: np.ndarray
    left: np.ndarray
    right: np.ndarray


@dataclass
class Problem:
    """The integer program of one mesh (module doc)."""

    strategies: list[list[Strategy]]
    """Per class, its strategies."""
    root: list[int]
    """Per class, the class whose variables it follows (itself for a root)."""
    follow: list[np.ndarray]
    """Per class, its strategy under each strategy of its root."""
    counts: list[int]
    work: dict[int, np.ndarray]
    """Per root class: seconds per root strategy of everything that follows it."""
    edges: list[Edge]
    memory: list[tuple[int, dict[int, np.ndarray]]]
    """Per peak: (op position, per root class the bytes per rank of each root strategy)."""
    variables: int = 0
    groups: list[Group] = field(default_factory=list)
    """Collectives and kernels the lowering runs as one, paid once (``Group``)."""
    modes: dict[tuple, frozenset] = field(default_factory=dict)
    """``Structure.modes``."""
    launched: dict[int, tuple[frozenset, frozenset, str]] = field(default_factory=dict)
    """``Structure.launched``."""
    sizes: dict[tuple, float] = field(default_factory=dict)
    """``Structure.sizes``."""

    @property
    def roots(self) -> list[int]:
        return sorted(self.work)

    def size(self) -> dict[str, int]:
        xs = sum(len(self.strategies[r]) for r in self.work)
        ys = sum(e.cost.size for e in self.edges)
        zs = sum(1 for grp in self.groups if not grp.folded)
        return {"classes": len(self.strategies), "roots": len(self.work), "binaries": xs, "edge variables": ys, "edges": len(self.edges), "groups": zs}

    def chosen(self, choice: dict[int, int]) -> list[int]:
        """Each class's strategy index given each root's."""
        return [int(self.follow[c][choice[self.root[c]]]) for c in range(len(self.strategies))]


@dataclass
class Solution:
    choice: dict[int, int]
    """Strategy index per root class."""
    seconds: float
    memory: float
    """The largest memory per rank over the peaks, as the program counts it."""
    status: str = "optimal"
    extra: dict = field(default_factory=dict)


def _primary(g: Graph, node) -> int | None:
    """The operand slot an op follows: its first tensor operand of the result's shape
    (None: the op is a leader)."""
    if node.is_arg or node.op is None or node.op.name in LEADERS or not node.factors or not node.results:
        return None
    if len(node.results) != 1 and node.op.name != "dist.map":
        return None
    shape = g.values[node.results[0]].shape
    for k, x in enumerate(node.operands):
        if x is not None and (g.values[x].shape == shape or len(node.operands) == 1 or node.op.name == "dist.reduce_tensor"):
            return k
    return None


@dataclass
class _Pending:
    """An edge of the structure: root classes, count, the groups of each side and, per
    group pair, the charges of its resharding."""

    u: int
    v: int
    count: int
    left: np.ndarray
    right: np.ndarray
    cells: np.ndarray
    """``cells[a, b]``: the resharding of group pair (a, b) (a ``ChargeTable`` cell)."""
    overlap: np.ndarray | None = None
    """For an edge out of a matmul or an embedding (or what follows one: its root;
    one group per root strategy): the seconds of that op under each strategy, which
    CoCoNet's overlap and the fused operators can hide the resharding's collectives
    behind (``problem`` with ``overlap``)."""


@dataclass
class Structure:
    """The part of the integer program that depends on the mesh's shape only: the
    strategies, who follows whom, the work, the edges' resharding collectives and the
    memory (``build``); ``problem`` prices it on one placement."""

    strategies: list[list[Strategy]]
    root: list[int]
    follow: list[np.ndarray]
    counts: list[int]
    work: dict[int, np.ndarray]
    edges: list[_Pending]
    folded: list[tuple[int, int, np.ndarray, np.ndarray]]
    """Edges folded into a root's work: (root, count, group of each root strategy, the
    cell of each group)."""
    memory: list[tuple[int, dict[int, np.ndarray]]]
    table: ChargeTable
    groups: list[_Group] = field(default_factory=list)
    """Collectives and kernels the lowering runs as one (``_combined``, ``_kernels``)."""
    modes: dict[tuple, frozenset] = field(default_factory=dict)
    """The node-level edges (``(user node, operand slot)``, ``("result", index)``) whose
    collectives of these groups (``Charge.group``) are shared."""
    launched: dict[int, tuple[frozenset, frozenset, str]] = field(default_factory=dict)
    """The element-wise ops whose launch a kernel group pays, each with what
    ``ShapeCosts.op`` takes of it there (what its kernel does not move, what bounds the
    kernel)."""
    sizes: dict[tuple, float] = field(default_factory=dict)
    """Each group kind's bucket size (``_combined``)."""


@dataclass
class Skeleton:
    """What ``build`` takes from the graph alone, the same for every mesh shape: found
    once per graph (``skeleton``), so that each shape's structure is built per class of
    alike nodes rather than per node."""

    links: list[tuple[tuple[int, int, int, int], int, list[tuple[tuple, int, int]]]]
    """The node-level edges between classes, by (producer's class, result index, user's
    class, operand slot) in program order: one of their values and their members
    (``_Link.members``)."""
    end: int
    """The position past the last op (where the results are written)."""
    arguments: list[tuple[int, int, int]]
    """Per class of arguments and value type: (class, how many, one's value)."""
    live: list[tuple[int, list[tuple[int, int, int, int]]]]
    """Per memory peak (``graph.peak_points``): its position and the values live there
    per class and result index: (class, result index, how many, one of them)."""
    runs: dict[frozenset, list[int]]
    """The element-wise runs ``lower-to-kernels`` fuses, alike ones once: their classes
    -> [count, size] (``_kernels``)."""
    fused: dict[int, tuple[frozenset, frozenset, tuple[int, ...]]]
    """The nodes of such runs, each with what its run's kernel does not move for it
    (``_kernel_runs``): its operand slots it loads from registers or that the run
    loaded before, and its results it does not store; and its run's nodes."""


def skeleton(g: Graph) -> Skeleton:
    """``g``'s ``Skeleton``, found once (``Graph.skeleton``)."""
    if isinstance(g.skeleton, Skeleton):
        return g.skeleton
    from distir.planner.graph import peak_points

    cls = g.class_of
    index: dict[tuple, int] = {}
    links: list[tuple[tuple[int, int, int, int], int, list[tuple[tuple, int, int]]]] = []
    for node in g.nodes:
        for k, x in enumerate(node.operands):
            if x is None:
                continue
            val = g.values[x]
            key = (cls[val.producer], val.index, cls[node.id], k)
            li = index.get(key)
            if li is None:
                li = index[key] = len(links)
                links.append((key, x, []))
            links[li][2].append(((node.id, k), g.nodes[val.producer].position, node.position))
    end = max((n.position for n in g.nodes if not n.is_arg), default=-1) + 1
    arguments: dict[tuple, list[int]] = {}
    for node in g.nodes:
        if node.is_arg:
            v = g.values[node.results[0]]
            got = arguments.setdefault((cls[node.id], v.shape, v.element_type), [0, v.id])
            got[0] += 1
    live = []
    for p, xs in peak_points(g):
        by_class: dict[tuple[int, int], list[int]] = {}
        for x in xs:
            v = g.values[x]
            got = by_class.setdefault((cls[v.producer], v.index), [0, x])
            got[0] += 1
        live.append((p, [(c, j, n, x) for (c, j), (n, x) in by_class.items()]))
    runs, fused = _kernel_runs(g)
    g.skeleton = Skeleton(links, end, [(c, n, x) for (c, _, _), (n, x) in arguments.items()], live, runs, fused)
    return g.skeleton


@dataclass
class _Link:
    """The node-level edges between two classes (an operand slot of an op reading a
    producer's result; a result into its argument or into its placement): their root
    classes, the group of each root strategy on each side and the cell of each group
    pair (between a root and itself, ``cells[i]`` per root strategy: ``left`` and
    ``right`` None); and each member: (what, producer's position, user's position)."""

    ru: int
    rv: int
    left: np.ndarray | None
    right: np.ndarray | None
    cells: np.ndarray
    hides: np.ndarray | None
    members: list[tuple[tuple, int, int]] = field(default_factory=list)
    modes: list[frozenset] = field(default_factory=list)
    """Per member, the groups of its collectives (``Charge.group``) it shares a call with."""


@dataclass
class _Group:
    """Collectives (of ``kind`` over ``axes``) or kernels (``kind`` ``"kernel"``) the
    lowering runs as one: ``count`` alike such groups of ``size`` members each, each
    paying once what its members share (a call's or a kernel's device time, a bucket's
    latency: ``charge``, None for a kernel), on when any of its ``activators`` is
    (``_activator``)."""

    kind: str
    axes: tuple[int, ...]
    count: int
    size: int
    charge: Charge | None
    activators: list[tuple]


@dataclass
class Group:
    """A ``_Group`` priced on a placement: ``seconds`` for all ``count`` of them, on when
    any of ``members`` is: ``("x", root, mask)``, a root's strategy in the mask;
    ``("y", edge, mask)``, the edge's group pair in the mask."""

    kind: str
    axes: tuple[int, ...]
    count: int
    size: int
    seconds: float
    members: list[tuple]
    folded: bool = False
    """Paid whatever the choice or exactly when its one member is on: its seconds are
    in that member's cost (``problem``), it has no variable of its own."""

    def active(self, p: Problem, choice: dict[int, int]) -> bool:
        for m in self.members:
            if m[0] == "x":
                if m[2][choice[m[1]]]:
                    return True
            else:
                e = p.edges[m[1]]
                if m[2][e.left[choice[e.u]], e.right[choice[e.v]]]:
                    return True
        return False


def build(g: Graph, costs: ShapeCosts, uneven: bool = False, follow: bool = True) -> Structure:
    """The shape-level part of the integer program of ``g`` (module doc)."""
    sizes = costs.sizes
    cls = g.class_of
    ncls = len(g.classes)
    strategies: list[list[Strategy]] = []
    unit_work = []
    by_kind: dict[int, tuple[list[Strategy], np.ndarray]] = {}  # alike nodes: the same strategies and costs
    for members in g.classes:
        rep = g.nodes[members[0]]
        got = by_kind.get(g.kind[rep.id]) if g.kind else None
        if got is None:
            ss = arg_strategies(g, rep, sizes, uneven) if rep.is_arg else op_strategies(g, rep, sizes, uneven)
            got = (ss, np.array([costs.op(rep, s) for s in ss]))
            if g.kind:
                by_kind[g.kind[rep.id]] = got
        strategies.append(got[0])
        unit_work.append(got[1])
    counts = [len(m) for m in g.classes]
    fast = max(lv.bandwidth for lv in costs.topology.levels)

    # -- followers: each class maps its root's strategies to its own --------------------
    root = list(range(ncls))
    fmap: list[np.ndarray] = [np.arange(len(strategies[c])) for c in range(ncls)]
    for c in range(ncls):
        rep = g.nodes[g.classes[c][0]]
        k = _primary(g, rep) if follow else None
        if k is None:
            continue
        x = rep.operands[k]
        val = g.values[x]  # type: ignore[index]
        lead = cls[val.producer]
        if lead == c:
            continue
        r = root[lead]
        if len(strategies[r]) == 1:
            continue  # a fixed argument decides nothing: following it would fix the op (LEADERS)
        wanted = {}
        for t, s in enumerate(strategies[c]):
            wanted.setdefault(s.operands[k], t)
        out = np.empty(len(strategies[r]), dtype=np.int64)
        for i in range(len(strategies[r])):
            have = strategies[lead][fmap[lead][i]].results[val.index]
            t = wanted.get(have.whole())
            if t is None:
                # no strategy takes the operand as it comes: the one that costs least to
                # feed (bytes resharded at the fastest links) and run
                t = min(range(len(strategies[c])), key=lambda t: costs.bytes_moved(val.shape, val.element_type, have, strategies[c][t].operands[k]) / fast + unit_work[c][t])  # type: ignore[arg-type]
            out[i] = t
        root[c] = r
        fmap[c] = out
    work: dict[int, np.ndarray] = {c: np.zeros(len(strategies[c])) for c in range(ncls) if root[c] == c}
    for c in range(ncls):
        work[root[c]] += counts[c] * unit_work[c][fmap[c]]

    # -- edges ---------------------------------------------------------------------------
    table = ChargeTable()
    cached: dict[tuple, int] = {}

    def cell(v, a, b) -> int:
        """The cell of resharding a value like ``v`` laid out ``a`` into ``b`` (a layout,
        or a tuple of the distinct layouts its users take: each resharding once, as the
        partitioner reuses one per value and target): once per value type and layout
        pair (the layers' edges are alike)."""
        key = (v.shape, v.element_type, a, b)
        got = cached.get(key)
        if got is None:
            if not isinstance(b, Layout):
                parts = [costs.charges(v.shape, v.element_type, a, t) for t in b]
                charges = None if any(c is None for c in parts) else tuple(c for cs in parts for c in cs)  # type: ignore[union-attr]
            else:
                charges = costs.charges(v.shape, v.element_type, a, b)
            got = cached[key] = table.cell(charges)
        return got

    sk = skeleton(g)
    links: list[_Link] = []
    grids: dict[tuple, np.ndarray] = {}

    def link(ru: int, rv: int, src: list, dst: list, v, hides) -> _Link:
        if ru == rv:
            return _Link(ru, rv, None, None, np.array([cell(v, a, b) for a, b in zip(src, dst)], dtype=np.int64), None)
        lgroups: dict = {}
        left = np.array([lgroups.setdefault(a, len(lgroups)) for a in src], dtype=np.int64)
        rgroups: dict = {}
        right = np.array([rgroups.setdefault(b, len(rgroups)) for b in dst], dtype=np.int64)
        key = (v.shape, v.element_type, tuple(lgroups), tuple(rgroups))  # the layers' links are alike
        cells = grids.get(key)
        if cells is None:
            cells = grids[key] = np.array([[cell(v, a, b) for b in rgroups] for a in lgroups], dtype=np.int64)
        return _Link(ru, rv, left, right, cells, hides)

    for (cu, j, rv, slots), x, members in _users(g, sk, root):
        ru = root[cu]
        src = [strategies[cu][fmap[cu][i]].results[j] for i in range(len(strategies[ru]))]
        # the distinct layouts the value's users of this root take under each of its
        # strategies: the partitioner reshards a value once per target (``reshard``)
        dst = [tuple(dict.fromkeys(strategies[cv][fmap[cv][t]].operands[k] for cv, k in slots)) for t in range(len(strategies[rv]))]
        dst = [d[0] if len(d) == 1 else d for d in dst]
        producer = g.nodes[g.classes[ru][0]].op
        hides = unit_work[ru] if producer is not None and producer.name in OVERLAPPED else None
        links.append(link(ru, rv, src, dst, g.values[x], hides))
        links[-1].members = list(members)
    for n, r in enumerate(g.results):
        v = g.values[r.value]
        cu, j = cls[v.producer], v.index
        ru = root[cu]
        src = [strategies[cu][fmap[cu][i]].results[j] for i in range(len(strategies[ru]))]
        if r.inplace is not None and r.inplace in g.arg_node:
            ca = cls[g.arg_node[r.inplace]]
            ra = root[ca]
            dst = [strategies[ca][fmap[ca][t]].results[0] for t in range(len(strategies[ra]))]
            links.append(link(ru, ra, src, dst, v, None))
        else:
            if r.fixed is not None:
                from distir.planner.strategies import fixed_layout

                target = fixed_layout(g, r.fixed, len(v.shape), len(sizes), f"result %{v.name}")
                dst = [target] * len(src)
            else:
                dst = [a.whole() for a in src]
            links.append(link(ru, ru, src, dst, v, None))
        links[-1].members.append(((("result", n),), g.nodes[v.producer].position, sk.end))
    edges: list[_Pending] = []
    folded: list[tuple[int, int, np.ndarray, np.ndarray]] = []
    groups, bucket_sizes = _combined(links, table)
    modes: dict[tuple, frozenset] = {}
    for ln in links:
        by_mode: dict[frozenset, int] = {}
        for (whats, _, _), mode in zip(ln.members, ln.modes):
            by_mode[mode] = by_mode.get(mode, 0) + 1
            if mode:
                for what in whats:
                    modes[what] = mode
        for mode, count in by_mode.items():
            cells = ln.cells if not mode else table.moded(ln.cells, mode, bucket_sizes)
            _edge(edges, folded, ln.ru, ln.rv, count, ln.left, ln.right, cells, ln.hides)
    # an op of a run of element-wise ops: what it adds to its run's kernel (``ShapeCosts.op``:
    # without the bytes the kernel does not move, ``Skeleton.fused``), whose launch the
    # run's group pays once (``_kernels``)
    launched: dict[int, tuple[frozenset, frozenset, str]] = {}
    bounds: dict[tuple, str] = {}
    for i, (skip, kept, run) in sk.fused.items():
        bound = bounds.get(run)
        if bound is None:
            bound = bounds[run] = costs.run_bound([(g.nodes[j], *sk.fused[j][:2]) for j in run])
        launched[i] = (skip, kept, bound)
        c = cls[i]
        saved = unit_work[c] - np.array([costs.op(g.nodes[i], s, skip, kept, bound) for s in strategies[c]])
        work[root[c]] -= saved[fmap[c]]
    _kernels(sk, strategies, root, fmap, groups)

    # -- memory ----------------------------------------------------------------------------
    arg_bytes: dict[int, np.ndarray] = {c: np.zeros(len(strategies[c])) for c in work}
    for c, count, x in sk.arguments:  # bytes: integers, exact in floats at any count
        arg_bytes[root[c]] += count * np.array([costs.local_bytes(x, strategies[c][t].results[0]) for t in fmap[c]])
    memory = []
    for p, live in sk.live:
        per = {c: a.copy() for c, a in arg_bytes.items()}
        for c, j, count, x in live:
            per[root[c]] += count * np.array([costs.local_bytes(x, strategies[c][t].results[j]) for t in fmap[c]])
        memory.append((p, per))
    if not memory:
        memory.append((-1, arg_bytes))
    table.freeze()
    return Structure(strategies, root, fmap, counts, work, edges, folded, memory, table, groups, modes, launched, bucket_sizes)


def _users(g: Graph, sk: Skeleton, root: list[int]) -> list[tuple[tuple, int, list[tuple[tuple, int, int]]]]:
    """The node-level edges of ``sk.links`` by value and root class of their users: the
    partitioner reshards a value once per target layout, whichever ops read it there
    (``partition``'s ``reshard``), so the users of one value whose strategies follow one
    root are one link, charged the resharding into each distinct layout they take.
    Returns, in program order, ((producer's class, result index, users' root, the users'
    (class, operand slot)s), one such value, members): a member per value, (its users'
    (node, slot)s, producer's position, its first user's position: where the
    partitioner reshards it)."""
    by_value: dict[int, dict[int, list]] = {}
    producer_class: dict[int, tuple[int, int]] = {}
    for (cu, j, cv, k), _, members in sk.links:
        for what, p, r in members:
            x = g.nodes[what[0]].operands[what[1]]
            producer_class[x] = (cu, j)  # type: ignore[index]
            by_value.setdefault(x, {}).setdefault(root[cv], []).append((cv, k, what, p, r))  # type: ignore[arg-type]
    merged: dict[tuple, tuple[int, list]] = {}
    for x, per_root in by_value.items():
        cu, j = producer_class[x]
        for rv, users in per_root.items():
            slots = tuple(sorted({(cv, k) for cv, k, _, _, _ in users}))
            key = (cu, j, rv, slots)
            got = merged.setdefault(key, (x, []))
            got[1].append((tuple(w for _, _, w, _, _ in users), users[0][3], min(r for *_, r in users)))
    return [(key, x, members) for key, (x, members) in merged.items()]


def _edge(edges: list[_Pending], folded: list, ru: int, rv: int, count: int, left: np.ndarray | None, right: np.ndarray | None,
          cells: np.ndarray, hides: np.ndarray | None = None) -> None:
    """An edge between root classes, in layout space (or folded into a root's work):
    ``cells[a, b]`` the resharding of producer group ``a`` (``left[i]``: the group of
    root strategy i) into user group ``b``; between a root and itself, ``cells[i]`` per
    root strategy. ``hides``: the producer's work per strategy, for an edge out of an
    op whose collectives a schedule may overlap (then one group per producer
    strategy)."""
    if ru == rv:
        uniq, idx = np.unique(cells, return_inverse=True)
        folded.append((ru, count, idx.reshape(-1).astype(np.int64), uniq.astype(np.int64)))
        return
    assert left is not None and right is not None
    na, nb = cells.shape
    if hides is not None and nb > 1:
        edges.append(_Pending(ru, rv, count, left, right, cells, hides))
        return
    if na == 1:
        folded.append((rv, count, right, cells[0]))
    elif nb == 1:
        folded.append((ru, count, left, cells[:, 0]))
    elif (cells == ChargeTable.FREE).all():
        return
    else:
        edges.append(_Pending(ru, rv, count, left, right, cells))


def _combined(links: list[_Link], table: ChargeTable) -> tuple[list[_Group], dict[tuple, float]]:
    """Which AllReduces the lowering runs as one call over one bucket
    (``combine-collectives``, then ``lower-buckets``): those of one group
    (``Charge.group``: mesh axes, element type, reduction; whole on every rank,
    ``Charge.in_bucket``) that no dependency orders. A member of a link runs after its
    producer and before its user (positions in the program); taken in the order of
    their users, a collective joins the open group when its producer comes before that
    group's first user, else opens the next (``plan_buckets``' rule: the combined
    collective goes before the first op that reads a member, and a member must be
    computable there). Every link that may carry an AllReduce of a group (in some
    cell) takes part, so any of one group found here are combinable, whichever
    strategies carry them. (Other collectives the lowering combines share a launch,
    not their latency: ``costs.py``.)

    Sets each link's ``modes``; returns the groups of two or more members (alike ones,
    those whose members come from the same links, once with their count) and each
    group kind's bucket size (its largest group's bytes, at most ``bucket-bytes``: where
    its AllReduces' price is the tangent of their curve)."""
    per_cell: dict[int, dict[tuple, float]] = {}
    potential: list[dict[tuple, float]] = []  # per link: group -> its largest bytes
    for ln in links:
        got: dict[tuple, float] = {}
        for c in np.unique(ln.cells).tolist():
            d = per_cell.get(c)
            if d is None:
                d = per_cell[c] = {}
                for ch in table.charges_of(c):
                    if ch.in_bucket:
                        d[ch.group] = max(d.get(ch.group, 0.0), ch.nbytes)
            for k, b in d.items():
                got[k] = max(got.get(k, 0.0), b)
        potential.append(got)
        ln.modes = [frozenset()] * len(ln.members)
    spans: dict[tuple, list[tuple[int, int, int, int]]] = {}
    for i, (ln, got) in enumerate(zip(links, potential)):
        for k in got:
            spans.setdefault(k, []).extend((r, p, i, m) for m, (_, p, r) in enumerate(ln.members))
    sharing: dict[tuple[int, int], set] = {}
    alike: dict[tuple, list] = {}  # (group, links) -> [count, largest bytes, members]
    sizes: dict[tuple, float] = {}
    for k, members in spans.items():
        members.sort()
        slots: list[list[tuple[int, int]]] = []
        first_user = None
        for r, p, i, m in members:
            if first_user is None or not p < first_user:
                slots.append([])
                first_user = r
            slots[-1].append((i, m))
        for slot in slots:
            if len(slot) < 2:
                continue
            for i, m in slot:
                sharing.setdefault((i, m), set()).add(k)
            nbytes = sum(potential[i][k] for i, _ in slot)
            sizes[k] = min(BUCKET_BYTES, max(sizes.get(k, 0.0), nbytes))
            got = alike.setdefault((k, frozenset(i for i, _ in slot)), [0, len(slot)])
            got[0] += 1
    for (i, m), ks in sharing.items():
        links[i].modes[m] = frozenset(ks)
    groups: list[_Group] = []
    for (k, which), (count, size) in alike.items():
        kind, axes, bucket = k
        charge = Charge(kind, axes, 0.0, bucket, "bucket", sizes[k])
        cells = np.array([c for c, d in per_cell.items() if k in d], dtype=np.int64)
        acts = [_activator(links[i], np.isin(links[i].cells, cells)) for i in sorted(which)]
        groups.append(_Group(kind, axes, count, size, charge, [a for a in acts if a is not None]))
    return groups, sizes


def _activator(ln: _Link, mask: np.ndarray) -> tuple | None:
    """When a link carries what ``mask`` marks (of its cells): ``("x", root, mask of the
    root's strategies)`` or ``("y", u, left, v, right, mask of group pairs)``."""
    if ln.ru == ln.rv:
        out: tuple = ("x", ln.ru, mask)
    elif mask.shape[0] == 1:
        out = ("x", ln.rv, mask[0][ln.right])
    elif mask.shape[1] == 1:
        out = ("x", ln.ru, mask[:, 0][ln.left])
    else:
        out = ("y", ln.ru, ln.left, ln.rv, ln.right, mask)
    return out if out[-1].any() else None


def _kernel_runs(g: Graph) -> tuple[dict[frozenset, list[int]], dict[int, tuple[frozenset, frozenset, tuple[int, ...]]]]:
    """The element-wise ops ``lower-to-kernels`` runs as one kernel: consecutive ones
    (``dist.map``, ``cast``, ``dropout``, adjacent in program order) over one iteration
    space (the result's shape). Returns the runs of two or more, alike runs (of the
    same classes) once ({classes: [count, size]}; ``_kernels`` gives them their
    groups), and the nodes of such runs, each with what its run's kernel does not move
    for it (``Skeleton.fused``): it loads each tensor from outside the
    run once and keeps the run's own values in registers, storing only those used
    after the run (``lower-to-kernels``' ``KernelBuilder``; the walker charges a
    kernel the bytes of its loads and stores)."""
    names = {op.name for op in KERNEL_ELEMENTWISE}
    runs: list[list[int]] = []
    last = None
    for n in sorted((n for n in g.nodes if not n.is_arg), key=lambda n: n.position):
        if n.op is not None and n.op.name in names and n.results:
            here = (n.position, g.values[n.results[0]].shape)
            if last is not None and last == (n.position - 1, here[1]):
                runs[-1].append(n.id)
            else:
                runs.append([n.id])
            last = here
        else:
            last = None
    alike: dict[frozenset, list[int]] = {}
    fused: dict[int, tuple[frozenset, frozenset, tuple[int, ...]]] = {}
    returned = {r.value for r in g.results}
    for run in runs:
        if len(run) < 2:
            continue
        members = set(run)
        whole = tuple(run)
        loaded: set[int] = set()
        for i in run:
            node = g.nodes[i]
            skip = []
            for k, x in enumerate(node.operands):
                if x is None:
                    continue
                if x in loaded:
                    skip.append(k)
                loaded.add(x)
            kept = frozenset(j for j, r in enumerate(node.results) if r not in returned and all(u in members for u, _ in g.values[r].uses))
            loaded.update(node.results)
            fused[i] = (frozenset(skip), kept, whole)
        got = alike.setdefault(frozenset(g.class_of[i] for i in run), [0, len(run)])
        got[0] += 1
    return alike, fused


def _kernels(sk: Skeleton, strategies: list[list[Strategy]], root: list[int], fmap: list[np.ndarray], groups: list[_Group]) -> None:
    """The kernels of the element-wise runs (``_kernel_runs``): each run gets a group
    per layout its ops' strategies give (on when an op of the run takes it: a kernel's
    launch), alike runs once with their count."""
    for classes, (count, size) in sk.runs.items():
        by_layout: dict = {}
        for c in sorted(classes):
            lays = [strategies[c][t].results[0] for t in fmap[c]]
            for lay in dict.fromkeys(lays):
                by_layout.setdefault(lay, []).append(("x", root[c], np.array([x == lay for x in lays])))
        for acts in by_layout.values():
            groups.append(_Group("kernel", (), count, size, None, acts))


class ChargeTable:
    """The reshardings of a structure, each a *cell*: the sum of its collectives' times
    (``FREE``: none; ``NEVER``: impossible). Priced on a placement all at once: one
    vectorised cost-model call per collective kind, axes and share, then a sparse sum."""

    FREE, NEVER = 0, 1

    def __init__(self) -> None:
        self.index: dict = {(): self.FREE, None: self.NEVER}
        self.by_cell: list = [(), None]
        self.rows: list[int] = []
        self.charges: list = []
        self.matrix = None
        self._moded: dict = {}

    def cell(self, charges) -> int:
        got = self.index.get(charges)
        if got is None:
            got = len(self.index)
            self.index[charges] = got
            self.by_cell.append(charges)
            for c in charges:
                self.rows.append(got)
                self.charges.append(c)
        return got

    def charges_of(self, cell: int) -> tuple:
        return self.by_cell[cell] or ()

    def moded(self, cells: np.ndarray, mode: frozenset, sizes: dict[tuple, float]) -> np.ndarray:
        """``cells`` with the collectives of the groups in ``mode`` shared (``Charge.share``)."""
        uniq, inverse = np.unique(cells, return_inverse=True)
        out = []
        for c in uniq.tolist():
            key = (c, mode)
            got = self._moded.get(key)
            if got is None:
                charges = self.by_cell[c]
                if charges:
                    charges = tuple(shared_charge(ch, sizes) if ch.group in mode else ch for ch in charges)
                got = self._moded[key] = self.cell(charges)
            out.append(got)
        return np.array(out, dtype=np.int64)[inverse.reshape(-1)].reshape(cells.shape)

    def freeze(self) -> None:
        from scipy.sparse import coo_matrix

        kinds: dict = {}
        self.groups = []
        which = []
        for c in self.charges:
            k = (c.kind, c.axes, c.share, c.size)
            got = kinds.get(k)
            if got is None:
                got = kinds[k] = len(kinds)
                self.groups.append((k, []))
            self.groups[got][1].append(c.nbytes)
            which.append(got)
        # columns ordered by pricing group so that each group prices as one array
        order = np.argsort(np.array(which, dtype=np.int64), kind="stable")
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        self.matrix = coo_matrix((np.ones(len(self.rows)), (np.array(self.rows, dtype=np.int64), position)), shape=(len(self.index), len(self.charges))).tocsr()
        self.nbytes = [np.array(b) for _, b in self.groups]

    def seconds(self, costs: Costs) -> np.ndarray:
        """Seconds of every cell on ``costs.mesh``."""
        from distir.planner.costs import INFEASIBLE

        per = [costs.charged(kind, axes, share, size, b) for (kind, axes, share, size), b in zip((k for k, _ in self.groups), self.nbytes)]
        vec = np.concatenate(per) if per else np.zeros(0)
        out = self.matrix @ vec if len(vec) else np.zeros(len(self.index))
        out[self.NEVER] = INFEASIBLE
        return out


def shared_charge(c: Charge, sizes: dict[tuple, float]) -> Charge:
    """``c`` as one of a bucket of AllReduces (``Charge.share``)."""
    from dataclasses import replace

    return replace(c, share="bucket", size=sizes[c.group])


OVERLAPPED = ("dist.matmul", "dist.embedding_bag")
"""Ops whose following collectives CoCoNet's overlap and the fused computation-
collective operators run during the op (``tuning/explore.py``'s ``_starts_chain``)."""


def problem(st: Structure, costs: Costs, overlap: bool = False) -> Problem:
    """The integer program of one placement: the structure priced by its collectives.
    With ``overlap``, the resharding after a matmul or an embedding costs only what its
    producer cannot hide (``max(0, collectives - op)``, the cost of an overlapped
    chain in excess of its op): the program for the plans whose schedule the tuner
    will overlap."""
    secs = st.table.seconds(costs)
    work = {r: w.copy() for r, w in st.work.items()}
    for r, count, idx, cells in st.folded:
        work[r] += count * secs[cells][idx]
    by_pair: dict[tuple[int, int], list[_Pending]] = {}
    for e in st.edges:
        by_pair.setdefault((e.u, e.v), []).append(e)
    needed = {(a[1], a[3]) for grp in st.groups for a in grp.activators if a[0] == "y"}
    edges = []
    at: dict[tuple[int, int], int] = {}
    for (u, v), es in by_pair.items():
        if len(es) == 1:
            e = es[0]
            cost, left = _priced(e, secs, overlap)
            cost = e.count * cost
            right = e.right
        else:
            # parallel edges between two roots are one edge: its groups are the
            # combinations of theirs
            priced = [_priced(e, secs, overlap) for e in es]
            left, lrows = _combine([lf for _, lf in priced])
            right, rrows = _combine([e.right for e in es])
            cost = np.zeros((len(lrows), len(rrows)))
            for k, (e, (c, _)) in enumerate(zip(es, priced)):
                cost += e.count * c[np.ix_(lrows[:, k], rrows[:, k])]
        if cost.any() or (u, v) in needed:
            at[(u, v)] = len(edges)
            edges.append(Edge(u, v, 1, cost, left, right))
    groups = []
    for grp in st.groups:
        members = []
        for a in grp.activators:
            if a[0] == "x":
                members.append(a)
                continue
            _, u, left, v, right, mask = a
            k = at[(u, v)]
            e = edges[k]
            # a representative strategy of each of the edge's groups (they refine the link's)
            li = np.zeros(e.cost.shape[0], dtype=np.int64)
            li[e.left] = np.arange(len(e.left))
            ri = np.zeros(e.cost.shape[1], dtype=np.int64)
            ri[e.right] = np.arange(len(e.right))
            members.append(("y", k, mask[np.ix_(left[li], right[ri])]))
        seconds = grp.count * (costs.shape.launch_s if grp.charge is None else costs.shared(grp.charge))
        if seconds <= 0.0:
            continue  # nothing shared on this placement
        always = next((m for m in members if m[0] == "x" and m[2].all()), None)
        if always is not None or len(members) == 1:
            # paid whatever the choice, or exactly when its one member is on: a cost of
            # that member (no variable of its own)
            m = always or members[0]
            if m[0] == "x":
                work[m[1]] = work[m[1]] + seconds * m[2]
            else:
                edges[m[1]].cost = edges[m[1]].cost + seconds * m[2]
            groups.append(Group(grp.kind, grp.axes, grp.count, grp.size, seconds, [m], folded=True))
            continue
        groups.append(Group(grp.kind, grp.axes, grp.count, grp.size, seconds, members))
    return Problem(st.strategies, st.root, st.follow, st.counts, work, edges, st.memory, groups=groups, modes=st.modes, launched=st.launched, sizes=st.sizes)


def _priced(e: _Pending, secs: np.ndarray, overlap: bool) -> tuple[np.ndarray, np.ndarray]:
    """The edge's cost per group pair and the producer's grouping (with ``overlap``,
    one group per producer strategy: what a schedule hides depends on it)."""
    cost = secs[e.cells]
    if overlap and e.overlap is not None:
        return np.maximum(cost[e.left] - e.overlap[:, None], 0.0), np.arange(len(e.left), dtype=np.int64)
    return cost, e.left


def _combine(groupings: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(the group of each strategy in the product of ``groupings``, each product group's
    group in every grouping)."""
    stacked = np.stack(groupings, axis=1)
    rows, inverse = np.unique(stacked, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), rows


def _offsets(p: Problem) -> tuple[dict[int, int], int]:
    offs: dict[int, int] = {}
    n = 0
    for r in p.roots:
        offs[r] = n
        n += len(p.strategies[r])
    return offs, n


def _one_hot_rows(p: Problem, offs: dict[int, int]) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], int]:
    rows, cols, vals = [], [], []
    r = 0
    for c in p.roots:
        n = len(p.strategies[c])
        rows.append(np.full(n, r))
        cols.append(offs[c] + np.arange(n))
        vals.append(np.ones(n))
        r += 1
    return rows, cols, vals, r


def solve(p: Problem, memory_limit: float | None, time_limit: float = 30.0, forbid: dict[int, int] | None = None) -> Solution | None:
    """The cheapest choice within ``memory_limit`` bytes per rank (None: no limit); None
    when no choice fits. ``forbid``: a strategy (root class -> index) not to choose."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    offs, nx = _offsets(p)
    n = nx
    eoffs = []
    for e in p.edges:
        eoffs.append(n)
        n += e.cost.size
    c = np.zeros(n)
    for r, w in p.work.items():
        c[offs[r] : offs[r] + len(w)] = w
    for e, o in zip(p.edges, eoffs):
        c[o : o + e.cost.size] = e.count * e.cost.reshape(-1)
    zoff = n
    shared = [grp for grp in p.groups if not grp.folded]
    n += len(shared)
    c = np.concatenate([c, [grp.seconds for grp in shared]])
    rows, cols, vals, r = _one_hot_rows(p, offs)
    nrows_eq = r
    for e, o in zip(p.edges, eoffs):
        na, nb = e.cost.shape
        ys = o + np.arange(na * nb).reshape(na, nb)
        # sum_b y[a, b] - sum_{i in a} x[u, i] = 0
        rows.append(np.repeat(r + np.arange(na), nb))
        cols.append(ys.reshape(-1))
        vals.append(np.ones(na * nb))
        rows.append(r + e.left)
        cols.append(offs[e.u] + np.arange(len(e.left)))
        vals.append(-np.ones(len(e.left)))
        r += na
        # sum_a y[a, b] - sum_{t in b} x[v, t] = 0
        rows.append(np.tile(r + np.arange(nb), na))
        cols.append(ys.reshape(-1))
        vals.append(np.ones(na * nb))
        rows.append(r + e.right)
        cols.append(offs[e.v] + np.arange(len(e.right)))
        vals.append(-np.ones(len(e.right)))
        r += nb
    lb = [np.zeros(r)]
    ub = [np.zeros(r)]
    lb[0][:nrows_eq] = 1.0
    ub[0][:nrows_eq] = 1.0
    # a group is paid when any of its members is on: sum(member's variables) <= z
    for z, grp in enumerate(shared):
        for m in grp.members:
            on = np.flatnonzero(m[2].reshape(-1))
            first = offs[m[1]] if m[0] == "x" else eoffs[m[1]]
            rows.append(np.full(len(on) + 1, r))
            cols.append(np.concatenate([first + on, [zoff + z]]))
            vals.append(np.concatenate([np.ones(len(on)), [-1.0]]))
            lb.append(np.array([-np.inf]))
            ub.append(np.array([0.0]))
            r += 1
    if memory_limit is not None:
        for _, per in p.memory:
            for k, m in per.items():
                nz = np.nonzero(m)[0]
                rows.append(np.full(len(nz), r))
                cols.append(offs[k] + nz)
                vals.append(m[nz].astype(float))
            lb.append(np.array([-np.inf]))
            ub.append(np.array([float(memory_limit)]))
            r += 1
    A = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, n)).tocsr()
    cons = LinearConstraint(A, np.concatenate(lb), np.concatenate(ub))
    upper = np.ones(n)
    for k, i in (forbid or {}).items():
        upper[offs[k] + i] = 0.0
    bounds = Bounds(np.zeros(n), upper)
    # The relaxation first: this linearisation is usually tight (Alpa), and an integral
    # optimum of the relaxation is the integer program's optimum.
    res = milp(c, constraints=cons, integrality=np.zeros(n), bounds=bounds, options={"time_limit": time_limit})
    how = "relaxation"
    if res.x is None:
        return None
    xs = res.x[:nx]
    if np.abs(xs - np.round(xs)).max() > 1e-6:
        integrality = np.zeros(n)
        integrality[:nx] = 1
        res = milp(c, constraints=cons, integrality=integrality, bounds=bounds, options={"time_limit": time_limit, "mip_rel_gap": 1e-4})
        how = "branch and bound"
        if res.x is None:
            return None
    choice = {k: int(np.argmax(res.x[offs[k] : offs[k] + len(p.strategies[k])])) for k in p.roots}
    p.variables = n
    return Solution(choice, objective(p, choice), peak_memory(p, choice), ("optimal" if res.status == 0 else str(res.message)), {"solved by": how})


def largest_arguments(g: Graph, p: Problem, count: int) -> list[int]:
    """The root classes of the ``count`` largest groups of arguments (bytes of all the
    class's arguments): where a different choice changes a plan most."""
    size: dict[int, int] = {}
    for node in g.nodes:
        if node.is_arg and node.fixed is None:
            r = p.root[g.class_of[node.id]]
            size[r] = size.get(r, 0) + g.values[node.results[0]].nbytes
    return [r for r, _ in sorted(size.items(), key=lambda kv: -kv[1]) if len(p.strategies[r]) > 1][:count]


def objective(p: Problem, choice: dict[int, int]) -> float:
    total = sum(float(w[choice[k]]) for k, w in p.work.items())
    total += sum(e.count * float(e.cost[e.left[choice[e.u]], e.right[choice[e.v]]]) for e in p.edges)
    total += sum(grp.seconds for grp in p.groups if not grp.folded and grp.active(p, choice))
    return total


def peak_memory(p: Problem, choice: dict[int, int]) -> float:
    return max(sum(float(m[choice[k]]) for k, m in per.items()) for _, per in p.memory)


def smallest_memory(p: Problem, time_limit: float = 30.0) -> float:
    """The smallest largest-peak memory per rank any choice reaches (module doc)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    offs, nx = _offsets(p)
    n = nx + 1
    z = nx
    c = np.zeros(n)
    c[z] = 1.0
    rows, cols, vals, r = _one_hot_rows(p, offs)
    neq = r
    scale = max(1.0, max(float(m.max()) for _, per in p.memory for m in per.values()))
    for _, per in p.memory:
        for k, m in per.items():
            nz = np.nonzero(m)[0]
            rows.append(np.full(len(nz), r))
            cols.append(offs[k] + nz)
            vals.append(m[nz] / scale)
        rows.append(np.array([r]))
        cols.append(np.array([z]))
        vals.append(np.array([-1.0]))
        r += 1
    lb = np.concatenate([np.ones(neq), np.full(r - neq, -np.inf)])
    ub = np.concatenate([np.ones(neq), np.zeros(r - neq)])
    A = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, n)).tocsr()
    integrality = np.ones(n)
    integrality[z] = 0
    upper = np.ones(n)
    upper[z] = np.inf
    res = milp(c, constraints=LinearConstraint(A, lb, ub), integrality=integrality, bounds=Bounds(np.zeros(n), upper), options={"time_limit": time_limit})
    if res.x is None:
        return math.inf
    choice = {k: int(np.argmax(res.x[offs[k] : offs[k] + len(p.strategies[k])])) for k in p.roots}
    return peak_memory(p, choice)


class LowerBound:
    """A lower bound of a problem's optimum, without solving it: the dual of its
    relaxation (memory left out, which only raises the optimum) raised by block
    coordinate ascent on its edges (MPLP: Globerson and Jaakkola, "Fixing max-product",
    NIPS 2007). The objective is rewritten as per-class potentials ``phi[r]`` and per-edge
    potentials ``pe[k]`` that sum, for every choice, to the same seconds; the sum of their
    minima is then at most any choice's seconds. Each step folds an edge's two ends into
    it and hands each end half of the edge's minima back (the sum of minima never
    drops). Tens of sweeps of the edges reach the relaxation's optimum, which on these
    programs is the integer program's (module doc), in a fraction of HiGHS's time.

    A group (``Group``: collectives or kernels run as one, paid once when any of its
    members is on) is charged to its n members, a n-th to each: a choice that turns k of
    them on pays the group once, k/n of it here, so the potentials still sum to at
    most any choice's seconds (and to them when all are on, as the layers' gradients
    of one bucket are).

    An infeasible cost counts as ``cap``, more than any feasible choice's seconds: costs
    lowered leave a lower bound, and numbers of the objective's size keep the rounding
    of the sweeps (``MARGIN``) far below any difference that decides."""

    MARGIN = 1e-6
    """Relative: a bound decides only when it exceeds by this much (``above``)."""

    def __init__(self, p: Problem) -> None:
        from distir.planner.costs import INFEASIBLE

        def finite_max(a: np.ndarray) -> float:
            ok = a[a < INFEASIBLE]
            return float(ok.max()) if ok.size else 0.0

        full = [e.count * e.cost[e.left][:, e.right] for e in p.edges]
        work = {r: w.copy() for r, w in p.work.items()}
        for grp in (grp for grp in p.groups if not grp.folded):  # folded: in the costs
            share = grp.seconds / max(1, len(grp.members))
            for m in grp.members:
                if m[0] == "x":
                    work[m[1]] = work[m[1]] + share * m[2]
                else:
                    e = p.edges[m[1]]
                    full[m[1]] = full[m[1]] + share * m[2][e.left][:, e.right]
        cap = sum(finite_max(w) for w in work.values()) + sum(finite_max(c) for c in full) + 1.0
        self.phi = {r: np.minimum(w, cap) for r, w in work.items()}
        self.ends = [(e.u, e.v) for e in p.edges]
        self.pe = [np.minimum(c, cap) for c in full]
        self.sweeps = 0
        self.value = self._value()

    def _value(self) -> float:
        return sum(float(x.min()) for x in self.phi.values()) + sum(float(x.min()) for x in self.pe)

    def above(self, seconds: float) -> bool:
        """Whether the bound exceeds ``seconds`` beyond rounding (``MARGIN``)."""
        return self.value > seconds + self.MARGIN * max(abs(seconds), 1e-9)

    def raise_(self, sweeps: int, above: float | None = None, stall: float = 1e-5) -> float:
        """Up to ``sweeps`` more sweeps; fewer once it is ``above`` that many seconds or a
        sweep raises it by less than ``stall`` (relative)."""
        phi, pe = self.phi, self.pe
        for _ in range(sweeps):
            for k, (u, v) in enumerate(self.ends):
                f = pe[k] + phi[u][:, None] + phi[v][None, :]
                hu = f.min(axis=1) / 2
                hv = f.min(axis=0) / 2
                phi[u] = hu
                phi[v] = hv
                pe[k] = f - hu[:, None] - hv[None, :]
            self.sweeps += 1
            before, self.value = self.value, self._value()
            if (above is not None and self.above(above)) or self.value - before <= stall * abs(self.value):
                break
        return self.value
