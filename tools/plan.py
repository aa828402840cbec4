"""``distir-plan``: the best distributed program for a program and a cluster (DESIGN §5;
user guide: docs/tools/distir-plan.md, docs/plan.md).

    distir-plan FILE --ranks N --model TOPOLOGY [--nodes K] [--memory SIZE]
                [--time-budget S] [--check] [--explain] [--json F] [-o OUT]
                [--func NAME] [--top K] [--all-meshes]

FILE is a one-device program (a plain ``jax.jit`` lowering as ``jax.jit(f).lower(x)
.as_text()`` prints it, or a distir program on a mesh of one rank) or a program on
logical values with some placements fixed (the partitioner's form). The planner tries
every mesh of N ranks on the topology, places every value by an integer program on
each, turns the cheapest into programs (the partitioner), gives them P²'s synthesized
reductions and the tuner's schedules, predicts each with the cost model and prints
the best (``planner/plan.py``). ``--memory`` is the memory per device (default
80GiB; ``16GiB``, ``512MiB``, a number of bytes). ``-o`` writes the winner: a
dist/coll program with the same function and argument names as FILE, which
``distir-run`` runs on the same ``--inputs`` and ``distir-tune`` tunes; ``--check``
runs it first at reduced sizes on ``interpret`` and ``local`` against FILE.
``--explain`` says why the winner wins; ``--json`` writes DESIGN §5's format.
``--time-budget`` stops the search of meshes after S seconds with the best found (a
first Ctrl-C does the same and exits 130); progress goes to stderr.

Exit codes: 0 success; 1 input rejected (parse, verify, bad option, no plan fits the
memory: the message gives the smallest memory found); 2 ``--check`` found the plan
computing something else than FILE (a bug in distir); 3 internal error; 130
interrupted.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence

from distir.dialects.diagnostics import check_rank_count
from distir.tools.diagnostics import InputRejected, check_output, make_parser, run_tool, write_output

EXIT_BUG = 2
EXIT_INTERRUPTED = 130
CHECK_MAX_RANKS = 64
"""``--check`` runs the plan on this many simulated ranks at most (the local backend's
limit)."""

UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
         "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_memory(text: str) -> int:
    """``80GiB``, ``16GB``, ``512MiB``, ``1e9``: bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise InputRejected(f"distir-plan: --memory {text!r}: give a size such as 80GiB, 16GB or 512MiB")
    n = float(m.group(1)) * UNITS[m.group(2).lower()]
    if not n >= 1 or not math.isfinite(n):
        raise InputRejected(f"distir-plan: --memory {text!r} must be at least one byte")
    return int(n)


def build_parser():
    p = make_parser("distir-plan", "Choose the mesh, the placement of every value, the reductions and the schedule of a program for a cluster.")
    p.add_argument("file", metavar="FILE", help="the program (.mlir: one-device, a JAX lowering, or logical values with some placements fixed), or - for standard input")
    p.add_argument("--ranks", type=int, metavar="N", required=True, help="number of ranks (devices)")
    p.add_argument("--model", metavar="TOPOLOGY", required=True, help="the cluster: dgx2, p2-a100, p2-v100, local or a .toml file")
    p.add_argument("--nodes", type=int, metavar="K", help="nodes of the topology (default: as many as --ranks needs)")
    p.add_argument("--memory", metavar="SIZE", default="80GiB", help="memory per device (default 80GiB)")
    p.add_argument("--time-budget", type=float, metavar="S", help="stop searching meshes after S seconds (the best found so far)")
    p.add_argument("--check", action="store_true", help="run the plan at reduced sizes on interpret and local against FILE before writing it")
    p.add_argument("--explain", action="store_true", help="say why the best plan wins: its cost's terms, what the runner-up lost on")
    p.add_argument("--json", metavar="F", help="write the plans as JSON (DESIGN §5)")
    p.add_argument("-o", "--output", metavar="OUT", help="write the best plan's program here")
    p.add_argument("--func", metavar="NAME", help="the function to plan (default: the only public one)")
    p.add_argument("--top", type=int, default=3, metavar="K", help="plans evaluated and shown (default 3)")
    p.add_argument("--all-meshes", action="store_true", help="also try meshes whose axes both span several hierarchy levels")
    return p


def _topology(args):
    from distir.tuning.topology import get_topology

    topo = get_topology(args.model, args.nodes)
    if args.nodes is None and len(topo.levels) > 1 and args.ranks > topo.ranks:
        per = topo.ranks // topo.levels[0].cardinality
        topo = topo.with_nodes(math.ceil(args.ranks / per))
    if args.ranks > topo.ranks:
        raise InputRejected(f"distir-plan: --ranks {args.ranks} is more than the {topo.ranks} devices of {topo.describe()}")
    return topo


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    check_rank_count(args.ranks, "distir-plan")
    memory = parse_memory(args.memory)
    if args.top < 1:
        raise InputRejected(f"distir-plan: --top must be at least 1, got {args.top}")
    if args.time_budget is not None and not (args.time_budget > 0 and math.isfinite(args.time_budget)):
        raise InputRejected(f"distir-plan: --time-budget must be a positive number of seconds, got {args.time_budget}")
    if args.nodes is not None and args.nodes < 1:
        raise InputRejected(f"distir-plan: --nodes must be at least 1, got {args.nodes}")
    if args.check and args.ranks > CHECK_MAX_RANKS:
        raise InputRejected(f"distir-plan: --check runs the plan on {args.ranks} simulated ranks; it runs at most {CHECK_MAX_RANKS} (plan for fewer ranks to check)")
    for path, what in ((args.json, "--json"), (args.output, "-o")):
        if path:
            check_output("distir-plan", path, what)
    topo = _topology(args)
    from distir.tools.run import read_module
    from distir.tools.tune import _Interrupt, _Progress

    module = read_module(args.file)
    from distir.planner.plan import plan
    from distir.planner.report import explain, render, to_json

    bar = _Progress("distir-plan")
    bar.LABELS = {"search": "placing on each mesh", "evaluate": "scheduling and predicting the best"}
    with _Interrupt() as interrupted:
        try:
            result = plan(module, args.ranks, topo, memory, topology_name=args.model, func_name=args.func, top=args.top,
                          mixed=args.all_meshes, time_budget=args.time_budget, progress=bar, interrupted=interrupted)
        finally:
            bar.close()
    cpu = ", ".join(f"{k} {v:.2f} s" for k, v in result.seconds.items())
    print(f"distir-plan: {args.file}: {len(result.searched)} meshes searched, {result.evaluated} plans evaluated (CPU: {cpu})\n")
    print(render(result), end="")
    for note in result.notes + [n for p in result.plans[:1] for n in p.notes]:
        print(f"distir-plan: note: {note}", file=sys.stderr)
    if args.explain:
        print()
        print(explain(result), end="")
    code = 0
    if args.check:
        code = _check(module, result, args)
    if args.json:
        write_output("distir-plan", args.json, json.dumps(to_json(result), indent=1, allow_nan=False))
    if args.output and code == 0:
        best = result.best
        header = (f"// distir-plan: the best plan of {args.file} on {args.ranks} ranks of {topo.describe()} ({memory / (1 << 30):g} GiB per device):\n"
                  f"//   mesh {best.mesh.describe()} ({best.mesh.spans()}), predicted {best.predicted_s:.6g} s per step\n"
                  f"//   then: distir-opt -p '{best.pipeline}'\n" if best.pipeline else
                  f"// distir-plan: the best plan of {args.file} on {args.ranks} ranks of {topo.describe()} ({memory / (1 << 30):g} GiB per device):\n"
                  f"//   mesh {best.mesh.describe()} ({best.mesh.spans()}), predicted {best.predicted_s:.6g} s per step\n")
        write_output("distir-plan", args.output, header + str(best.module) + "\n")
    if result.cut_short == "interrupted":
        return EXIT_INTERRUPTED
    return code


def _check(module, result, args) -> int:
    from distir.planner.check import reduced, run_check

    original, planned = reduced(module, result.best.module, args.ranks)
    results = run_check(original, planned, args.ranks, ("interpret", "local"), one_device=result.graph.one_device)
    bad = [r for r in results if not r.ok]
    for r in results:
        print(f"distir-plan: check on {r.backend} ({r.ranks} ranks, reduced sizes): {'ok, ' if r.ok else 'DIFFERS: '}{r.message}", file=sys.stderr)
    if bad:
        print("distir-plan: error: the plan does not compute what the program does (a bug in distir); nothing written", file=sys.stderr)
        return EXIT_BUG
    return 0


def _run_tool(argv: Sequence[str] | None) -> int:
    from distir.tools.run import _Located

    try:
        return _run(argv)
    except _Located:
        raise
    except InputRejected as e:
        msg = str(e)
        raise InputRejected(msg if msg.startswith("distir-plan:") else f"distir-plan: {msg}") from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-plan", lambda: _run_tool(argv))


if __name__ == "__main__":
    sys.exit(main())
