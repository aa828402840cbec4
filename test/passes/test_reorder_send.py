"""reorder-send keeps the meaning: only a slice crosses the pipeline stages."""

from support.rewrites import PIPELINE_RANKS, check, uneven


def test_send_slices():
    check("pipeline", "split-allreduce{dim=1},reorder-send", contains=["%recv_s = coll.send %sum_rs to 1"], ranks=PIPELINE_RANKS)


def test_send_slices_then_computations():
    check(
        "pipeline",
        "split-allreduce{dim=1},reorder-send,reorder-allgather",
        contains=["%out = coll.all_gather %out_s axes [1]"],
        ranks=PIPELINE_RANKS,
    )


def test_uneven_blocks():
    """The pipeline on prime dims (13 columns, 7 rows) over 3 and 5 ranks per stage:
    blocks of ceil(s/n), the last ones shorter."""
    check(uneven("pipeline"), "split-allreduce{dim=1},reorder-send", contains=["%recv_s = coll.send %sum_rs to 1"], ranks=(6, 10))
