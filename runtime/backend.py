"""Backends that run a program, behind one small interface.

A backend takes a module, a function name, the complete inputs (the in.npz convention of
``runtime/npz.py``, every argument present), the rank count and the seed, and returns
the function's logical outputs (the out.npz convention)::

    backend = get_backend("interpret")
    outputs = backend.run(module, "adam", inputs, ranks=4, seed=0)

``BACKENDS`` maps a backend name to a factory. ``interpret`` (the reference interpreter,
dist/coll-level programs only) is registered here; the runtime registers ``local``,
``mpi`` and ``nccl`` with ``register_backend`` when they exist. ``default_backend_name``
is the one place that says which backend runs when none is named: ``local`` once it is
registered, ``interpret`` until then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from distir.tools.diagnostics import InputRejected

KNOWN_BACKENDS = ("interpret", "local", "mpi", "nccl")
"""Backend names of DESIGN §5 (some may not be available yet)."""


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


BACKENDS: dict[str, Callable[[], Backend]] = {"interpret": InterpretBackend}


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    BACKENDS[name] = factory


def default_backend_name() -> str:
    """``local`` once it is registered, ``interpret`` until then."""
    return "local" if "local" in BACKENDS else "interpret"


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (default: ``default_backend_name()``)."""
    name = name or default_backend_name()
    factory = BACKENDS.get(name)
    if factory is not None:
        return factory()
    available = ", ".join(sorted(BACKENDS))
    if name in KNOWN_BACKENDS:
        raise InputRejected(f"backend '{name}' is not available yet (available: {available})")
    raise InputRejected(f"unknown backend '{name}' (choose from {', '.join(KNOWN_BACKENDS)}; available: {available})")
