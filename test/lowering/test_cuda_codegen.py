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

# numba itself still ships a deprecated numba.cuda that imports without the GPU extra but
# needs a CUDA driver to type kernels: ask for the numba-cuda package itself.
pytest.importorskip("numba_cuda", reason="the GPU extra (numba-cuda) is not installed")
cuda = pytest.importorskip("numba.cuda", reason="the GPU extra (numba-cuda) is not installed")
from numba import types as nt  # noqa: E402
from support.lowered import EXAMPLE_NAMES, schedules  # noqa: E402
from xdsl.dialects.builtin import BFloat16Type, IndexType, MemRefType  # noqa: E402

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
        elif isinstance(t, BFloat16Type):
            args.append(nt.float32)  # bf16 scalars are passed widened (runtime/cuda.py)
        else:
            args.append(getattr(nt, cg.storage_name(t, "cuda")))
    return nt.void(*args)


NVCC = shutil.which("nvcc")
NVLINK = shutil.which("nvlink")


def check_compiles(pyfunc, sig, tmp_path):
    for cc in ((8, 0), (9, 0)):
        ptx, _ = cuda.compile_ptx(pyfunc, sig, cc=cc)
        assert f".target sm_{cc[0]}{cc[1]}" in ptx
    if PTXAS is None:
        pytest.skip("ptxas is not on PATH")
    src = tmp_path / "kernel.ptx"
    src.write_text(ptx)
    cubin = tmp_path / "kernel.cubin"
    if ".extern .func" not in ptx:
        proc = subprocess.run([PTXAS, "-arch=sm_90", str(src), "-o", str(cubin)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    else:
        # bf16 conversions call numba.cuda.bf16's CUDA C++ shims, which numba-cuda
        # compiles with NVRTC and links when it loads the kernel on a GPU; here: the
        # kernel as a relocatable sm_90 object, the shims by nvcc, linked by nvlink.
        from numba.cuda._internal import cuda_bf16

        proc = subprocess.run([PTXAS, "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / "kernel.o")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        if NVCC is None or NVLINK is None:
            pytest.skip("nvcc/nvlink are not on PATH (the bf16 shims cannot be linked)")
        shim = tmp_path / "shim.cu"
        shim.write_text(cuda_bf16.shim_stream.getvalue())
        proc = subprocess.run([NVCC, "-arch=sm_90", "-rdc=true", "-c", str(shim), "-o", str(tmp_path / "shim.o")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        proc = subprocess.run([NVLINK, "-arch=sm_90", str(tmp_path / "kernel.o"), str(tmp_path / "shim.o"), "-o", str(cubin)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert cubin.stat().st_size > 0


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


def elt(d: str):
    """The numba element type of a dtype's device arrays (bf16: its bits)."""
    return nt.uint16 if d == "bfloat16" else getattr(nt, d)


FIXED = [
    *[
        (
            f"matmul-{d}",
            ck.matmul_source(d),
            "matmul",
            (arr(elt(d), 3), arr(elt(d), 3), arr(elt(d), 3), arr(nt.int64, 1), arr(nt.int64, 1), *[nt.int64] * 9),
        )
        for d in ("float32", "float16", "float64", "bfloat16")
    ],
    ("wait_flag", ck.WAIT_FLAG, "wait_flag", (arr(nt.int64, 1), nt.int64, nt.int64)),
    *[
        (
            f"embedding-tiled-{m}-{d}",
            ck.embedding_tiled_source(m, d),
            "embedding_tiled",
            (arr(elt(d), 3), arr(nt.int32, 3), arr(elt(d), 3), nt.int64, arr(nt.int64, 1), arr(nt.int64, 1), *[nt.int64] * 9),
        )
        for m, d in (("sum", "float32"), ("mean", "float16"), ("max", "bfloat16"))
    ],
    *[
        (f"combine-{k}-{d}", ck.combine_source(k, d, 2), "combine", (nt.Array(elt(d), 2, "A"), nt.Array(elt(d), 2, "A"), nt.int64, nt.float64))
        for k, d in (("sum", "float32"), ("avg", "float32"), ("max", "float16"), ("sum", "bfloat16"))
    ],
    ("reduce-sum-bfloat16", ck.reduce_source("sum", "bfloat16"), "reduce", (arr(nt.uint16, 1), arr(nt.uint16, 1), nt.int64, nt.int64, arr(nt.int64, 1), arr(nt.int64, 1), arr(nt.int64, 1), arr(nt.int64, 1), nt.float64)),
    ("embedding-sum-bfloat16", ck.embedding_source("sum", "bfloat16"), "embedding_bag", (arr(nt.uint16, 3), arr(nt.int32, 3), arr(nt.uint16, 3), nt.int64)),
    *[
        (f"copy-{s}-{d}", ck.copy_source(s, d), "copy", (nt.Array(nt.float32, s, "A"), nt.Array(nt.float32, d, "A"), nt.int64))
        for s, d in ((1, 1), (2, 3), (3, 2), (3, 3))
    ],
    *[
        (
            f"reduce-{k}-{d}",
            ck.reduce_source(k, d),
            "reduce",
            (arr(getattr(nt, d), 1), arr(getattr(nt, d), 1), nt.int64, nt.int64, arr(nt.int64, 1), arr(nt.int64, 1), arr(nt.int64, 1), arr(nt.int64, 1), nt.float64),
        )
        for k in ("sum", "avg", "prod", "max", "min")
        for d in ("float32", "float16", "int32")
    ],
    *[
        (f"embedding-{m}", ck.embedding_source(m, "float32"), "embedding_bag", (arr(nt.float32, 3), arr(nt.int32, 3), arr(nt.float32, 3), nt.int64))
        for m in ("sum", "mean", "max")
    ],
    ("scatter-add-float32", ck.scatter_add_source("float32"), "scatter_add", (arr(nt.int32, 3), arr(nt.float32, 3), arr(nt.float32, 3), nt.int64)),
    ("scatter-add-bfloat16", ck.scatter_add_source("bfloat16"), "scatter_add", (arr(nt.int64, 3), arr(nt.uint16, 3), arr(nt.uint16, 3), nt.int64)),
    ("sort-1-int32", ck.sort_source(1, "int32"), "sort", (arr(nt.int32, 3), arr(nt.int32, 3), nt.int64, nt.int64, nt.int64)),
    ("sort-2-float32", ck.sort_source(2, "float32"), "sort", (arr(nt.float32, 3), arr(nt.int32, 3), arr(nt.float32, 3), arr(nt.int32, 3), nt.int64, nt.int64, nt.int64)),
    ("sort-1-bfloat16", ck.sort_source(1, "bfloat16"), "sort", (arr(nt.uint16, 3), arr(nt.uint16, 3), nt.int64, nt.int64, nt.int64)),
]


@pytest.mark.parametrize("label,source,name,args", FIXED, ids=[f[0] for f in FIXED])
def test_fixed_kernel_compiles(label, source, name, args, tmp_path):
    mod = cg._load_module(source, "cuda-rt")
    check_compiles(getattr(mod, name), nt.void(*args), tmp_path)


BF16_MAP = """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<64xbf16, @world, [sliced<0>]>, %y: !dist.tensor<64xbf16, @world, [sliced<0>]>, %k: bf16) -> !dist.tensor<64xbf16, @world, [sliced<0>]> {
  %z = dist.map(%x, %y, %k) : (!dist.tensor<64xbf16, @world, [sliced<0>]>, !dist.tensor<64xbf16, @world, [sliced<0>]>, bf16) -> !dist.tensor<64xbf16, @world, [sliced<0>]> {
  ^bb0(%a: bf16, %b: bf16, %c: bf16):
    %m = arith.mulf %a, %c : bf16
    %e = math.exp %m : bf16
    %r = arith.addf %e, %b : bf16
    dist.yield %r : bf16
  }
  func.return %z : !dist.tensor<64xbf16, @world, [sliced<0>]>
}"""


def test_generated_bf16_kernel_compiles(tmp_path):
    """A generated kernel over bf16 tensors: bf16 arrays hold bits, converted with
    numba.cuda.bf16 on load and store, arithmetic in f32."""
    program = LoweredProgram.build(parse_module(BF16_MAP), None, 2)
    (kernel,) = program.kernels.values()
    ks = cg.cuda_source(kernel)
    assert "_bf16_load(" in ks.source and "_bf16_store(" in ks.source
    mod = cg._load_module(ks.source, "cuda")
    check_compiles(mod.kernel, kernel_signature(kernel), tmp_path)


SCALAR_MAP = """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %u: !dist.tensor<64xi32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  %z = dist.map(%x, %u) : (!dist.tensor<64xf32, @world, [sliced<0>]>, !dist.tensor<64xi32, @world, [sliced<0>]>) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%a: f32, %b: i32):
    %i = arith.bitcast %a : f32 to i32
    %q = arith.divui %i, %b : i32
    %r = arith.remui %q, %b : i32
    %m = arith.maxui %r, %b : i32
    %f = arith.uitofp %m : i32 to f32
    %w = arith.extui %b : i32 to i64
    %g = arith.uitofp %w : i64 to f32
    %e = math.erfc %f : f32
    %k = arith.remf %e, %g : f32
    %c = arith.bitcast %k : f32 to i32
    %d = arith.bitcast %c : i32 to f32
    dist.yield %d : f32
  }
  func.return %z : !dist.tensor<64xf32, @world, [sliced<0>]>
}"""


def test_generated_kernel_with_the_front_ends_scalar_ops_compiles(tmp_path):
    """The scalar ops the front ends write into map bodies (bitcast through libdevice,
    the unsigned integer ops, erfc, remf as math.fmod) compile for a GPU."""
    program = LoweredProgram.build(parse_module(SCALAR_MAP), None, 2)
    (kernel,) = program.kernels.values()
    ks = cg.cuda_source(kernel)
    assert "_bitcast_fi32(" in ks.source and "math.fmod(" in ks.source and "math.erfc(" in ks.source
    mod = cg._load_module(ks.source, "cuda")
    check_compiles(mod.kernel, kernel_signature(kernel), tmp_path)
