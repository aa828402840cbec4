"""Issue 28's workloads at their real sizes, on rank counts that do not divide them: a
GPT-2 embedding of 50,257 x 768 (vocabulary sliced) with its output projection, an Adam
step over 1,000,003 f32 elements, and Falcon-7B's MLP (4,544 -> 18,176 -> 4,544) for a
few tokens (``distir.examples.uneven_workloads``). Each runs on every rank count and
backend, as written and as the tuner's best schedule for that rank count (predicted for
``dgx2``), and is compared with the one-rank program on the same inputs (the
interpreter; a ``local`` argument, Adam's gradient, is the same on every rank).
``test/runtime/test_uneven_workloads.py`` checks the same structures at small odd sizes
in CI.

    python bench/uneven_workloads.py [--ranks 3,4,6,8] [--backends interpret,local,mpi]
                                     [--workloads embedding,adam,mlp] [--scale 1.0]

``--scale`` shrinks every size (0.01: a 503-row vocabulary, 10,000 Adam elements, an MLP
of 46 -> 182): a quick run of the same script. Prints one line per run (workload, ranks,
backend, schedule, max |difference| against one rank, agreed or not); exit status 1 when
a run disagrees. Memory: the MLP's weights are 660 MB per copy (mpi: every process
holds the inputs it is given).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main() -> int:
    from distir.dialects.context import parse_module
    from distir.dialects.dist import TensorType
    from distir.dialects.placements import Local
    from distir.examples.uneven_workloads import FULL, workload
    from distir.passes.pipeline import apply_pipeline
    from distir.runtime import npz
    from distir.runtime.backend import get_backend
    from distir.runtime.equivalence import compare_outputs, program_precision
    from distir.runtime.interpreter import interpret
    from distir.tuning.topology import get_topology
    from distir.tuning.tuner import tune

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="3,4,6,8")
    ap.add_argument("--backends", default="interpret,local,mpi")
    ap.add_argument("--workloads", default="embedding,adam,mlp")
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    ranks_list = [int(r) for r in args.ranks.split(",")]
    failed = 0
    for name in args.workloads.split(","):
        sizes = {k: max(3, round(v * args.scale)) | 1 if args.scale != 1.0 else v for k, v in FULL[name].items()}
        text, func = workload(name, **sizes)
        module = parse_module(text)
        f = npz.select_function(module, func)
        inputs = npz.prepare_inputs(module, f, 1, None, 3)
        t0 = time.perf_counter()
        reference = interpret(text, func, inputs, 1)
        print(f"{name} {sizes}: one rank in {time.perf_counter() - t0:.1f} s", flush=True)
        precision = program_precision(f, f)
        for ranks in ranks_list:
            result = tune(parse_module(text), ranks, model=get_topology("dgx2"))
            (size,) = result.sizes
            pipeline = result.by_name(result.best[size]).pipeline  # type: ignore[arg-type]
            tuned = str(apply_pipeline(parse_module(text), pipeline)) if pipeline else text
            given = dict(inputs)
            for arg, t in npz.signature(f):
                if isinstance(t, TensorType) and any(isinstance(p, Local) for p in t.get_placements()):
                    given[arg] = inputs[arg][0][None].repeat(ranks, 0)
            for backend in args.backends.split(","):
                for label, program in (("as written", text), (f"best: {result.best[size]}", tuned)):
                    t0 = time.perf_counter()
                    got = get_backend(backend).run(parse_module(program), func, given, ranks, 0)
                    c = compare_outputs(reference, got, "one rank", f"{ranks} ranks", precision)
                    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.size(a) else 0.0 for a, b in zip(reference, got))
                    failed += not c
                    print(f"  {name:9} {ranks} ranks {backend:9} {label:45} {time.perf_counter() - t0:6.1f} s  max|diff| {diff:.2e}  {'agrees' if c else 'DIFFERS: ' + c.message}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
