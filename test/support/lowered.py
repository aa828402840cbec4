"""The examples at test sizes and the CoCoNet-style schedules (pass pipelines) the runtime
tests run them through.

``small_example(name)`` is the text of ``examples/<name>.mlir`` with its shapes shrunk
(same placements, ops and divisibility); ``schedules(name)`` yields ``(schedule, text)``
for each pipeline of ``SCHEDULES`` that applies to that example and changes it (the
unscheduled program is ``"original"``); ``rank_counts(text)`` the rank counts a test
runs it on (2 and 4, or the static size of its mesh).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DISTIR_OPT = Path(sys.executable).parent / "distir-opt"

SHRINK: dict[str, list[tuple[str, str]]] = {
    "adam": [("1048576", "64")],
    "lamb": [("1048576", "64")],
    "sgd": [("1048576", "64")],
    "dlrm_embedding": [("4096", "32"), ("1024x", "16x"), ("x256xf32", "x8xf32"), ("x8xi32", "x4xi32")],
    "hierarchical_allreduce": [("1024", "64")],
    "megatron_attention": [("8x1024x3072", "4x8x16"), ("3072x3072", "16x16"), ("3072xf16", "16xf16")],
    "megatron_mlp": [
        ("4x512x4096", "4x8x32"),
        ("4x512x1024", "4x8x16"),
        ("1024x4096", "16x32"),
        ("4096x1024", "32x16"),
        ("4096xf32", "32xf32"),
        ("1024xf32", "16xf32"),
    ],
    "moe": [
        ("8x256x1024", "8x16x16"),
        ("8x256x512", "8x16x8"),
        ("8x512x1024", "8x8x16"),
        ("8x256x1", "8x16x1"),
        ("256x1024", "16x16"),
    ],
    "pipeline_layer": [("2x2048x12288", "2x8x16"), ("12288xf16", "16xf16")],
    "primitives": [],
    "transformer_decode": [("8192", "64"), ("2048", "16")],
}

EXAMPLE_NAMES = sorted(SHRINK)

SCHEDULES: dict[str, str] = {
    "RS-C-AG": "split-allreduce,reorder-allgather",
    "fuse(RS-C-AG)": "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce",
    "fuse(RS-C-AG)+sliced-state": "split-allreduce,reorder-allgather,fuse-maps,slice-state{targets=m,v},fuse-allreduce",
    "ZeRO-3": "split-allreduce,reorder-allgather,fuse-maps,slice-state,fuse-allreduce",
    "fuse-collectives": "split-allreduce,reorder-send,fuse-collectives",
    "ol(C,coll)": "overlap{chunks=2}",
    "ol(C,fuse(RS-C-AG))": "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce,overlap{chunks=2}",
    "ol(fuse-collectives)": "split-allreduce,reorder-send,fuse-collectives,overlap{chunks=2}",
    "ol(C,fuse(RS-C-AG)) ring": "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce,overlap{chunks=2 order=ring}",
    "ol(C,coll) remote_first": "overlap{chunks=2 order=remote_first}",
    "fused tiles": "overlap{chunks=2 order=remote_first granularity=tile}",
}


def small_example(name: str) -> str:
    text = (EXAMPLES / f"{name}.mlir").read_text()
    for old, new in SHRINK[name]:
        text = text.replace(old, new)
    return text


@lru_cache(maxsize=None)
def schedules(name: str) -> tuple[tuple[str, str], ...]:
    """``(schedule, text)`` of each schedule that applies to the example, deduplicated."""
    return tuple((sched, text) for sched, text, _ in _scheduled(name))


@lru_cache(maxsize=None)
def _scheduled(name: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """``schedules`` with the functions each program runs (``npz.functions``), read from
    the module each pipeline produced (collection parses each program once)."""
    from distir.runtime import npz

    base = small_example(name)
    module = _module(base, "")
    out = [("original", base, tuple(f.sym_name.data for f in npz.functions(module)))]
    seen = {str(module)}
    for sched, pipeline in SCHEDULES.items():
        module = _module(base, pipeline)
        if module is None:
            continue
        text = str(module)
        if text in seen:
            continue
        seen.add(text)
        out.append((sched, text, tuple(f.sym_name.data for f in npz.functions(module))))
    return tuple(out)


def opt(text: str, pipeline: str) -> str | None:
    """The program after the pass pipeline (``distir-opt -p`` syntax; empty: printed as
    it is), or None when the pipeline rejects it."""
    module = _module(text, pipeline)
    return None if module is None else str(module)


def _module(text: str, pipeline: str):
    from xdsl.passes import PassPipeline
    from xdsl.utils.exceptions import PassFailedException

    from distir.dialects.context import make_context, parse_module
    from distir.passes.registry import ALL_PASSES

    module = parse_module(text)
    if pipeline:
        try:
            PassPipeline.parse_spec(dict(ALL_PASSES), pipeline).apply(make_context(), module)
            module.verify()
        except PassFailedException:
            return None
    return module


@lru_cache(maxsize=None)
def rank_counts(name: str) -> tuple[int, ...]:
    from distir.dialects.context import parse_module
    from distir.runtime import npz

    static = npz.static_ranks(parse_module(small_example(name)))
    return (static,) if static else (2, 4)


def all_cases() -> list[tuple[str, str, str, int]]:
    """(example, schedule, function, ranks) of every run the runtime tests make."""
    return list(_all_cases())


@lru_cache(maxsize=None)
def _all_cases() -> tuple[tuple[str, str, str, int], ...]:
    return tuple(
        (name, sched, f, ranks)
        for name in EXAMPLE_NAMES
        for sched, _, functions in _scheduled(name)
        for f in functions
        for ranks in rank_counts(name)
    )
