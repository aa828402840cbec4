"""What a tool wrote to stderr, less its progress lines.

Off a terminal, ``distir-tune`` and ``distir-plan`` print one line every few seconds of
wall time while they work (``distir-plan: scheduling and predicting the best: 1 of 2
(6 s)``: a pipe or a log still shows that the search is alive). How many such lines a run
prints depends on the machine's load, so a test that asserts "one line of diagnostic"
counts the lines that remain without them."""

from __future__ import annotations

import re

PROGRESS = re.compile(r"^distir-[a-z]+: [^:\n]+: \d+( of \d+)? \(\d+ s\)$")


def without_progress(err: str) -> str:
    """``err`` without the progress lines (every other line kept, in order)."""
    return "".join(line for line in err.splitlines(keepends=True) if not PROGRESS.match(line.rstrip("\n")))
