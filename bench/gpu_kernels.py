"""Where a generated program's time goes on one GPU: each program of ``bench/gpu_check.py``'s
kernel and AdamW checks, run on the ``nccl`` backend's rank (1 rank), timed whole (host
clock, the median of ``--repeat`` runs) and, under Nsight Compute, kernel by kernel::

    python bench/gpu_kernels.py                        # whole-program times
    ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \\
        python bench/gpu_kernels.py --repeat 1         # every kernel's time and DRAM bytes

The sum of the kernels' times against the whole run's time is the host's share (Python
executor, launches, NCCL's 1-rank calls); each kernel's DRAM bytes over its time against
the copy bandwidth is how close the generated code gets to the memory system.
Needs a GPU and what ``bench/gpu_check.py --wheels`` installs (``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_check import ROOT, OneRank, _median_time, adamw_program, copy_bandwidth  # noqa: E402

PROGRAMS = [
    ("sgd as written (all_reduce + 2 maps)", "sgd.mlir", ""),
    ("sgd fuse-maps (all_reduce + 1 map)", "sgd.mlir", "fuse-maps"),
    ("adam fuse(RS-Adam-AG) sliced state", "adam.mlir", "split-allreduce,reorder-allgather,fuse-maps,slice-state{targets=m,v},fuse-allreduce"),
]


def lowered(file: str, pipeline: str, n: int):
    from distir.dialects.context import parse_module
    from distir.passes.pipeline import apply_pipeline
    from distir.runtime.executor import LoweredProgram

    module = parse_module((ROOT / "examples" / file).read_text().replace("1048576", str(n)))
    if pipeline:
        apply_pipeline(module, pipeline)
    fn = next(op.sym_name.data for op in module.ops if op.name == "func.func")
    return LoweredProgram.build(module, fn, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    n = args.elements
    bw = copy_bandwidth(n, False, max(args.repeat, 3))
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s ({n:,} f32)")
    cases = [(label, lowered(f, p, n)) for label, f, p in PROGRAMS] + [("distir AdamW step program (fuse(RS-Opt-AG))", adamw_program(n))]
    for label, program in cases:
        inputs = program.prepare_inputs({}, 4)
        one = OneRank(program, False)
        run_args = one.args(inputs)
        ops = Counter(op.name for op in program.func.walk() if op.name.startswith(("rt.", "nccl.")))
        launches = ", ".join(f"{k} x{v}" for k, v in sorted(ops.items()))
        t = _median_time(lambda: one.run(run_args), args.repeat) if args.repeat > 1 else None
        if t is None:
            one.run(run_args)
        timing = f"{t * 1e3:.3f} ms per run" if t else "run once"
        print(f"{label}: {timing}; {launches}; {n:,} f32", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
