"""``distir-tune``: its output and JSON, and located diagnostics with exit 1 for bad
options and files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distir.tools.tune import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TUNE = Path(sys.executable).parent / "distir-tune"

ALL_REDUCE = """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<256xf32, @world, [local]>) -> !dist.tensor<256xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<256xf32, @world, [local]> -> !dist.tensor<256xf32, @world, [replicated]>
  func.return %y : !dist.tensor<256xf32, @world, [replicated]>
}
"""


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(TUNE), *args], capture_output=True, text=True, input=stdin, timeout=600, cwd=ROOT)


def test_model_prediction_table_json_plot_and_best(tmp_path):
    out_json, out_png, best = tmp_path / "r.json", tmp_path / "s.png", tmp_path / "best.mlir"
    p = run(str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "32", "--sizes", "2^10,2^28", "--json", str(out_json), "--plot", str(out_png))
    assert p.returncode == 0, p.stderr
    assert "size 2^10 (1024):" in p.stdout and "size 2^28 (268435456):" in p.stdout
    assert "AR-SGD" in p.stdout and "fuse(RS-SGD-AG)" in p.stdout and "speedup" in p.stdout
    data = json.loads(out_json.read_text())
    assert set(data) == {"sizes", "schedules", "best"}
    assert data["sizes"] == [1024, 1 << 28]
    assert all(set(s) == {"name", "pipeline", "times", "measured"} for s in data["schedules"])
    assert all(s["measured"] is False for s in data["schedules"])
    assert data["best"]["1024"].startswith("AR-SGD")
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    p = run(str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "32", "--sizes", "2^28", "-o", str(best))
    assert p.returncode == 0, p.stderr
    text = best.read_text()
    assert "coll.fused_all_reduce" in text and "268435456xf32" in text


def test_backend_local_times_every_schedule(tmp_path):
    out = tmp_path / "r.json"
    p = run("-", "--ranks", "2", "--json", str(out), stdin=ALL_REDUCE)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["sizes"] == [256]
    timed = [s for s in data["schedules"] if s["times"]["256"] is not None]
    assert timed and all(s["measured"] for s in data["schedules"])
    assert data["best"]["256"] in {s["name"] for s in timed}
    assert "timed on the local backend" in p.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--sizes", "2^10..x"], "distir-tune: --sizes '2^10..x'"),
        (["--model", "nope"], "unknown topology 'nope'"),
        (["--model", "dgx2", "--nodes", "0"], "number of nodes must be a positive integer"),
        (["--dim", "7"], "--dim 7: no tensor of the program has a dimension of size 7"),
        (["--sizes", "2^10,2^12", "-o", "x.mlir"], "-o writes the best schedule for one size"),
        (["--nodes", "2"], "--nodes goes with --model"),
        (["--backend", "nccl"], "the tuner times on local or mpi"),
        (["--model", "dgx2", "--backend", "local"], "not allowed with argument"),
        (["--model", "dgx2", "--nodes", "1", "--ranks", "64"], "more than the 16 devices"),
        (["--func", "other"], "--func other: no function @other"),
    ],
)
def test_bad_options_are_diagnostics(args, message, capsys):
    code = main([str(EXAMPLES / "sgd.mlir"), *(["--ranks", "2"] if "--ranks" not in args else []), *args])
    err = capsys.readouterr().err
    assert code == 1
    assert message in err
    assert "Traceback" not in err


def test_bad_files_are_located_diagnostics(tmp_path, capsys):
    assert main([str(tmp_path / "missing.mlir"), "--ranks", "2"]) == 1
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.mlir"
    bad.write_text(ALL_REDUCE.replace("[local]> ->", "[replicated]> ->", 1).replace("(%x: !dist.tensor<256xf32, @world, [local]>", "(%x: !dist.tensor<256xf32, @world, [replicated]>"))
    assert main([str(bad), "--ranks", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "coll.all_reduce" in err
    topo = tmp_path / "t.toml"
    topo.write_text('name = "t"\n[[levels]]\nname = "gpu"\ncardinality = "four"\nbandwidth_GBps = 1.0\nlatency_us = 1.0\n')
    assert main([str(EXAMPLES / "sgd.mlir"), "--ranks", "2", "--model", str(topo)]) == 1
    err = capsys.readouterr().err
    assert f"{topo}:" in err and "cardinality" in err
    assert main(["--ranks", "2"]) == 1
    assert "give a program FILE" in capsys.readouterr().err


def test_local_topology_needs_calibration(tmp_path):
    import os

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    p = subprocess.run([str(TUNE), str(EXAMPLES / "sgd.mlir"), "--ranks", "2", "--model", "local"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1
    assert "is not calibrated on this machine: run 'distir-tune --calibrate" in p.stderr
