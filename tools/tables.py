"""Plain-text tables of the tools (rich's layout, no escape codes): the pass list of
``distir-opt --list-passes``, the matrices of ``distir-synth`` (``distir-tune``'s tables
use rich the same way, with their own columns)."""

from __future__ import annotations

from collections.abc import Sequence


def plain_table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> list[str]:
    """The lines of a table of strings: columns left-aligned, two spaces apart, never
    wrapped, no trailing blanks; ``header`` (when given) is the first line."""
    import io

    from rich.console import Console
    from rich.table import Table

    columns = len(header) if header is not None else max((len(r) for r in rows), default=0)
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=header is not None, header_style=None)
    for i in range(columns):
        table.add_column(header[i] if header is not None else "", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    out = io.StringIO()
    Console(file=out, width=100_000, color_system=None, force_terminal=False, soft_wrap=False, highlight=False, emoji=False, markup=False).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]
