"""Sizes: the --sizes syntax, choosing and substituting the dim, reduced shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected
from distir.tuning.sizes import at_size, choose_dim, format_size, parse_sizes, program_dims, reduced, substitute

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_parse_sizes():
    assert parse_sizes("2^10..2^13") == [1024, 2048, 4096, 8192]
    assert parse_sizes("2^10..2^30:10") == [1 << 10, 1 << 20, 1 << 30]
    assert parse_sizes("8,16, 2^5") == [8, 16, 32]
    assert parse_sizes("1048576") == [1048576]


@pytest.mark.parametrize(
    "spec,message",
    [
        ("", "empty"),
        ("2^10..2^5", "first <= last"),
        ("1000..2^20", "powers of two"),
        ("8,x", "expected a positive integer"),
        ("8,,16", "empty item"),
        ("0", "positive"),
        (",".join(str(i) for i in range(1, 70)), "at most"),
        ("2^99", "too large"),
    ],
)
def test_parse_sizes_errors(spec, message):
    with pytest.raises(InputRejected, match=message):
        parse_sizes(spec)


def test_format_size():
    assert format_size(1 << 20) == "2^20" and format_size(1000) == "1000" and format_size(1) == "1"


def test_dims_and_substitution():
    m = parse_module((EXAMPLES / "megatron_attention.mlir").read_text())
    assert set(program_dims(m)) == {8, 1024, 3072}
    assert choose_dim(m, None) == 3072 and choose_dim(m, 8) == 8
    with pytest.raises(InputRejected, match="no tensor of the program has a dimension of size 5"):
        choose_dim(m, 5)
    b16 = at_size(m, 8, 16)
    b16.verify()
    assert "16x1024x3072xf16" in str(b16) and "8x1024" not in str(b16)
    assert "8x1024x3072xf16" in str(m)  # the original is left alone
    # all at once: 1024 -> 3072 and 3072 -> 1024 swap, nothing is replaced twice
    swapped = substitute(m, {1024: 3072, 3072: 1024})
    assert "8x3072x1024xf16" in str(swapped) and "1024x1024xf16" in str(swapped)


def test_reduced_keeps_divisibility_and_equality():
    m = parse_module((EXAMPLES / "pipeline_layer.mlir").read_text())
    small = reduced(m, 64)
    small.verify()
    assert set(program_dims(small)) == {2, 64}
