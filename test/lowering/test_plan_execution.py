"""``plan-execution`` (``lowering/plan_execution.py``) decides how a lowered program
executes and writes each decision into the IR; the runtime does what the IR says and the
cost model predicts what the IR says. A decision edited by hand in the planned text is
followed by both (``docs/planning.md``)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from support.machines import calibrated_local

from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected
from distir.lowering.pipeline import lower
from distir.lowering.plan_execution import plan
from distir.runtime import bulk, host
from distir.runtime.equivalence import compare_outputs
from distir.runtime.interpreter import interpret
from distir.runtime.local import LocalBackend
from distir.tuning.cost_model import Scaling, predict, prepare

SGD = """
dist.mesh @world shape = [?]
func.func @sgd(%g: !dist.tensor<Nxf32, @world, [local]>, %p: !dist.tensor<Nxf32, @world, [replicated]>, %m: !dist.tensor<Nxf32, @world, [replicated]>, %lr: f32, %mu: f32) -> (!dist.tensor<Nxf32, @world, [replicated]> {dist.inplace = 1 : i64}, !dist.tensor<Nxf32, @world, [replicated]> {dist.inplace = 2 : i64}) {
  %m1, %p1 = coll.fused_all_reduce avg %g dim 0 : !dist.tensor<Nxf32, @world, [local]> -> (!dist.tensor<Nxf32, @world, [replicated]>, !dist.tensor<Nxf32, @world, [replicated]>) {
  ^bb0(%avg_rs: !dist.tensor<Nxf32, @world, [sliced<0>]>):
    %m_s = dist.take_slice %m dim 0 : !dist.tensor<Nxf32, @world, [replicated]> -> !dist.tensor<Nxf32, @world, [sliced<0>]>
    %p_s = dist.take_slice %p dim 0 : !dist.tensor<Nxf32, @world, [replicated]> -> !dist.tensor<Nxf32, @world, [sliced<0>]>
    %p1_s, %m1_s = dist.map(%m_s, %avg_rs, %mu, %p_s, %lr) : (!dist.tensor<Nxf32, @world, [sliced<0>]>, !dist.tensor<Nxf32, @world, [sliced<0>]>, f32, !dist.tensor<Nxf32, @world, [sliced<0>]>, f32) -> (!dist.tensor<Nxf32, @world, [sliced<0>]>, !dist.tensor<Nxf32, @world, [sliced<0>]>) {
    ^bb0(%mi: f32, %gi: f32, %mui: f32, %pi: f32, %lri: f32):
      %a = arith.mulf %mui, %mi : f32
      %b = arith.addf %a, %gi : f32
      %a_1 = arith.mulf %lri, %b : f32
      %b_1 = arith.subf %pi, %a_1 : f32
      dist.yield %b_1, %b : f32, f32
    }
    coll.yield %m1_s, %p1_s : !dist.tensor<Nxf32, @world, [sliced<0>]>, !dist.tensor<Nxf32, @world, [sliced<0>]>
  }
  func.return %p1, %m1 : !dist.tensor<Nxf32, @world, [replicated]>, !dist.tensor<Nxf32, @world, [replicated]>
}
"""

GATHER = """
dist.mesh @world shape = [?]
func.func @gather(%x: !dist.tensor<Nxf32, @world, [sliced<0>]>) -> !dist.tensor<Nxf32, @world, [replicated]> {
  %z = coll.all_gather %x : !dist.tensor<Nxf32, @world, [sliced<0>]> -> !dist.tensor<Nxf32, @world, [replicated]>
  func.return %z : !dist.tensor<Nxf32, @world, [replicated]>
}
"""

RANKS = 2


def _calibrated():
    """A calibrated ``local`` machine: 1 byte per ns, no fixed costs."""
    return calibrated_local(RANKS)


def _planned(source: str, n: int, target: str = "local") -> str:
    return str(lower(parse_module(source.replace("N", str(n))), RANKS, target=target))


def _predicted(text: str, func: str, n: int) -> float:
    prepared = prepare(parse_module(text), func, _calibrated(), RANKS, Scaling(n, 2**61 - 1))
    return float(predict(prepared, [n])[0])


def _run_agrees(source: str, text: str, func: str, n: int) -> None:
    want = interpret(parse_module(source.replace("N", str(n))), func, None, RANKS, seed=1)
    got = LocalBackend().run(parse_module(text), func, {}, RANKS, seed=1)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message


def test_the_planner_writes_each_decision_for_its_target():
    local, gpu = _planned(SGD, 64, "local"), _planned(SGD, 64, "gpu")
    assert "rt.fused zero_copy reduce 1 gather [6, 5]" in local
    assert "rt.fused sequential" in gpu
    assert local.count(" in_place ") == gpu.count(" in_place ") == 2  # on every target
    # a planned module keeps its plan: planning it for another target is an error
    module = parse_module(local)
    with pytest.raises(Exception, match="planned for target 'local' already"):
        from xdsl.context import Context

        from distir.lowering.plan_execution import PlanExecutionPass

        PlanExecutionPass("gpu").apply(Context(), module)


def test_run_and_prediction_follow_a_hand_edited_zero_copy_decision(monkeypatch):
    """``rt.fused zero_copy ..`` edited to ``rt.fused sequential``: the local backend no
    longer runs the group as one kernel, and the cost model charges the reduce-scatter's
    output stored (with the write-allocate read) and reloaded, which the zero-copy kernel
    never touches."""
    n = 1 << 14
    planned = _planned(SGD, n)
    edited, done = re.subn(r"rt\.fused zero_copy reduce \d+ gather \[[\d, ]*\]", "rt.fused sequential", planned)
    assert done == 1
    calls: list[bool] = []
    real = host.HostDevice.zero_copy_fused
    monkeypatch.setattr(host.HostDevice, "zero_copy_fused", lambda self, *a: calls.append(real(self, *a)) or calls[-1])

    _run_agrees(SGD, planned, "sgd", n)
    assert calls == [True] * RANKS  # one kernel per rank
    calls.clear()
    _run_agrees(SGD, edited, "sgd", n)
    assert calls == []  # the group's ops one by one

    zero_copy, sequential = _predicted(planned, "sgd", n), _predicted(edited, "sgd", n)
    # run one by one, the reduce-scatter stores its output (n/2 f32 per rank: 2x its
    # bytes with the write-allocate read) and the two all-gathers read their inputs
    # (n/2 f32 each): 4 * 4n/2 bytes at 1 byte per ns that the zero-copy kernel does not move
    assert sequential - zero_copy == pytest.approx(4 * 4 * n / RANKS * 1e-9, rel=1e-6)


def test_run_and_prediction_follow_a_hand_edited_streaming_threshold(monkeypatch):
    """``stream_from N`` on an all-gather the local communicator copies: edited to 0 the
    run streams the (small) blocks and the prediction charges a streamed copy (1x its
    bytes instead of 1.5x); removed, nothing streams."""
    n = 2048  # 4 KiB blocks: below the planned 4 MiB threshold
    planned = _planned(GATHER, n)
    clause = "stream_from 4194304 : (memref"
    assert planned.count(clause) == 1
    streamed = planned.replace(clause, "stream_from 0 : (memref")
    plain = planned.replace(clause, ": (memref")
    seen: list[int | None] = []
    real = bulk.copy
    monkeypatch.setattr(bulk, "copy", lambda dst, src, stream_from=bulk.HOST_DEFAULT: seen.append(stream_from) or real(dst, src, stream_from))

    for text, want in ((planned, 4 << 20), (streamed, 0), (plain, None)):
        seen.clear()
        _run_agrees(GATHER, text, "gather", n)
        assert seen and set(seen) == {want}

    gathered = 4 * n  # every rank's block copied into every output (out of place)
    assert _predicted(planned, "gather", n) == pytest.approx(gathered * 1.5e-9)
    assert _predicted(streamed, "gather", n) == pytest.approx(gathered * 1e-9)
    assert _predicted(plain, "gather", n) == pytest.approx(gathered * 1.5e-9)


def test_a_runner_rejects_a_plan_it_cannot_execute():
    """A program planned for ``local`` (zero-copy, host-streamed gathers) cannot run
    where ranks only exchange messages: a diagnostic names the op and both targets."""
    module = parse_module(_planned(SGD, 64))
    with pytest.raises(InputRejected, match=r"'rt.fused' op runs zero_copy.*planned for target 'local', this runner executes target 'messages'"):
        plan(module, "messages")
    plan(parse_module(_planned(SGD, 64, "gpu")), "messages")  # a GPU plan asks for nothing


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_planned_programs_equal_the_interpreter(ranks):
    """The zero-copy plan on 1, 2, 4 and 8 rank threads equals the reference."""
    n = 64
    source = SGD.replace("N", str(n))
    want = interpret(parse_module(source), "sgd", None, ranks, seed=2)
    got = LocalBackend().run(lower(parse_module(source), ranks, target="local"), "sgd", {}, ranks, seed=2)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message
    assert np.isfinite(np.asarray(got[0])).all()


REDUCED_SLICE_RETURNED = """
dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<64xf32, @world, [local]>) -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  %r, %s = coll.fused_reduce_scatter sum %x dim 0 : !dist.tensor<64xf32, @world, [local]> -> (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>) {
  ^bb0(%b: !dist.tensor<64xf32, @world, [sliced<0>]>):
    %m = dist.map(%b) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
    ^bb1(%e: f32):
      %d = arith.addf %e, %e : f32
      dist.yield %d : f32
    }
    coll.yield %b, %m : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
  }
  func.return %r, %s : !dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xf32, @world, [sliced<0>]>
}
"""


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_a_returned_reduced_slice_is_computed(ranks):
    """A fused reduce-scatter that returns its reduced slice runs its calls one by one
    (the zero-copy kernel never writes that slice: it came back as zeros)."""
    want = interpret(parse_module(REDUCED_SLICE_RETURNED), "f", None, ranks, seed=3)
    got = LocalBackend().run(parse_module(REDUCED_SLICE_RETURNED), "f", {}, ranks, seed=3)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message
