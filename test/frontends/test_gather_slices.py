"""``stablehlo.gather`` (row lookups), ``dynamic_slice`` and the per-device values of
``partition_id`` (``frontends/device_values.py``): what the importer computes, and the
diagnostics outside the subset. JAX's own lookups are in ``test_jax_oracle.py``
(``take_rows``, ``take_bags``); the export's forms in ``test_export_roundtrip.py``."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import assert_rejected

from distir.frontends import device_values
from distir.frontends.program import import_program
from distir.runtime import interpret
from distir.runtime.local import run_local

MESH = 'sdy.mesh @m = <["x"=4]>\n'


def program(body: str, args: str, results: str) -> str:
    return MESH + f"func.func @main({args}) -> ({results}) {{\n{body}\n}}\n"


GATHER_COLUMNS = program(
    """  %r = "stablehlo.gather"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 6, 1>}> : (tensor<6x5xf32>, tensor<3xi32>) -> tensor<6x3xf32>
  return %r : tensor<6x3xf32>""",
    "%arg0: tensor<6x5xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>}, %arg1: tensor<3xi32> {sdy.sharding = #sdy.sharding<@m, [{}]>}",
    "tensor<6x3xf32>",
)


@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_gather_of_columns_clamps_its_indices(backend):
    """``jnp.take(t, ids, axis=1)``: the looked-up dim is the last, the offset dim first;
    an index past the end reads the last column, a negative one the first."""
    t = np.arange(30, dtype=np.float32).reshape(6, 5)
    ids = np.array([4, 9, -2], dtype=np.int32)
    module = import_program(GATHER_COLUMNS, "cols.mlir").module
    run = interpret if backend == "interpret" else run_local
    np.testing.assert_array_equal(run(module, "main", {"arg0": t, "arg1": ids}, ranks=4)[0], t[:, np.clip(ids, 0, 4)])


def test_gathers_outside_the_subset_are_located_diagnostics():
    two_dims = GATHER_COLUMNS.replace(
        "collapsed_slice_dims = [1], start_index_map = [1]", "collapsed_slice_dims = [0, 1], start_index_map = [0, 1]"
    )
    assert_rejected(two_dims, r"3:8\b.*this form of 'stablehlo.gather' is not supported \(distir reads row lookups")
    window = GATHER_COLUMNS.replace("slice_sizes = array<i64: 6, 1>", "slice_sizes = array<i64: 2, 1>")
    assert_rejected(window, r"3:8\b.*this form of 'stablehlo.gather'")


DYNAMIC = program(
    """  %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{}, {}]>] out_shardings=[<@m, [{"x"}, {}]>] manual_axes={"x"} (%x: tensor<8x3xf32>) {
    %pid = stablehlo.partition_id : tensor<ui32>
    %c = stablehlo.convert %pid : (tensor<ui32>) -> tensor<i32>
    %two = stablehlo.constant dense<2> : tensor<i32>
    %start = stablehlo.multiply %c, %two : tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %blk = stablehlo.dynamic_slice %x, %start, %one, sizes = [2, 2] : (tensor<8x3xf32>, tensor<i32>, tensor<i32>) -> tensor<2x2xf32>
    sdy.return %blk : tensor<2x2xf32>
  } : (tensor<8x3xf32>) -> tensor<8x2xf32>
  return %0 : tensor<8x2xf32>""",
    "%arg0: tensor<8x3xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>}",
    'tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}',
)


@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_dynamic_slice_at_the_devices_block(backend):
    """Device d slices rows 2d:2d+2 (a take_slice over x) and columns 1:3 (a constant)."""
    module = import_program(DYNAMIC, "dyn.mlir").module
    assert [op.name for op in module.walk() if op.name == "dist.take_slice"] == ["dist.take_slice"]
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    run = interpret if backend == "interpret" else run_local
    np.testing.assert_array_equal(run(module, "main", {"arg0": x}, ranks=4)[0], x[:, 1:3])


def test_dynamic_slice_at_other_per_device_offsets_is_a_diagnostic():
    odd = DYNAMIC.replace("%two = stablehlo.constant dense<2> : tensor<i32>", "%two = stablehlo.constant dense<1> : tensor<i32>")
    assert_rejected(odd, r"9:12\b.*starts dim 0 at \[0, 1, 2, 3\] on the devices")
    computed = DYNAMIC.replace(
        "%blk = stablehlo.dynamic_slice %x, %start,",
        "%s = stablehlo.slice %x [0:1, 0:1] : (tensor<8x3xf32>) -> tensor<1x1xf32>\n    %t = stablehlo.reshape %s : (tensor<1x1xf32>) -> tensor<f32>\n    %u = stablehlo.convert %t : (tensor<f32>) -> tensor<i32>\n    %blk = stablehlo.dynamic_slice %x, %u,",
    )
    assert_rejected(computed, r"12:40\b.*must be an integer scalar known at import time")
    # partition_id's ui32 is read (as i32's bits); a type distir does not compute on is not
    f8 = DYNAMIC.replace(
        "%start = stablehlo.multiply %c, %two : tensor<i32>",
        "%start = stablehlo.multiply %c, %two : tensor<i32>\n    %e = stablehlo.convert %pid : (tensor<ui32>) -> tensor<f8E4M3FN>",
    )
    assert_rejected(f8, r"8:53\b.*element type 'f8E4M3FN' is not supported \(supported: .*\bi64, ui8, ui16, ui32, ui64\)")


def test_device_values_follow_stablehlo_integer_semantics():
    assert device_values.wrap(-1, "ui32") == 2**32 - 1
    assert device_values.wrap(2**31, "i32") == -(2**31)
    assert device_values.elementwise("divide", [(-7, 7), (2,)], "i32") == (-3, 3)  # toward zero
    assert device_values.elementwise("remainder", [(-7, 7), (2,)], "i32") == (-1, 1)  # the dividend's sign
    assert device_values.elementwise("subtract", [(0,), (1,)], "ui32") == (2**32 - 1,)
    assert device_values.elementwise("shift_right_logical", [(-8,), (1,)], "i32") == (2**31 - 4,)
    assert device_values.convert(3.7, "f32", "i32") == 3
    with pytest.raises(device_values.FoldError):
        device_values.elementwise("divide", [(1,), (0,)], "i32")


def test_affine_forms_of_device_values():
    # coordinate on the inner axis of a 2x2 mesh, times 8, plus 1
    assert device_values.affine([1, 9, 1, 9], [2, 2]) == (1, [0, 8])
    assert device_values.affine([3.0, 2.0, 1.0, 0.0], [4]) == (3, [-1])
    assert device_values.affine([0, 5, 1, 2], [4]) is None
