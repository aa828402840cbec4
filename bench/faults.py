"""Fault injection: a rank of a 2-rank training job with distir's AdamW is killed (SIGKILL)
in the middle of a step, again and again, under ``mpiexec`` and under ``torchrun``.

    python bench/faults.py [--repeats 20] [--launchers mpiexec,torchrun]

Each run is ``test/support/torch_faults.py kill:POINT`` (the kill points in turn:
``KILL_POINTS``); the table says, per launcher, how many runs ended with the launcher's
message naming the dead rank (or process) and its signal, how many seconds after the kill
the job had ended (every surviving rank with it: at most 30 s is the bound), and whether
anything was left behind (a process, a /dev/shm file a rank mapped, a file in the job's
temporary folder other than torch's own). Exit 1 when a run missed any of it."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))

from support import torch_faults  # noqa: E402

LIMIT = 30.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="runs per launcher (default 20)")
    parser.add_argument("--launchers", default="mpiexec,torchrun", help="comma-separated: mpiexec, torchrun")
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    table = Table("launcher", "runs", "ended with the message", "s after the kill (median / max)", "left behind", title="a rank killed mid-step")
    failed = False
    for launcher in args.launchers.split(","):
        delays, messages, left = [], 0, []
        for i in tqdm(range(args.repeats), desc=launcher, file=sys.stderr):
            point = torch_faults.KILL_POINTS[i % len(torch_faults.KILL_POINTS)]
            with tempfile.TemporaryDirectory(prefix="distir-faults-") as d:
                out = Path(d)
                proc, end = torch_faults.launch(launcher, f"kill:{point}", out)
                killed = out / "killed.txt"
                delays.append(end - float(killed.read_text()) if killed.exists() else float("inf"))
                messages += proc.returncode != 0 and torch_faults.kill_message(launcher, proc)
                left += [f"run {i} ({point}): {x}" for x in torch_faults.leftovers(out)]
        table.add_row(launcher, str(args.repeats), str(messages), f"{statistics.median(delays):.1f} / {max(delays):.1f}", str(len(left)))
        failed |= messages != args.repeats or max(delays) > LIMIT or bool(left)
        for x in left:
            print(f"{launcher}: {x}", file=sys.stderr)
    Console().print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
