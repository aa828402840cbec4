"""Calibration of the ``local`` topology: the fit recovers known parameters from step
times, the fit is stored in the cache directory and registered as ``local``, and the
``local`` backend's timing harness measures every program (or reports it cannot run)."""

from __future__ import annotations

import json

import pytest

from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected
from distir.runtime.bulk import STREAM_FROM
from distir.tuning import calibrate
from distir.tuning.calibrate import (
    BANDWIDTH_SIZES,
    COLLECTIVE_SIZES,
    KINDS,
    WIDE,
    collective_program,
    fit,
    host_ops,
    kernels_program,
    update_program,
)
from distir.tuning.cost_model import CalibratedTopology
from distir.tuning.timing import time_programs
from distir.tuning.topology import get_topology

STEP, DISPATCH, ARGUMENT, BW, PEAK, ALONE = 100e-6, 10e-6, 3e-6, 10e9, 20e9, 15e9
ALPHA = {k: (10 + i) * 1e-6 for i, k in enumerate(KINDS)}
BETA = {k: (100 + 10 * i) * 1e-12 for i, k in enumerate(KINDS)}


def synthetic(ranks: int = 2) -> dict[str, float]:
    def host(text):
        launches, others, arguments = host_ops(text, ranks)
        return STEP + (launches + others) * DISPATCH + arguments * ARGUMENT

    t = {"k1": host(kernels_program(1)), "k8": host(kernels_program(8)), "k8w": host(kernels_program(8, WIDE))}
    for n in BANDWIDTH_SIZES:
        t[f"update_{n}"] = host(update_program(n)) + 12 * n / BW
        t[f"update_alone_{n}"] = host(update_program(n, "at<0>")) + 12 * n / ALONE
    overhead = host(update_program(BANDWIDTH_SIZES[0]))
    t["flops"] = overhead + 128 * (1 << 20) / PEAK
    t["mm_f32"] = overhead + 2 * 512**3 / 50e9
    t["mm_f16"] = overhead + 2 * 128**3 / 1e9
    for kind in KINDS:
        for n in COLLECTIVE_SIZES:
            t[f"{kind}_{n}"] = host(collective_program(kind, n)) + ALPHA[kind] + moved(kind, n, ranks)
    return t


def moved(kind: str, n: int, ranks: int = 2) -> float:
    """Seconds a collective of n elements spends on its bytes: the copy collectives move
    1.5x the bytes below the streaming size (write-allocate)."""
    block = 4 * n / (ranks if kind == "all_gather" else 1)
    traffic = (1.0 if block >= STREAM_FROM else 1.5) if kind in ("all_gather", "broadcast", "send") else 1.0
    return BETA[kind] * 4 * n * traffic


def test_fit_recovers_the_parameters():
    f = fit(synthetic(), 2, "local")
    assert f["runtime"]["dispatch_s"] == pytest.approx(DISPATCH, rel=1e-6)
    assert f["runtime"]["launch_s"] == pytest.approx(DISPATCH, rel=1e-6)
    assert f["runtime"]["argument_s"] == pytest.approx(ARGUMENT, rel=1e-6)
    assert f["runtime"]["step_s"] == pytest.approx(STEP, rel=1e-6)
    assert f["memory_bandwidth_GBps"] == pytest.approx(BW / 1e9, rel=1e-6)
    assert f["memory_bandwidth_alone_GBps"] == pytest.approx(ALONE / 1e9, rel=1e-6)
    assert f["peak_tflops"]["f32"] == pytest.approx(PEAK / 1e12, rel=1e-6)
    assert f["matmul_tflops"]["f32"] == pytest.approx(0.05, rel=1e-6)
    for kind in KINDS:
        a, b = f["collectives"][kind]
        assert a == pytest.approx(ALPHA[kind], rel=1e-4)
        assert b == pytest.approx(BETA[kind], rel=1e-6)


def test_an_outlier_does_not_spoil_the_fit():
    t = synthetic()
    t[f"all_reduce_{COLLECTIVE_SIZES[2]}"] *= 8  # one run hit by the machine's load
    a, b = fit(t, 2, "local")["collectives"]["all_reduce"]
    assert b == pytest.approx(BETA["all_reduce"], rel=1e-6)


def test_stored_fit_is_the_local_topology(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(InputRejected, match="is not calibrated on this machine: run 'distir-tune --calibrate"):
        get_topology("local")
    path = calibrate.cache_path()
    assert str(path).startswith(str(tmp_path))
    path.parent.mkdir(parents=True)
    data = {"version": calibrate.VERSION, "backends": {"local": {"2": fit(synthetic(), 2, "local")}}}
    path.write_text(json.dumps(data))
    topo = get_topology("local")
    assert isinstance(topo, CalibratedTopology) and topo.name == "local" and topo.ranks == 2
    assert topo.alpha_beta("send") == pytest.approx((ALPHA["send"], BETA["send"]), rel=1e-4)
    assert topo.runtime.synchronous and not topo.runtime.concurrent_streams
    with pytest.raises(InputRejected, match="calibrated for 2 rank"):
        get_topology("local", 4)
    with pytest.raises(InputRejected, match="'local-mpi' is not calibrated"):
        get_topology("local-mpi")


def not_on_two_ranks() -> str:
    """A send to rank 5: a program that does not fit 2 ranks (the harness must report it,
    not time it)."""
    return collective_program("send", 3).replace("at<1>", "at<5>").replace("to 1", "to 5")


def test_timing_harness_measures_or_reports():
    ok = parse_module(collective_program("all_reduce", 64))
    odd = parse_module(not_on_two_ranks())
    times = time_programs([("ok", ok), ("odd", odd)], 2, "local", rounds=2, min_time=0.0)
    assert times["ok"] is not None and times["ok"] > 0
    assert times["odd"] is None


def test_timing_frees_each_batch_before_the_next():
    # a tuner or bench run times hundreds of programs in batches sized to fit memory one
    # at a time: every batch's rank threads (which hold its buffers) must have ended
    import threading

    progs = [(f"p{i}", parse_module(collective_program("all_reduce", 1 << 12))) for i in range(3)]
    seen = []
    times = time_programs(
        progs,
        2,
        "local",
        rounds=1,
        min_time=0.0,
        memory_budget=1,
        progress=lambda name: seen.append(sum(t.name.startswith("rank") for t in threading.enumerate())),
    )
    assert all(v is not None for v in times.values())
    assert seen == [0, 0, 0]  # one program per batch: none of the earlier batches' threads left
    assert not any(t.name.startswith("rank") for t in threading.enumerate())


@pytest.mark.parametrize("memory_budget", [1 << 30, 1], ids=["one batch", "a batch each"])
def test_timing_stops_before_the_next_program_once_asked(memory_budget):
    # distir-tune's Ctrl-C: the programs warmed up before it are timed, the rest left out
    progs = [(f"p{i}", parse_module(collective_program("all_reduce", 64))) for i in range(4)]
    warmed: list[str] = []
    times = time_programs(progs, 2, "local", rounds=1, min_time=0.0, memory_budget=memory_budget, progress=warmed.append, stop=lambda: len(warmed) >= 2)
    assert warmed == ["p0", "p1"]
    assert set(times) == {"p0", "p1"} and all(t is not None and t > 0 for t in times.values())


@pytest.mark.mpi
def test_mpi_timing_harness():
    ok = parse_module(collective_program("all_reduce", 64))
    odd = parse_module(not_on_two_ranks())
    times = time_programs([("ok", ok), ("odd", odd)], 2, "mpi", rounds=2, min_time=0.0)
    assert times["ok"] is not None and times["ok"] > 0
    assert times["odd"] is None


def test_noise_on_the_smallest_collectives_does_not_decide_beta():
    """A few percent of noise on a small collective's step is most of what is left of
    it once the host's costs are taken out; weighed by that remainder, such points set
    the slope (an AllReduce's beta came out 4x too small on the development machine)."""
    t = synthetic()
    for kind in KINDS:
        t[f"{kind}_{COLLECTIVE_SIZES[0]}"] *= 1.04
        t[f"{kind}_{COLLECTIVE_SIZES[1]}"] *= 0.97
    f = fit(t, 2, "local")
    for kind in KINDS:
        assert f["collectives"][kind][1] == pytest.approx(BETA[kind], rel=0.05)


def test_alpha_is_what_the_smallest_collectives_cost_beyond_their_bytes():
    """The middle sizes run partly from the caches (less per byte than the largest):
    a line through every size then crosses zero below zero, and clamped there a
    collective's synchronisation cost nothing."""
    t = synthetic()
    for kind in KINDS:
        for n in COLLECTIVE_SIZES[1:-1]:
            t[f"{kind}_{n}"] -= 0.4 * moved(kind, n)
    f = fit(t, 2, "local")
    for kind in KINDS:
        assert f["collectives"][kind][0] == pytest.approx(ALPHA[kind], rel=0.25)


def test_calibration_programs_run_largest_first():
    """Timed round-robin in the order of ``programs()``, each program runs after one of
    about its size: a small step right after a large one measured up to 1.7x slower,
    and listed by kind every kind's smallest collective ran after the largest of the
    kind before (the fitted alphas came out too large)."""
    from distir.tuning.timing import _footprint, build

    sizes = [_footprint(build(parse_module(text), 2)) for text in calibrate.programs().values()]
    assert all(b >= a / 16 for a, b in zip(sizes, sizes[1:]))  # never far smaller than the one before
    assert all(b <= 2 * a for a, b in zip(sizes, sizes[1:]))  # largest first
    assert list(calibrate.programs())[-2:] == ["k8", "k1"]


def test_rounds_stop_at_max_rounds():
    """Short steps run more rounds until ``min_time``, but no more than ``max_rounds``."""
    from distir.tuning.timing import _round_robin

    calls = {"a": 0, "b": 0}

    def step(name):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    out = _round_robin({"a": step("a"), "b": step("b")}, (2, 60.0, 7), "median")
    assert calls == {"a": 7, "b": 7} and set(out) == {"a", "b"}
    calls.update(a=0, b=0)
    _round_robin({"a": step("a"), "b": step("b")}, (3, 0.0, 20), "best")
    assert calls == {"a": 3, "b": 3}


def test_a_fit_that_cannot_be_right_keeps_the_previous_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    good = fit(synthetic(), 2, "local")
    assert calibrate.problems(good) == []
    monkeypatch.setattr(calibrate, "measure", lambda backend, ranks, progress=None: good)
    path = calibrate.calibrate(2, ("local",))
    before = path.read_text()
    # every collective's alpha fitted to 0: stored nowhere, the previous file stays
    zero = json.loads(json.dumps(good))
    for kind in zero["collectives"]:
        zero["collectives"][kind][0] = 0.0
    monkeypatch.setattr(calibrate, "measure", lambda backend, ranks, progress=None: zero)
    with pytest.raises(InputRejected, match="alpha came out as 0 for every collective.*kept the previous calibration"):
        calibrate.calibrate(2, ("local",))
    assert path.read_text() == before
    nan = json.loads(json.dumps(good))
    nan["memory_bandwidth_GBps"] = float("nan")
    assert calibrate.problems(nan) == ["the memory bandwidth is nan"]


def test_an_incomplete_fit_is_a_warning_and_ignored(tmp_path, monkeypatch):
    """A calibration file of this version whose fit lacks keys (hand-edited, written by
    another distir) ended distir-tune with an internal KeyError."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = calibrate.cache_path()
    path.parent.mkdir(parents=True)
    broken = fit(synthetic(), 2, "local")
    del broken["runtime"]
    path.write_text(json.dumps({"version": calibrate.VERSION, "backends": {"local": {"2": broken, "4": fit(synthetic(4), 4, "local")}}}))
    with pytest.warns(UserWarning, match=r"the local fit for 2 ranks is incomplete \(the key 'runtime' is missing or wrong\): it is ignored"):
        assert get_topology("local", 4).ranks == 4
    with pytest.raises(InputRejected, match="calibrated for 4 rank"):
        get_topology("local", 2)


def test_two_calibrations_at_once_keep_both_fits(tmp_path):
    """Two ``--calibrate`` runs at once (2 and 4 ranks) each read the file when they
    started and wrote it when they ended: one fit was lost. They now merge under a lock,
    each into the file as it is then."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    good = fit(synthetic(), 2, "local")
    procs = [ctx.Process(target=_store_at_once, args=(str(tmp_path), ranks, good, start)) for ranks in (2, 4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    data = json.loads((tmp_path / "distir" / calibrate.FILE_NAME).read_text())
    assert sorted(data["backends"]["local"], key=int) == ["2", "4"]
    assert not list((tmp_path / "distir").glob("*.tmp"))


def _store_at_once(cache: str, ranks: int, fit_: dict, start) -> None:
    import os

    os.environ["XDG_CACHE_HOME"] = cache
    start.wait()
    for _ in range(50):  # many writes each, interleaved
        calibrate.store(calibrate.cache_path(), {"local": {str(ranks): fit_}})
