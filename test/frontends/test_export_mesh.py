"""The MLIR mesh export is MLIR 19: every example, schedule and case of
``export-cases.mlir`` (meshes fixed for 1 rank and for 4, or 8 or 2 where 4 does not
fit) is exported and must parse and verify in Debian's ``mlir-opt-19`` (package
``mlir-19-tools``), which the fixture installs with apt-get when it is missing. The tests
skip only when apt cannot be reached."""

import os
import shutil
import subprocess

import pytest
from export_programs import PROGRAMS, fits

from distir.dialects.context import make_context, parse_module
from distir.frontends.export import export_module
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass

UNREACHABLE = ("Could not resolve", "Temporary failure", "Failed to fetch", "Unable to connect", "Network is unreachable", "Connection timed out")


def _apt(*args: str) -> subprocess.CompletedProcess:
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    return subprocess.run([*prefix, "apt-get", *args], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def mlir_opt() -> str:
    found = shutil.which("mlir-opt-19")
    if found:
        return found
    if shutil.which("apt-get") is None or (os.geteuid() != 0 and shutil.which("sudo") is None):
        pytest.skip("mlir-opt-19 is missing and apt-get cannot be run here to install mlir-19-tools")
    proc = _apt("install", "-y", "-q", "mlir-19-tools")
    if proc.returncode != 0:
        _apt("update", "-q")
        proc = _apt("install", "-y", "-q", "mlir-19-tools")
    found = shutil.which("mlir-opt-19")
    if found:
        return found
    out = proc.stdout + proc.stderr
    if any(s in out for s in UNREACHABLE):
        pytest.skip(f"apt cannot reach its repositories to install mlir-19-tools: {out[-300:]}")
    pytest.fail(f"apt-get install mlir-19-tools failed:\n{out[-2000:]}")


def exported(name: str, ranks: int) -> str:
    module = parse_module(PROGRAMS[name])
    FixMeshSizesPass(ranks=ranks).apply(make_context(), module)
    return export_module(module, "mesh")


def rank_counts(name: str) -> list[int]:
    counts = [r for r in (1,) if fits(PROGRAMS[name], r)]
    counts += [next(r for r in (4, 8, 2) if fits(PROGRAMS[name], r))]
    return counts


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_mlir_opt_19_verifies_the_export(mlir_opt, name):
    for ranks in rank_counts(name):
        text = exported(name, ranks)
        proc = subprocess.run([mlir_opt, "--verify-each", "-o", os.devnull], input=text, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{name} at {ranks} ranks:\n{proc.stderr}\n{text}"


def test_the_export_declares_each_root_mesh_once():
    text = exported("hierarchical_allreduce", 8)
    assert text.count("mesh.mesh @hw(shape = 2x4)") == 1
    assert "@world" not in text  # a view is its root mesh: collectives name @hw's axes
    assert "mesh.all_reduce %x on @hw mesh_axes = [0, 1]" in text
