"""Training runs for the PyTorch bridge's tests: a tiny GPT (``examples/pytorch/
train_gpt.py``) trained data-parallel with distir's optimizers and with the reference
(DDP's gradient averaging + ``torch.optim``), in threads or as one rank of a launched job.

    python test/support/torch_training.py OUT.json ALGORITHMS STEPS   # under torchrun / mpiexec

runs every algorithm of ALGORITHMS (comma-separated: adamw, adam, sgd, lamb) with
``--optimizer ddp`` and ``distir`` on this job's ranks and writes, on rank 0, the losses
and the final parameters of each run.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import sys
import threading

import numpy as np
import torch

from distir.examples.pytorch import train_gpt as T

try:
    from support.threads import on_threads, results
except ImportError:  # run as a script under a launcher: no threads needed
    on_threads = results = None

TINY = dict(vocab=256, context=16, width=32, layers=2, heads=2)
BATCH = 4

HYPER = {
    "adamw": dict(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
    "adam": dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.01),
    "sgd": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3, nesterov=False),
    "sgd-nesterov": dict(lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True),
    "lamb": dict(lr=5e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01),
}


class RefLAMB(torch.optim.Optimizer):
    """LAMB (You et al.) in torch, per parameter tensor: Adam's bias-corrected moments,
    u = m̂ / (√v̂ + eps) + wd·p, p -= lr·(‖p‖ / ‖u‖)·u (ratio 1 when a norm is 0)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.tensor(0.0)
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t = float(st["step"])
                m, v, g = st["exp_avg"], st["exp_avg_sq"], p.grad
                m.mul_(b1).add_((1 - b1) * g)
                v.mul_(b2).add_((1 - b2) * (g * g))
                u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + group["eps"]) + group["weight_decay"] * p
                pn, un = p.pow(2).sum().sqrt(), u.pow(2).sum().sqrt()
                trust = 1.0 if float(pn) == 0 or float(un) == 0 else float(pn / un)
                p.sub_(group["lr"] * trust * u)


_INIT = threading.Lock()


def model() -> torch.nn.Module:
    """The tiny GPT, initialised from seed 0 (under a lock: rank threads share torch's
    generator)."""
    with _INIT:
        torch.manual_seed(0)
        return T.GPT(**TINY)


def groups(net: torch.nn.Module, algorithm: str) -> list[dict]:
    """Two groups (matrices with weight decay, the rest with their own lr and none)."""
    decay = [p for p in net.parameters() if p.dim() >= 2]
    other = [p for p in net.parameters() if p.dim() < 2]
    lr = HYPER[algorithm]["lr"]
    return [{"params": decay}, {"params": other, "weight_decay": 0.0, "lr": lr * 0.5}]


def torch_optimizer(algorithm: str, params):
    h = HYPER[algorithm]
    if algorithm == "adamw":
        return torch.optim.AdamW(params, **h, foreach=False)
    if algorithm == "adam":
        return torch.optim.Adam(params, **h, foreach=False)
    if algorithm.startswith("sgd"):
        return torch.optim.SGD(params, **h, foreach=False)
    return RefLAMB(params, **h)


def distir_optimizer(algorithm: str, params, comm=None, schedule=None):
    from distir.frameworks import pytorch as dp

    h = HYPER[algorithm]
    cls = {"adamw": dp.AdamW, "adam": dp.Adam, "sgd": dp.SGD, "sgd-nesterov": dp.SGD, "lamb": getattr(dp, "LAMB", None)}[algorithm]
    return cls(params, **h, comm=comm, schedule=schedule)


CORPUS_WORDS = 200_000
"""Words of the tests' training text (about 1.2 MB)."""


@functools.lru_cache(maxsize=1)
def data() -> np.ndarray:
    """The tests' training text: words of letters drawn with a fixed seed (a vocabulary
    of 2,000 words used with Zipf's frequencies, a line every 12 words), the same bytes
    on every commit. The example trains on distir's own files (``train_gpt.corpus``),
    which change with every commit; the tests trained on them too, so DDP's and
    distir's rounding differences changed with every commit, and a 200-step comparison
    within its tolerance on one commit exceeded it on the next (AdamW on 4 ranks:
    blocks.1.qkv.weight 0.000578 against a bound of 0.000554)."""
    rng = np.random.default_rng(20261129)
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
    freq = 1.0 / np.arange(1, len(letters) + 1)
    lengths = rng.integers(1, 10, 2000)
    vocab = [bytes(rng.choice(letters, n, p=freq / freq.sum())) for n in lengths]
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    words = rng.choice(len(vocab), CORPUS_WORDS, p=zipf / zipf.sum())
    text = b" ".join(vocab[w] + (b".\n" if i % 12 == 11 else b"") for i, w in enumerate(words.tolist()))
    return np.frombuffer(text, dtype=np.uint8)


def train(call, opt, corpus, steps, rank: int = 0, sched=None) -> list[float]:
    """Train ``call`` with ``opt`` on this rank's batches of ``steps`` (a range); losses."""
    losses = []
    for s in steps:
        x, y = T.batch(corpus, 0, s, rank, BATCH, TINY["context"])
        opt.zero_grad()
        loss = T.loss_of(call, x, y)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


def ddp_steps(net, opt, corpus, steps, ranks: int) -> list[list[float]]:
    """DDP's semantics in one process over ``steps`` (a range): each rank's gradient on
    its batch, averaged over the ranks in rank order, then ``opt``; losses per step and
    rank."""
    losses = []
    for s in steps:
        grads, row = [], []
        for r in range(ranks):
            net.zero_grad(set_to_none=True)
            x, y = T.batch(corpus, 0, s, r, BATCH, TINY["context"])
            loss = T.loss_of(net, x, y)
            loss.backward()
            grads.append([p.grad for p in net.parameters()])
            row.append(loss.item())
        for p, *gs in zip(net.parameters(), *grads):
            total = gs[0]
            for g in gs[1:]:
                total = total + g
            p.grad = total / ranks
        opt.step()
        losses.append(row)
    return losses


def reference(algorithm: str, ranks: int, steps: int, corpus=None):
    """DDP + the torch optimizer of ``algorithm`` (``ddp_steps``) from the tiny GPT:
    (losses per step and rank, model)."""
    corpus = data() if corpus is None else corpus
    net = model()
    opt = torch_optimizer(algorithm, groups(net, algorithm))
    return np.array(ddp_steps(net, opt, corpus, range(steps), ranks)), net


def distir_threads(algorithm: str, ranks: int, steps: int, corpus=None, schedule=None, timeout: float = 600):
    """distir's optimizer on ``ranks`` threads: (losses per step and rank, rank models,
    rank optimizers)."""
    from distir.runtime import step as steps_api

    corpus = data() if corpus is None else corpus
    comms = steps_api.local_comms(ranks)

    def rank(r):
        net = model()
        opt = distir_optimizer(algorithm, groups(net, algorithm), comm=comms[r], schedule=schedule)
        return train(net, opt, corpus, range(steps), rank=r), net, opt

    out = results(on_threads(ranks, rank, timeout))
    return np.array([o[0] for o in out]).T, [o[1] for o in out], [o[2] for o in out]


def packed(t: torch.Tensor) -> dict:
    """A tensor's values for a JSON report, exact and compact: its bytes in base64 (as
    JSON numbers, a model's parameters took about 2 s of CPU per rank to write)."""
    a = np.ascontiguousarray(t.detach().numpy())
    return {"dtype": a.dtype.str, "shape": list(a.shape), "bytes": base64.b64encode(a.tobytes()).decode()}


def unpacked(x: dict) -> np.ndarray:
    """``packed``'s values as float64, as ``np.array`` made them of the JSON numbers."""
    return np.frombuffer(base64.b64decode(x["bytes"]), np.dtype(x["dtype"])).reshape(x["shape"]).astype(np.float64)


def params_agree(name: str, p: np.ndarray, q: np.ndarray, tol: float = 1e-5) -> None:
    """Parameter ``p`` agrees with the reference ``q``: the difference's 2-norm within
    ``tol`` of the norm of max(1, |q|), and every element within 100 ``tol`` of
    max(1, |q|).

    Elementwise ``tol`` alone is a property of the machine, not of the code: where the
    ranks' gradients nearly cancel, the sum's last bits depend on the order of the
    additions (DDP's and distir's differ), and Adam's update m/(√v + eps) turns them into
    a difference of up to lr on that element (4.5e-5 seen on one machine, below 1e-5 on
    another). A wrong update moves every element of a slice by about lr per step and fails
    both bounds."""
    diff = np.abs(p - q)
    scale = np.maximum(np.abs(q), 1.0)
    norm, bound = float(np.linalg.norm(diff)), tol * float(np.linalg.norm(scale))
    assert norm <= bound, f"{name}: difference norm {norm:.3g} > {bound:.3g} (max element {float(diff.max()):.3g})"
    assert (diff <= 100 * tol * scale).all(), f"{name}: max difference {float(diff.max()):.3g}"


def assert_params_close(a: torch.nn.Module, b: torch.nn.Module, tol: float = 1e-5) -> None:
    """Every parameter of ``a`` agrees with ``b``'s (``params_agree``)."""
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        params_agree(name, p.detach().numpy(), q.detach().numpy(), tol)


# ======================================================================================
# One rank of a launched job (torchrun or mpiexec)
# ======================================================================================


def launched_run(algorithm: str, which: str, steps: int, launcher: str, rank: int, ranks: int, corpus):
    net = model()
    if which == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        call = DDP(net)
        opt = torch_optimizer(algorithm, groups(net, algorithm))
    else:
        call = net
        opt = distir_optimizer(algorithm, groups(net, algorithm), comm="mpi" if launcher == "mpiexec" else None)
    losses = train(call, opt, corpus, range(steps), rank)
    params = {n: packed(p) for n, p in net.named_parameters()}
    state = opt.state_bytes() if hasattr(opt, "state_bytes") else sum(
        v.numel() * v.element_size() for st in opt.state.values() for k, v in st.items() if torch.is_tensor(v) and k != "step"
    )
    return {"losses": losses, "params": params, "state_bytes": state}


def training(out: str, algorithms: list[str], steps: int, launcher: str, rank: int, ranks: int, corpus) -> None:
    """Each algorithm trained with DDP + torch.optim and with distir's optimizer, in a
    launched job whose process group is up; rank 0 writes the report to ``out``."""
    report = {}
    for a in algorithms:
        for which in ("ddp", "distir"):
            report[f"{a}-{which}"] = launched_run(a, which, steps, launcher, rank, ranks, corpus)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(report, f)


def main(argv: list[str]) -> int:
    out, algorithms, steps = argv[0], argv[1].split(","), int(argv[2])
    torch.set_num_threads(1)
    launcher, rank, ranks = T.launched()
    T.init_process_group(launcher, rank, ranks)
    training(out, algorithms, steps, launcher, rank, ranks, data())
    import torch.distributed as dist

    dist.barrier()  # as train_gpt.py: no rank tears gloo down while a peer still exchanges
    dist.destroy_process_group()
    return 0


def compare(report: dict, algorithm: str, tol: float = 1e-5) -> None:
    a, b = report[f"{algorithm}-ddp"], report[f"{algorithm}-distir"]
    la, lb = np.array(a["losses"]), np.array(b["losses"])
    rel = np.abs(la - lb) / np.abs(la)
    assert rel.max() <= tol, f"{algorithm}: loss differs by {rel.max():.3g} relative at step {int(rel.argmax())}"
    for name in a["params"]:
        pa, pb = unpacked(a["params"][name]), unpacked(b["params"][name])
        params_agree(f"{algorithm}: parameter {name}", pb, pa, tol)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    T.leave(main(sys.argv[1:]))
