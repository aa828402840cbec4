"""distir-synth (tools/synth.py): report, --json (DESIGN §5's keys), --emit-mlir,
diagnostics and exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distir.dialects.context import parse_module
from distir.tools.synth import main

G = ["--hierarchy", "4,16", "--axes", "4,16", "--reduce-axes", "0", "--topology", "p2-a100", "--nodes", "4"]


def test_report_lists_matrices_programs_and_best(capsys):
    assert main([*G, "--algorithm", "tree"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no progress bar off a terminal
    assert "3 parallelism matrices, 53 programs; synthesized beats AllReduce on 2 of 3 matrices" in out
    assert "[[1,4],[4,4]]   [(root, 1), (gpu, 4)]" in out and "ReduceScatter-AllGather" in out
    assert "matrix [[2,2],[2,8]]: best program 0" in out
    assert "coll.reduce_scatter sum %h dim 0 axes [1]" in out  # the best program as distir IR


def test_json_has_design_keys(tmp_path, capsys):
    f = tmp_path / "out.json"
    assert main([*G, "--json", str(f)]) == 0
    data = json.loads(f.read_text())
    assert {"hierarchy", "axes", "reduce_axes", "size_limit", "matrices", "programs_total"} <= set(data)
    assert data["hierarchy"] == [4, 16] and data["axes"] == [4, 16] and data["reduce_axes"] == [0] and data["size_limit"] == 5
    assert data["programs_total"] == sum(len(m["programs"]) for m in data["matrices"]) == 53
    m = data["matrices"][1]
    assert set(m) == {"matrix", "programs", "allreduce_predicted_s", "best"} and m["matrix"] == [[2, 2], [2, 8]]
    assert set(m["programs"][0]) == {"steps", "predicted_s"}
    assert m["programs"][0]["steps"] == [["root", "InsideGroup", "AllReduce"]]
    assert m["programs"][0]["predicted_s"] == m["allreduce_predicted_s"]
    best = m["programs"][m["best"]]
    assert best["predicted_s"] == min(p["predicted_s"] for p in m["programs"])
    capsys.readouterr()
    assert main([*G, "--json", "-"]) == 0 and json.loads(capsys.readouterr().out)["programs_total"] == 53


def test_emit_mlir_writes_runnable_modules(tmp_path, capsys):
    assert main(["--hierarchy", "2,4", "--axes", "2,4", "--reduce-axes", "1", "--topology", "p2-v100", "--nodes", "1", "--elements", "64", "--emit-mlir", str(tmp_path)]) == 0
    files = sorted(tmp_path.glob("*.mlir"))
    assert [f.name for f in files] == ["matrix0.mlir", "matrix1.mlir"]
    text = files[0].read_text()
    assert text.startswith("// P² matrix [[1,2],[2,2]]") and "// @p46:" in text
    module = parse_module(text)
    assert len([op for op in module.ops if op.name == "func.func"]) == 48  # @allreduce + 47 programs


def test_size_limit(capsys):
    assert main([*G, "--size-limit", "2", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["programs_total"] == 3 + 5 + 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hierarchy", "4,16", "--axes", "4,8", "--reduce-axes", "0"], "the axes 4,8 hold 32 devices but the hierarchy 4,16 has 64"),
        ([*G[:4], "--reduce-axes", "2"], "--reduce-axes: axis 2 is out of range for 2 parallelism axes"),
        ([*G, "--algorithm", "butterfly"], "--algorithm must be one of ring, tree, auto"),
        (["--hierarchy", "4,x", "--axes", "64", "--reduce-axes", "0"], "--hierarchy expects comma-separated integers"),
        ([*G[:6], "--topology", "nope"], "unknown topology 'nope'"),
        ([*G[:6], "--nodes", "2"], "has 64 devices but topology 'p2-a100' has 32"),
        ([*G, "--elements", "0"], "--elements expects a positive integer"),
        (["--hierarchy", "4,16"], "the following arguments are required: --axes, --reduce-axes"),
        (["--hierarchy", "2,12", "--axes", "24", "--reduce-axes", "0"], "not a whole number of 'p2-a100' nodes"),
        ([*G, "--emit-mlir", "/proc/nope/x"], "cannot create /proc/nope/x"),
    ],
)
def test_bad_options_are_diagnostics(args, message, capsys):
    assert main(args) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_console_script(tmp_path):
    exe = Path(sys.executable).parent / "distir-synth"
    proc = subprocess.run([str(exe), "--hierarchy", "4,8", "--axes", "32", "--reduce-axes", "0", "--topology", "p2-v100"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "1 parallelism matrices, 47 programs" in proc.stdout and "(node, InsideGroup, ReduceScatter) (node, Parallel(root), AllReduce)" in proc.stdout
