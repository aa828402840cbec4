"""Registers the runtime's backends (``local``, ``mpi``, ``nccl``) in the backend
registry of ``backend.py``; each is imported only when asked for."""

from __future__ import annotations

from distir.runtime.backend import register_backend


def _local():
    from distir.runtime.local import LocalBackend

    return LocalBackend()


register_backend("local", _local)


def _mpi():
    from distir.runtime.mpi import MpiBackend

    return MpiBackend()


register_backend("mpi", _mpi)


def _nccl():
    from distir.runtime.nccl import NcclBackend

    return NcclBackend()


register_backend("nccl", _nccl)
