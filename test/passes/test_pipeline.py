"""The pass manager (passes/pipeline.py): pipelines from -p text with suggestions for
misspelled names, one line per pass, and re-verification after every pass that names a
pass leaving an invalid program and points at the source line."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from distir.dialects.context import make_context, parse_module
from distir.dialects.diagnostics import InputRejected, PassProducedInvalidIR
from distir.passes.pipeline import apply_pipeline, parse_pipeline, pass_summary, run_passes
from distir.passes.registry import ALL_PASSES

PROGRAM = """\
dist.mesh @world shape = [4]
func.func @f(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}
"""


@dataclass(frozen=True)
class ReturnBeforeItsValue(ModulePass):
    """A broken pass: moves every function's return to the top of its body."""

    name = "return-before-its-value"

    def apply(self, ctx, op: ModuleOp) -> None:
        from xdsl.dialects import func

        for f in op.walk():
            if isinstance(f, func.ReturnOp):
                ret, block = f, f.parent_block()
                ret.detach()
                block.insert_op_before(ret, block.first_op)


def test_each_pass_has_a_one_line_summary():
    for name, factory in ALL_PASSES.items():
        summary = pass_summary(factory())
        assert summary.endswith(".") and "\n" not in summary and len(summary) > 15, name


@pytest.mark.parametrize(
    "spec, expect",
    [
        ("split-alreduce", "unknown pass 'split-alreduce' (did you mean 'split-allreduce'?)"),
        ("fuse-allreduce,ovrlap", "unknown pass 'ovrlap' (did you mean 'overlap'?)"),
        ("overlap{chunk=2}", "pass 'overlap' has no option 'chunk' (did you mean 'chunks'?) (its options: chunks, order, granularity, targets)"),
        ("overlap{chunks=two}", "pass 'overlap':"),
        ("overlap{", "Error parsing pass pipeline specification"),
    ],
)
def test_bad_pipelines_are_rejected_with_the_closest_name(spec, expect):
    with pytest.raises(InputRejected) as e:
        parse_pipeline(spec)
    assert expect in str(e.value)


def test_a_pass_leaving_an_invalid_program_is_a_bug_named_and_located():
    module = parse_module(PROGRAM, "prog.mlir")
    with pytest.raises(PassProducedInvalidIR) as e:
        run_passes(module, [ReturnBeforeItsValue()], make_context())
    assert e.value.pass_name == "return-before-its-value"
    text = str(e.value)
    assert text.startswith("pass 'return-before-its-value' produced a program that does not verify:\nprog.mlir:4:3\n  func.return %y")
    assert "'func.return' op operand 0 (%y) is used before its definition (line 3)" in text


SCALED = """\
dist.mesh @world shape = [4]
func.func @f(%x: !dist.tensor<8xf32, @world, [replicated]>, %s: f32) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = dist.map(%x, %s) : (!dist.tensor<8xf32, @world, [replicated]>, f32) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    dist.yield %c : f32
  }
  %z = dist.map(%y, %s) : (!dist.tensor<8xf32, @world, [replicated]>, f32) -> !dist.tensor<8xf32, @world, [replicated]> {
  ^bb0(%a: f32, %b: f32):
    %c = arith.mulf %a, %b : f32
    %d = arith.mulf %c, %b : f32
    dist.yield %d : f32
  }
  func.return %z : !dist.tensor<8xf32, @world, [replicated]>
}
"""


@dataclass(frozen=True)
class MulfToF64(ModulePass):
    """A broken pass: the last ``arith.mulf`` of f32 operands gets an f64 result, which
    breaks the op's IRDL constraint (operands and result of one type), while the other
    ``arith.mulf`` of the program, verified already, keep theirs."""

    name = "mulf-to-f64"

    def apply(self, ctx, op: ModuleOp) -> None:
        from xdsl.dialects import arith
        from xdsl.dialects.builtin import f64

        last = [m for m in op.walk() if isinstance(m, arith.MulfOp)][-1]
        broken = arith.MulfOp.create(operands=list(last.operands), result_types=[f64], properties=dict(last.properties))
        last.parent_block().insert_op_before(broken, last)
        last.results[0].replace_all_uses_with(broken.results[0])
        last.detach()
        last.erase()


def test_an_op_breaking_an_irdl_constraint_is_a_bug_named_although_its_kind_verified_before():
    """The verifier remembers op shapes whose IRDL constraints held (dialects/verifier.py
    ``_irdl_key``): an ``arith.mulf`` of another shape is checked in full."""
    module = parse_module(SCALED, "prog.mlir")
    with pytest.raises(PassProducedInvalidIR) as e:
        run_passes(module, [MulfToF64()], make_context())
    assert e.value.pass_name == "mulf-to-f64"
    text = str(e.value)
    # located at the dist.map holding the new op (which has no source line)
    assert text.startswith("pass 'mulf-to-f64' produced a program that does not verify:\nprog.mlir:8:3\n  %z = dist.map")
    assert "result 'result' at position 0 does not verify:\nattribute f32 expected from variable 'T', but got f64" in text


def test_apply_pipeline_verifies_after_each_pass():
    module = parse_module(PROGRAM)
    apply_pipeline(module, "split-allreduce")
    assert "coll.reduce_scatter" in str(module)
    with pytest.raises(PassProducedInvalidIR, match="return-before-its-value"):
        apply_pipeline(module, [ReturnBeforeItsValue()])


@pytest.mark.parametrize("name", ["19", "0", "-1", "true", "false", "a.b", 'say "hi"', "arg0", "all_reduce_rs", "1e5"])
def test_printed_pipelines_read_back_as_the_same_passes(name):
    from distir.passes.fuse_allreduce import FuseAllReducePass
    from distir.passes.pipeline import pipeline_spec
    from distir.passes.split_allreduce import SplitAllReducePass

    passes = (SplitAllReducePass(dim=0, targets=(name, "x")), FuseAllReducePass(targets=(name,)))
    text = pipeline_spec(passes)
    assert parse_pipeline(text) == passes, text


def test_a_value_named_by_a_number_is_quoted():
    from distir.passes.pipeline import pipeline_spec
    from distir.passes.split_allreduce import SplitAllReducePass

    assert pipeline_spec([SplitAllReducePass(dim=0, targets=("19",))]) == 'split-allreduce{dim=0 targets="19"}'
