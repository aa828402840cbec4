"""Machine topologies: a hierarchy of levels with the links that connect each level's
units, and the device at the leaves (DESIGN §5).

A ``Topology`` lists its levels outermost first; level i has ``cardinality`` units inside
each unit of level i-1 (the outermost level's units are the whole machine's: for
``p2-a100`` with 4 nodes, ``node`` has 4 units and ``gpu`` 16 units per node). Devices
(ranks) are numbered row-major over the levels: device r has one digit per level,
outermost first, so the 16 GPUs of node 1 are devices 16..31. ``coords(r)`` gives the
digits, ``unit(r, level)`` the global index of the level's unit holding r.

Each level carries the links that connect its units to their siblings (the units of the
same parent):

* ``bandwidth_GBps``: per direction, what one unit of the level can send to (and receive
  from) its siblings: a node's NIC for the ``node`` level, a GPU's NVSwitch or NVLink
  bandwidth for the ``gpu`` level. Concurrent transfers through a unit share it.
* ``latency_us``: the latency of one message over these links.
* ``in_network_reduction``: the switch can reduce (NVLink SHARP, InfiniBand SHARP).
* ``uplink_GBps`` (optional, not in DESIGN §5's list; ``None`` = not a bottleneck): the
  bandwidth of one unit's own path to the links of the outer levels, e.g. a PCIe domain's
  switch through which its GPUs reach the node's NIC. Transfers that leave the unit for an
  outer level share it.

``tuning/collectives.py`` turns these into the time of a collective. The built-in
topologies are ``dgx2``, ``p2-a100`` and ``p2-v100`` (DESIGN §5), each a function of the
number of nodes; ``BUILTIN_TOPOLOGIES`` maps their names to factories and is the hook
where the tuner registers ``local`` (this machine, calibrated). A TOML file describes any
other machine::

    name = "two-level"
    [[levels]]                 # outermost first
    name = "node"
    cardinality = 4
    bandwidth_GBps = 8.0
    latency_us = 5.0
    [[levels]]
    name = "gpu"
    cardinality = 16
    bandwidth_GBps = 270.0
    latency_us = 1.0
    in_network_reduction = true          # optional, default false
    [device]
    memory_bandwidth_GBps = 1555.0
    peak_tflops = { f32 = 19.5, f16 = 312.0, bf16 = 312.0 }

``get_topology(name_or_path, nodes=None)`` returns a built-in or loads a file; ``nodes``
sets the outermost level's cardinality.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from distir.dialects.diagnostics import InputRejected, check_text
from distir.dialects.layout import at_digits, digits_rank

DTYPES = ("f32", "f16", "bf16")


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy: ``cardinality`` units per unit of the level above,
    linked to their siblings at ``bandwidth_GBps`` per direction (per unit) with
    ``latency_us`` per message; ``in_network_reduction`` when the switch reduces;
    ``uplink_GBps`` the bandwidth of a unit's path to the outer levels (None: unlimited)."""

    name: str
    cardinality: int
    bandwidth_GBps: float
    latency_us: float
    in_network_reduction: bool = False
    uplink_GBps: float | None = None

    @property
    def bandwidth(self) -> float:
        """Bytes per second per direction."""
        return self.bandwidth_GBps * 1e9

    @property
    def latency(self) -> float:
        """Seconds per message."""
        return self.latency_us * 1e-6


@dataclass(frozen=True)
class PeakTflops:
    """Peak dense throughput of a device per element type, in TFLOP/s."""

    f32: float
    f16: float
    bf16: float

    def __getitem__(self, dtype: str) -> float:
        if dtype not in DTYPES:
            raise KeyError(f"no peak throughput for element type {dtype!r} (known: {', '.join(DTYPES)})")
        return getattr(self, dtype)


@dataclass(frozen=True)
class Device:
    """The accelerator at the leaves: memory bandwidth (GB/s) and peak TFLOP/s per dtype."""

    name: str
    memory_bandwidth_GBps: float
    peak_tflops: PeakTflops


@dataclass(frozen=True)
class Topology:
    """A machine: ``levels`` outermost first and the ``device`` at the leaves. Devices are
    numbered row-major over the levels."""

    name: str
    levels: tuple[Level, ...]
    device: Device

    def __post_init__(self):
        if not self.levels:
            raise ValueError(f"topology {self.name!r} has no levels")
        object.__setattr__(self, "levels", tuple(self.levels))

    # -- shape ------------------------------------------------------------------------------
    @cached_property
    def cardinalities(self) -> tuple[int, ...]:
        return tuple(lv.cardinality for lv in self.levels)

    @cached_property
    def ranks(self) -> int:
        """Number of devices: the product of the cardinalities."""
        return math.prod(self.cardinalities)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        """Devices per unit of each level."""
        return tuple(math.prod(self.cardinalities[j + 1 :]) for j in range(len(self.levels)))

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.levels)

    def level_index(self, name: str) -> int:
        for i, lv in enumerate(self.levels):
            if lv.name == name:
                return i
        raise KeyError(f"topology {self.name!r} has no level {name!r} (levels: {', '.join(self.level_names)})")

    def stride(self, level: int) -> int:
        """Devices per unit of ``level`` (the product of the cardinalities below it)."""
        return self.strides[level]

    # -- coordinates --------------------------------------------------------------------------
    def coords(self, rank: int) -> tuple[int, ...]:
        """The digits of device ``rank``, one per level, outermost first."""
        if not 0 <= rank < self.ranks:
            raise IndexError(f"device {rank} out of range for {self.ranks} devices of {self.name!r}")
        return tuple(at_digits(rank, self.cardinalities))

    def rank_of(self, coords: Sequence[int]) -> int:
        """The device with these digits (inverse of ``coords``)."""
        if len(coords) != len(self.levels) or any(not 0 <= d < c for d, c in zip(coords, self.cardinalities)):
            raise IndexError(f"coordinates {tuple(coords)} do not fit levels {self.cardinalities}")
        return digits_rank(coords, self.cardinalities)

    def unit(self, rank: int, level: int) -> int:
        """Global index of the unit of ``level`` holding device ``rank`` (node index for the
        node level, the device itself for the innermost level)."""
        return rank // self.stride(level)

    def first_difference(self, a: int, b: int) -> int | None:
        """The outermost level at which devices ``a`` and ``b`` differ (None if a == b)."""
        for level in range(len(self.levels)):
            s = self.stride(level)
            if a // s != b // s:
                return level
        return None

    def outermost_difference(self, devices: Sequence[int]) -> int | None:
        """The outermost level at which some of ``devices`` differ (None for one device)."""
        devices = list(devices)
        for level in range(len(self.levels)):
            s = self.stride(level)
            if len({d // s for d in devices}) > 1:
                return level
        return None

    def spanned_levels(self, devices: Sequence[int]) -> tuple[int, ...]:
        """Levels at which some two of ``devices`` that share all outer digits differ: the
        levels a collective over ``devices`` crosses."""
        out = []
        for level in range(len(self.levels)):
            outer = self.stride(level) * self.cardinalities[level]
            units: dict[int, set[int]] = {}
            for d in devices:
                units.setdefault(d // outer, set()).add(d // self.stride(level))
            if any(len(u) > 1 for u in units.values()):
                out.append(level)
        return tuple(out)

    # -- variants ---------------------------------------------------------------------------
    def with_nodes(self, nodes: int) -> Topology:
        """The same machine with ``nodes`` units at the outermost level."""
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise InputRejected(f"topology {self.name!r}: the number of nodes must be a positive integer, got {nodes!r}")
        return replace(self, levels=(replace(self.levels[0], cardinality=nodes),) + self.levels[1:])

    def describe(self) -> str:
        parts = []
        for lv in self.levels:
            extra = " in-network reduction" if lv.in_network_reduction else ""
            up = f", uplink {lv.uplink_GBps:g} GB/s" if lv.uplink_GBps is not None else ""
            parts.append(f"{lv.name} x{lv.cardinality} ({lv.bandwidth_GBps:g} GB/s, {lv.latency_us:g} us{up}{extra})")
        return f"{self.name}: " + " > ".join(parts) + f"; {self.ranks} x {self.device.name}"


# -- devices (public specifications) ------------------------------------------------------------
# V100 SXM2: HBM2 900 GB/s; 15.7 TFLOP/s f32, 125 f16 (tensor cores); no bf16 units: bf16
# runs at the f32 rate.
V100 = Device("V100-SXM2", 900.0, PeakTflops(f32=15.7, f16=125.0, bf16=15.7))
# A100 SXM4 40 GB (the GCP a2-megagpu-16g machines of P²): HBM2 1555 GB/s; 19.5 TFLOP/s
# f32 (156 with TF32 tensor cores), 312 f16 and bf16 (tensor cores).
A100 = Device("A100-SXM4-40GB", 1555.0, PeakTflops(f32=19.5, f16=312.0, bf16=312.0))

# Message latencies, approximations of NCCL's tuning model (base + hop latency of the
# Simple protocol): NVLink/NVSwitch about 1 us, PCIe 1.5 us, network 5 us.
_NVLINK_US = 1.0
_PCIE_US = 1.5
_NET_US = 5.0


def _check_nodes(name: str, nodes: int | None, default: int) -> int:
    if nodes is None:
        return default
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise InputRejected(f"topology {name!r}: the number of nodes must be a positive integer, got {nodes!r}")
    return nodes


def dgx2(nodes: int | None = None) -> Topology:
    """CoCoNet's cluster: DGX-2 nodes of 16 V100 on NVSwitch (6 NVLinks of 25 GB/s per GPU
    = 150 GB/s), 8 InfiniBand NICs of 100 Gb/s per node (100 GB/s)."""
    n = _check_nodes("dgx2", nodes, 1)
    return Topology(
        "dgx2",
        (
            Level("node", n, 8 * 100 / 8, _NET_US),
            Level("gpu", 16, 6 * 25.0, _NVLINK_US),
        ),
        V100,
    )


def p2_a100(nodes: int | None = None) -> Topology:
    """P²'s A100 system (GCP a2-megagpu-16g): 16 A100 per node on one NVSwitch at 270 GB/s
    (90% of 300), one 100 Gb/s NIC per node used at 60%: an effective 8 GB/s (P² §5)."""
    n = _check_nodes("p2-a100", nodes, 2)
    return Topology(
        "p2-a100",
        (
            Level("node", n, 8.0, _NET_US),
            Level("gpu", 16, 270.0, _NVLINK_US),
        ),
        A100,
    )


def p2_v100(nodes: int | None = None) -> Topology:
    """P²'s V100 system (GCP, 8 V100 per node): an NVLink ring through the 8 GPUs at 135
    GB/s per direction (90% of 150), two PCIe domains of 4 GPUs whose switches reach the
    CPUs and the node's one NIC at 32 GB/s, the NIC at an effective 8 GB/s (P² §5).

    Levels: node > domain (2 PCIe domains; the NVLink ring links the two halves at 135
    GB/s, their PCIe switches are the 32 GB/s uplinks towards the NIC) > gpu (4 per
    domain, NVLink 135 GB/s). P²'s hierarchy for it is [nodes, 8]: the domain and gpu
    levels merged."""
    n = _check_nodes("p2-v100", nodes, 2)
    return Topology(
        "p2-v100",
        (
            Level("node", n, 8.0, _NET_US),
            Level("domain", 2, 135.0, _NVLINK_US, uplink_GBps=32.0),
            Level("gpu", 4, 135.0, _NVLINK_US),
        ),
        V100,
    )


TopologyFactory = Callable[[int | None], Topology]

#: Built-in topologies by name: each factory takes the number of nodes (None = its
#: default). The tuner registers ``local`` here (this machine, from its calibration file).
BUILTIN_TOPOLOGIES: dict[str, TopologyFactory] = {
    "dgx2": dgx2,
    "p2-a100": p2_a100,
    "p2-v100": p2_v100,
}


def register_topology(name: str, factory: TopologyFactory) -> None:
    """Add (or replace) a built-in topology, e.g. ``local`` from a calibration file."""
    BUILTIN_TOPOLOGIES[name] = factory


def get_topology(name_or_path: str | Path, nodes: int | None = None) -> Topology:
    """A built-in topology by name or a TOML file by path; ``nodes`` sets the number of
    units of the outermost level (a file's own value when None)."""
    key = str(name_or_path)
    if key in BUILTIN_TOPOLOGIES:
        return BUILTIN_TOPOLOGIES[key](nodes)
    path = Path(key)
    if path.suffix == ".toml" or path.exists():
        topo = load_topology(path)
        return topo if nodes is None else topo.with_nodes(nodes)
    known = ", ".join(sorted(BUILTIN_TOPOLOGIES))
    raise InputRejected(f"unknown topology {key!r}: expected one of {known}, or a .toml file")


# -- TOML ---------------------------------------------------------------------------------------
_LEVEL_FIELDS = {
    "name": str,
    "cardinality": int,
    "bandwidth_GBps": float,
    "latency_us": float,
    "in_network_reduction": bool,
    "uplink_GBps": float,
}
_REQUIRED_LEVEL = ("name", "cardinality", "bandwidth_GBps", "latency_us")


def load_topology(path: str | Path) -> Topology:
    """Read a topology TOML file (module docstring); a missing or ill-typed field raises
    ``InputRejected`` naming the file, the line of its table and the field."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputRejected(f"{path}: error: cannot read topology file: {e.strerror or e}") from None
    check_text(data, str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputRejected(f"{path}:{line}: error: the file is not UTF-8 text (byte 0x{data[e.start]:02x})") from None
    return parse_topology(text, str(path))


def parse_topology(text: str, filename: str = "<topology>") -> Topology:
    """``load_topology`` on text."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        where = f"{filename}:{m.group(1)}:{m.group(2)}" if m else filename
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        raise InputRejected(f"{where}: error: invalid TOML: {msg}") from None
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise InputRejected(f"{filename}: error: invalid topology: values nested too deeply") from None
    lines = text.splitlines()
    level_lines = [i + 1 for i, ln in enumerate(lines) if re.match(r"\s*\[\[\s*levels\s*\]\]", ln)]
    device_line = next((i + 1 for i, ln in enumerate(lines) if re.match(r"\s*\[\s*device\s*\]", ln)), None)

    def fail(line: int | None, msg: str):
        where = f"{filename}:{line}" if line else filename
        raise InputRejected(f"{where}: error: {msg}")

    known_top = {"name", "levels", "device"}
    for key in doc:
        if key not in known_top:
            fail(_line_of_key(lines, key), f"unknown top-level field {key!r} (expected name, [[levels]], [device])")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        fail(_line_of_key(lines, "name"), "field 'name' must be a non-empty string" if "name" in doc else "missing field 'name'")
    levels_doc = doc.get("levels")
    if not isinstance(levels_doc, list) or not levels_doc:
        fail(None, "missing [[levels]]: a topology needs at least one level (outermost first)")
    levels = []
    seen = set()
    for i, entry in enumerate(levels_doc):
        line = level_lines[i] if i < len(level_lines) else None
        what = f"[[levels]] entry {i}"
        if not isinstance(entry, dict):
            fail(line, f"{what} must be a table")
        for key in entry:
            if key not in _LEVEL_FIELDS:
                fail(line, f"{what}: unknown field {key!r} (expected {', '.join(_LEVEL_FIELDS)})")
        for key in _REQUIRED_LEVEL:
            if key not in entry:
                fail(line, f"{what}: missing field {key!r}")
        end = level_lines[i + 1] if i + 1 < len(level_lines) else len(lines) + 1
        fields = {}
        for key, value in entry.items():
            at = _line_of_key(lines, key, line or 1, end) or line
            fields[key] = _typed(value, _LEVEL_FIELDS[key], lambda msg, key=key, at=at: fail(at, f"{what}: field {key!r} {msg}"), key)
        if fields["name"] in seen:
            fail(line, f"{what}: level name {fields['name']!r} is used twice")
        seen.add(fields["name"])
        levels.append(Level(**fields))
    dev = doc.get("device")
    if not isinstance(dev, dict):
        fail(device_line, "missing [device] table (memory_bandwidth_GBps, peak_tflops)")
    for key in dev:
        if key not in ("name", "memory_bandwidth_GBps", "peak_tflops"):
            fail(device_line, f"[device]: unknown field {key!r} (expected memory_bandwidth_GBps, peak_tflops)")
    for key in ("memory_bandwidth_GBps", "peak_tflops"):
        if key not in dev:
            fail(device_line, f"[device]: missing field {key!r}")
    at = _line_of_key(lines, "memory_bandwidth_GBps", device_line or 1) or device_line
    bw = _typed(dev["memory_bandwidth_GBps"], float, lambda msg: fail(at, f"[device]: field 'memory_bandwidth_GBps' {msg}"), "memory_bandwidth_GBps")
    peaks = dev["peak_tflops"]
    if not isinstance(peaks, dict):
        fail(device_line, f"[device]: field 'peak_tflops' must be a table of TFLOP/s per dtype ({', '.join(DTYPES)})")
    for key in peaks:
        if key not in DTYPES:
            fail(device_line, f"[device]: peak_tflops: unknown dtype {key!r} (expected {', '.join(DTYPES)})")
    values = {}
    for dt in DTYPES:
        if dt not in peaks:
            fail(device_line, f"[device]: peak_tflops: missing dtype {dt!r}")
        at = _line_of_key(lines, "peak_tflops", device_line or 1) or device_line
        values[dt] = _typed(peaks[dt], float, lambda msg, dt=dt, at=at: fail(at, f"[device]: peak_tflops.{dt} {msg}"), "peak_tflops")
    dev_name = dev.get("name", "device")
    if not isinstance(dev_name, str):
        fail(device_line, "[device]: field 'name' must be a string")
    return Topology(name, tuple(levels), Device(dev_name, bw, PeakTflops(**values)))


# The range of each number of a topology file: outside it the value is a mistake (of
# units, mostly), and inside it every time the models predict stays finite. Latency 0
# is an ideal link.
_RANGES: dict[str, tuple[float, float]] = {
    "cardinality": (1, 1 << 24),
    "bandwidth_GBps": (1e-6, 1e6),
    "uplink_GBps": (1e-6, 1e6),
    "latency_us": (0.0, 1e9),
    "memory_bandwidth_GBps": (1e-6, 1e6),
    "peak_tflops": (1e-9, 1e9),
}


def _typed(value, kind: type, fail, key: str | None = None):
    """``value`` as ``kind`` (ints are accepted for floats; bools never for numbers), a
    finite number within ``_RANGES[key]``."""
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(f"must be a number, got {_toml_type(value)}")
        value = float(value)
        if not math.isfinite(value):
            fail(f"must be a finite number, got {value}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail(f"must be an integer, got {_toml_type(value)}")
    elif not isinstance(value, kind):
        fail(f"must be a {'boolean' if kind is bool else 'string'}, got {_toml_type(value)}")
    if key in _RANGES:
        lo, hi = _RANGES[key]
        if value < lo or value > hi:
            if value < lo:
                bound = f">= {lo:g}" if kind is int or lo == 0 or value > 0 else "> 0"
            else:
                bound = f"<= {hi:g}"
            fail(f"must be {bound} (range {lo:g} to {hi:g}), got {value:g}")
    return value


def _toml_type(value) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


def _line_of_key(lines: list[str], key: str, start: int = 1, end: int | None = None) -> int | None:
    """The first line (1-based, in [start, end)) that assigns ``key``."""
    for i in range(start - 1, len(lines) if end is None else min(end - 1, len(lines))):
        if re.match(rf"\s*{re.escape(key)}\s*=", lines[i]):
            return i + 1
    return None
