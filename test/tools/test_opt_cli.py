"""distir-opt as users run it: files and stdin, -o, exit codes, located diagnostics."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import tools
from support.imports import HEAVY, imported_by, packages

ROOT = Path(__file__).parents[2]
PRIMS = str(ROOT / "examples" / "primitives.mlir")


def opt(*args, stdin=None):
    return subprocess.run([tools.path("distir-opt"), *args], input=stdin, capture_output=True, text=True)


def test_reads_file_and_stdin_alike():
    a = opt(PRIMS)
    b = opt("-", stdin=Path(PRIMS).read_text())
    c = opt(stdin=Path(PRIMS).read_text())
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout == c.stdout
    assert "coll.all_reduce sum" in a.stdout


def test_output_file(tmp_path):
    out = tmp_path / "o.mlir"
    r = opt(PRIMS, "-o", str(out))
    assert r.returncode == 0 and r.stdout == ""
    assert out.read_text() == opt(PRIMS).stdout


def test_generic_form():
    r = opt(PRIMS, "--print-op-generic")
    assert r.returncode == 0
    assert '"coll.all_reduce"(%x) <{op = "sum"}>' in r.stdout


def test_missing_file_is_rejected():
    r = opt("/nonexistent/file.mlir")
    assert r.returncode == 1
    assert "cannot read /nonexistent/file.mlir" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_pass_is_rejected():
    r = opt(PRIMS, "-p", "no-such-pass")
    assert r.returncode == 1
    assert "bad pipeline 'no-such-pass'" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_flag_is_rejected():
    r = opt(PRIMS, "--frobnicate")
    assert r.returncode == 1
    assert "unrecognized arguments: --frobnicate" in r.stderr


def test_help_exits_zero():
    r = opt("--help")
    assert r.returncode == 0 and "--split-input-file" in r.stdout


def test_verification_error_is_located():
    src = (
        "dist.mesh @world shape = [4]\n"
        "func.func @f(%x: !dist.tensor<64xf32, @world, [replicated]>) {\n"
        "  %y = coll.all_gather %x : !dist.tensor<64xf32, @world, [replicated]> -> !dist.tensor<64xf32, @world, [replicated]>\n"
        "  func.return\n"
        "}\n"
    )
    r = opt("-", stdin=src)
    assert r.returncode == 1
    assert r.stderr.startswith("stdin:3:3")
    assert "'coll.all_gather' op operand must be sliced on axis 0, got replicated" in r.stderr


def test_parse_error_is_located():
    r = opt("-", stdin="dist.mesh @world shape = [4]\nfunc.func @f(%x: !dist.tensor<64xf32, @world, [partial]>) {\n  func.return\n}\n")
    assert r.returncode == 1
    assert "stdin:2:" in r.stderr
    assert "expected a placement (replicated, sliced, local, at, unplaced), got 'partial'" in r.stderr


def test_non_utf8_input_is_a_parse_error(tmp_path):
    p = tmp_path / "bad.mlir"
    p.write_bytes(b"dist.mesh @world shape = [4]\n\xff\n")
    r = opt(str(p))
    assert r.returncode == 1
    assert "input is not UTF-8 text (byte 0xff)" in r.stderr
    assert f"{p}:2:1" in r.stderr


def test_verify_diagnostics_reports_every_chunk_and_exits_zero():
    r = opt(str(ROOT / "examples" / "invalid.mlir"), "--split-input-file", "--verify-diagnostics")
    assert r.returncode == 0
    assert r.stdout.count("// -----") == 2
    assert r.stdout.count("' op ") == 3


def test_version_names_distir():
    from distir.tools.diagnostics import distir_version

    r = opt("--version")
    assert r.returncode == 0 and r.stdout.startswith(f"distir-opt {distir_version()} (xdsl ")


def test_help_lists_distirs_passes_with_options_and_one_line_each():
    r = opt("--help")
    assert r.returncode == 0
    table = r.stdout.split("distir passes")[1]
    assert "split-allreduce        Split AllReduces into ReduceScatter + AllGather or Reduce + Broadcast." in table
    assert "options: strategy=rs-ag, dim=(auto), root=0, targets=(none)" in table
    assert "fix-mesh-sizes" in table and "options: ranks=0" in table
    assert "convert-linalg-to-loops" not in r.stdout  # xDSL's passes: on request only
    assert "distir-opt --list-passes all" in r.stdout


def test_list_passes_all_adds_xdsls_passes():
    r = opt("--list-passes")
    assert r.returncode == 0 and "overlap" in r.stdout and "cse" not in r.stdout.split()
    r = opt("--list-passes", "all")
    assert r.returncode == 0 and "xDSL's passes" in r.stdout and "cse," in r.stdout


def test_misspelled_pass_option_and_flag_get_the_closest_name():
    r = opt(PRIMS, "-p", "split-alreduce")
    assert r.returncode == 1
    assert "unknown pass 'split-alreduce' (did you mean 'split-allreduce'?)" in r.stderr
    r = opt(PRIMS, "-p", "split-allreduce{stratgy=rs-ag}")
    assert r.returncode == 1
    assert "pass 'split-allreduce' has no option 'stratgy' (did you mean 'strategy'?) (its options: strategy, dim, root, targets)" in r.stderr
    r = opt(PRIMS, "--split-input-fle")
    assert r.returncode == 1 and "(did you mean --split-input-file?)" in r.stderr


def test_a_pass_request_the_program_cannot_take_is_located():
    r = opt(PRIMS, "-p", "fix-mesh-sizes{ranks=3}")
    assert r.returncode == 1
    assert r.stderr.startswith(f"{PRIMS}:4:1\ndist.mesh @world shape = [4]\n")
    assert "'fix-mesh-sizes' pass: 'dist.mesh' op mesh @world of shape [4] does not have 3 ranks" in r.stderr


def test_a_pass_that_leaves_an_invalid_program_is_named_and_located(tmp_path):
    # 6 rows over 4 ranks are blocks of 2, 2, 2, 0 rows, 24 elements blocks of 6: each
    # rank's block no longer reshapes into its block once the mesh has 4 ranks.
    src = tmp_path / "reshape.mlir"
    t, r = "!dist.tensor<6x4xf32, @world, [sliced<0>]>", "!dist.tensor<24xf32, @world, [sliced<0>]>"
    src.write_text(f"dist.mesh @world shape = [?]\nfunc.func @f(%x: {t}) -> {r} {{\n  %y = dist.reshape %x : {t} -> {r}\n  func.return %y : {r}\n}}\n")
    assert opt(str(src), "-p", "fix-mesh-sizes{ranks=3}").returncode == 0
    r = opt(str(src), "-p", "fix-mesh-sizes{ranks=4}")
    assert r.returncode == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{src}:3:") and "dist.reshape" in r.stderr.splitlines()[1]
    assert "is not block 0 of the result's dim 0 (elements 0..6): the ranks slice the two dims differently, gather first (in the program that pass 'fix-mesh-sizes' produced)" in r.stderr


def test_help_shows_distirs_options_each_with_help_within_100_columns():
    r = opt("--help")
    assert r.returncode == 0
    assert max(len(line) for line in r.stdout.splitlines()) <= 100
    for unrelated in ("arm-asm", "riscv-asm", "wat", "--shrink", "--target", "--frontend"):
        assert unrelated not in r.stdout, unrelated  # xDSL's, for other programs: accepted, not shown
    options = r.stdout.split("options:")[1].split("distir passes")[0]
    flags = re.findall(r"^  (-[^ ,]+(?:, --\S+)?)(.*)$", options, re.M)
    assert flags and all(help_.strip() or options.split(flag)[1].split("\n")[1].startswith(" " * 10) for flag, help_ in flags), flags
    assert "--disable-verify      skip verifying" in r.stdout and "-v, --version" in r.stdout
    assert "partition" in r.stdout and "insert the collectives." in r.stdout and "()" not in r.stdout.split("distir passes")[1]


TOOLS = sorted(p.name for p in Path(sys.executable).parent.glob("distir-*"))


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_takes_dash_v(tool):
    r = subprocess.run([str(Path(sys.executable).parent / tool), "-v"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(f"{tool} 0.")


@pytest.mark.parametrize("module", ["distir.tools.opt", "xdsl.tools.xdsl_opt"])
def test_a_program_without_maps_loads_no_numpy_and_only_the_dialects_it_uses(module):
    r, modules = imported_by(module, PRIMS)
    assert "coll.all_reduce sum" in r.stdout
    assert not packages(modules) & HEAVY, sorted(packages(modules) & HEAVY)
    # xDSL's arith, math, memref and scf load when a program uses them, not before
    assert not {"xdsl.dialects.arith", "xdsl.dialects.math", "xdsl.dialects.memref", "xdsl.dialects.scf"} & set(modules)
    # distir IR needs neither the partitioner of imported programs nor the back end
    assert not [m for m in modules if m.startswith(("distir.frontends.partition", "distir.lowering", "distir.runtime", "distir.tuning"))]


def test_a_pipeline_on_a_program_with_maps_loads_arith_and_math_but_no_numpy():
    r, modules = imported_by("distir.tools.opt", str(ROOT / "examples" / "adam.mlir"), "-p", "split-allreduce,reorder-allgather,fuse-maps,fuse-allreduce")
    assert "coll.fused_all_reduce" in r.stdout and "math.sqrt" in r.stdout
    assert {"xdsl.dialects.arith", "xdsl.dialects.math"} <= set(modules)
    assert not packages(modules) & HEAVY, sorted(packages(modules) & HEAVY)
