"""``distir-import``: programs from JAX (StableHLO + Shardy) and MLIR's ``shard`` dialect
as dist/coll IR (DESIGN §5).

    distir-import FILE|- [--from sdy|shard|auto] [-o OUT] [--remarks]

Reads ``jax.jit(f).lower(*args).as_text()`` output (StableHLO with ``sdy`` shardings) or
MLIR ``shard`` text, partitions it (every value placed, collectives inserted; see
``frontends/partition.py``) and prints the dist/coll module. ``--remarks`` prints one line
per inserted collective to standard error, located at the source op that needed it.
The imported function keeps its name (``main`` for JAX) and argument names (``%arg0``,
...), so ``distir-run --func main --inputs in.npz`` takes the same logical inputs as JAX.
Exit codes: 0 success, 1 the input was rejected (a located diagnostic), 3 internal error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from distir.tools.diagnostics import InputRejected, make_parser, read_input, run_tool, write_output


def build_parser():
    p = make_parser("distir-import", "Import StableHLO + Shardy (JAX) or MLIR shard programs as partitioned dist/coll IR.")
    p.add_argument("file", metavar="FILE", help="the program (- for standard input)")
    p.add_argument("--from", dest="source", default="auto", choices=("sdy", "shard", "auto"), help="the source dialect (default: detected)")
    p.add_argument("-o", "--output", metavar="OUT", help="write the module to OUT (default: standard output)")
    p.add_argument("--remarks", action="store_true", help="print one line per inserted collective (standard error)")
    return p


def _import(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from xdsl.utils.exceptions import ParseError, VerifyException

    from distir.dialects.frontend import decode_source
    from distir.frontends.program import import_program

    name = "<stdin>" if args.file == "-" else args.file
    data = read_input(args.file, "distir-import")
    try:
        imported = import_program(decode_source(data, name), name, args.source)
    except (ParseError, VerifyException) as e:
        raise InputRejected(str(e)) from None
    if args.remarks:
        for line in imported.remark_lines():
            print(line, file=sys.stderr)
    write_output("distir-import", args.output, str(imported.module) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-import", lambda: _import(argv))


if __name__ == "__main__":
    sys.exit(main())
