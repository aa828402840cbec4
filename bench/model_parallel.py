"""The Megatron-LM model-parallel block (CoCoNet's self-attention tail: MatMul with the
contracted dim sliced, AllReduce, bias + dropout + residual) at B=8, S=1024, H=3072 in
f32 on 2 ranks, for each schedule, side by side: MM-AR-C (as written), MM-RS-C-AG,
MM-fuse(RS-C-AG) and ol(MM,fuse(RS-C-AG)) (the matmul overlapped, chunk by chunk, with
the fused collective on a second stream), in natural order and in the ring and
remote_first orders (blocks reduced by point-to-point transfers). Each schedule runs on
the local backend, round-robin with MM-AR-C, so that each speedup compares two times
measured side by side; only those two programs are in memory at a time.

    python bench/model_parallel.py [--b 8 --s 1024 --h 3072] [--chunks 4] [--reps 5]

Memory: about 3 GB at the default size (it grows with B*S*H and H*H).
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
    plans = schedules(args.chunks)
    base = LocalStep(schedule(text, plans.pop("MM-AR-C")), 2)
    rows = []
    for name, pipeline in plans.items():
        note(f"  {name} and MM-AR-C, round-robin")
        step = LocalStep(schedule(text, pipeline), 2)
        times = interleaved({"MM-AR-C": base, name: step}, args.reps, warmup=1)
        step.close()
        rows.append([name, f"{times[name] * 1e3:.1f}", f"{times['MM-AR-C'] * 1e3:.1f}", f"{times['MM-AR-C'] / times[name]:.2f}x"])
    base.close()
    print(f"\nModel-parallel block B={args.b} S={args.s} H={args.h} f32, 2 ranks, local backend (median of {args.reps}):\n")
    print(table(rows, ["schedule", "ms", "MM-AR-C alongside (ms)", "speedup vs MM-AR-C"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
