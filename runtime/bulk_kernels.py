"""The compiled part of ``bulk.py``: a byte copy with non-temporal 32-byte vector stores
(numba, with two LLVM intrinsics: the streaming store and a fence). Imported on the
first large copy only."""

from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

VECTOR = 32
"""Bytes per streaming store (one AVX register; LLVM splits it where vectors are
narrower)."""


@intrinsic
def _store_streaming(typingctx, dst, src, i):
    """dst[i : i + VECTOR] = src[i : i + VECTOR] (bytes) with one non-temporal vector
    store; dst + i must be VECTOR-aligned."""

    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[1])(context, builder, args[1])
        vector = ir.VectorType(ir.IntType(64), VECTOR // 8)
        source = builder.bitcast(builder.gep(s.data, [args[2]]), vector.as_pointer())
        target = builder.bitcast(builder.gep(d.data, [args[2]]), vector.as_pointer())
        store = builder.store(builder.load(source, align=1), target, align=VECTOR)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(dst, src, types.intp), codegen


@intrinsic
def _fence(typingctx):
    """Orders the streaming stores before every later memory access (x86: mfence)."""

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@numba.njit(nogil=True, cache=True)
def copy_bytes(dst, src):
    """dst[:] = src for equally long 1-D uint8 arrays, streamed and fenced."""
    n = dst.size
    head = min((VECTOR - dst.ctypes.data % VECTOR) % VECTOR, n)
    for i in range(head):
        dst[i] = src[i]
    i = head
    while i + VECTOR <= n:
        _store_streaming(dst, src, i)
        i += VECTOR
    for j in range(i, n):
        dst[j] = src[j]
    _fence()
