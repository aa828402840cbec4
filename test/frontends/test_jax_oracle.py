"""JAX is the oracle: programs JAX lowers (StableHLO + Shardy on a mesh of host devices),
imported and partitioned by distir, compute what JAX computes -- on the interpreter and
the ``local`` runtime, as written and after CoCoNet's schedules (``test_run_mpi_jax.py``
does ``mpi``).

The programs (``jax_programs.py``) are lowered and run by JAX once per session, in a
subprocess that sets ``XLA_FLAGS`` before JAX starts.
"""

from __future__ import annotations

import pytest
from oracle import assert_matches, load

from distir.frontends.program import import_program
from distir.frontends.sdy import sdy_import
from distir.runtime import interpret
from distir.runtime.local import run_local

PROGRAMS = ["tp_mlp_4", "gelu_mlp", "attention", "dp_adam", "zero_adam", "layernorm", "embedding", "take_rows", "take_bags", "misc", "tp_dp_mlp", "shard_map", "shard_map_2d"]
PPERMUTE = ["ppermute_ring", "ppermute_reverse", "ppermute_partial", "ppermute_2d", "ring_allreduce", "ring_matmul"]


@pytest.mark.parametrize("backend", ["interpret", "local"])
@pytest.mark.parametrize("name", PROGRAMS + PPERMUTE)
def test_imported_program_computes_what_jax_computes(jax_dir, name, backend):
    text, inputs, want = load(jax_dir, name)
    module = import_program(text, f"{name}.mlir").module
    run = interpret if backend == "interpret" else run_local
    assert_matches(run(module, "main", inputs, ranks=4), want, f"{name} on {backend}")


@pytest.mark.parametrize("backend", ["interpret", "local"])
@pytest.mark.parametrize("name", [f"uneven_{p}_{n}" for p in ("embedding", "mlp") for n in (3, 4, 6, 8)])
def test_uneven_shardings_compute_what_jax_computes(jax_dir, name, backend):
    """with_sharding_constraint on dims the mesh does not divide (a vocabulary of 61 rows,
    a hidden size of 23, over 3, 4, 6 and 8 devices): sdy.sharding_constraint, which
    Shardy pads, imports as blocks of ceil(s/n) and computes JAX's results."""
    text, inputs, want = load(jax_dir, name)
    imported = import_program(text, f"{name}.mlir")
    sliced = [op for op in imported.module.walk() if op.name == "dist.take_slice"]
    assert sliced, "the constrained dims are sliced"
    run = interpret if backend == "interpret" else run_local
    assert_matches(run(imported.module, "main", inputs, ranks=int(name.rsplit("_", 1)[1])), want, f"{name} on {backend}")


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_tp_mlp_before_and_after_partition_on_every_mesh_size(jax_dir, ranks):
    """The global program (every value unplaced, as imported) and the partitioned one
    both compute JAX's result, on meshes of 1, 2, 4 and 8 devices."""
    name = f"tp_mlp_{ranks}"
    text, inputs, want = load(jax_dir, name)
    before, _ = sdy_import(text, name)
    assert_matches(interpret(before, "main", inputs, ranks=ranks), want, f"{name} before partition")
    after = import_program(text, name).module
    assert_matches(interpret(after, "main", inputs, ranks=ranks), want, f"{name} after partition")
    assert_matches(run_local(after, "main", inputs, ranks=ranks), want, f"{name} after partition, local")


def test_tp_mlp_partitions_like_megatron(jax_dir):
    """Column-sliced first GEMM, row-sliced second GEMM, one all-reduce at the end."""
    text, _, _ = load(jax_dir, "tp_mlp_4")
    imported = import_program(text, "tp_mlp_4.mlir")
    ops = [op.name for op in imported.module.walk() if op.name.startswith(("coll.", "dist."))]
    assert ops.count("coll.all_reduce") == 1
    assert not any(n in ops for n in ("coll.all_gather", "dist.take_slice", "coll.all_to_all", "coll.reduce_scatter"))
    assert [r.text.split(" of ")[0] for r in imported.remarks] == ["coll.all_reduce sum over x"]


def test_shard_map_body_keeps_jax_collectives(jax_dir):
    """A shard_map body is per device: its collectives are the coll ops, in order, and
    the partitioner adds none."""
    text, _, _ = load(jax_dir, "shard_map")
    imported = import_program(text, "shard_map.mlir")
    colls = [op.name for op in imported.module.walk() if op.name.startswith("coll.")]
    assert colls == ["coll.all_reduce", "coll.all_gather", "coll.reduce_scatter", "coll.all_to_all", "coll.all_reduce"]
    assert imported.remarks == []



def test_ppermute_is_one_coll_permute_per_collective_permute(jax_dir):
    """jax.lax.ppermute lowers to StableHLO's collective_permute with device ids; each one
    imports as one coll.permute (a ring step as an offset, over the one mesh axis it moves
    along), and the partitioner adds nothing."""
    expect = {
        "ppermute_ring": [{"offset": 1}],
        "ppermute_reverse": [{"offset": -1}],
        "ppermute_partial": [{"pairs": ((0, 2), (1, 3), (3, 0))}],
        "ppermute_2d": [{"offset": 1, "axes": (1,)}, {"pairs": ((0, 1),), "axes": (0,)}, {"pairs": ((0, 3), (1, 2), (3, 0)), "axes": (0, 1)}],
        "ring_matmul": [{"offset": 1}] * 3,
    }
    for name, want in expect.items():
        text, _, _ = load(jax_dir, name)
        imported = import_program(text, f"{name}.mlir")
        colls = [op for op in imported.module.walk() if op.name.startswith("coll.")]
        assert [op.name for op in colls] == ["coll.permute"] * len(want), name
        for op, w in zip(colls, want):
            got = {k: v for k, v in op.options().items() if v is not None}
            assert {k: got.get(k) for k in ("offset", "pairs")} == {"offset": w.get("offset"), "pairs": w.get("pairs")}, f"{name}: {op}"
            assert tuple(op.axes) == w.get("axes", (0,)), f"{name}: {op}"
        assert imported.remarks == [], name

@pytest.mark.parametrize("name", ["tp_mlp_4", "dp_adam", "zero_adam", "attention"])
def test_every_schedule_of_an_imported_program_computes_what_jax_computes(jax_dir, name):
    """CoCoNet's schedules (split, reorder, fuse, overlap: every one the tuner explores)
    apply to imported programs; each computes JAX's result on the interpreter, and the
    fused ones on the local runtime too."""
    from distir.tuning.explore import explore

    text, inputs, want = load(jax_dir, name)
    module = import_program(text, f"{name}.mlir").module
    ex = explore(module)
    assert not ex.errors
    names = [c.name for c in ex.candidates]
    assert any("fuse(" in n for n in names), names
    fused = [c for c in ex.candidates if "fuse(" in c.name]
    for c in ex.candidates:
        assert_matches(interpret(c.module, "main", inputs, ranks=4), want, f"{name}: {c.name} ({c.pipeline}) on interpret")
    for c in fused[:2]:
        assert_matches(run_local(c.module, "main", inputs, ranks=4), want, f"{name}: {c.name} ({c.pipeline}) on local")


@pytest.mark.parametrize("script", ["tp_mlp.py", "shard_map_collectives.py"])
def test_example_scripts_agree_with_jax(tmp_path, script):
    """The scripts of examples/jax/ lower, import, run and report agreement (exit 0)."""
    import subprocess
    import sys
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "jax" / script
    proc = subprocess.run([sys.executable, str(path), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vs JAX: max relative difference" in proc.stdout
    assert list(tmp_path.glob("*.mlir"))


# ---------------------------------------------------------------------------- issue 27
# The gradient of a tensor-parallel GPT block on a 2x4 mesh (dp x tp): before issue 27,
# `local` and `mpi` returned one of its gradients wrong (combine-collectives combined
# all-reduces over dp of gradients sliced over tp on different dims; the interpreter
# was right). A test per backend.


@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_gpt_block_gradient_computes_what_jax_computes(jax_dir, backend):
    text, inputs, want = load(jax_dir, "gpt_block_grad")
    module = import_program(text, "gpt_block_grad.mlir").module
    run = interpret if backend == "interpret" else run_local
    assert_matches(run(module, "main", inputs, ranks=8), want, f"gpt_block_grad on {backend}")


@pytest.mark.mpi
def test_gpt_block_gradient_computes_what_jax_computes_on_mpi(jax_dir, tmp_path):
    """``mpiexec -n 8 distir-run gpt_block_grad.mlir --backend mpi`` (JAX's file, imported
    by distir-run) gives JAX's values and gradients."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import numpy as np

    _, _, want = load(jax_dir, "gpt_block_grad")
    out = tmp_path / "out.npz"
    argv = [str(jax_dir / "gpt_block_grad.mlir"), "--backend", "mpi", "--func", "main", "--inputs", str(jax_dir / "gpt_block_grad.in.npz"), "--outputs", str(out)]
    (tmp_path / "jobs.json").write_text(json.dumps([{"id": "gpt", "argv": argv}]))
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    proc = subprocess.run(
        [mpiexec, "-n", "8", sys.executable, str(Path(__file__).parent / "mpi_batch.py"), str(tmp_path / "jobs.json"), str(tmp_path / "report.json")],
        capture_output=True, text=True, timeout=600,
    )
    report = json.loads((tmp_path / "report.json").read_text()) if (tmp_path / "report.json").exists() else {}
    assert report.get("gpt") == 0, proc.stderr[-3000:]
    with np.load(out) as f:
        got = [f[f"result{i}"] for i in range(len(f.files))]
    assert_matches(got, want, "gpt_block_grad on mpi")
