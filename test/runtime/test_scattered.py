"""Scattered tensors: one program applied to lists of separate tensors without packing
them (bucket-table kernels, per-piece collectives), on the local and mpi backends, from
the Python API and distir-run --scatter-args."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.lowered import schedules

from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected
from distir.runtime import host
from distir.runtime.backend import run_scattered
from distir.runtime.equivalence import compare_outputs
from distir.runtime.interpreter import interpret
from distir.runtime.scattered import (
    BUCKET,
    ScatteredArray,
    bucket_table,
    segments,
)

LENGTHS = [10, 3, 1500, 7, 24]  # 1544 elements; one piece spans two buckets
N = sum(LENGTHS)
DISTIR_RUN = str(Path(sys.executable).parent / "distir-run")


def adam(schedule: str) -> str:
    return dict(schedules("adam"))[schedule].replace("64x", f"{N}x").replace("<64x", f"<{N}x")


def adam_inputs(ranks: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    inputs: dict = {"g": [rng.random((ranks, n), dtype=np.float32) for n in LENGTHS]}
    for name in "pmv":
        inputs[name] = [rng.random(n, dtype=np.float32) for n in LENGTHS]
    for k, v in zip(["lr", "beta1", "beta2", "eps", "t"], [1e-3, 0.9, 0.999, 1e-8, 3.0]):
        inputs[k] = np.float32(v)
    return inputs


def logical(inputs: dict) -> dict:
    return {k: np.concatenate(v, axis=-1) if isinstance(v, list) else v for k, v in inputs.items()}


def test_bucket_table_covers_every_piece_in_small_buckets():
    table = bucket_table(LENGTHS)
    assert (table[:, 2] <= BUCKET).all() and table[:, 2].sum() == N
    seen = np.zeros(N, bool)
    for seg, off, n, glob in table:
        assert glob == sum(LENGTHS[:seg]) + off
        seen[glob : glob + n] = True
    assert seen.all()


def test_segments_align_buffers_cut_differently():
    a = ScatteredArray([np.arange(3.0), np.arange(3.0, 8.0)])
    b = np.arange(8.0)
    ranges = segments([a, b], 1, 7)
    assert [(lo, hi) for lo, hi, _ in ranges] == [(1, 3), (3, 7)]
    for lo, hi, (x, y) in ranges:
        assert np.array_equal(x, y)
    assert a.view(2, 5).lengths == (1, 2)


SCATTER_CASES = [
    (b, s, r)
    for b in ("local", "mpi")
    for s in ("original", "RS-C-AG", "fuse(RS-C-AG)+sliced-state")
    for r in (2, 4)
    if b == "local" or r == 2 or s == "fuse(RS-C-AG)+sliced-state"  # mpi: fewer process launches
]


@pytest.mark.parametrize("backend,schedule,ranks", SCATTER_CASES)
def test_scattered_adam_equals_interpreter(monkeypatch, backend, schedule, ranks):
    text = adam(schedule)
    bucketed = []
    original = host.HostDevice.launch_bucketed
    monkeypatch.setattr(host.HostDevice, "launch_bucketed", lambda self, *a: (bucketed.append(1), original(self, *a))[1])
    inputs = adam_inputs(ranks)
    before = [p.copy() for p in inputs["p"]]
    got = run_scattered(parse_module(text), None, inputs, ranks, "gpmv", backend=backend)
    assert all(isinstance(o, list) and [len(x) for x in o] == LENGTHS for o in got)
    want = interpret(parse_module(text), None, logical(inputs), ranks, 0)
    c = compare_outputs(want, [np.concatenate(o) for o in got], "interpret", backend)
    assert c.ok, c.message
    if backend == "local":
        assert bucketed, "the kernels ran on the pieces (bucket table)"
    assert all(np.array_equal(a, b) for a, b in zip(before, inputs["p"])), "the caller's pieces are not modified"


def test_scattered_arguments_are_checked():
    text = adam("original")
    bad = adam_inputs(2)
    bad["m"] = bad["m"][:-1]
    with pytest.raises(InputRejected, match="the pieces of 'm' have"):
        run_scattered(parse_module(text), None, bad, 2, "gpmv")
    with pytest.raises(InputRejected, match="no argument 'q'"):
        run_scattered(parse_module(text), None, {**adam_inputs(2), "q": [np.zeros(N, np.float32)]}, 2, "gq")
    with pytest.raises(InputRejected, match="does not run scattered tensors"):
        run_scattered(parse_module(text), None, adam_inputs(2), 2, "gpmv", backend="interpret")


def test_distir_run_scatter_args(tmp_path):
    src = tmp_path / "adam.mlir"
    src.write_text(adam("fuse(RS-C-AG)+sliced-state"))
    inputs = adam_inputs(2)
    arrays = {f"{k}.{i}": p for k in "gpmv" for i, p in enumerate(inputs[k])}
    np.savez(tmp_path / "in.npz", **arrays, **{k: v for k, v in inputs.items() if k not in "gpmv"})
    out = tmp_path / "out.npz"
    proc = subprocess.run(
        [DISTIR_RUN, str(src), "--ranks", "2", "--inputs", str(tmp_path / "in.npz"), "--scatter-args", "g,p,m,v", "--compare-backend", "interpret", "--outputs", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "results agree" in proc.stdout
    with np.load(out) as data:
        assert sorted(data.files) == sorted(f"result{i}.{j}" for i in range(3) for j in range(len(LENGTHS)))
    missing = subprocess.run([DISTIR_RUN, str(src), "--ranks", "2", "--scatter-args", "g,p,m,v"], capture_output=True, text=True)
    assert missing.returncode == 1 and "no pieces for 'g'" in missing.stderr
