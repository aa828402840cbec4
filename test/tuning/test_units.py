"""Programs with many tensors (``tuning/units.py``): a model's optimizer step is tuned
class by class of its independent parts, and the answer is one pipeline that
``distir-opt`` applies to the whole program, computing what the program computes."""

from __future__ import annotations

from functools import lru_cache

import pytest
from xdsl.dialects import func

from distir.dialects.context import parse_module
from distir.examples.optimizer_step import llama_parameters, optimizer_step
from distir.passes.pipeline import apply_pipeline
from distir.runtime import equivalent
from distir.tuning import units
from distir.tuning.explore import structure_key
from distir.tuning.topology import get_topology
from distir.tuning.tuner import tune


@lru_cache(maxsize=None)
def llama_text(layers: int = 2) -> str:
    return optimizer_step("adam", llama_parameters("llama-7b", hidden=64, vocab=256, layers=layers), mixed=True)


def function(module):
    return next(o for o in module.ops if isinstance(o, func.FuncOp))


def test_units_and_classes_of_a_llama_step():
    m = parse_module(llama_text())
    f = function(m)
    parts = units.units(f)
    assert len(parts) == 2 + 9 * 2 + 1  # embedding, 9 per layer, final norm, head
    assert all(len(u.results) == 3 and len(u.ops) == 5 for u in parts)  # p, m, v; all_reduce, cast, 3 maps
    classes = units.classes(m, f)
    # embedding + head, attention projections, gate + up, down, norms
    assert sorted(len(c.units) for c in classes) == [2, 2, 4, 5, 8]
    # a unit's program is a program of its own: the optimizer's state is kept sliced by default
    prog = classes[0].first.program(m, f)
    prog.verify()
    args = [a.name_hint for a in function(prog).body.block.args]
    assert args[:4] == ["g_embed_tokens", "p_embed_tokens", "m_embed_tokens", "v_embed_tokens"]


@lru_cache(maxsize=None)
def tuned():
    return tune(parse_module(llama_text()), 16, model=get_topology("dgx2", 1))


def test_the_answer_is_one_pipeline_for_the_whole_program():
    r = tuned()
    assert len(r.parts) == 5 and sum(n for _, n, _ in r.parts) == 21
    composed = [s for s in r.schedules if not s.original]
    assert composed
    for s in composed:
        # distir-opt applies the pipeline to the program as written and gets the schedule
        again = apply_pipeline(parse_module(llama_text()), s.pipeline)
        assert structure_key(again) == structure_key(s.module), s.name
    # fewer evaluations than parts: each class is tuned once
    assert r.evaluated < sum(len(rr.schedules) for _, _, rr in r.parts) + len(r.schedules) + 1


def test_a_composed_schedule_computes_what_the_program_computes():
    r = tuned()
    original = parse_module(llama_text())
    for s in r.schedules:
        if s.original or "buckets" in s.name:
            continue
        for ranks in (1, 2, 4):
            assert equivalent(original, s.module, ranks, trials=1, seed=0), (s.name, ranks)


def test_buckets_are_candidates_and_small_tensors_stay_combinable():
    r = tuned()
    assert any("+ buckets of" in s.name and "fix-mesh-sizes{ranks=16},combine-collectives{bucket-bytes=" in s.pipeline for s in r.schedules)
    # every tensor here is small: one collective per bucket beats a better schedule per
    # tensor, so the combinable schedule (every part at fuse-maps) is a candidate
    assert any(s.name.startswith("AR-C (every part)") for s in r.schedules)
    best = r.by_name(r.best[r.sizes[0]])
    assert best.times[r.sizes[0]] <= r.baseline.times[r.sizes[0]]


def test_compose_merges_one_kind_of_pass_and_keeps_untargeted_ones():
    from distir.passes.fuse_maps import FuseMapsPass
    from distir.passes.split_allreduce import SplitAllReducePass

    a = (FuseMapsPass(), SplitAllReducePass(targets=("x",)))
    b = (FuseMapsPass(), SplitAllReducePass(targets=("y",)))
    out = units.compose([(a, [{"x": "x1"}, {"x": "x2"}]), (b, [{"y": "y1"}])])
    assert [p.name for p in out] == ["fuse-maps", "split-allreduce"]
    assert out[1].targets == ("x1", "x2", "y1")
    c = (FuseMapsPass(), SplitAllReducePass(dim=1, targets=("y",)))
    out = units.compose([(a, [{"x": "x1"}]), (c, [{"y": "y1"}])])
    assert [getattr(p, "dim", None) for p in out] == [None, None, 1]  # dim=None: the pass picks (split-allreduce)


def test_many_tensors_of_one_shape_are_one_class():
    from distir.examples.optimizer_step import uniform_parameters

    m = parse_module(optimizer_step("sgd", uniform_parameters(12, 256)))
    assert [len(c.units) for c in units.classes(m, function(m))] == [12]


def test_targets_made_by_earlier_passes_are_renamed_and_never_dropped():
    from distir.passes.fuse_allreduce import FuseAllReducePass

    p = units.retarget(FuseAllReducePass(targets=("avg_rs",)), [{"avg": "avg_q"}, {"avg": "avg_k"}])
    assert p.targets == ("avg_q_rs", "avg_k_rs")
    with pytest.raises(ValueError, match="names no value"):
        units.retarget(FuseAllReducePass(targets=("other_rs",)), [{"avg": "avg_q"}])
    # in the whole program's pipeline every targeted pass keeps its targets
    for s in tuned().schedules:
        for step in s.pipeline.split("},"):
            if step.startswith(("fuse-allreduce", "reorder-allgather", "slice-state")):
                assert "targets=" in step, s.pipeline


class _Clock:
    """A fake monotonic clock: it stands still until a test moves it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tune_with_clock(monkeypatch, expire_at: str):
    """Tune the Llama step with a 10 s budget on a fake clock that runs out when the
    compose phase reaches ``expire_at``: ``"built"`` once the first composed program is
    built (its check starts), ``"pass"`` after the first pass applied to the whole
    program, ``"start"`` as composing starts. Returns the result and how many composed
    programs were built and checked."""
    from distir.passes.fuse_maps import FuseMapsPass
    from distir.tuning.tuner import Limits

    clock = _Clock()
    built = []
    real_compose, real_realized, real_fuse = units.compose, units.realized, FuseMapsPass.apply
    composing = []

    def compose(per_class):
        composing.append(True)
        if expire_at == "start":
            clock.now = 100.0
        return real_compose(per_class)

    def realized(out, modules):
        built.append(out)
        if expire_at == "built":
            clock.now = 100.0
        return real_realized(out, modules)

    def fuse(self, ctx, op):
        real_fuse(self, ctx, op)
        if composing and expire_at == "pass":
            clock.now = 100.0

    monkeypatch.setattr(units, "compose", compose)
    monkeypatch.setattr(units, "realized", realized)
    monkeypatch.setattr(FuseMapsPass, "apply", fuse)
    r = tune(parse_module(llama_text(1)), 16, model=get_topology("dgx2", 1), limits=Limits.of(time_budget=10.0, clock=clock))
    return r, len(built)


@pytest.mark.parametrize("expire_at", ["start", "pass", "built"])
def test_the_time_budget_ends_the_compose_phase_with_the_best_so_far(monkeypatch, expire_at):
    r, built = _tune_with_clock(monkeypatch, expire_at)
    assert r.cut_short == "the time budget ran out"
    assert any("cut short" in n for n in r.notes)
    assert len(r.parts) == 5  # every class was tuned before the clock ran out
    composed = [s for s in r.schedules if not s.original]
    assert composed and all(s.pipeline for s in composed)
    # nothing is built or checked once the budget is spent: only the first composed
    # program, when the clock ran out during its check
    assert built == (1 if expire_at == "built" else 0)
    assert [s.module is not None for s in composed] == [expire_at == "built"] + [False] * (len(composed) - 1)
    # the answer is a pipeline for every size, built when asked for
    size = r.sizes[0]
    assert r.best[size] is not None
    assert r.best_module(size) is not None


def test_the_time_budget_is_read_from_the_clock_it_is_given():
    from distir.tuning.tuner import Limits

    clock = _Clock()
    limits = Limits.of(time_budget=5.0, clock=clock)
    clock.now = 4.9
    assert not limits.stop()
    clock.now = 5.0
    assert limits.stop() and limits.reason == "the time budget ran out"


def test_the_bound_on_explored_ops_is_one_budget_for_every_part(monkeypatch):
    """``Limits.max_explored_ops`` (the planner's ``TUNE_MAX_EXPLORED_OPS``) bounds the
    ops of the programs the explorations of all parts keep together (each part's program
    as written is always kept: a part explored once the bound is spent keeps only
    that); the schedules found are still evaluated, and the answer is one pipeline."""
    from distir.tuning import tuner as tuner_module
    from distir.tuning.tuner import Limits

    explored: list = []
    real = tuner_module.explore

    def recorded(*args, **kwargs):
        explored.append((kwargs.get("max_ops"), real(*args, **kwargs)))
        return explored[-1][1]

    monkeypatch.setattr(tuner_module, "explore", recorded)
    free = Limits.of()
    tune(parse_module(llama_text()), 16, model=get_topology("dgx2", 1), limits=free)
    assert all(bound is None and not ex.truncated for bound, ex in explored)
    assert free.explored_ops == sum(ex.ops for _, ex in explored)
    bound = free.explored_ops // 2
    explored.clear()
    limits = Limits.of(max_explored_ops=bound)
    r = tune(parse_module(llama_text()), 16, model=get_topology("dgx2", 1), limits=limits)
    assert limits.explored_ops == sum(ex.ops for _, ex in explored)
    assert all(ex.ops <= left or len(ex.candidates) == 1 for left, ex in explored)
    assert sum(ex.ops for _, ex in explored if len(ex.candidates) > 1) <= bound
    assert any(ex.truncated for _, ex in explored) and limits.reason is None
    assert r.best[r.sizes[0]] is not None
