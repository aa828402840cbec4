"""What every distir command-line tool shares: exit codes, error reporting, the argument
parser, reading inputs and writing outputs.

Exit codes: 0 success; 1 the input was rejected with a diagnostic; 2 a run's results
disagree (``--compare``); 3 internal error (a bug in distir: reported in one line with
the place it happened, never as a traceback). The error types themselves live at the
bottom floor, in ``dialects/diagnostics.py``.

Every tool is ``main(argv) = run_tool(name, body)``, and its parser comes from
``make_parser`` (or, for ``distir-opt``, xDSL's parser with ``argparse_error``):

* ``--version`` and ``--help`` on every tool; a tool module imports only the standard
  library and this module at import time, so that both answer at once (the rest is
  imported once the arguments are parsed);
* a bad option is a one-line diagnostic and exit 1, with the closest option for an
  unknown one (``--rank`` -> ``did you mean --ranks?``);
* an input file is read by ``read_input``: a missing, empty or binary file is a
  one-line diagnostic that echoes none of its bytes;
* standard output and the files given with ``-o``/``--json``/... are checked before a
  long run with ``check_output`` and written through ``open_output`` (or
  ``write_output``): a closed pipe (``| head``) ends the tool quietly with exit 0, a full
  device or a closed standard output (``>&-``) is a diagnostic naming the output.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import IO

from distir.dialects.diagnostics import DistirWarning, InputRejected, InternalError, ResultsDiffer, Terminated, check_text

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_MISMATCH",
    "EXIT_OK",
    "EXIT_REJECTED",
    "Exit",
    "InputRejected",
    "ResultsDiffer",
    "argparse_error",
    "check_output",
    "check_text",
    "describe",
    "distir_version",
    "make_parser",
    "open_output",
    "read_input",
    "run_tool",
    "write_output",
]

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


class OutputClosed(Exception):
    """The reader of standard output went away (a closed pipe): a normal end."""


class OutputFailed(InputRejected):
    """An output could not be written (a full device, a closed descriptor);
    ``standard``: it was standard output."""

    standard = False


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
    if isinstance(e, InternalError):  # distir caught its own bug: the message says where
        return EXIT_INTERNAL, f"{tool}: internal error (a bug in distir): {e}"
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" at {where.filename}:{where.lineno}" if where else ""
    return EXIT_INTERNAL, f"{tool}: internal error: {type(e).__name__}: {e}{at} (a bug in distir)"


# --------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------


def argparse_error(tool: str, parser: argparse.ArgumentParser):
    """An ``ArgumentParser.error`` that raises ``InputRejected`` (one line, exit 1) and
    suggests the closest option for an unknown one (``--rank`` -> ``--ranks``)."""
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
        raise InputRejected(f"{tool}: error: {' '.join(message.split())}")

    return error


def make_parser(tool: str, description: str, **kwargs) -> argparse.ArgumentParser:
    """The argument parser of a distir tool: ``--version``, and errors as one-line
    diagnostics with did-you-mean (``argparse_error``)."""
    p = argparse.ArgumentParser(prog=tool, description=description, **kwargs)
    p.add_argument("-v", "--version", action="version", version=f"{tool} {distir_version()}", help="print the version and exit")
    p.error = argparse_error(tool, p)  # type: ignore[method-assign]
    return p


# --------------------------------------------------------------------------------------
# Inputs and outputs
# --------------------------------------------------------------------------------------


def read_input(path: str, tool: str | None = None, check: bool = True) -> bytes:
    """The bytes of an input file (``-``: standard input), checked to be non-empty text
    (``check_text``) unless ``check`` is false; a file that cannot be read is a
    diagnostic (prefixed with ``tool`` when given)."""
    prefix = f"{tool}: " if tool else ""
    try:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()  # noqa: SIM115
    except OSError as e:
        raise InputRejected(f"{prefix}cannot read {path}: {e.strerror or e}") from None
    except (AttributeError, ValueError):  # standard input closed (<&-)
        raise InputRejected(f"{prefix}cannot read standard input: it is closed") from None
    if check:
        check_text(data, "stdin" if path == "-" else path)
    return data


STDOUT = "to standard output"


class _Output:
    """A text stream whose failures are diagnostics: a closed pipe raises
    ``OutputClosed``, any other ``OSError`` (a full device, a closed descriptor) an
    ``InputRejected`` naming the output. Everything else is the wrapped stream's."""

    def __init__(self, stream: IO[str] | None, name: str, tool: str):
        self._stream, self._name, self._tool = stream, name, tool

    def _fail(self, e: OSError | None) -> OutputFailed:
        why = "it is closed" if e is None else (e.strerror or str(e))
        failed = OutputFailed(f"{self._tool}: cannot write {self._name}: {why}")
        failed.standard = self._name == STDOUT
        return failed

    def _call(self, method: str, *args):
        if self._stream is None:
            raise self._fail(None)
        try:
            return getattr(self._stream, method)(*args)
        except BrokenPipeError:
            raise OutputClosed() from None
        except OSError as e:
            raise self._fail(e) from None
        except ValueError as e:  # I/O operation on a closed file
            raise self._fail(OSError(str(e))) from None

    def write(self, text: str) -> int:
        return self._call("write", text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._stream is not None:
            self._call("flush")

    def close(self) -> None:
        if self._stream is not None and self._stream not in (sys.__stdout__, sys.__stderr__):
            self._call("close")

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str):
        if self._stream is None:
            raise self._fail(None)
        return getattr(self._stream, name)


def open_output(tool: str, path: str | None) -> IO[str]:
    """A text stream to write an output to: the file ``path`` (its failures, from
    opening to closing, are diagnostics naming it), or standard output for None or
    ``-`` (guarded by ``run_tool``)."""
    if path is None or path == "-":
        return sys.stdout
    try:
        f = open(path, "w")  # noqa: SIM115 - closed by the caller
    except OSError as e:
        raise InputRejected(f"{tool}: cannot write {path}: {e.strerror or e}") from None
    return _Output(f, path, tool)  # type: ignore[return-value]


def check_output(tool: str, path: str, what: str) -> None:
    """Reject an output file ``path`` (given with the option ``what``) that could not be
    written, before a long run rather than after it; ``-`` is standard output."""
    if path == "-":
        return
    target = os.path.abspath(path)
    folder = os.path.dirname(target) or "."
    if os.path.isdir(target):
        raise InputRejected(f"{tool}: {what} {path}: is a directory")
    if not os.path.isdir(folder):
        raise InputRejected(f"{tool}: {what} {path}: no such directory {folder}")
    if not os.access(target if os.path.exists(target) else folder, os.W_OK):
        raise InputRejected(f"{tool}: {what} {path}: not writable")


def write_output(tool: str, path: str | None, text: str) -> None:
    """Write ``text`` to ``path`` (standard output for None or ``-``), diagnostics as
    ``open_output``."""
    out = open_output(tool, path)
    try:
        out.write(text)
        out.flush()
    finally:
        if out is not sys.stdout:
            out.close()


def _quiet_stdout() -> None:
    """Point the process's standard output at /dev/null, so that the interpreter's last
    flush of what could not be written does not fail again at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.__stdout__.fileno())  # type: ignore[union-attr]
        os.close(fd)
    except (OSError, AttributeError, ValueError):
        pass


# --------------------------------------------------------------------------------------
# Running a tool
# --------------------------------------------------------------------------------------


def quiet_developer_warnings(tool: str = "distir") -> None:
    for pattern in DEVELOPER_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DistirWarning):  # one line, as the tool's diagnostics
            print(f"{tool}: warning: {message}", file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    if not getattr(shown, "distir", False):
        show.distir = True  # type: ignore[attr-defined]
        warnings.showwarning = show


YOUNG_OBJECTS = 50_000
"""Allocations between two collections of a tool's young objects (CPython's default: 700)."""


def collect_less() -> None:
    """Collect garbage less often than CPython does by default. A tool holds one program's
    IR, a graph of millions of small objects that lives until the tool ends, and the
    default thresholds (700, 10, 10) walk all of it in full collections that free
    nothing: parsing and verifying the 1.3 B-parameter GPT step made 6 of them, freed 0
    objects and took 15% of the CPU (5.4 -> 4.6 s; the same peak memory). The passes
    pause collection while they run (``passes.support.gc_paused``); this covers the
    parser, the verifier and the runtimes. Called by ``run_tool``; never lowers a
    threshold set higher."""
    young, middle, old = gc.get_threshold()
    if young and young < YOUNG_OBJECTS:
        gc.set_threshold(YOUNG_OBJECTS, max(middle, 20), max(old, 100))


def run_tool(tool: str, body: Callable[[], int]) -> int:
    """Run a tool's body with standard output guarded (module doc), mapping exceptions
    to messages on stderr and exit codes."""
    quiet_developer_warnings(tool)
    collect_less()
    saved = sys.stdout
    real = saved is None or saved is sys.__stdout__
    sys.stdout = _Output(saved, STDOUT, tool)  # type: ignore[assignment]
    try:
        try:
            code = body()
        except SystemExit as e:  # argparse --help / --version
            code = e.code if isinstance(e.code, int) else EXIT_OK
        sys.stdout.flush()
        return code
    except OutputClosed:
        if real:
            _quiet_stdout()
        return EXIT_OK
    except OutputFailed as e:
        if real and e.standard:
            _quiet_stdout()
        print(e, file=sys.stderr)
        return EXIT_REJECTED
    except Exit as e:
        if e.message:
            print(e.message, file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130
    except Terminated as e:
        print(f"{tool}: {e}", file=sys.stderr)
        return 128 + e.signum
    except BaseException as e:  # noqa: BLE001 - the last line of defence against tracebacks
        code, message = describe(tool, e)
        print(message, file=sys.stderr)
        return code
    finally:
        sys.stdout = saved  # type: ignore[assignment]
