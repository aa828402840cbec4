"""The communicator over ``torch.distributed`` (``frameworks/torch_comm.py``), on a
one-rank gloo group in this process (gloo pairs no rank with itself, so ``group``'s
point-to-point calls run only in the launched jobs): every collective hands torch its tensors through
``_handed``, and at exit ``_settle`` waits until torch's worker threads have let go of
them (else a worker that drops one while the interpreter finalizes aborts the process,
as ``test_misuse.py``'s launched job did about one run in five)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

from distir.frameworks import torch_comm
from distir.runtime.streams import SyncStream


@pytest.fixture
def comm(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield torch_comm.TorchComm(None, shared_memory=False)
    finally:
        dist.destroy_process_group()


def test_every_collective_hands_its_tensors_and_they_are_let_go(comm):
    stream = SyncStream(0)
    a = np.arange(6, dtype=np.float32)
    b = np.zeros(6, np.float32)
    calls = {
        "all_reduce": lambda: comm.all_reduce(a, b, 6, "sum", stream),
        "all_reduce bf16 (widened)": lambda: comm.all_reduce(a.astype(torch_comm.BFLOAT16), np.zeros(6, torch_comm.BFLOAT16), 6, "avg", stream),
        "reduce_scatter": lambda: comm.reduce_scatter(a, b, 6, "sum", stream),
        "all_gather": lambda: comm.all_gather(a, b, 6, stream),
        "reduce": lambda: comm.reduce(a, b, 6, "max", 0, stream),
        "broadcast": lambda: comm.broadcast(a, b, 6, 0, stream),
    }
    for name, call in calls.items():
        torch_comm._HANDED.clear()
        call()
        assert torch_comm._HANDED, f"{name} handed torch no tensor through _handed"
    np.testing.assert_array_equal(b, a)
    torch_comm._settle()
    assert all(r() is None for r in torch_comm._HANDED)


def test_settle_waits_for_a_thread_that_still_holds_a_tensor():
    held = [torch.zeros(3)]
    torch_comm._HANDED.clear()
    torch_comm._handed(held[0])

    def let_go_later():
        time.sleep(0.05)
        held.clear()

    t = threading.Thread(target=let_go_later)
    t.start()
    torch_comm._settle()
    assert torch_comm._HANDED[0]() is None, "_settle returned while the tensor was still held"
    t.join()


LEAVING = """
import atexit, sys
from distir.examples.pytorch import train_gpt as T

class Finalized:
    def __del__(self):
        print("finalized", flush=True)

kept = Finalized()  # a module global: destroyed only when the interpreter finalizes
print("done")
atexit.register(lambda: print("exit handler"))  # unflushed (a pipe): leave flushes both
T.leave(3)
"""


def test_a_launched_rank_leaves_after_the_exit_handlers_without_finalizing():
    """``train_gpt.leave``, how the example and the launched test scripts end a rank:
    Python's exit handlers run (distir's ``_settle``, MPI's ``leave``), the output is
    flushed, and the interpreter does not finalize (where a gloo thread still dropping a
    tensor aborts the finished rank), with the status asked for."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", LEAVING], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "done\nexit handler\n", proc.stdout  # and not "finalized"
