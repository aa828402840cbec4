"""The error types every layer raises for a user's mistake or a disagreement, kept at the
bottom floor so that passes, lowering, runtime, tuning and synthesis can raise them and
the tools (on top) only map them to exit codes (``tools/diagnostics.py``); and the
check every reader of a text input makes first (``check_text``: empty or binary)."""

import re


class InputRejected(Exception):
    """The user's input (file, option, npz) is wrong; the message says how."""


def check_rank_count(ranks: int, tool: str = "") -> int:
    """``ranks`` when it is a rank count (at least 1), else ``InputRejected`` (prefixed
    with ``tool: `` when given): the one place every tool and API checks ``--ranks``."""
    if ranks < 1:
        raise InputRejected(f"{tool + ': ' if tool else ''}--ranks must be at least 1, got {ranks}")
    return ranks


def check_body(f) -> None:
    """Reject a function without a body (``func.func private @f(...)``, a declaration, or
    a definition cut off before its ``{``): there is nothing to run or tune."""
    if len(f.body.blocks) != 1:
        what = "is a declaration without a body" if not f.body.blocks else f"has {len(f.body.blocks)} blocks (distir runs one)"
        raise InputRejected(f"function @{f.sym_name.data} {what}: nothing to run")


class InternalError(Exception):
    """distir broke its own contract (a pass produced a program that does not verify):
    a bug in distir, never the user's input. The message says where; a tool exits 3."""


class PassProducedInvalidIR(InternalError):
    """Pass ``pass_name`` turned a program that verified into one that does not: the
    program is never transformed further or run. The message is the located diagnostic
    of the first op that fails, naming the pass."""

    def __init__(self, pass_name: str, diagnostic: str):
        super().__init__(f"pass '{pass_name}' produced a program that does not verify:\n{diagnostic}")
        self.pass_name = pass_name
        self.diagnostic = diagnostic

    def __reduce__(self):  # raised in a worker process, re-raised in the parent
        return type(self), (self.pass_name, self.diagnostic)


class ResultsDiffer(Exception):
    """Two runs that must agree do not; the message reports the first mismatch."""


class ExecutionError(Exception):
    """A program stopped before its end (the message names the op, and the rank where
    there are ranks). Either kind below; ``except ExecutionError`` catches both."""


class ExecutionRejected(ExecutionError, InputRejected):
    """The program cannot run on these inputs or this rank count: an unsupported op, an
    index out of range, ... (the reference interpreter; a tool exits 1)."""


class ExecutionFailed(ExecutionError, RuntimeError):
    """A lowered program failed on a rank (a backend; the message names the rank and
    the op)."""


# Bytes that never occur in IR or TOML text (C0 controls other than whitespace, DEL):
# an input holding one is binary, and its bytes are not echoed in a diagnostic.
_BINARY = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")


def check_text(data: bytes, name: str) -> None:
    """Reject an empty or binary input with a one-line diagnostic naming it (``name``:
    a path, or ``stdin``), echoing none of its bytes."""
    what = "standard input" if name in ("-", "stdin", "<stdin>") else "the file"
    if not data.strip():
        raise InputRejected(f"{name}: error: {what} is empty")
    m = _BINARY.search(data)
    if m:
        raise InputRejected(f"{name}: error: {what} is binary, not text (byte 0x{data[m.start()]:02x} at offset {m.start()})")
