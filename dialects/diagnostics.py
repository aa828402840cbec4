"""The error types every layer raises for a user's mistake or a disagreement, kept at the
bottom floor so that passes, lowering, runtime, tuning and synthesis can raise them and
the tools (on top) only map them to exit codes (``tools/diagnostics.py``); and the
check every reader of a text input makes first (``check_text``: empty or binary)."""

import re


class InputRejected(Exception):
    """The user's input (file, option, npz) is wrong; the message says how."""


def require_extra(module: str, extra: str, user: str):
    """``import module`` for ``user`` (``distir.frameworks.pytorch``), or a
    ``ModuleNotFoundError`` naming the optional dependencies that install it
    (``pip install 'distir[torch]'``) instead of only ``No module named 'torch'``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name != top:
            raise
        raise ModuleNotFoundError(f"{user} needs {top}, which is not installed: pip install 'distir[{extra}]'", name=top) from None


MAX_RANKS = 1 << 20
"""The most ranks (devices) of a mesh or a run: 1,048,576, ten times the largest
clusters' GPU counts. Larger meshes are diagnosed where they are read (``dist.mesh``,
``sdy.mesh``, ``--ranks``): the reference interpreter and the importer keep a list of a
mesh's devices, and a mesh of 2^31 devices took tens of GB before the OOM killer."""


def check_rank_count(ranks: int, tool: str = "") -> int:
    """``ranks`` when it is a rank count (1 to ``MAX_RANKS``), else ``InputRejected``
    (prefixed with ``tool: `` when given): the one place every tool and API checks
    ``--ranks``."""
    if ranks < 1:
        raise InputRejected(f"{tool + ': ' if tool else ''}--ranks must be at least 1, got {ranks}")
    if ranks > MAX_RANKS:
        raise InputRejected(f"{tool + ': ' if tool else ''}--ranks {ranks} is more than distir runs ({MAX_RANKS} ranks at most)")
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


class JobFailed(InputRejected):
    """A job failed for a reason outside distir (a rank killed by a signal or by the OOM
    killer, a launcher that failed): the user's to look at, exit 1 as a rejected input,
    never "a bug in distir"."""


class Terminated(Exception):
    """The tool was asked to stop (SIGTERM, SIGHUP: ``timeout``, SLURM, Kubernetes) and has
    stopped what it started; the exit code is 128 + the signal's number."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


class DistirWarning(UserWarning):
    """Something went wrong that distir worked around (a kernel cache it cannot read or
    write: the kernel is compiled again); the tools print it as one line,
    ``TOOL: warning: ...``."""


_WARNED: set[str] = set()


def warn_once(text: str) -> None:
    """``text`` as a ``DistirWarning``, once per process."""
    import warnings

    if text not in _WARNED:
        _WARNED.add(text)
        warnings.warn(text, DistirWarning, stacklevel=3)


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
