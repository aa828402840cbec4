"""distir programs as torch custom ops (``distir.frameworks.pytorch.compile``) against the
same computation written in torch on full tensors: the Megatron MLP block (tensor
parallel forward, schedule ol(MM,fuse(RS-C-AG))) and the decode step's GEMV + AllReduce
(the fused-operator paper's fused tile operator).

    torchrun --nproc-per-node 2 test/support/torch_ops.py OUT.json BACKEND

checks both programs eagerly and under ``torch.compile(fullgraph=True, backend=BACKEND)``
on every rank and writes rank 0's largest differences.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from distir.examples.pytorch import train_gpt as T

ROOT = Path(__file__).resolve().parents[2]

MLP_PIPELINE = "split-allreduce{dim=1 targets=sum},reorder-allgather{targets=sum_ag},fuse-allreduce{targets=sum_rs},overlap{order=ring targets=o,out}"
DECODE_PIPELINE = "overlap{order=remote_first granularity=tile targets=sum}"


def mlp_program() -> str:
    """examples/megatron_mlp.mlir at 2x8x32 (hidden 128), dropout off (inference)."""
    text = (ROOT / "examples" / "megatron_mlp.mlir").read_text()
    for a, b in [("4x512x1024", "2x8x32"), ("4x512x4096", "2x8x128"), ("1024x4096", "32x128"), ("4096x1024", "128x32"),
                 ("tensor<4096xf32", "tensor<128xf32"), ("tensor<1024xf32", "tensor<32xf32"), ("p 0.1", "p 0.0")]:
        text = text.replace(a, b)
    return text


def decode_program() -> str:
    """examples/transformer_decode.mlir at 4x256 -> 4x64."""
    text = (ROOT / "examples" / "transformer_decode.mlir").read_text()
    for a, b in [("4x8192", "4x256"), ("8192x2048", "256x64"), ("4x2048", "4x64"), ("tensor<2048xf32", "tensor<64xf32")]:
        text = text.replace(a, b)
    return text


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mlp = (torch.randn(2, 8, 32, generator=g), torch.randn(32, 128, generator=g) * 0.1, torch.randn(128, generator=g) * 0.1,
           torch.randn(128, 32, generator=g) * 0.1, torch.randn(32, generator=g))
    dec = (torch.randn(4, 256, generator=g), torch.randn(256, 64, generator=g) * 0.1, torch.randn(64, generator=g), torch.randn(4, 64, generator=g))
    return mlp, dec


def mlp_torch(x, w1, b1, w2, b2):
    return x + (F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2)


def decode_torch(act, w2, b2, x):
    return act @ w2 + b2 + x


def shards(rank: int, ranks: int):
    """This rank's buffers of both programs (column-sliced w1/b1, row-sliced w2; the
    decode step's activation sliced on its columns, w2 on its rows)."""
    (x, w1, b1, w2, b2), (act, dw2, db2, dx) = inputs()
    k, j = 128 // ranks, 256 // ranks
    c = lambda t: t.contiguous()  # noqa: E731
    mlp = (x, c(w1[:, rank * k : (rank + 1) * k]), c(b1[rank * k : (rank + 1) * k]), c(w2[rank * k : (rank + 1) * k]), b2)
    dec = (c(act[:, rank * j : (rank + 1) * j]), c(dw2[rank * j : (rank + 1) * j]), db2, dx)
    return mlp, dec


def expected():
    mlp, dec = inputs()
    return mlp_torch(*mlp), decode_torch(*dec)


def run_rank(rank: int, ranks: int, comm=None, backend: str | None = None) -> dict:
    """Both programs on this rank, eagerly and (with ``backend``) under torch.compile:
    the largest difference from the torch computation on full tensors."""
    from distir.frameworks import pytorch as dp

    mlp_args, dec_args = shards(rank, ranks)
    want_mlp, want_dec = expected()
    mlp = dp.compile(mlp_program(), "mlp", pipeline=MLP_PIPELINE, comm=comm)
    dec = dp.compile(decode_program(), None, pipeline=DECODE_PIPELINE, comm=comm)
    out = {"mlp": float((mlp(*mlp_args) - want_mlp).abs().max()), "decode": float((dec(*dec_args) - want_dec).abs().max())}
    if backend:
        cm = torch.compile(lambda *a: mlp(*a) * 2.0, fullgraph=True, backend=backend)
        cd = torch.compile(lambda *a: dec(*a) * 2.0, fullgraph=True, backend=backend)
        out["mlp-compiled"] = float((cm(*mlp_args) - 2.0 * want_mlp).abs().max())
        out["decode-compiled"] = float((cd(*dec_args) - 2.0 * want_dec).abs().max())
    return out


def main(argv: list[str]) -> int:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    out = run_rank(dist.get_rank(), dist.get_world_size(), backend=argv[1])
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, out)
    if dist.get_rank() == 0:
        Path(argv[0]).write_text(json.dumps(every))
    dist.barrier()  # as train_gpt.py: no rank tears gloo down while a peer still exchanges
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # The run is over (results written, peers past the barrier, gloo torn down): leave
    # without the interpreter's teardown of torch's C++ worker threads, which once
    # aborted a finished rank under CI's load (``train_gpt.leave``)
    T.leave(main(sys.argv[1:]))
