"""``distir-import`` as users meet it, and ``distir-opt``/``distir-run``/``distir-tune``
reading JAX's and MLIR shard's files directly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from oracle import assert_matches, load

from distir.tools.diagnostics import distir_version
from distir.tools.importer import main as import_main
from distir.tools.opt import main as opt_main
from distir.tools.run import main as run_main
from distir.tools.tune import main as tune_main

HERE = Path(__file__).parent


def run(capsys, tool, *argv):
    code = tool([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def mlp(jax_dir, tmp_path):
    text, inputs, outputs = load(jax_dir, "tp_mlp_4")
    path = tmp_path / "mlp.mlir"
    path.write_text(text)
    np.savez(tmp_path / "in.npz", **inputs)
    return path, inputs, outputs


def test_import_prints_the_partitioned_module(capsys, mlp):
    code, out, err = run(capsys, import_main, mlp[0])
    assert code == 0, err
    assert "func.func @main(%arg0: !dist.tensor<8x16xf32, @mesh, [replicated]>" in out
    assert "coll.all_reduce sum" in out and "unplaced" not in out
    assert err == ""


def test_import_remarks_and_output_file(capsys, mlp, tmp_path):
    out_path = tmp_path / "out.mlir"
    code, out, err = run(capsys, import_main, mlp[0], "--remarks", "-o", out_path)
    assert code == 0 and out == ""
    assert err.count("remark: partition: inserted") == 1
    assert "mlp.mlir:" in err and "coll.all_reduce sum over x" in err
    assert "coll.all_reduce" in out_path.read_text()


def test_import_from_names_the_reader(capsys, mlp):
    code, _, err = run(capsys, import_main, mlp[0], "--from", "shard")
    assert code == 1
    assert "mlp.mlir:" in err
    code, _, err = run(capsys, import_main, HERE / "shard-annotated.mlir", "--from", "sdy")
    assert code == 1 and "unsupported op 'shard.grid'" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["missing.mlir"], "cannot read missing.mlir"),
        (["FILE", "--from", "xla"], "invalid choice: 'xla'"),
        (["FILE", "--remarx"], "did you mean --remarks"),
    ],
)
def test_import_rejects_bad_options(capsys, mlp, argv, message):
    argv = [str(mlp[0]) if a == "FILE" else a for a in argv]
    code, _, err = run(capsys, import_main, *argv)
    assert code == 1
    assert message in err


def test_import_version(capsys):
    code, out, _ = run(capsys, import_main, "--version")
    assert code == 0 and distir_version() in out


def test_bad_program_is_a_located_diagnostic(capsys, tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text('sdy.mesh @mesh = <["x"=4]>\nfunc.func public @main(%arg0: tensor<6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}]>}) -> tensor<6xf32> {\n  return %arg0 : tensor<6xf32>\n}\n')
    code, _, err = run(capsys, import_main, bad)
    assert code == 1
    assert err.startswith(f"{bad}:2:")
    assert 'axis "y" is not in mesh @mesh' in err


def test_uneven_sharding_imports_and_remarks_name_the_padding(capsys, tmp_path):
    # 6 over 4 shards: Shardy pads to 8; distir's blocks of 2, 2, 2, 0
    path = tmp_path / "u.mlir"
    path.write_text(
        'sdy.mesh @mesh = <["x"=4]>\nfunc.func public @main(%arg0: tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) '
        '-> (tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {\n  return %arg0 : tensor<6x8xf32>\n}\n'
    )
    code, out, err = run(capsys, import_main, path, "--remarks")
    assert code == 0, err
    assert "!dist.tensor<6x8xf32, @mesh, [sliced<0>]>" in out
    assert "inserted coll.all_gather over x (dim 0) of %arg0 (6x8xf32)" in err
    assert "moves 64 padding bytes per rank (dim 0 of size 6 over the 4 ranks of axis 0: blocks of 2, 2, 2, 0)" in err


@pytest.mark.parametrize("size", [2**63, 2**31])
def test_a_mesh_too_large_is_a_located_diagnostic(capsys, tmp_path, size):
    """A mesh axis of 2^63 devices ended in an OverflowError (exit 3), one of 2^31 in tens
    of GB and the OOM killer: meshes are bounded where they are read."""
    bad = tmp_path / "big.mlir"
    bad.write_text(f'sdy.mesh @mesh = <["x"={size}]>\nfunc.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {{\n  return %arg0 : tensor<8xf32>\n}}\n')
    code, _, err = run(capsys, import_main, bad)
    assert code == 1, err
    assert err.startswith(f"{bad}:1:")
    assert f'the mesh has {size} devices with axis "x" of size {size}: distir handles meshes of at most 1048576 devices' in err


def test_run_takes_jax_files_and_inputs(capsys, mlp, tmp_path):
    path, _, want = mlp
    out_npz = tmp_path / "out.npz"
    for backend in ("interpret", "local"):
        code, _, err = run(capsys, run_main, path, "--ranks", 4, "--func", "main", "--backend", backend, "--inputs", tmp_path / "in.npz", "--outputs", out_npz)
        assert code == 0, err
        with np.load(out_npz) as f:
            assert_matches([f["result0"]], want, f"distir-run --backend {backend}")


def test_run_compares_the_imported_program_with_the_hand_written_one(capsys, mlp):
    """--compare: the JAX file and its distir-import output compute the same."""
    path = mlp[0]
    code, out, err = run(capsys, import_main, path)
    written = path.with_suffix(".dist.mlir")
    written.write_text(out)
    code, _, err = run(capsys, run_main, path, "--ranks", 4, "--func", "main", "--backend", "interpret", "--compare", written)
    assert code == 0, err


def test_opt_runs_passes_on_jax_files(capsys, mlp):
    code, out, err = run(capsys, opt_main, mlp[0], "-p", "split-allreduce{strategy=rs-ag},reorder-allgather")
    assert code == 0, err
    assert "coll.reduce_scatter" in out and "coll.all_gather" in out
    code, out, err = run(capsys, opt_main, HERE / "shard-annotated.mlir", "-p", "fuse-maps")
    assert code == 0, err
    assert "coll.all_reduce" in out


def test_tune_takes_jax_files(capsys, mlp, tmp_path):
    code, out, err = run(capsys, tune_main, mlp[0], "--ranks", 4, "--model", "dgx2", "--json", tmp_path / "t.json")
    assert code == 0, err
    assert "best:" in out
    import json

    best = json.loads((tmp_path / "t.json").read_text())["best"]
    assert all(best.values())
