"""Every CUDA kernel the runtime can launch compiles: the generated element-wise kernels
of every example and schedule (2 and 4 ranks) and the fixed kernels of
``runtime/cuda_kernels.py`` go through ``numba.cuda.compile_ptx`` for sm_80 and sm_90,
and ``ptxas -arch=sm_90`` assembles the sm_90 PTX into a cubin. No GPU is needed, only
the GPU extra (numba-cuda, NVVM) and ptxas; without them these tests are skipped."""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache

import pytest

cuda = pytest.importorskip("numba.cuda", reason="the GPU extra (numba-cuda) is not installed")
from numba import types as nt  # noqa: E402
from support.lowered import EXAMPLE_NAMES, schedules  # noqa: E402
from xdsl.dialects.builtin import IndexType, MemRefType  # noqa: E402

from distir.dialects.context import parse_module  # noqa: E402
from distir.lowering import numba_codegen as cg  # noqa: E402
from distir.runtime import cuda_kernels as ck  # noqa: E402
from distir.runtime.executor import LoweredProgram  # noqa: E402

PTXAS = shutil.which("ptxas")


def _nvvm_available() -> bool:
    try:
        cuda.compile_ptx(lambda a: None, "void(float32[::1])", cc=(9, 0))
        return True
    except Exception:  # noqa: BLE001 - no NVVM/NVRTC
        return False


pytestmark = pytest.mark.skipif(not _nvvm_available(), reason="numba-cuda cannot compile PTX here (no NVVM)")


@lru_cache(maxsize=None)
def generated_kernels(name: str):
    """Distinct CUDA sources of every kernel of an example's schedules on 2 and 4 ranks
    (or its static rank count)."""
    from support.lowered import rank_counts

    out = {}
    for sched, text in schedules(name):
        module = parse_module(text)
        for f in [op.sym_name.data for op in module.ops if op.name == "func.func"]:
            for ranks in rank_counts(name):
                program = LoweredProgram.build(parse_module(text), f, ranks)
                for k in program.kernels.values():
                    ks = cg.cuda_source(k)
                    out.setdefault(ks.source, (f"{name}:{sched}:{k.kernel_name}", k, ks))
    return list(out.values())


def kernel_signature(kernel):
    args = []
    for a in kernel.params:
        t = a.type
        if isinstance(t, MemRefType):
            args.append(nt.Array(getattr(nt, cg.storage_name(t.element_type, "cuda")), max(1, len(t.get_shape())), "C"))
        elif isinstance(t, IndexType):
            args.append(nt.int64)
        else:
            args.append(getattr(nt, cg.storage_name(t, "cuda")))
    return nt.void(*args)


def check_compiles(pyfunc, sig, tmp_path):
    for cc in ((8, 0), (9, 0)):
        ptx, _ = cuda.compile_ptx(pyfunc, sig, cc=cc)
        assert f".target sm_{cc[0]}{cc[1]}" in ptx
    if PTXAS is None:
        pytest.skip("ptxas is not on PATH")
    src = tmp_path / "kernel.ptx"
    src.write_text(ptx)
    proc = subprocess.run([PTXAS, "-arch=sm_90", str(src), "-o", str(tmp_path / "kernel.cubin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "kernel.cubin").stat().st_size > 0


# Examples with element-wise computations (the others use only collectives and library
# kernels, compiled by test_fixed_kernel_compiles).
KERNEL_EXAMPLES = [n for n in EXAMPLE_NAMES if n not in ("hierarchical_allreduce", "primitives", "dlrm_embedding")]


@pytest.mark.parametrize("name", KERNEL_EXAMPLES)
def test_generated_kernels_compile(name, tmp_path):
    kernels = generated_kernels(name)
    assert kernels, f"{name} has no kernels"
    for label, kernel, ks in kernels:
        mod = cg._load_module(ks.source, "cuda")
        check_compiles(mod.kernel, kernel_signature(kernel), tmp_path)


def arr(dt, ndim):
    return nt.Array(dt, ndim, "C")


FIXED = [
    *[
        (f"matmul-{d}", ck.matmul_source(d), "matmul", (arr(getattr(nt, d), 3), arr(getattr(nt, d), 3), arr(getattr(nt, d), 3), arr(nt.int64, 1), arr(nt.int32, 1), nt.int64))
        for d in ("float32", "float16", "float64")
    ],
    ("wait_flag", ck.WAIT_FLAG, "wait_flag", (arr(nt.int32, 1), nt.int64, nt.int64)),
    *[
        (f"copy-{s}-{d}", ck.copy_source(s, d), "copy", (nt.Array(nt.float32, s, "A"), nt.Array(nt.float32, d, "A"), nt.int64))
        for s, d in ((1, 1), (2, 3), (3, 2), (3, 3))
    ],
    *[
        (
            f"reduce-{k}-{d}",
            ck.reduce_source(k, d),
            "reduce",
            (arr(getattr(nt, d), 1), arr(getattr(nt, d), 1), nt.int64, nt.int64, arr(nt.int64, 1), arr(nt.int64, 1), arr(nt.int64, 1), arr(nt.int64, 1)),
        )
        for k in ("sum", "avg", "prod", "max", "min")
        for d in ("float32", "float16", "int32")
    ],
    *[
        (f"embedding-{m}", ck.embedding_source(m, "float32"), "embedding_bag", (arr(nt.float32, 3), arr(nt.int32, 3), arr(nt.float32, 3), nt.int64))
        for m in ("sum", "mean", "max")
    ],
]


@pytest.mark.parametrize("label,source,name,args", FIXED, ids=[f[0] for f in FIXED])
def test_fixed_kernel_compiles(label, source, name, args, tmp_path):
    mod = cg._load_module(source, "cuda-rt")
    check_compiles(getattr(mod, name), nt.void(*args), tmp_path)
