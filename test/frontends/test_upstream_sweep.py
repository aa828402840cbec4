"""bench/upstream_sweep.py: a file split at ``// -----`` gives one outcome per program,
counted as imported or rejected (by reason), and the exit status says whether any
program was bad. The third program slices a dim of 3 over 2 devices (Shardy pads it):
imported since uneven blocks (issue 28), and it runs with blocks of 2 and 1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import numpy as np  # noqa: E402
import upstream_sweep  # noqa: E402

from distir.frontends.program import import_program  # noqa: E402
from distir.runtime.interpreter import run_function  # noqa: E402

PROGRAMS = """sdy.mesh @m = <["x"=2]>
func.func @ok(%a: tensor<4xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> tensor<4xf32> {
  %0 = stablehlo.negate %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
// -----
sdy.mesh @m = <["x"=2]>
func.func @pad(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @foo(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
// -----
sdy.mesh @m = <["x"=2]>
func.func @odd(%a: tensor<3xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> tensor<3xf32> {
  %0 = stablehlo.negate %a : tensor<3xf32>
  return %0 : tensor<3xf32>
}
"""


def test_counts_each_program_of_a_split_file(tmp_path, capsys):
    (tmp_path / "a.mlir").write_text(PROGRAMS)
    assert upstream_sweep.main([str(tmp_path), "--json", str(tmp_path / "out.json"), "--show", "all"]) == 0
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["programs"] == 3
    assert report["outcomes"] == {"imported": 2, "rejected": 1}
    assert "unsupported op 'stablehlo.custom_call'" in report["reasons"]
    lines = {item["line"]: item["outcome"] for item in report["listed"]}
    assert lines == {1: "imported", 7: "rejected", 13: "imported"}  # each program keeps its line in the file
    assert "3 programs in 1 files" in capsys.readouterr().out


def test_the_uneven_program_imports_and_runs_in_blocks_of_2_and_1():
    module = import_program(PROGRAMS.split("// -----")[2], "odd.mlir").module
    run = run_function(module, "odd", {"a": np.array([1, 2, 3], np.float32)}, ranks=2)
    assert run.outputs[0].tolist() == [-1, -2, -3]
    assert [b.tolist() for b in run.results[0].buffers.values()] == [[-1, -2], [-3]]
