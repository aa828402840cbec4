"""lower-overlap keeps the meaning of a chain on 1, 2, 4 and 8 ranks (the interpreter on
the program before and after the schedule, and the ``local`` backend, which lowers the
chain into chunks), and cuts it along the right dim: along the rows a chain
reduce-scatters and gathers back (``ol(MM,fuse(RS-C-AG))``, ``ol(MM,RS-C-AG)``), but not
along the rows of a result that stays sliced (``ol(MM,RS-C)``)."""

import pytest

from distir.dialects import rt
from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline
from distir.runtime.equivalence import compare_outputs
from distir.runtime.interpreter import interpret
from distir.runtime.local import LocalBackend

T = "!dist.tensor<32x16xf32, @world, [{}]>"
R, L, S0, S1 = T.format("replicated"), T.format("local"), T.format("sliced<0>"), T.format("sliced<1>")
W = "!dist.tensor<16x16xf32, @world, [sliced<0>]>"
B = "!dist.tensor<16xf32, @world, [replicated]>"

ADD = """{{
  ^bb0(%p: f32, %q: f32):
    %u = arith.addf %p, %q : f32
    dist.yield %u : f32
  }}"""

# The flattened ([B*S, H]) tail of a Megatron self-attention block: MM-AR-C.
ATTENTION = f"""
dist.mesh @world shape = [?]
func.func @attention(%w: {W}, %b: {B}, %in: {S1}, %r: {R}) -> {R} {{
  %layer = dist.matmul %in, %w : ({S1}, {W}) -> {L}
  %sum = coll.all_reduce sum %layer : {L} -> {R}
  %biased = dist.map(%sum, %b) : ({R}, {B}) -> {R} {ADD.format()}
  %drop = dist.dropout %biased p 0.25 seed 5 : {R} -> {R}
  %out = dist.map(%drop, %r) : ({R}, {R}) -> {R} {ADD.format()}
  func.return %out : {R}
}}
"""

# The same block with its result left sliced along the rows (MM-RS-C).
SHARDED = f"""
dist.mesh @world shape = [?]
func.func @sharded(%w: {W}, %b: {B}, %in: {S1}) -> {S0} {{
  %layer = dist.matmul %in, %w : ({S1}, {W}) -> {L}
  %sum = coll.reduce_scatter sum %layer dim 0 : {L} -> {S0}
  %drop = dist.dropout %sum p 0.25 seed 5 : {S0} -> {S0}
  %out = dist.map(%drop, %b) : ({S0}, {B}) -> {S0} {ADD.format()}
  func.return %out : {S0}
}}
"""

SPLIT = "split-allreduce{dim=0},reorder-allgather,fuse-maps"
CASES = {
    # schedule: (program, pipeline, the dim lower-overlap cuts along)
    "ol(MM,fuse(RS-C-AG))": (ATTENTION, f"{SPLIT},fuse-allreduce,overlap{{chunks=2 targets=layer,out}}", 0),
    "ol(MM,RS-C-AG)": (ATTENTION, f"{SPLIT},overlap{{chunks=2 targets=layer,out}}", 0),
    "ol(MM,RS-C) sliced result": (SHARDED, "overlap{chunks=2 targets=layer,out}", 1),
}
RANKS = (1, 2, 4, 8)


def _scheduled(name):
    text, pipeline, _ = CASES[name]
    module = parse_module(text)
    apply_pipeline(module, pipeline)
    assert "coll.overlap" in str(module)
    return text, module


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("ranks", RANKS)
def test_cut_dim(name, ranks):
    _, module = _scheduled(name)
    apply_pipeline(module, f"fix-mesh-sizes{{ranks={ranks}}},lower-overlap")
    assert "coll.overlap" not in str(module)
    (asm,) = [o for o in module.walk() if isinstance(o, rt.AssembleOp)]
    assert asm.dim.value.data == CASES[name][2]
    chunked = [o for o in module.walk() if isinstance(o, rt.ChunkOp) and o.result.type.rank == 2]
    assert chunked and {o.dim.value.data for o in chunked} == {CASES[name][2]}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("ranks", RANKS)
def test_chunked_chain_equals_unscheduled(name, ranks):
    text, module = _scheduled(name)
    want = interpret(parse_module(text), None, None, ranks, seed=3)
    for backend, got in (
        ("interpret", interpret(module, None, None, ranks, seed=3)),
        ("local", LocalBackend().run(module, None, {}, ranks, seed=3)),
    ):
        c = compare_outputs(want, got, "unscheduled", f"{name} on {backend}")
        assert c.ok, c.message
