"""distir's fused AdamW against DDP + torch.optim.AdamW on the GPT of
``examples/pytorch/train_gpt.py``, 2 ranks, side by side in one run.

    python bench/pytorch_step.py                      # starts torchrun --nproc-per-node 2
    python bench/pytorch_step.py --layers 6 --width 384 --context 64 --batch 4 --rounds 8

Every rank builds the same model three times and trains each copy in turn, round after
round (so that a change in the machine's load hits all alike):

* ``fb``: forward + backward only (no gradient synchronisation, no update);
* ``ddp-fused`` / ``ddp-foreach``: ``DistributedDataParallel`` over gloo +
  ``torch.optim.AdamW(fused=True)`` / ``(foreach=True)``;
* ``distir``: no DDP; ``distir.frameworks.pytorch.AdamW`` (fuse(RS-AdamW-AG) on the
  shared-memory arenas, state sliced over the ranks).

It prints, per configuration, the median whole training step and the gradient sync +
update time (whole step minus ``fb``; for distir also ``optimizer.step()`` timed alone),
and the ratios DDP / distir. CPU only so far: the GPU comparison (DDP on NCCL + fused
AdamW against distir on ``nccl``) is not written yet.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from distir.examples.pytorch import train_gpt as T
    from distir.frameworks.pytorch import AdamW

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    data = T.corpus()

    def model():
        torch.manual_seed(0)
        return T.GPT(256, args.context, args.width, args.layers, args.heads)

    configs = {}
    net = model()
    configs["fb"] = (net, None, net)
    for impl in args.torch_impls:
        net = model()
        kw = {"fused": True} if impl == "fused" else {"foreach": True}
        configs[f"ddp-{impl}"] = (DDP(net), torch.optim.AdamW(net.parameters(), lr=3e-4, **kw), net)
    net = model()
    configs["distir"] = (net, AdamW(net.parameters(), lr=3e-4, schedule=args.schedule), net)
    times: dict[str, list[float]] = {k: [] for k in configs}
    opt_times: list[float] = []
    step = 0
    for r in range(args.warmup + args.rounds):
        for name, (call, opt, net) in configs.items():
            for _ in range(args.steps):
                x, y = T.batch(data, 0, step, rank, args.batch, args.context)
                step += 1
                dist.barrier()
                t0 = time.perf_counter()
                if opt is not None:
                    opt.zero_grad()
                else:
                    net.zero_grad()
                loss = T.loss_of(call, x, y)
                loss.backward()
                t1 = time.perf_counter()
                if opt is not None:
                    opt.step()
                t2 = time.perf_counter()
                if r >= args.warmup:
                    times[name].append(t2 - t0)
                    if name == "distir":
                        opt_times.append(t2 - t1)
    med = {k: statistics.median(v) for k, v in times.items()}
    if rank == 0:
        params = sum(p.numel() for p in configs["fb"][2].parameters())
        result = {"params": params, "ranks": ranks, "median_step_s": med, "distir_optimizer_step_s": statistics.median(opt_times)}
        Path(args.out).write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0


def report(result: dict) -> None:
    med = result["median_step_s"]
    fb = med["fb"]
    print(f"GPT {result['params'] / 1e6:.1f} M parameters, {result['ranks']} ranks, median of the rounds")
    print(f"{'configuration':<14} {'whole step ms':>14} {'sync+update ms':>15}")
    for k, v in med.items():
        sync = "" if k == "fb" else f"{(v - fb) * 1e3:15.1f}"
        print(f"{k:<14} {v * 1e3:14.1f} {sync}")
    print(f"distir optimizer.step() alone: {result['distir_optimizer_step_s'] * 1e3:.1f} ms")
    d = med["distir"]
    for k in med:
        if k.startswith("ddp-"):
            sync_ratio = (med[k] - fb) / max(d - fb, 1e-9)
            alone = (med[k] - fb) / result["distir_optimizer_step_s"]
            print(f"{k} / distir: sync+update {sync_ratio:.2f}x ({alone:.2f}x against optimizer.step() alone), whole step {med[k] / d:.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="steps of one configuration per round")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--schedule", default=None, help="distir's schedule (default fused)")
    ap.add_argument("--torch-impls", default="fused,foreach")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.torch_impls = [s for s in args.torch_impls.split(",") if s]
    if args.worker:
        return worker(args)
    out = Path(args.json or "/tmp/distir-pytorch-step.json")
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", str(args.ranks), __file__, "--worker", "--out", str(out)]
    passthrough = ["--layers", "--width", "--heads", "--context", "--batch", "--rounds", "--warmup", "--steps", "--threads"]
    for flag in passthrough:
        cmd += [flag, str(getattr(args, flag[2:].replace("-", "_")))]
    cmd += ["--torch-impls", ",".join(args.torch_impls)]
    if args.schedule:
        cmd += ["--schedule", args.schedule]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        return proc.returncode
    report(json.loads(out.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
