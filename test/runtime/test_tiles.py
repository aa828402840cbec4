"""The fused computation-collective operators at run time (``runtime/tiles.py``): the tile
plan and its message schedule, and the ``local`` backend's zero-copy execution of each
operator in every tile order on 1, 2, 4 and 8 ranks, equal to the interpreter running
the unfused chain."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.dialects.rt import tile_order
from distir.passes.pipeline import apply_pipeline
from distir.runtime import tiles
from distir.runtime.equivalence import compare_outputs
from distir.runtime.executor import ExecutionFailed, LoweredProgram
from distir.runtime.interpreter import interpret
from distir.runtime.local import LocalRunner

WORLD = "dist.mesh @world shape = [?]\n"

# One program per operator, shapes divisible by 8 ranks x 2 tiles.
OPERATORS = {
    # GEMV + AllReduce: a few tokens, a row-sliced weight; tiles cut the columns
    "gemv_all_reduce": """
func.func @f(%x: !dist.tensor<4x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<4x32xf32, @world, [replicated]> {
  %l = dist.matmul %x, %w : (!dist.tensor<4x64xf32, @world, [sliced<1>]>, !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<4x32xf32, @world, [local]>
  %s = coll.all_reduce sum %l : !dist.tensor<4x32xf32, @world, [local]> -> !dist.tensor<4x32xf32, @world, [replicated]>
  func.return %s : !dist.tensor<4x32xf32, @world, [replicated]>
}""",
    # GEMM + ReduceScatter (avg), batched: tiles cut the rows of each block
    "gemm_reduce_scatter": """
func.func @f(%x: !dist.tensor<2x32x64xf32, @world, [sliced<2>]>, %w: !dist.tensor<64x8xf32, @world, [sliced<0>]>) -> !dist.tensor<2x32x8xf32, @world, [sliced<1>]> {
  %l = dist.matmul %x, %w : (!dist.tensor<2x32x64xf32, @world, [sliced<2>]>, !dist.tensor<64x8xf32, @world, [sliced<0>]>) -> !dist.tensor<2x32x8xf32, @world, [local]>
  %s = coll.reduce_scatter avg %l dim 1 : !dist.tensor<2x32x8xf32, @world, [local]> -> !dist.tensor<2x32x8xf32, @world, [sliced<1>]>
  func.return %s : !dist.tensor<2x32x8xf32, @world, [sliced<1>]>
}""",
    # GEMM + All-to-All with an epilogue (MoE's expert GEMM, activation, combine)
    "gemm_all_to_all": """
func.func @f(%x: !dist.tensor<8x16x8xf32, @world, [sliced<0>]>, %w: !dist.tensor<8x8x16xf32, @world, [sliced<0>]>, %a: f32) -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]> {
  %h = dist.matmul %x, %w : (!dist.tensor<8x16x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16x16xf32, @world, [sliced<0>]>
  %act = dist.map(%h, %a) : (!dist.tensor<8x16x16xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<8x16x16xf32, @world, [sliced<0>]> {
  ^bb0(%z: f32, %s: f32):
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %z, %zero : f32
    %t = arith.mulf %r, %s : f32
    dist.yield %t : f32
  }
  %back = coll.all_to_all %act dim 1 : !dist.tensor<8x16x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
  func.return %back : !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
}""",
    # embedding + All-to-All (DLRM), mean pooling, a 2-d table per rank and the
    # all-to-all on the feature dim
    "embedding_all_to_all": """
func.func @f(%t: !dist.tensor<40x16xf32, @world, [replicated]>, %i: !dist.tensor<32x3xi32, @world, [sliced<0>]>) -> !dist.tensor<32x16xf32, @world, [sliced<1>]> {
  %e = dist.embedding_bag %t, %i mode mean : (!dist.tensor<40x16xf32, @world, [replicated]>, !dist.tensor<32x3xi32, @world, [sliced<0>]>) -> !dist.tensor<32x16xf32, @world, [sliced<0>]>
  %m = coll.all_to_all %e dim 1 : !dist.tensor<32x16xf32, @world, [sliced<0>]> -> !dist.tensor<32x16xf32, @world, [sliced<1>]>
  func.return %m : !dist.tensor<32x16xf32, @world, [sliced<1>]>
}""",
}


def fused(name: str, order: str, chunks: int = 2):
    text = WORLD + OPERATORS[name]
    module = apply_pipeline(parse_module(text), f"overlap{{chunks={chunks} order={order} granularity=tile}}")
    assert "granularity tile" in str(module)
    return parse_module(text), module


def run_local(module, ranks: int, seed: int = 3):
    program = LoweredProgram.build(module, None, ranks)
    runner = LocalRunner(program)
    inputs = program.prepare_inputs({}, seed)
    try:
        runner.bind(inputs)
        out = runner.outputs(runner.step())
        second = runner.outputs(runner.step())  # the ready flags hold epochs: a second call works
    finally:
        runner.close()
    return inputs, out, second, runner


# -------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_tile_orders(n):
    for me in range(n):
        assert tile_order("remote_first", n, me)[-1] == me
        assert tile_order("ring", n, me)[0] == me
        assert tile_order("natural", n, me) == list(range(n))
        for order in ("remote_first", "ring", "natural"):
            assert sorted(tile_order(order, n, me)) == list(range(n))


def _plans(order: str, n: int, tiles_: int = 2, tile_dim: int = -1) -> list[tiles.TilePlan]:
    return [
        tiles.TilePlan("all_to_all", order, n, me, tiles_, 1, 0, False, None, (4, 8 * n), tile_order(order, n, me), tile_dim)
        for me in range(n)
    ]


@pytest.mark.parametrize("tile_dim", [-1, 0])
@pytest.mark.parametrize("order,n", list(itertools.product(["remote_first", "ring", "natural"], [1, 2, 3, 4, 5])))
def test_message_schedule_matches_and_delivers_every_tile_once(order, n, tile_dim):
    """Each rank issues its groups in order, a group completing when all its sends and
    receives have met their partners (NCCL's grouped point-to-point semantics): the
    schedule never deadlocks, and every (source, destination, tile) moves exactly once."""
    groups = [[(set(s), set(r), k) for _, k, s, r in p.exchanges() if s or r] for p in _plans(order, n, 2, tile_dim)]
    pos = [0] * n

    def current(r):
        return groups[r][pos[r]] if pos[r] < len(groups[r]) else None

    def matched(r) -> bool:
        sends, recvs, k = current(r)
        return all(current(d) is not None and r in current(d)[1] and current(d)[2] == k for d in sends) and all(
            current(s) is not None and r in current(s)[0] and current(s)[2] == k for s in recvs
        )

    moved = []
    while any(current(r) is not None for r in range(n)):
        ready = [r for r in range(n) if current(r) is not None and matched(r)]
        assert ready, f"deadlock: ranks at groups {pos}"
        for r in ready:
            moved += [(r, d, current(r)[2]) for d in current(r)[0]]
        for r in ready:
            pos[r] += 1
    want = [(r, d, k) for r in range(n) for d in range(n) if d != r for k in range(2)]
    assert sorted(moved) == sorted(want)


@pytest.mark.parametrize("tile_dim", [-1, 0])
def test_tiles_cover_the_result_once(tile_dim):
    """Tiles partition this rank's result, and the tiles it receives partition its
    output; tiles along another dim run tile-major (each group for every destination),
    along the destination dim destination-major (remote destinations first)."""
    plan = _plans("remote_first", 4, 4 if tile_dim < 0 else 2, tile_dim)[1]
    seen = np.zeros(plan.shape, int)
    got = np.zeros((4 * 4, 8), int)  # the receiver's output: concat 4 x 4, its slice of 8
    for dest, k in plan.steps():
        seen[plan.source(dest, k)] += 1
        got[plan.arrival(dest, k)] += 1
    assert (seen == 1).all() and (got == 1).all()
    steps = plan.steps()
    if tile_dim < 0:
        assert [d for d, _ in steps[:12]] == [2] * 4 + [3] * 4 + [0] * 4 and steps[-1][0] == 1
    else:
        assert steps[:4] == [(2, 0), (3, 0), (0, 0), (1, 0)]


# -------------------------------------------------------------------------- local


@pytest.mark.parametrize("name", sorted(OPERATORS))
@pytest.mark.parametrize("order", ["remote_first", "natural", "ring"])
def test_fused_operator_equals_the_chain(monkeypatch, name, order):
    """Every operator, in every order, on 1, 2, 4 and 8 ranks, run twice: the
    interpreter's results of the unfused chain, through the zero-copy path (no staging
    buffer, no collective or point-to-point call)."""
    shared: list[bool] = []
    original = tiles.run_shared

    def spy(*args, **kwargs):
        done = original(*args, **kwargs)
        shared.append(done)
        return done

    monkeypatch.setattr(tiles, "run_shared", spy)
    before, after = fused(name, order)
    for ranks in (1, 2, 4, 8):
        shared.clear()
        inputs, out, second, runner = run_local(after, ranks)
        want = interpret(before, None, inputs, ranks, 3)
        for got in (out, second):
            c = compare_outputs(want, got, "interpret", "local fused")
            assert c.ok, f"{ranks} ranks: {c.message}"
        assert shared == [True] * (2 * ranks)
        states = [v for ex in runner.executors for k, v in ex.persistent.items() if isinstance(v, tiles.TileState)]
        assert len(states) == ranks and all(not s.stages for s in states)


def test_tile_count_that_does_not_divide_uses_a_divisor():
    before, after = fused("gemv_all_reduce", "remote_first", chunks=3)
    inputs, out, _, _ = run_local(after, 2)
    assert compare_outputs(interpret(before, None, inputs, 2, 3), out, "interpret", "local").ok
    lowered = LoweredProgram.build(after, None, 2)
    assert "tiles 2 order remote_first" in str(lowered.module)  # 16 columns per block: 2 tiles of 8


def test_failure_on_one_rank_stops_the_others(monkeypatch):
    """A rank that fails while its peers wait for its tiles: the failure is reported
    with the rank, nobody hangs."""
    import threading

    _, after = fused("gemm_all_to_all", "remote_first")
    original = tiles.MatmulProducer.compute

    def failing(self, device, box, out):
        if threading.current_thread().name == "rank1":
            raise RuntimeError("injected failure")
        return original(self, device, box, out)

    monkeypatch.setattr(tiles.MatmulProducer, "compute", failing)
    program = LoweredProgram.build(after, None, 2)
    runner = LocalRunner(program)
    runner.bind(program.prepare_inputs({}, 0))
    with pytest.raises(ExecutionFailed, match="rank 1.*injected failure"):
        runner.step()


@pytest.mark.parametrize("name", ["transformer_decode", "dlrm_embedding", "moe"])
def test_distir_run_compares_the_fused_schedule_with_the_program(capsys, name):
    """``distir-run examples/schedules/<name>_fused.mlir --compare examples/<name>.mlir``:
    the workload's fused operator on ``local`` (2 ranks, its own sizes) agrees with the
    unfused program on the interpreter."""
    from pathlib import Path

    from distir.tools.run import main

    examples = Path(__file__).resolve().parents[2] / "examples"
    code = main([str(examples / "schedules" / f"{name}_fused.mlir"), "--ranks", "2", "--backend", "local",
                 "--compare", str(examples / f"{name}.mlir"), "--compare-backend", "interpret"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "results agree" in out
