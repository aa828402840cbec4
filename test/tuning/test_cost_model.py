"""The cost model on cases computed by hand: ring and tree alpha-beta, a hierarchical group
and groups sharing a NIC, a transfer between two ranks, an overlapped chain, the sizes
evaluated from one lowering, and CoCoNet's qualitative result for Adam on 256 GPUs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.lowering.pipeline import lower
from distir.passes.pipeline import apply_pipeline
from distir.tuning.collectives import collective_cost
from distir.tuning.cost_model import (
    ModelOptions,
    Protocol,
    Runtime,
    Scaling,
    predict,
    predict_program,
    prepare,
    reference_size,
)
from distir.tuning.sizes import at_size
from distir.tuning.topology import get_topology, parse_topology

# 2 nodes x 2 GPUs: NIC 10 GB/s and 5 us, GPU links 100 GB/s and 1 us.
TWO_BY_TWO = parse_topology(
    """
name = "two-by-two"
[[levels]]
name = "node"
cardinality = 2
bandwidth_GBps = 10.0
latency_us = 5.0
[[levels]]
name = "gpu"
cardinality = 2
bandwidth_GBps = 100.0
latency_us = 1.0
[device]
memory_bandwidth_GBps = 1000.0
peak_tflops = { f32 = 10.0, f16 = 10.0, bf16 = 10.0 }
"""
)
NO_LATENCY_TEXT = """
name = "flat"
[[levels]]
name = "gpu"
cardinality = 4
bandwidth_GBps = 100.0
latency_us = 0.0
[device]
memory_bandwidth_GBps = 1000.0
peak_tflops = { f32 = 1.0, f16 = 1.0, bf16 = 1.0 }
"""
NO_LATENCY = parse_topology(NO_LATENCY_TEXT)
FREE_HOST = Runtime(launch_s=0.0, device_s=0.0)
SIMPLE = Protocol("Simple", 1.0, 1.0)
RING = ModelOptions(protocols=(SIMPLE,), algorithms=("ring",), runtime=FREE_HOST)
TREE = ModelOptions(protocols=(SIMPLE,), algorithms=("tree",), tree_correction=False, runtime=FREE_HOST)
N = 1 << 20


def all_reduce(n: int = N, mesh: str = "[4]", axes: str = "", placements: tuple[str, str] = ("local", "replicated")) -> str:
    rank = mesh.count(",") + 1
    other = ", replicated" * (rank - 1) if rank > 1 else ""
    if rank > 1 and "axes [0]" in axes:
        pl_in, pl_out = f"[{placements[0]}, replicated]", f"[{placements[1]}, replicated]"
    elif rank > 1:
        pl_in, pl_out = f"[replicated, {placements[0]}]", f"[replicated, {placements[1]}]"
    else:
        pl_in, pl_out = f"[{placements[0]}{other}]", f"[{placements[1]}{other}]"
    ti = f"!dist.tensor<{n}xf32, @m, {pl_in}>"
    to = f"!dist.tensor<{n}xf32, @m, {pl_out}>"
    return (
        f"dist.mesh @m shape = {mesh}\n"
        f"func.func @f(%x: {ti}) -> {to} {{\n  %y = coll.all_reduce sum %x{axes} : {ti} -> {to}\n  func.return %y : {to}\n}}\n"
    )


def predicted(text: str, topology, ranks: int, options: ModelOptions, sizes=(N,)) -> np.ndarray:
    return predict_program(parse_module(text), topology, ranks, list(sizes), N, options)


def test_ring_all_reduce_pays_every_hop_and_the_nic():
    # ring 0-1-2-3-0 crosses gpu, node, gpu, node links: a chunk travels 3 of the 4 hops
    # (all but one node hop) in each of the two phases; the NIC carries 2*3/4 of the bytes
    t = predicted(all_reduce(), TWO_BY_TWO, 4, RING)[0]
    assert t == pytest.approx(2 * (1 + 5 + 1) * 1e-6 + 1.5 * 4 * N / 10e9, rel=1e-9)


def test_tree_all_reduce_pays_log_fan_in_per_level():
    # double binary tree: one level of fan-in 2 per level, up and down; each link in and
    # out of a node carries half the buffer per tree, up and down: 1.0 * bytes per NIC
    t = predicted(all_reduce(), TWO_BY_TWO, 4, TREE)[0]
    assert t == pytest.approx(2 * (5 + 1) * 1e-6 + 1.0 * 4 * N / 10e9, rel=1e-9)


def test_the_faster_algorithm_and_protocol_win_per_size():
    options = ModelOptions(protocols=(Protocol("LL", 0.25, 0.5), SIMPLE), runtime=FREE_HOST, tree_correction=False)
    small, large = predicted(all_reduce(), TWO_BY_TWO, 4, options, sizes=(64, 1 << 24))
    ring = lambda n, p: 2 * 7e-6 * p.latency + 1.5 * 4 * n / 10e9 / p.bandwidth  # noqa: E731
    tree = lambda n, p: 2 * 6e-6 * p.latency + 1.0 * 4 * n / 10e9 / p.bandwidth  # noqa: E731
    for n, got in ((64, small), (1 << 24, large)):
        want = min(f(n, p) for f in (ring, tree) for p in options.protocols)
        assert got == pytest.approx(want, rel=1e-9)


def test_a_group_inside_a_node_uses_only_gpu_links():
    text = all_reduce(mesh='[2, 2] axes = ["node", "gpu"]', axes=" axes [1]")
    t = predicted(text, TWO_BY_TWO, 4, RING)[0]
    # two concurrent groups (0,1) and (2,3): hops at 1 us, 2*1/2 of the bytes per link
    assert t == pytest.approx(2 * 1e-6 + 1.0 * 4 * N / 100e9, rel=1e-9)


def test_groups_across_nodes_share_the_nic():
    text = all_reduce(mesh='[2, 2] axes = ["node", "gpu"]', axes=" axes [0]")
    t = predicted(text, TWO_BY_TWO, 4, RING)[0]
    # groups (0,2) and (1,3) both cross the NIC of each node: twice the load
    assert t == pytest.approx(2 * 5e-6 + 2 * 1.0 * 4 * N / 10e9, rel=1e-9)


def test_a_send_costs_the_link_between_the_two_ranks():
    t_in = f"!dist.tensor<{N}xf32, @m, [at<0>]>"
    t_out = f"!dist.tensor<{N}xf32, @m, [at<1>]>"
    text = f"dist.mesh @m shape = [2]\nfunc.func @f(%x: {t_in}) -> {t_out} {{\n  %y = coll.send %x to 1 : {t_in} -> {t_out}\n  func.return %y : {t_out}\n}}\n"
    t = predicted(text, TWO_BY_TWO, 2, RING)[0]
    assert t == pytest.approx(1e-6 + 4 * N / 100e9, rel=1e-9)


MM = """
dist.mesh @m shape = [?]
func.func @f(%a: !dist.tensor<4096x1024xf32, @m, [sliced<1>]>, %w: !dist.tensor<1024x512xf32, @m, [sliced<0>]>)
    -> !dist.tensor<4096x512xf32, @m, [replicated]> {
  %y = dist.matmul %a, %w : (!dist.tensor<4096x1024xf32, @m, [sliced<1>]>, !dist.tensor<1024x512xf32, @m, [sliced<0>]>) -> !dist.tensor<4096x512xf32, @m, [local]>
  %s = coll.all_reduce sum %y : !dist.tensor<4096x512xf32, @m, [local]> -> !dist.tensor<4096x512xf32, @m, [replicated]>
  func.return %s : !dist.tensor<4096x512xf32, @m, [replicated]>
}
"""


def test_overlap_is_a_pipeline_over_chunks():
    options = ModelOptions(protocols=(SIMPLE,), algorithms=("ring",), runtime=FREE_HOST)
    serial = predict_program(parse_module(MM), NO_LATENCY, 4, [4096], 4096, options)[0]
    mm = 2 * 4096 * 256 * 512 / 1e12  # flops / peak (compute-bound at 1 TFLOP/s)
    ar = 2 * 3 / 4 * 4096 * 512 * 4 / 100e9
    assert serial == pytest.approx(mm + ar, rel=1e-6)
    chunked = apply_pipeline(parse_module(MM), "overlap{chunks=2 targets=y}")
    t = predict_program(chunked, NO_LATENCY, 4, [4096], 4096, options)[0]
    # chunk 0's matmul, then chunk 1's matmul alongside chunk 0's all-reduce, then the last
    assert t == pytest.approx(mm / 2 + max(mm / 2, ar / 2) + ar / 2, rel=1e-6)
    assert t < serial


def _pipeline(work: float, transfer: float, remote: int, own: int) -> float:
    """A compute stream running ``remote + own`` stages of ``work`` seconds, the
    ``remote`` first each followed by a ``transfer`` on the communication stream."""
    sent = 0.0
    for i in range(remote):
        sent = max((i + 1) * work, sent) + transfer
    return max((remote + own) * work, sent)


@pytest.mark.parametrize("tiles", [1, 2])
@pytest.mark.parametrize("topology", ["flat", "slow"])
def test_a_fused_tile_operator_is_a_pipeline_over_its_tiles(tiles, topology):
    topo = NO_LATENCY if topology == "flat" else parse_topology(NO_LATENCY_TEXT.replace("100.0", "0.5"))
    options = ModelOptions(protocols=(SIMPLE,), algorithms=("ring",), runtime=FREE_HOST)
    fused = apply_pipeline(parse_module(MM), f"overlap{{chunks={tiles} order=remote_first granularity=tile targets=y}}")
    t = predict_program(fused, topo, 4, [4096], 4096, options)[0]
    mm = 2 * 4096 * 256 * 512 / 1e12  # compute-bound at 1 TFLOP/s
    stages = 4 * tiles
    # every rank sends one tile to the rank at the same distance at once: one link each
    per_byte = collective_cost(topo, "send", [(r, (r + 1) % 4) for r in range(4)], "ring")[1]
    tile_bytes = 4096 * 512 * 4 / stages
    transfer = 2 * tile_bytes * per_byte  # an AllReduce tile: partial to its owner, reduced back
    want = _pipeline(mm / stages, transfer, 3 * tiles, tiles)
    assert t == pytest.approx(want, rel=1e-6)
    serial = predict_program(parse_module(MM), topo, 4, [4096], 4096, options)[0]
    if topology == "flat":
        assert t == pytest.approx(mm, rel=1e-6) and t < serial  # every transfer hidden
    else:
        assert t > mm + transfer  # transfer-bound: the transfers set the pace


def test_one_lowering_predicts_every_size():
    module = apply_pipeline(parse_module(open(_example("adam.mlir")).read()), "fuse-maps,split-allreduce,reorder-allgather,slice-state{targets=m,v},fuse-allreduce")
    topo = get_topology("dgx2", 2)
    sizes = [1 << 14, 1 << 20, 3 << 18]
    got = predict_program(module, topo, 32, sizes, 1048576)
    for s, g in zip(sizes, got):
        lowered = lower(at_size(module, 1048576, s), 32)
        alone = predict(prepare(lowered, "adam", topo, 32, Scaling(s, 1048583)), [s])[0]
        assert g == pytest.approx(alone, rel=1e-9)


def test_sizes_the_schedule_cannot_slice_are_not_predicted():
    module = apply_pipeline(parse_module(all_reduce(n=64, mesh="[?]")), "split-allreduce")
    got = predict_program(module, TWO_BY_TWO, 4, [64, 66, 6], 64)
    assert not math.isnan(got[0]) and math.isnan(got[1]) and math.isnan(got[2])


def test_reference_size_isolates_the_substituted_dim():
    d_ref, q = reference_size([1048576, 3072, 8], 256, 8)
    assert q > 1048576 and all(q % p for p in range(2, 100))
    assert d_ref % q == 0 and d_ref % (256 * 16) == 0 and d_ref % 8 == 0


def test_adam_on_256_gpus_follows_coconet():
    from distir.tuning.tuner import tune

    module = parse_module(open(_example("adam.mlir")).read())
    r = tune(module, 256, [1 << 10, 1 << 30], model=get_topology("dgx2", 16))
    assert r.best[1 << 10].startswith("AR-Adam")
    assert r.best[1 << 30].startswith("fuse(RS-Adam-AG)")


def _example(name: str) -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2] / "examples" / name)


# -- calibrated shared-memory machines ---------------------------------------------------
def _calibrated(write_allocate: bool = True):
    from support.machines import calibrated_local

    topo = calibrated_local(2)
    return topo if write_allocate else dataclasses.replace(topo, write_allocate=False)


GATHER = """
builtin.module {
  dist.mesh @world shape = [2]
  func.func @f(%p: memref<N2xf32>, %q: memref<Nxf32>) -> memref<N2xf32> {
    %s = rt.stream 0 : !rt.stream
    %c = rt.comm @world axes [0] : !rt.comm
    %r = rt.group_rank @world axes [0] SHIFT: index
    %b = rt.block %p, %r dim 0 count 2 : (memref<N2xf32>, index) -> memref<Nxf32>
    nccl.all_gather SEND, %p, %c, %s count N : (memref<Nxf32>, memref<N2xf32>, !rt.comm, !rt.stream) -> ()
    rt.stream_sync %s : !rt.stream -> ()
    func.return %p : memref<N2xf32>
  }
}
"""


def _gather_time(send: str, shift: str = "", n: int = 1024, backend: str = "local") -> float:
    text = GATHER.replace("SEND", send).replace("SHIFT", shift).replace("N2", str(2 * n)).replace("N", str(n))
    topo = dataclasses.replace(_calibrated(), backend=backend)
    prepared = prepare(parse_module(text), "f", topo, 2, Scaling(n, 2**61 - 1))
    return float(predict(prepared, [n])[0])


def test_an_in_place_all_gather_on_shared_memory_copies_only_the_peers_blocks():
    """The local backend copies every rank's block into every output; in place the
    rank's own block is already there: half the bytes of 2 ranks' out-of-place one."""
    out_of_place = _gather_time("%q")
    # the output's bytes at beta, 1.5x: blocks below the streaming size write-allocate
    assert out_of_place == pytest.approx(2 * 1024 * 4 * 1e-9 * 1.5)
    assert _gather_time("%b") == pytest.approx(out_of_place / 2)
    assert _gather_time("%b", shift="shift 1 ") == pytest.approx(out_of_place)  # the peer's block: not in place


def test_copy_collectives_are_charged_per_byte_of_a_streamed_copy():
    """The shared-memory backends copy an AllGather's blocks, a Broadcast's and a send's
    message with streaming stores from ``STREAM_FROM`` bytes on: 1x their bytes at the
    calibrated beta there, 1.5x below (``calibrate.fit`` fits beta the same way)."""
    from distir.runtime.bulk import STREAM_FROM

    large = STREAM_FROM // 4  # elements per block
    assert _gather_time("%q", n=large) == pytest.approx(2 * large * 4 * 1e-9)
    assert _gather_time("%q", n=large // 2) == pytest.approx(2 * (large // 2) * 4 * 1e-9 * 1.5)
    # a combined AllGather (a fused group of gathers) runs its gathers one by one: streamed
    fused = GATHER.replace("    nccl.all_gather", "    rt.fused {\n    nccl.all_gather").replace("-> ()\n", "-> ()\n    }\n", 1)
    text = fused.replace("SEND", "%q").replace("SHIFT", "").replace("N2", str(2 * large)).replace("N", str(large))
    assert "rt.fused" in text
    prepared = prepare(parse_module(text), "f", _calibrated(), 2, Scaling(large, 2**61 - 1))
    assert float(predict(prepared, [large])[0]) == pytest.approx(2 * large * 4 * 1e-9)
    # the mpi backend leaves its collectives to MPI: its bytes at beta whatever the size
    assert _gather_time("%q", n=1024, backend="mpi") == pytest.approx(2 * 1024 * 4 * 1e-9)


COPY = """
builtin.module {
  dist.mesh @world shape = [2]
  func.func @f(%a: memref<Nxf32>, %b: memref<Nxf32>) -> memref<Nxf32> {
    %s = rt.stream 0 : !rt.stream
    rt.copy %a, %b, %s : (memref<Nxf32>, memref<Nxf32>, !rt.stream) -> ()
    rt.stream_sync %s : !rt.stream -> ()
    func.return %b : memref<Nxf32>
  }
}
"""


@pytest.mark.parametrize("write_allocate", [True, False])
def test_large_copies_are_streamed_small_ones_write_allocate(write_allocate):
    from distir.runtime.bulk import STREAM_FROM

    def copy_time(n: int) -> float:
        prepared = prepare(parse_module(COPY.replace("N", str(n))), "f", _calibrated(write_allocate), 2, Scaling(n, 2**61 - 1))
        return float(predict(prepared, [n])[0])

    small, large = 1024, STREAM_FROM // 4
    assert copy_time(small) == pytest.approx(small * 4 * (3 if write_allocate else 2) * 1e-9)
    assert copy_time(large) == pytest.approx(large * 4 * 2 * 1e-9)  # read + streamed write


TRIAD = """
builtin.module {
  dist.mesh @world shape = [2]
  func.func @f(%a: memref<Nxf32>, %b: memref<Nxf32>) -> memref<Nxf32> {
    %s = rt.stream 0 : !rt.stream
    %c = rt.alloc : () -> memref<Nxf32>
    %h = rt.holds @world [WHERE] : i1
    scf.if %h {
      rt.launch @k(%a, %b, %c, %s) : (memref<Nxf32>, memref<Nxf32>, memref<Nxf32>, !rt.stream) -> ()
    }
    rt.stream_sync %s : !rt.stream -> ()
    func.return %c : memref<Nxf32>
  }
  rt.kernel @k shape [N] {
  ^bb0(%x: memref<Nxf32>, %y: memref<Nxf32>, %z: memref<Nxf32>, %i: index):
    %u = memref.load %x[%i] : memref<Nxf32>
    %v = memref.load %y[%i] : memref<Nxf32>
    %w = arith.addf %u, %v : f32
    memref.store %w, %z[%i] : memref<Nxf32>
  }
}
"""


@pytest.mark.parametrize("where, bandwidth", [("replicated", 1.0), ("at<0>", 1.5)])
def test_a_kernel_one_rank_runs_alone_gets_the_machines_memory(where, bandwidth):
    """Ranks of one machine share its memory: every rank streaming gets its share (1
    byte/ns here), rank 0 streaming alone what it can take alone (1.5)."""
    n = 1 << 20
    text = TRIAD.replace("WHERE", where).replace("N", str(n))
    prepared = prepare(parse_module(text), "f", _calibrated(), 2, Scaling(n, 2**61 - 1))
    moved = n * 4 * (2 + 2)  # two loads, one store to unread memory (write-allocate)
    assert float(predict(prepared, [n])[0]) == pytest.approx(moved / bandwidth * 1e-9)


def test_a_kernel_launch_costs_its_host_time_per_array_argument():
    """The ``local`` backend's launch looks at every argument (numba's dispatch, the
    alias check): on a calibrated runtime with ``argument_s``, a kernel over 8 arrays
    costs 6 arguments' host time more than one over 2 (the calibration's tiny kernels);
    views and other ops cost ``dispatch_s``, the launch itself ``launch_s``."""
    from distir.tuning.calibrate import kernels_program

    runtime = Runtime(launch_s=10e-6, dispatch_s=1e-6, synchronous=True, concurrent_streams=False, argument_s=3e-6)
    topo = dataclasses.replace(_calibrated(), runtime=runtime)

    def host(arrays: int) -> float:
        lowered = lower(parse_module(kernels_program(1, arrays)), 2)
        return float(predict(prepare(lowered, "kernels", topo, 2, Scaling(64, 2**61 - 1)), [64])[0])

    # the 64 elements' bytes and flops are the same per array at 1 byte per ns: taken out
    bytes_per_array = 64 * 4 * 1e-9
    assert host(8) - host(2) - 6 * bytes_per_array == pytest.approx(6 * 3e-6, rel=1e-6)
    assert host(2) - 3 * bytes_per_array == pytest.approx(10e-6 + 3 * 1e-6, rel=0.01)  # stream, alloc, sync
