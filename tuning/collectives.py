"""The alpha-beta time of one collective on a topology: the simulator that P² synthesis
(``synthesis/simulate.py``) and the autotuner's cost model share.

``collective_time(topology, kind, groups, nbytes, algorithm)`` returns seconds. ``groups``
lists the device groups (global device indices of ``topology``) that run the collective
at the same time, e.g. every group of a collective over one mesh axis, or P²'s
``Parallel`` form; links that several groups use at once (a node's NIC, a PCIe domain's
switch) are shared between them. ``nbytes`` is the size of the full vector of each rank:

============== ===========================================================================
kind           ``nbytes`` is
============== ===========================================================================
all_reduce     the buffer each rank contributes and receives
reduce_scatter the input of each rank (each ends with ``nbytes / n``)
all_gather     the output of each rank (each contributes ``nbytes / n``)
reduce         the buffer each rank contributes; the first device of the group is the root
broadcast      the buffer the first device of the group sends to the others
send           the message; each group is ``(source, destination)``
============== ===========================================================================

Model. A collective is planned as the transfers it makes (``plan``), then timed:

* A transfer between devices a and b whose outermost differing level is L uses the
  level-L links of a's unit (out) and of b's unit (in) (``Level.bandwidth_GBps`` per
  direction), and the uplinks (``Level.uplink_GBps``) of a's and b's units at the levels
  inside L. The load of a link is the sum of the bytes of all transfers through it, over
  all concurrent groups.
* A group finishes after its latency plus the most loaded link it uses divided by that
  link's bandwidth (transfers are pipelined, as NCCL's are); the collective finishes with
  its slowest group.
* ``ring``: the group's devices in increasing order form a ring (devices of one unit are
  contiguous, so a ring crosses each level's links as few times as possible). AllReduce
  moves ``2(n-1)/n * nbytes`` over every ring edge in ``2(n-1)`` steps, ReduceScatter and
  AllGather ``(n-1)/n * nbytes`` in ``n-1`` steps, Reduce and Broadcast pipeline the whole
  buffer along the ring's chain towards/from the root (``n-1`` steps). A step costs the
  latency of the outermost level the ring crosses.
* ``tree`` (AllReduce only, as in NCCL; the other kinds run as ring): NCCL's double
  binary tree, made hierarchical: at each level the units holding group members form two
  complementary binary trees over their first members (the second tree is the first one
  over the units rotated by one), each tree carrying half the buffer up (reduce) and down
  (broadcast); latency ``2 * sum over levels of floor(log2 m) * latency`` (m units).
* In-network reduction: an AllReduce whose group crosses only levels with
  ``in_network_reduction`` may be done by the switch: each unit sends and receives the
  buffer once per level (latency two messages per level). ``auto`` considers it.
* ``auto`` is what NCCL's tuner picks: the fastest of ring, tree (and in-network) for
  AllReduce, ring for the others. It carries the small-message behaviour (tree's
  logarithmic latency wins for small buffers, ring's bandwidth for large ones).

Example: 4 nodes of p2-a100, an AllReduce of 1 GB over the 4 GPUs 0, 16, 32, 48 (one per
node) takes ``2 * 3/4 * 1e9 / 8e9 + 6 * 5e-6`` s with ``ring``; sixteen such groups at once
(one per GPU index) share each node's NIC and take sixteen times the bandwidth term.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from distir.dialects.diagnostics import InputRejected
from distir.tuning.topology import Topology

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "reduce", "broadcast", "send")
ALGORITHMS = ("ring", "tree", "auto")


@dataclass(frozen=True)
class Transfer:
    """``fraction * nbytes`` bytes from device ``src`` to device ``dst``."""

    src: int
    dst: int
    fraction: float


@dataclass(frozen=True)
class GroupPlan:
    """The transfers of one group and the latency of its steps (seconds)."""

    devices: tuple[int, ...]
    transfers: tuple[Transfer, ...]
    latency: float
    #: loads put on links directly (``_links`` keys and fractions of nbytes), for
    #: in-network reductions where a switch, not a device, is the other end
    link_loads: tuple[tuple[tuple, float], ...] = ()


def collective_time(
    topology: Topology,
    kind: str,
    groups: Iterable[Sequence[int]],
    nbytes: float,
    algorithm: str = "ring",
) -> float:
    """Seconds for ``groups`` to run the collective ``kind`` at the same time on
    ``topology`` with ``nbytes`` per rank (module docstring), by ``algorithm``."""
    _check(kind, algorithm)
    if nbytes < 0:
        raise InputRejected(f"collective_time: nbytes must be >= 0, got {nbytes}")
    key = _groups_key(topology, groups)
    if algorithm == "auto":
        options = ["ring"]
        if kind == "all_reduce":
            options.append("tree")
            if _in_network(topology, key):
                options.append("in_network")
        return min(_cost(topology, kind, key, a)(nbytes) for a in options)
    if algorithm == "tree" and kind != "all_reduce":
        algorithm = "ring"
    return _cost(topology, kind, key, algorithm)(nbytes)


def collective_cost(topology: Topology, kind: str, groups: Iterable[Sequence[int]], algorithm: str = "ring") -> tuple[float, float]:
    """``(latency_s, seconds_per_byte)`` of the collective: its time is
    ``latency_s + nbytes * seconds_per_byte`` for one fixed algorithm (not ``auto``),
    for the slowest group (groups with equal latency, as the ones of one mesh axis)."""
    _check(kind, algorithm)
    if algorithm == "auto":
        raise InputRejected("collective_cost: 'auto' depends on the size; use collective_time")
    if algorithm == "tree" and kind != "all_reduce":
        algorithm = "ring"
    c = _cost(topology, kind, _groups_key(topology, groups), algorithm)
    return c.latency, c.per_byte


def _check(kind: str, algorithm: str) -> None:
    if kind not in KINDS:
        raise InputRejected(f"unknown collective {kind!r}: expected one of {', '.join(KINDS)}")
    if algorithm not in ALGORITHMS:
        raise InputRejected(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")


def _groups_key(topology: Topology, groups: Iterable[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    key = tuple(tuple(int(d) for d in g) for g in groups)
    return _checked(topology, key)


@lru_cache(maxsize=65536)
def _checked(topology: Topology, key: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    n = topology.ranks
    for g in key:
        if len(set(g)) != len(g):
            raise InputRejected(f"collective group {list(g)} lists a device twice")
        for d in g:
            if not 0 <= d < n:
                raise InputRejected(f"device {d} of group {list(g)} is out of range for the {n} devices of {topology.name!r}")
    return key


@dataclass(frozen=True)
class _Cost:
    """time(nbytes) = max over groups of (latency_g + nbytes * per_byte_g)."""

    terms: tuple[tuple[float, float], ...]

    def __call__(self, nbytes: float) -> float:
        return max((lat + nbytes * pb for lat, pb in self.terms), default=0.0)

    @property
    def latency(self) -> float:
        return max((lat for lat, _ in self.terms), default=0.0)

    @property
    def per_byte(self) -> float:
        return max((pb for _, pb in self.terms), default=0.0)


@lru_cache(maxsize=65536)
def _cost(topology: Topology, kind: str, groups: tuple[tuple[int, ...], ...], algorithm: str) -> _Cost:
    if kind == "send" and len(groups) > SEND_PAIRS_IN_NUMPY and all(len(g) == 2 for g in groups):
        return _sends_cost(topology, groups)
    plans = [plan(topology, kind, g, algorithm) for g in groups]
    load: dict[tuple, float] = {}
    used: list[set[tuple]] = []
    for p in plans:
        links = set()
        for t in p.transfers:
            for link in _links(topology, t.src, t.dst):
                load[link] = load.get(link, 0.0) + t.fraction
                links.add(link)
        for link, fraction in p.link_loads:
            load[link] = load.get(link, 0.0) + fraction
            links.add(link)
        used.append(links)
    terms = []
    for p, links in zip(plans, used):
        per_byte = max((load[link] / _bandwidth(topology, link) for link in links), default=0.0)
        terms.append((p.latency, per_byte))
    return _Cost(tuple(terms))


SEND_PAIRS_IN_NUMPY = 64
"""Groups of sends with more pairs than this are priced by ``_sends_cost`` (an
all-to-all over 256 devices is 65,280 pairs: 0.15 s each in Python)."""


def all_to_all_cost(topology: Topology, groups: Iterable[Sequence[int]]) -> tuple[float, float]:
    """``collective_cost`` of the sends of an all-to-all of ``groups``: every ordered
    pair of distinct members of each group, at once (``(latency_s, seconds_per_byte)``,
    the same floats). The groups are checked, not each of their pairs, and many pairs
    (65,280 over 256 devices) are made and priced with numpy (``_sends_cost``): a
    planner prices an all-to-all on each mesh it considers, and making and checking
    the pairs one by one took longer than pricing them."""
    key = _groups_key(topology, groups)
    if sum(len(g) * (len(g) - 1) for g in key) <= SEND_PAIRS_IN_NUMPY:
        return collective_cost(topology, "send", [(a, b) for g in key for a in g for b in g if a != b], "ring")
    import numpy as np

    parts = []
    for g in key:
        members = np.asarray(g, dtype=np.int64)
        src, dst = np.repeat(members, len(g)), np.tile(members, len(g))
        parts.append(np.stack([src, dst], axis=1)[src != dst])
    c = _sends_cost(topology, np.concatenate(parts))
    return c.latency, c.per_byte


def _sends_cost(topology: Topology, pairs) -> _Cost:
    """``_cost`` of ``send`` groups that are all (source, destination) pairs (a tuple of
    pairs or an array of shape (n, 2)), with numpy: each pair's transfer loads the
    links ``_links`` names by 1, and its term is its level's latency and the largest
    load per bandwidth of its links, as ``_cost`` computes them (the same floats); the
    terms are kept once each (``_Cost`` takes their largest values only)."""
    import numpy as np

    p = np.asarray(pairs, dtype=np.int64)
    src, dst = p[:, 0], p[:, 1]
    levels = len(topology.levels)
    strides = np.asarray(topology.strides, dtype=np.int64)
    differ = (src[:, None] // strides[None, :]) != (dst[:, None] // strides[None, :])
    level = np.argmax(differ, axis=1)  # the outermost differing level (src != dst: one differs)
    ranks = topology.ranks

    def code(kind: int, lv, unit, way: int):
        return ((kind * levels + lv) * ranks + unit) * 2 + way

    sib_out = code(0, level, src // strides[level], 0)
    sib_in = code(0, level, dst // strides[level], 1)
    ups = [(lv, code(1, lv, src // strides[lv], 0), code(1, lv, dst // strides[lv], 1), level < lv)
           for lv in range(levels) if topology.levels[lv].uplink_GBps is not None]
    used = [sib_out, sib_in] + [c[m] for _, a, b, m in ups for c in (a, b)]
    load = np.bincount(np.concatenate(used), minlength=2 * 2 * levels * ranks).astype(np.float64)
    sib_bw = np.asarray([lv.bandwidth for lv in topology.levels], dtype=np.float64)[level]
    per_byte = np.maximum(load[sib_out] / sib_bw, load[sib_in] / sib_bw)
    for lv, a, b, m in ups:
        bw = topology.levels[lv].uplink_GBps * 1e9
        per_byte = np.where(m, np.maximum(per_byte, np.maximum(load[a] / bw, load[b] / bw)), per_byte)
    latency = np.asarray([lv.latency for lv in topology.levels], dtype=np.float64)[level]
    return _Cost(tuple(dict.fromkeys(zip(latency.tolist(), per_byte.tolist()))))


def plan(topology: Topology, kind: str, group: Sequence[int], algorithm: str = "ring") -> GroupPlan:
    """The transfers (as fractions of ``nbytes``) and the latency of one group running
    ``kind`` by ``algorithm`` (``ring``, ``tree`` or ``in_network``) on its own."""
    devices = tuple(group)
    n = len(devices)
    if n <= 1:
        return GroupPlan(devices, (), 0.0)
    if kind == "send":
        if n != 2:
            raise InputRejected(f"a send group is (source, destination), got {list(devices)}")
        level = topology.first_difference(*devices)
        return GroupPlan(devices, (Transfer(devices[0], devices[1], 1.0),), topology.levels[level].latency)
    if algorithm == "in_network":
        return _in_network_plan(topology, devices)
    if algorithm == "tree" and kind == "all_reduce":
        return _tree_plan(topology, devices)
    ring = sorted(devices)
    alpha = topology.levels[topology.outermost_difference(ring)].latency
    if kind in ("all_reduce", "reduce_scatter", "all_gather"):
        share = (n - 1) / n * (2 if kind == "all_reduce" else 1)
        steps = (n - 1) * (2 if kind == "all_reduce" else 1)
        edges = [Transfer(ring[i], ring[(i + 1) % n], share) for i in range(n)]
        return GroupPlan(devices, tuple(edges), steps * alpha)
    # reduce / broadcast: a pipelined chain along the ring, ending (reduce) or starting
    # (broadcast) at the root, the group's first device
    root = devices[0]
    start = ring.index(root)
    order = ring[start:] + ring[:start]  # root, root+1, ... around the ring
    if kind == "broadcast":
        edges = [Transfer(order[i], order[i + 1], 1.0) for i in range(n - 1)]
    else:
        chain = order[1:] + order[:1]  # root+1 -> ... -> root
        edges = [Transfer(chain[i], chain[i + 1], 1.0) for i in range(n - 1)]
    return GroupPlan(devices, tuple(edges), (n - 1) * alpha)


def _tree_plan(topology: Topology, devices: tuple[int, ...]) -> GroupPlan:
    transfers: list[Transfer] = []
    depth = {}  # level -> height of its trees (the largest)

    def build(members: list[int], level: int):
        while level < len(topology.levels):
            s = topology.stride(level)
            units: dict[int, list[int]] = {}
            for d in members:
                units.setdefault(d // s, []).append(d)
            if len(units) > 1:
                break
            level += 1
        else:
            return
        parts = [sorted(units[u]) for u in sorted(units)]
        leaders = [p[0] for p in parts]
        for tree in _double_tree(leaders):
            for parent, child in tree:
                transfers.append(Transfer(child, parent, 0.5))  # reduce, half the buffer per tree
                transfers.append(Transfer(parent, child, 0.5))  # broadcast
        depth[level] = max(depth.get(level, 0), int(math.log2(len(parts))))
        for p in parts:
            build(p, level + 1)

    build(sorted(devices), 0)
    latency = 2 * sum(h * topology.levels[lv].latency for lv, h in depth.items())
    return GroupPlan(devices, tuple(transfers), latency)


def _binary_tree_edges(order: list[int]) -> list[tuple[int, int]]:
    """(parent, child) edges of the in-order binary tree over ``order`` in which the
    element at 1-based position p has height log2(lowbit(p)): odd positions are leaves,
    the root is the largest power of two <= len(order)."""
    m = len(order)
    edges = []
    for p in range(2, m + 1, 2):
        b = p & -p
        edges.append((order[p - 1], order[p - b // 2 - 1]))  # left child
        h = b // 2
        while h >= 1 and p + h > m:
            h //= 2
        if h >= 1:
            edges.append((order[p - 1], order[p + h - 1]))  # right child
    return edges


def _double_tree(order: list[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Two binary trees over ``order`` in which no element is inner in both (NCCL's double
    binary tree): the second is the first over the mirrored order (even length) or the
    order shifted by one (odd length)."""
    second = order[::-1] if len(order) % 2 == 0 else order[-1:] + order[:-1]
    return _binary_tree_edges(order), _binary_tree_edges(second)


def _in_network(topology: Topology, groups: tuple[tuple[int, ...], ...]) -> bool:
    return any(len(g) > 1 for g in groups) and all(
        topology.levels[lv].in_network_reduction for g in groups for lv in topology.spanned_levels(g)
    )


def _in_network_plan(topology: Topology, devices: tuple[int, ...]) -> GroupPlan:
    """Each unit under a reducing switch sends the buffer up once and receives the
    result once, at every level the group crosses."""
    loads = []
    latency = 0.0
    for level in topology.spanned_levels(devices):
        s = topology.stride(level)
        for unit in sorted({d // s for d in devices}):
            loads += [(("sib", level, unit, "out"), 1.0), (("sib", level, unit, "in"), 1.0)]
        latency += 2 * topology.levels[level].latency
    return GroupPlan(devices, (), latency, tuple(loads))


def _links(topology: Topology, src: int, dst: int) -> list[tuple]:
    """The links a transfer src -> dst uses: ("sib", level, unit, "out"/"in") for the links
    between sibling units at the outermost differing level, ("up", level, unit, dir) for
    the uplinks of the units inside it."""
    level = topology.first_difference(src, dst)
    if level is None:
        return []
    out = [("sib", level, topology.unit(src, level), "out"), ("sib", level, topology.unit(dst, level), "in")]
    for inner in range(level + 1, len(topology.levels)):
        if topology.levels[inner].uplink_GBps is not None:
            out.append(("up", inner, topology.unit(src, inner), "out"))
            out.append(("up", inner, topology.unit(dst, inner), "in"))
    return out


def _bandwidth(topology: Topology, link: tuple) -> float:
    lv = topology.levels[link[1]]
    return lv.bandwidth if link[0] == "sib" else lv.uplink_GBps * 1e9
