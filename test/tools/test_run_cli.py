"""distir-run as users meet it: --version, names it does not know, rank counts the
local backend refuses, programs too big for memory, --timeout, plain numbers in
--compare reports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.imports import imported_by, packages

from distir.runtime.local import MAX_RANKS
from distir.tools.diagnostics import distir_version
from distir.tools.run import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PRIMITIVES = str(EXAMPLES / "primitives.mlir")
SMALL = """\
dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return %y : !dist.tensor<8xf32, @world, [replicated]>
}
"""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.mlir"
    path.write_text(SMALL)
    return path


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"distir-run {distir_version()}"


def test_unknown_names_get_the_closest(capsys, small):
    code, _, err = run(capsys, small, "--backend", "locl", "--ranks", 2)
    assert code == 1 and "unknown backend 'locl' (did you mean 'local'?)" in err
    code, _, err = run(capsys, PRIMITIVES, "--func", "all_reduc", "--ranks", 4)
    assert code == 1 and err.rstrip().endswith("(did you mean 'all_reduce'?)")
    code, _, err = run(capsys, small, "--ranks", 2, "--outptus", "o.npz")
    assert code == 1 and "(did you mean --outputs?)" in err


def test_local_refuses_more_ranks_than_its_bound_and_points_elsewhere(capsys, small):
    code, _, err = run(capsys, small, "--ranks", MAX_RANKS + 1, "--backend", "local")
    assert code == 1
    assert f"the local backend runs at most {MAX_RANKS} ranks" in err
    assert "--backend interpret" in err and "--backend mpi" in err


def test_the_interpreter_runs_a_thousand_ranks(capsys, small):
    code, out, err = run(capsys, small, "--ranks", 1000, "--backend", "interpret")
    assert code == 0, err
    assert "@f on 1000 rank(s), backend interpret" in out


def test_arguments_too_big_for_memory_are_rejected_before_allocating(capsys, tmp_path):
    (tmp_path / "huge.mlir").write_text(SMALL.replace("8xf32", "4611686018427387904xf32"))
    code, _, err = run(capsys, tmp_path / "huge.mlir", "--ranks", 2, "--backend", "interpret")
    assert code == 1
    assert re.search(r"the arguments of @f need [0-9.e+]+ GiB, more than the [0-9.]+ GiB of memory available", err)


def test_arguments_of_unsupported_types_are_rejected(capsys, tmp_path):
    (tmp_path / "m.mlir").write_text("func.func @f(%x: memref<4xmemref<4xf32>>) {\n  func.return\n}\n")
    code, _, err = run(capsys, tmp_path / "m.mlir", "--ranks", 1, "--backend", "interpret")
    assert code == 1 and "argument 'x' of @f: element type memref<4xmemref<4xf32>> is not supported" in err


def test_timeout_must_be_positive(capsys, small):
    code, _, err = run(capsys, small, "--ranks", 2, "--timeout", "0")
    assert code == 1 and "--timeout must be positive" in err


def test_compare_reports_plain_numbers(capsys, tmp_path):
    text = Path(PRIMITIVES).read_text().replace("coll.reduce sum %x root 0", "coll.reduce max %x root 0")
    (tmp_path / "p.mlir").write_text(text)
    code, _, err = run(capsys, tmp_path / "p.mlir", "--func", "all_reduce", "--compare-func", "reduce_broadcast", "--ranks", 4, "--backend", "interpret")
    assert code == 2
    assert re.search(r"result0 differs at \[\d+, \d+\]: -?\d+\.\d+ vs -?\d+\.\d+ \(abs diff", err), err
    assert "np.float" not in err


def test_outputs_are_written_to_the_name_given(capsys, small, tmp_path):
    """``--outputs res.out`` writes ``res.out`` (numpy's ``savez`` would add ``.npz``)."""
    import numpy as np

    code, _, err = run(capsys, small, "--ranks", 2, "--backend", "interpret", "--outputs", tmp_path / "res.out")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.out", "small.mlir"]
    assert np.load(tmp_path / "res.out")["result0"].shape == (8,)


def test_a_distir_program_runs_without_the_partitioner_or_a_kernel_compiler(small):
    """The partitioner reads imported (sdy, shard) programs only; the interpreter compiles
    no kernels (numba: ~0.5 s of CPU at start-up, with the scipy it loads)."""
    r, modules = imported_by("distir.tools.run", str(small), "--ranks", "2", "--backend", "interpret")
    assert "result0: 8xf32 on @world [replicated]" in r.stdout
    assert "distir.frontends.partition" not in modules
    assert not packages(modules) & {"numba", "llvmlite", "scipy", "mpi4py", "torch", "jax", "matplotlib", "rich"}
