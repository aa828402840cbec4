"""Differential testing of the backends (issue 27): a program runs on the reference
interpreter, on ``local`` (the default lowering, then the runtime) and on ``mpi``, as
written and after a pipeline of rewrite passes, and every run must give the
interpreter's results for the program as written, on the same inputs.

    from support.differential import PIPELINES, check_program, mpi_job

    findings = check_program(prog, PIPELINES[k])   # [] when every run agrees
    job = mpi_job(prog, PIPELINES[k], "p17")        # for runs.run_mpi_batch(..., one_launch=True)

``PIPELINES`` has one entry per rewrite pass, each after the passes that prepare its work
(a split before a reorder, ...), so that drawing them in turn exercises every pass;
``N`` stands for the program's rank count. A pass may refuse a program (a
``PassFailedException``: not a finding); anything else that goes wrong is one: results
that differ, a pass that breaks the program (``PassProducedInvalidIR``), a crash.
"""

from __future__ import annotations

import traceback

from xdsl.utils.exceptions import PassFailedException

from distir.dialects.diagnostics import InputRejected
from distir.passes.pipeline import apply_pipeline
from distir.runtime import npz, run_function
from distir.runtime.equivalence import compare_outputs, program_precision
from distir.runtime.local import LocalBackend

# Fixed programs, run by test_differential.py (and test_odd_corners.py) besides the
# generated ones.

# The issue's program, narrowed from the gradient of a tensor-parallel GPT block on a 2x4
# mesh: all-reduces over dp of operands sliced over tp on different dims.
ISSUE = """\
dist.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @main(%a: !dist.tensor<32x4x8xf32, @mesh, [local, sliced<1>]>, %b: !dist.tensor<4x8x32xf32, @mesh, [local, sliced<0>]>)
    -> (!dist.tensor<32x4x8xf32, @mesh, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @mesh, [replicated, sliced<0>]>) {
  %0 = coll.all_reduce sum %a : !dist.tensor<32x4x8xf32, @mesh, [local, sliced<1>]> -> !dist.tensor<32x4x8xf32, @mesh, [replicated, sliced<1>]>
  %1 = coll.all_reduce sum %b : !dist.tensor<4x8x32xf32, @mesh, [local, sliced<0>]> -> !dist.tensor<4x8x32xf32, @mesh, [replicated, sliced<0>]>
  func.return %0, %1 : !dist.tensor<32x4x8xf32, @mesh, [replicated, sliced<1>]>, !dist.tensor<4x8x32xf32, @mesh, [replicated, sliced<0>]>
}
"""

# A dim of size 0 sliced over the ranks (every block empty), through a collective and a map.
ZERO_SIZE = {
    "all_gather": ("[2]", "!dist.tensor<0x4xf32, @m, [sliced<0>]>", "coll.all_gather %x", "!dist.tensor<0x4xf32, @m, [replicated]>"),
    "reduce_scatter": ("[4]", "!dist.tensor<0x4xf32, @m, [local]>", "coll.reduce_scatter sum %x dim 0", "!dist.tensor<0x4xf32, @m, [sliced<0>]>"),
    "all_to_all": ("[2]", "!dist.tensor<4x0xf32, @m, [sliced<0>]>", "coll.all_to_all %x dim 1", "!dist.tensor<4x0xf32, @m, [sliced<1>]>"),
    "nested": ("[2, 2]", "!dist.tensor<0x4xf32, @m, [sliced<0>, sliced<0>]>", "coll.all_gather %x axes [0, 1]", "!dist.tensor<0x4xf32, @m, [replicated, replicated]>"),
    "take_slice": ("[2]", "!dist.tensor<0x3xf32, @m, [replicated]>", "dist.take_slice %x dim 0", "!dist.tensor<0x3xf32, @m, [sliced<0>]>"),
}


def zero_size_program(shape: str, tin: str, body: str, tout: str) -> str:
    return f"""dist.mesh @m shape = {shape}
func.func @f(%x: {tin}) -> ({tout}, {tout}) {{
  %y = {body} : {tin} -> {tout}
  %z = dist.map(%y) : ({tout}) -> {tout} {{
  ^bb0(%e: f32):
    %d = arith.addf %e, %e : f32
    dist.yield %d : f32
  }}
  func.return %y, %z : {tout}, {tout}
}}
"""


# Meshes of different sizes: each function runs on the rank count of the meshes it uses.
TWO_MESHES = """\
dist.mesh @four shape = [4]
dist.mesh @eight shape = [2, 4] axes = ["dp", "tp"]
dist.mesh @flat shape = [8] view @eight [[0, 1]]
func.func @f(%x: !dist.tensor<8xf32, @four, [local]>) -> !dist.tensor<8xf32, @four, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<8xf32, @four, [local]> -> !dist.tensor<8xf32, @four, [replicated]>
  func.return %y : !dist.tensor<8xf32, @four, [replicated]>
}
func.func @g(%x: !dist.tensor<8xf32, @flat, [sliced<0>]>) -> !dist.tensor<8xf32, @flat, [replicated]> {
  %y = coll.all_gather %x : !dist.tensor<8xf32, @flat, [sliced<0>]> -> !dist.tensor<8xf32, @flat, [replicated]>
  func.return %y : !dist.tensor<8xf32, @flat, [replicated]>
}
"""

PIPELINES: tuple[str, ...] = (
    "fix-mesh-sizes{ranks=N},combine-collectives",
    "split-allreduce",
    "split-allreduce{strategy=reduce-bcast}",
    "split-allreduce,reorder-allgather",
    "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce",
    "fuse-maps,split-allreduce,reorder-allgather,slice-state,fuse-allreduce",
    "split-allreduce{strategy=reduce-bcast},reorder-broadcast,fuse-collectives",
    "split-allreduce,reorder-allgather,fuse-collectives",
    "split-allreduce,reorder-send",
    "fuse-maps",
    "commute-maps",
    "commute-maps{direction=down}",
    "expand-collectives",
    "expand-collectives,commute-maps,cancel-primitives",
    "expand-collectives,form-collectives",
    "overlap{chunks=2}",
    "overlap{order=ring}",
    "canonicalize",
)


def pipeline_for(pipeline: str, ranks: int) -> str:
    return pipeline.replace("ranks=N", f"ranks={ranks}")


def transformed(prog, pipeline: str):
    """``prog``'s module after ``pipeline`` (verified after each pass), or None when a
    pass refuses it."""
    try:
        return apply_pipeline(prog.module(), pipeline_for(pipeline, prog.ranks))
    except (PassFailedException, InputRejected):
        return None


def check_program(prog, pipeline: str, seed: int = 0, local: bool = True) -> list[str]:
    """The findings of one program (see the module doc): the interpreter on the program
    after ``pipeline``, and ``local`` on the program as written and after it."""
    findings: list[str] = []
    where = f"{pipeline}"

    def attempt(what: str, fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - every failure is a finding, reported with the program
            tb = traceback.extract_tb(e.__traceback__)[-1]
            findings.append(f"{what}: {type(e).__name__}: {e} (at {tb.filename}:{tb.lineno})")
            return None

    reference = run_function(prog.module(), prog.func, None, prog.ranks, seed)
    inputs = reference.inputs
    precision = program_precision(npz.select_function(prog.module(), prog.func))

    def agree(what: str, got) -> None:
        if got is None:
            return
        c = compare_outputs(reference.outputs, got, "interpret", what, precision)
        if not c.ok:
            findings.append(f"{what}: {c.message}")

    after = attempt(f"{where}: applying the pipeline", lambda: transformed(prog, pipeline))
    if after is not None:
        agree(f"interpret after {where}", attempt(f"interpret after {where}", lambda: run_function(after, prog.func, inputs, prog.ranks).outputs))
    if local:
        backend = LocalBackend()
        agree("local", attempt("local", lambda: backend.run(prog.module(), prog.func, inputs, prog.ranks, seed)))
        if after is not None:
            agree(f"local after {where}", attempt(f"local after {where}", lambda: backend.run(after, prog.func, inputs, prog.ranks, seed)))
    return findings


def mpi_job(prog, pipeline: str | None, job_id: str, seed: int = 0) -> dict | None:
    """A job of ``runtime/mpi_batch.py``: the program (after ``pipeline``, when given
    and a pass does not refuse it) on the mpi backend, compared with the interpreter."""
    module = prog.module() if pipeline is None else transformed(prog, pipeline)
    if module is None:
        return None
    return {"id": job_id, "text": str(module), "func": prog.func, "ranks": prog.ranks, "seed": seed}
