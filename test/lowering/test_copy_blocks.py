"""Strided blocks packed for a collective (``lower-collectives``' ``pack`` / ``unpack``):
one ``rt.copy_blocks`` whatever the group size, so lowering a schedule is O(1) per
collective, not O(ranks). The programs of ``copy-blocks.mlir`` and Megatron's MLP
split along dim 1 compute on the ``local`` backend what the reference interpreter
computes on 1, 2, 4 and 8 ranks (``mpi``: 2 and 4); the host copy equals block by block
copies, on strided buffers and on buffers in pieces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.lowered import small_example
from support.runs import agree_on_local, run_mpi_batch

from distir.dialects.context import parse_module
from distir.lowering.pipeline import lower
from distir.passes.pipeline import apply_pipeline
from distir.runtime.host import HostDevice
from distir.runtime.scattered import ScatteredArray

HERE = Path(__file__).resolve().parent
LIT = (HERE / "copy-blocks.mlir").read_text()
MLP = (HERE.parents[1] / "examples" / "megatron_mlp.mlir").read_text()
DIM1 = {
    "RS-AG dim 1": "split-allreduce{dim=1 targets=sum}",
    "ol(MM,RS,AG) dim 1": "split-allreduce{dim=1 targets=sum},overlap{chunks=2 targets=o}",
    "ol(MM,RS,C,AG) dim 1": "split-allreduce{dim=1 targets=sum},reorder-allgather{targets=sum_ag},overlap{chunks=2 targets=o}",
}


def rt_ops(module) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in module.walk():
        if op.dialect_name() in ("rt", "nccl"):
            counts[op.name] = counts.get(op.name, 0) + 1
    return counts


# ------------------------------------------------------------------ complexity


def test_a_strided_reduce_scatter_lowers_to_as_many_ops_on_8_as_on_64_ranks():
    few, many = (rt_ops(lower(parse_module(LIT), n)) for n in (8, 64))
    assert few == many
    assert few["rt.copy_blocks"] == 5  # @strided: 2 packs, 1 unpack; @overlap_dim2: 1 pack per chunk
    assert "rt.copy" not in few


@pytest.mark.parametrize("pipeline", list(DIM1.values()), ids=list(DIM1))
def test_megatron_split_along_dim_1_lowers_to_as_many_ops_on_16_as_on_256_ranks(pipeline):
    module = apply_pipeline(parse_module(MLP), pipeline)
    few, many = (rt_ops(lower(module, n)) for n in (16, 256))
    assert few == many
    assert few["rt.copy_blocks"] >= 2


# ------------------------------------------------------------------ execution


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("func", ["strided", "overlap_dim2"])
def test_lit_cases_run_as_interpreted(func, ranks):
    agree_on_local(parse_module(LIT), func, ranks)


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("pipeline", list(DIM1.values()), ids=list(DIM1))
def test_megatron_split_along_dim_1_runs_as_interpreted(pipeline, ranks):
    agree_on_local(apply_pipeline(parse_module(small_example("megatron_mlp")), pipeline), "mlp", ranks)


@pytest.mark.mpi
def test_mpi_runs_the_packed_collectives_as_interpreted(tmp_path):
    jobs = [{"id": f"{f}-{n}", "text": LIT, "func": f, "ranks": n, "seed": 2} for f in ("strided", "overlap_dim2") for n in (2, 4)]
    mlp = small_example("megatron_mlp")
    jobs += [
        {"id": f"{name}-{n}", "text": str(apply_pipeline(parse_module(mlp), p)), "func": "mlp", "ranks": n, "seed": 2}
        for name, p in DIM1.items()
        for n in (2, 4)
    ]
    report = run_mpi_batch(jobs, tmp_path)
    bad = {k: v["message"] for k, v in report.items() if not v["ok"]}
    assert not bad
    assert len(report) == len(jobs)


# ------------------------------------------------------------------ the copy itself


class _Now:
    def submit(self, fn):
        fn()


def _by_blocks(src, dst, a: int, b: int, n: int) -> np.ndarray:
    out = dst.copy()
    dev = HostDevice()
    for j in range(n):
        blk = dev.block(out, j, b, n)
        blk[...] = dev.block(src, j, a, n).reshape(blk.shape)
    return out


@pytest.mark.parametrize(
    ("src_shape", "dst_shape", "a", "b", "n"),
    [
        ((6, 8), (4, 6, 2), 1, 0, 4),  # pack dim 1
        ((4, 6, 2), (6, 8), 0, 1, 4),  # unpack into dim 1
        ((2, 6, 9), (3, 2, 2, 9), 1, 0, 3),
        ((3, 4, 6), (4, 18), 2, 1, 2),  # blocks of different shapes, same count
        ((12,), (3, 4), 0, 0, 3),
    ],
)
def test_host_copy_blocks_equals_block_by_block_copies(src_shape, dst_shape, a, b, n):
    rng = np.random.default_rng(0)
    src = rng.random(src_shape).astype(np.float32)
    # strided operands: every other element of larger buffers
    big_src = np.zeros((*src_shape[:-1], 2 * src_shape[-1]), np.float32)
    big_src[..., ::2] = src
    big_dst = np.full((*dst_shape[:-1], 2 * dst_shape[-1]), -1.0, np.float32)
    dst = big_dst[..., ::2]
    want = _by_blocks(src, np.full(dst_shape, -1.0, np.float32), a, b, n)
    HostDevice().copy_blocks(big_src[..., ::2], dst, a, b, n, _Now())
    assert np.array_equal(dst, want)
    assert np.all(big_dst[..., 1::2] == -1.0)  # nothing written between the elements


def test_host_copy_blocks_from_pieces():
    src = np.arange(12, dtype=np.float32)
    dst = np.zeros((3, 4), np.float32)
    HostDevice().copy_blocks(ScatteredArray([src[:5], src[5:]]), dst, 0, 0, 3, _Now())
    assert np.array_equal(dst, src.reshape(3, 4))

