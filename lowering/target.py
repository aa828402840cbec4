"""The targets a program is planned for: what the machine that runs it can do
(``#rt.target`` in ``dialects/rt.py``; ``docs/planning.md``).

==================  =============  ========================================  ==============
target              shared memory  collectives copied on the host            copies stream
==================  =============  ========================================  ==============
``local``           yes            all_gather, broadcast, send, recv         from 4 MiB
``shared-memory``   yes            none (MPI or the process group copies)    from 4 MiB
``messages``        no             none                                      from 4 MiB
``gpu``             no             none                                      never
==================  =============  ========================================  ==============

``local`` is the ``local`` backend (rank threads). ``shared-memory`` is processes that
share a node's memory: the ``mpi`` backend on one node (MPI-3 windows), a step whose
communicator brings shared-memory segments (``runtime/shm.py``). ``messages`` is a host
runtime whose ranks exchange messages only (``mpi`` across nodes, a recording
communicator). ``gpu`` is the ``nccl`` backend (and the CUDA device in numba's
simulator). ``BACKEND_TARGETS`` names the target each backend plans for.

``STREAM_FROM`` is where the host runtime's streaming stores start to pay
(``runtime/bulk.py`` has the measurement): a plain copy of N bytes first reads every line
of its destination (write-allocate), 3N bytes of traffic; a streamed one moves 2N, but
leaves the destination out of the caches, which a small copy's reader would miss.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import InputRejected
from distir.dialects.rt import HOST_COPY_KINDS, TARGET, TargetAttr

STREAM_FROM = 4 << 20
"""Host copies of this many contiguous bytes and more use streaming stores."""

TARGETS: dict[str, TargetAttr] = {
    "local": TargetAttr("local", True, HOST_COPY_KINDS, STREAM_FROM),
    "shared-memory": TargetAttr("shared-memory", True, (), STREAM_FROM),
    "messages": TargetAttr("messages", False, (), STREAM_FROM),
    "gpu": TargetAttr("gpu", False, (), None),
}

EVERY_BUFFER_SHARED = frozenset({"local"})
"""The targets whose ranks see every buffer of each other (the rank threads of one
process). Elsewhere a run may give a program buffers its peers cannot see (a step's
caller's arrays outside the node's shared memory), and ``plan-execution`` plans a
zero-copy group ``else sequential`` for them."""

BACKEND_TARGETS = {"local": "local", "mpi": "shared-memory", "nccl": "gpu"}
"""The target each backend plans for (``mpi``: ``messages`` when its ranks are not all
on one node)."""


def get_target(name: str | TargetAttr) -> TargetAttr:
    """The target called ``name`` (a diagnostic naming the targets when there is none)."""
    if isinstance(name, TargetAttr):
        return name
    t = TARGETS.get(name)
    if t is None:
        raise InputRejected(f"unknown target '{name}' (targets: {', '.join(TARGETS)})")
    return t


def planned_target(module: ModuleOp) -> TargetAttr | None:
    """The target ``module`` was planned for (``plan-execution``), or None."""
    t = module.attributes.get(TARGET)
    return t if isinstance(t, TargetAttr) else None
