"""JAX is the oracle for the constructs of the programs people write (``jax_constructs.py``):
each lowered by JAX as a one-device program (no mesh: it imports on a one-rank mesh and
runs on 1 rank) and with shardings on 4 devices, imported, partitioned and run on the
interpreter and the ``local`` runtime, equal to JAX's results (rtol 1e-5 for f32).
``test_run_mpi_jax.py`` runs them on ``mpi`` (the sharded ones in its ``mpiexec -n 4``
job, the one-device ones in one process of their own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jax_constructs import ONE_DEVICE, SHARDED
from oracle import assert_matches, load

from distir.dialects import dist
from distir.dialects.diagnostics import InputRejected
from distir.dialects.placements import Replicated
from distir.frontends.program import import_program
from distir.runtime import interpret
from distir.runtime.local import run_local

CONSTRUCTS = ["mlp", "floats", "ints", "xent", "xent3", "take_fill", "dus", "causal", "emb_grad", "scatter_add", "arg_sort", "dropout"]
NAMES = [c + s for c in CONSTRUCTS for s in (ONE_DEVICE, SHARDED)] + ["xent_vocab" + SHARDED, "xent3_vocab" + SHARDED, "emb_grad_dp" + SHARDED]


EXACT = ("dropout",)
"""Constructs whose every result must be JAX's bits (random numbers: uint32 arithmetic
wraps, the floats are made from the bits)."""


def ranks_of(name: str) -> int:
    return 1 if name.endswith(ONE_DEVICE) else 4


def is_exact(name: str) -> bool:
    return name.startswith(EXACT)


@pytest.mark.parametrize("backend", ["interpret", "local"])
@pytest.mark.parametrize("name", NAMES)
def test_construct_computes_what_jax_computes(jax_dir, name, backend):
    text, inputs, want = load(jax_dir, name)
    module = import_program(text, f"{name}.mlir").module
    run = interpret if backend == "interpret" else run_local
    assert_matches(run(module, "main", inputs, ranks=ranks_of(name)), want, f"{name} on {backend}", exact=is_exact(name))


def test_one_device_program_is_a_program_on_a_one_rank_mesh(jax_dir):
    """A plain ``jax.jit(f).lower(x)`` (no sdy.mesh, no sharding) is one device's program:
    one mesh of one rank, every value replicated there, no collective; the function and
    argument names are JAX's (what distir-plan starts from)."""
    text, _, _ = load(jax_dir, "mlp" + ONE_DEVICE)
    assert "sdy." not in text
    module = import_program(text, "mlp.mlir").module
    meshes = [op for op in module.ops if isinstance(op, dist.MeshOp)]
    assert [(m.mesh_name, m.declared_sizes) for m in meshes] == [("mesh", (1,))]
    (func,) = [op for op in module.ops if op.name == "func.func"]
    assert func.sym_name.data == "main"
    assert [a.name_hint for a in func.body.block.args] == ["arg0", "arg1", "arg2", "arg3"]
    for v in [*func.body.block.args, *(r for op in func.walk() for r in op.results)]:
        if isinstance(v.type, dist.TensorType):
            assert all(isinstance(p, Replicated) for p in v.type.get_placements()), v
    assert not any(op.name.startswith("coll.") for op in func.walk())


def test_one_device_program_on_several_ranks_says_it_runs_on_one(jax_dir):
    text, inputs, _ = load(jax_dir, "mlp" + ONE_DEVICE)
    module = import_program(text, "mlp.mlir").module
    with pytest.raises(InputRejected, match=r"one device.*1 rank.*distir-plan"):
        interpret(module, "main", inputs, ranks=4)


SIMULATED = ["floats_4", "ints_4", "emb_grad_4", "emb_grad_dp_4", "scatter_add_1", "arg_sort_4", "dropout_4"]


def test_constructs_on_the_simulated_cuda_device(jax_dir, tmp_path):
    """The ``nccl`` backend's device code for the new ops (the scalar ops of the map
    bodies in generated CUDA kernels, ``rt.scatter_add``'s kernel) in numba's CUDA
    simulator equals the interpreter (``test/runtime/cuda_sim_batch.py``, one process)."""
    pytest.importorskip("numba.cuda", reason="the GPU extra (numba-cuda) is not installed")
    jobs = []
    for name in SIMULATED:
        text, _, _ = load(jax_dir, name)
        jobs.append({"id": name, "text": str(import_program(text, f"{name}.mlir").module), "func": "main", "ranks": ranks_of(name), "seed": 3})
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONWARNINGS="ignore")
    script = Path(__file__).parents[1] / "runtime" / "cuda_sim_batch.py"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "jobs.json"), str(tmp_path / "report.json")], env=env, capture_output=True, text=True, timeout=600)
    assert (tmp_path / "report.json").exists(), proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    for name in SIMULATED:
        assert report[name]["ok"], f"{name}: {report[name]['message']}"
