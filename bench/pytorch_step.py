"""distir's fused AdamW against DDP + torch.optim.AdamW on the GPT of
``examples/pytorch/train_gpt.py``, 2 ranks, side by side in one run, in f32 and in bf16
with fp32 master weights.

    python bench/pytorch_step.py                      # starts torchrun --nproc-per-node 2
    python bench/pytorch_step.py --layers 6 --width 384 --context 64 --batch 4 --rounds 8
    python bench/pytorch_step.py --precision bf16 --rounds 3 --steps 2   # a quick look

Every rank builds the same model once per configuration and trains each copy in turn,
round after round (so that a change in the machine's load hits all alike):

* ``fb`` / ``fb-bf16``: forward + backward only (no gradient synchronisation, no
  update), on the f32 / bf16 model;
* ``ddp-fused`` / ``ddp-foreach``: ``DistributedDataParallel`` over gloo +
  ``torch.optim.AdamW(fused=True)`` / ``(foreach=True)``;
* ``distir``: no DDP; ``distir.frameworks.pytorch.AdamW`` (fuse(RS-AdamW-AG) on the
  shared-memory arenas, state sliced over the ranks);
* ``ddp-bf16``: the bf16 model under DDP (gloo averages the bf16 gradients), then
  ``AdamW(fused=True)`` on fp32 master weights (the gradients cast up, the master
  weights cast back into the model): mixed precision as people write it with DDP;
* ``distir-bf16``: the bf16 model with distir's AdamW (one fused collective averages
  the bf16 gradients in f32, updates this rank's slice of the fp32 master weights and
  state, and writes the new bf16 parameters into every rank's model).

What it measures, per configuration: the **whole step** (``zero_grad``, forward,
backward, gradient synchronisation and update: ``optimizer.step()``, which for distir
holds the synchronisation too); **sync + update**, the whole step minus forward +
backward alone of the same precision in the same round; and for distir **optimizer.step
alone**, its step call timed by itself. Each round gives one figure per configuration
(the median of its steps); the report gives the median over the rounds and their spread
(lowest to highest), then the ratios DDP / distir of the medians. The machine's load
average is read before and after: when other work shares the cores, or the rounds spread
by more than 25%, the report says the figures are unreliable (they move with the load;
measure on a quiet machine). CPU only so far: the GPU comparison (DDP on NCCL + fused
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
SPREAD_LIMIT = 0.25
"""Rounds spreading by more than this (relative to their median) make a figure unreliable."""


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

    def model(dtype=torch.float32):
        torch.manual_seed(0)
        return T.GPT(256, args.context, args.width, args.layers, args.heads).to(dtype)

    class Master:
        """AdamW(fused=True) on fp32 master weights of a bf16 model (DDP averaged the
        bf16 gradients): cast the gradients up, step, cast the master weights back."""

        def __init__(self, net):
            self.params = list(net.parameters())
            self.master = [p.detach().float().clone().requires_grad_() for p in self.params]
            self.opt = torch.optim.AdamW(self.master, lr=3e-4, fused=True)

        def zero_grad(self):
            for p in self.params:
                p.grad = None

        @torch.no_grad()
        def step(self):
            for p, m in zip(self.params, self.master):
                m.grad = p.grad.float()
            self.opt.step()
            for p, m in zip(self.params, self.master):
                p.copy_(m)

    configs = {}
    if "f32" in args.precision:
        net = model()
        configs["fb"] = (net, None, net)
        for impl in args.torch_impls:
            net = model()
            kw = {"fused": True} if impl == "fused" else {"foreach": True}
            configs[f"ddp-{impl}"] = (DDP(net), torch.optim.AdamW(net.parameters(), lr=3e-4, **kw), net)
        net = model()
        configs["distir"] = (net, AdamW(net.parameters(), lr=3e-4, schedule=args.schedule), net)
    if "bf16" in args.precision:
        net = model(torch.bfloat16)
        configs["fb-bf16"] = (net, None, net)
        net = model(torch.bfloat16)
        configs["ddp-bf16"] = (DDP(net), Master(net), net)
        net = model(torch.bfloat16)
        configs["distir-bf16"] = (net, AdamW(net.parameters(), lr=3e-4, schedule=args.schedule), net)
    rounds: dict[str, list[float]] = {k: [] for k in configs}
    opt_rounds: dict[str, list[float]] = {k: [] for k in configs if k.startswith("distir")}
    step = 0
    for r in range(args.warmup + args.rounds):
        for name, (call, opt, net) in configs.items():
            times, opt_times = [], []
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
                times.append(t2 - t0)
                opt_times.append(t2 - t1)
            if r >= args.warmup:
                rounds[name].append(statistics.median(times))
                if name in opt_rounds:
                    opt_rounds[name].append(statistics.median(opt_times))
    if rank == 0:
        params = sum(p.numel() for p in next(iter(configs.values()))[2].parameters())
        result = {"params": params, "ranks": ranks, "rounds": rounds, "optimizer_step": opt_rounds, "steps": args.steps}
        Path(args.out).write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def summary(values: list[float]) -> tuple[float, float, float]:
    """(median, lowest, highest) of per-round figures."""
    return statistics.median(values), min(values), max(values)


def spread(values: list[float]) -> float:
    med, lo, hi = summary(values)
    return (hi - lo) / med if med > 0 else 0.0


def cell(values: list[float]) -> str:
    med, lo, hi = summary(values)
    return f"{med * 1e3:8.1f} ({lo * 1e3:.1f}-{hi * 1e3:.1f})"


def report(result: dict, load: tuple[float, float], cores: int) -> None:
    rounds = result["rounds"]
    n = len(next(iter(rounds.values())))
    print(f"GPT {result['params'] / 1e6:.1f} M parameters, {result['ranks']} ranks (torchrun), {n} rounds x {result['steps']} steps per configuration")
    print("whole step: zero_grad + forward + backward + gradient sync + update (optimizer.step; distir's holds the sync)")
    print("sync+update: whole step - forward+backward alone (same precision, same round); optimizer.step: distir's step call alone")
    print("figures: median of the rounds (lowest-highest round); ms")
    fb = {"f32": rounds.get("fb"), "bf16": rounds.get("fb-bf16")}
    sync: dict[str, list[float]] = {}
    print(f"{'configuration':<14} {'whole step':>24} {'sync+update':>24} {'optimizer.step':>24}")
    unreliable = []
    for k, v in rounds.items():
        base = fb["bf16" if k.endswith("bf16") else "f32"]
        line = f"{k:<14} {cell(v):>24}"
        if not k.startswith("fb") and base is not None:
            sync[k] = [a - b for a, b in zip(v, base)]
            line += f" {cell(sync[k]):>24}"
        if k in result["optimizer_step"]:
            line += f" {cell(result['optimizer_step'][k]):>24}"
        print(line)
        for what, vals in (("whole step", v), ("sync+update", sync.get(k))):
            if vals and spread(vals) > SPREAD_LIMIT:
                unreliable.append(f"{k} {what} {spread(vals) * 100:.0f}%")
    med = {k: summary(v)[0] for k, v in rounds.items()}
    for distir, ddps in (("distir", [k for k in rounds if k.startswith("ddp-") and not k.endswith("bf16")]), ("distir-bf16", ["ddp-bf16"])):
        if distir not in rounds:
            continue
        alone = summary(result["optimizer_step"][distir])[0]
        d_sync = summary(sync[distir])[0]
        for k in ddps:
            k_sync = summary(sync[k])[0]
            print(
                f"{k} / {distir}: sync+update {k_sync / max(d_sync, 1e-9):.2f}x ({k_sync / alone:.2f}x against optimizer.step alone), "
                f"whole step {med[k] / med[distir]:.2f}x"
            )
    before, after = load
    print(f"load average {before:.2f} before, {after:.2f} after, on {cores} cores")
    if max(before, after) > 0.5 * cores or unreliable:
        why = []
        if max(before, after) > 0.5 * cores:
            why.append(f"load average {max(before, after):.2f} on {cores} cores: other work shares the cores")
        if unreliable:
            why.append("rounds spread by more than 25%: " + ", ".join(unreliable))
        print("WARNING: these figures are unreliable (" + "; ".join(why) + "); they move with the machine's load: measure on a quiet machine")


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
    ap.add_argument("--precision", default="f32,bf16", help="f32, bf16 or both (comma-separated)")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.torch_impls = [s for s in args.torch_impls.split(",") if s]
    args.precision = [s for s in args.precision.split(",") if s]
    if not set(args.precision) <= {"f32", "bf16"} or not args.precision:
        ap.error("--precision takes f32, bf16 or both")
    if args.worker:
        return worker(args)
    out = Path(args.json or "/tmp/distir-pytorch-step.json")
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", str(args.ranks), __file__, "--worker", "--out", str(out)]
    passthrough = ["--layers", "--width", "--heads", "--context", "--batch", "--rounds", "--warmup", "--steps", "--threads"]
    for flag in passthrough:
        cmd += [flag, str(getattr(args, flag[2:].replace("-", "_")))]
    cmd += ["--torch-impls", ",".join(args.torch_impls), "--precision", ",".join(args.precision)]
    if args.schedule:
        cmd += ["--schedule", args.schedule]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    before = os.getloadavg()[0]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    after = os.getloadavg()[0]
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        return proc.returncode
    report(json.loads(out.read_text()), (before, after), os.cpu_count() or 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
