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

``copy(dst, src)`` is ``dst[...] = src`` for equally long 1-D buffers; it streams when
both are C-contiguous numpy arrays of one dtype and at least ``STREAM_FROM`` bytes.
The stores are 32-byte vectors at 32-byte aligned destinations (the first and last
unaligned bytes are copied one by one) and the copy ends with a full fence, because
streaming stores are weakly ordered and the caller hands the buffer to other threads
(``bulk_kernels.py``).
"""

from __future__ import annotations

import numpy as np

STREAM_FROM = 4 << 20
"""Copies of this many bytes and more use streaming stores."""

_copy_bytes = None


def copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``, streamed when large (module docstring)."""
    if (
        isinstance(dst, np.ndarray)
        and isinstance(src, np.ndarray)
        and dst.nbytes >= STREAM_FROM
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
