"""The NCCL call sequence each rank issues (op, count, datatype, reduction, root or peer,
communicator, stream), recorded by ``RecordingComm`` on 2 and 4 ranks: the calls the
``nccl`` backend makes, checked without a GPU (the executor issues the same calls
whatever the device). The recorded run also executes, and its results are checked
against the interpreter."""

from __future__ import annotations

import pytest
from support.lowered import schedules
from support.runs import record

from distir.dialects.context import parse_module

WORLD = "dist.mesh @world shape = [?]\n"


def split(r: int, color: int = 0, comm: int = 1) -> str:
    return f"split color={color} key={r} -> comm{comm}"


@pytest.mark.parametrize("n", [2, 4])
def test_all_reduce(n):
    text = WORLD + """
func.func @f(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce avg %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}"""
    assert record(text, n) == [[split(r), "all_reduce avg 64xfloat32 comm1 stream0"] for r in range(n)]


@pytest.mark.parametrize("n", [2, 4])
def test_reduce_scatter_and_all_gather_on_dim_1(n):
    """Blocks along dim 1 are packed/unpacked by copies; NCCL sees contiguous counts."""
    text = WORLD + """
func.func @f(%x: !dist.tensor<4x8xf16, @world, [local]>) -> !dist.tensor<4x8xf16, @world, [replicated]> {
  %s = coll.reduce_scatter max %x dim 1 : !dist.tensor<4x8xf16, @world, [local]> -> !dist.tensor<4x8xf16, @world, [sliced<1>]>
  %y = coll.all_gather %s : !dist.tensor<4x8xf16, @world, [sliced<1>]> -> !dist.tensor<4x8xf16, @world, [replicated]>
  func.return %y : !dist.tensor<4x8xf16, @world, [replicated]>
}"""
    block = 32 // n
    want = [[split(r), f"reduce_scatter max {block}xfloat16 comm1 stream0", f"all_gather {block}xfloat16 comm1 stream0"] for r in range(n)]
    assert record(text, n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_reduce_and_broadcast(n):
    text = WORLD + """
func.func @f(%x: !dist.tensor<8xi32, @world, [local]>) -> !dist.tensor<8xi32, @world, [replicated]> {
  %r = coll.reduce sum %x root 1 : !dist.tensor<8xi32, @world, [local]> -> !dist.tensor<8xi32, @world, [at<1>]>
  %b = coll.broadcast %r : !dist.tensor<8xi32, @world, [at<1>]> -> !dist.tensor<8xi32, @world, [replicated]>
  func.return %b : !dist.tensor<8xi32, @world, [replicated]>
}"""
    want = [[split(r), "reduce sum 8xint32 root=1 comm1 stream0", "broadcast 8xint32 root=1 comm1 stream0"] for r in range(n)]
    assert record(text, n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_all_to_all_is_a_group_of_send_recv_pairs(n):
    text = WORLD + """
func.func @f(%x: !dist.tensor<8x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [sliced<1>]> {
  %y = coll.all_to_all %x dim 1 : !dist.tensor<8x8xf32, @world, [sliced<0>]> -> !dist.tensor<8x8xf32, @world, [sliced<1>]>
  func.return %y : !dist.tensor<8x8xf32, @world, [sliced<1>]>
}"""
    piece = 64 // (n * n)
    want = []
    for r in range(n):
        calls = [split(r), "group_start comm1 stream0"]
        for k in range(1, n):
            calls += [f"send {piece}xfloat32 peer={(r + k) % n} comm1 stream0", f"recv {piece}xfloat32 peer={(r - k) % n} comm1 stream0"]
        want.append(calls + ["group_end comm1 stream0"])
    assert record(text, n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_pipeline_send_and_grouped_p2p(n):
    """A 2-D mesh (stage x tensor-parallel): an all-reduce inside stage 0 on the tp
    communicator, then each stage-0 rank sends to its stage-1 peer on the pp one."""
    tp = n // 2
    text = """dist.mesh @grid shape = [2, ?] axes = ["pp", "tp"]
func.func @f(%x: !dist.tensor<16xf32, @grid, [at<0>, local]>) -> !dist.tensor<16xf32, @grid, [at<1>, replicated]> {
  %s = coll.all_reduce sum %x axes [1] : !dist.tensor<16xf32, @grid, [at<0>, local]> -> !dist.tensor<16xf32, @grid, [at<0>, replicated]>
  %y = coll.send %s to 1 axes [0] : !dist.tensor<16xf32, @grid, [at<0>, replicated]> -> !dist.tensor<16xf32, @grid, [at<1>, replicated]>
  func.return %y : !dist.tensor<16xf32, @grid, [at<1>, replicated]>
}"""
    want = []
    for r in range(n):
        pp, t = divmod(r, tp)
        calls = [f"split color={pp} key={t} -> comm1", f"split color={t} key={pp} -> comm2"]
        if pp == 0:
            calls += ["all_reduce sum 16xfloat32 comm1 stream0", "group_start comm2 stream0", "send 16xfloat32 peer=1 comm2 stream0", "group_end comm2 stream0"]
        else:
            calls += ["group_start comm2 stream0", "recv 16xfloat32 peer=0 comm2 stream0", "group_end comm2 stream0"]
        want.append(calls)
    got = record(text, n)
    # The tp all-reduce precedes the pp communicator's creation in program order on
    # stage 0; communicators are created by every rank, calls only by holders.
    assert [sorted(g) for g in got] == [sorted(w) for w in want]
    for r in range(n):
        assert [c for c in got[r] if not c.startswith("split")] == [c for c in want[r] if not c.startswith("split")]


@pytest.mark.parametrize("n", [2, 4])
def test_hierarchical_reduction_uses_one_communicator_per_axis(n):
    """ReduceScatter inside a node, AllReduce across nodes, AllGather inside a node."""
    gpus = n // 2
    text = f"""dist.mesh @hw shape = [2, {gpus}] axes = ["node", "gpu"]
dist.mesh @world shape = [{n}] view @hw [[0, 1]]
func.func @f(%x: !dist.tensor<16xf32, @world, [local]>) -> !dist.tensor<16xf32, @world, [replicated]> {{
  %h = dist.remesh %x : !dist.tensor<16xf32, @world, [local]> -> !dist.tensor<16xf32, @hw, [local, local]>
  %rs = coll.reduce_scatter sum %h dim 0 axes [1] : !dist.tensor<16xf32, @hw, [local, local]> -> !dist.tensor<16xf32, @hw, [local, sliced<0>]>
  %ar = coll.all_reduce sum %rs axes [0] : !dist.tensor<16xf32, @hw, [local, sliced<0>]> -> !dist.tensor<16xf32, @hw, [replicated, sliced<0>]>
  %ag = coll.all_gather %ar axes [1] : !dist.tensor<16xf32, @hw, [replicated, sliced<0>]> -> !dist.tensor<16xf32, @hw, [replicated, replicated]>
  %y = dist.remesh %ag : !dist.tensor<16xf32, @hw, [replicated, replicated]> -> !dist.tensor<16xf32, @world, [replicated]>
  func.return %y : !dist.tensor<16xf32, @world, [replicated]>
}}"""
    block = 16 // gpus
    want = []
    for r in range(n):
        node, gpu = divmod(r, gpus)
        want.append(
            [
                f"split color={node} key={gpu} -> comm1",
                f"reduce_scatter sum {block}xfloat32 comm1 stream0",
                f"split color={gpu} key={node} -> comm2",
                f"all_reduce sum {block}xfloat32 comm2 stream0",
                f"all_gather {block}xfloat32 comm1 stream0",
            ]
        )
    assert record(text, n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_fused_adam(n):
    """fuse(RS-Adam-AG) with ZeRO-sliced m, v: a reduce-scatter of the gradient and an
    in-place all-gather of the parameter slice; the kernel runs in between."""
    text = dict(schedules("adam"))["fuse(RS-C-AG)+sliced-state"]
    block = 64 // n
    want = [[split(r), f"reduce_scatter avg {block}xfloat32 comm1 stream0", f"all_gather {block}xfloat32 comm1 stream0"] for r in range(n)]
    assert record(text, n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_fused_lamb_completes_norms_inside(n):
    """fuse(RS-LAMB-AG): the norms of the slices are completed by scalar all-reduces
    inside the fused collective."""
    text = dict(schedules("lamb"))["fuse(RS-C-AG)"]
    calls = record(text, n)[0]
    assert calls[1].startswith("reduce_scatter avg")
    assert calls[-1].startswith("all_gather")
    assert sum(c.startswith("all_reduce sum 1xfloat32") for c in calls) == 2


@pytest.mark.parametrize("n", [2, 4])
def test_overlap_matmul_allreduce_in_chunks_on_stream_1(n):
    """ol(MM,AR) with 4 chunks: the matmul of each chunk on stream 0, its all-reduce on
    stream 1, in chunk order on every rank."""
    text = WORLD + """
func.func @f(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [replicated]> {
  %y = coll.overlap chunks 4 -> !dist.tensor<8x8xf32, @world, [replicated]> {
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.all_reduce sum %l : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [replicated]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [replicated]>
  }
  func.return %y : !dist.tensor<8x8xf32, @world, [replicated]>
}"""
    want = [[split(r)] + ["all_reduce sum 16xfloat32 comm1 stream1"] * 4 for r in range(n)]
    assert record(text, n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_overlapped_fused_allreduce_model_parallel(n):
    """ol(MM,fuse(RS-C-AG)) of the Megatron block: per chunk a reduce-scatter and an
    all-gather on stream 1."""
    text = dict(schedules("megatron_attention"))["ol(C,fuse(RS-C-AG))"]
    count = 4 * 8 * 16 // 2 // n
    want = [[split(r)] + [f"reduce_scatter sum {count}xfloat16 comm1 stream1", f"all_gather {count}xfloat16 comm1 stream1"] * 2 for r in range(n)]
    assert record(text, n) == want


def _p2p_program(order: str, n: int, collective: str) -> str:
    return WORLD + f"""
func.func @f(%x: !dist.tensor<8x16xf32, @world, [sliced<1>]>, %w: !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [{'replicated' if collective == 'all_reduce' else 'sliced<0>'}]> {{
  %y = coll.overlap chunks {n} order {order} -> !dist.tensor<8x8xf32, @world, [{'replicated' if collective == 'all_reduce' else 'sliced<0>'}]> {{
    %l = dist.matmul %x, %w : (!dist.tensor<8x16xf32, @world, [sliced<1>]>, !dist.tensor<16x8xf32, @world, [sliced<0>]>) -> !dist.tensor<8x8xf32, @world, [local]>
    %s = coll.{collective} sum %l{' dim 0' if collective == 'reduce_scatter' else ''} : !dist.tensor<8x8xf32, @world, [local]> -> !dist.tensor<8x8xf32, @world, [{'replicated' if collective == 'all_reduce' else 'sliced<0>'}]>
    coll.yield %s : !dist.tensor<8x8xf32, @world, [{'replicated' if collective == 'all_reduce' else 'sliced<0>'}]>
  }}
  func.return %y : !dist.tensor<8x8xf32, @world, [{'replicated' if collective == 'all_reduce' else 'sliced<0>'}]>
}}"""


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter"])
def test_remote_first_sends_each_block_to_its_owner(n, collective):
    """remote_first: step s computes the block of rank me+1+s and sends it there while
    receiving from me-1-s; the own block comes last; an all-reduce then all-gathers."""
    block = 64 // n
    want = []
    for r in range(n):
        calls = [split(r)]
        for s in range(n - 1):
            calls += [
                "group_start comm1 stream1",
                f"send {block}xfloat32 peer={(r + 1 + s) % n} comm1 stream1",
                f"recv {block}xfloat32 peer={(r - 1 - s) % n} comm1 stream1",
                "group_end comm1 stream1",
            ]
        if collective == "all_reduce":
            calls.append(f"all_gather {block}xfloat32 comm1 stream1")
        want.append(calls)
    assert record(_p2p_program("remote_first", n, collective), n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_ring_passes_accumulated_blocks_to_the_next_rank(n):
    """ring: every step sends the accumulated block to me+1 and receives from me-1."""
    block = 64 // n
    want = []
    for r in range(n):
        calls = [split(r)]
        for s in range(n - 1):
            calls += [
                "group_start comm1 stream1",
                f"send {block}xfloat32 peer={(r + 1) % n} comm1 stream1",
                f"recv {block}xfloat32 peer={(r - 1) % n} comm1 stream1",
                "group_end comm1 stream1",
            ]
        want.append(calls)
    assert record(_p2p_program("ring", n, "reduce_scatter"), n) == want


# ---- the fused tile operators (granularity tile): the message schedule the nccl backend
# sends (the GPU kernel computes every tile, stream 1 sends each when its flag is set)


def _tiled(text: str, order: str, tiles: int) -> str:
    from distir.passes.pipeline import apply_pipeline

    return str(apply_pipeline(parse_module(WORLD + text), f"overlap{{chunks={tiles} order={order} granularity=tile}}"))


A2A = """
func.func @f(%x: !dist.tensor<8x16x8xf32, @world, [sliced<0>]>, %w: !dist.tensor<8x8x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]> {
  %h = dist.matmul %x, %w : (!dist.tensor<8x16x8xf32, @world, [sliced<0>]>, !dist.tensor<8x8x16xf32, @world, [sliced<0>]>) -> !dist.tensor<8x16x16xf32, @world, [sliced<0>]>
  %b = coll.all_to_all %h dim 1 : !dist.tensor<8x16x16xf32, @world, [sliced<0>]> -> !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
  func.return %b : !dist.tensor<8x16x16xf32, @world, [sliced<1>]>
}"""

GEMV = """
func.func @f(%x: !dist.tensor<4x64xf32, @world, [sliced<1>]>, %w: !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<4x32xf32, @world, [replicated]> {
  %l = dist.matmul %x, %w : (!dist.tensor<4x64xf32, @world, [sliced<1>]>, !dist.tensor<64x32xf32, @world, [sliced<0>]>) -> !dist.tensor<4x32xf32, @world, [local]>
  %s = coll.all_reduce sum %l : !dist.tensor<4x32xf32, @world, [local]> -> !dist.tensor<4x32xf32, @world, [replicated]>
  func.return %s : !dist.tensor<4x32xf32, @world, [replicated]>
}"""


def _group(*calls: str) -> list[str]:
    return ["group_start comm1 stream1", *calls, "group_end comm1 stream1"]


@pytest.mark.parametrize("n", [2, 4])
def test_fused_gemm_all_to_all_sends_each_tile_remote_first(n):
    """GEMM + All-to-All, tiles of 2 experts' rows bound for one rank: for each group of
    experts, the tile bound for me+s goes out while the one from me-s comes in,
    destinations me+1, .., me-1 (own tiles need no call)."""
    count = (8 // n // 2) * (16 // n) * 16
    want = []
    for r in range(n):
        calls = [split(r)]
        for _ in range(2):
            for s in range(1, n):
                calls += _group(f"send {count}xfloat32 peer={(r + s) % n} comm1 stream1", f"recv {count}xfloat32 peer={(r - s) % n} comm1 stream1")
        want.append(calls)
    assert record(_tiled(A2A, "remote_first", 2), n) == want


def test_fused_all_to_all_natural_order_sends_to_rank_j_at_step_j():
    """The communication-oblivious order of the paper's Fig. 14: destination 0 first on
    every rank, so for each group of experts rank 0 receives first and sends last."""
    count = 2 * 8 * 16
    recv0, send0 = _group(f"recv {count}xfloat32 peer=1 comm1 stream1"), _group(f"send {count}xfloat32 peer=1 comm1 stream1")
    send1, recv1 = _group(f"send {count}xfloat32 peer=0 comm1 stream1"), _group(f"recv {count}xfloat32 peer=0 comm1 stream1")
    assert record(_tiled(A2A, "natural", 2), 2) == [[split(0)] + (recv0 + send0) * 2, [split(1)] + (send1 + recv1) * 2]


@pytest.mark.parametrize("n", [2, 4])
def test_fused_gemv_all_reduce_sends_partials_then_reduced_tiles(n):
    """GEMV + AllReduce, 2 tiles per owner (output columns): each partial tile goes to its
    owner (remote first), then each reduced tile goes to every peer."""
    count = 4 * (32 // n // 2)
    want = []
    for r in range(n):
        calls = [split(r)]
        for s in range(1, n):
            for _ in range(2):
                calls += _group(f"send {count}xfloat32 peer={(r + s) % n} comm1 stream1", f"recv {count}xfloat32 peer={(r - s) % n} comm1 stream1")
        peers = [j for j in range(n) if j != r]
        for _ in range(2):
            calls += _group(*[f"send {count}xfloat32 peer={j} comm1 stream1" for j in peers], *[f"recv {count}xfloat32 peer={j} comm1 stream1" for j in peers])
        want.append(calls)
    assert record(_tiled(GEMV, "remote_first", 2), n) == want


# ---- blocks of different sizes: NCCL's equal counts on padded buffers


@pytest.mark.parametrize("n", [2, 4])
def test_uneven_reduce_scatter_and_all_gather_count_the_padded_block(n):
    """13 rows over n ranks: blocks of ceil(13/n) rows, the last ranks' shorter (4 ranks:
    4, 4, 4, 1). Every rank calls NCCL with the largest block's count: the buffers are
    laid out padded, no call passes a rank-dependent count."""
    text = WORLD + """
func.func @f(%x: !dist.tensor<13x3xf32, @world, [local]>) -> !dist.tensor<13x3xf32, @world, [replicated]> {
  %s = coll.reduce_scatter sum %x dim 0 : !dist.tensor<13x3xf32, @world, [local]> -> !dist.tensor<13x3xf32, @world, [sliced<0>]>
  %y = coll.all_gather %s : !dist.tensor<13x3xf32, @world, [sliced<0>]> -> !dist.tensor<13x3xf32, @world, [replicated]>
  func.return %y : !dist.tensor<13x3xf32, @world, [replicated]>
}"""
    block = -(-13 // n) * 3
    want = [[split(r), f"reduce_scatter sum {block}xfloat32 comm1 stream0", f"all_gather {block}xfloat32 comm1 stream0"] for r in range(n)]
    assert record(text, n) == want


@pytest.mark.parametrize("n", [2, 4])
def test_uneven_all_to_all_sends_padded_pieces(n):
    """7 x 5 re-sliced from dim 0 to dim 1: every piece is the largest block of both
    dims (ceil(7/n) x ceil(5/n)), whatever the rank."""
    text = WORLD + """
func.func @f(%x: !dist.tensor<7x5xf32, @world, [sliced<0>]>) -> !dist.tensor<7x5xf32, @world, [sliced<1>]> {
  %y = coll.all_to_all %x dim 1 : !dist.tensor<7x5xf32, @world, [sliced<0>]> -> !dist.tensor<7x5xf32, @world, [sliced<1>]>
  func.return %y : !dist.tensor<7x5xf32, @world, [sliced<1>]>
}"""
    piece = -(-7 // n) * -(-5 // n)
    want = []
    for r in range(n):
        calls = [split(r), "group_start comm1 stream0"]
        for k in range(1, n):
            calls += [f"send {piece}xfloat32 peer={(r + k) % n} comm1 stream0", f"recv {piece}xfloat32 peer={(r - k) % n} comm1 stream0"]
        want.append(calls + ["group_end comm1 stream0"])
    assert record(text, n) == want


def test_one_rank_started_without_mpiexec_needs_no_mpi(monkeypatch):
    """The nccl backend's 1-rank world outside mpiexec is the process itself (no mpi4py
    import: a GPU image may have mpi4py without an MPI library); under mpiexec, or for
    more ranks, it is MPI's world."""
    import sys

    from distir.runtime import nccl

    for var in nccl.MPIEXEC_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # importing it would fail
    world = nccl._world(1)
    assert isinstance(world, nccl.OneProcess)
    assert (world.Get_rank(), world.Get_size(), world.bcast("uid"), world.gather("x")) == (0, 1, "uid", ["x"])
    with pytest.raises(ImportError):
        nccl._world(2)
    monkeypatch.setenv("PMI_SIZE", "1")
    with pytest.raises(ImportError):
        nccl._world(1)
