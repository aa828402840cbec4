"""The error types every layer raises for a user's mistake or a disagreement, kept at the
bottom floor so that passes, lowering, runtime, tuning and synthesis can raise them and
the tools (on top) only map them to exit codes (``tools/diagnostics.py``)."""


class InputRejected(Exception):
    """The user's input (file, option, npz) is wrong; the message says how."""


class ResultsDiffer(Exception):
    """Two runs that must agree do not; the message reports the first mismatch."""
