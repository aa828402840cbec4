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

Solved by HiGHS (``scipy.optimize.milp``). With the memory constraints infeasible, the
same program minimising the largest peak instead gives the smallest memory per rank
the mesh allows (what ``distir-plan`` reports when no plan fits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from distir.planner.costs import Costs, ShapeCosts
from distir.planner.graph import Graph
from distir.planner.strategies import Strategy, arg_strategies, op_strategies


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

    @property
    def roots(self) -> list[int]:
        return sorted(self.work)

    def size(self) -> dict[str, int]:
        xs = sum(len(self.strategies[r]) for r in self.work)
        ys = sum(e.cost.size for e in self.edges)
        return {"classes": len(self.strategies), "roots": len(self.work), "binaries": xs, "edge variables": ys, "edges": len(self.edges)}

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


def build(g: Graph, costs: ShapeCosts, uneven: bool = False, follow: bool = True) -> Structure:
    """The shape-level part of the integer program of ``g`` (module doc)."""
    from distir.planner.graph import peak_points

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
    pairs: dict[tuple, list[int]] = {}
    for node in g.nodes:
        for k, x in enumerate(node.operands):
            if x is None:
                continue
            val = g.values[x]
            key = (cls[val.producer], val.index, cls[node.id], k)
            got = pairs.get(key)
            if got is None:
                pairs[key] = [1, x]
            else:
                got[0] += 1
    edges: list[_Pending] = []
    folded: list[tuple[int, int, np.ndarray, np.ndarray]] = []
    table = ChargeTable()

    def charges_of(x: int):
        v = g.values[x]
        return lambda a, b: table.cell(costs.charges(v.shape, v.element_type, a, b))

    grids: dict[tuple, np.ndarray] = {}

    def grid_of(x: int):
        """The cells of every (producer layout, user layout) pair of an edge carrying
        ``x``: once per value type and layout lists (the layers' edges are alike)."""
        v = g.values[x]

        def cells(la: tuple, rb: tuple) -> np.ndarray:
            key = (v.shape, v.element_type, la, rb)
            got = grids.get(key)
            if got is None:
                got = np.array([[table.cell(costs.charges(v.shape, v.element_type, a, b)) for b in rb] for a in la], dtype=np.int64)
                grids[key] = got
            return got

        return cells

    for (cu, j, cv, k), (count, x) in pairs.items():
        ru, rv = root[cu], root[cv]
        src = [strategies[cu][fmap[cu][i]].results[j] for i in range(len(strategies[ru]))]
        dst = [strategies[cv][fmap[cv][t]].operands[k] for t in range(len(strategies[rv]))]
        producer = g.nodes[g.classes[ru][0]].op
        hides = unit_work[ru] if producer is not None and producer.name in OVERLAPPED else None
        _edge(edges, folded, ru, rv, count, src, dst, charges_of(x), hides, grid_of(x))
    for r in g.results:
        v = g.values[r.value]
        cu, j = cls[v.producer], v.index
        ru = root[cu]
        src = [strategies[cu][fmap[cu][i]].results[j] for i in range(len(strategies[ru]))]
        if r.inplace is not None and r.inplace in g.arg_node:
            ca = cls[g.arg_node[r.inplace]]
            ra = root[ca]
            dst = [strategies[ca][fmap[ca][t]].results[0] for t in range(len(strategies[ra]))]
            _edge(edges, folded, ru, ra, 1, src, dst, charges_of(r.value), None, grid_of(r.value))
        else:
            if r.fixed is not None:
                from distir.planner.strategies import fixed_layout

                target = fixed_layout(g, r.fixed, len(v.shape), len(sizes), f"result %{v.name}")
                dst = [target] * len(src)
            else:
                dst = [a.whole() for a in src]
            groups: dict = {}
            idx = np.array([groups.setdefault((a, b), len(groups)) for a, b in zip(src, dst)], dtype=np.int64)
            folded.append((ru, 1, idx, np.array([charges_of(r.value)(a, b) for a, b in groups], dtype=np.int64)))

    # -- memory ----------------------------------------------------------------------------
    arg_bytes: dict[int, np.ndarray] = {c: np.zeros(len(strategies[c])) for c in work}
    for node in g.nodes:
        if node.is_arg:
            c = cls[node.id]
            arg_bytes[root[c]] += np.array([costs.local_bytes(node.results[0], strategies[c][t].results[0]) for t in fmap[c]])
    memory = []
    for p, live in peak_points(g):
        per = {c: a.copy() for c, a in arg_bytes.items()}
        by_class: dict[tuple[int, int], list[int]] = {}
        for x in live:
            v = g.values[x]
            by_class.setdefault((cls[v.producer], v.index), []).append(x)
        for (c, j), xs in by_class.items():
            per[root[c]] += len(xs) * np.array([costs.local_bytes(xs[0], strategies[c][t].results[j]) for t in fmap[c]])
        memory.append((p, per))
    if not memory:
        memory.append((-1, arg_bytes))
    table.freeze()
    return Structure(strategies, root, fmap, counts, work, edges, folded, memory, table)


def _edge(edges: list[_Pending], folded: list, ru: int, rv: int, count: int, src: list, dst: list, cell_of, hides: np.ndarray | None = None,
          grid_of=None) -> None:
    """An edge between root classes, in layout space (or folded into a root's work);
    ``hides``: the producer's work per strategy, for an edge out of an op whose
    collectives a schedule may overlap (then one group per producer strategy);
    ``grid_of(la, rb)``: the cells of every pair of the layouts (``cell_of`` each)."""
    if ru == rv:
        groups: dict = {}
        idx = np.array([groups.setdefault((a, b), len(groups)) for a, b in zip(src, dst)], dtype=np.int64)
        folded.append((ru, count, idx, np.array([cell_of(a, b) for a, b in groups], dtype=np.int64)))
        return
    lgroups: dict = {}
    left = np.array([lgroups.setdefault(a, len(lgroups)) for a in src], dtype=np.int64)
    rgroups: dict = {}
    right = np.array([rgroups.setdefault(b, len(rgroups)) for b in dst], dtype=np.int64)
    la, rb = list(lgroups), list(rgroups)
    cells = grid_of(tuple(la), tuple(rb)) if grid_of is not None else np.array([[cell_of(a, b) for b in rb] for a in la], dtype=np.int64)
    if hides is not None and len(rb) > 1:
        edges.append(_Pending(ru, rv, count, left, right, cells, hides))
        return
    if len(la) == 1:
        folded.append((rv, count, right, cells[0]))
    elif len(rb) == 1:
        folded.append((ru, count, left, cells[:, 0]))
    elif (cells == ChargeTable.FREE).all():
        return
    else:
        edges.append(_Pending(ru, rv, count, left, right, cells))


class ChargeTable:
    """The reshardings of a structure, each a *cell*: the sum of its collectives' times
    (``FREE``: none; ``NEVER``: impossible). Priced on a placement all at once: one
    vectorised cost-model call per collective kind and axes, then a sparse sum."""

    FREE, NEVER = 0, 1

    def __init__(self) -> None:
        self.index: dict = {(): self.FREE, None: self.NEVER}
        self.rows: list[int] = []
        self.charges: list = []
        self.matrix = None

    def cell(self, charges) -> int:
        got = self.index.get(charges)
        if got is None:
            got = len(self.index)
            self.index[charges] = got
            for c in charges:
                self.rows.append(got)
                self.charges.append(c)
        return got

    def freeze(self) -> None:
        from scipy.sparse import coo_matrix

        kinds: dict = {}
        self.groups = []
        col = []
        for c in self.charges:
            k = (c.kind, c.axes)
            if k not in kinds:
                kinds[k] = len(kinds)
                self.groups.append((k, []))
            self.groups[kinds[k]][1].append(c.nbytes)
            col.append(len(col))
        # columns ordered by (kind, axes) group so each group prices as one array
        order = []
        for k, _ in self.groups:
            order += [i for i, c in enumerate(self.charges) if (c.kind, c.axes) == k]
        position = np.empty(len(order), dtype=np.int64)
        position[np.array(order, dtype=np.int64)] = np.arange(len(order)) if order else position
        self.matrix = coo_matrix((np.ones(len(self.rows)), (np.array(self.rows, dtype=np.int64), position)), shape=(len(self.index), len(self.charges))).tocsr()
        self.nbytes = [np.array(b) for _, b in self.groups]

    def seconds(self, costs: Costs) -> np.ndarray:
        """Seconds of every cell on ``costs.mesh``."""
        from distir.planner.costs import INFEASIBLE

        per = [costs.curve(kind, axes)(b) for (kind, axes), b in zip((k for k, _ in self.groups), self.nbytes)]
        vec = np.concatenate(per) if per else np.zeros(0)
        out = self.matrix @ vec if len(vec) else np.zeros(len(self.index))
        out[self.NEVER] = INFEASIBLE
        return out


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
    edges = []
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
        if cost.any():
            edges.append(Edge(u, v, 1, cost, left, right))
    return Problem(st.strategies, st.root, st.follow, st.counts, work, edges, st.memory)


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
        cap = sum(finite_max(w) for w in p.work.values()) + sum(finite_max(c) for c in full) + 1.0
        self.phi = {r: np.minimum(w, cap) for r, w in p.work.items()}
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
        for _ in range(sweeps):
            for k, (u, v) in enumerate(self.ends):
                f = self.pe[k] + self.phi[u][:, None] + self.phi[v][None, :]
                mu = f.min(axis=1)
                mv = f.min(axis=0)
                self.phi[u] = mu / 2
                self.phi[v] = mv / 2
                self.pe[k] = f - mu[:, None] / 2 - mv[None, :] / 2
            self.sweeps += 1
            before, self.value = self.value, self._value()
            if (above is not None and self.above(above)) or self.value - before <= stall * abs(self.value):
                break
        return self.value
