"""Programs whose sliced dims the ranks do not divide (blocks of ceil(s/n), the last
ranks holding fewer elements or none) on the lowered backends: ``local`` on 1, 3, 5 and 8
ranks (2, 6 and 10 for the 2-D mesh; the fused tile operators also on 2, 4, 6 and 7)
and ``mpi`` on 3 and 4 (one batched ``mpiexec`` job per rank count), each against the
reference interpreter. Together they cover every way the lowering lays such blocks out
(``lowering/padding.py``): padded buffers for reduce-scatter, all-gather and
all-to-all, the fused all-reduce computed in place into a padded argument (zero-copy
on ``local``), the rank's part of a padded block for a contracted matmul dim, an
embedding's rows and reductions, random numbers and iota at the rank's offset, nested
slicing whose outer blocks differ (``rt.pad_blocks``), and the operands and results of
the fused tile operators laid out padded (``fused_ops.tile_layout``)."""

from __future__ import annotations

import pytest
from support.runs import run_mpi_batch
from support.uneven_programs import PROGRAMS

from distir.runtime import equivalent

LOCAL_RANKS = [1, 3, 5, 8]


def _ranks(name: str, ranks: list[int]) -> list[int]:
    """The nested program's mesh is [2, ?]: even rank counts (10: outer blocks 6 and 5
    over 5 inner ranks, blocks of 2 and 1 that the padded ones do not line up with); the
    multi-axis one's is [2, 3] (a reduce-scatter over both axes nests over them: 2
    elements give blocks 1, 0, 0, 1, 0, 0, not 1, 1, 0, 0, 0, 0). The short-last-block
    one's is [3, ?]: 10 rows on 6 ranks are outer blocks 4, 4, 2 and inner ones 2, 2, 2,
    2, 1, 1, whose padded buffer (2 blocks of 2) is as long as the largest outer block,
    yet the last one's inner blocks sit at 0 and 1, not 0 and 2 (local and mpi gave
    zeros there); on 3 and 9 ranks the other layouts."""
    if name == "multi_axis":
        return [6]
    if name == "nested_short":
        return [6] if ranks == [3, 4] else [3, 6, 9]
    return [r for r in ranks if r % 2 == 0] if name == "nested" else ranks


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_local_equals_the_interpreter(name):
    text = PROGRAMS[name]
    for ranks in _ranks(name, [2, 6, 10] if name == "nested" else LOCAL_RANKS):
        got = equivalent(text, text, ranks, backend_a="interpret", backend_b="local", trials=1)
        assert got, f"{ranks} ranks: {got}"


TILE_PROGRAMS = sorted(name for name in PROGRAMS if name.startswith("tiles"))


@pytest.mark.parametrize("name", TILE_PROGRAMS)
def test_tile_operators_on_the_other_rank_counts(name):
    """The fused tile operators (a ragged last block: 13 rows over 2, 4, 6, 7 ranks
    give blocks of 7, 4, 3, 2 with the last ones shorter or empty; tile counts that do
    not divide a block) on the rank counts the test above leaves out."""
    text = PROGRAMS[name]
    for ranks in (2, 4, 6, 7):
        got = equivalent(text, text, ranks, backend_a="interpret", backend_b="local", trials=1)
        assert got, f"{ranks} ranks: {got}"


@pytest.fixture(scope="module")
def mpi_report(tmp_path_factory):
    jobs = [
        {"id": f"{name}-{ranks}", "text": text, "func": None, "ranks": ranks, "seed": 5}
        for name, text in PROGRAMS.items()
        for ranks in _ranks(name, [3, 4])
    ]
    return run_mpi_batch(jobs, tmp_path_factory.mktemp("uneven-mpi"))


@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_mpi_equals_the_interpreter(mpi_report, name):
    for ranks in _ranks(name, [3, 4]):
        entry = mpi_report[f"{name}-{ranks}"]
        assert entry["ok"], entry["message"]
