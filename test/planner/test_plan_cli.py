"""``distir-plan`` as users run it: the table, ``--explain``, ``--json`` (DESIGN §5),
``-o`` (a program distir-run runs on the one-device program's inputs and distir-tune
tunes), ``--check``, a memory limit no plan fits, bad input (one-line located
diagnostics, exit 1), and a JAX program planned and run equal to JAX."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import tools
from support.tool_output import without_progress

HERE = Path(__file__).parent
INPUTS = HERE / "inputs"
SLOW = str(HERE / "slow.toml")


def tool(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([tools.path(name), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """One run of distir-plan on the MLP training step with every output asked for."""
    work = tmp_path_factory.mktemp("plan")
    r = tool("distir-plan", str(INPUTS / "mlp_sgd.mlir"), "--ranks", "4", "--model", SLOW, "--explain", "--check",
             "--json", str(work / "plan.json"), "-o", str(work / "plan.mlir"))
    return r, work


def test_the_table_names_the_best_plan_and_what_it_slices(planned):
    r, _ = planned
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "best" in out and "mesh" in out and "step" in out and "compute" in out and "sliced" in out
    assert "The best plan's largest arguments" in out and "w1" in out and "Memory per rank:" in out


def test_explain_gives_the_terms_and_what_the_runner_up_lost_on(planned):
    r, _ = planned
    assert "Why " in r.stdout and "Terms of its cost" in r.stdout and "dist.matmul" in r.stdout
    assert "The runner-up" in r.stdout and "lost on" in r.stdout


def test_check_runs_the_plan_on_interpret_and_local(planned):
    r, _ = planned
    assert "check on interpret (4 ranks, reduced sizes): ok" in r.stderr
    assert "check on local (4 ranks, reduced sizes): ok" in r.stderr


def test_json_has_designs_format(planned):
    _, work = planned
    data = json.loads((work / "plan.json").read_text())
    assert data["ranks"] == 4 and "slow" in data["topology"] and data["best"] == 0
    for p in data["plans"]:
        assert {"mesh", "placements", "predicted_s", "compute_s", "communication_s", "memory_bytes", "pipeline"} <= set(p)
        assert set(p["placements"]) == {"x", "t", "w1", "w2"}
        assert p["predicted_s"] > 0 and p["memory_bytes"] > 0
    times = [p["predicted_s"] for p in data["plans"]]
    assert times == sorted(times)


def test_the_written_plan_runs_on_the_programs_inputs_and_gives_its_results(planned, tmp_path):
    _, work = planned
    text = (work / "plan.mlir").read_text()
    assert text.startswith("// distir-plan: the best plan of") and "func.func @step(%x:" in text
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "in.npz", x=rng.standard_normal((16, 32), dtype=np.float32), t=rng.standard_normal((16, 32), dtype=np.float32),
             w1=rng.standard_normal((32, 64), dtype=np.float32) * 0.1, w2=rng.standard_normal((64, 32), dtype=np.float32) * 0.1, lr=np.float32(0.01))
    one = tool("distir-run", str(INPUTS / "mlp_sgd.mlir"), "--ranks", "1", "--backend", "interpret", "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "one.npz"))
    assert one.returncode == 0, one.stderr
    four = tool("distir-run", str(work / "plan.mlir"), "--ranks", "4", "--backend", "local", "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "four.npz"))
    assert four.returncode == 0, four.stderr
    with np.load(tmp_path / "one.npz") as a, np.load(tmp_path / "four.npz") as b:
        for k in a.files:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-5)


def test_the_written_plan_is_tunable(planned):
    _, work = planned
    r = tool("distir-tune", str(work / "plan.mlir"), "--ranks", "4", "--model", SLOW, "--max-schedules", "4")
    assert r.returncode == 0, r.stderr


def test_too_little_memory_says_so_and_gives_the_smallest(tmp_path):
    r = tool("distir-plan", str(INPUTS / "mlp_sgd.mlir"), "--ranks", "4", "--model", SLOW, "--memory", "1KiB")
    assert r.returncode == 1
    err = without_progress(r.stderr)  # a loaded machine may see progress lines first
    assert err.count("\n") == 1 and "no plan fits 1.00 KiB per device" in err and "smallest memory per rank found is" in err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--memory", "lots"], "--memory 'lots': give a size such as 80GiB"),
        (["--ranks", "0"], "ranks"),
        (["--top", "0"], "--top must be at least 1"),
        (["--model", "no-such-machine"], "no-such-machine"),
        (["--ranks", "4", "--check", "--ranks", "128"], "--check runs the plan on 128 simulated ranks"),
    ],
)
def test_bad_options_are_one_line_diagnostics(args, needle):
    base = {"--ranks": "4", "--model": SLOW}
    argv = [str(INPUTS / "mlp.mlir")]
    given = {args[i]: args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None for i in range(len(args)) if args[i].startswith("--")}
    for k, v in base.items():
        if k not in given:
            argv += [k, v]
    argv += args
    r = tool("distir-plan", *argv)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


def test_a_program_computing_on_placed_values_is_located(tmp_path):
    text = (INPUTS / "mlp.mlir").read_text().replace("shape = [1]", "shape = [4]")
    path = tmp_path / "placed.mlir"
    path.write_text(text)
    r = tool("distir-plan", str(path), "--ranks", "4", "--model", SLOW)
    assert r.returncode == 1
    assert f"{path}:5:" in r.stderr and "argument %x is placed but not joined into a logical value" in r.stderr


JAX_STEP = '''
import sys
import jax, jax.numpy as jnp
import numpy as np

def step(x, t, w1, w2):
    def loss(w1, w2):
        return jnp.sum((jnp.tanh(x @ w1) @ w2 - t) ** 2)
    l, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2)
    return w1 - 0.01 * g1, w2 - 0.01 * g2, l

rng = np.random.default_rng(0)
args = [rng.standard_normal(s).astype(np.float32) * k for s, k in (((16, 32), 1), ((16, 32), 1), ((32, 64), 0.1), ((64, 32), 0.1))]
open(sys.argv[1], "w").write(jax.jit(step).lower(*args).as_text())
np.savez(sys.argv[2], **{f"arg{i}": a for i, a in enumerate(args)})
np.savez(sys.argv[3], **{f"result{i}": np.asarray(r) for i, r in enumerate(jax.jit(step)(*args))})
'''


def test_a_planned_jax_program_gives_jaxs_result(tmp_path):
    """A plain jax.jit lowering (no shardings) planned for 4 ranks, run on the same
    inputs: JAX's results."""
    pytest.importorskip("jax")
    script = tmp_path / "step.py"
    script.write_text(JAX_STEP)
    made = subprocess.run([sys.executable, str(script), str(tmp_path / "step.mlir"), str(tmp_path / "in.npz"), str(tmp_path / "want.npz")],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    r = tool("distir-plan", str(tmp_path / "step.mlir"), "--ranks", "4", "--model", SLOW, "-o", str(tmp_path / "plan.mlir"))
    assert r.returncode == 0, r.stderr
    assert "coll." in (tmp_path / "plan.mlir").read_text()
    run = tool("distir-run", str(tmp_path / "plan.mlir"), "--ranks", "4", "--backend", "local", "--func", "main",
               "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "got.npz"))
    assert run.returncode == 0, run.stderr
    with np.load(tmp_path / "want.npz") as want, np.load(tmp_path / "got.npz") as got:
        for k in want.files:
            np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5)
