"""A ``torch.distributed.checkpoint`` (DCP) checkpoint of distir's sliced optimizer state,
written by one job and read by another at another world size, as one rank of a
launched job::

    mpiexec -n 4 python test/support/torch_checkpoint.py save DIR
    torchrun --nproc-per-node 2 test/support/torch_checkpoint.py resume DIR

(or ``run`` from another job's worker: ``torch_features.py``'s ``--save``/``--resume``).

``save`` trains the tiny GPT (frozen position embedding, tied output layer, two param
groups) ``STEPS`` steps with distir's AdamW and saves the model and the optimizer's
``sharded_state_dict()`` with ``dcp.save`` (every rank writes its slice); ``resume``
makes the model and optimizer afresh, loads both with ``dcp.load`` (every rank reads
the pieces of its own slice, re-sliced for this world size) and trains ``STEPS`` more
steps. Rank 0 writes its losses to ``DIR/<mode>.json``; ``reference(save_ranks,
resume_ranks)`` is the same schedule without the restart (torch.optim on averaged
gradients, in one process).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from distir.examples.pytorch import train_gpt as T

try:
    from support import torch_features as tf
    from support import torch_training as tt
except ImportError:  # run as a script under a launcher
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from support import torch_features as tf
    from support import torch_training as tt

STEPS = 4


def groups(net) -> list[dict]:
    return [{"params": [p for p in net.parameters() if p.dim() >= 2]}, {"params": [p for p in net.parameters() if p.dim() < 2], "weight_decay": 0.0}]


def train(net, opt, corpus, steps: range, rank: int) -> list[float]:
    losses = []
    for s in steps:
        opt.zero_grad()
        x, y = tf.batch(corpus, s, rank)
        loss = T.loss_of(net, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def reference(save_ranks: int, resume_ranks: int) -> list[float]:
    """Rank 0's losses of the same schedule without a restart."""
    corpus = tt.data()
    net = tf.frozen_model()
    opt = torch.optim.AdamW(groups(net), **tf.HYPER, foreach=False)
    losses = []
    for s in range(2 * STEPS):
        ranks = save_ranks if s < STEPS else resume_ranks
        per = tf.rank_grads(net, corpus, s, ranks)
        for p, g in zip(tf.trainable(net), tf.averaged([g for _, g in per], torch.float32)):
            p.grad = g
        opt.step()
        losses.append(per[0][0])
    return losses


def run(mode: str, directory: str, rank: int, comm=None) -> None:
    """``save`` or ``resume`` (module doc) on this rank, in a job whose process group is
    initialized (DCP's); ``comm``: distir's communicator (as the optimizers take it)."""
    import torch.distributed.checkpoint as dcp

    from distir.frameworks import pytorch as dp

    corpus = tt.data()
    net = tf.frozen_model()
    opt = dp.AdamW(groups(net), **tf.HYPER, comm=comm)
    if mode == "save":
        losses = train(net, opt, corpus, range(STEPS), rank)
        dcp.save({"model": net.state_dict(), "optim": opt.sharded_state_dict()}, checkpoint_id=directory)
    else:
        state = {"model": net.state_dict(), "optim": opt.sharded_state_dict()}
        dcp.load(state, checkpoint_id=directory)
        net.load_state_dict(state["model"])
        opt.load_sharded_state_dict(state["optim"])
        losses = train(net, opt, corpus, range(STEPS, 2 * STEPS), rank)
    if rank == 0:
        Path(directory, f"{mode}.json").write_text(json.dumps({"losses": losses, "state_bytes": opt.state_bytes()}))


def main(mode: str, directory: str) -> int:
    import torch.distributed as dist

    torch.set_num_threads(1)
    launcher, rank, ranks = T.launched()
    T.init_process_group(launcher, rank, ranks)
    run(mode, directory, rank, "mpi" if launcher == "mpiexec" else None)
    dist.barrier()  # as train_gpt.py: no rank tears gloo down while a peer still exchanges
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    T.leave(main(sys.argv[1], sys.argv[2]))
