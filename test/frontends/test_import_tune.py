"""The tuner on an imported program: the Megatron MLP written in JAX at the example's
shapes (B=4, S=512, H=1024, 16-way tensor parallelism; ``jax-tp-mlp-megatron.mlir`` is
``jax.jit(f).lower(...).as_text()``), imported, has the schedules of
``examples/megatron_mlp.mlir`` and the cost model (``--model dgx2``) ranks them the same.

The full ``distir-tune --model dgx2 --ranks 16`` of both files picks
``MM-C-fused(MM+RS)-fuse(C)-AG [1 remote_first tiles, dim 2]`` (docs/frontends.md); this
test predicts the contenders only, to stay fast."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from distir.dialects.context import parse_module
from distir.frontends.program import import_program
from distir.tuning.cost_model import predict_program
from distir.tuning.explore import explore
from distir.tuning.sizes import choose_dim
from distir.tuning.topology import get_topology

HERE = Path(__file__).parent
EXAMPLE = HERE.parents[1] / "examples" / "megatron_mlp.mlir"
WINNER = "MM-C-fused(MM+RS)-fuse(C)-AG [1 remote_first tiles, dim 2]"
CONTENDERS = [
    "MM-C-MM-AR-C",
    "MM-C-MM-RS-AG-C [dim 1]",
    "MM-C-MM-fuse(RS-C-AG) [dim 1]",
    "MM-C-ol(MM,AR)-C [4 ring]",
    "MM-C-ol(MM,RS,C,AG) [4 ring, dim 2]",
    WINNER,
    "MM-C-fused(MM+RS)-fuse(C)-AG [2 remote_first tiles, dim 2]",
]


def predictions(module) -> dict[str, float]:
    node = get_topology("dgx2", 1)
    d = choose_dim(module, None)
    ex = explore(module)
    out = {}
    for c in ex.candidates:
        if c.name in CONTENDERS and c.name not in out:
            out[c.name] = float(predict_program(c.module, node, 16, [d], d)[0])
    return out


@pytest.fixture(scope="module")
def both():
    example = parse_module(EXAMPLE.read_text())
    imported = import_program((HERE / "jax-tp-mlp-megatron.mlir").read_text(), "jax-tp-mlp-megatron.mlir").module
    return predictions(example), predictions(imported)


def test_imported_program_has_the_examples_schedules(both):
    example, imported = both
    assert sorted(example) == sorted(CONTENDERS)
    assert sorted(imported) == sorted(CONTENDERS)


def test_same_winner_as_the_example(both):
    example, imported = both
    assert all(math.isfinite(t) for t in [*example.values(), *imported.values()])
    assert min(example, key=example.get) == WINNER
    assert min(imported, key=imported.get) == WINNER
    # and the same order of the contenders
    assert sorted(example, key=example.get) == sorted(imported, key=imported.get)
