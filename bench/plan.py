"""distir-plan against the standard hand plans, on the same cost model.

    python bench/plan.py [--only gpt24,llama,mlp,dlrm,gptjax] [--machines dgx2:1,dgx2:16,p2-a100:2,p2-a100:4]
                         [--memory 80GiB] [--quick]

For each program and machine, the planner's best plan (``distir.planner.plan``) next to
the hand plans written as annotated programs (only the arguments placed, the rest by
the partitioner's propagation: ``materialize.annotated``), each given P²'s reductions
and the tuner's schedule as the planner's plans are (``plan.schedule``: the tuner runs
on programs of at most ``TUNE_MAX_COLLECTIVES`` collectives, as ``distir-tune`` would
in reasonable time) and predicted by the same model (``plan.predict``):

* **DP**: data parallelism over every rank (the batch of the inputs sliced, everything
  else replicated; the gradients all-reduced);
* **ZeRO-1**: DP with the optimizer state sliced (its first dim, or the one after the
  layers dim of a stacked parameter) over every rank;
* **TP x DP**: Megatron tensor parallelism over the GPUs of a node (the first GEMM of
  the MLP and the query/key/value projections split by columns, the second GEMM and
  the output projection by rows, the head by the vocabulary when it divides; the state
  as its parameter) and data parallelism over the nodes (one node: TP only);
* **... + fused**: the same plans, with the tuner's CoCoNet schedule (fused collectives,
  overlap) where the tuner runs.

A plan that does not fit the memory per device says so (``>mem``). Programs: ``gpt24``,
a 24-layer GPT training step at GPT-3 XL's sizes (hidden 2048, 16 heads, 1.3 B
parameters; forward, backward, AdamW; ``examples/gpt_training_step.py``), ``gptjax``,
the JAX GPT step (``examples/jax/gpt_step.py`` when present) at GPT-2 medium's sizes
(hidden 1024, 16 heads: Megatron's split of a 16-GPU node, vocab 50257, seq 1024, batch
256, its 24 layers: ``GPTJAX_LAYERS``; 355 M parameters) imported as a one-device program (its
arguments ``arg0``, ``arg1``, ... named by position with ``gpt_step.argument_names()``:
``blocks_wq``, ``m_blocks_wq``, ``ids``, ...; the block parameters stacked over a
leading layers dim, so their Megatron and ZeRO dims are one further than ``gpt24``'s),
``llama``, the Llama-7B Adam step on logical values (``optimizer_step.py
--logical``: partial gradients, replicated parameters; the state is the plans'),
``mlp``, the Megatron MLP at CoCoNet's sizes (B 8, S 1024, H 3072; one device), and
``dlrm``, DLRM's embedding tables and MLP (one device). Machines: ``dgx2`` 1 node (16
ranks) and 16 nodes (256), ``p2-a100`` 2 and 4 nodes (32, 64). ``--quick`` shrinks the
programs (for a smoke run). The planner must never be predicted slower than the best
hand plan (``ok``); the bench marks each case.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import table  # noqa: E402


@dataclass
class Program:
    name: str
    text: Callable[[bool], str]
    """The program's text (``quick``: at small sizes)."""
    data: dict[str, int] = field(default_factory=dict)
    """Data arguments (by name pattern) and their batch dim."""
    tp: dict[str, int] = field(default_factory=dict)
    """Megatron's tensor-parallel dim of each parameter (by name pattern)."""
    state: tuple[str, ...] = ()
    """Prefixes of the optimizer state's arguments (``m_`` of ``m_<param>``)."""
    names: Callable[[], list[str]] | None = None
    """The arguments' names by position, for a program whose arguments are ``arg0``,
    ``arg1``, ... (an imported one): the patterns above match these names."""
    stacked: tuple[str, ...] = ()
    """Prefixes of parameters stacked over layers (a leading layers dim, as ``lax.scan``
    takes them): their tensor-parallel and ZeRO dims are one further."""


def gpt24(quick: bool) -> str:
    from distir.examples.gpt_training_step import GPTShape, generate

    if quick:
        return generate(GPTShape(layers=4, hidden=64, heads=8, vocab=256, seq=32, batch=256))
    return generate(GPTShape(layers=24, hidden=2048, heads=16, vocab=50257, seq=1024, batch=256))


def llama(quick: bool) -> str:
    from distir.examples.optimizer_step import llama_parameters, optimizer_step

    params = llama_parameters("llama-7b", hidden=256 if quick else None, vocab=512 if quick else None, layers=2 if quick else None)
    return optimizer_step("adam", params, mixed=True, logical=True)


def mlp(quick: bool) -> str:
    b, s, h = (8, 64, 256) if quick else (8, 1024, 3072)
    text = (ROOT / "test" / "planner" / "inputs" / "mlp.mlir").read_text()
    return text.replace("8x16x32", f"{b}x{s}x{h}").replace("32x128", f"{h}x{4 * h}").replace("128x32", f"{4 * h}x{h}").replace(
        "8x16x128", f"{b}x{s}x{4 * h}").replace("<128xf32", f"<{4 * h}xf32").replace("<32xf32", f"<{h}xf32")


def dlrm(quick: bool) -> str:
    """DLRM's sparse part and top MLP for one device: ``T`` embedding tables of ``R`` rows
    pooled over ``L`` lookups per sample, their sum (the interaction), two GEMMs with a
    ReLU."""
    T, R, D, B, L, H = (16, 1024, 64, 256, 8, 128) if quick else (64, 100000, 128, 4096, 8, 512)
    tab, idx = f"!dist.tensor<{T}x{R}x{D}xf32, @world, [replicated]>", f"!dist.tensor<{T}x{B}x{L}xi32, @world, [replicated]>"
    emb, inter = f"!dist.tensor<{T}x{B}x{D}xf32, @world, [replicated]>", f"!dist.tensor<{B}x{D}xf32, @world, [replicated]>"
    w1, hid = f"!dist.tensor<{D}x{H}xf32, @world, [replicated]>", f"!dist.tensor<{B}x{H}xf32, @world, [replicated]>"
    w2 = f"!dist.tensor<{H}x{D}xf32, @world, [replicated]>"
    return f"""// DLRM: {T} embedding tables of {R} rows and dim {D}, {L} lookups per sample, batch {B}; the top MLP {D}-{H}-{D}.
dist.mesh @world shape = [1]

func.func @dlrm(%tables: {tab}, %indices: {idx}, %w1: {w1}, %w2: {w2}) -> {inter} {{
  %emb = dist.embedding_bag %tables, %indices mode sum : ({tab}, {idx}) -> {emb}
  %x = dist.reduce_tensor sum %emb dims [0] : {emb} -> {inter}
  %h = dist.matmul %x, %w1 : ({inter}, {w1}) -> {hid}
  %a = dist.map(%h) : ({hid}) -> {hid} {{
  ^bb0(%hi: f32):
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %hi, %zero : f32
    dist.yield %r : f32
  }}
  %y = dist.matmul %a, %w2 : ({hid}, {w2}) -> {inter}
  func.return %y : {inter}
}}
"""


GPTJAX_LAYERS = 24


@functools.cache
def _gpt_step():
    """examples/jax/gpt_step.py as a module (JAX on the CPU: it only lowers)."""
    import importlib.util
    import os

    script = ROOT / "examples" / "jax" / "gpt_step.py"
    if not script.exists():
        raise FileNotFoundError(f"{script} (the JAX GPT step) is not in this checkout")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    spec = importlib.util.spec_from_file_location("gpt_step", script)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def gptjax(quick: bool) -> str:
    """The one-device step (no mesh), lowered on abstract arguments (nothing allocated):
    GPT-2 medium's sizes, or the toy's at batch 256 with 2 layers (``quick``)."""
    from distir.frontends.program import import_program

    gpt = _gpt_step()
    text = gpt.lowered_text(None, 2, "toy", 256) if quick else gpt.lowered_text(None, GPTJAX_LAYERS, "gpt2-medium")
    return str(import_program(text, "gpt_step.mlir").module)  # StableHLO + Shardy -> distir


GPT_TP = {"*_wq": 1, "*_bq": 0, "*_wk": 1, "*_bk": 0, "*_wv": 1, "*_bv": 0, "*_wo": 0, "*_w1": 1, "*_b1": 0, "*_w2": 0, "head": 1}
PROGRAMS = {
    "gpt24": Program("gpt24", gpt24, {"tokens": 0, "labels": 0}, GPT_TP, ("m_", "v_")),
    "gptjax": Program("gptjax", gptjax, {"ids": 0, "labels": 0}, GPT_TP, ("m_", "v_"), lambda: _gpt_step().argument_names(), ("blocks_",)),
    "llama": Program("llama", llama, {}, {}, ("m_", "v_")),
    "mlp": Program("mlp", mlp, {"x": 0}, {"w1": 1, "b1": 0, "w2": 0}),
    "dlrm": Program("dlrm", dlrm, {"indices": 1}, {"tables": 0}),
}
MACHINES = [("dgx2", 1), ("p2-a100", 2), ("p2-a100", 4), ("dgx2", 16)]


def _match(pattern: str, name: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, "*_" + pattern.lstrip("*_"))


def _layout(rank: int, dims: dict[int, tuple[int, ...]]):
    from distir.planner.strategies import Layout

    return Layout(tuple(dims.get(d, ()) for d in range(rank)))


def hand_plans(g, prog: Program, ranks: int, topo) -> dict[str, tuple]:
    """name -> (mesh, {argument node: layout}) of each hand plan (None: it does not apply)."""
    from distir.planner.meshes import hierarchy, meshes

    out: dict[str, tuple | None] = {}
    one = next(m for m in meshes(topo, ranks) if len(m.sizes) == 1)
    h, _ = hierarchy(topo, ranks)
    nodes, per = math.prod(h[:-1]), h[-1]
    args = {g.values[n.results[0]].name: n for n in g.nodes if n.is_arg}
    if prog.names is not None:
        names = prog.names()
        args = {names[int(name.removeprefix("arg"))]: node for name, node in args.items()}

    def base(name: str) -> str:  # the parameter of a state argument (m_<param>)
        return next((name[len(s):] for s in prog.state if name.startswith(s)), name)

    def first(name: str) -> int:  # the first dim that is not a stack of layers
        return 1 if base(name).startswith(prog.stacked) else 0

    def divides(name: str, dim: int, k: int) -> bool:
        return g.values[args[name].results[0]].shape[dim] % k == 0

    def data(axes: tuple[int, ...], k: int) -> dict:
        lay = {}
        for name, node in args.items():
            for pat, d in prog.data.items():
                if _match(pat, name) and divides(name, d, k) and node.fixed is None:
                    lay[node.id] = _layout(len(g.values[node.results[0]].shape), {d: axes})
        return lay

    dp = data((0,), ranks)
    out["DP"] = (one, dp) if dp or not prog.data else None
    zero = dict(dp)
    for name, node in args.items():
        if node.fixed is None and any(name.startswith(s) for s in prog.state) and divides(name, first(name), ranks):
            zero[node.id] = _layout(len(g.values[node.results[0]].shape), {first(name): (0,)})
    out["ZeRO-1"] = (one, zero) if prog.state else None
    if prog.tp:
        if nodes > 1:
            mesh = next((m for m in meshes(topo, ranks) if m.sizes == (nodes, per) and m.levels(1).startswith(f"{topo.levels[-1].name} {per}") and m.pure(1)), None)
            batch_axes, tp_axes, k_dp, k_tp = (0,), (1,), nodes, per
        else:
            mesh, batch_axes, tp_axes, k_dp, k_tp = one, (), (0,), 1, per
        lay = data(batch_axes, k_dp) if batch_axes else {}
        for name, node in args.items():
            for pat, d in prog.tp.items():
                if _match(pat, base(name)) and node.fixed is None and divides(name, first(name) + d, k_tp):
                    lay[node.id] = _layout(len(g.values[node.results[0]].shape), {first(name) + d: tp_axes})
        out["TP x DP" if nodes > 1 else "TP"] = (mesh, lay) if mesh is not None else None
    return out  # type: ignore[return-value]


def run_case(prog: Program, machine: tuple[str, int], memory: float, quick: bool) -> list[list[str]]:
    from distir.dialects.context import parse_module
    from distir.planner import plan as planner
    from distir.planner.graph import read_graph
    from distir.planner.materialize import annotated
    from distir.planner.memory import format_bytes, memory_per_rank
    from distir.planner.plan import Plan, predict, schedule
    from distir.planner.report import format_time
    from distir.tuning.topology import get_topology

    name, nodes = machine
    topo = get_topology(name, nodes)
    ranks = topo.ranks
    text = prog.text(quick)
    module = parse_module(text)
    rows = []
    t0 = time.process_time()
    try:
        result = planner.plan(module, ranks, topo, memory, topology_name=name, top=2)
        best = result.best
        mine = best.predicted_s
        planned = f"{format_time(mine)} ({best.mesh.describe()}, {format_bytes(best.memory.total)})"
    except planner.NoPlanFits as e:
        mine, planned = math.inf, f"none fits (smallest {format_bytes(e.smallest)})"
    cpu = time.process_time() - t0
    g = read_graph(parse_module(text))
    hands: dict[str, float] = {}
    cells: dict[str, str] = {}
    from distir.planner.plan import TUNE_MAX_COLLECTIVES, explored_collectives

    for hname, spec in hand_plans(g, prog, ranks, topo).items():
        untuned = None
        for fused in (False, True):
            label = hname + (" + fused" if fused else "")
            if spec is None:
                cells[label] = "n/a"
                continue
            if fused and untuned is not None and explored_collectives(untuned) > TUNE_MAX_COLLECTIVES:
                cells[label] = cells[hname] + " (untuned)" if cells[hname][0].isdigit() else cells[hname]
                continue  # too large for the tuner, as for the planner: the same program
            mesh, lay = spec
            try:
                pl = Plan(mesh, annotated(g, mesh, lay), [], math.nan)
                untuned = pl.module
                schedule(pl, ranks, topo, name, tune=fused)
                predict(pl, ranks, topo)
            except Exception as e:  # a hand plan the partitioner cannot build: say why
                cells[label] = f"n/a ({type(e).__name__})"
                continue
            mem = memory_per_rank(pl.module, ranks)
            if mem.total > memory:
                cells[label] = f">mem ({format_bytes(mem.total)})"
                continue
            hands[label] = pl.predicted_s
            cells[label] = format_time(pl.predicted_s)
    best_hand = min(hands.values(), default=math.inf)
    verdict = "ok" if mine <= best_hand * (1 + 1e-9) else "SLOWER"
    if math.isfinite(best_hand) and mine < best_hand * (1 - 1e-3):
        verdict += f" ({best_hand / mine:.2f}x)"
    rows.append([prog.name, f"{name} x{nodes} ({ranks})", planned, *(cells.get(k, "-") for k in COLUMNS), verdict, f"{cpu:.1f}"])
    return rows


COLUMNS = ["DP", "DP + fused", "ZeRO-1", "ZeRO-1 + fused", "TP x DP", "TP x DP + fused", "TP", "TP + fused"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="gpt24,llama,mlp,dlrm,gptjax", help="programs (comma-separated)")
    ap.add_argument("--machines", default=",".join(f"{n}:{k}" for n, k in MACHINES), help="topology:nodes list")
    ap.add_argument("--memory", default="80GiB", help="memory per device (default 80GiB)")
    ap.add_argument("--quick", action="store_true", help="small programs (a smoke run)")
    args = ap.parse_args()
    from distir.tools.plan import parse_memory

    memory = parse_memory(args.memory)
    machines = [(m.split(":")[0], int(m.split(":")[1])) for m in args.machines.split(",") if m]
    rows = []
    for pname in [p for p in args.only.split(",") if p]:
        prog = PROGRAMS[pname]
        for machine in machines:
            print(f"  {pname} on {machine[0]} x{machine[1]} ...", file=sys.stderr, flush=True)
            try:
                rows += run_case(prog, machine, memory, args.quick)
            except FileNotFoundError as e:
                print(f"  skipped {pname}: {e}", file=sys.stderr)
                break
    used = [i for i, c in enumerate(COLUMNS) if any(r[3 + i] != "-" for r in rows)]
    head = ["program", "machine (ranks)", "distir-plan", *(COLUMNS[i] for i in used), "plan vs best hand plan", "plan CPU s"]
    body = [[*r[:3], *(r[3 + i] for i in used), *r[-2:]] for r in rows]
    print(f"\nPredicted step time per plan ({args.memory} per device; the cost model of distir-tune --model):\n")
    print(table(body, head))
    return 0 if all(not r[-2].startswith("SLOWER") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
