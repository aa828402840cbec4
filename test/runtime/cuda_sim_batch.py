"""Runs programs through the ``nccl`` backend's CUDA device in numba's CUDA simulator
(test helper; the environment must set NUMBA_ENABLE_CUDASIM=1).

    python test/runtime/cuda_sim_batch.py JOBS.json REPORT.json

Each job ``{"id", "text", "func", "ranks", "seed"}`` runs on rank threads with the CUDA
device (generated CUDA kernels, fixed kernels, simulated device arrays), communicating
through a recording communicator over shared memory; the report gives, per job, whether
the outputs equal the interpreter's and whether the recorded NCCL calls equal those of
the host run.
"""

import json
import sys
from pathlib import Path

from distir.dialects.context import parse_module
from distir.runtime.cuda import CudaDevice, simulated
from distir.runtime.equivalence import compare_outputs
from distir.runtime.executor import LoweredProgram
from distir.runtime.interpreter import interpret
from distir.runtime.local import LocalRunner
from distir.runtime.recording import HostViewComm, RecordingComm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/, for support/
from support.batch_gc import one_job  # noqa: E402


def run(program, inputs, device=None):
    n = program.ranks
    logs = [[] for _ in range(n)]
    if device is None:
        wrap = lambda c: RecordingComm(c, logs[c.rank])  # noqa: E731
    else:
        wrap = lambda c: RecordingComm(HostViewComm(c, device.host_view), logs[c.rank])  # noqa: E731
    runner = LocalRunner(program, comm_wrapper=wrap, device=device)
    try:
        runner.bind(inputs)
        out = runner.outputs(runner.step())
    finally:
        runner.close()
    return out, [[str(c) for c in log] for log in logs]


def run_job(job):
    """The job's report entry: its outputs on the simulated device against the
    interpreter's, and its NCCL calls against the host run's."""
    try:
        module = parse_module(job["text"])
        program = LoweredProgram.build(module, job["func"], job["ranks"])
        inputs = program.prepare_inputs({}, job["seed"])
        got, calls = run(program, inputs, CudaDevice())
        _, host_calls = run(program, inputs)
        want = interpret(module, job["func"], inputs, job["ranks"], job["seed"])
        c = compare_outputs(want, got, "interpret", "nccl (simulated)")
        same = calls == host_calls
        return {job["id"]: {"ok": c.ok and same, "message": c.message if not c.ok else ("" if same else f"calls differ: {calls} vs {host_calls}")}}
    except Exception as e:  # noqa: BLE001 - reported per job
        return {job["id"]: {"ok": False, "message": f"{type(e).__name__}: {e}"}}


def main(jobs_path, report_path):
    assert simulated(), "set NUMBA_ENABLE_CUDASIM=1"
    report = {}
    for job in json.load(open(jobs_path)):
        with one_job():
            report.update(run_job(job))
    json.dump(report, open(report_path, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
