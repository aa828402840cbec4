"""The kernels of the layout ops (transpose, iota, extract_slice, concat: loads at
computed indices, block offsets from ``rt.group_rank``) compile for CUDA: numba-cuda's
``compile_ptx`` for sm_80 and sm_90 and ``ptxas`` (skipped without the GPU extra, as
``test_cuda_codegen.py`` is)."""

from __future__ import annotations

import pytest

cuda = pytest.importorskip("numba.cuda", reason="the GPU extra (numba-cuda) is not installed")
from support.layout_programs import PROGRAM  # noqa: E402
from test_cuda_codegen import _nvvm_available, check_compiles, kernel_signature  # noqa: E402

from distir.dialects.context import parse_module  # noqa: E402
from distir.lowering import numba_codegen as cg  # noqa: E402
from distir.runtime.executor import LoweredProgram  # noqa: E402

pytestmark = pytest.mark.skipif(not _nvvm_available(), reason="numba-cuda cannot compile PTX here (no NVVM)")


def layout_kernels():
    """Every distinct kernel of the program's functions, lowered for 4 ranks."""
    out = {}
    for f in ("transpose", "transpose3", "iota", "extract", "concat"):
        program = LoweredProgram.build(parse_module(PROGRAM), f, 4)
        for k in program.kernels.values():
            ks = cg.cuda_source(k)
            out.setdefault(ks.source, (k, ks))
    return list(out.values())


def test_layout_kernels_compile(tmp_path):
    kernels = layout_kernels()
    assert len(kernels) >= 6  # two transposes, two iotas, extract_slice, concat
    for kernel, ks in kernels:
        mod = cg._load_module(ks.source, "cuda")
        check_compiles(mod.kernel, kernel_signature(kernel), tmp_path)
