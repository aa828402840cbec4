"""``distir-opt``: parse, verify, transform and print distir IR.

A thin wrapper over xDSL's opt driver that registers the distir dialects and passes and
turns every rejected input into a diagnostic and an exit code (DESIGN §5):
0 success, 1 input rejected (parse, verify, bad option or pass request), 3 internal
error (a distir bug; please report it). ``--verify-diagnostics`` prints the diagnostics
of each ``--split-input-file`` chunk to stdout and exits 0, so that they can be checked
with FileCheck.

The input goes through distir's front end (``dialects/frontend.py``: linear time and
bounded nesting for any text) and verifier (``dialects/verifier.py``: scopes, then every
op); the passes run under distir's pass manager (``passes/pipeline.run_passes``), which
re-verifies after each pass. ``--help`` and ``--list-passes`` list distir's passes with
their options (``--list-passes all`` adds xDSL's); an unknown pass or option name gets
the closest known one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from distir.tools.diagnostics import InputRejected, distir_version, run_tool


def _opt(argv: Sequence[str] | None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if "--version" in args:  # at once, without importing xDSL's driver
        from importlib.metadata import version

        print(f"distir-opt {distir_version()} (xdsl {version('xdsl')})")
        return 0
    from xdsl.utils.exceptions import DiagnosticException, ParseError, PassFailedException

    from distir.tools.opt_main import DistirOptMain

    tool = DistirOptMain(description="distir optimizer driver: parse, verify, transform and print distir IR", args=argv)
    try:
        tool.run()
    except (ParseError, DiagnosticException, PassFailedException) as e:
        raise InputRejected(str(e)) from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-opt", lambda: _opt(argv))


if __name__ == "__main__":
    sys.exit(main())
