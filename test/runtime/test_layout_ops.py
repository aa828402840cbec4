"""The layout ops (``dist.transpose``, ``reshape``, ``iota``, ``extract_slice``, ``concat``)
and the per-device views (``dist.to_local``, ``from_local``) compute what numpy computes
on 1, 2, 4 and 8 ranks, on the interpreter and on the ``local`` runtime (kernels and
views of the lowered program); ``from_local`` to a replicated value checks that the
ranks agree."""

from __future__ import annotations

import numpy as np
import pytest
from support.layout_programs import PROGRAM, T

from distir.dialects.context import parse_module
from distir.runtime import interpret
from distir.runtime.interpreter import ExecutionError
from distir.runtime.local import run_local


@pytest.fixture(scope="module")
def module():
    return parse_module(PROGRAM)


RNG = np.random.default_rng(3)
X = RNG.standard_normal((8, 64)).astype(np.float32)
X3 = RNG.standard_normal((8, 4, 16)).astype(np.float32)
Y = RNG.standard_normal((64, 8)).astype(np.float32)
Z = RNG.standard_normal((16, 8)).astype(np.float32)
A, B = RNG.standard_normal((8, 8)).astype(np.float32), RNG.standard_normal((8, 16)).astype(np.float32)
CASES = {
    "transpose": ({"x": X}, [X.T]),
    "transpose3": ({"x": X3}, [X3.transpose(2, 0, 1)]),
    "reshape": ({"x": Y}, [Y.reshape(8, 8, 8)]),
    "reshape_strided_block": ({"x": X}, [X.reshape(8, 8, 8)]),
    "iota": ({}, [np.broadcast_to(np.arange(16, dtype=np.int32)[:, None], (16, 8)), np.broadcast_to(np.arange(24, dtype=np.float32), (4, 24))]),
    "extract": ({"x": Z}, [Z[1:14:3]]),
    "concat": ({"a": A, "b": B}, [np.concatenate([A, B], axis=1)]),
}


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("name", sorted(CASES))
def test_layout_op(module, name, ranks):
    inputs, want = CASES[name]
    for run in (interpret, run_local):
        got = run(module, name, inputs, ranks=ranks)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=f"@{name} on {ranks} ranks ({run.__name__})")


VIEWS = f"""
dist.mesh @world shape = [4]
func.func @gather_blocks(%x: {T("8x4", "local")}) -> {T("8x16", "replicated")} {{
  %s = dist.from_local %x : {T("8x4", "local")} -> {T("8x16", "sliced<1>")}
  %g = coll.all_gather %s : {T("8x16", "sliced<1>")} -> {T("8x16", "replicated")}
  func.return %g : {T("8x16", "replicated")}
}}
func.func @blocks_as_values(%x: {T("8x16", "sliced<1>")}) -> {T("8x4", "local")} {{
  %l = dist.to_local %x : {T("8x16", "sliced<1>")} -> {T("8x4", "local")}
  func.return %l : {T("8x4", "local")}
}}
func.func @replicas_agree(%x: {T("8x4", "local")}) -> {T("8x4", "replicated")} {{
  %r = dist.from_local %x : {T("8x4", "local")} -> {T("8x4", "replicated")}
  func.return %r : {T("8x4", "replicated")}
}}
func.func @held_by_one(%x: {T("8x4", "local")}) -> {T("8x4", "replicated")} {{
  %h = dist.from_local %x : {T("8x4", "local")} -> {T("8x4", "at<2>")}
  %b = coll.broadcast %h : {T("8x4", "at<2>")} -> {T("8x4", "replicated")}
  func.return %b : {T("8x4", "replicated")}
}}
"""


@pytest.fixture(scope="module")
def views():
    return parse_module(VIEWS)


def test_from_local_sees_each_ranks_value_as_its_block(views):
    parts = RNG.standard_normal((4, 8, 4)).astype(np.float32)  # rank r's own value
    for run in (interpret, run_local):
        np.testing.assert_array_equal(run(views, "gather_blocks", {"x": parts}, ranks=4)[0], np.concatenate(list(parts), axis=1))


def test_to_local_gives_each_rank_its_block(views):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    for run in (interpret, run_local):
        got = run(views, "blocks_as_values", {"x": x}, ranks=4)[0]  # stacked per rank
        np.testing.assert_array_equal(got, np.stack(np.split(x, 4, axis=1)))


def test_from_local_to_one_rank_then_broadcast(views):
    parts = RNG.standard_normal((4, 8, 4)).astype(np.float32)
    for run in (interpret, run_local):
        np.testing.assert_array_equal(run(views, "held_by_one", {"x": parts}, ranks=4)[0], parts[2])


def test_from_local_to_replicated_checks_the_ranks_agree(views):
    same = np.broadcast_to(RNG.standard_normal((8, 4)).astype(np.float32), (4, 8, 4))
    np.testing.assert_array_equal(interpret(views, "replicas_agree", {"x": same}, ranks=4)[0], same[0])
    differ = RNG.standard_normal((4, 8, 4)).astype(np.float32)
    with pytest.raises(ExecutionError, match="hold different values"):
        interpret(views, "replicas_agree", {"x": differ}, ranks=4)
