"""Odd corners seen on upstream programs (issue 27): a dim of size 0 sliced over a mesh
axis runs (its blocks are all empty, each still a block of its own); a module that
declares meshes of different sizes runs a function on the rank count of the meshes that
function uses; MLIR's ``shard.all_slice`` of values the group may hold differently is
rejected at import (ShardOps.td lets each device crop its own value; distir slices one
value the group agrees on), so no backend runs it. The ``mpi`` runs of these programs are
in ``test_differential.py``'s batched job."""

from __future__ import annotations

import numpy as np
import pytest

from support.differential import TWO_MESHES, ZERO_SIZE, zero_size_program

from distir.dialects.context import parse_module
from distir.runtime import interpret
from distir.runtime.equivalence import compare_outputs
from distir.runtime.local import LocalBackend

@pytest.mark.parametrize("case", sorted(ZERO_SIZE))
def test_a_zero_size_dim_sliced_over_the_ranks_runs(case):
    shape, tin, body, tout = ZERO_SIZE[case]
    text = zero_size_program(*ZERO_SIZE[case])
    ranks = 4 if shape in ("[4]", "[2, 2]") else 2
    want = interpret(parse_module(text), "f", None, ranks)
    got = LocalBackend().run(parse_module(text), "f", {}, ranks, 0)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message
    logical = tuple(int(d) for d in tout.split("<")[1].split("x")[:-1])
    assert all(a.shape == logical and a.size == 0 for a in got)


@pytest.mark.parametrize("func, ranks", [("f", 4), ("g", 8)])
def test_only_the_meshes_a_function_uses_constrain_the_rank_count(func, ranks):
    want = interpret(parse_module(TWO_MESHES), func, None, ranks)
    got = LocalBackend().run(parse_module(TWO_MESHES), func, {}, ranks, 0)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message


def test_distir_run_takes_the_rank_count_of_the_functions_meshes(tmp_path, capsys):
    from distir.tools.run import main

    path = tmp_path / "two.mlir"
    path.write_text(TWO_MESHES)
    assert main([str(path), "--func", "g", "--backend", "local"]) == 0  # 8 ranks: @eight, through its view
    assert "@g on 8 rank(s)" in capsys.readouterr().out
    assert main([str(path), "--func", "f", "--ranks", "8"]) == 1
    assert "--ranks 8 does not fit mesh @four" in capsys.readouterr().err


ALL_SLICE = """\
shard.grid @g(shape = 2x2)
func.func @f(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %0 = shard.all_slice %x on @g grid_axes = [1] slice_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
"""


def test_all_slice_of_values_the_group_may_hold_differently_is_rejected_at_import(tmp_path, capsys):
    from distir.tools.run import main as run

    path = tmp_path / "slice.mlir"
    path.write_text(ALL_SLICE)
    for backend in ("interpret", "local"):
        assert run([str(path), "--ranks", "4", "--backend", backend]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"{path}:3:8\n") and "'shard.all_slice' of a tensor the devices of grid axes [1] may hold differently" in err


def test_all_slice_of_a_value_the_group_agrees_on_runs_alike():
    from distir.frontends.program import import_program

    text = ALL_SLICE.replace(
        "  %0 = shard.all_slice %x",
        "  %b = shard.broadcast %x on @g grid_axes = [1] root = [1] : (tensor<4x8xf32>) -> tensor<4x8xf32>\n  %0 = shard.all_slice %b",
    )
    module = import_program(text, "slice.mlir").module
    x = np.random.default_rng(0).standard_normal((2, 2, 4, 8)).astype(np.float32)  # device (i, j)'s input
    want = interpret(module, "f", {"x": x}, 4)
    got = LocalBackend().run(module, "f", {"x": x}, 4, 0)
    assert compare_outputs(want, got, "interpret", "local").ok
    for i in range(2):
        for j in range(2):  # ShardOps.td: device (i, j) keeps block j of root (i, 1)'s tensor
            np.testing.assert_array_equal(got[0][i, j], x[i, 1][2 * j : 2 * j + 2])
