"""distir programs as torch custom ops equal the same computation written in torch on
full tensors: the Megatron MLP block (tensor-parallel forward, ol(MM,fuse(RS-C-AG))) and
the decode step's GEMV + AllReduce (fused tile operator), eagerly on rank threads and,
under ``torchrun --nproc-per-node 2``, also inside ``torch.compile(fullgraph=True)`` with
inductor (the op stays one node: a graph break would fail ``fullgraph``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import torch_ops
from support.threads import on_threads, results

from distir.dialects.diagnostics import InputRejected
from distir.frameworks import pytorch as dp
from distir.runtime import step as steps

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_ops_equal_torch_on_threads(ranks):
    comms = steps.local_comms(ranks)
    for out in results(on_threads(ranks, lambda r: torch_ops.run_rank(r, ranks, comm=comms[r]))):
        assert out["mlp"] <= TOL and out["decode"] <= TOL, out


def test_op_is_registered_with_torch_library():
    (comm,) = steps.local_comms(1)
    f = dp.compile(torch_ops.decode_program(), pipeline=torch_ops.DECODE_PIPELINE, comm=comm)
    assert f.op._schema.name.startswith("distir::")
    args, _ = torch_ops.shards(0, 1)[1], None
    with pytest.raises(InputRejected, match="takes 4 arguments"):
        f(*args[:3])


def test_one_rank_inside_torch_compile():
    (comm,) = steps.local_comms(1)
    out = torch_ops.run_rank(0, 1, comm=comm, backend="inductor")
    assert all(v <= TOL for v in out.values()), out


@pytest.mark.mpi
def test_two_ranks_inside_torch_compile_under_torchrun(tmp_path):
    out = tmp_path / "ops.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "test")}
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2", str(ROOT / "test" / "support" / "torch_ops.py"), str(out), "inductor"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank_out in json.loads(out.read_text()):
        assert set(rank_out) == {"mlp", "decode", "mlp-compiled", "decode-compiled"}
        assert all(v <= TOL for v in rank_out.values()), rank_out


def test_ops_keep_working_as_torch_ops():
    """The op is an ordinary torch op: torch.library's opcheck passes for it."""
    (comm,) = steps.local_comms(1)
    f = dp.compile(torch_ops.decode_program(), pipeline=torch_ops.DECODE_PIPELINE, comm=comm)
    args = torch_ops.shards(0, 1)[1]
    torch.library.opcheck(f.op, (f.handle, *args), test_utils=("test_schema", "test_faketensor"))
