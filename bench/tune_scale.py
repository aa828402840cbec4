"""How long ``distir-tune`` takes at model scale: each case is one ``distir-tune`` command
as a user types it, run in its own process; the CPU seconds of that process and its
children (the forked workers included) and the wall seconds are printed with the
winners [targets, issue 23: <= 10 s of CPU for each case, <= 30 s for the Llama step].

* Adam and LAMB on 256 ranks (16 DGX-2 nodes) x 21 sizes (2^10 ... 2^30);
* the Megatron MLP and self-attention blocks at CoCoNet's sizes (S=1024, H=3072, B=8
  and 16 in the [B*S, H] form) on one DGX-2 node (16 ranks);
* ``examples/megatron_mlp.mlir`` on 256 ranks x 21 sizes;
* the pipeline layer on 256 ranks (2 stages of 128);
* the Llama-7B Adam step (291 tensors, ``python -m distir.examples.optimizer_step
  --model llama-7b``) on 256 ranks.

    python bench/tune_scale.py [--only adam,lamb,mlp,attention,mlp256,pipeline,llama] [--timeout 600] [--extra '--all']

CPU time, not wall time, is the measure: the machine is shared, and the tuner's forked
workers run on both cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import EXAMPLES, note, table  # noqa: E402
from tune_predictions import flatten_bs, paper_mlp  # noqa: E402

TUNE = Path(sys.executable).parent / "distir-tune"
ALL = ("adam", "lamb", "mlp", "attention", "mlp256", "pipeline", "llama")


def cases(tmp: Path, only: set[str]) -> list[tuple[str, list[str], float]]:
    """(title, distir-tune arguments, CPU target in seconds) per case."""
    out = []
    dgx2_256 = ["--model", "dgx2", "--nodes", "16", "--ranks", "256", "--sizes", "2^10..2^30"]
    if "adam" in only:
        out.append(("Adam, 256 ranks x 21 sizes", [str(EXAMPLES / "adam.mlir"), *dgx2_256], 10.0))
    if "lamb" in only:
        out.append(("LAMB, 256 ranks x 21 sizes", [str(EXAMPLES / "lamb.mlir"), *dgx2_256], 10.0))
    node = ["--model", "dgx2", "--nodes", "1", "--ranks", "16", "--sizes", "8192,16384", "--dim", "8192"]
    if "mlp" in only:
        mlp = tmp / "mlp_bsh.mlir"
        mlp.write_text(flatten_bs(paper_mlp((EXAMPLES / "megatron_mlp.mlir").read_text()), 8, 1024))
        out.append(("MLP [B*S,H], B=8,16, 16 ranks", [str(mlp), *node], 10.0))
    if "attention" in only:
        att = tmp / "attention_bsh.mlir"
        att.write_text(flatten_bs((EXAMPLES / "megatron_attention.mlir").read_text(), 8, 1024))
        out.append(("attention [B*S,H], B=8,16, 16 ranks", [str(att), *node], 10.0))
    if "mlp256" in only:
        out.append(("megatron_mlp.mlir, 256 ranks x 21 sizes", [str(EXAMPLES / "megatron_mlp.mlir"), *dgx2_256], 10.0))
    if "pipeline" in only:
        out.append(("pipeline layer, 256 ranks", [str(EXAMPLES / "pipeline_layer.mlir"), "--model", "dgx2", "--nodes", "16", "--ranks", "256"], 10.0))
    if "llama" in only:
        llama = tmp / "llama_adam.mlir"
        subprocess.run(
            [sys.executable, "-m", "distir.examples.optimizer_step", "--model", "llama-7b", "--optimizer", "adam", "-o", str(llama)],
            check=True,
        )
        out.append(("Llama-7B Adam step (291 tensors), 256 ranks", [str(llama), "--model", "dgx2", "--nodes", "16", "--ranks", "256"], 30.0))
    return out


def run(args: list[str], timeout: float) -> tuple[int | None, float, float, str, str]:
    """(exit code or None on timeout, CPU seconds, wall seconds, stdout, stderr) of one
    distir-tune command (CPU of the process and everything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(TUNE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        code = None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return code, cpu, wall, out, err


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(ALL))
    ap.add_argument("--timeout", type=float, default=600.0, help="wall seconds per case before it is stopped")
    ap.add_argument("--extra", default="", help="more distir-tune options for every case (e.g. '--all')")
    args = ap.parse_args()
    note(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tune-scale-") as d:
        tmp = Path(d)
        for title, argv, target in cases(tmp, set(args.only.split(","))):
            out_json = tmp / "r.json"
            out_json.unlink(missing_ok=True)
            full = [*argv, "--json", str(out_json), *shlex.split(args.extra)]
            note(f"{title}: distir-tune {' '.join(full)}")
            code, cpu, wall, out, err = run(full, args.timeout)
            if code is None:
                rows.append([title, f"> {cpu:.1f}", f"> {wall:.0f}", "-", f"stopped after {args.timeout:.0f} s", f"{target:.0f}"])
                continue
            if code != 0 or not out_json.exists():
                tail = " | ".join(err.strip().splitlines()[-3:])
                rows.append([title, f"{cpu:.1f}", f"{wall:.1f}", "-", f"exit {code}: {tail}", f"{target:.0f}"])
                continue
            data = json.loads(out_json.read_text())
            winners = sorted(set(v for v in data["best"].values() if v))
            cut = " (cut short)" if "cut short" in out + err else ""
            rows.append([title, f"{cpu:.1f}", f"{wall:.1f}", str(len(data["schedules"])), "; ".join(winners) + cut, f"{target:.0f}"])
    print(table(rows, ["case", "CPU s", "wall s", "schedules", "winners", "CPU target s"]))
    note(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
