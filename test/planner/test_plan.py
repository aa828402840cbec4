"""distir-plan's search (planner/): the meshes it tries, the strategies of an op, the
integer program's size on a model (counted, never timed), the memory limit, and that
every plan it writes computes what the one-device program does (interpret and local at
4 and 8 ranks, and under ``mpiexec``: each plan is made once for the file, ``planned``).

Plans are made on ``slow.toml``, a machine whose devices compute slowly next to fast
links: at a test's few elements the planner then shards (on a real GPU cluster such
small programs are best left replicated, and a replicated plan would test nothing)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.dialects.placements import Local, Sliced
from distir.planner import ilp
from distir.planner.check import run_check
from distir.planner.costs import Costs, ShapeCosts
from distir.planner.graph import PlanError, read_graph
from distir.planner.meshes import hierarchy, meshes
from distir.planner.plan import NoPlanFits, plan
from distir.planner.strategies import op_strategies
from distir.tuning.topology import get_topology, load_topology

HERE = Path(__file__).parent
INPUTS = HERE / "inputs"
SLOW = load_topology(HERE / "slow.toml")


def program(name: str):
    return parse_module((INPUTS / name).read_text())


@functools.lru_cache(maxsize=None)
def gpt_text(layers: int, batch: int = 8, seq: int = 8, hidden: int = 16, heads: int = 2, vocab: int = 32) -> str:
    from distir.examples.gpt_training_step import GPTShape, generate

    return generate(GPTShape(layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq=seq, batch=batch))


@functools.lru_cache(maxsize=None)
def planned(name: str, ranks: int):
    """(one-device program, the best plan) of a test program on ``ranks`` ranks."""
    text = gpt_text(2) if name == "gpt" else (INPUTS / name).read_text()
    module = parse_module(text)
    result = plan(module, ranks, SLOW, topology_name=str(HERE / "slow.toml"), top=1, alternatives=0 if name == "gpt" else 1)
    return parse_module(text), result


# ---------------------------------------------------------------------------- meshes


def test_the_hierarchy_is_cut_to_the_ranks_innermost_first():
    a100 = get_topology("p2-a100", 4)
    assert hierarchy(a100, 64) == ((4, 16), ("node", "gpu"))
    assert hierarchy(a100, 16)[0] == (1, 16)
    assert hierarchy(a100, 8)[0] == (1, 8)
    with pytest.raises(ValueError, match="whole units"):
        hierarchy(a100, 24)


def test_meshes_of_256_ranks_are_p2_placements_one_axis_first():
    dgx2 = get_topology("dgx2", 16)
    every = meshes(dgx2, 256, mixed=True)
    kept = meshes(dgx2, 256)
    assert every[0].sizes == (256,) and kept[0].sizes == (256,)
    # 2x128 ... 128x2 on [16, 16], placements grouping the ranks alike counted once
    assert len(every) == 23
    # by default one axis of two stays within a level (the GPUs of a node, or nodes)
    assert len(kept) == 14 and all(len(m.sizes) == 1 or m.pure(0) or m.pure(1) for m in kept)
    tp_dp = [m for m in kept if m.sizes == (16, 16) and m.levels(0) == "gpu 16"]
    assert tp_dp and tp_dp[0].levels(1) == "node 16"
    # every rank of one group of an axis lies in one node when the axis is the GPUs
    for group in tp_dp[0].groups((0,)):
        assert len({r // 16 for r in group}) == 1


# ---------------------------------------------------------------------------- strategies


def test_a_matmul_may_slice_each_factor_or_contract_on_each_axis():
    g = read_graph(program("mlp.mlir"))
    mm = next(n for n in g.nodes if n.op is not None and n.op.name == "dist.matmul")
    strategies = op_strategies(g, mm, (2, 2))
    assert strategies[0].assign == (-1, -1)  # replicated first
    # factors: batch, M, N, K -> every assignment of 2 axes to one of 4 factors or none
    assert len(strategies) == 25
    contracted = [s for s in strategies if s.assign == (3, -1)]
    assert contracted and contracted[0].results[0].partial == ((0, "sum"),)
    placements = contracted[0].results[0].placements(2)
    assert isinstance(placements[0], Local)
    assert isinstance(contracted[0].operands[0].placements(2)[0], Sliced)


def test_only_divisible_dims_are_sliced():
    g = read_graph(program("mlp.mlir"))
    mm = next(n for n in g.nodes if n.op is not None and n.op.name == "dist.matmul")
    # 8x16x32 @ 32x128: no factor of the first matmul divides by 3 ... but 16 and 128
    # and 32 all divide by 4, and batch 8 by 4: every factor on a mesh of 4
    assert len(op_strategies(g, mm, (4,))) == 5
    assert len(op_strategies(g, mm, (3,))) == 1


# ---------------------------------------------------------------------------- the ILP at model scale


def test_repeated_layers_are_one_class_and_the_program_does_not_grow_with_them():
    """AutoParallel's clustering: the integer program of a GPT step has the same size at
    5 and 7 layers (the layers away from the ends are classes; the layers' buckets of
    AllReduces and runs of element-wise ops are groups with a count), counted, not
    timed."""
    sizes = []
    for layers in (5, 7):
        g = read_graph(parse_module(gpt_text(layers)))
        sc = ShapeCosts(g, (2, 2), SLOW)
        st = ilp.build(g, sc)
        mesh = next(m for m in meshes(SLOW, 4) if m.sizes == (2, 2))
        p = ilp.problem(st, Costs(sc, mesh))
        grouped = sum(len(grp.members) for grp in p.groups)
        sizes.append((len(g.classes), p.size()["roots"], p.size()["binaries"], p.size()["edge variables"], len(st.groups), grouped))
    assert sizes[0] == sizes[1], sizes
    assert sizes[0][4] > 0
    assert sizes[0][0] < 520 and sizes[0][3] < 40_000


def test_the_cost_model_prices_each_class_once_however_many_layers():
    """The op costs and reshardings of a GPT step's integer program are computed once
    per class of alike ops, not per layer: as many cost-model evaluations at 5 layers as
    at 9 (1.75x the ops), counted, not timed."""
    from unittest import mock

    from distir.planner import costs

    counts = []
    for layers in (5, 9):
        g = read_graph(parse_module(gpt_text(layers)))
        costs._STEPS.clear()
        with mock.patch.object(costs, "dist_op_work", wraps=costs.dist_op_work) as work, mock.patch.object(costs, "_steps", wraps=costs._steps) as steps:
            ilp.build(g, ShapeCosts(g, (2, 2), SLOW))
        counts.append((len(g.nodes), work.call_count, steps.call_count))
    (n5, work5, steps5), (n9, work9, steps9) = counts
    assert n9 > 1.7 * n5
    assert work9 == work5 and steps9 == steps5, counts


def test_each_mesh_shapes_program_is_built_per_class_from_the_graph_read_once():
    """The integer program of every mesh shape reads the graph's edges, arguments, live
    values and element-wise runs from one reading of the graph (``ilp.skeleton``), and
    counts the memory of its arguments and live values once per class: as many byte
    counts at 9 layers as at 5, one reading for all the shapes; the programs are those
    of reading the graph for each shape. Counted, not timed."""
    from unittest import mock

    counts = []
    for layers in (5, 9):
        g = read_graph(parse_module(gpt_text(layers)))
        with mock.patch.object(ShapeCosts, "local_bytes", autospec=True, side_effect=ShapeCosts.local_bytes) as counted, \
                mock.patch.object(ilp, "_kernel_runs", wraps=ilp._kernel_runs) as read:
            built = [ilp.build(g, ShapeCosts(g, sizes, SLOW)) for sizes in ((4,), (2, 2))]
        counts.append((len(g.nodes), counted.call_count, read.call_count))
        # read afresh for each shape: the same programs
        for sizes, st in zip(((4,), (2, 2)), built):
            g.skeleton = None
            again = ilp.build(g, ShapeCosts(g, sizes, SLOW))
            assert again.memory[0][0] == st.memory[0][0] and len(again.memory) == len(st.memory)
            assert all(np.array_equal(a[c], b[c]) for (_, a), (_, b) in zip(again.memory, st.memory) for c in a)
            assert [(e.u, e.v, e.count) for e in again.edges] == [(e.u, e.v, e.count) for e in st.edges]
            assert all(np.array_equal(w, st.work[r]) for r, w in again.work.items())
            assert [(x.kind, x.count, x.size) for x in again.groups] == [(x.kind, x.count, x.size) for x in st.groups]
    (n5, bytes5, read5), (n9, bytes9, read9) = counts
    assert n9 > 1.7 * n5
    assert read5 == read9 == 1, counts
    assert bytes9 == bytes5, counts


def test_the_steps_of_a_resharding_are_read_once_whatever_the_mesh_sizes():
    """What a resharding's collectives are (kinds, axes, buckets, the dims they cut into
    blocks) depends on the layouts only: read once per layout pair, the mesh shapes of
    as many axes price them from it (their bytes differ). Building a second shape's
    integer program reads no step again, and its charges are those of reading them for
    it alone. Counted, not timed."""
    from unittest import mock

    from distir.planner import costs

    g = read_graph(parse_module(gpt_text(3)))
    costs._STEPS.clear()
    with mock.patch.object(costs, "packable", wraps=costs.packable) as packed, \
            mock.patch.object(costs, "reshard_steps", wraps=costs.reshard_steps) as planned:
        first = ilp.build(g, ShapeCosts(g, (2, 2), SLOW))
        read = (packed.call_count, planned.call_count)
        second = ilp.build(g, ShapeCosts(g, (4, 2), SLOW))
    assert read[0] and read[1]
    assert (packed.call_count, planned.call_count) == read
    assert first.table.charges and second.table.charges
    costs._STEPS.clear()
    alone = ilp.build(g, ShapeCosts(g, (4, 2), SLOW))
    assert alone.table.by_cell == second.table.by_cell


def test_the_collectives_the_tuner_meets_at_once_are_counted_without_making_the_units():
    """Whether the tuner explores a plan (``explored_collectives``: the most collectives
    of one independent part) is the count over ``units.units``' parts, found without
    making them (their arguments and results): no ``Unit`` is made. Counted."""
    from unittest import mock

    from xdsl.dialects import func

    from distir.dialects import coll
    from distir.dialects.fast import walk
    from distir.planner.plan import explored_collectives
    from distir.tuning import units

    _, result = planned("gpt", 4)
    for module in (result.best.module, program("mlp.mlir")):
        f = next(o for o in module.ops if isinstance(o, func.FuncOp))
        want = max((sum(1 for op in u.ops for o in walk(op) if isinstance(o, coll.CollectiveOp)) for u in units.units(f)), default=0)
        with mock.patch.object(units, "Unit", wraps=units.Unit) as made:
            got = explored_collectives(module)
        assert made.call_count == 0
        assert got == want
    assert explored_collectives(result.best.module) > 0


def test_planning_builds_placements_and_prices_collectives_once_however_many_layers():
    """Searching, partitioning, lowering and predicting a plan build each placement
    attribute and price each collective on its device groups once, not per layer or per
    op: as many at 2 layers as at 4 (1.6x the ops), counted, not timed."""
    from unittest import mock

    from distir.dialects import dist, placements
    from distir.planner import costs
    from distir.tuning import cost_model

    counts = []
    for layers in (2, 4):
        module = parse_module(gpt_text(layers))
        for cache in (placements.sliced, dist.tensor_type):
            cache.cache_clear()
        for table in (costs._STEPS, costs._CURVES, cost_model._SECONDS):
            table.clear()
        with mock.patch.object(placements.Sliced, "__init__", autospec=True, side_effect=placements.Sliced.__init__) as built, \
                mock.patch.object(cost_model, "_collective_seconds", wraps=cost_model._collective_seconds) as priced:
            result = plan(module, 4, SLOW, top=1, tune=False, alternatives=0)
        ops = sum(1 for _ in result.best.module.walk())
        counts.append((ops, built.call_count, priced.call_count, result.best.collectives))
    (ops2, built2, priced2, coll2), (ops4, built4, priced4, coll4) = counts
    assert ops4 > 1.5 * ops2 and coll2 and coll4 and built2 and priced2
    assert built4 == built2 and priced4 == priced2, counts


def test_the_relaxation_solves_the_integer_program():
    _, result = planned("gpt", 4)
    # the meshes the search did not solve (bounded out) solved here
    solutions = [s.solution if s.solved else ilp.solve(s.problem, result.memory_limit) for s in result.searched]
    assert all(s.extra["solved by"] in ("relaxation", "branch and bound") for s in solutions)
    assert any(s.extra["solved by"] == "relaxation" for s in solutions)


def test_meshes_whose_lower_bound_exceeds_the_best_are_not_solved_and_the_plans_are_the_same():
    """A mesh whose integer program's lower bound (``ilp.LowerBound``) exceeds the
    estimate of the plans kept cannot be among them: its program is not solved, and the
    plans are those of solving every mesh (the same meshes, predicted times, memory and
    programs). Counted: HiGHS solves fewer programs."""
    from unittest import mock

    runs = {}
    for prune in (True, False):
        with mock.patch.object(ilp, "solve", wraps=ilp.solve) as solved:
            result = plan(program("mlp_sgd.mlir"), 8, SLOW, top=1, tune=False, alternatives=0, prune=prune)
        runs[prune] = (result, solved.call_count)
    (pruned, n_pruned), (full, n_full) = runs[True], runs[False]
    assert n_full == len(full.searched) == 4 and n_pruned < n_full, (n_pruned, n_full)
    assert [s.mesh.describe() for s in pruned.searched] == [s.mesh.describe() for s in full.searched]
    kept = pruned.best.estimate_s
    for mine, theirs in zip(pruned.searched, full.searched):
        if not mine.solved:  # its bound is a bound of what solving it gives, above the best
            assert mine.bound is not None and kept < mine.bound <= theirs.estimate * (1 + 1e-9)
        else:
            assert mine.estimate == theirs.estimate
    for a, b in zip(pruned.plans, full.plans, strict=True):
        assert (a.mesh.describe(), a.predicted_s, a.memory.total, str(a.module)) == (b.mesh.describe(), b.predicted_s, b.memory.total, str(b.module))


# ---------------------------------------------------------------------------- plans


def test_a_training_step_is_planned_with_data_parallel_reductions():
    original, result = planned("mlp_sgd.mlir", 4)
    best = result.best
    names = {op.name for op in best.module.walk()}
    assert names & {"coll.all_reduce", "coll.reduce_scatter", "coll.fused_reduce_scatter", "coll.fused_all_reduce"}
    assert best.predicted_s > 0 and best.compute_s > 0 and best.memory.total > 0
    # the tuner's schedule replaced the plain collectives (CoCoNet's fused schedules)
    assert best.schedule
    # the function keeps its name and its arguments' names
    f = next(op for op in best.module.ops if op.name == "func.func")
    assert f.sym_name.data == "step" and [a.name_hint for a in f.body.block.args] == ["x", "t", "w1", "w2", "lr"]


def test_the_plan_is_never_predicted_slower_than_the_hand_plans():
    """DLRM on two A100 nodes: data parallelism, and Megatron's plan (the tables sliced
    over the GPUs of a node, the batch over the nodes), written as annotated programs
    and tuned as bench/plan.py tunes them, on the cost model that predicts the plan.
    Megatron's tuned plan (its AllReduce fused with the MLP after it) beat the plan
    until every candidate a schedule may favour was tried and the standard meshes'
    plans were also written as annotated programs."""
    import math

    from distir.planner.materialize import annotated
    from distir.planner.plan import Plan, predict, schedule
    from distir.planner.strategies import Layout

    text = (INPUTS / "dlrm.mlir").read_text()
    a100 = get_topology("p2-a100", 2)
    best = plan(parse_module(text), 32, a100, topology_name="p2-a100", top=1).best
    g = read_graph(parse_module(text))
    args = {g.values[n.results[0]].name: n.id for n in g.nodes if n.is_arg}
    one = meshes(a100, 32)[0]
    levels = next(m for m in meshes(a100, 32) if m.levels(0) == "node 2" and m.levels(1) == "gpu 16")
    hands = {
        "DP": (one, {args["indices"]: Layout(((), (0,), ()))}),
        "TP x DP": (levels, {args["tables"]: Layout(((1,), (), ())), args["indices"]: Layout(((), (0,), ()))}),
    }
    for name, (mesh, lay) in hands.items():
        hand = Plan(mesh, annotated(g, mesh, lay), [], math.nan)
        schedule(hand, 32, a100, "p2-a100", tune=True)
        predict(hand, 32, a100)
        assert best.predicted_s <= hand.predicted_s * (1 + 1e-9), f"{name}: {hand.predicted_s} ({hand.schedule}) beats the plan's {best.predicted_s}"
    assert hand.schedule  # Megatron's plan was tuned (a fused schedule): what the plan had to match


@pytest.mark.parametrize("ranks", [4, 8])
@pytest.mark.parametrize("name", ["mlp.mlir", "mlp_sgd.mlir"])
def test_the_plan_computes_the_one_device_program_on_interpret_and_local(name, ranks):
    original, result = planned(name, ranks)
    assert any(isinstance(p, Sliced) for op in result.best.module.walk() for r in op.results
               if hasattr(r.type, "get_placements") for p in r.type.get_placements())
    for r in run_check(original, result.best.module, ranks, ("interpret", "local")):
        assert r.ok, f"{r.backend}: {r.message}"


MPI_RANKS = [4, 8]
MPI_PROGRAMS = ["mlp.mlir", "mlp_sgd.mlir"]


@pytest.fixture(scope="module")
def mpi_runs(tmp_path_factory) -> dict[tuple[str, int], tuple[list[np.ndarray], list[np.ndarray] | str]]:
    """(program, ranks) -> (the one-device program's results, the plan's under
    ``distir-run --backend mpi`` on the same inputs, or why there are none). The runs of
    each rank count are one ``mpiexec`` job (``test/frontends/mpi_batch.py``: the
    processes start once for all of them)."""
    import json
    import subprocess
    import sys

    from distir.runtime import npz
    from distir.runtime.backend import get_backend

    work = tmp_path_factory.mktemp("plan_mpi")
    batch = HERE.parent / "frontends" / "mpi_batch.py"
    out: dict = {}
    for ranks in MPI_RANKS:
        jobs = []
        for name in MPI_PROGRAMS:
            module, result = planned(name, ranks)
            f = npz.select_function(module, None, "func")
            inputs = npz.prepare_inputs(module, f, 1, None, 5, grids=npz.resolve_grids(module, 1), bounds=npz.index_bounds(f))
            want = get_backend("interpret").run(module, f.sym_name.data, inputs, 1, 5)
            stem = f"{name.removesuffix('.mlir')}_{ranks}"
            (work / f"{stem}.mlir").write_text(str(result.best.module))
            np.savez(work / f"{stem}.in.npz", **inputs)
            jobs.append({"id": stem, "argv": [str(work / f"{stem}.mlir"), "--ranks", str(ranks), "--backend", "mpi", "--inputs", str(work / f"{stem}.in.npz"),
                                              "--outputs", str(work / f"{stem}.out.npz")]})
            out[(name, ranks)] = (want, stem)
        (work / f"jobs{ranks}.json").write_text(json.dumps(jobs))
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(ranks), sys.executable, str(batch), str(work / f"jobs{ranks}.json"), str(work / f"report{ranks}.json")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=work)
        report = json.loads((work / f"report{ranks}.json").read_text()) if (work / f"report{ranks}.json").exists() else {}
        for name in MPI_PROGRAMS:
            want, stem = out[(name, ranks)]
            if report.get(stem) == 0:
                with np.load(work / f"{stem}.out.npz") as f:
                    out[(name, ranks)] = (want, [f[f"result{i}"] for i in range(len(f.files))])
            else:
                out[(name, ranks)] = (want, f"{stem}: exit {report.get(stem)} (mpiexec {proc.returncode}):\n{proc.stderr[-3000:]}")
    return out


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", MPI_RANKS)
@pytest.mark.parametrize("name", MPI_PROGRAMS)
def test_the_plan_under_mpi_gives_the_one_device_result(mpi_runs, name, ranks):
    want, got = mpi_runs[(name, ranks)]
    if isinstance(got, str):
        pytest.fail(got)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("ranks", [4, 8])
def test_the_plan_of_a_gpt_step_computes_the_one_device_step(ranks):
    original, result = planned("gpt", ranks)
    for r in run_check(original, result.best.module, ranks, ("interpret",)):
        assert r.ok, r.message


def test_the_check_shrinks_a_model_sized_plan_as_far_as_the_tuners_checks():
    """``--check`` at Llama-7B's sizes on 64 ranks: gcd(d, 8·64) would leave a 512x512
    gradient on every rank; the dims become gcd(d, 2·64) = 128 (the arguments within the
    tuner's bound, ``explore.check_mapping``), and a small program keeps gcd(d, 8·ranks)."""
    from distir.examples.optimizer_step import optimizer_step
    from distir.planner.check import reduced
    from distir.tuning.sizes import program_dims

    shapes = [("q", (4096, 4096)), ("up", (11008, 4096)), ("embed", (32000, 4096))]
    step = parse_module(optimizer_step("adam", shapes, mixed=True).replace("shape = [?]", "shape = [64]"))
    original, plan_small = reduced(step, step, 64)
    assert set(program_dims(original)) == set(program_dims(plan_small)) == {128}
    mlp = program("mlp_sgd.mlir")
    assert set(program_dims(reduced(mlp, mlp, 4)[0])) == {math.gcd(d, 32) for d in program_dims(mlp)}


def test_results_written_in_place_count_once_in_the_integer_programs_memory():
    """An optimizer step writes its new parameters and state into its arguments
    (``dist.inplace``): the integer program counts them with the arguments, as
    ``memory_per_rank`` counts the partitioned program, not once more at its peaks (it
    counted Llama-7B's data parallelism on 16 ranks 163 GiB, partitioned 88.6 GiB, and so
    ruled ZeRO-1 out of 80 GiB: the plan was 2.5x slower than ZeRO-1 written by hand)."""
    import math as _math

    from distir.examples.optimizer_step import optimizer_step
    from distir.planner.materialize import annotated
    from distir.planner.memory import memory_per_rank
    from distir.planner.plan import Plan

    g = read_graph(parse_module(optimizer_step("adam", [("w", (256, 128)), ("u", (128, 256)), ("n", (128,))], mixed=True, logical=True)))
    topo = get_topology("dgx2", 1)
    mesh = next(m for m in meshes(topo, 16) if len(m.sizes) == 1)
    sc = ShapeCosts(g, mesh.sizes, topo)
    replicated = ilp.solve(ilp.problem(ilp.build(g, sc), Costs(sc, mesh)), None)  # data parallelism: the fastest here
    dp = Plan(mesh, annotated(g, mesh, {}), [], _math.nan).module
    assert replicated.memory == pytest.approx(memory_per_rank(dp, 16).total, rel=0.1)  # the peaks differ by the activations


def test_ops_after_a_fixed_argument_choose_their_own_layout_and_zero_1_is_priced_as_partitioned():
    """The cast of a gradient given as partial sums (``local``) and the update of a
    parameter given replicated follow those fixed arguments: they must still choose
    their own layout, or the integer program cannot express ZeRO-1 (the gradient
    reduce-scattered, the update on the state's slices, the new parameter gathered
    into its argument). It priced that placement as an AllReduce of the gradient, a
    replicated update and AllGathers of both moments: Llama-7B's ZeRO-1 on one dgx2
    node at 699 ms against 274 ms for its partitioned program, and the plan within
    80 GiB (355 ms) was slower than ZeRO-1 written by hand. With too little memory for
    replicated state, the integer program's collectives are those the partitioner
    emits for its solution."""
    import collections

    from distir.examples.optimizer_step import optimizer_step
    from distir.planner.materialize import materialize
    from distir.planner.plan import Searched, explain_terms

    g = read_graph(parse_module(optimizer_step("adam", [("w", (256, 128)), ("u", (128, 256))], mixed=True, logical=True)))
    topo = get_topology("dgx2", 1)
    mesh = next(m for m in meshes(topo, 16) if len(m.sizes) == 1)
    sc = ShapeCosts(g, mesh.sizes, topo)
    p = ilp.problem(ilp.build(g, sc), Costs(sc, mesh))
    state = 2 * 2 * 256 * 128 * 4  # m and v of both tensors, f32
    sol = ilp.solve(p, state)  # less than the replicated state alone: it must be sliced
    assert sol is not None and sol.memory <= state
    terms = explain_terms(g, Searched(mesh, sol, p.size(), p, solved=True), sc, topo)
    charged = collections.Counter()
    for t in terms:
        if " over " in t.what:
            charged[t.what.split(" over ")[0]] += t.count
    assert charged == {"reduce_scatter": 2, "all_gather": 2}, terms  # per tensor: one of each
    assert sol.seconds == pytest.approx(sum(t.seconds for t in terms))
    chosen = p.chosen(sol.choice)
    module = materialize(g, mesh, [p.strategies[g.class_of[n.id]][chosen[g.class_of[n.id]]] for n in g.nodes])
    emitted = collections.Counter(op.name.removeprefix("coll.") for op in module.walk() if op.name.startswith("coll."))
    assert emitted == charged


def _two_reductions_then_one() -> str:
    """Two matmuls of %x (independent), their sum, a tanh, a third matmul of it
    (depending on both) and a tanh: with every matmul contracting over the mesh, three
    AllReduces, the first two independent."""
    x, w = "!dist.tensor<16x64xf32, @world, [replicated]>", "!dist.tensor<64x64xf32, @world, [replicated]>"

    def matmul(r: str, a: str, b: str) -> str:
        return f"  %{r} = dist.matmul %{a}, %{b} : ({x}, {w}) -> {x}\n"

    def tanh(r: str, a: str) -> str:
        return f"  %{r} = dist.map(%{a}) : ({x}) -> {x} {{\n  ^bb0(%e: f32):\n    %th = math.tanh %e : f32\n    dist.yield %th : f32\n  }}\n"

    add = f"  %s = dist.map(%a, %b) : ({x}, {x}) -> {x} {{\n  ^bb0(%p: f32, %q: f32):\n    %u = arith.addf %p, %q : f32\n    dist.yield %u : f32\n  }}\n"
    return (f"dist.mesh @world shape = [1]\nfunc.func @f(%x: {x}, %w1: {w}, %w2: {w}, %w3: {w}) -> {x} {{\n"
            + matmul("a", "x", "w1") + matmul("b", "x", "w2") + add + tanh("t", "s") + matmul("c", "t", "w3") + tanh("r", "c")
            + f"  func.return %r : {x}\n}}\n")


def test_independent_all_reduces_share_one_calls_latency_and_element_wise_runs_one_launch_as_lowered():
    """The lowering runs independent AllReduces of one kind as one call over one bucket
    (``combine-collectives``, ``lower-buckets``) and consecutive element-wise ops of one
    iteration space as one kernel (``lower-to-kernels``); the integer program charges
    what it runs: the latency of one call per bucket (each member the bytes of the
    tangent of the cost model's curve at the bucket's size) and one kernel's launch per
    run. Two independent AllReduces and a third that depends on both are two calls,
    priced with two latencies, and a run of two maps with a map elsewhere two
    launches: counted on the lowered program and in the integer program's terms (the
    plan's, which add up to its price), not timed."""
    import collections

    from distir.lowering.pipeline import lower
    from distir.planner.materialize import materialize
    from distir.planner.plan import Searched, explain_terms

    g = read_graph(parse_module(_two_reductions_then_one()))
    topo = get_topology("dgx2", 1)
    mesh = next(m for m in meshes(topo, 16) if len(m.sizes) == 1)
    sc = ShapeCosts(g, mesh.sizes, topo)
    costs = Costs(sc, mesh)
    p = ilp.problem(ilp.build(g, sc), costs)
    choice = {}  # every matmul contracts over the mesh, its operands sliced on their K, the maps replicated
    for r in p.roots:
        node = g.nodes[g.classes[r][0]]
        if node.is_arg:
            k = 1 if g.values[node.results[0]].name == "x" else 0
            choice[r] = next(i for i, s in enumerate(p.strategies[r]) if s.results[0].dims == tuple((0,) if d == k else () for d in range(2)))
        elif node.op.name == "dist.matmul":
            choice[r] = next(i for i, s in enumerate(p.strategies[r]) if s.results[0].partial)
    sol = ilp.Solution(choice, ilp.objective(p, choice), ilp.peak_memory(p, choice))
    chosen = p.chosen(choice)
    module = materialize(g, mesh, [p.strategies[g.class_of[n.id]][chosen[g.class_of[n.id]]] for n in g.nodes])
    lowered = collections.Counter(op.name for op in lower(module, 16, target="gpu", verify=False).walk())
    assert sum(1 for op in module.walk() if op.name == "coll.all_reduce") == 3
    assert lowered["nccl.all_reduce"] == 2 and lowered["rt.launch"] == 2, lowered

    terms = {t.what: t for t in explain_terms(g, Searched(mesh, sol, p.size(), p, solved=True), sc, topo)}
    assert sol.seconds == pytest.approx(sum(t.seconds for t in terms.values()))
    assert terms["all_reduce over p0 for dist.map"].count == 3
    shared = terms["one all_reduce call over p0 for 2 combined"]
    in_bucket = [what for what, mode in p.modes.items() if mode]
    assert shared.count == 1 and len(in_bucket) == 2  # the third is a call of its own: 2 latencies
    assert terms["one launch for each run of 2 element-wise ops"].count == 1 and len(p.launched) == 2
    # the bucket's price is the cost model's for one AllReduce of both members
    a = next(n for n in g.nodes if not n.is_arg and g.values[n.results[0]].name == "a")
    lay = p.strategies[g.class_of[a.id]][chosen[g.class_of[a.id]]].results[0]
    (charge,) = sc.charges((16, 64), g.values[a.results[0]].element_type, lay, lay.whole())
    member = costs.charge_seconds(ilp.shared_charge(charge, p.sizes))
    assert 2 * member + shared.seconds == pytest.approx(costs.collective("all_reduce", (0,), 2 * 16 * 64 * 4), rel=1e-3)


def _maps_then_reshape() -> str:
    """A run of three maps over one space (the second reads %x again and the first's
    result, the third the second's), a reshape of the run's result, and an AllReduce's
    input read by two maps: ``%p``, partial sums when the matmul contracts over the
    mesh, which both maps need whole."""
    x, y = "!dist.tensor<1048576x16xf32, @world, [replicated]>", "!dist.tensor<1048576x4x4xf32, @world, [replicated]>"
    w = "!dist.tensor<16x16xf32, @world, [replicated]>"

    def unary(r: str, a: str, fn: str) -> str:
        return f"  %{r} = dist.map(%{a}) : ({x}) -> {x} {{\n  ^bb0(%e: f32):\n    %o = {fn} %e : f32\n    dist.yield %o : f32\n  }}\n"

    return (f"dist.mesh @world shape = [1]\nfunc.func @f(%x: {x}, %w: {w}) -> ({y}, {x}) {{\n"
            + unary("a", "x", "math.tanh")
            + f"  %b = dist.map(%a, %x) : ({x}, {x}) -> {x} {{\n  ^bb0(%p: f32, %q: f32):\n    %u = arith.addf %p, %q : f32\n    dist.yield %u : f32\n  }}\n"
            + unary("c", "b", "math.exp")
            + f"  %r = dist.reshape %c : {x} -> {y}\n"
            + f"  %p = dist.matmul %c, %w : ({x}, {w}) -> {x}\n"
            + unary("s", "p", "math.tanh") + unary("t", "p", "math.exp")
            + f"  %u = dist.map(%s, %t) : ({x}, {x}) -> {x} {{\n  ^bb0(%p0: f32, %q0: f32):\n    %v = arith.mulf %p0, %q0 : f32\n    dist.yield %v : f32\n  }}\n"
            + f"  func.return %r, %u : {y}, {x}\n}}\n")


def test_fused_maps_a_view_and_a_value_read_twice_are_priced_as_lowered_and_predicted():
    """The integer program charges what the lowering runs and the cost model's walker
    predicts of it: a run of element-wise ops is one kernel (``lower-to-kernels``) that
    loads each tensor from outside the run once, keeps the run's own values in
    registers and stores what is used after it, so the run costs one memory pass (not
    one per map); a ``dist.reshape`` is a view of its operand's block
    (``lower-collectives``): nothing; and a value several ops read in one layout is
    resharded once (the partitioner reshards a value once per target): one AllReduce
    of the matmul's partial sums for the two maps that read them. Replicated, the
    integer program's price of the program is the walker's compute; with the matmul
    contracting over the mesh, its terms charge one AllReduce, and the program makes
    one."""
    from distir.lowering.pipeline import lower
    from distir.planner.materialize import materialize
    from distir.planner.plan import Searched, _prepared, _seconds, explain_terms
    from distir.tuning.cost_model import runtime_of

    g = read_graph(parse_module(_maps_then_reshape()))
    topo = get_topology("dgx2", 1)
    mesh = next(m for m in meshes(topo, 16) if len(m.sizes) == 1)
    sc = ShapeCosts(g, mesh.sizes, topo)
    p = ilp.problem(ilp.build(g, sc), Costs(sc, mesh))

    def plan_of(contract: bool) -> tuple[ilp.Solution, list]:
        choice = {}
        for r in p.roots:
            node = g.nodes[g.classes[r][0]]
            if node.op is not None and node.op.name == "dist.matmul" and contract:
                want = lambda s: bool(s.results[0].partial)  # noqa: E731
            else:
                want = lambda s: not any(s.results[0].dims) and not s.results[0].partial and not any(o is not None and (any(o.dims) or o.partial) for o in s.operands)  # noqa: E731
            choice[r] = next(i for i, s in enumerate(p.strategies[r]) if want(s))
        chosen = p.chosen(choice)
        return ilp.Solution(choice, ilp.objective(p, choice), ilp.peak_memory(p, choice)), [p.strategies[g.class_of[n.id]][chosen[g.class_of[n.id]]] for n in g.nodes]

    sol, strategies = plan_of(False)
    module = materialize(g, mesh, strategies)
    assert not any(op.name.startswith("coll.") for op in module.walk())
    predicted = _seconds(_prepared(module, 16, topo))
    # the walker's step is the host's issue of the first kernel (the same for every
    # plan: not charged), then the matmul and one kernel for each run of maps, no
    # reshape (a memory pass per map and a copy for the reshape were twice as much)
    assert sol.seconds == pytest.approx(predicted - runtime_of(topo).launch_s, rel=1e-3)
    terms = {t.what: t for t in explain_terms(g, Searched(mesh, sol, p.size(), p, solved=True), sc, topo)}
    assert terms["dist.reshape (replicated)"].seconds == 0.0
    assert sol.seconds == pytest.approx(sum(t.seconds for t in terms.values()))

    sol, strategies = plan_of(True)
    module = materialize(g, mesh, strategies)
    assert sum(1 for op in lower(module, 16, target="gpu", verify=False).walk() if op.name == "nccl.all_reduce") == 1
    terms = {t.what: t for t in explain_terms(g, Searched(mesh, sol, p.size(), p, solved=True), sc, topo)}
    assert terms["all_reduce over p0 for dist.map"].count == 1
    assert sol.seconds == pytest.approx(sum(t.seconds for t in terms.values()))


def test_a_data_parallel_optimizer_step_is_priced_as_one_bucket():
    """Data parallelism's gradients, N independent AllReduces, run as one call over one
    bucket: the integer program's best for a small Adam step on one DGX-2 is data
    parallelism, priced with one call's latency for the N (109 us to it before, each
    AllReduce a call of its own; 28 us now), and its program makes one AllReduce call."""
    from distir.examples.optimizer_step import optimizer_step
    from distir.lowering.pipeline import lower
    from distir.planner.materialize import materialize
    from distir.planner.plan import Searched, explain_terms

    n = 8
    g = read_graph(parse_module(optimizer_step("adam", [(f"w{i}", (64, 32 * (1 + i % 2))) for i in range(n)], mixed=True, logical=True)))
    topo = get_topology("dgx2", 1)
    mesh = next(m for m in meshes(topo, 16) if len(m.sizes) == 1)
    sc = ShapeCosts(g, mesh.sizes, topo)
    p = ilp.problem(ilp.build(g, sc), Costs(sc, mesh))
    sol = ilp.solve(p, None)
    chosen = p.chosen(sol.choice)
    strategies = [p.strategies[g.class_of[x.id]][chosen[g.class_of[x.id]]] for x in g.nodes]
    assert not any(any(st.results[0].dims) for st in strategies if st.results), "data parallelism: nothing sliced"
    terms = {t.what: t for t in explain_terms(g, Searched(mesh, sol, p.size(), p, solved=True), sc, topo)}
    assert terms[f"one all_reduce call over p0 for {n} combined"].count == 1
    assert sum(t.count for w, t in terms.items() if w.startswith("all_reduce over")) == n
    assert sol.seconds == pytest.approx(sum(t.seconds for t in terms.values()))
    lowered = lower(materialize(g, mesh, strategies), 16, target="gpu", verify=False)
    assert sum(1 for op in lowered.walk() if op.name == "nccl.all_reduce") == 1


@pytest.mark.parametrize("machine", ["slow", "p2-a100"])
def test_an_all_to_all_is_priced_as_its_lowering_is_predicted(machine):
    """``coll.all_to_all`` lowers to one group of sends, every member's block to each
    other member at once: on a machine of several nodes most pairs cross the network
    together. The integer program charges a resharding that slices another dim what the
    cost model predicts of that lowering (its ``send`` step, the call's device seconds
    included, as the walker charges every call); it charged a ring
    AllGather of the input, which let the plan of the JAX GPT step slice the embedding's
    gradient at an eighth of its predicted time on two p2-a100 nodes."""
    from xdsl.dialects.builtin import f32

    from distir.lowering.pipeline import lower
    from distir.planner.strategies import Layout
    from distir.tuning.cost_model import Scaling, breakdown, prepare

    topo, ranks = (SLOW, 8) if machine == "slow" else (get_topology("p2-a100", 2), 32)
    rows, cols = 64 * ranks, 16 * ranks

    def t(p: str) -> str:
        return f"!dist.tensor<{rows}x{cols}xf32, @world, [{p}]>"

    one_op = (f"dist.mesh @world shape = [1]\nfunc.func @f(%x: {t('replicated')}) -> {t('replicated')} {{\n"
              f"  %y = dist.map(%x) : ({t('replicated')}) -> {t('replicated')} {{\n  ^bb0(%e: f32):\n    %th = math.tanh %e : f32\n"
              f"    dist.yield %th : f32\n  }}\n  func.return %y : {t('replicated')}\n}}\n")
    g = read_graph(parse_module(one_op))
    mesh = next(m for m in meshes(topo, ranks) if len(m.sizes) == 1)
    assert len({d // (topo.ranks // topo.levels[0].cardinality) for d in mesh.groups((0,))[0]}) == 2  # the group spans two nodes
    sc = ShapeCosts(g, mesh.sizes, topo)
    charges = sc.charges((rows, cols), f32, Layout(((0,), ())), Layout(((), (0,))))
    (a2a,) = [c for c in charges if c.kind == "all_to_all"]
    charged = Costs(sc, mesh).seconds((a2a,))

    text = (f"dist.mesh @world shape = [{ranks}]\nfunc.func @f(%x: {t('sliced<0>')}) -> {t('sliced<1>')} {{\n"
            f"  %y = coll.all_to_all %x dim 1 : {t('sliced<0>')} -> {t('sliced<1>')}\n  func.return %y : {t('sliced<1>')}\n}}\n")
    lowered = lower(parse_module(text), ranks, target="gpu", verify=False)
    assert sum(1 for op in lowered.walk() if op.name == "nccl.send") == ranks - 1
    predicted = breakdown(prepare(lowered, "f", topo, ranks, Scaling(rows, 2**61 - 1)), rows)["send"]
    assert charged == pytest.approx(predicted, rel=1e-6)


def test_no_plan_fits_too_little_memory_and_the_smallest_is_reported():
    module = program("mlp_sgd.mlir")
    with pytest.raises(NoPlanFits, match="smallest memory per rank found is") as e:
        plan(module, 4, SLOW, memory=1024)
    smallest = e.value.smallest
    assert 1024 < smallest < 64 << 10
    # with that much memory, a plan fits and says so
    fits = plan(module, 4, SLOW, memory=smallest * 1.5, tune=False)
    assert all(p.memory.total <= smallest * 1.5 for p in fits.plans)


def test_memory_per_rank_splits_parameters_gradients_and_state():
    _, result = planned("gpt", 4)
    by = result.best.memory.by_category
    assert by["parameters"] > 0 and by["optimizer state"] > 0 and by["gradients"] > 0 and by["activations"] > 0
    assert result.best.memory.total == sum(by.values())


def test_a_program_the_planner_cannot_take_is_a_located_diagnostic():
    text = (INPUTS / "mlp.mlir").read_text().replace("shape = [1]", "shape = [4]")
    with pytest.raises(PlanError, match=r"mlp.mlir|<unknown>|line|placed"):
        read_graph(parse_module(text))


def test_inputs_of_the_same_npz_run_both_programs(tmp_path):
    """The plan takes the one-device program's logical inputs (same names)."""
    original, result = planned("mlp.mlir", 4)
    from distir.runtime import npz

    f = npz.select_function(result.best.module, None, "func")
    assert npz.argument_names(f) == ["x", "w1", "b1", "w2", "b2"]
    assert np.isfinite(result.best.predicted_s)


def test_plans_are_verified_and_predicted_on_the_lowering_that_runs():
    """The best plan's program verifies as it is (the planner verifies it); its
    prediction lowers without verifying (never run), to the same program as the
    verified lowering ``distir-run`` uses."""
    from distir.dialects.verifier import verify_module
    from distir.lowering.pipeline import lower
    from distir.tuning.cost_model import topology_target

    _, result = planned("mlp_sgd.mlir", 8)
    m = result.best.module
    verify_module(m)
    target = topology_target(SLOW)
    assert str(lower(m, 8, target=target, verify=False)) == str(lower(m, 8, target=target))


def test_only_the_best_plan_is_verified_however_many_are_evaluated():
    """The candidates are partitioned and predicted, never run: the one whole-program
    verification is the best plan's (the program written and run), counted, not timed;
    a runner-up verifies when asked (``Plan.verify``)."""
    from unittest import mock

    from distir.dialects import verifier

    module = parse_module(gpt_text(2))
    with mock.patch.object(verifier, "verify_module", wraps=verifier.verify_module) as verified:
        result = plan(module, 4, SLOW, topology_name=str(HERE / "slow.toml"), top=3, tune=False)
        assert result.evaluated >= 2 and len(result.plans) >= 2
        assert verified.call_count == 1 and result.best.verified
        assert not any(p.verified for p in result.plans[1:])
        result.plans[1].verify()
        assert result.plans[1].verified and verified.call_count == 2


def test_a_machine_the_reduction_synthesis_refuses_leaves_the_plain_plan():
    """Reductions are synthesized in place; a machine the pass refuses (p2-a100's 2
    nodes are 16 devices, not 8) leaves the plan rebuilt as partitioned, verified."""
    import math

    from distir.dialects.verifier import verify_module
    from distir.planner.materialize import annotated
    from distir.planner.plan import Plan, schedule
    from distir.planner.strategies import Layout

    g = read_graph(program("mlp_sgd.mlir"))
    mesh = next(m for m in meshes(SLOW, 8) if len(m.sizes) == 1)  # data parallel over both levels
    x = next(n for n in g.nodes if n.is_arg and g.values[n.results[0]].name == "x")
    data = {x.id: Layout(((0,), ()))}

    def build():
        return annotated(g, mesh, data)

    plain = str(build())
    refused = Plan(mesh, build(), [], math.nan)
    schedule(refused, 8, SLOW, "p2-a100", tune=False, rebuild=build)
    assert any("reductions not synthesized" in n for n in refused.notes) and not refused.pipeline
    verify_module(refused.module)
    assert str(refused.module) == plain
    synthesized = Plan(mesh, build(), [], math.nan)
    schedule(synthesized, 8, SLOW, str(HERE / "slow.toml"), tune=False, rebuild=build)
    assert synthesized.pipeline.startswith("synthesize-reductions") and str(synthesized.module) != plain
    verify_module(synthesized.module)


def test_each_predictions_copy_is_collected_alone():
    """The lowered copy of a plan's program made to predict it is collected right after,
    with the plan set aside (``passes.support.set_aside``): a collection per plan
    evaluated, none of them scanning the plans' programs or the caller's objects."""
    import gc

    frozen: list[int] = []

    def collecting(phase, info):
        if phase == "start":
            frozen.append(gc.get_freeze_count())

    held = program("mlp.mlir")
    gc.callbacks.append(collecting)
    try:
        result = plan(held, 4, SLOW, topology_name=str(HERE / "slow.toml"), tune=False, top=2)
    finally:
        gc.callbacks.remove(collecting)
    programs = sum(len(list(p.module.walk())) for p in result.plans)
    assert result.evaluated >= 2 and len(frozen) >= result.evaluated
    assert min(frozen) > programs + len(list(held.walk()))  # the plans and the caller's, aside
    assert gc.get_freeze_count() == 0


def test_each_program_is_tuned_once_and_only_the_picks_are_checked():
    """The candidates are tuned for their schedule, each distinct program once (by its
    text), and the tuner checks on the interpreter only the schedules it picks (the
    planner uses nothing else): counted, not timed."""
    from unittest import mock

    from distir.planner.plan import Plan, schedule
    from distir.tuning import explore, tuner

    texts: list[str] = []
    checks: list[str] = []
    tune, check = tuner.tune, explore.Checker.__call__

    def tuning(module, *args, **kwargs):
        texts.append(str(module))
        return tune(module, *args, **kwargs)

    def checking(self, cand):
        checks.append(cand.pipeline)
        return check(self, cand)

    import gc

    held = program("mlp.mlir")  # an object of the caller's, alive through the plan
    frozen: list[int] = []  # objects the collections during the plan leave aside

    def collecting(phase, info):
        if phase == "start":
            frozen.append(gc.get_freeze_count())

    gc.callbacks.append(collecting)
    try:
        with mock.patch.object(tuner, "tune", tuning), mock.patch.object(explore.Checker, "__call__", checking):
            result = plan(program("mlp.mlir"), 4, SLOW, topology_name=str(HERE / "slow.toml"))
    finally:
        gc.callbacks.remove(collecting)
    # the collection after each tuning scans the tuner's copies, not what the caller holds
    assert frozen and min(frozen) > len(list(held.walk())) and gc.get_freeze_count() == 0
    with mock.patch.object(tuner, "tune", tuning), mock.patch.object(explore.Checker, "__call__", checking):
        assert len(texts) == len(set(texts)) >= result.evaluated > 1
        assert len(checks) <= len(texts)
        # a program tuned before takes the same schedule without tuning again
        best = result.best
        tuned: dict = {}
        again = [Plan(best.mesh, best.module.clone(), best.strategies, best.estimate_s) for _ in range(2)]
        del texts[:], frozen[:]
        gc.callbacks.append(collecting)
        try:
            for pl in again:
                schedule(pl, 4, SLOW, None, True, tuned=tuned)
        finally:
            gc.callbacks.remove(collecting)
        assert len(texts) == 1 and len(tuned) == 1
        # called alone, its collection after the tuning leaves the caller's objects aside too
        assert frozen and min(frozen) > len(list(held.walk())) and gc.get_freeze_count() == 0
        assert again[0].pipeline == again[1].pipeline and str(again[0].module) == str(again[1].module)
