"""``coll.permute`` on every backend, on 1, 2, 4 and 8 ranks: the interpreter moves each
rank's value to its target (zeros where no pair targets a rank), checked against numpy;
``expand-collectives`` keeps it and ``form-collectives`` gives the program back; the
``local`` and ``mpi`` backends and the NCCL call recording equal the interpreter; the
recorded calls are one group of a send and a receive per rank."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.runs import record, run_mpi_batch

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline
from distir.runtime import equivalent
from distir.runtime.equivalence import compare_outputs
from distir.runtime.interpreter import ExecutionError, interpret
from distir.runtime.local import LocalBackend

RANKS = (1, 2, 4, 8)


def world(n: int, clause: str, elt: str = "f32") -> str:
    t = f"!dist.tensor<6x4x{elt}, @world, [local]>"
    return f"""dist.mesh @world shape = [{n}]
func.func @f(%x: {t}) -> {t} {{
  %y = coll.permute %x {clause} : {t} -> {t}
  func.return %y : {t}
}}"""


def grid(n: int, clause: str, first: str = "local") -> str:
    """A permute over axis 1 of a 2 x n/2 mesh; the other axis keeps ``first``."""
    t = f"!dist.tensor<8xf32, @grid, [{first}, local]>"
    return f"""dist.mesh @grid shape = [2, {n // 2}]
func.func @f(%x: {t}) -> {t} {{
  %y = coll.permute %x {clause} axes [1] : {t} -> {t}
  func.return %y : {t}
}}"""


def pairs_clause(pairs) -> str:
    return "pairs [" + ", ".join(f"[{s}, {t}]" for s, t in pairs) + "]"


def offset_pairs(k: int, n: int) -> list[tuple[int, int]]:
    return [(i, (i + k) % n) for i in range(n)]


def cases() -> list[tuple[str, str, int, list[tuple[int, int]]]]:
    """(id, program, ranks, the (source, target) pairs over the group) for each case."""
    out = []
    for n in RANKS:
        for k in sorted({0, 1, n - 1, -1, -3}):
            out.append((f"offset{k}-{n}", world(n, f"offset {k}"), n, offset_pairs(k, n)))
        reverse = [(i, n - 1 - i) for i in range(n)]
        chain = [(i, i + 1) for i in range(n - 1)]  # rank 0 receives nothing
        out.append((f"reverse-{n}", world(n, pairs_clause(reverse), "i32"), n, reverse))
        out.append((f"chain-{n}", world(n, pairs_clause(chain), "f16"), n, chain))
        out.append((f"keep0-{n}", world(n, pairs_clause([(0, 0)] + chain[1:])), n, [(0, 0)] + chain[1:]))
        out.append((f"none-{n}", world(n, "pairs []"), n, []))
        if n >= 2:
            m = n // 2
            out.append((f"grid-offset1-{n}", grid(n, "offset 1"), n, offset_pairs(1, m)))
            out.append((f"grid-chain-{n}", grid(n, pairs_clause([(i, i + 1) for i in range(m - 1)])), n, [(i, i + 1) for i in range(m - 1)]))
            out.append((f"stage0-offset-1-{n}", grid(n, "offset -1", "at<0>"), n, offset_pairs(-1, m)))
    return out


CASES = cases()
IDS = [c[0] for c in CASES]


def expected(x: np.ndarray, pairs, axis: int) -> np.ndarray:
    """Each group rank's value moved to its target along the stacking ``axis`` of
    ``x``; zeros where no pair targets a rank."""
    y = np.zeros_like(x)
    for s, t in pairs:
        y[(slice(None),) * axis + (t,)] = x[(slice(None),) * axis + (s,)]
    return y


def stacked_input(text: str, ranks: int) -> tuple[np.ndarray, int]:
    """An input for ``%x`` (local values stacked over the ranks, npz convention) and the
    axis of that stack the permute acts on."""
    rng = np.random.default_rng(ranks)
    if "@grid" in text:
        m = ranks // 2
        if "at<0>" in text:
            return rng.standard_normal((m, 8)).astype(np.float32), 0
        return rng.standard_normal((2, m, 8)).astype(np.float32), 1
    dtype = np.int32 if "xi32" in text else np.float16 if "xf16" in text else np.float32
    return (rng.integers(-100, 100, (ranks, 6, 4)) if dtype == np.int32 else rng.standard_normal((ranks, 6, 4))).astype(dtype), 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_interpreter_moves_each_value_to_its_target(case):
    _, text, ranks, pairs = case
    x, axis = stacked_input(text, ranks)
    (y,) = interpret(parse_module(text), "f", {"x": x}, ranks)
    np.testing.assert_array_equal(y, expected(x, pairs, axis))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_expand_then_form_keeps_the_permute(case):
    """No primitive composition means a permute: expand-collectives leaves it, and the
    round trip through form-collectives gives the same program, meaning the same."""
    _, text, ranks, _ = case
    expanded = apply_pipeline(parse_module(text), "expand-collectives")
    assert [op.name for op in expanded.walk() if op.name.startswith("coll.")] == ["coll.permute"]
    formed = apply_pipeline(parse_module(text), "expand-collectives,form-collectives")
    assert str(formed) == str(parse_module(text))
    assert equivalent(text, expanded, ranks, trials=1)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_local_equals_interpreter(case):
    _, text, ranks, _ = case
    module = parse_module(text)
    want = interpret(module, "f", None, ranks, seed=1)
    got = LocalBackend().run(module, "f", {}, ranks, seed=1)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message


def calls(text: str, ranks: int) -> list[list[str]]:
    """Each rank's NCCL calls but the communicator splits (``record`` also checks the
    recorded run against the interpreter)."""
    return [[c for c in log if not c.startswith("split ")] for log in record(text, ranks, "f")]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_nccl_recording_equals_interpreter(case):
    _, text, ranks, _ = case
    record(text, ranks, "f")


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("k", [1, -1])
def test_an_offset_is_one_group_of_a_send_and_a_receive_per_rank(n, k):
    got = calls(world(n, f"offset {k}"), n)
    for r in range(n):
        assert got[r] == [
            "group_start comm1 stream0",
            f"send 24xfloat32 peer={(r + k) % n} comm1 stream0",
            f"recv 24xfloat32 peer={(r - k) % n} comm1 stream0",
            "group_end comm1 stream0",
        ]


def test_pairs_send_and_receive_only_on_their_ranks():
    """pairs [[0, 1], [1, 2], [2, 3]] on 4 ranks: rank 0 only sends, ranks 1 and 2 send
    and receive, rank 3 only receives; rank 0 fills its result with zeros (a kernel, no
    NCCL call)."""
    got = calls(world(4, pairs_clause([(0, 1), (1, 2), (2, 3)])), 4)
    start, end = "group_start comm1 stream0", "group_end comm1 stream0"
    send = lambda p: f"send 24xfloat32 peer={p} comm1 stream0"  # noqa: E731
    recv = lambda p: f"recv 24xfloat32 peer={p} comm1 stream0"  # noqa: E731
    assert got == [[start, send(1), end], [start, recv(0), send(2), end], [start, recv(1), send(3), end], [start, recv(2), end]]


def test_a_whole_turn_makes_no_call():
    assert calls(world(4, "offset 4"), 4) == [[], [], [], []]


def test_a_pair_outside_the_group_of_the_run_is_a_diagnostic():
    text = world(4, "pairs [[0, 5]]").replace("shape = [4]", "shape = [?]")
    with pytest.raises(ExecutionError, match=r"'coll.permute' op pair \[0, 5\] is out of range for a group of 4 ranks"):
        interpret(parse_module(text), "f", None, 4)


OVERLAPPED = """dist.mesh @world shape = [?]
func.func @f(%a: !dist.tensor<8x16xf32, @world, [local]>, %w: !dist.tensor<16x8xf32, @world, [replicated]>) -> !dist.tensor<8x8xf32, @world, [local]> {
  %h = dist.matmul %a, %w : (!dist.tensor<8x16xf32, @world, [local]>, !dist.tensor<16x8xf32, @world, [replicated]>) -> !dist.tensor<8x8xf32, @world, [local]>
  %y = coll.permute %h CLAUSE : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [local]>
  func.return %y : !dist.tensor<8x8xf32, @world, [local]>
}"""


@pytest.mark.parametrize("order", ["natural", "ring"])
@pytest.mark.parametrize("clause", ["offset 1", "pairs [[0, 1], [1, 0]]"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_an_overlapped_ring_step_equals_the_interpreter(order, clause, ranks):
    """A matmul whose result goes one step around the ring, cut into chunks so that the
    transfer of chunk i overlaps the matmul of chunk i + 1 (``overlap``)."""
    text = OVERLAPPED.replace("CLAUSE", clause)
    module = apply_pipeline(parse_module(text), f"overlap{{chunks=2 order={order} targets=h}}")
    assert any(op.name == "coll.overlap" for op in module.walk())
    want = interpret(parse_module(text), "f", None, ranks, seed=4)
    got = LocalBackend().run(module, "f", {}, ranks, seed=4)
    c = compare_outputs(want, got, "interpret", "local")
    assert c.ok, c.message


@pytest.fixture(scope="module")
def mpi_report(tmp_path_factory):
    """Every case, run in one mpiexec job per rank count."""
    jobs = [{"id": cid, "text": text, "func": "f", "ranks": ranks, "seed": 5} for cid, text, ranks, _ in CASES]
    return run_mpi_batch(jobs, tmp_path_factory.mktemp("permute-mpi"))


@pytest.mark.mpi
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_mpi_equals_interpreter(mpi_report, case):
    entry = mpi_report.get(case[0])
    assert entry is not None, json.dumps({k: v for k, v in mpi_report.items() if not v.get("ok")})[:2000]
    assert entry["ok"], entry["message"]
