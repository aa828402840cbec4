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
from export_programs import refusal, runs, text_of
from support.mesh_sim import run_mesh_export
from xdsl.utils.exceptions import DiagnosticException

from distir.dialects.context import make_context, parse_module
from distir.frontends.export import export_module
from distir.frontends.export_mesh import MeshExporter
from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
from distir.runtime import npz
from distir.runtime.equivalence import compare_outputs, program_precision
from distir.runtime.interpreter import run_function

UNREACHABLE = ("Could not resolve", "Temporary failure", "Failed to fetch", "Unable to connect", "Network is unreachable", "Connection timed out")
"""What apt-get prints when it cannot reach its repositories."""
RUNS = [(n, f, r) for n, f, r in runs() if r <= 8]
"""Every run but the 16-device JAX sample: support/mesh_sim.py takes minutes on it (the
sdy tests run it with XLA, the round trip on the interpreter)."""


def _apt(*args: str) -> subprocess.CompletedProcess:
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run([*prefix, "apt-get", *args], capture_output=True, text=True, timeout=900, env=env)


def install_mlir_opt() -> str:
    """The path of ``mlir-opt-19``, installed with ``apt-get install mlir-19-tools`` (after
    an ``apt-get update`` when the package lists lack it) when it is missing. Skips only
    when apt cannot be reached: no apt-get on the machine, no right to run it, or its
    repositories unreachable; any other failure to install fails."""
    found = shutil.which("mlir-opt-19")
    if found:
        return found
    if shutil.which("apt-get") is None or (os.geteuid() != 0 and shutil.which("sudo") is None):
        pytest.skip("mlir-opt-19 is missing and apt-get cannot be run here to install mlir-19-tools")
    procs = [_apt("install", "-y", "-q", "mlir-19-tools")]
    if procs[-1].returncode != 0:
        procs += [_apt("update", "-q"), _apt("install", "-y", "-q", "mlir-19-tools")]
    found = shutil.which("mlir-opt-19")
    if found:
        return found
    out = "".join(p.stdout + p.stderr for p in procs)
    if any(s in out for s in UNREACHABLE):
        pytest.skip(f"apt cannot reach its repositories to install mlir-19-tools: {out[-300:]}")
    pytest.fail(f"apt-get install mlir-19-tools did not install mlir-opt-19:\n{out[-2000:]}")


@pytest.fixture(scope="session")
def mlir_opt() -> str:
    return install_mlir_opt()


APT_STUB = """#!/bin/sh
# apt-get on a clean machine: empty package lists until an update fetches them
echo "$*" >> "$STUB/log"
case "$1" in
update)
    if [ "$MODE" = offline ]; then
        echo "Err:1 http://deb.debian.org/debian bookworm InRelease"
        echo "  Temporary failure resolving 'deb.debian.org'"
        echo "W: Some index files failed to download. They have been ignored, or old ones used instead."
    else
        : > "$STUB/lists"
    fi
    exit 0 ;;
install)
    if [ ! -e "$STUB/lists" ] || [ "$MODE" = no-package ]; then
        echo "E: Unable to locate package mlir-19-tools" >&2
        exit 100
    fi
    printf '#!/bin/sh\\n' > "$STUB/mlir-opt-19"
    /bin/chmod +x "$STUB/mlir-opt-19" ;;
esac
"""


@pytest.fixture
def clean_machine(tmp_path, monkeypatch):
    """A PATH with no mlir-opt-19, whose apt-get (and sudo) are ``APT_STUB``."""
    for name, text in [("apt-get", APT_STUB), ("sudo", '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')]:
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("STUB", str(tmp_path))
    return tmp_path


def test_mlir_opt_19_is_installed_with_apt_when_missing(clean_machine, monkeypatch):
    monkeypatch.setenv("MODE", "online")
    assert install_mlir_opt() == str(clean_machine / "mlir-opt-19")
    log = (clean_machine / "log").read_text().splitlines()
    assert log == ["install -y -q mlir-19-tools", "update -q", "install -y -q mlir-19-tools"]


def test_mlir_opt_19_tests_skip_only_when_apt_is_unreachable(clean_machine, monkeypatch):
    monkeypatch.setenv("MODE", "offline")
    with pytest.raises(pytest.skip.Exception, match="apt cannot reach its repositories"):
        install_mlir_opt()
    monkeypatch.setenv("MODE", "no-package")
    with pytest.raises(pytest.fail.Exception, match="Unable to locate package mlir-19-tools"):
        install_mlir_opt()


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
    refused = refusal(name, ranks, MeshExporter)
    if refused is not None:  # blocks of different sizes: no SPMD export, a diagnostic naming the dim
        with pytest.raises(DiagnosticException) as e:
            exported(name, ranks)
        assert str(e.value) == refused
        return
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
