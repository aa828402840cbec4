"""synthesize-reductions (synthesis/synthesize_reductions.py): the rewritten program
computes what the original computes, on 1, 2, 4 and 8 ranks; options and diagnostics.
The IR it produces is checked by FileCheck in synthesize-reductions.mlir."""

from pathlib import Path

import pytest
from xdsl.utils.exceptions import PassFailedException

from distir.dialects.context import parse_module
from distir.passes.pipeline import apply_pipeline
from distir.runtime import equivalent

HERE = Path(__file__).parent


def program(nodes: int, gpus: int) -> str:
    n = nodes * gpus
    return f"""
dist.mesh @hw shape = [{nodes}, {gpus}] axes = ["node", "gpu"]
dist.mesh @world shape = [{n}] axes = ["dp"] view @hw [[0, 1]]
dist.mesh @dp_tp shape = [{nodes}, {gpus}] axes = ["dp", "tp"] view @hw [[0], [1]]
func.func @flat(%x: !dist.tensor<{8 * n}xf32, @world, [local]>) -> !dist.tensor<{8 * n}xf32, @world, [replicated]> {{
  %g = coll.all_reduce sum %x : !dist.tensor<{8 * n}xf32, @world, [local]> -> !dist.tensor<{8 * n}xf32, @world, [replicated]>
  func.return %g : !dist.tensor<{8 * n}xf32, @world, [replicated]>
}}
func.func @dp(%x: !dist.tensor<{8 * n}x3xf32, @dp_tp, [local, sliced<0>]>) -> !dist.tensor<{8 * n}x3xf32, @dp_tp, [replicated, sliced<0>]> {{
  %g = coll.all_reduce avg %x axes [0] : !dist.tensor<{8 * n}x3xf32, @dp_tp, [local, sliced<0>]> -> !dist.tensor<{8 * n}x3xf32, @dp_tp, [replicated, sliced<0>]>
  func.return %g : !dist.tensor<{8 * n}x3xf32, @dp_tp, [replicated, sliced<0>]>
}}
func.func @both(%x: !dist.tensor<{8 * n}xf32, @dp_tp, [local, local]>) -> !dist.tensor<{8 * n}xf32, @dp_tp, [replicated, replicated]> {{
  %g = coll.all_reduce max %x axes [0, 1] : !dist.tensor<{8 * n}xf32, @dp_tp, [local, local]> -> !dist.tensor<{8 * n}xf32, @dp_tp, [replicated, replicated]>
  func.return %g : !dist.tensor<{8 * n}xf32, @dp_tp, [replicated, replicated]>
}}
"""


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_rewritten_programs_compute_the_same(ranks):
    topology = "singles.toml" if ranks == 1 else "pairs.toml"
    nodes, gpus = (1, 1) if ranks == 1 else (ranks // 2, 2)
    text = program(nodes, gpus)
    after = parse_module(text)
    apply_pipeline(after, f'synthesize-reductions{{topology="{HERE / topology}"}}')
    printed = str(after)
    if nodes > 1:  # a flat reduction over several nodes is split by level
        assert "coll.reduce_scatter sum" in printed and "coll.all_reduce sum %x" not in printed
    else:
        assert printed.count("coll.all_reduce") == 3  # one level or one rank: nothing to split
    for f in ("flat", "dp", "both"):
        report = equivalent(parse_module(text), after, ranks, trials=1, func_a=f, func_b=f)
        assert report, report.message


def test_local_backend_runs_the_rewritten_program():
    text = program(4, 2)
    after = parse_module(text)
    apply_pipeline(after, f'synthesize-reductions{{topology="{HERE / "pairs.toml"}"}}')
    assert equivalent(parse_module(text), after, 8, trials=1, func_a="flat", func_b="flat", backend_b="local")


@pytest.mark.parametrize(
    "options, message",
    [
        ("topology=nope", "unknown topology 'nope'"),
        ("algorithm=butterfly", "algorithm must be one of ring, tree, auto"),
        ("topology=p2-a100", "a mesh of 8 ranks is not a whole number of 'p2-a100' nodes"),
        ("nodes=2 topology={pairs}", "has 4 devices, the mesh has 8"),
        ("hierarchy=2,2 topology={pairs}", "hierarchy [2, 2] has 4 devices"),
    ],
)
def test_bad_options_are_diagnostics(options, message):
    module = parse_module(program(4, 2))
    with pytest.raises(PassFailedException, match="'synthesize-reductions' pass: .*" + message.replace("[", r"\[").replace("]", r"\]")):
        apply_pipeline(module, "synthesize-reductions{" + options.format(pairs=f'"{HERE / "pairs.toml"}"') + "}")
