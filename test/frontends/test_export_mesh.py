"""The MLIR mesh export is MLIR 19 and means what the program means: every example,
every schedule of ``examples/schedules`` and every case of ``export-cases.mlir`` is
exported with its meshes fixed for 1, 2, 4 and 8 ranks, and 30 random programs
(``support/programs.py``) at their own rank counts; Debian's ``mlir-opt-19``
(package ``mlir-19-tools``, installed with apt-get by the fixture when missing) must parse
and verify it (``--verify-each``), and the module it prints back in generic form, run on
as many simulated devices (``support/mesh_sim.py``: MLIR 19 has no lowering of the mesh
collectives), must give the interpreter's outputs on the same inputs. The tests skip only
when apt cannot be reached."""

import functools
import os
import shutil
import subprocess

import pytest
from export_programs import runs, text_of
from support.mesh_sim import run_mesh_export

from distir.dialects.context import make_context, parse_module
from distir.frontends.export import export_module
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
from distir.runtime import npz
from distir.runtime.equivalence import compare_outputs, program_precision
from distir.runtime.interpreter import run_function

UNREACHABLE = ("Could not resolve", "Temporary failure", "Failed to fetch", "Unable to connect", "Network is unreachable", "Connection timed out")
RUNS = runs()


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


@functools.lru_cache(maxsize=None)
def exported(name: str, ranks: int) -> tuple:
    """(the module with its meshes fixed, its mesh export)."""
    module = parse_module(text_of(name))
    FixMeshSizesPass(ranks=ranks).apply(make_context(), module)
    return module, export_module(module, "mesh")


@functools.lru_cache(maxsize=None)
def verified(mlir_opt: str, name: str, ranks: int) -> str:
    """mlir-opt-19's generic form of the export, after it parsed and verified it."""
    text = exported(name, ranks)[1]
    proc = subprocess.run([mlir_opt, "--verify-each", "--mlir-print-op-generic"], input=text, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"mlir-opt-19 rejects the export of {name} at {ranks} ranks:\n{proc.stderr}\n{text}"
    return proc.stdout


@pytest.mark.parametrize("name,func,ranks", RUNS, ids=[f"{n}:{f}:{r}" for n, f, r in RUNS])
def test_mlir_opt_19_verifies_the_export_and_it_computes_the_same(mlir_opt, name, func, ranks):
    generic = verified(mlir_opt, name, ranks)
    module = exported(name, ranks)[0]
    ref = run_function(module, func, None, ranks, seed=5)
    got = run_mesh_export(module, generic, func, ref.inputs, ranks)
    c = compare_outputs(ref.outputs, got, "interpreter", "mesh export", program_precision(npz.select_function(module, func)))
    assert c, c.message


def test_the_export_declares_each_root_mesh_once():
    text = exported("hierarchical_allreduce", 8)[1]
    assert text.count("mesh.mesh @hw(shape = 2x4)") == 1
    assert "@world" not in text  # a view is its root mesh: collectives name @hw's axes
    assert "mesh.all_reduce %x on @hw mesh_axes = [0, 1]" in text
