"""The tuner's search (``tuning/search.py``) decides what the exhaustive search decides:
on every example at a small and a large size, the schedule it picks is the one
``tune(..., exhaustive=True)`` picks, or one predicted within 1% of it, with fewer
evaluations; schedules it folds into one evaluation have the same prediction as when
evaluated on their own; the interpreter check runs once per check class."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.tuning import search
from distir.tuning.explore import explore
from distir.tuning.topology import get_topology
from distir.tuning.tuner import tune

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# example -> (ranks, DGX-2 nodes, the two sizes, the dim they replace)
CASES = {
    "adam.mlir": (256, 16, (1 << 12, 1 << 26), None),
    "lamb.mlir": (256, 16, (1 << 12, 1 << 26), None),
    "sgd.mlir": (64, 4, (1 << 12, 1 << 26), None),
    "megatron_mlp.mlir": (4, 1, (1 << 10, 1 << 16), None),
    "megatron_attention.mlir": (4, 1, (8, 64), 8),
    "pipeline_layer.mlir": (8, 1, (2048, 1 << 16), 2048),
    "transformer_decode.mlir": (4, 1, None, None),
    "dlrm_embedding.mlir": (8, 1, None, None),
    "moe.mlir": (8, 1, None, None),
}


@lru_cache(maxsize=None)
def both(example: str):
    ranks, nodes, sizes, dim = CASES[example]
    module = parse_module((EXAMPLES / example).read_text())
    topo = get_topology("dgx2", nodes)
    pruned = tune(module, ranks, sizes, dim=dim, model=topo)
    exhaustive = tune(module, ranks, sizes, dim=dim, model=topo, exhaustive=True)
    return pruned, exhaustive


@pytest.mark.parametrize("example", sorted(CASES))
def test_the_search_picks_what_the_exhaustive_search_picks(example):
    pruned, exhaustive = both(example)
    by_pipeline = {s.pipeline: s for s in exhaustive.schedules}
    for size in exhaustive.sizes:
        want = exhaustive.by_name(exhaustive.best[size])
        got = pruned.by_name(pruned.best[size])
        t_want, t_got = want.times[size], got.times[size]
        assert t_got <= t_want * 1.01, f"{example} at {size}: picked {got.name} ({t_got}), the exhaustive search {want.name} ({t_want})"
        # the pick is predicted as the exhaustive search predicts it
        assert by_pipeline[got.pipeline].times[size] == pytest.approx(t_got, rel=1e-9)


@pytest.mark.parametrize("example", sorted(CASES))
def test_every_prediction_agrees_with_its_own_evaluation(example):
    # folded schedules (orders that lower alike) get their sibling's prediction: the
    # same as their own evaluation in the exhaustive search
    pruned, exhaustive = both(example)
    by_pipeline = {s.pipeline: s for s in exhaustive.schedules}
    for s in pruned.schedules:
        other = by_pipeline[s.pipeline]
        for size in pruned.sizes:
            a, b = s.times[size], other.times[size]
            assert (a is None) == (b is None) and (a is None or a == pytest.approx(b, rel=1e-9)), (s.name, size, a, b)


def test_the_search_evaluates_fewer_schedules():
    pruned, exhaustive = both("megatron_mlp.mlir")
    assert exhaustive.evaluated == sum(1 for s in exhaustive.schedules if s.check == "ok")
    assert pruned.evaluated < exhaustive.evaluated / 2
    assert pruned.checked < pruned.evaluated
    assert any("not evaluated" in n for n in pruned.notes)


def test_schedules_that_fit_no_size_are_dropped():
    # split along the batch dim (4 rows) on 8 ranks fits: blocks of 1, 1, 1, 1, 0, 0, 0, 0
    # (uneven blocks), predicted like any other schedule
    module = parse_module((EXAMPLES / "megatron_mlp.mlir").read_text())
    r = tune(module, 8, [1 << 20], model=get_topology("dgx2", 1))
    assert not any("fit none" in n for n in r.notes)
    assert any("dim 0" in s.name and s.times[1 << 20] is not None for s in r.schedules)
    # a stage axis of one rank (4 ranks as [?, 4]) has no stage 1 to send to: the
    # program fits no size: no schedule is derived from it (the program as written is
    # kept, with no time)
    text = (EXAMPLES / "pipeline_layer.mlir").read_text().replace("shape = [2, ?]", "shape = [?, 4]")
    stages = parse_module(text)
    assert len(explore(stages).candidates) > 1
    r = tune(stages, 4, [2048], dim=2048, model=get_topology("dgx2", 1))
    assert any("the program fits none of these sizes on 4 ranks" in n for n in r.notes)
    assert [s.name for s in r.schedules] == ["AR-P2P-C"] and r.schedules[0].times[2048] is None


def test_bounds_of_an_ideal_pipeline():
    # T(c) = P + Q/c + K c with P = 1, Q = 4, K = 0.01 at one size, flat at another
    def t(c):
        return np.array([1 + 4 / c + 0.01 * c, 2.0])

    bound = search.first_bound(t(1), t(2))
    assert np.all(bound <= np.array([min(t(c)[0] for c in (4, 8, 16)), 2.0]))
    fitted = search.fitted_bound([(1, t(1)), (2, t(2)), (4, t(4))], [8, 16])
    assert fitted[0] == pytest.approx(1 + 4 / 16 + 0.01 * 8)
    assert fitted[0] <= min(t(8)[0], t(16)[0])
    assert search.stopped_falling(t(8), t(16)) is False and search.stopped_falling(t(16), t(32)) is True
    # where two chunks did not help, more do not either: the bound is T(2)
    slower = search.first_bound(np.array([1.0]), np.array([1.2]))
    assert slower[0] == pytest.approx(1.2)
    assert search.pruned(slower, np.array([1.1])) and not search.pruned(slower, np.array([1.3]))
    # a chain of 3 stages pipelined is still a third of the program
    assert search.parent_bound(np.array([3.0]), 3)[0] == pytest.approx(1.0)


def test_deferred_checks_run_only_the_picks_and_pick_the_same():
    """``check_all=False`` (the planner's tuning): the same schedules evaluated, with the
    same times, and the same picks, checking only the picks (counted)."""
    every, _ = both("megatron_mlp.mlir")
    ranks, nodes, sizes, dim = CASES["megatron_mlp.mlir"]
    module = parse_module((EXAMPLES / "megatron_mlp.mlir").read_text())
    picks = tune(module, ranks, sizes, dim=dim, model=get_topology("dgx2", nodes), check_all=False)
    assert picks.best == every.best and picks.evaluated == every.evaluated
    assert [(s.name, s.times) for s in picks.schedules] == [(s.name, s.times) for s in every.schedules]
    assert 1 <= picks.checked <= len(sizes) < every.checked
    picked = set(picks.best.values())
    assert all(s.check == ("ok" if s.name in picked else "unchecked") for s in picks.schedules if not s.original)


def test_a_pick_that_fails_its_deferred_check_is_searched_again_with_every_check(monkeypatch):
    """A schedule that does not compute what the program does is never picked, its
    check deferred or not: the search runs again with every check and picks what the
    search with every check picks."""
    from distir.tuning import explore as explore_module

    every, _ = both("megatron_mlp.mlir")
    ranks, nodes, sizes, dim = CASES["megatron_mlp.mlir"]
    broken = every.by_name(every.best[sizes[0]]).pipeline
    real = explore_module.Checker.__call__
    monkeypatch.setattr(explore_module.Checker, "__call__", lambda self, c: "differs: planted" if c.pipeline == broken else real(self, c))
    module = parse_module((EXAMPLES / "megatron_mlp.mlir").read_text())
    topo = get_topology("dgx2", nodes)
    eager = tune(module, ranks, sizes, dim=dim, model=topo)
    deferred = tune(module, ranks, sizes, dim=dim, model=topo, check_all=False)
    assert deferred.best == eager.best and every.best[sizes[0]] not in deferred.best.values()
    assert deferred.checked == eager.checked and any("planted" in b for b in deferred.bugs)


def test_the_order_of_an_overlap_family_is_decided_on_one_copy(monkeypatch):
    """Whether an overlap's order changes its lowering is decided on one copy of each
    family's program with its mesh sizes fixed (counted), as on a copy of each member."""
    from distir.lowering.fix_mesh_sizes import FixMeshSizesPass

    module = parse_module((EXAMPLES / "megatron_mlp.mlir").read_text())
    cands = explore(module).candidates
    fixed: list[object] = []
    real = FixMeshSizesPass.apply
    monkeypatch.setattr(FixMeshSizesPass, "apply", lambda self, ctx, m: (fixed.append(m), real(self, ctx, m))[1])
    p = search.plan(cands, 8)
    ordered = [i for i, c in enumerate(cands) if c.overlap is not None and c.overlap.granularity == "chunk" and c.overlap.order != "natural"]
    assert len(ordered) > len(p.families) >= len(fixed) > 0
    own = search._order_matters
    monkeypatch.setattr(search, "_order_matters", lambda cand, ranks, *memo: own(cand, ranks))  # a copy per member
    assert search.plan(cands, 8).shares == p.shares and len(fixed) > len(p.families)


def test_deferred_checks_of_a_program_of_independent_parts_run_only_each_class_picks():
    """A program of independent parts (an Adam step over Llama-like parameters: a class
    per shape, each tuned on its first part) with ``check_all=False`` checks only each
    class's pick and its ``fuse-maps`` schedule (which the composed pipelines keep for
    the classes not worth their own), and picks and predicts what it does with every
    check."""
    from distir.examples.optimizer_step import optimizer_step

    text = optimizer_step("adam", [("gate", (176, 64)), ("up", (176, 64)), ("norm", (64,))], mixed=True)
    topo = get_topology("dgx2", 1)
    every = tune(parse_module(text), 16, model=topo)
    picks = tune(parse_module(text), 16, model=topo, check_all=False)
    assert picks.best == every.best
    assert [(s.name, s.times) for s in picks.schedules] == [(s.name, s.times) for s in every.schedules]
    assert [(label, r.best) for label, _, r in picks.parts] == [(label, r.best) for label, _, r in every.parts]
    for _, _, r in picks.parts:
        checked = {s.name for s in r.schedules if s.check == "ok"}
        assert checked == set(r.best.values()) | {s.name for s in r.schedules if s.pipeline == "fuse-maps"} and r.checked == len(checked)
    assert len(picks.parts) > 1 and picks.checked <= 2 * len(picks.parts) < every.checked
