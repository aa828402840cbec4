"""Manual computations over some of the mesh axes (``shard_map(.., axis_names={..})``,
``sdy.manual_computation`` with ``manual_axes`` a subset): the body is per device on the
manual axes and global on the others, which ``partition`` places as it places the rest
of the program. Each program equals JAX's result; the free axis stays partitioned (the
batch stays sliced over ``dp``: no collective over it is inserted)."""

from __future__ import annotations

import pytest
from oracle import assert_matches, assert_rejected, load

from distir.frontends.program import import_program
from distir.runtime import interpret
from distir.runtime.local import run_local

PROGRAMS = {"partial_tp": 4, "pipeline_4": 4, "pipeline_8": 8}


@pytest.mark.parametrize("backend", ["interpret", "local"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_partly_manual_program_computes_what_jax_computes(jax_dir, name, backend):
    text, inputs, want = load(jax_dir, name)
    module = import_program(text, f"{name}.mlir").module
    run = interpret if backend == "interpret" else run_local
    assert_matches(run(module, "main", inputs, ranks=PROGRAMS[name]), want, f"{name} on {backend}")


def _collectives(module) -> list[tuple[str, tuple[int, ...]]]:
    return [(op.name, tuple(op.axes)) for op in module.walk() if op.name.startswith("coll.")]


def test_free_axis_stays_partitioned_in_hand_written_tensor_parallelism(jax_dir):
    """psum over tp is the body's one collective; dp slices the batch through the body
    (the matmuls run on [sliced<0>, local] operands) and nothing moves over dp."""
    text, _, _ = load(jax_dir, "partial_tp")
    imported = import_program(text, "partial_tp.mlir")
    assert _collectives(imported.module) == [("coll.all_reduce", (1,))]
    assert imported.remarks == []
    matmuls = [op for op in imported.module.walk() if op.name == "dist.matmul"]
    assert [str(op.lhs.type.get_placements()[0]) for op in matmuls] == ["sliced<0>", "sliced<0>"]


def test_pipeline_sends_activations_between_stages_and_keeps_the_batch_sliced(jax_dir):
    """Four ticks of the 2-stage pipeline: four permutes over pp (stage 0 -> 1), the final
    psum over pp, and no collective over dp."""
    text, _, _ = load(jax_dir, "pipeline_8")
    imported = import_program(text, "pipeline_8.mlir")
    colls = _collectives(imported.module)
    assert colls.count(("coll.permute", (1,))) == 4
    assert colls[-1] == ("coll.all_reduce", (1,))
    assert all(axes == (1,) for _, axes in colls)
    assert imported.remarks == []


BODY = """
sdy.mesh @mesh = <["dp"=2, "tp"=2]>
func.func @main(%arg0: tensor<8x16xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"dp"}}, {{"tp"}}]>}}) -> tensor<8x16xf32> {{
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{?}}, {{"tp", ?}}]>] out_shardings=[<@mesh, [{{?}}, {{"tp", ?}}]>] manual_axes={{"tp"}} (%arg1: tensor<8x8xf32>) {{
    {body}
    sdy.return %1 : tensor<8x8xf32>
  }} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}}
"""


def test_constraint_in_the_body_places_the_free_axes():
    """A constraint inside the body slices dim 1 of each device's block over dp there."""
    text = BODY.format(body='%1 = sdy.sharding_constraint %arg1 <@mesh, [{}, {"dp"}]> : tensor<8x8xf32>')
    module = import_program(text, "c.mlir").module
    import numpy as np

    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(interpret(module, "main", {"arg0": x}, ranks=4)[0], x)
    placed = [[str(p) for p in op.results[0].type.get_placements()] for op in module.walk() if op.name.startswith(("coll.", "dist.take_slice"))]
    assert ["sliced<1>", "local"] in placed, placed


def test_collective_over_a_free_axis_is_a_diagnostic():
    body = '%1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, use_global_device_ids}> ({\n    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n      %s = stablehlo.add %a, %b : tensor<f32>\n      stablehlo.return %s : tensor<f32>\n    }) : (tensor<8x8xf32>) -> tensor<8x8xf32>'
    assert_rejected(BODY.format(body=body), r"5:10\n.*'stablehlo.all_reduce' is a collective over dp, which the manual computation leaves automatic")


def test_constraint_naming_a_manual_axis_is_a_diagnostic():
    body = '%1 = sdy.sharding_constraint %arg1 <@mesh, [{"tp"}, {}]> : tensor<8x8xf32>'
    assert_rejected(BODY.format(body=body), r"5:10\n.*'sdy.sharding_constraint' in a manual computation names its manual axis \"tp\"")
