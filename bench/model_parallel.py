"""The Megatron-LM model-parallel block (CoCoNet's self-attention tail: MatMul with the
contracted dim sliced, AllReduce, bias + dropout + residual) at B=8, S=1024, H=3072 in
f32 on 2 ranks, for each schedule, side by side: MM-AR-C (as written), MM-RS-C-AG,
MM-fuse(RS-C-AG) and ol(MM,fuse(RS-C-AG)) (the matmul overlapped, chunk by chunk, with
the fused collective on a second stream), in natural order and in the ring and
remote_first orders (blocks reduced by point-to-point transfers).

    python bench/model_parallel.py [--backend local] [--b 8 --s 1024 --h 3072] [--chunks 4] [--reps 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import EXAMPLES, LocalStep, interleaved, note, schedule, table  # noqa: E402


def block_text(b: int, s: int, h: int) -> str:
    text = (EXAMPLES / "megatron_attention.mlir").read_text().replace("f16", "f32")
    return text.replace("8x1024x3072", f"{b}x{s}x{h}").replace("3072x3072", f"{h}x{h}").replace("3072xf32", f"{h}xf32")


def schedules(chunks: int) -> dict[str, str]:
    fused = "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce"
    return {
        "MM-AR-C": "",
        "MM-RS-C-AG": "split-allreduce,reorder-allgather",
        "MM-fuse(RS-C-AG)": fused,
        "ol(MM,fuse(RS-C-AG))": f"{fused},overlap{{chunks={chunks}}}",
        "ol(MM,fuse(RS-C-AG)) ring": f"{fused},overlap{{chunks=2 order=ring}}",
        "ol(MM,fuse(RS-C-AG)) remote_first": f"{fused},overlap{{chunks=2 order=remote_first}}",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--b", type=int, default=8)
    ap.add_argument("--s", type=int, default=1024)
    ap.add_argument("--h", type=int, default=3072)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    text = block_text(args.b, args.s, args.h)
    note("  local backend, every schedule, round-robin")
    steps = {name: LocalStep(schedule(text, pipeline), 2) for name, pipeline in schedules(args.chunks).items()}
    times = interleaved(steps, args.reps, warmup=1)
    for step in steps.values():
        step.close()
    base = times["MM-AR-C"]
    print(f"\nModel-parallel block B={args.b} S={args.s} H={args.h} f32, 2 ranks, local backend (median of {args.reps}):\n")
    print(table([[k, f"{v * 1e3:.1f}", f"{base / v:.2f}x"] for k, v in times.items()], ["schedule", "ms", "speedup vs MM-AR-C"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
