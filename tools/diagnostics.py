"""Exit codes and error reporting shared by the distir command-line tools.

0 success; 1 the input was rejected with a diagnostic; 2 a run's results disagree
(``--compare``); 3 internal error (a bug in distir: reported in one line with the place
it happened, never as a traceback). The error types themselves live at the bottom floor,
in ``dialects/diagnostics.py``.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

from distir.dialects.diagnostics import InputRejected, ResultsDiffer

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_MISMATCH = 2
EXIT_INTERNAL = 3


def distir_version() -> str:
    """The installed distir's version (``--version`` of every tool)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("distir")
    except PackageNotFoundError:
        return "(not installed)"


def run_tool(tool: str, body: Callable[[], int]) -> int:
    """Run a tool's body, mapping exceptions to messages on stderr and exit codes."""
    try:
        return body()
    except InputRejected as e:
        print(e, file=sys.stderr)
        return EXIT_REJECTED
    except ResultsDiffer as e:
        print(e, file=sys.stderr)
        return EXIT_MISMATCH
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # argparse --help / --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    except BaseException as e:  # noqa: BLE001 - the last line of defence against tracebacks
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        at = f" at {where.filename}:{where.lineno}" if where else ""
        print(f"{tool}: internal error: {type(e).__name__}: {e}{at} (a bug in distir)", file=sys.stderr)
        return EXIT_INTERNAL
