"""``distir-opt --emit sdy|mesh`` as users run it, and the facts both exporters share:
literals, meshes, the per-device view of values, diagnostics."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
from support import tools
from xdsl.utils.exceptions import DiagnosticException

from distir.dialects.context import parse_module
from distir.frontends.export import export_module, float_literal, literal
from distir.frontends.export_sdy import dense

ROOT = Path(__file__).parents[2]
ADAM = str(ROOT / "examples" / "adam.mlir")


def opt(*args, stdin=None):
    """distir-opt on ``args`` (through the tests' warm server: ``support/tools.py``)."""
    return subprocess.run([tools.path("distir-opt"), *args], input=stdin, capture_output=True, text=True)


@pytest.mark.parametrize("target,first", [("sdy", "module @distir attributes {mhlo.num_partitions = 4"), ("mesh", "module {")])
def test_emit_prints_the_target(target, first):
    r = opt(ADAM, "-p", "fix-mesh-sizes{ranks=4}", "--emit", target)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(first)
    assert "dist." not in r.stdout and "coll." not in r.stdout


def test_emit_needs_static_meshes():
    r = opt(ADAM, "--emit", "sdy")
    assert r.returncode == 1
    assert r.stderr.startswith(f"{ADAM}:4:1")
    assert "'dist.mesh' op mesh @world has shape [?]: StableHLO + sdy needs static mesh sizes" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_target_is_rejected():
    r = opt(ADAM, "--emit", "onnx")
    assert r.returncode == 1
    assert "invalid choice: 'onnx'" in r.stderr
    with pytest.raises(DiagnosticException, match="unknown export target 'onnx'"):
        export_module(parse_module(Path(ADAM).read_text()), "onnx")


def test_lowered_programs_are_rejected():
    lowered = opt(ADAM, "-p", "fix-mesh-sizes{ranks=2},lower-to-kernels,lower-collectives")
    assert lowered.returncode == 0, lowered.stderr
    r = opt("-", "--emit", "mesh", stdin=lowered.stdout)
    assert r.returncode == 1
    assert "cannot be exported to MLIR mesh" in r.stderr and "Traceback" not in r.stderr


def test_float_literals_parse_for_every_float_type():
    assert float_literal(0.5, "f32") == "0.5"
    assert float_literal(1e-5, "f32") == "1e-05"
    assert float_literal(math.inf, "f32") == "0x7F800000"
    assert float_literal(-math.inf, "f16") == "0xFC00"
    assert float_literal(math.inf, "bf16") == "0x7F80"
    assert float_literal(math.nan, "f64") == "0x7FF8000000000000"


def test_integer_literals_wrap_to_signed_for_arith():
    assert literal(0x9E3779B97F4A7C15, "i64") == str(0x9E3779B97F4A7C15 - (1 << 64))
    assert literal(255, "i8") == "-1"
    assert literal(1, "i1") == "true"
    assert dense([[0, 2], [1, 3]]) == "dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>"


def test_unnamed_axes_get_jax_style_names():
    src = "dist.mesh @m shape = [2, 2]\nfunc.func @f(%x: !dist.tensor<4x4xf32, @m, [sliced<0>, sliced<1>]>) -> !dist.tensor<4x4xf32, @m, [sliced<0>, sliced<1>]> {\n  func.return %x : !dist.tensor<4x4xf32, @m, [sliced<0>, sliced<1>]>\n}\n"
    text = export_module(parse_module(src), "sdy")
    assert 'sdy.mesh @m = <["x"=2, "y"=2]>' in text
    assert '#sdy.sharding<@m, [{"x"}, {"y"}]>' in text
    mesh = export_module(parse_module(src), "mesh")
    assert "tensor<2x2xf32> {mesh.sharding = #mesh.shard<@m, [[0], [1]]>}" in mesh


def _export_calls(kind: str, n: int, target: str) -> int:
    """Python calls made exporting the size-``n`` program (counted, never timed)."""
    from distir.dialects.context import make_context
    from distir.examples.optimizer_step import megatron_mlp_stack, optimizer_step, uniform_parameters
    from distir.lowering.fix_mesh_sizes import FixMeshSizesPass

    text = megatron_mlp_stack(n) if kind == "mlp" else optimizer_step(kind, uniform_parameters(n, 64), mixed=True)
    module = parse_module(text)
    FixMeshSizesPass(ranks=2).apply(make_context(), module)
    return _counted(lambda: export_module(module, target))[1]


def _counted(fn):
    """(``fn()``, the Python calls it made): work counted, never timed."""
    count = 0

    def counter(frame, event, arg):
        nonlocal count
        count += event == "call"

    sys.setprofile(counter)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, count


@pytest.mark.parametrize("target", ["sdy", "mesh"])
@pytest.mark.parametrize("kind", ["adam", "mlp"])
def test_export_work_grows_linearly(kind, target):
    small, large = _export_calls(kind, 12, target), _export_calls(kind, 48, target)
    assert large <= 4.6 * small, f"{large} calls for 48 units vs {small} for 12 ({large / small:.1f}x)"


def test_every_dist_and_coll_op_has_an_export_on_both_targets():
    """A new op of the dialects is exported, or the export would fail on the first program
    that uses it: every dist/coll op but the mesh and the region terminators has a handler,
    and each handler's target method is written by both exporters."""
    import inspect

    from xdsl.ir import Operation

    from distir.dialects import coll, dist
    from distir.frontends import export
    from distir.frontends.export_mesh import MeshExporter
    from distir.frontends.export_sdy import SdyExporter

    ops = {c for m in (dist, coll) for c in vars(m).values() if inspect.isclass(c) and issubclass(c, Operation) and str(getattr(c, "name", "")).startswith(("dist.", "coll."))}
    missing = sorted(c.name for c in ops - set(export._HANDLERS) - {dist.MeshOp, dist.YieldOp, coll.YieldOp})
    assert not missing, f"ops without an export: {missing}"
    own = {n: f for n, f in vars(export.Exporter).items() if inspect.isfunction(f) and f.__code__.co_filename == export.__file__}
    abstract = [n for n, f in own.items() if "raise NotImplementedError" in inspect.getsource(f)]
    assert {"scatter_add", "sort", "embedding_bag", "map"} <= set(abstract)
    for target in (SdyExporter, MeshExporter):
        unwritten = [n for n in abstract if getattr(target, n) is getattr(export.Exporter, n)]
        assert not unwritten, f"{target.__name__} does not write {unwritten}"


def test_padded_export_work_grows_linearly():
    """The sdy export of a data-parallel Adam step split into reduce_scatter + all_gather
    over tensors of 63 elements on 2 ranks (blocks of 32 and 31: every tensor padded,
    re-zeroed and cut): 12 vs 48 tensors, counted calls (3.9x measured)."""
    from distir.examples.optimizer_step import optimizer_step, uniform_parameters
    from distir.passes.pipeline import apply_pipeline

    def calls(n: int) -> int:
        module = parse_module(optimizer_step("adam", uniform_parameters(n, 63), mixed=True))
        apply_pipeline(module, "split-allreduce,fix-mesh-sizes{ranks=2}")
        text, count = _counted(lambda: export_module(module, "sdy"))
        assert text.count("stablehlo.concatenate") == n  # each tensor padded once
        return count

    small, large = calls(12), calls(48)
    assert large <= 4.6 * small, f"{large} calls for 48 tensors vs {small} for 12 ({large / small:.1f}x)"
