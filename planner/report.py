"""What ``distir-plan`` prints and writes: the table of the best plans, ``--explain``
and ``--json`` (DESIGN §5)."""

from __future__ import annotations

import math
import re

from distir.planner.graph import Graph
from distir.planner.memory import format_bytes
from distir.planner.plan import Plan, PlanResult
from distir.synthesis.matrices import format_matrix

SHORT = {"all_reduce": "AR", "reduce_scatter": "RS", "all_gather": "AG", "all_to_all": "A2A", "broadcast": "Bcast", "reduce": "Reduce", "send": "P2P"}


def format_time(t: float) -> str:
    if not math.isfinite(t):
        return "n/a"
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.3f} s"


def _pattern(name: str) -> str:
    """``l7_w1`` -> ``l*_w1``: the name of a group of alike arguments."""
    return re.sub(r"\d+", "*", name)


def sliced_groups(g: Graph, pl: Plan, count: int = 6) -> list[tuple[str, int, str, str]]:
    """The largest groups of alike arguments and how the plan lays them out:
    (name or pattern, how many, shape, layout), largest first."""
    groups: dict[tuple, list] = {}
    for node in g.nodes:
        if not node.is_arg:
            continue
        v = g.values[node.results[0]]
        how = pl.strategies[node.id].results[0].describe(pl.mesh.names)
        key = (_pattern(v.name), v.shape, how)
        got = groups.setdefault(key, [0, 0, v.name])
        got[0] += v.nbytes
        got[1] += 1
    rows = sorted(groups.items(), key=lambda kv: -kv[1][0])[:count]
    return [(name if n > 1 else first, n, "x".join(map(str, shape)), how) for (name, shape, how), (_, n, first) in rows]


def schedule_text(pl: Plan) -> str:
    parts = []
    if "synthesize-reductions" in pl.pipeline:
        parts.append("P² reductions")
    if pl.schedule and pl.pipeline.replace("synthesize-reductions", "").strip(","):
        parts.append(pl.schedule)
    return ", ".join(parts) or "as partitioned"


def collectives_text(pl: Plan) -> str:
    return ", ".join(f"{SHORT.get(k, k)} {format_time(v)}" for k, v in pl.collectives.items() if v > 0) or "none"


def render(result: PlanResult, width: int | None = None) -> str:
    """The table of the plans (rich), then the best plan's placements."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    import shutil

    from rich.markup import escape

    buf = StringIO()
    console = Console(file=buf, width=width or max(100, shutil.get_terminal_size((140, 24)).columns), force_terminal=False, color_system=None,
                      soft_wrap=False, markup=False, highlight=False)
    table = Table(show_lines=True, title=f"{len(result.plans)} best plans on {result.ranks} ranks of {result.topology.describe()}, {format_bytes(result.memory_limit)} per device")
    table.add_column("", no_wrap=True)
    table.add_column("mesh (P² matrix)", overflow="fold")
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("compute", justify="right", no_wrap=True)
    table.add_column("communication", overflow="fold")
    table.add_column("memory/rank", justify="right", no_wrap=True)
    table.add_column("sliced", overflow="fold")
    table.add_column("schedule", overflow="fold")
    for i, pl in enumerate(result.plans):
        sliced = "; ".join(f"{n} {how}" for n, _, _, how in sliced_groups(result.graph, pl, 3))
        cells = [
            "best" if i == 0 else str(i + 1),
            f"{pl.mesh.describe()}\n{pl.mesh.spans()}",
            format_time(pl.predicted_s),
            format_time(pl.compute_s),
            f"{format_time(pl.communication_s)}: {collectives_text(pl)}",
            format_bytes(pl.memory.total) if pl.memory else "n/a",
            sliced,
            schedule_text(pl),
        ]
        table.add_row(*(escape(c) for c in cells))
    console.print(table)
    best = result.best
    console.print(f"\nThe best plan's largest arguments ({best.mesh.spans()}; [d0,d1,...]: the axes slicing each dim, - for none):")
    for name, n, shape, how in sliced_groups(result.graph, best, 8):
        console.print(f"  {name}{f' (x{n})' if n > 1 else ''}: {shape} {how}")
    if best.memory is not None:
        console.print(f"Memory per rank: {best.memory.describe()}, peak at {best.memory.peak_at}")
    return buf.getvalue()


def explain(result: PlanResult, top_terms: int = 12) -> str:
    """Why the best plan wins: each term of its cost, and what the runner-up lost on."""
    best = result.best
    lines = [f"Why {best.mesh.describe()} ({best.mesh.spans()}) wins: predicted {format_time(best.predicted_s)} per step "
             f"(the integer program's estimate {format_time(best.estimate_s)})."]
    lines.append(f"  compute {format_time(best.compute_s)}, communication {format_time(best.communication_s)} ({collectives_text(best)})"
                 + (f", memory {best.memory.describe()}" if best.memory else ""))
    lines.append("  Terms of its cost (ops and resharding collectives, as the integer program counts them):")
    for t in best.terms[:top_terms]:
        lines.append(f"    {format_time(t.seconds):>10}  x{t.count:<5} {t.what}")
    if len(best.terms) > top_terms:
        rest = sum(t.seconds for t in best.terms[top_terms:])
        lines.append(f"    {format_time(rest):>10}         {len(best.terms) - top_terms} more terms")
    if best.pipeline:
        lines.append(f"  Then: {best.pipeline}")
    if len(result.plans) > 1:
        other = result.plans[1]
        diff = other.predicted_s - best.predicted_s
        if diff <= 0:
            lines.append(f"The runner-up, {other.mesh.describe()} ({other.mesh.spans()}), ties with it ({format_time(other.predicted_s)}); "
                         "the first found is kept. Their terms differ by:")
        else:
            lines.append(f"The runner-up, {other.mesh.describe()} ({other.mesh.spans()}), is predicted {format_time(other.predicted_s)} "
                         f"(+{format_time(diff)}, {100 * diff / best.predicted_s:.1f}% slower). It lost on:")
        mine: dict[str, float] = {}
        theirs: dict[str, float] = {}
        for t in best.terms:
            mine[t.key] = mine.get(t.key, 0.0) + t.seconds
        for t in other.terms:
            theirs[t.key] = theirs.get(t.key, 0.0) + t.seconds
        deltas = sorted(((theirs.get(k, 0.0) - mine.get(k, 0.0), k) for k in set(mine) | set(theirs)), reverse=True)
        for d, k in deltas[:6]:
            if d > 0:
                lines.append(f"    +{format_time(d):>9}  {k}")
        gains = [(d, k) for d, k in deltas if d < 0][-3:]
        if gains:
            lines.append("  and gained on:")
            for d, k in reversed(gains):
                lines.append(f"    -{format_time(-d):>9}  {k}")
        if best.memory and other.memory:
            lines.append(f"  memory per rank: {format_bytes(other.memory.total)} against the winner's {format_bytes(best.memory.total)}")
    searched = [s for s in result.searched if s.solution is not None or not s.solved]
    skipped = [s for s in result.searched if s.solution is None and s.solved]
    bounded = [s for s in result.searched if not s.solved]
    lines.append(f"Searched {len(result.searched)} meshes ({len(skipped)} without a plan within the memory"
                 + (f"; {len(bounded)} not solved: the lower bound of their estimate exceeds the estimate of the plans kept" if bounded else "")
                 + f"); integer programs of {max((s.size['binaries'] for s in searched), default=0)} binaries and "
                 f"{max((s.size['edge variables'] for s in searched), default=0)} edge variables at most.")
    return "\n".join(lines) + "\n"


def to_json(result: PlanResult) -> dict:
    """DESIGN §5's ``--json``: ``{"ranks", "topology", "plans": [{"mesh", "placements",
    "predicted_s", "compute_s", "communication_s", "memory_bytes", "pipeline"}], "best"}``
    (each plan also says its collectives' seconds, its memory by category and its
    schedule)."""
    plans = []
    for pl in result.plans:
        plans.append({
            "mesh": {"shape": list(pl.mesh.sizes), "axes": list(pl.mesh.names), "matrix": format_matrix(pl.mesh.placement.matrix), "levels": pl.mesh.spans()},
            "placements": pl.placements(result.graph),
            "predicted_s": pl.predicted_s,
            "compute_s": pl.compute_s,
            "communication_s": pl.communication_s,
            "collectives_s": pl.collectives,
            "memory_bytes": pl.memory.total if pl.memory else None,
            "memory": pl.memory.by_category if pl.memory else None,
            "pipeline": pl.pipeline,
            "schedule": pl.schedule,
            "estimate_s": pl.estimate_s,
        })
    return {"ranks": result.ranks, "topology": result.topology.describe(), "memory_limit_bytes": result.memory_limit, "plans": plans, "best": 0}
