"""Train a small GPT data-parallel with distir's fused AdamW or with DDP + torch.optim.AdamW.

    mpiexec -n 2 python examples/pytorch/train_gpt.py --optimizer distir
    torchrun --nproc-per-node 2 examples/pytorch/train_gpt.py --optimizer ddp
    python examples/pytorch/train_gpt.py --layers 2 --width 32 --heads 2 --steps 50   # one rank

The model is written here in plain PyTorch: token + position embedding, ``--layers``
pre-norm blocks of causal self-attention + MLP, a final LayerNorm and the output layer
tied to the token embedding (10-30 M parameters with ``--width 384..640 --layers 6..8``).
It reads text that ships with distir (its own documentation and sources) as bytes (a
256-token vocabulary); every rank draws its own batches (``--seed``, rank, step), as a
``DistributedSampler`` would.

``--optimizer distir``: no DDP wrapper; ``distir.frameworks.pytorch.AdamW`` averages the
gradients and updates the parameters in one fused step (fuse(RS-AdamW-AG), optimizer state
sliced over the ranks). ``--optimizer ddp``: ``DistributedDataParallel`` (gloo) +
``torch.optim.AdamW`` (``--torch-impl single|foreach|fused``). Under ``mpiexec`` the DDP run
makes its gloo process group from MPI's ranks; distir uses MPI itself.

Prints the loss, the step time and the optimizer-state bytes per rank, with a progress
bar on rank 0; ``--json FILE`` writes the losses, times and state bytes, ``--save-params``
the final parameters (npz), ``--checkpoint``/``--resume`` the model and optimizer state.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
try:
    import torch
except ModuleNotFoundError as e:
    sys.exit(f"{Path(__file__).name} needs PyTorch ({e}): pip install 'distir[torch]'")
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


# ======================================================================================
# The model
# ======================================================================================


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)  # a key bias has no gradient but rounding noise
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token + position embedding, ``layers`` blocks, LayerNorm, tied output layer."""

    def __init__(self, vocab: int = 256, context: int = 128, width: int = 384, layers: int = 6, heads: int = 6):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


# ======================================================================================
# Data: distir's own docs and sources as bytes
# ======================================================================================


def corpus() -> np.ndarray:
    """The bytes of distir's Markdown and Python files (sorted by path; not those under a
    hidden folder, such as a virtual environment or the kernel cache, which grows as
    kernels compile)."""
    found: dict[str, list[Path]] = {".md": [], ".py": []}
    for folder, subfolders, names in os.walk(ROOT):  # (ROOT itself may be an installed site-packages/distir)
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "site-packages"]  # not walked at all
        for name in names:
            kind = os.path.splitext(name)[1]
            if kind in found and not name.startswith("."):
                found[kind].append(Path(folder, name))
    parts = [f.read_bytes() for kind in (".md", ".py") for f in sorted(found[kind])]
    return np.frombuffer(b"\n".join(parts), dtype=np.uint8)


def batch(data: np.ndarray, seed: int, step: int, rank: int, size: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of step ``step``: ``size`` windows of ``context + 1`` bytes."""
    rng = np.random.default_rng([seed, step, rank])
    starts = rng.integers(0, len(data) - context - 1, size)
    win = np.stack([data[s : s + context + 1] for s in starts]).astype(np.int64)
    t = torch.from_numpy(win)
    return t[:, :-1], t[:, 1:]


# ======================================================================================
# Launchers
# ======================================================================================


def launched() -> tuple[str, int, int]:
    """(launcher, rank, ranks): ``torchrun`` (RANK/WORLD_SIZE), ``mpiexec`` (PMI_*), or
    one process."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return "torchrun", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "PMI_RANK" in os.environ:
        return "mpiexec", int(os.environ["PMI_RANK"]), int(os.environ.get("PMI_SIZE", "1"))
    return "single", 0, 1


def init_process_group(launcher: str, rank: int, ranks: int) -> None:
    """A gloo process group: torchrun's rendezvous, or under mpiexec one whose port rank
    0 picks and MPI broadcasts."""
    import torch.distributed as dist

    if launcher == "mpiexec":
        from mpi4py import MPI

        port = None
        if rank == 0:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        port = MPI.COMM_WORLD.bcast(port, root=0)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
    else:
        dist.init_process_group("gloo")


def leave(code: int) -> None:
    """End this rank with exit status ``code`` once its work is done: Python's exit
    handlers run (distir's among them), the output is flushed, and the process ends
    without finalizing the interpreter. A gloo worker thread may still be letting go of
    the last exchange's tensors after ``destroy_process_group`` (it takes the GIL to do
    so); if the interpreter is finalizing by then, Python ends that thread inside a C++
    destructor and the finished rank aborts ("terminate called without an active
    exception", SIGABRT), so that its launcher reports the job failed. A known torch
    problem (pytorch/pytorch#179291); seen here about once per run of distir's suite
    with three test processes on two cores, also with DDP alone."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def make_optimizer(args, model: nn.Module, launcher: str):
    """(model to call, optimizer)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": other, "weight_decay": 0.0}]
    if args.optimizer == "ddp":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model) if dist.is_initialized() else model
        impl = {"single": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}[args.torch_impl]
        return net, torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), **impl)
    from distir.frameworks.pytorch import AdamW

    comm = "mpi" if launcher == "mpiexec" else None
    return model, AdamW(groups, lr=args.lr, betas=(0.9, 0.95), schedule=args.schedule, comm=comm)


def state_bytes(opt) -> int:
    if hasattr(opt, "state_bytes"):
        return opt.state_bytes()
    return sum(v.numel() * v.element_size() for st in opt.state.values() for k, v in st.items() if torch.is_tensor(v) and k != "step")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", choices=("ddp", "distir"), default="distir")
    ap.add_argument("--torch-impl", choices=("single", "foreach", "fused"), default="single", help="torch.optim.AdamW's implementation (ddp)")
    ap.add_argument("--schedule", default=None, help="distir's schedule: fused (default), ar, auto or a -p pipeline")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads per rank (default: cores / ranks)")
    ap.add_argument("--json", help="write losses, step times and state bytes here (rank 0)")
    ap.add_argument("--save-params", help="write the final parameters here (npz, rank 0)")
    ap.add_argument("--checkpoint", help="write model + optimizer state here after the last step (rank 0)")
    ap.add_argument("--resume", help="start from this checkpoint (its step count continues)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.width % args.heads:
        ap.error("--width must be a multiple of --heads")

    launcher, rank, ranks = launched()
    if rank == 0 and not args.quiet:
        # the defaults take about 3 minutes on 2 CPU cores: say so before the first step
        print(f"train_gpt.py: {args.steps} steps of a {args.layers}-layer GPT (width {args.width}) on {ranks} rank(s); "
              "the first step builds the optimizer's kernels. The defaults take about 3 minutes on 2 CPU cores "
              "(--steps, --layers, --width for a quicker run)", flush=True)
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // ranks))
    if ranks > 1 and (args.optimizer == "ddp" or launcher == "torchrun"):
        init_process_group(launcher, rank, ranks)
    torch.manual_seed(args.seed)
    model = GPT(256, args.context, args.width, args.layers, args.heads)
    start = 0
    checkpoint = None
    if args.resume:
        checkpoint = torch.load(args.resume, weights_only=False)
        model.load_state_dict(checkpoint["model"])
        start = checkpoint["step"]
    net, opt = make_optimizer(args, model, launcher)
    if checkpoint is not None:
        opt.load_state_dict(checkpoint["optimizer"])
    data = corpus()
    params = sum(p.numel() for p in model.parameters())
    losses, times = [], []
    bar = None
    if rank == 0 and not args.quiet:
        from tqdm import tqdm

        print(f"GPT {params / 1e6:.2f} M parameters, {ranks} ranks ({launcher}), optimizer {args.optimizer}", flush=True)
        bar = tqdm(total=args.steps, unit="step")
    for step in range(start, start + args.steps):
        x, y = batch(data, args.seed, step, rank, args.batch, args.context)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_of(net, x, y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if bar is not None:
            bar.set_postfix(loss=f"{losses[-1]:.4f}", ms=f"{times[-1] * 1e3:.1f}")
            bar.update()
    if bar is not None:
        bar.close()
    sbytes = state_bytes(opt)
    sd = opt.state_dict() if args.checkpoint else None  # collective on distir
    if rank == 0:
        med = sorted(times)[len(times) // 2] if times else 0.0
        print(f"final loss {losses[-1]:.4f}  step time {med * 1e3:.1f} ms (median)  optimizer state {sbytes} bytes on rank 0", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"losses": losses, "times": times, "state_bytes": sbytes, "parameters": params, "ranks": ranks}))
        if args.save_params:
            np.savez(args.save_params, **{n: p.detach().numpy() for n, p in model.named_parameters()})
        if args.checkpoint:
            torch.save({"model": model.state_dict(), "optimizer": sd, "step": start + args.steps}, args.checkpoint)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()  # no rank tears gloo down while a peer's last exchange is in flight
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    leave(main())
