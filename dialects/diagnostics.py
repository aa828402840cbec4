"""The error types every layer raises for a user's mistake or a disagreement, kept at the
bottom floor so that passes, lowering, runtime, tuning and synthesis can raise them and
the tools (on top) only map them to exit codes (``tools/diagnostics.py``)."""


class InputRejected(Exception):
    """The user's input (file, option, npz) is wrong; the message says how."""


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
