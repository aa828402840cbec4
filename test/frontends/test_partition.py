"""``partition``: every function of ``partition.mlir`` computes the same before (global
values, as imported) and after partitioning, on 1, 2, 4 and 8 ranks; the pass is
deterministic and leaves no unplaced value; what it cannot place is a located
diagnostic."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func

from distir.dialects.context import parse_module
from distir.dialects.dist import TensorType
from distir.dialects.placements import Unplaced
from distir.frontends.partition import PartitionError, partition_module
from distir.runtime import interpret
from distir.runtime.local import run_local

SOURCE = (Path(__file__).parent / "partition.mlir").read_text()
FUNCS = re.findall(r"^func\.func @(\w+)", SOURCE, re.M)


def program(ranks: int) -> str:
    """The file on ``ranks`` ranks: @m of that size, the 2-D @dt (whose tp axis the
    functions' per-device types fix at 2) as [ranks / 2, 2]."""
    text = SOURCE.replace('dist.mesh @m shape = [4]', f'dist.mesh @m shape = [{ranks}]')
    if ranks < 2:  # the functions on @dt (the file's end) need 2 ranks at least
        text = text[: text.index("dist.mesh @dt")]
    return text.replace("dist.mesh @dt shape = [2, 2]", f"dist.mesh @dt shape = [{ranks // 2}, 2]")


def funcs(ranks: int) -> list[str]:
    """The functions that run on ``ranks`` ranks."""
    return re.findall(r"^func\.func @(\w+)", program(ranks), re.M)


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_same_results_before_and_after(ranks):
    before = parse_module(program(ranks))
    after = parse_module(program(ranks))
    partition_module(after)
    after.verify()
    for name in funcs(ranks):
        want = interpret(before, name, None, ranks=ranks, seed=3)
        got = interpret(after, name, None, ranks=ranks, seed=3)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"@{name} on {ranks} ranks")
    if ranks == 4:
        for name in ("megatron_mlp", "all_to_all_for_a_change_of_dim", "partial_sums_through_transpose", "partial_sums_through_concat", "partly_manual"):
            want = interpret(before, name, None, ranks=ranks, seed=3)
            got = run_local(after, name, None, ranks=ranks, seed=3)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"@{name} on local")


def test_no_unplaced_value_is_left_and_output_is_deterministic():
    a, b = parse_module(program(4)), parse_module(program(4))
    ra, rb = partition_module(a), partition_module(b)
    assert str(a) == str(b)
    assert [r.text for r in ra] == [r.text for r in rb]
    for op in a.walk():
        for v in (*op.operands, *op.results):
            if isinstance(v.type, TensorType):
                assert not any(isinstance(p, Unplaced) for p in v.type.get_placements()), op.name


def test_one_remark_per_inserted_collective():
    m = parse_module(program(4))
    own = [op for op in m.walk() if op.name.startswith("coll.") or op.name == "dist.take_slice"]  # the program's own
    remarks = partition_module(m)
    inserted = [op for f in m.ops if isinstance(f, func.FuncOp) for op in f.body.block.ops if op.name.startswith("coll.") or op.name == "dist.take_slice"]
    assert len(remarks) == len(inserted) - len(own)
    assert any("coll.reduce_scatter sum over x (dim 0)" in r.text for r in remarks)
    assert any("coll.all_to_all over x (dim 0 -> 1)" in r.text for r in remarks)


UNREDUCED_RESULT = """\
dist.mesh @m shape = [4] axes = ["x"]
func.func @f(%x: !dist.tensor<64xf32, @m, [replicated]>) -> !dist.tensor<64xf32, @m, [local]> {
  %g = dist.drop %x : !dist.tensor<64xf32, @m, [replicated]> -> !dist.tensor<64xf32, @m, [unplaced]>
  %l = builtin.unrealized_conversion_cast %g : !dist.tensor<64xf32, @m, [unplaced]> to !dist.tensor<64xf32, @m, [local]>
  func.return %l : !dist.tensor<64xf32, @m, [local]>
}
"""


def test_a_whole_value_cannot_become_partial_sums():
    m = parse_module(UNREDUCED_RESULT)
    with pytest.raises(PartitionError, match=r"(?s)<string>:4:3.*cannot become partial sums"):
        partition_module(m)
