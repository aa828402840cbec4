"""Differential testing at length (issue 27): generated training steps on the reference
interpreter, ``local`` and ``mpi``, as written and after a pipeline of rewrite passes;
every run must give the interpreter's results (``test/test_differential.py`` runs a
sample in CI; ``test/support/differential.py`` holds the checks).

    python bench/differential.py [--count 2000] [--seed 0] [--mpi 200] [--stop-at-first]
                                 [--stop-at TEXT] [--save DIR] [--no-local]

Programs come from ``support/programs.training_steps`` (hypothesis, seeded: the same
``--seed`` gives the same programs), each with the next pipeline of ``PIPELINES`` in
turn; the first ``--mpi`` of them also run on ``mpi``, all in one ``mpiexec`` job (each
on its first processes). It prints what it ran (programs per mesh, per pipeline, rank
counts, the ops they hold), every finding with the program's number and pipeline, and
the CPU time. ``--stop-at-first`` stops at the first finding, ``--stop-at TEXT`` at the
first whose report contains TEXT, and says how many programs it took (how issue 27's
combine-collectives bug was found from scratch on the code before the fix: ``--stop-at
combine-collectives``). Exit status 1 when there was a finding.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from support.differential import PIPELINES, check_program, mpi_job  # noqa: E402
from support.programs import training_steps  # noqa: E402
from support.runs import run_mpi_batch  # noqa: E402

from distir.tools.diagnostics import quiet_developer_warnings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=2000, help="programs to generate and check")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mpi", type=int, default=200, help="how many of them also run on mpi (one mpiexec job)")
    ap.add_argument("--stop-at-first", action="store_true", help="stop at the first finding")
    ap.add_argument("--stop-at", metavar="TEXT", help="stop at the first finding whose report contains TEXT")
    ap.add_argument("--no-local", action="store_true", help="interpreter only (the pipelines' meaning, no lowering)")
    ap.add_argument("--save", metavar="DIR", help="write each finding's program there")
    args = ap.parse_args()
    quiet_developer_warnings()
    t0 = time.process_time()
    ran: list[tuple[int, str, object]] = []
    findings: list[tuple[int, str, list[str], str]] = []
    meshes: collections.Counter = collections.Counter()
    ops: list[int] = []
    jobs: list[dict] = []
    sources: dict[str, str] = {}

    @seed(args.seed)
    @settings(max_examples=args.count, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(training_steps())
    def one(prog) -> None:
        if stopped:
            return  # hypothesis draws its remaining examples: nothing more is checked
        k = len(ran)
        pipeline = PIPELINES[k % len(PIPELINES)]
        module = prog.module()
        meshes["x".join(str(s) for s in prog.mesh_sizes)] += 1
        ops.append(sum(1 for _ in module.walk()))
        ran.append((k, pipeline, prog))
        found = check_program(prog, pipeline, local=not args.no_local)
        if found:
            findings.append((k, pipeline, found, prog.text))
            print(f"program {k} ({prog.ranks} ranks, {pipeline}): {found[0][:300]}", flush=True)
            if args.save:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                (Path(args.save) / f"finding{k}.mlir").write_text(f"// {pipeline}\n" + "\n".join(f"// {f}" for f in found) + "\n" + prog.text)
            if args.stop_at_first or (args.stop_at and any(args.stop_at in f for f in found)):
                stopped.append(k)
        if k < args.mpi:
            job = mpi_job(prog, pipeline if k % 2 else None, f"program {k} ({pipeline if k % 2 else 'as written'})")
            if job is not None:
                jobs.append(job)
                sources[job["id"]] = prog.text
        if (k + 1) % 100 == 0:
            print(f"... {k + 1} programs, {len(findings)} finding(s), {time.process_time() - t0:.0f} s CPU", file=sys.stderr, flush=True)

    stopped: list[int] = []
    one()
    if jobs and not stopped:
        with tempfile.TemporaryDirectory() as d:
            report = run_mpi_batch(jobs, Path(d), one_launch=True)
        for j in jobs:
            r = report.get(j["id"], {"ok": False, "message": "no report (the mpiexec job ended early)"})
            if not r.get("ok"):
                k = int(j["id"].split()[1])
                findings.append((k, j["id"], [f"mpi: {r.get('message')}"], sources[j["id"]]))
                print(f"{j['id']}: mpi: {str(r.get('message'))[:300]}", flush=True)
    cpu = time.process_time() - t0
    print(f"\n{len(ran)} programs (seed {args.seed}), {len(jobs)} of them also on mpi; {cpu:.0f} s CPU in this process")
    print("meshes: " + ", ".join(f"{m} x{n}" for m, n in sorted(meshes.items())))
    if ops:
        print(f"ops per program: {min(ops)} to {max(ops)}, {sum(ops) / len(ops):.0f} on average")
    per = collections.Counter(p for _, p, _ in ran)
    print("pipelines: " + "; ".join(f"{p} x{n}" for p, n in per.items()))
    if stopped:
        print(f"\nstopped at program {stopped[0]}: the {stopped[0] + 1}th generated")
    if findings:
        first = min(k for k, *_ in findings)
        print(f"\n{len(findings)} finding(s); the first at program {first} (the {first + 1}th generated):")
        for k, pipeline, found, _ in sorted(findings)[:20]:
            print(f"  program {k} ({pipeline}): {found[0][:400]}")
        return 1
    print("\nno finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
