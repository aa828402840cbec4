"""Copies of large host buffers with non-temporal (streaming) stores.

A plain copy (numpy's ``dst[...] = src``, or a compiled loop) first reads every cache
line of the destination it is about to overwrite (write-allocate), so copying N bytes
moves 3N through memory. A streaming store writes the line without reading it: 2N.
For buffers much larger than the caches, which the destination of a collective usually
is, that is a third less memory traffic: three all-gathers of 32 MiB per rank on 2
ranks of this project's 2-core machine took 12-14 ms with numpy's copy and 8.5-9 ms
streamed (``bench/rs_ag_ratio.py`` times the Adam step they belong to). Small copies
keep the ordinary stores: their destination is likely to be read again while it is
still in cache, which streaming stores would defeat.

Which copies stream is not decided here: the program says it (``stream_from N`` on
``rt.copy`` and on the collectives a host communicator copies, written by
``plan-execution`` from the target's threshold, ``lowering/target.py``).
``copy(dst, src, stream_from)`` is ``dst[...] = src`` for equally long 1-D buffers; it
streams when ``stream_from`` is given, both are C-contiguous numpy arrays of one dtype
(the only copies streaming stores can do) and the copy has at least ``stream_from``
bytes. The stores are 32-byte vectors at 32-byte aligned destinations (the first and last
unaligned bytes are copied one by one) and the copy ends with a full fence, because
streaming stores are weakly ordered and the caller hands the buffer to other threads
(``bulk_kernels.py``).
"""

from __future__ import annotations

import numpy as np

from distir.lowering.target import STREAM_FROM

HOST_DEFAULT = -1
"""``stream_from`` of a copy no program asked for (the runtime's own copies: inputs
scattered into pieces, MPI's scattered buffers): the host's threshold, ``STREAM_FROM``."""

_copy_bytes = None


def copy(dst: np.ndarray, src: np.ndarray, stream_from: int | None = HOST_DEFAULT) -> None:
    """``dst[...] = src``, streamed from ``stream_from`` bytes on (module docstring;
    None: never)."""
    if stream_from == HOST_DEFAULT:
        stream_from = STREAM_FROM
    if (
        stream_from is not None
        and isinstance(dst, np.ndarray)
        and isinstance(src, np.ndarray)
        and dst.nbytes >= stream_from
        and dst.dtype == src.dtype
        and dst.shape == src.shape
        and dst.flags.c_contiguous
        and src.flags.c_contiguous
        and dst.flags.writeable
    ):
        _compiled()(dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8))
    else:
        dst[...] = src


def _compiled():
    """The streaming byte copy, compiled on first use (numba, cached on disk; imported
    only then, so that importing the runtime does not import numba)."""
    global _copy_bytes
    if _copy_bytes is None:
        from distir.runtime.bulk_kernels import copy_bytes

        _copy_bytes = copy_bytes
    return _copy_bytes
