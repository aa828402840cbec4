"""Exports many programs to StableHLO + sdy and runs them with XLA (test helper).

    python test/frontends/xla_batch.py JOBS.json REPORT.json

``JOBS.json`` is a list of ``{"id", "text", "func", "ranks", "seed"}``; each program is
exported (its meshes fixed for ``ranks`` first), parsed and verified with jaxlib's MLIR,
compiled by XLA for ``ranks`` host devices and run on the inputs the interpreter draws
from ``seed``; ``REPORT.json`` gets ``{"id": {"ok": bool, "message": str}}``, ``ok`` when
XLA's outputs agree with the interpreter's within ``runtime/equivalence.py``'s
tolerances. A process of its own, because the device count is fixed when jax is first
imported.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.xla import DEVICES, jax_with_devices, parse_and_verify, run_exported  # noqa: E402

jax_with_devices(DEVICES)

from distir.dialects.context import make_context, parse_module  # noqa: E402
from distir.frontends.export import export_module  # noqa: E402
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass  # noqa: E402
from distir.runtime import npz  # noqa: E402
from distir.runtime.equivalence import compare_outputs, program_precision  # noqa: E402
from distir.runtime.interpreter import run_function  # noqa: E402


def run_job(job: dict) -> dict:
    module = parse_module(job["text"])
    FixMeshSizesPass(ranks=job["ranks"]).apply(make_context(), module)
    text = export_module(module, "sdy")
    parse_and_verify(text)
    ref = run_function(module, job["func"], None, job["ranks"], job["seed"])
    got = run_exported(module, text, job["func"], ref.inputs, job["ranks"])
    c = compare_outputs(ref.outputs, got, "interpreter", "XLA", program_precision(npz.select_function(module, job["func"])))
    return {"ok": c.ok, "message": c.message}


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
