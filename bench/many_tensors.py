"""Many small tensors against one big one: the step time of a data-parallel SGD and
Adam step over K tensors of 4096 f32 (``distir.examples.optimizer_step``) against the
same step over one tensor of the same K x 4096 elements, unfused (AR-Opt, as written)
and fused (``split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce``), on the
``local`` backend (2 rank threads) and the ``mpi`` backend (``mpiexec -n 2``). The
programs are lowered by the default lowering, which combines the K collectives
(``combine-collectives``) and runs them and the maps that follow over one buffer
(``lower-buckets``). Targets (issue 10): K = 1000 within 1.3x of one tensor; fused no
slower than unfused. Each backend's steps are timed interleaved in one run.

    python bench/many_tensors.py [--tensors 100,1000] [--size 4096] [--reps 20] [--no-mpi]
    python bench/many_tensors.py --odd 4097 [--tensors 1000] [--no-mpi]

``--odd S``: the same steps over K tensors of S elements (an odd size, which the ranks
do not divide: blocks of ceil(S*K/n) of the combined buffer, laid out padded) timed
interleaved with the steps over tensors of ``--size``; printed per element, odd over
even (issue 28's target: within 1.1x).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import LocalStep, interleaved, note, table  # noqa: E402

FUSED = "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce"


def program(optimizer: str, tensors: int, size: int, fused: bool) -> str:
    from distir.dialects.context import parse_module
    from distir.examples.optimizer_step import optimizer_step, uniform_parameters
    from distir.passes.pipeline import apply_pipeline

    text = optimizer_step(optimizer, uniform_parameters(tensors, size))
    if not fused:
        return text
    return str(apply_pipeline(parse_module(text), FUSED))


def cases(tensors: list[int], size: int) -> dict[str, tuple[str, int, bool]]:
    """name -> (optimizer, tensor count, fused); each K also as one tensor of K x size."""
    out = {}
    for opt in ("sgd", "adam"):
        for fused in (False, True):
            tag = "fused" if fused else "unfused"
            for k in tensors:
                out[f"{opt} {tag} K={k}"] = (opt, k, fused)
                out[f"{opt} {tag} 1x{k}"] = (opt, -k, fused)
    return out


def text_of(case: tuple[str, int, bool], size: int) -> str:
    opt, k, fused = case
    return program(opt, 1, size * -k, fused) if k < 0 else program(opt, k, size, fused)


def mpi_main(spec: str) -> None:
    """Under mpiexec: time every case on the mpi backend, interleaved; rank 0 prints JSON."""
    import statistics
    import time

    from mpi4py import MPI

    from distir.dialects.context import parse_module
    from distir.runtime.executor import LoweredProgram
    from distir.runtime.mpi import MpiRunner

    args = json.loads(spec)
    world = MPI.COMM_WORLD
    runners = {}
    for name, case in cases(args["tensors"], args["size"]).items():
        program_ = LoweredProgram.build(parse_module(text_of(tuple(case), args["size"])), None, world.Get_size())
        r = MpiRunner(program_)
        r.bind(program_.prepare_inputs({}, 0))
        runners[name] = r
    times: dict[str, list[float]] = {k: [] for k in runners}
    for i in range(args["reps"] + 2):
        for name, r in runners.items():
            world.Barrier()
            t0 = time.perf_counter()
            r.step()
            world.Barrier()
            if i >= 2:
                times[name].append(time.perf_counter() - t0)
    if world.Get_rank() == 0:
        print(json.dumps({k: statistics.median(v) for k, v in times.items()}))


def report(backend: str, times: dict[str, float], tensors: list[int]) -> list[list[str]]:
    rows = []
    for opt in ("sgd", "adam"):
        for k in tensors:
            un, fu = times[f"{opt} unfused K={k}"], times[f"{opt} fused K={k}"]
            un1, fu1 = times[f"{opt} unfused 1x{k}"], times[f"{opt} fused 1x{k}"]
            rows.append(
                [
                    backend,
                    opt,
                    str(k),
                    f"{un * 1e3:.2f}",
                    f"{un1 * 1e3:.2f}",
                    f"{un / un1:.2f}x",
                    f"{fu * 1e3:.2f}",
                    f"{fu1 * 1e3:.2f}",
                    f"{fu / fu1:.2f}x",
                    f"{fu / un:.2f}",
                ]
            )
    return rows


def odd_main(args, tensors: list[int]) -> int:
    """Steps over K tensors of ``--odd`` elements against K tensors of ``--size``, per
    element, on local (and mpi), interleaved."""
    sizes = {"even": args.size, "odd": args.odd}
    names = {f"{opt} {'fused' if f else 'unfused'} K={k} {tag}": ((opt, k, f), size) for opt in ("sgd", "adam") for f in (False, True) for k in tensors for tag, size in sizes.items()}
    note(f"local backend, {args.ranks} ranks: {len(names)} programs, tensors of {args.size} and {args.odd} elements")
    steps = {name: LocalStep(text_of(case, size), args.ranks) for name, (case, size) in names.items()}
    try:
        times = {"local": interleaved(steps, args.reps)}  # type: ignore[arg-type]
    finally:
        for s in steps.values():
            s.close()
    rows = []
    for backend, t in times.items():
        for name in names:
            if name.endswith(" even"):
                base = name[: -len(" even")]
                ratio = (t[f"{base} odd"] / args.odd) / (t[name] / args.size)
                rows.append([backend, base, f"{t[name] * 1e3:.2f}", f"{t[f'{base} odd'] * 1e3:.2f}", f"{ratio:.3f}x", "met" if ratio <= 1.1 else "NOT met"])
    print(f"Step time over K tensors of {args.size} (even) and {args.odd} (odd) f32, {args.ranks} ranks (median of {args.reps}, interleaved)")
    print("target: per element, odd / even <= 1.1x")
    print(table(rows, ["backend", "step", f"{args.size} ms", f"{args.odd} ms", "per element odd/even", "target"]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensors", default="100,1000")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--odd", type=int, help="also time tensors of this (odd) size; print per element odd/even")
    ap.add_argument("--mpi-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mpi_child:
        mpi_main(args.mpi_child)
        return 0
    tensors = [int(x) for x in args.tensors.split(",")]
    if args.odd:
        return odd_main(args, tensors)
    note(f"local backend, {args.ranks} ranks: building {4 * 2 * len(tensors)} programs")
    steps = {name: LocalStep(text_of(case, args.size), args.ranks) for name, case in cases(tensors, args.size).items()}
    try:
        local = interleaved(steps, args.reps)  # type: ignore[arg-type]
    finally:
        for s in steps.values():
            s.close()
    rows = report("local", local, tensors)
    if not args.no_mpi:
        from distir.runtime.mpi import mpiexec_path

        try:
            mpiexec = mpiexec_path()
        except Exception as e:  # noqa: BLE001 - reported, the local rows still print
            note(f"no mpiexec ({e}); mpi rows left out")
            mpiexec = None
        if mpiexec:
            note(f"mpi backend, mpiexec -n {args.ranks}")
            spec = json.dumps({"tensors": tensors, "size": args.size, "reps": args.reps})
            out = subprocess.run(
                [mpiexec, "-n", str(args.ranks), sys.executable, __file__, "--mpi-child", spec], capture_output=True, text=True, check=False
            )
            line = out.stdout.strip().splitlines()[-1:] if out.stdout.strip() else []
            if out.returncode == 0 and line:
                rows += report("mpi", json.loads(line[0]), tensors)
            else:
                note(f"mpi run failed ({out.returncode}): {out.stderr[-2000:]}")
    header = ["backend", "opt", "K", "unfused ms", "1 tensor ms", "ratio", "fused ms", "1 tensor ms", "ratio", "fused/unfused"]
    print(f"Step time over K tensors of {args.size} f32 vs one tensor of K x {args.size} (median of {args.reps}, interleaved)")
    print("targets: K=1000 ratio <= 1.3x; fused/unfused <= 1.0")
    print(table(rows, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
