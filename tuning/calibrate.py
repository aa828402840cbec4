"""The ``local`` topology: this machine, fitted by short runs of the ``local`` and ``mpi``
backends (``distir-tune --calibrate``) and reused afterwards.

Calibration times small distir programs on each backend (``timing.py``: warm-up, best of
interleaved rounds) and fits the parameters the cost model (``cost_model.py``) needs:

* the host's costs (``Runtime``): a fixed cost per step of a program and a dispatch
  cost per op, from programs of 1 and 8 tiny kernels, and what each array argument of a
  kernel beyond two adds to its launch, from 8 kernels of 8 arrays (``k8w``: numba's
  dispatch and the runtime's alias check look at every argument; 2-5 us each here,
  against 10-15 us for a whole launch of two arrays). Fitting views and launches apart
  (a program of 16 views against one of 1: a view costs a fifth of a launch) was tried
  and not kept: the step's fixed cost then came out larger and the ops cheaper, and
  small steps were predicted 15-25% faster than with one cost per op, further from
  their measured times (2^16: median error 22% against 8%);
* the memory bandwidth, from an element-wise kernel that updates a large buffer in
  place (read two, write one back), every rank at once (so the bandwidth is each rank's
  share), and on rank 0 alone (what a kernel only some ranks run gets). A store to
  memory the kernel did not read costs twice its bytes in the model (the line is read
  first); the triad (c = a + s·b) measured 2.5-3 here and a two-output SGD kernel 2.0,
  and most kernels of optimizer steps update in place;
* the element-wise peak, from a kernel of 64 fused multiply-adds per element, and the
  matmul rate per element type (BLAS for f32);
* alpha and beta of every collective kind (AllReduce, ReduceScatter, AllGather,
  Reduce, Broadcast, point-to-point send) on what is left of the measured time once the
  model's host costs are taken out: beta by least squares over six sizes (the copy
  collectives per byte of a streamed copy, ``cost_model.copy_traffic``), alpha from the
  two smallest.

The result is stored as JSON in the user's cache directory (``platformdirs``:
``~/.cache/distir/calibration.json`` on Linux), per backend and rank count, and
registered in ``BUILTIN_TOPOLOGIES``: ``local`` is the ``local`` backend's fit,
``local-mpi`` the ``mpi`` backend's; ``--nodes N`` (or the tuner's ``--ranks N``) picks
the fit for N ranks. A machine that was not calibrated gets a diagnostic that says how.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from distir.dialects.diagnostics import InputRejected
from distir.tuning.cost_model import COPY_KINDS, CalibratedTopology, Runtime, copy_traffic
from distir.tuning.topology import Device, Level, PeakTflops, register_topology

FILE_NAME = "calibration.json"
VERSION = 1
COLLECTIVE_SIZES = (1 << 12, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24)
BANDWIDTH_SIZES = (1 << 20, 1 << 22, 1 << 24)
"""Elements per rank. Both reach 2^24 (64 MiB buffers), the largest size the tuner's
local runs predict: a line fitted to buffers that fit in the caches (2^18 did) gives a
bandwidth that large steps do not get (they were over-predicted by 15-50%)."""
REPEATS = 2
"""Each program is timed in this many separate interleaved runs; its best step counts."""


def cache_path() -> Path:
    """Where the calibration is stored (the user's cache directory)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("distir")) / FILE_NAME


# --------------------------------------------------------------------------------------
# The programs
# --------------------------------------------------------------------------------------

_MESH = "dist.mesh @world shape = [?]\n"


def _t(n: int, placement: str, dtype: str = "f32") -> str:
    return f"!dist.tensor<{n}x{dtype}, @world, [{placement}]>"


def update_program(n: int, placement: str = "local") -> str:
    """a = a + s * b in place on every rank's own buffers (12 bytes per element moved:
    the stores go to lines just loaded, so there is no write-allocate to guess); with
    ``placement="at<0>"`` on rank 0's only, the others idle."""
    t = _t(n, placement)
    return _MESH + (
        f"func.func @update(%a: {t}, %b: {t}, %s: f32) -> ({t} {{dist.inplace = 0 : i64}}) {{\n"
        f"  %c = dist.map(%a, %b, %s) : ({t}, {t}, f32) -> {t} {{\n"
        "  ^bb0(%x: f32, %y: f32, %k: f32):\n"
        "    %m = arith.mulf %k, %y : f32\n"
        "    %r = arith.addf %x, %m : f32\n"
        "    dist.yield %r : f32\n"
        "  }\n"
        f"  func.return %c : {t}\n}}\n"
    )


def kernels_program(count: int, arrays: int = 2) -> str:
    """``count`` tiny kernels of different shapes (so that none fuse), each over
    ``arrays`` arrays (``arrays - 1`` inputs and its output)."""
    args, body, rets = [], [], []
    for i in range(count):
        t = _t(64 + i, "local")
        ins = [f"%a{i}_{j}" for j in range(arrays - 1)]
        args += [f"{x}: {t}" for x in ins]
        params = ", ".join(f"%x{j}: f32" for j in range(len(ins)))
        adds = "".join(f"    %r{j} = arith.addf %r{j - 1}, %x{j} : f32\n" for j in range(1, len(ins)))
        body.append(
            f"  %c{i} = dist.map({', '.join(ins)}) : ({', '.join([t] * len(ins))}) -> {t} {{\n  ^bb0({params}):\n"
            f"    %r0 = arith.addf %x0, %x0 : f32\n{adds}    dist.yield %r{len(ins) - 1} : f32\n  }}\n"
        )
        rets.append((f"%c{i}", t))
    sig = ", ".join(t for _, t in rets)
    return _MESH + (
        f"func.func @kernels({', '.join(args)}) -> ({sig}) {{\n" + "".join(body) + f"  func.return {', '.join(v for v, _ in rets)} : {sig}\n}}\n"
    )


WIDE = 8
"""Arrays of each kernel of the ``k8w`` program (the others have two)."""


def flops_program(n: int, fmas: int = 64) -> str:
    """``fmas`` dependent multiply-adds per element (2·fmas flops, 8 bytes)."""
    t = _t(n, "local")
    lines = ["    %v0 = arith.addf %x, %x : f32"]
    for i in range(fmas):
        lines.append(f"    %m{i} = arith.mulf %v{i}, %k : f32")
        lines.append(f"    %v{i + 1} = arith.addf %m{i}, %x : f32")
    return _MESH + (
        f"func.func @flops(%a: {t}, %s: f32) -> {t} {{\n"
        f"  %c = dist.map(%a, %s) : ({t}, f32) -> {t} {{\n"
        "  ^bb0(%x: f32, %k: f32):\n" + "\n".join(lines) + f"\n    dist.yield %v{fmas} : f32\n  }}\n"
        f"  func.return %c : {t}\n}}\n"
    )


def matmul_program(n: int, dtype: str) -> str:
    a = f"!dist.tensor<{n}x{n}x{dtype}, @world, [replicated]>"
    return _MESH + (
        f"func.func @mm(%a: {a}, %b: {a}) -> {a} {{\n  %c = dist.matmul %a, %b : ({a}, {a}) -> {a}\n  func.return %c : {a}\n}}\n"
    )


def collective_program(kind: str, n: int) -> str:
    """One collective of ``kind`` over ``n`` f32 elements per rank (its input for
    AllReduce, ReduceScatter, Reduce; its output for AllGather; the message of a send)."""
    ops = {
        "all_reduce": ("local", "replicated", "coll.all_reduce sum %x"),
        "reduce_scatter": ("local", "sliced<0>", "coll.reduce_scatter sum %x dim 0"),
        "all_gather": ("sliced<0>", "replicated", "coll.all_gather %x"),
        "reduce": ("local", "at<0>", "coll.reduce sum %x root 0"),
        "broadcast": ("at<0>", "replicated", "coll.broadcast %x"),
        "send": ("at<0>", "at<1>", "coll.send %x to 1"),
    }
    src, dst, op = ops[kind]
    ti, to = _t(n, src), _t(n, dst)
    return _MESH + f"func.func @c(%x: {ti}) -> {to} {{\n  %y = {op} : {ti} -> {to}\n  func.return %y : {to}\n}}\n"


KINDS = ("all_reduce", "reduce_scatter", "all_gather", "reduce", "broadcast", "send")


# --------------------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------------------


def _modules(texts: dict[str, str]):
    from distir.dialects.context import parse_module

    return [(name, parse_module(text)) for name, text in texts.items()]


def programs() -> dict[str, str]:
    """The calibration programs by name (``fit`` reads their step times by these names),
    largest first. They are timed round-robin in this order, so each runs after one of
    about its size and the smallest last: a small step that runs after a large program
    starts with cold caches and threads just woken (an Adam step of 2^16 elements took
    535 us after itself, 731 after a tiny kernel of another program, 907 after an update
    of 2^24 elements), and listed by kind, the smallest collective of each kind ran
    after the largest of the one before and the fitted alphas came out too large."""
    programs: dict[str, str] = {}
    sizes = sorted(set(BANDWIDTH_SIZES) | set(COLLECTIVE_SIZES), reverse=True)
    for n in sizes:
        if n in BANDWIDTH_SIZES:
            programs[f"update_{n}"] = update_program(n)
            programs[f"update_alone_{n}"] = update_program(n, "at<0>")
        if n in COLLECTIVE_SIZES:
            for kind in KINDS:
                programs[f"{kind}_{n}"] = collective_program(kind, n)
        if n == 1 << 20:
            programs["flops"] = flops_program(1 << 20)
            programs["mm_f32"] = matmul_program(512, "f32")
        if n == 1 << 14:
            programs["mm_f16"] = matmul_program(128, "f16")
    programs["k8w"] = kernels_program(8, WIDE)
    programs["k8"] = kernels_program(8)
    programs["k1"] = kernels_program(1)
    return programs


def measure(backend: str, ranks: int, progress: Callable[[str], None] | None = None) -> dict:
    """Time the calibration programs on ``backend`` and fit the parameters (module doc)."""
    from distir.tuning.timing import time_programs

    modules = _modules(programs())
    best: dict[str, float] = {}
    for _ in range(REPEATS):
        times = time_programs(modules, ranks, backend, rounds=5, min_time=0.3, progress=progress)
        missing = [k for k, v in times.items() if v is None]
        if missing:
            raise InputRejected(f"calibration on {backend}: programs {', '.join(missing)} could not run on {ranks} ranks")
        for k, v in times.items():
            best[k] = min(best.get(k, float("inf")), float(v))  # type: ignore[arg-type]
    return fit(best, ranks, backend)


def _line(xs: list[float], ys: list[float], scale: list[float] | None = None) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (xs, ys) weighed by relative
    error, after dropping the worst point if it is off by more than half. ``scale``: what
    each point's error is relative to (its whole measured time, when ``ys`` are what is
    left of it after the host's costs: a small remainder is no more precise for being
    small, and weighing by it let the smallest sizes decide the slope)."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    s = np.abs(np.asarray(scale if scale is not None else ys, float))
    for _ in range(2):
        w = 1 / np.maximum(s, 1e-9)
        slope, icept = np.polyfit(x, y, 1, w=w)
        rel = np.abs((icept + slope * x) - y) * w
        if len(x) <= 3 or rel.max() < 0.5:
            break
        keep = rel < rel.max()
        x, y, s = x[keep], y[keep], s[keep]
    return float(icept), float(slope)


def fit(t: dict[str, float], ranks: int, backend: str) -> dict:
    """The parameters from the measured step times ``t`` (seconds by program name)."""
    runtime = _host_costs(t, ranks)
    host = lambda text: host_time(text, ranks, runtime)  # noqa: E731
    overhead = host(update_program(BANDWIDTH_SIZES[0]))
    # the update reads two buffers and writes one of them back: 12 bytes per element
    _, per_byte = _line([12.0 * n for n in BANDWIDTH_SIZES], [t[f"update_{n}"] for n in BANDWIDTH_SIZES])
    bandwidth = 1 / max(per_byte, 1e-13)
    # one rank streaming while the others wait gets more than its share (not more than
    # all the ranks' shares together)
    _, per_byte = _line([12.0 * n for n in BANDWIDTH_SIZES], [t[f"update_alone_{n}"] for n in BANDWIDTH_SIZES])
    alone = min(max(1 / max(per_byte, 1e-13), bandwidth), bandwidth * ranks)
    work = lambda name: max(t[name] - overhead, t[name] / 2)  # noqa: E731 - the program's own work
    peak = 2 * 64 * (1 << 20) / work("flops")
    mm32 = 2 * 512**3 / work("mm_f32")
    mm16 = 2 * 128**3 / work("mm_f16")
    collectives = {}
    for kind in KINDS:
        xs, ys = [], []
        for n in COLLECTIVE_SIZES:
            # bytes in the convention of collectives.py: every kind's program moves n
            # f32 elements per rank in (reduce_scatter, all_reduce, reduce), out
            # (all_gather) or as the message (broadcast, send)
            # (the local backend's copies of all_gather, broadcast and send: per byte of a
            # streamed copy, as the cost model charges them; an all_gather copies blocks
            # of n / ranks)
            block = 4.0 * n / (ranks if kind == "all_gather" else 1)
            xs.append(4.0 * n * (float(copy_traffic(block)) if kind in COPY_KINDS and backend == "local" else 1.0))
            ys.append(t[f"{kind}_{n}"] - host(collective_program(kind, n)))
        _, beta = _line(xs, ys, [t[f"{kind}_{n}"] for n in COLLECTIVE_SIZES])
        # alpha where the bytes cost least, from the two smallest sizes (16 and 64 KiB:
        # their bytes are a few us, so an error in beta hardly moves it): the line's
        # intercept comes out below zero when the middle sizes run from the caches, and
        # a collective's synchronisation would then cost nothing (the model then
        # preferred two collectives to one)
        alpha = float(np.mean([y - beta * x for x, y in zip(xs[:2], ys[:2])]))
        collectives[kind] = [max(0.0, alpha), max(1e-15, beta)]
    return {
        "memory_bandwidth_GBps": bandwidth / 1e9,
        "memory_bandwidth_alone_GBps": alone / 1e9,
        "peak_tflops": {"f32": peak / 1e12, "f16": peak / 1e12, "bf16": peak / 1e12},
        "matmul_tflops": {"f32": mm32 / 1e12, "f16": mm16 / 1e12, "bf16": mm16 / 1e12},
        "runtime": asdict(runtime),
        "collectives": collectives,
        "fused_in_memory": backend == "local",
        "measured": dict(sorted(t.items())),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "backend": backend,
        "ranks": ranks,
    }


def _host_costs(t: dict[str, float], ranks: int) -> Runtime:
    """The host's costs (module doc) from the step times of the ``k*`` programs: one
    cost per op (the tiny kernels' launches and their buffers' ops alike), and what each
    array argument of a kernel beyond two adds (``k8w``; none for a calibration measured
    before that program existed)."""
    count = lambda text: host_ops(text, ranks)  # noqa: E731
    k1, k8 = count(kernels_program(1)), count(kernels_program(8))
    ops1, ops8 = sum(k1[:2]), sum(k8[:2])
    # (clamped so that one noisy program cannot give a host cost above a whole step)
    dispatch = min(max(1e-7, (t["k8"] - t["k1"]) / max(1, ops8 - ops1)), t["k1"] / max(1, ops1))
    step = max(0.0, t["k1"] - ops1 * dispatch)
    argument = 0.0
    if "k8w" in t:
        argument = max(0.0, (t["k8w"] - t["k8"]) / max(1, count(kernels_program(8, WIDE))[2] - k8[2]))
    return Runtime(launch_s=dispatch, dispatch_s=dispatch, synchronous=True, concurrent_streams=False, step_s=step, argument_s=argument)


def host_ops(text: str, ranks: int) -> tuple[int, int, int]:
    """(ops issued as a kernel, copy or communication call, other ops, array arguments of
    the kernels beyond two each) of one step of the lowered program, as the cost model
    charges them (``launch_s``, ``dispatch_s``, ``argument_s``)."""
    from xdsl.dialects import func, scf

    from distir.dialects.context import parse_module
    from distir.lowering.pipeline import lower
    from distir.tuning.cost_model import extra_arguments, issues_work

    lowered = lower(parse_module(text), ranks)
    f = next(o for o in lowered.ops if isinstance(o, func.FuncOp))
    ops = [o for o in f.walk() if o is not f and not isinstance(o, (func.ReturnOp, scf.IfOp, scf.YieldOp))]
    launches = [o for o in ops if issues_work(o)]
    return len(launches), len(ops) - len(launches), sum(extra_arguments(o) for o in launches)


def host_time(text: str, ranks: int, runtime: Runtime) -> float:
    """Host seconds of one step of the program (``host_ops``) on ``runtime``."""
    launches, others, arguments = host_ops(text, ranks)
    return runtime.step_s + launches * runtime.launch_s + others * runtime.dispatch_s + arguments * runtime.argument_s


def problems(fit_: dict) -> list[str]:
    """What makes a fit impossible (the machine changed under the measurement, a
    program's time drowned in noise): an alpha of 0 for every collective (the fit clamps
    negative intercepts to 0: every collective would then cost its bytes only), or a
    rate that is not a positive finite number."""
    out = []
    alphas = {k: a for k, (a, _) in fit_["collectives"].items()}
    if alphas and all(a <= 0 for a in alphas.values()):
        out.append("alpha came out as 0 for every collective (their smallest sizes ran no slower than their bytes explain)")
    rates = {
        "memory bandwidth": fit_["memory_bandwidth_GBps"],
        "memory bandwidth of one rank alone": fit_["memory_bandwidth_alone_GBps"],
        **{f"element-wise {k} rate": v for k, v in fit_["peak_tflops"].items()},
        **{f"matmul {k} rate": v for k, v in fit_["matmul_tflops"].items()},
        **{f"beta of {k}": b for k, (_, b) in fit_["collectives"].items()},
    }
    out += [f"the {what} is {v}" for what, v in rates.items() if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)]
    return out


def calibrate(ranks: int = 2, backends: tuple[str, ...] = ("local", "mpi"), progress: Callable[[str], None] | None = None) -> Path:
    """Measure ``backends`` on ``ranks`` ranks and store the fit (merged with earlier fits
    for other rank counts); returns the file. A fit with ``problems`` is not stored
    (nothing is): the previous calibration stays, and the diagnostic says why."""
    if "mpi" in backends:
        from distir.tuning.timing import check_mpi_ranks

        check_mpi_ranks(ranks, "--calibrate")
    path = cache_path()
    fits = {backend: measure(backend, ranks, progress) for backend in backends}
    wrong = [f"{backend}: {why}" for backend, f in fits.items() for why in problems(f)]
    if wrong:
        kept = "kept the previous calibration" if path.exists() else "nothing was stored"
        raise InputRejected(f"the calibration on {ranks} ranks cannot be right ({'; '.join(wrong)}): {kept}; run it again on a quieter machine")
    store(path, {backend: {str(ranks): f} for backend, f in fits.items()})
    return path


def store(path: Path, fits: dict[str, dict[str, dict]]) -> None:
    """Merge ``fits`` (backend -> rank count -> fit) into the file at ``path``: under an
    exclusive lock of ``path.lock``, the file is read again (another calibration may have
    stored its fits since this one started: two at once, for 2 and 4 ranks, each kept
    only its own), merged and replaced whole (written to a temporary file, then renamed:
    a reader never sees half a file)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _load(path) or {"version": VERSION, "backends": {}}
        data["machine"] = {"node": platform.node(), "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()}
        for backend, by_ranks in fits.items():
            data["backends"].setdefault(backend, {}).update(by_ranks)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)


def _load(path: Path) -> dict | None:
    """The calibration file's data, or None (none, another version, or unreadable: a
    warning then)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        _warn(f"{path} cannot be read ({e}): it is ignored; run 'distir-tune --calibrate' again")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("backends"), dict):
        if isinstance(data, dict) and data.get("version") != VERSION:
            return None  # another version's: calibrate again (local_topology says how)
        _warn(f"{path} is not a calibration of this version: it is ignored; run 'distir-tune --calibrate' again")
        return None
    return data if data.get("version") == VERSION else None


def _warn(text: str) -> None:
    from distir.dialects.diagnostics import warn_once

    warn_once(text)


def _usable(fits: dict, backend: str, path: Path) -> dict:
    """The fits of ``backend`` (rank count -> fit) that make a topology; each one that
    does not (a key missing, a value of the wrong type) is a warning and ignored."""
    out = {}
    for key, f in fits.items():
        try:
            int(key)
            topology_from(f, "local", int(key))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            what = f"the key {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
            _warn(f"{path}: the {backend} fit for {key} ranks is incomplete ({what} is missing or wrong): it is ignored; "
                  f"run 'distir-tune --calibrate --ranks {key}' again")
            continue
        out[key] = f
    return out


def topology_from(fit_: dict, name: str, ranks: int) -> CalibratedTopology:
    """The ``CalibratedTopology`` of one fit."""
    runtime = Runtime(**fit_["runtime"])
    ar_alpha, ar_beta = fit_["collectives"]["all_reduce"]
    link = Level("rank", ranks, 1 / max(ar_beta, 1e-15) / 1e9, ar_alpha * 1e6)
    dev = Device(
        f"{platform.processor() or platform.machine()} core ({fit_['backend']} backend)",
        fit_["memory_bandwidth_GBps"],
        PeakTflops(**fit_["peak_tflops"]),
    )
    return CalibratedTopology(
        name,
        (link,),
        dev,
        collectives=tuple((k, float(a), float(b)) for k, (a, b) in sorted(fit_["collectives"].items())),
        runtime=runtime,
        backend=fit_["backend"],
        matmul_tflops=tuple(sorted((k, float(v)) for k, v in fit_["matmul_tflops"].items())),
        fused_in_memory=bool(fit_.get("fused_in_memory", False)),
        memory_bandwidth_alone_GBps=fit_.get("memory_bandwidth_alone_GBps"),
        write_allocate=True,
    )


def local_topology(nodes: int | None = None, backend: str = "local") -> CalibratedTopology:
    """This machine as calibrated for ``nodes`` ranks on ``backend`` (the only fit, or
    the one for 2 ranks, when ``nodes`` is None)."""
    name = "local" if backend == "local" else f"local-{backend}"
    path = cache_path()
    data = _load(path)
    fits = _usable((data or {}).get("backends", {}).get(backend, {}), backend, path)
    if not fits:
        raise InputRejected(
            f"topology '{name}' is not calibrated on this machine: run 'distir-tune --calibrate --ranks N' first (it is stored in {path})"
        )
    if nodes is None:
        key = "2" if "2" in fits else sorted(fits, key=int)[0]
    else:
        key = str(nodes)
        if key not in fits:
            have = ", ".join(sorted(fits, key=int))
            raise InputRejected(f"topology '{name}' is calibrated for {have} rank(s), not {nodes}: run 'distir-tune --calibrate --ranks {nodes}'")
    return topology_from(fits[key], name, int(key))


register_topology("local", lambda nodes=None: local_topology(nodes, "local"))
register_topology("local-mpi", lambda nodes=None: local_topology(nodes, "mpi"))
