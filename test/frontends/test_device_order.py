"""Meshes whose ``device_ids`` are not ``0, 1, ...`` and permutations of replicas
(``sdy-device-order.mlir``, ``sdy-replicas.mlir``), after Shardy's executable tests
``sdy_collective_permute_without_self_loops`` and ``..._cross_replica``; expected values
written by hand from the device order.

A value's block at mesh position k (row-major) is distir's rank k; on a mesh with
``device_ids`` it is held by device ``device_ids[k]``, the id ``partition_id`` gives there
and that ``replica_groups`` and ``source_target_pairs`` name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from oracle import assert_rejected

from distir.frontends.program import import_program
from distir.runtime import interpret, run_function
from distir.runtime.local import run_local

HERE = Path(__file__).parent
DEVICE_ORDER = (HERE / "sdy-device-order.mlir").read_text()
REPLICAS = (HERE / "sdy-replicas.mlir").read_text()
B_IDS = [1, 2, 3, 0]  # mesh @b


@pytest.fixture(scope="module")
def device_order():
    return import_program(DEVICE_ORDER, "sdy-device-order.mlir").module


def run(module, func, inputs, backend):
    return (interpret if backend == "interpret" else run_local)(module, func, inputs, ranks=4)


def test_permute_between_device_orders_moves_each_block_to_its_new_device(device_order):
    """Shardy's test without self loops: [1, 2, 3, 4] on mesh @a, then on @b (device ids
    1, 2, 3, 0): device d holds [4, 1, 2, 3][d] afterwards; the logical value is kept."""
    x = np.array([1, 2, 3, 4], dtype=np.int32)
    ex = run_function(device_order, "between", {"arg0": x}, ranks=4)
    by_device = {B_IDS[k]: ex.results[0].buffers[k] for k in range(4)}
    for d, want in enumerate([4, 1, 2, 3]):
        np.testing.assert_array_equal(by_device[d], [want], err_msg=f"device {d}")
    np.testing.assert_array_equal(ex.outputs[0], x)
    np.testing.assert_array_equal(run_local(device_order, "between", {"arg0": x}, ranks=4)[0], x)


@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_manual_computation_on_a_reversed_mesh(device_order, backend):
    """device_ids = [3, 2, 1, 0]: position p is device 3 - p. Each device adds its id,
    sends to the next device id (position p receives from position p + 1) and gathers
    the devices 3, 2, 1, 0 in that order (the logical value)."""
    t = np.arange(16, dtype=np.float32).reshape(8, 2)
    blocks = [t[2 * p : 2 * p + 2] + (3 - p) for p in range(4)]
    want_next = np.concatenate([blocks[(p + 1) % 4] for p in range(4)])
    want_half = np.concatenate([t[4:6]] * 4)
    got = run(device_order, "reversed", {"arg0": t}, backend)
    np.testing.assert_array_equal(got[0], want_next)
    np.testing.assert_array_equal(got[1], want_half)


@pytest.mark.parametrize("backend", ["interpret", "local"])
def test_permute_of_replicas(backend):
    """num_partitions = 1, num_replicas = 4: the pairs name the mesh's devices; each
    device sends its block to the previous one."""
    module = import_program(REPLICAS, "sdy-replicas.mlir").module
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(run(module, "ring", {"arg0": x}, backend)[0], np.roll(x, -2))


def test_permute_of_one_replica_per_device_keeps_or_clears():
    """num_replicas = 1: each device is its own group; [[0, 0]] keeps the value, no pair
    gives zeros."""
    text = REPLICAS.replace("num_partitions = 1 : i32, mhlo.num_replicas = 4", "num_partitions = 4 : i32, mhlo.num_replicas = 1")
    x = np.arange(8, dtype=np.float32)
    keep = text.replace("dense<[[0, 3], [1, 0], [2, 1], [3, 2]]> : tensor<4x2xi64>", "dense<[[0, 0]]> : tensor<1x2xi64>")
    np.testing.assert_array_equal(interpret(import_program(keep, "keep.mlir").module, "ring", {"arg0": x}, ranks=4)[0], x)
    clear = text.replace("dense<[[0, 3], [1, 0], [2, 1], [3, 2]]> : tensor<4x2xi64>", "dense<> : tensor<0x2xi64>")
    np.testing.assert_array_equal(interpret(import_program(clear, "clear.mlir").module, "ring", {"arg0": x}, ranks=4)[0], 0 * x)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_rejections():
    permute = line_of(REPLICAS, '"stablehlo.collective_permute"')
    between = line_of(DEVICE_ORDER, "func.func @between(%arg0")
    # replicas and partitions both several: the pairs' meaning depends on the replica
    assert_rejected(
        REPLICAS.replace("num_partitions = 1 : i32, mhlo.num_replicas = 4", "num_partitions = 2 : i32, mhlo.num_replicas = 2"),
        rf"{permute}:12\b.*num_replicas = 2, num_partitions = 2",
    )
    assert_rejected(
        REPLICAS.replace(" attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32}", ""),
        rf"{permute}:12\b.*permutes replicas",
    )
    # device ids that are not a permutation of the devices
    assert_rejected(
        DEVICE_ORDER.replace("device_ids=[1, 2, 3, 0]", "device_ids=[1, 2, 3, 3]"),
        rf"{line_of(DEVICE_ORDER, 'device_ids=[1, 2, 3, 0]')}:\d+\b.*each of the mesh's 4 devices",
    )
    # partial sums cannot follow their devices from one order to another
    bad = DEVICE_ORDER.replace(
        '#sdy.sharding<@a, [{"x"}]>}) -> (tensor<4xi32> {sdy.sharding = #sdy.sharding<@b',
        '#sdy.sharding<@a, [{}], unreduced={"x"}>}) -> (tensor<4xi32> {sdy.sharding = #sdy.sharding<@b',
    )
    assert_rejected(bad, rf"{between}:59\b.*unreduced axes in a function whose meshes differ in device order")
    # meshes of different axes in one function
    assert_rejected(
        DEVICE_ORDER.replace('sdy.mesh @b = <["x"=4]', 'sdy.mesh @b = <["y"=4]'), rf"{between}:3\b.*uses meshes of different axes"
    )
