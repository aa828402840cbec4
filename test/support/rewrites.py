"""Programs and a checker for the rewrite passes' execution tests: run a pipeline, check
that it changed the program as expected, and that the interpreter gives the same
outputs before and after on 1, 2, 4 and 8 ranks.

``PROGRAMS`` maps a name to a small program on a mesh of unknown size (``[?]``, or
``[2, ?]`` for the pipeline), shapes divisible by 8; ``program(name)`` returns its text.
``check(name_or_text, pipeline, contains=..., ranks=...)`` returns the transformed
module. ``uneven(name)`` is the same program on prime dims, checked on ``UNEVEN_RANKS``
(blocks of different sizes, some empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline
from distir.runtime import equivalent

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RANKS = (1, 2, 4, 8)

T = "!dist.tensor<16x8xf32, @world, [{}]>"
R, L, S0 = T.format("replicated"), T.format("local"), T.format("sliced<0>")
B = "!dist.tensor<8xf32, @world, [replicated]>"
N = "!dist.tensor<f32, @world, [{}]>"

PROGRAMS: dict[str, str] = {
    # an all-reduce followed by computations of every kind the reorders handle
    "ar_then_computations": f"""
dist.mesh @world shape = [?]
func.func @f(%x: {L}, %r: {R}, %b: {B}, %s: f32, %w: !dist.tensor<8x4xf32, @world, [replicated]>)
    -> ({R}, {R}, {N.format("replicated")}, !dist.tensor<16x4xf32, @world, [replicated]>) {{
  %sum = coll.all_reduce sum %x : {L} -> {R}
  %biased, %scaled = dist.map(%sum, %b, %s) : ({R}, {B}, f32) -> ({R}, {R}) {{
  ^bb0(%p: f32, %q: f32, %t: f32):
    %u = arith.addf %p, %q : f32
    %v = arith.mulf %p, %t : f32
    dist.yield %u, %v : f32, f32
  }}
  %drop = dist.dropout %biased p 0.25 seed 11 : {R} -> {R}
  %out = dist.map(%drop, %r, %scaled) : ({R}, {R}, {R}) -> {R} {{
  ^bb0(%p: f32, %q: f32, %t: f32):
    %u = arith.addf %p, %q : f32
    %v = arith.subf %u, %t : f32
    dist.yield %v : f32
  }}
  %sq = dist.map(%out) : ({R}) -> {R} {{
  ^bb0(%p: f32):
    %u = arith.mulf %p, %p : f32
    dist.yield %u : f32
  }}
  %norm = dist.reduce_tensor sum %sq dims [0, 1] : {R} -> {N.format("replicated")}
  %proj = dist.matmul %scaled, %w : ({R}, !dist.tensor<8x4xf32, @world, [replicated]>) -> !dist.tensor<16x4xf32, @world, [replicated]>
  func.return %out, %scaled, %norm, %proj : {R}, {R}, {N.format("replicated")}, !dist.tensor<16x4xf32, @world, [replicated]>
}}
""",
    # collectives of every kind and their primitive forms
    "collectives": f"""
dist.mesh @world shape = [?]
func.func @f(%x: {L}, %y: {S0}, %z: !dist.tensor<16x8xf32, @world, [at<0>]>) -> ({R}, {R}, {R}, !dist.tensor<16x8xf32, @world, [sliced<1>]>, {R}) {{
  %ar = coll.all_reduce max %x : {L} -> {R}
  %rs = coll.reduce_scatter avg %x dim 0 : {L} -> {S0}
  %ag = coll.all_gather %rs : {S0} -> {R}
  %a2a = coll.all_to_all %y dim 1 : {S0} -> !dist.tensor<16x8xf32, @world, [sliced<1>]>
  %red = coll.reduce sum %x root 0 : {L} -> !dist.tensor<16x8xf32, @world, [at<0>]>
  %snd = coll.send %red to 0 : !dist.tensor<16x8xf32, @world, [at<0>]> -> !dist.tensor<16x8xf32, @world, [at<0>]>
  %bc = coll.broadcast %snd : !dist.tensor<16x8xf32, @world, [at<0>]> -> {R}
  %bz = coll.broadcast %z : !dist.tensor<16x8xf32, @world, [at<0>]> -> {R}
  %sum = dist.map(%bc, %bz) : ({R}, {R}) -> {R} {{
  ^bb0(%p: f32, %q: f32):
    %u = arith.addf %p, %q : f32
    dist.yield %u : f32
  }}
  func.return %ar, %ag, %sum, %a2a, %bz : {R}, {R}, {R}, !dist.tensor<16x8xf32, @world, [sliced<1>]>, {R}
}}
""",
    # a fused all-reduce with a sliced result and an overlap, for the expansion
    "fused": f"""
dist.mesh @world shape = [?]
func.func @f(%g: {L}, %m: {S0}, %s: f32, %a: !dist.tensor<16x32xf32, @world, [sliced<1>]>, %w: !dist.tensor<32x8xf32, @world, [sliced<0>]>) -> ({R}, {S0}, {R}) {{
  %p, %n = coll.fused_all_reduce sum %g dim 0 gather [true, false] : {L} -> ({R}, {S0}) {{
  ^bb0(%gs: {S0}):
    %u, %v = dist.map(%gs, %m, %s) : ({S0}, {S0}, f32) -> ({S0}, {S0}) {{
    ^bb1(%e: f32, %f: f32, %h: f32):
      %k = arith.mulf %e, %h : f32
      %l = arith.addf %f, %k : f32
      dist.yield %k, %l : f32, f32
    }}
    coll.yield %u, %v : {S0}, {S0}
  }}
  %o = coll.overlap chunks 2 -> {R} {{
    %mm = dist.matmul %a, %w : (!dist.tensor<16x32xf32, @world, [sliced<1>]>, !dist.tensor<32x8xf32, @world, [sliced<0>]>) -> {L}
    %ar = coll.all_reduce sum %mm : {L} -> {R}
    coll.yield %ar : {R}
  }}
  func.return %p, %n, %o : {R}, {S0}, {R}
}}
""",
    # reduce-scatter, computations, gathers: the shapes fuse-allreduce and fuse-collectives take
    "rs_computations_ag": f"""
dist.mesh @world shape = [?]
func.func @f(%g: {L}, %p: {R}, %m: {S0}, %s: f32) -> ({R}, {S0}, {S0}) {{
  %rs = coll.reduce_scatter avg %g dim 0 : {L} -> {S0}
  %p_s = dist.take_slice %p dim 0 : {R} -> {S0}
  %m1 = dist.map(%m, %rs, %s) : ({S0}, {S0}, f32) -> {S0} {{
  ^bb0(%a: f32, %b: f32, %c: f32):
    %d = arith.mulf %a, %c : f32
    %e = arith.addf %d, %b : f32
    dist.yield %e : f32
  }}
  %part = dist.reduce_tensor sum %m1 dims [0, 1] : {S0} -> {N.format("local")}
  %n = coll.all_reduce sum %part : {N.format("local")} -> {N.format("replicated")}
  %p1_s = dist.map(%p_s, %m1, %n) : ({S0}, {S0}, {N.format("replicated")}) -> {S0} {{
  ^bb0(%a: f32, %b: f32, %c: f32):
    %d = arith.divf %b, %c : f32
    %e = arith.subf %a, %d : f32
    dist.yield %e : f32
  }}
  %p1 = coll.all_gather %p1_s : {S0} -> {R}
  %rs2 = coll.reduce_scatter sum %g dim 1 : {L} -> !dist.tensor<16x8xf32, @world, [sliced<1>]>
  %t = dist.map(%rs2) : (!dist.tensor<16x8xf32, @world, [sliced<1>]>) -> !dist.tensor<16x8xf32, @world, [sliced<1>]> {{
  ^bb0(%a: f32):
    %b = math.tanh %a : f32
    dist.yield %b : f32
  }}
  %t0 = coll.all_to_all %t dim 0 : !dist.tensor<16x8xf32, @world, [sliced<1>]> -> {S0}
  func.return %p1, %m1, %t0 : {R}, {S0}, {S0}
}}
""",
    # computations on a broadcast value and on a reduced one
    "broadcast": f"""
dist.mesh @world shape = [?]
func.func @f(%x: {L}, %r: {R}, %s: f32) -> ({R}, {N.format("replicated")}) {{
  %red = coll.reduce sum %x root 0 : {L} -> !dist.tensor<16x8xf32, @world, [at<0>]>
  %sq = dist.map(%red) : (!dist.tensor<16x8xf32, @world, [at<0>]>) -> !dist.tensor<16x8xf32, @world, [at<0>]> {{
  ^bb0(%a: f32):
    %b = arith.mulf %a, %a : f32
    dist.yield %b : f32
  }}
  %bc = coll.broadcast %sq : !dist.tensor<16x8xf32, @world, [at<0>]> -> {R}
  %y = dist.map(%bc, %r, %s) : ({R}, {R}, f32) -> {R} {{
  ^bb0(%a: f32, %b: f32, %c: f32):
    %d = arith.mulf %a, %c : f32
    %e = arith.addf %d, %b : f32
    dist.yield %e : f32
  }}
  %n = dist.reduce_tensor max %y dims [0, 1] : {R} -> {N.format("replicated")}
  func.return %y, %n : {R}, {N.format("replicated")}
}}
""",
    # a matmul feeding an all-reduce (model parallelism)
    "matmul_all_reduce": f"""
dist.mesh @world shape = [?]
func.func @f(%a: !dist.tensor<16x32xf32, @world, [sliced<1>]>, %w: !dist.tensor<32x8xf32, @world, [sliced<0>]>, %b: {B}) -> {R} {{
  %layer = dist.matmul %a, %w : (!dist.tensor<16x32xf32, @world, [sliced<1>]>, !dist.tensor<32x8xf32, @world, [sliced<0>]>) -> {L}
  %sum = coll.all_reduce sum %layer : {L} -> {R}
  %out = dist.map(%sum, %b) : ({R}, {B}) -> {R} {{
  ^bb0(%p: f32, %q: f32):
    %u = arith.addf %p, %q : f32
    dist.yield %u : f32
  }}
  func.return %out : {R}
}}
""",
}


def shrunk(example: str, subs: Sequence[tuple[str, str]]) -> str:
    text = (EXAMPLES / example).read_text()
    for old, new in subs:
        assert old in text, f"{example} no longer holds {old}"
        text = text.replace(old, new)
    return text


PROGRAMS["adam"] = shrunk("adam.mlir", [("1048576", "64")])
PROGRAMS["lamb"] = shrunk("lamb.mlir", [("1048576", "64")])
PROGRAMS["pipeline"] = shrunk("pipeline_layer.mlir", [("2x2048x12288", "2x8x16"), ("12288xf16", "16xf16")])
PIPELINE_RANKS = (2, 4, 8)


def program(name_or_text: str) -> str:
    return PROGRAMS.get(name_or_text, name_or_text)


def lit_function(path: Path, name: str) -> str:
    """Function ``@name`` of lit file ``path``, alone on a mesh ``@world`` of unknown size
    (a lit case run on every rank count)."""
    lit = path.read_text()
    body = lit[lit.index(f"func.func @{name}(") :]
    return "dist.mesh @world shape = [?]\n" + body[: body.index("\n}\n") + 3]


UNEVEN_SIZES = {16: 13, 8: 7, 32: 29, 4: 3, 64: 61, 2048: 11}
UNEVEN_RANKS = (3, 5, 6, 7)
"""Rank counts that divide none of ``uneven``'s sizes (blocks of ceil(s/n) of different
sizes, 13 over 7 ranks leaving the last one 1 element, 3 over 5 ranks leaving two
empty)."""


def uneven(name_or_text: str) -> str:
    """The program with every tensor dim of ``UNEVEN_SIZES`` replaced by a prime (13, 7,
    29, 3, 61, 11): the same program on dims no rank count of ``UNEVEN_RANKS`` divides."""
    import re

    def dims(m: re.Match) -> str:
        parts = m.group(1).split("x")
        return "tensor<" + "x".join(str(UNEVEN_SIZES.get(int(p), p)) if p.isdigit() else p for p in parts)

    return re.sub(r"tensor<((?:\d+x)+)", lambda m: dims(m) , program(name_or_text))


def check(
    name_or_text: str,
    pipeline: str,
    contains: Sequence[str] = (),
    absent: Sequence[str] = (),
    ranks: Sequence[int] = RANKS,
    trials: int = 2,
    changes: bool = True,
) -> ModuleOp:
    """Apply ``pipeline``; the result must verify, differ from the input (unless
    ``changes`` is false), contain every string of ``contains`` and none of ``absent``,
    and agree with the input on every rank count of ``ranks``. Returns the transformed
    module."""
    text = program(name_or_text)
    before = parse_module(text)
    after = apply_pipeline(parse_module(text), pipeline)
    after.verify()
    out = str(after)
    if changes:
        assert out != str(before), f"{pipeline} left the program unchanged"
    for s in contains:
        assert s in out, f"{pipeline}: expected {s!r} in\n{out}"
    for s in absent:
        assert s not in out, f"{pipeline}: did not expect {s!r} in\n{out}"
    for r in ranks:
        report = equivalent(before, after, r, trials=trials, seed=r)
        assert report, f"{pipeline} on {r} ranks: {report.message}"
    return after
