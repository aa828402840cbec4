"""Host buffers start at different offsets within a page, so that a kernel streaming
several of them does not stall on 4 KiB aliasing (``runtime/buffers.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from distir.dialects.context import parse_module
from distir.runtime.buffers import PAGE, STAGGER_FROM, new_buffer
from distir.runtime.executor import LoweredProgram
from distir.runtime.host import HostDevice


def _offset(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0] % PAGE


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.float16])
def test_new_buffer_is_a_zeroed_contiguous_array(dtype):
    a = new_buffer((3, STAGGER_FROM), dtype)
    assert a.shape == (3, STAGGER_FROM) and a.dtype == np.dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable
    assert not a.any()
    a[...] = 1  # the whole range is writable, none of it shared with another buffer
    b = new_buffer((3, STAGGER_FROM), dtype)
    assert not b.any()


def test_consecutive_large_buffers_start_at_different_page_offsets():
    n = STAGGER_FROM // 4
    offsets = [_offset(new_buffer((n,), np.float32)) for _ in range(8)]
    assert len(set(offsets)) == 8
    assert all(o % 64 == 0 for o in offsets)  # cache-line aligned (vector loads stay whole)


def test_small_buffers_are_plain_numpy_arrays():
    a = new_buffer((4, 4), np.float32)
    assert a.base is None and not a.any()


def test_a_programs_buffers_do_not_share_a_page_offset():
    # An Adam step streams g, p, m, v and the AllReduce's result: before the stagger all
    # of them started 16 bytes into a page, and the step ran 1.5-2x slower in some processes.
    n = 1 << 16
    t = f"!dist.tensor<{n}xf32, @world, [replicated]>"
    text = f"""dist.mesh @world shape = [?]
func.func @f(%g: !dist.tensor<{n}xf32, @world, [local]>, %p: {t}, %m: {t}) -> ({t} {{dist.inplace = 1 : i64}}) {{
  %a = coll.all_reduce avg %g : !dist.tensor<{n}xf32, @world, [local]> -> {t}
  %q = dist.map(%p, %a, %m) : ({t}, {t}, {t}) -> {t} {{
  ^bb0(%x: f32, %y: f32, %z: f32):
    %s = arith.addf %x, %y : f32
    %r = arith.addf %s, %z : f32
    dist.yield %r : f32
  }}
  func.return %q : {t}
}}"""
    program = LoweredProgram.build(parse_module(text), None, 2)
    device = HostDevice()
    args = program.rank_args(program.prepare_inputs({}, 0), 0, device)
    bufs = [a for a in args if isinstance(a, np.ndarray) and a.nbytes >= STAGGER_FROM]
    bufs.append(device.alloc((n,), np.dtype(np.float32)))
    assert len(bufs) == 4
    assert len({_offset(b) for b in bufs}) == len(bufs)
