"""Exports many programs to StableHLO + sdy and runs them with XLA (test helper).

    python test/frontends/xla_batch.py JOBS.json REPORT.json

``JOBS.json`` is a list of ``{"id", "text", "func", "ranks", "seed", "refusal"}``; each
program is exported (its meshes fixed for ``ranks`` first), parsed and verified with
jaxlib's MLIR, compiled by XLA for ``ranks`` host devices and run on the inputs the
interpreter draws from ``seed``; ``REPORT.json`` gets ``{"id": {"ok": bool, "message":
str}}``, ``ok`` when XLA's outputs agree with the interpreter's within
``runtime/equivalence.py``'s tolerances. A job whose ``refusal`` is a diagnostic is ``ok``
when the export fails with exactly that diagnostic.

Where the two differ beyond those tolerances, the program is run once more on the
interpreter in float64 (every f32 widened, on the same inputs): the outputs still agree
when XLA's are nowhere farther from that exact result than the interpreter's f32
outputs are at worst, plus the f32 tolerance. The tolerances model reassociated sums of one arithmetic;
XLA's f32 transcendental functions are its own approximations (its tanh differs from
numpy's by up to 3 ulp), which a program's conditioning may amplify: the gradient of a
saturated tanh, 1 - tanh(h)^2, cancels (examples/mlp_step.mlir at 16 x 16: at most 3.3e-5 and 3.6e-5 from the
exact updated weights, 2.3e-5 apart where 1.3e-5 is allowed). A wrong export is
far from the exact result, and still fails.

A process of its own, because the device count is fixed when jax is first imported.
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.xla import DEVICES, jax_with_devices, no_farther, parse_and_verify, run_exported  # noqa: E402

jax_with_devices(DEVICES)

from xdsl.utils.exceptions import DiagnosticException  # noqa: E402

from distir.dialects.context import make_context, parse_module  # noqa: E402
from distir.frontends.export import export_module  # noqa: E402
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass  # noqa: E402
from distir.runtime import npz  # noqa: E402
from distir.runtime.equivalence import compare_outputs, program_precision  # noqa: E402
from distir.runtime.interpreter import run_function  # noqa: E402


def fixed(text: str, ranks: int):
    module = parse_module(text)
    FixMeshSizesPass(ranks=ranks).apply(make_context(), module)
    return module


def exact_outputs(job: dict, inputs: dict) -> list[np.ndarray]:
    """The job's outputs computed by the interpreter with every f32 widened to f64, on
    the same inputs."""
    wide = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in inputs.items()}
    return run_function(fixed(job["text"].replace("f32", "f64"), job["ranks"]), job["func"], wide, job["ranks"]).outputs


def run_job(job: dict) -> dict:
    module = fixed(job["text"], job["ranks"])
    if job.get("refusal"):
        try:
            export_module(module, "sdy")
        except DiagnosticException as e:
            return {"ok": str(e) == job["refusal"], "message": f"the export gives {str(e)!r}, expected {job['refusal']!r}"}
        return {"ok": False, "message": f"the export succeeds, expected {job['refusal']!r}"}
    text = export_module(module, "sdy")
    parse_and_verify(text)
    ref = run_function(module, job["func"], None, job["ranks"], job["seed"])
    got = run_exported(module, text, job["func"], ref.inputs, job["ranks"])
    c = compare_outputs(ref.outputs, got, "interpreter", "XLA", program_precision(npz.select_function(module, job["func"])))
    if c.ok or program_precision(npz.select_function(module, job["func"])) != np.float32:
        return {"ok": c.ok, "message": c.message}
    try:
        exact = exact_outputs(job, ref.inputs)
    except Exception as e:  # noqa: BLE001 - a program that does not widen keeps its first verdict
        return {"ok": False, "message": f"{c.message}; no float64 run to compare with ({type(e).__name__}: {e})"}
    far = no_farther(exact, ref.outputs, got)
    if far is not None:
        return {"ok": False, "message": f"{c.message}; and farther from the float64 result than the interpreter: {far}"}
    return {"ok": True, "message": f"{c.message}; both as close to the float64 result (f32 rounding amplified)"}


def main(jobs_path: str, report_path: str) -> int:
    report = {}
    for job in json.loads(Path(jobs_path).read_text()):
        try:
            report[job["id"]] = run_job(job)
        except Exception as e:  # noqa: BLE001 - reported per job
            report[job["id"]] = {"ok": False, "message": f"{type(e).__name__}: {e}"}
    Path(report_path).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
