"""The workloads of issue 28 at small odd sizes of the same structure
(``examples/uneven_workloads.py``; ``bench/uneven_workloads.py`` runs them at their real
sizes: a 50,257 x 768 vocabulary, an Adam step over 1,000,003 elements, Falcon-7B's MLP):
a vocabulary of 61 rows sliced over the ranks with its output projection, Adam over
1,003 elements, Megatron's MLP of width 23. On 3, 4, 6 and 8 ranks (which divide none of
them) each equals the one-rank program on ``interpret`` and ``local`` (``mpi`` on 3 and 4
ranks in one batched job), as written and as the tuner's best schedule (predicted for 6 ranks
of ``dgx2``)."""

from __future__ import annotations

import pytest
from support.runs import run_mpi_batch

from distir.dialects.context import parse_module
from distir.dialects.dist import TensorType
from distir.dialects.placements import Local
from distir.examples.uneven_workloads import workload
from distir.passes.pipeline import apply_pipeline
from distir.runtime import npz
from distir.runtime.backend import get_backend
from distir.runtime.equivalence import compare_outputs, program_precision
from distir.runtime.interpreter import interpret

SMALL = {"embedding": {"vocab": 61, "dim": 6, "tokens": 5}, "adam": {"n": 1003}, "mlp": {"tokens": 3, "hidden": 11, "ffn": 23}}
RANKS = (3, 4, 6, 8)


def _best_pipeline(text: str, ranks: int) -> str:
    from distir.tuning.topology import get_topology
    from distir.tuning.tuner import tune

    result = tune(parse_module(text), ranks, model=get_topology("dgx2"), jobs=1)
    (size,) = result.sizes
    return result.by_name(result.best[size]).pipeline  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def schedules() -> dict[str, str]:
    """The tuner's best pipeline per workload (tuned for 6 ranks: a pipeline runs on
    any rank count, and tuning once keeps the test cheap)."""
    return {name: _best_pipeline(workload(name, **sizes)[0], 6) for name, sizes in SMALL.items()}


def _inputs(text: str, func: str) -> dict:
    module = parse_module(text)
    return npz.prepare_inputs(module, npz.select_function(module, func), 1, None, 3)


def _on(inputs: dict, text: str, func: str, ranks: int) -> dict:
    """The one-rank inputs for ``ranks`` ranks: a ``local`` argument (Adam's gradient,
    all-reduced with avg) is the same partial value on every rank."""
    f = npz.select_function(parse_module(text), func)
    out = dict(inputs)
    for name, t in npz.signature(f):
        if isinstance(t, TensorType) and any(isinstance(p, Local) for p in t.get_placements()):
            out[name] = inputs[name][0][None].repeat(ranks, 0)  # one local axis: [1, ...] -> [ranks, ...]
    return out


@pytest.mark.parametrize("name", sorted(SMALL))
def test_workload_equals_the_one_rank_program(name, schedules):
    text, func = workload(name, **SMALL[name])
    inputs = _inputs(text, func)
    reference = interpret(text, func, inputs, 1)
    precision = program_precision(*npz.functions(parse_module(text)))
    pipeline = schedules[name]
    tuned = str(apply_pipeline(parse_module(text), pipeline)) if pipeline else text
    for ranks in RANKS:
        for label, program in (("as written", text), (f"tuned ({pipeline or 'as written'})", tuned)):
            for backend in ("interpret", "local"):
                got = get_backend(backend).run(parse_module(program), func, _on(inputs, text, func, ranks), ranks, 0)
                c = compare_outputs(reference, got, "one rank", f"{ranks} ranks {backend} {label}", precision)
                assert c, c.message


@pytest.mark.mpi
def test_workloads_equal_the_interpreter_on_mpi(tmp_path, schedules):
    jobs = []
    for name, sizes in SMALL.items():
        text, func = workload(name, **sizes)
        for ranks in (3, 4):
            pipeline = schedules[name]
            jobs.append({"id": f"{name}-{ranks}", "text": text, "func": func, "ranks": ranks, "seed": 3})
            if pipeline:
                tuned = str(apply_pipeline(parse_module(text), pipeline))
                jobs.append({"id": f"{name}-{ranks}-tuned", "text": tuned, "func": func, "ranks": ranks, "seed": 3})
    report = run_mpi_batch(jobs, tmp_path)
    bad = {k: v["message"] for k, v in report.items() if not v["ok"]}
    assert not bad and len(report) == len(jobs), bad
