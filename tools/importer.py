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

import argparse
import sys
from collections.abc import Sequence

from xdsl.utils.exceptions import ParseError, VerifyException

from distir.dialects.frontend import decode_source
from distir.tools.diagnostics import InputRejected, argparse_error, distir_version, run_tool


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="distir-import", description="Import StableHLO + Shardy (JAX) or MLIR shard programs as partitioned dist/coll IR.")
    p.add_argument("file", metavar="FILE", help="the program (- for standard input)")
    p.add_argument("--from", dest="source", default="auto", choices=("sdy", "shard", "auto"), help="the source dialect (default: detected)")
    p.add_argument("-o", "--output", metavar="OUT", help="write the module to OUT (default: standard output)")
    p.add_argument("--remarks", action="store_true", help="print one line per inserted collective (standard error)")
    p.add_argument("--version", action="version", version=f"distir-import {distir_version()}")
    p.error = argparse_error("distir-import", p)  # type: ignore[method-assign]
    return p


def _import(argv: Sequence[str] | None) -> int:
    from distir.frontends.program import import_program

    args = build_parser().parse_args(argv)
    name = "<stdin>" if args.file == "-" else args.file
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else open(args.file, "rb").read()
    except OSError as e:
        raise InputRejected(f"distir-import: cannot read {args.file}: {e.strerror or e}") from None
    try:
        imported = import_program(decode_source(data, name), name, args.source)
    except (ParseError, VerifyException) as e:
        raise InputRejected(str(e)) from None
    if args.remarks:
        for line in imported.remark_lines():
            print(line, file=sys.stderr)
    text = str(imported.module) + "\n"
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as e:
            raise InputRejected(f"distir-import: cannot write {args.output}: {e.strerror or e}") from None
    else:
        sys.stdout.write(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-import", lambda: _import(argv))


if __name__ == "__main__":
    sys.exit(main())
