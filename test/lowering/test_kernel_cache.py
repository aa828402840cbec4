"""The kernel cache (``numba_codegen.cache_dir``) never fails a run: a folder that cannot be
written (a regular file where it should be, a read-only file system) and damaged cached
kernels (an empty index, a truncated data file) are one-line warnings, the kernels are
compiled again, and a damaged cache is repaired by the run that finds it. Each run is a
fresh ``distir-run`` process (kernels compiled in a process are kept in memory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = str(Path(sys.executable).parent / "distir-run")
PROGRAM = """\
dist.mesh @world shape = [?]
func.func @axpy(%x: !dist.tensor<64xf32, @world, [sliced<0>]>, %a: f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  %y = dist.map(%x, %a) : (!dist.tensor<64xf32, @world, [sliced<0>]>, f32) -> !dist.tensor<64xf32, @world, [sliced<0>]> {
  ^bb0(%v: f32, %s: f32):
    %w = arith.mulf %v, %s : f32
    dist.yield %w : f32
  }
  func.return %y : !dist.tensor<64xf32, @world, [sliced<0>]>
}
"""


def run(tmp_path: Path, cache: Path) -> subprocess.CompletedProcess:
    prog = tmp_path / "axpy.mlir"
    prog.write_text(PROGRAM)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([RUN, str(prog), "--ranks", "2", "--backend", "local"], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def cached(tmp_path):
    """A cache folder filled by one run."""
    cache = tmp_path / "cache"
    p = run(tmp_path, cache)
    assert p.returncode == 0 and not p.stderr, p.stderr
    kernels = cache / "distir" / "kernels"
    assert list((kernels / "__pycache__").glob("*.nbi")) and list((kernels / "__pycache__").glob("*.nbc"))
    return cache


def damage(kernels: Path, how: str) -> None:
    for f in (kernels / "__pycache__").glob("*.nbi" if how == "empty index" else "*.nbc"):
        data = f.read_bytes()
        f.write_bytes(b"" if how == "empty index" else data[: len(data) // 3])


@pytest.mark.parametrize("how, error", [("empty index", "EOFError: Ran out of input"), ("truncated data", "UnpicklingError: pickle data was truncated")])
def test_a_damaged_cached_kernel_is_compiled_again(tmp_path, cached, how, error):
    kernels = cached / "distir" / "kernels"
    damage(kernels, how)
    p = run(tmp_path, cached)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == f"distir-run: warning: a cached kernel in {kernels} could not be read ({error}): it is compiled and cached again"
    again = run(tmp_path, cached)  # the run repaired the cache
    assert again.returncode == 0 and not again.stderr, again.stderr


def test_a_file_where_the_cache_folder_should_be(tmp_path):
    cache = tmp_path / "cache"
    kernels = cache / "distir" / "kernels"
    kernels.parent.mkdir(parents=True)
    kernels.write_text("not a folder")
    p = run(tmp_path, cache)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == f"distir-run: warning: the kernel cache {kernels} cannot be written (it is a file, not a folder): kernels are compiled in every run"


def test_a_cache_folder_that_cannot_be_made(tmp_path):
    """(Read-only folders cannot be made here: the tests may run as root. A cache under
    /proc cannot be made by anyone.)"""
    p = run(tmp_path, Path("/proc/self/no-cache"))
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == (
        "distir-run: warning: the kernel cache /proc/self/no-cache/distir/kernels cannot be written (No such file or directory): "
        "kernels are compiled in every run"
    )


COMPILE_AT_ONCE = """\
import sys, time
from pathlib import Path
import numpy as np
from distir.lowering.numba_codegen import KernelSource, compile_cpu

here, me, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
src = "def kernel(a):\\n    s = 0.0\\n    for i in range(a.shape[0]):\\n        s += a[i] * 3.5\\n    return s\\n"
fn = compile_cpu(KernelSource("kernel", src, "cpu", ["a"], [None]))
(here / f"ready.{me}").touch()
while len(list(here.glob("ready.*"))) < n:  # every process calls the kernel at once
    time.sleep(0.01)
assert fn(np.ones(8)) == 28.0
print(sum(fn.stats.cache_misses.values()), sum(fn.stats.cache_hits.values()))
"""


def test_processes_needing_one_kernel_at_once_compile_it_once(tmp_path):
    """The ranks of one job start together and need the same kernels: the first to ask
    compiles each, the others wait and load it from the cache (not one compilation per
    rank)."""
    n = 3
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", COMPILE_AT_ONCE, str(tmp_path), str(i), str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(n)]
    counts = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        counts.append(tuple(int(w) for w in out.split()))
    assert sorted(counts) == [(0, 1)] * (n - 1) + [(1, 0)], counts  # (compiled, loaded) per process


def test_a_parallel_kernel_with_nothing_to_parallelise_warns_nothing(tmp_path, monkeypatch):
    """Numba's note that ``parallel=True`` found nothing to parallelise (a small kernel)
    is for distir's developers: a user sees no warning (Numba prints it with terminal
    colour codes before the words)."""
    import warnings

    import numpy as np

    from distir.lowering.numba_codegen import KernelSource, compile_cpu

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # compiled here, not loaded
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn = compile_cpu(KernelSource("kernel", f"def kernel(a):\n    a[0] = {tmp_path.stat().st_ino}.0\n", "cpu", ["a"], [None]), parallel=True)
        fn(np.zeros(3))
    assert not [str(w.message) for w in seen], [str(w.message) for w in seen]
