"""The tuner's predictions for CoCoNet's clusters next to the paper's measurements
(``distir-tune --model``; no GPU needed):

* Adam and LAMB, data parallel on 16 DGX-2 nodes (256 V100), 2^10 ... 2^30 elements
  [paper: AR-Opt best for small tensors, fuse(RS-Opt-AG) for large ones, crossover near
  2^17; best-schedule speedups 1.2-1.7x (Adam) and 1.35-2.0x (LAMB), mixed precision];
* the model-parallel self-attention and MLP blocks of GPT-2 8.3B on one DGX-2 node (16
  GPUs), S=1024, H=3072, B=8 and 16 [paper: ol(MM,fuse(RS-C-AG)) best, 1.33-1.62x over
  MM-AR-C; MM-RS-C-AG 1.09-1.23x], written as in ``examples/`` ([B, S, H]) and as
  CoCoNet writes them ([B·S, H], the sequence and batch dims flattened);
* the pipeline-parallel layer of GPT-3 175B (S=2048, H=12288), one layer per DGX-2 node,
  two stages of 16 GPUs [paper: ol(RS,fuse(P2P-C),AG) best, 11.75-12.21x over AR-P2P-C].

For the Megatron blocks a second table gives, per size, the speedup over MM-AR-C of
the best variant (chunks, order, split dim) of each of the paper's schedules
(ol(MM,fuse(RS-C-AG)), MM-RS-C-AG, MM-fuse(RS-C-AG)), and the best schedule without the
fused-operator paper's tile operators (``fused(MM+RS)`` ...), i.e. CoCoNet's own
search space.

    python bench/tune_predictions.py [--only adam,lamb,attention,mlp,pipeline]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import EXAMPLES, note, table  # noqa: E402


def flatten_bs(text: str, b: int, s: int) -> str:
    """[B, S, X] tensors as [B·S, X] (the placements' dims shift by one)."""
    import re

    def shape(m: re.Match) -> str:
        rest, placements = m.group(1), m.group(2)
        placements = re.sub(r"sliced<(\d+)>", lambda p: f"sliced<{int(p.group(1)) - 1}>", placements)
        return f"!dist.tensor<{b * s}x{rest}, @world, [{placements}]>"

    return re.sub(rf"!dist\.tensor<{b}x{s}x([^,]+), @world, \[([^\]]*)\]>", shape, text)


def paper_mlp(text: str) -> str:
    """examples/megatron_mlp.mlir at GPT-2 8.3B's sizes (B=8, S=1024, H=3072)."""
    from distir.dialects.context import parse_module
    from distir.tuning.sizes import substitute

    return str(substitute(parse_module(text), {4: 8, 512: 1024, 1024: 3072, 4096: 12288}))


def workloads(only: set[str]):
    from distir.tuning.topology import get_topology

    dgx2 = get_topology("dgx2", 16)
    node = get_topology("dgx2", 1)
    attention = (EXAMPLES / "megatron_attention.mlir").read_text()
    mlp = paper_mlp((EXAMPLES / "megatron_mlp.mlir").read_text())
    out = []
    if "adam" in only:
        out.append(("Adam, 256 GPUs", (EXAMPLES / "adam.mlir").read_text(), dgx2, 256, "2^10..2^30", None, "AR-Adam", "1.2-1.7x (best over AR-Adam baseline)"))
    if "lamb" in only:
        out.append(("LAMB, 256 GPUs", (EXAMPLES / "lamb.mlir").read_text(), dgx2, 256, "2^10..2^30", None, "AR-LAMB", "1.35-2.0x"))
    if "attention" in only:
        out.append(("attention [B,S,H], 16 GPUs", attention, node, 16, "8,16", 8, "MM-AR-C", "ol(MM,fuse(RS-C-AG)) 1.33-1.62x"))
        out.append(("attention [B*S,H], 16 GPUs", flatten_bs(attention, 8, 1024), node, 16, "8192,16384", 8192, "MM-AR-C", "ol(MM,fuse(RS-C-AG)) 1.33-1.62x"))
    if "mlp" in only:
        out.append(("MLP [B,S,H], 16 GPUs", mlp, node, 16, "8,16", 8, "MM-C-MM-AR-C", "ol(MM,fuse(RS-C-AG)) 1.33-1.62x"))
        out.append(("MLP [B*S,H], 16 GPUs", flatten_bs(mlp, 8, 1024), node, 16, "8192,16384", 8192, "MM-C-MM-AR-C", "ol(MM,fuse(RS-C-AG)) 1.33-1.62x"))
    if "pipeline" in only:
        out.append(("pipeline layer, 2 x 16 GPUs", (EXAMPLES / "pipeline_layer.mlir").read_text(), get_topology("dgx2", 2), 32, None, None, "AR-P2P-C", "ol(RS,fuse(P2P-C),AG) 11.75-12.21x"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="adam,lamb,attention,mlp,pipeline")
    args = ap.parse_args()
    from distir.dialects.context import parse_module
    from distir.tuning.sizes import format_size, parse_sizes
    from distir.tuning.tuner import tune

    rows = []
    paper_rows = []
    for title, text, topo, ranks, sizes, dim, baseline, paper in workloads(set(args.only.split(","))):
        t0 = time.perf_counter()
        r = tune(parse_module(text), ranks, parse_sizes(sizes) if sizes else None, dim=dim, model=topo)
        note(f"{title}: {len(r.schedules)} schedules in {time.perf_counter() - t0:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in r.seconds.items())})")
        base = next(s for s in r.schedules if s.name.split(" [")[0] == baseline and s.pipeline in ("", "fuse-maps")) if baseline else r.baseline
        families: dict[str, tuple[float, str]] = {}
        for size in r.sizes:
            tb = base.times.get(size)
            for s in r.schedules:
                t = s.times.get(size)
                if s.check != "ok" or t is None or tb is None:
                    continue
                fam = s.name.split(" [")[0].split(" #")[0].removesuffix(" (as written)")
                best = families.get((fam, size))
                if best is None or tb / t > best[0]:
                    families[(fam, size)] = (tb / t, s.name)
            winner = r.best[size]
            shown = sorted(((sp, fam, name) for (fam, z), (sp, name) in families.items() if z == size), reverse=True)[:4]
            rows.append([title, format_size(size), winner or "-", "; ".join(f"{fam} {sp:.2f}x" for sp, fam, _ in shown), paper])
            if baseline.endswith("MM-AR-C"):
                paper_rows.append([title, format_size(size), *_paper_families(families, size, baseline.removesuffix("MM-AR-C"))])
        crossing = [z for z in r.sizes if r.best[z] and not r.best[z].startswith(baseline)]
        if len(r.sizes) > 4 and crossing:
            note(f"  first size where {baseline} is not best: {format_size(crossing[0])}")
    print(table(rows, ["workload", "size", "predicted best", "best of each family (speedup over the baseline)", "paper"]))
    if paper_rows:
        print()
        print(table(paper_rows, ["workload", "size", *PAPER_FAMILIES, "best without tile operators"]))
    return 0


PAPER_FAMILIES = ("ol(MM,fuse(RS-C-AG))", "MM-RS-C-AG", "MM-fuse(RS-C-AG)")


def _paper_families(families: dict, size: int, prefix: str) -> list[str]:
    """The speedup over MM-AR-C of the best variant of each of the paper's schedules
    (the MLP's names start with its first MM-C), and the best schedule that is not a
    fused tile operator."""

    def shown(sp: float, name: str) -> str:
        bracket = name[name.index(" [") :] if " [" in name else ""
        return f"{sp:.2f}x{bracket}"

    out = []
    for fam in PAPER_FAMILIES:
        got = families.get((prefix + fam, size))
        out.append(shown(*got) if got else "-")
    coconet = [(sp, name) for (fam, z), (sp, name) in families.items() if z == size and "fused(" not in fam]
    out.append(f"{max(coconet)[1]} {max(coconet)[0]:.2f}x" if coconet else "-")
    return out


if __name__ == "__main__":
    sys.exit(main())
