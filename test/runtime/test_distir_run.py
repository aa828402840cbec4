"""``distir-run``: success, --compare, bad inputs (exit 1 naming the argument), and every
example at its own sizes on every rank count among 1, 2, 4, 8 that its meshes allow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from distir.runtime.equivalence import compare_outputs
from distir.tools.run import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PRIMITIVES = str(EXAMPLES / "primitives.mlir")
DISTIR_RUN = Path(sys.executable).parent / "distir-run"


def run(capsys, *argv, backend="interpret"):
    """distir-run in-process (with ``--backend interpret`` unless told otherwise)."""
    args = [str(a) for a in argv]
    if backend is not None:
        args += ["--backend", backend]
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------------------
# Success and --compare
# --------------------------------------------------------------------------------------

PRIMITIVE_PAIRS = [
    ("all_reduce", "all_reduce_as_primitives"),
    ("reduce_scatter_all_gather", "reduce_scatter_all_gather_as_primitives"),
    ("all_reduce", "reduce_scatter_all_gather"),
    ("all_reduce", "reduce_broadcast"),
]


@pytest.mark.parametrize("a,b", PRIMITIVE_PAIRS)
def test_primitive_pairs_agree(capsys, a, b):
    code, out, err = run(capsys, PRIMITIVES, "--func", a, "--compare-func", b, "--ranks", 4)
    assert code == 0, err
    assert f"@{a} on 4 rank(s), backend interpret" in out
    assert "result0: 64x8xf32 on @world [replicated] -> 64x8 float32" in out
    assert "results agree (max abs diff 0, tolerance" in out


def test_outputs_follow_the_npz_convention(capsys, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 64, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, _, err = run(capsys, PRIMITIVES, "--func", "reduce_broadcast", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert code == 0, err
    with np.load(tmp_path / "out.npz") as out:
        assert out.files == ["result0"]
        np.testing.assert_allclose(out["result0"], x.sum(0), rtol=1e-5, atol=1e-6)
    code, _, err = run(capsys, PRIMITIVES, "--func", "all_to_all", "--inputs", tmp_path / "in2.npz", "--ranks", 4)
    assert code == 1 and "in2.npz: no such file" in err


def test_stdin_and_seed(capsys, tmp_path, monkeypatch):
    import io

    text = (EXAMPLES / "sgd.mlir").read_bytes()
    outs = []
    for seed in (3, 3, 4):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
        code, out, err = run(capsys, "-", "--ranks", 2, "--seed", seed, "--outputs", tmp_path / f"o{len(outs)}.npz")
        assert code == 0, err
        outs.append(np.load(tmp_path / f"o{len(outs)}.npz")["result0"])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])


def test_missing_inputs_are_random_with_a_note(capsys, tmp_path):
    src = EXAMPLES / "sgd.mlir"
    np.savez(tmp_path / "in.npz", lr=np.array(0.5, np.float32))
    code, _, err = run(capsys, src, "--ranks", 2, "--inputs", tmp_path / "in.npz")
    assert code == 0
    assert "has no array for 'g', 'p', 'm', 'mu': drawn at random (--seed 0)" in err


def test_compare_other_file(capsys, tmp_path):
    hier = (EXAMPLES / "hierarchical_allreduce.mlir").read_text()
    # The same function names, one of them computing something else.
    other = hier.replace("coll.all_reduce sum %x :", "coll.all_reduce max %x :")
    (tmp_path / "other.mlir").write_text(other)
    same = hier.replace("@flat(", "@flat_copy(").replace("@hierarchical(", "@flat(")
    (tmp_path / "same.mlir").write_text(same)
    src = EXAMPLES / "hierarchical_allreduce.mlir"
    code, out, err = run(capsys, src, "--func", "flat", "--compare", tmp_path / "same.mlir")
    assert code == 0, err
    assert "results agree" in out
    code, out, err = run(capsys, src, "--func", "flat", "--compare", tmp_path / "other.mlir")
    assert code == 2
    assert "distir-run: results differ: result0 differs at [" in err
    assert "tolerance" in err and f"[@flat vs {tmp_path / 'other.mlir'}:@flat]" in err
    code, out, err = run(capsys, src, "--func", "hierarchical", "--compare", tmp_path / "other.mlir", "--compare-func", "hierarchical")
    assert code == 0, err


def test_compare_mismatch_exits_2_from_the_console_script(tmp_path):
    text = Path(PRIMITIVES).read_text().replace("coll.reduce sum %x root 0", "coll.reduce max %x root 0")
    (tmp_path / "p.mlir").write_text(text)
    proc = subprocess.run(
        [str(DISTIR_RUN), str(tmp_path / "p.mlir"), "--func", "all_reduce", "--compare-func", "reduce_broadcast", "--ranks", "4", "--backend", "interpret"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert "results differ: result0 differs at" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bf16_round_trip(capsys, tmp_path):
    src = tmp_path / "b.mlir"
    src.write_text(
        """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<8xbf16, @world, [local]>) -> !dist.tensor<8xbf16, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<8xbf16, @world, [local]> -> !dist.tensor<8xbf16, @world, [replicated]>
  func.return %y : !dist.tensor<8xbf16, @world, [replicated]>
}"""
    )
    x = np.arange(16, dtype=np.float32).reshape(2, 8).astype(ml_dtypes.bfloat16)
    np.savez(tmp_path / "in.npz", x=x)
    code, _, err = run(capsys, src, "--ranks", 2, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert code == 0, err
    got = np.load(tmp_path / "out.npz")["result0"].view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), x.astype(np.float32).sum(0))


# --------------------------------------------------------------------------------------
# Bad inputs: exit 1 with a message naming the argument, what was expected and found
# --------------------------------------------------------------------------------------

SGD = EXAMPLES / "sgd.mlir"


def _npz(tmp_path, **arrays):
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "case,arrays,expect",
    [
        ("extra", {"gg": np.zeros((2, 1048576), np.float32)}, "array 'gg' matches no argument (arguments: g, p, m, lr, mu)"),
        ("shape", {"g": np.zeros(1048576, np.float32)}, "argument 'g' must have shape 2x1048576 (!dist.tensor<1048576xf32, @world, [local]> stacked over the ranks of its local axis 0 (2 ranks)), got 1048576"),
        ("dtype", {"p": np.zeros(1048576, np.float64)}, "argument 'p' must have dtype float32 (f32), got float64"),
        ("scalar", {"lr": np.zeros(1, np.float32)}, "argument 'lr' must have shape scalar (0-d) (a 0-d array (builtin scalar f32)), got 1"),
    ],
)
def test_bad_npz_arrays(capsys, tmp_path, case, arrays, expect):
    code, out, err = run(capsys, SGD, "--ranks", 2, "--inputs", _npz(tmp_path, **arrays))
    assert code == 1
    assert expect in err
    assert out == ""


@pytest.mark.parametrize(
    "argv,expect",
    [
        ([PRIMITIVES, "--func", "all_reduce", "--ranks", 2], "--ranks 2 does not fit mesh @world of shape [4]: the mesh has 4 ranks, the run has 2"),
        ([EXAMPLES / "pipeline_layer.mlir", "--ranks", 3], "--ranks 3 does not fit mesh @grid of shape [2, ?]"),
        ([EXAMPLES / "hierarchical_allreduce.mlir", "--func", "flat", "--ranks", 4], "--ranks 4 does not fit mesh @hw of shape [2, 4]"),
        ([PRIMITIVES], "the module has several functions (@all_reduce_as_primitives, @all_reduce,"),
        ([PRIMITIVES, "--func", "nope"], "no function @nope in the module (functions: @all_reduce_as_primitives,"),
        ([SGD], "give --ranks N: the program's meshes do not fix the rank count"),
        ([SGD, "--ranks", 0], "--ranks must be at least 1, got 0"),
        ([SGD, "--ranks", "two"], "argument --ranks: invalid int value: 'two'"),
        ([EXAMPLES / "nothing.mlir", "--ranks", 2], "cannot read"),
        ([PRIMITIVES, "--func", "all_reduce", "--compare-func", "all_to_all"], "cannot compare @all_reduce with @all_to_all: argument 0 differs: 'x' takes a 4x64x8 float32 array, 'x' a 64x8 float32 array"),
        ([PRIMITIVES, "--func", "all_reduce", "--compare-func", "missing"], "no function @missing in the module"),
    ],
)
def test_rejected_invocations(capsys, argv, expect):
    code, out, err = run(capsys, *argv)
    assert code == 1, err
    assert expect in err
    assert "Traceback" not in err


@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_a_function_without_body_is_rejected(capsys, tmp_path, backend):
    """A declaration, or a definition cut off before its body (what a truncated file
    parses to), is a diagnostic on every tool that runs or tunes it, not an internal error."""
    from distir.tools.tune import main as tune

    cut = tmp_path / "cut.mlir"
    cut.write_text("dist.mesh @world shape = [?]\nfunc.func @sgd(%g: !dist.tensor<64xf32, @world, [local]>)\n")
    code, out, err = run(capsys, cut, "--ranks", 2, backend=backend)
    assert code == 1 and "is a declaration without a body: nothing to run" in err and "Traceback" not in err
    assert tune([str(cut), "--ranks", "2", "--sizes", "64"]) == 1
    assert "is a declaration without a body" in capsys.readouterr().err


RESTACK = """dist.mesh @hw shape = [2, 2] axes = ["node", "gpu"]
{mesh}
func.func @f(%x: !dist.tensor<8xf32, {t}>) -> !dist.tensor<8xf32, @hw, [replicated, replicated]> {{
  %h = dist.remesh %x : !dist.tensor<8xf32, {t}> -> !dist.tensor<8xf32, @hw, [local, local]>
  %r = coll.all_reduce sum %h axes [0, 1] : !dist.tensor<8xf32, @hw, [local, local]> -> !dist.tensor<8xf32, @hw, [replicated, replicated]>
  func.return %r : !dist.tensor<8xf32, @hw, [replicated, replicated]>
}}
"""


def test_compare_accepts_the_same_blocks_stacked_by_a_view(capsys, tmp_path):
    """A ``local`` argument on the view ``[4]`` of a ``[2, 2]`` mesh takes a 4x8 array, the
    same argument on the root mesh a 2x2x8 one: the same blocks on the same ranks when the
    view flattens the root row-major, so ``--compare`` reshapes; a view in the other
    order holds the blocks on other ranks, and the signatures differ."""
    root = tmp_path / "root.mlir"
    root.write_text(RESTACK.format(mesh="", t="@hw, [local, local]"))
    for order, agrees in (("[[0, 1]]", True), ("[[1, 0]]", False)):
        view = tmp_path / f"view{order[3]}.mlir"
        view.write_text(RESTACK.format(mesh=f"dist.mesh @flat shape = [4] view @hw {order}", t="@flat, [local]"))
        code, out, err = run(capsys, view, "--ranks", 4, "--compare", root)
        if agrees:
            assert code == 0 and "results agree" in out, err
        else:
            assert code == 1 and "signatures differ" not in err and "argument 0 differs: 'x' takes a 4x8 float32 array, 'x' a 2x2x8" in err, err


def test_backend_choice(capsys):
    from distir.runtime import backend

    code, _, err = run(capsys, SGD, "--ranks", 2, backend="gpu")
    assert code == 1 and "unknown backend 'gpu' (choose from interpret, local, mpi, nccl)" in err
    assert backend.default_backend_name() == "local"
    code, out, err = run(capsys, SGD, "--ranks", 2, backend=None)
    assert code == 0 and "backend local" in out


def test_not_an_npz(capsys, tmp_path):
    (tmp_path / "x.npz").write_text("not a zip")
    code, _, err = run(capsys, SGD, "--ranks", 2, "--inputs", tmp_path / "x.npz")
    assert code == 1 and "not an npz (zip) archive" in err


def test_parse_and_verify_errors_are_located(capsys, tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text(
        """dist.mesh @world shape = [4]
func.func @f(%x: !dist.tensor<64xf32, @world, [replicated]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}"""
    )
    code, _, err = run(capsys, bad)
    assert code == 1
    assert f"{bad}:3:3" in err and "'coll.all_reduce' op operand must be local on axis 0, got replicated" in err
    bad.write_text("dist.mesh @world shape = [4]\nfunc.func @f( {")
    code, _, err = run(capsys, bad)
    assert code == 1 and f"{bad}:2:" in err


def test_runtime_error_names_the_op(capsys, tmp_path):
    src = tmp_path / "e.mlir"
    src.write_text(
        """dist.mesh @world shape = [?]
func.func @f(%t: !dist.tensor<4x2xf32, @world, [replicated]>, %i: !dist.tensor<2x2xi32, @world, [replicated]>) -> !dist.tensor<2x2xf32, @world, [replicated]> {
  %e = dist.embedding_bag %t, %i mode sum : (!dist.tensor<4x2xf32, @world, [replicated]>, !dist.tensor<2x2xi32, @world, [replicated]>) -> !dist.tensor<2x2xf32, @world, [replicated]>
  func.return %e : !dist.tensor<2x2xf32, @world, [replicated]>
}"""
    )
    code, _, err = run(capsys, src, "--ranks", 2, "--inputs", _npz(tmp_path, i=np.array([[0, 9], [1, 1]], np.int32)))
    assert code == 1
    assert "'dist.embedding_bag' op index 9 is out of range for a table of 4 rows" in err


# --------------------------------------------------------------------------------------
# The examples, at their own sizes (the largest also at test sizes: AT_TEST_SIZES)
# --------------------------------------------------------------------------------------

EXAMPLE_RANKS = {
    "adam": [1, 2, 4, 8],
    "sgd": [1, 2, 4, 8],
    "lamb": [1, 2, 4, 8],
    "megatron_attention": [1, 2, 4, 8],
    "megatron_mlp": [1, 2, 4, 8],
    "moe": [1, 2, 4, 8],
    "dlrm_embedding": [1, 2, 4, 8],
    "transformer_decode": [1, 2, 4, 8],
    "pipeline_layer": [2, 4, 8],
    "primitives": [4],
    "hierarchical_allreduce": [8],
    "mlp_step": [1],  # one device's program (distir-plan's input)
}
# Examples whose inputs do not depend on the rank count (no local arguments): their
# results must not depend on it either.
RANK_INDEPENDENT = {"megatron_attention", "megatron_mlp", "moe", "dlrm_embedding", "transformer_decode"}


def test_every_example_is_listed():
    files = {p.stem for p in EXAMPLES.glob("*.mlir")} - {"invalid"}
    assert files == set(EXAMPLE_RANKS)


AT_TEST_SIZES = {"megatron_attention", "pipeline_layer"}
"""Examples of hundreds of MiB per rank (a 2x2048x12288 f16 activation, 8x1024x3072
attention inputs): each runs at its own size on its first rank count and at the
runtime tests' sizes (``support/lowered.py``'s ``small_example``: the same ops,
placements and divisibility) on all of them, rather than at its own size on each (15 s
of paging at 8 ranks for one)."""


def _functions(name):
    from distir.dialects.context import parse_module
    from distir.runtime.npz import functions

    return [f.sym_name.data for f in functions(parse_module((EXAMPLES / f"{name}.mlir").read_text()))]


@pytest.mark.parametrize("name", sorted(EXAMPLE_RANKS))
def test_example_runs_on_every_allowed_rank_count(capsys, tmp_path, name):
    from support.lowered import small_example

    own = EXAMPLES / f"{name}.mlir"
    runs = [(own, ranks) for ranks in EXAMPLE_RANKS[name]]
    if name in AT_TEST_SIZES:
        small = tmp_path / f"{name}-small.mlir"
        small.write_text(small_example(name))
        runs = [(own, EXAMPLE_RANKS[name][0])] + [(small, ranks) for ranks in EXAMPLE_RANKS[name]]
    for func in _functions(name):
        reference: dict[Path, list] = {}
        for src, ranks in runs:
            out_path = tmp_path / f"{src.stem}-{func}-{ranks}.npz"
            code, out, err = run(capsys, src, "--ranks", ranks, "--func", func, "--outputs", out_path)
            assert code == 0, f"{src.name} @{func} on {ranks} ranks: {err}"
            assert f"@{func} on {ranks} rank(s), backend interpret" in out
            with np.load(out_path) as data:
                outputs = [data[k] for k in data.files]
            for o in outputs:
                assert np.isfinite(o.astype(np.float32)).all(), f"{src.name} @{func} on {ranks} ranks: non-finite output"
            if name in RANK_INDEPENDENT:
                if src not in reference:
                    reference[src] = outputs
                else:
                    c = compare_outputs(outputs, reference[src], f"{ranks} ranks", f"{EXAMPLE_RANKS[name][0]} rank(s)")
                    assert c, c.message
    for ranks in {1, 2, 4, 8} - set(EXAMPLE_RANKS[name]):
        code, _, err = run(capsys, own, "--ranks", ranks, "--func", _functions(name)[0])
        assert code == 1 and "does not fit mesh" in err
