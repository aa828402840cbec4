"""Exit codes and error reporting shared by the distir command-line tools.

0 success; 1 the input was rejected with a diagnostic; 2 a run's results disagree
(``--compare``); 3 internal error (a bug in distir: reported in one line with the place
it happened, never as a traceback). The error types themselves live at the bottom floor,
in ``dialects/diagnostics.py``.
"""

from __future__ import annotations

import sys
import traceback
import warnings
from collections.abc import Callable

from distir.dialects.diagnostics import InputRejected, ResultsDiffer

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_MISMATCH = 2
EXIT_INTERNAL = 3

# Warnings meant for distir's developers, not its users (numba explains why a generated
# kernel did not parallelise, with a path into its cache).
DEVELOPER_WARNINGS = (r"(?s)\s*The keyword argument 'parallel=True' was specified but no transformation",)


class Exit(Exception):
    """Leave the tool with ``code``, printing ``message`` when there is one: the outcome
    was decided elsewhere (by the ranks of an MPI job together)."""

    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or "")
        self.code, self.message = code, message


def distir_version() -> str:
    """The installed distir's version (``--version`` of every tool)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("distir")
    except PackageNotFoundError:
        return "(not installed)"


def describe(tool: str, e: BaseException) -> tuple[int, str]:
    """(exit code, message) for an error that ends a tool."""
    if isinstance(e, InputRejected):
        return EXIT_REJECTED, str(e)
    if isinstance(e, ResultsDiffer):
        return EXIT_MISMATCH, str(e)
    if isinstance(e, MemoryError):  # a resource limit, not a bug
        return EXIT_REJECTED, f"{tool}: out of memory{': ' + str(e) if str(e) else ''}"
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" at {where.filename}:{where.lineno}" if where else ""
    return EXIT_INTERNAL, f"{tool}: internal error: {type(e).__name__}: {e}{at} (a bug in distir)"


def argparse_error(tool: str, parser):
    """An ``ArgumentParser.error`` that raises ``InputRejected`` and suggests the closest
    option for an unknown one (``--rank`` -> ``--ranks``)."""
    import difflib
    import re

    def error(message: str):
        m = re.match(r"unrecognized arguments: (\S+)", message)
        if m and m.group(1).startswith("-"):
            flag = m.group(1).split("=")[0]
            options = [o for a in parser._actions for o in a.option_strings]  # noqa: SLF001
            close = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
            if close:
                message += f" (did you mean {close[0]}?)"
        raise InputRejected(f"{tool}: {message}")

    return error


def quiet_developer_warnings() -> None:
    for pattern in DEVELOPER_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)


def run_tool(tool: str, body: Callable[[], int]) -> int:
    """Run a tool's body, mapping exceptions to messages on stderr and exit codes."""
    quiet_developer_warnings()
    try:
        return body()
    except Exit as e:
        if e.message:
            print(e.message, file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # argparse --help / --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    except BaseException as e:  # noqa: BLE001 - the last line of defence against tracebacks
        code, message = describe(tool, e)
        print(message, file=sys.stderr)
        return code
