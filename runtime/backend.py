"""Backends that run a program, behind one small interface, and their registry.

A backend takes a module, a function name, the complete inputs (the in.npz convention of
``runtime/npz.py``, every argument present), the rank count and the seed, and returns
the function's logical outputs (the out.npz convention)::

    backend = get_backend("interpret")
    outputs = backend.run(module, "adam", inputs, ranks=4, seed=0)

``BACKENDS`` maps each backend name of DESIGN §5 to a factory that imports its module
when first asked for: ``interpret`` (the reference interpreter, dist/coll-level programs
only), ``local`` (the default), ``mpi`` and ``nccl``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import InputRejected


class Backend(Protocol):
    name: str

    def run(self, module: ModuleOp, func: str, inputs: Mapping[str, np.ndarray], ranks: int, seed: int) -> list[np.ndarray]:
        """Run ``func`` on ``ranks`` ranks; return its logical outputs."""
        ...


class InterpretBackend:
    """The reference interpreter (``runtime/interpreter.py``)."""

    name = "interpret"

    def run(self, module: ModuleOp, func: str, inputs: Mapping[str, np.ndarray], ranks: int, seed: int) -> list[np.ndarray]:
        from distir.runtime.interpreter import run_function

        return run_function(module, func, inputs, ranks, seed).outputs


def _local() -> Backend:
    from distir.runtime.local import LocalBackend

    return LocalBackend()


def _mpi() -> Backend:
    from distir.runtime.mpi import MpiBackend

    return MpiBackend()


def _nccl() -> Backend:
    from distir.runtime.nccl import NcclBackend

    return NcclBackend()


BACKENDS: dict[str, Callable[[], Backend]] = {"interpret": InterpretBackend, "local": _local, "mpi": _mpi, "nccl": _nccl}

DEFAULT_BACKEND = "local"


def default_backend_name() -> str:
    """The backend that runs when none is named."""
    return DEFAULT_BACKEND


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (default: ``default_backend_name()``)."""
    name = name or default_backend_name()
    factory = BACKENDS.get(name)
    if factory is None:
        raise InputRejected(f"unknown backend '{name}' (choose from {', '.join(BACKENDS)})")
    return factory()


def run_scattered(module, func: str | None, inputs: Mapping[str, Any], ranks: int, scatter: Sequence[str], seed: int = 0, backend: str = "local") -> list[Any]:
    """Run a function with the arguments named in ``scatter`` given as lists of pieces
    (``inputs[name] = [piece0, piece1, ...]`` or keys ``name.0``, ``name.1``, ...), on the
    ``local`` or ``mpi`` backend. In-place results of scattered arguments come back as
    lists of pieces."""
    from distir.runtime.interpreter import as_module

    b = get_backend(backend)
    if not getattr(b, "supports_scatter", False):
        raise InputRejected(f"backend '{backend}' does not run scattered tensors (use local or mpi)")
    return b.run(as_module(module), func, inputs, ranks, seed, scatter=list(scatter))  # type: ignore[call-arg]
