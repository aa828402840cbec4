"""Nothing that does not verify runs (issue 27): every tool and the step API refuse a
module that does not verify, and a pass that turns a program that verified into one that
does not is reported as a bug in distir naming the pass (exit 3), never run.

The broken pass lives only here (``BreakAnAllReduce``): it gives the first all_reduce a
``local`` result, which its verifier rejects, as the old combine-collectives built a
fused all-reduce its verifier rejected and the executor ran anyway."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

from distir.dialects import coll
from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected, PassProducedInvalidIR

PROGRAM = """\
dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return %y : !dist.tensor<8xf32, @world, [replicated]>
}
"""
# The all_reduce's result claims to stay local: parses, does not verify.
INVALID = PROGRAM.replace("[replicated]", "[local]")


@dataclass(frozen=True)
class BreakAnAllReduce(ModulePass):
    """A broken pass: the first all_reduce's result keeps its operand's ``local``."""

    name = "break-an-all-reduce"

    def apply(self, ctx, op: ModuleOp) -> None:
        for o in op.walk():
            if isinstance(o, coll.AllReduceOp):
                o.results[0]._type = o.operands[0].type  # noqa: SLF001
                return


BUG = "internal error (a bug in distir): pass 'break-an-all-reduce' produced a program that does not verify"


@pytest.fixture
def registered(monkeypatch):
    """The broken pass, known to -p pipelines for this test only."""
    from distir.passes.registry import ALL_PASSES

    monkeypatch.setitem(ALL_PASSES, BreakAnAllReduce.name, lambda: BreakAnAllReduce)


@pytest.fixture
def in_the_lowering(monkeypatch):
    """The default lowering with the broken pass after combine-collectives."""
    from distir.lowering import pipeline

    real = pipeline.passes_for

    def broken(module, ranks):
        passes = real(module, ranks)
        at = next(i for i, p in enumerate(passes) if p.name == "combine-collectives")
        return [*passes[: at + 1], BreakAnAllReduce(), *passes[at + 1 :]]

    monkeypatch.setattr(pipeline, "passes_for", broken)


@pytest.fixture
def files(tmp_path):
    good, bad = tmp_path / "good.mlir", tmp_path / "bad.mlir"
    good.write_text(PROGRAM)
    bad.write_text(INVALID)
    return good, bad


def tool(capsys, main, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_distir_opt_names_the_pass_that_broke_the_program(capsys, files, registered):
    from distir.tools.opt import main

    code, err = tool(capsys, main, files[0], "-p", "break-an-all-reduce")
    assert code == 3 and BUG in err
    assert "'coll.all_reduce' op" in err and "good.mlir:" in err  # located in the source


def test_distir_run_never_runs_a_lowering_that_breaks_the_program(capsys, files, in_the_lowering):
    from distir.tools.run import main

    code, err = tool(capsys, main, files[0], "--ranks", 2, "--backend", "local")
    assert code == 3 and BUG in err
    code, err = tool(capsys, main, files[0], "--ranks", 2, "--backend", "interpret")  # no lowering: runs
    assert code == 0, err


def test_distir_tune_reports_the_pass_instead_of_predicting(capsys, files, in_the_lowering):
    from distir.tools.tune import main

    code, err = tool(capsys, main, files[0], "--ranks", 2, "--model", "dgx2", "--sizes", "8")
    assert code == 3 and BUG in err


def test_distir_import_names_a_partition_that_breaks_the_program(capsys, tmp_path, monkeypatch):
    from distir.frontends import partition
    from distir.tools.importer import main

    real = partition.partition_module  # program.import_program imports it when it partitions

    def broken(module, spans=None):
        remarks = real(module, spans)
        BreakAnAllReduce().apply(None, module)
        return remarks

    monkeypatch.setattr(partition, "partition_module", broken)
    src = tmp_path / "sum.mlir"
    src.write_text(
        'module @m attributes {mhlo.num_partitions = 2 : i32} {\n'
        '  sdy.mesh @mesh = <["x"=2]>\n'
        '  func.func public @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> (tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {\n'
        '    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>\n'
        '    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<8xf32>, tensor<f32>) -> tensor<f32>\n'
        '    return %0 : tensor<f32>\n'
        '  }\n'
        '}\n'
    )
    code, err = tool(capsys, main, src)
    assert code == 3 and "pass 'partition' produced a program that does not verify" in err, err


def test_the_step_api_refuses_a_broken_pipeline_or_lowering(registered, in_the_lowering):
    from distir.runtime import step

    with pytest.raises(PassProducedInvalidIR, match="break-an-all-reduce") as e:
        step.compile(PROGRAM, ranks=2)  # the lowering's
    assert e.value.pass_name == "break-an-all-reduce"
    with pytest.raises(PassProducedInvalidIR, match="break-an-all-reduce"):
        step.compile(PROGRAM, ranks=2, pipeline="break-an-all-reduce")


def test_every_tool_rejects_a_file_that_does_not_verify(capsys, files):
    from distir.tools.opt import main as opt
    from distir.tools.run import main as run
    from distir.tools.tune import main as tune

    bad = files[1]
    for main, argv in ((opt, []), (run, ["--ranks", 2]), (run, ["--ranks", 2, "--backend", "interpret"]), (tune, ["--ranks", 2, "--model", "dgx2"])):
        code, err = tool(capsys, main, bad, *argv)
        assert code == 1 and "'coll.all_reduce' op result" in err, (main, err)


def broken_after_verifying() -> ModuleOp:
    """A module that verified when parsed, then changed in place so that it does not."""
    module = parse_module(PROGRAM)
    BreakAnAllReduce().apply(None, module)
    return module


@pytest.mark.parametrize("module", [lambda: parse_module(INVALID, verify=False), broken_after_verifying], ids=["never verified", "changed since"])
def test_no_entry_point_of_the_api_runs_a_module_that_does_not_verify(module):
    from distir.runtime import interpret, step
    from distir.runtime.executor import LoweredProgram
    from distir.runtime.local import LocalBackend
    from distir.tuning.schedule import Schedule
    from distir.tuning.topology import get_topology
    from distir.tuning.tuner import tune

    with pytest.raises(VerifyException, match="'coll.all_reduce' op result"):
        interpret(module(), "f", None, 2)
    with pytest.raises(VerifyException, match="'coll.all_reduce' op result"):
        LocalBackend().run(module(), "f", {}, 2, 0)
    with pytest.raises(VerifyException, match="'coll.all_reduce' op result"):
        LoweredProgram.build(module(), "f", 2)
    with pytest.raises(InputRejected, match="'coll.all_reduce' op result"):
        step.compile(module(), ranks=2)
    with pytest.raises(VerifyException, match="'coll.all_reduce' op result"):
        tune(module(), 2, model=get_topology("dgx2"))
    with pytest.raises(VerifyException, match="'coll.all_reduce' op result"):
        Schedule(module())


def test_the_tuner_lowers_verified_the_schedules_it_picks(monkeypatch):
    """Predictions run nothing, so they lower without verifying each pass (a third of a
    training step's tuning went to it); each size's pick is lowered verified before it
    is reported (a broken pass is then still named: the test above). Counted on a
    program whose schedules are predicted in this process."""
    from distir.lowering import pipeline
    from distir.tuning import tuner
    from distir.tuning.topology import get_topology

    calls = {True: 0, False: 0}
    real = pipeline.lower

    def counted(module, ranks, target=None, scattered=(), verify=True):
        calls[verify] += 1
        return real(module, ranks, target=target, scattered=scattered, verify=verify)

    monkeypatch.setattr(pipeline, "lower", counted)
    sizes = [2**12, 2**16, 2**20]
    result = tuner.tune(parse_module(PROGRAM.replace("8xf32", "1048576xf32")), 4, sizes=sizes, model=get_topology("dgx2"))
    picked = {result.best[s] for s in sizes}
    assert None not in picked
    assert calls[False] >= result.evaluated > len(picked)
    assert 1 <= calls[True] <= len(picked)
