"""distir-run under mpiexec when the ranks are not all well: one bad rank stops every
rank with one diagnostic naming it, ranks that would run different things are
diagnosed, and --timeout turns a stall into a report of where each rank waits.

Each case starts ``mpiexec`` (MPMD: ``-n 1 A : -n 1 B`` gives each rank its own command
line) with a hard timeout, so that a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.mpi

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
MPIEXEC = str(BIN / "mpiexec")
RUN = str(BIN / "distir-run")
HARD_TIMEOUT = 120

PROGRAM = """\
dist.mesh @world shape = [?]
func.func @sum(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}
func.func @max(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %y = coll.all_reduce max %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %y : !dist.tensor<64xf32, @world, [replicated]>
}
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "prog.mlir").write_text(PROGRAM)
    (tmp_path / "bad.mlir").write_text("dist.mesh @world shape = [?]\nfunc.func @sum(%x: f32 {\n")
    for ranks in (2, 4):
        np.savez(tmp_path / f"good{ranks}.npz", x=np.ones((ranks, 64), np.float32))
        np.savez(tmp_path / f"other{ranks}.npz", x=np.full((ranks, 64), 2, np.float32))
    np.savez(tmp_path / "shape2.npz", x=np.ones((2, 32), np.float32))
    (tmp_path / "corrupt.npz").write_bytes(b"PK not a zip archive")
    return tmp_path


def mpiexec(*per_rank: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run one distir-run per rank (each list: that rank's arguments)."""
    cmd = [MPIEXEC]
    for i, args in enumerate(per_rank):
        if i:
            cmd.append(":")
        cmd += ["-n", "1", RUN, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=HARD_TIMEOUT)


def same(n: int, *args: str) -> list[list[str]]:
    return [list(args) for _ in range(n)]


OK = ["prog.mlir", "--backend", "mpi", "--func", "sum"]


def test_one_bad_rank_of_two_stops_both_with_one_message(files):
    good = [*OK, "--inputs", "good2.npz"]
    p = mpiexec(good, [*OK, "--inputs", "missing.npz"], cwd=files)
    assert p.returncode == 1, p.stderr
    assert p.stderr.count("rejected the run") == 1, p.stderr
    assert "distir-run: rank 1 rejected the run: cannot read missing.npz: no such file" in p.stderr
    assert "every rank stops (1 of 2 were ready)" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_one_bad_rank_of_four(files):
    good = [*OK, "--inputs", "good4.npz"]
    p = mpiexec(good, good, [*OK, "--inputs", "corrupt.npz"], good, cwd=files)
    assert p.returncode == 1, p.stderr
    assert "rank 2 rejected the run: cannot read corrupt.npz: not an npz (zip) archive" in p.stderr
    assert "every rank stops (3 of 4 were ready)" in p.stderr


def test_unparsable_program_on_one_rank_is_located(files):
    p = mpiexec(OK, ["bad.mlir", "--backend", "mpi", "--func", "sum"], cwd=files)
    assert p.returncode == 1, p.stderr
    assert "rank 1 rejected the run:\nbad.mlir:3:1" in p.stderr


def test_an_error_every_rank_shares_is_printed_once(files):
    p = mpiexec(*same(2, "bad.mlir", "--backend", "mpi"), cwd=files)
    assert p.returncode == 1
    assert p.stderr.count("bad.mlir:3:1") == 1, p.stderr
    assert "rank" not in p.stderr


def test_mismatched_functions_are_diagnosed(files):
    p = mpiexec(OK, ["prog.mlir", "--backend", "mpi", "--func", "max"], cwd=files)
    assert p.returncode == 1, p.stderr
    assert "the ranks disagree on what to run" in p.stderr
    assert "function: rank 0 has @sum, rank 1 has @max" in p.stderr


def test_ranks_reading_different_inputs_are_diagnosed_unless_trusted(files):
    p = mpiexec([*OK, "--inputs", "good2.npz"], [*OK, "--inputs", "other2.npz"], cwd=files)
    assert p.returncode == 1, p.stderr
    assert "input x: rank 0 has float32[2x64] checksum" in p.stderr
    assert "--trust-inputs" in p.stderr
    trusted = [*OK, "--trust-inputs"]
    p = mpiexec([*trusted, "--inputs", "good2.npz"], [*trusted, "--inputs", "other2.npz"], cwd=files)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("@sum on 2 rank(s), backend mpi") == 1


LATE_START = """\
import sys, time
from mpi4py import MPI  # MPI_Init: every rank meets here
time.sleep(3)
from distir.tools.run import main
sys.exit(main(sys.argv[1:]))
"""


def test_timeout_reports_where_each_rank_waits(files):
    """Rank 1 starts its run 3 s after rank 0 (as on a loaded machine, where importing
    the compiler takes seconds): rank 0's clock runs out first, it tells rank 1, and both
    report; the waits are messages between the ranks, not a grace period that a slow
    start outlasts."""
    mlp = str(ROOT / "examples" / "megatron_mlp.mlir")
    args = [mlp, "--backend", "mpi", "--timeout", "0.5"]
    late = [sys.executable, "-c", LATE_START, *args]
    cmd = [MPIEXEC, "-n", "1", RUN, *args, ":", "-n", "1", *late]
    p = subprocess.run(cmd, cwd=files, capture_output=True, text=True, timeout=HARD_TIMEOUT)
    assert p.returncode == 1, p.stderr
    for r in (0, 1):
        assert p.stderr.count(f"distir-run: rank {r}: no result within 0.5 s (--timeout): waiting in ") == 1, p.stderr
    assert "Traceback" not in p.stderr


REPLICATED = """\
dist.mesh @world shape = [3]
func.func @twice(%a: !dist.tensor<4xf32, @world, [replicated]>) -> !dist.tensor<4xf32, @world, [replicated]> {
  %b = dist.map(%a) : (!dist.tensor<4xf32, @world, [replicated]>) -> !dist.tensor<4xf32, @world, [replicated]> {
  ^bb0(%x: f32):
    %y = arith.addf %x, %x : f32
    dist.yield %y : f32
  }
  func.return %b : !dist.tensor<4xf32, @world, [replicated]>
}
"""


def test_replicas_that_disagree_under_trust_inputs_end_the_job(files):
    """Rank 1 reads other values of a replicated input, and --trust-inputs skips the
    check: the replicated result differs between the ranks. Every rank learns rank 0's
    verdict (it was rank 0's alone, and the others waited for it forever)."""
    (files / "rep.mlir").write_text(REPLICATED)
    np.savez(files / "ones.npz", a=np.ones(4, np.float32))
    np.savez(files / "twos.npz", a=np.full(4, 2, np.float32))
    args = ["rep.mlir", "--backend", "mpi", "--trust-inputs", "--inputs"]
    p = mpiexec([*args, "ones.npz"], [*args, "twos.npz"], [*args, "ones.npz"], cwd=files)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0, p.stderr  # one message, from rank 0
    assert p.stderr.startswith("distir-run: result0: replicas disagree: ranks 0 and 1 hold different values at [0]"), p.stderr
    assert "--trust-inputs skips the check of the inputs' checksums" in p.stderr


# distir-run's own mpiexec (``--backend mpi --ranks N`` from one process)


def started(tmp: Path, module: str = "distir.runtime.mpi_worker", timeout: float = 120.0) -> list:
    """The 2 rank processes (``python -m module``) of the job a tool started with
    TMPDIR=tmp (their command lines name the job's folder in it), once both run."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = [q for q in psutil.process_iter(["cmdline"])
                 if (q.info["cmdline"] or [])[1:3] == ["-m", module] and str(tmp) in " ".join(q.info["cmdline"])]
        if len(ranks) == 2:
            return ranks
        time.sleep(0.05)
    raise AssertionError("the job's ranks did not start")


def left_behind(tmp: Path) -> list:
    import psutil

    procs = [q.info["cmdline"] for q in psutil.process_iter(["cmdline"]) if str(tmp) in " ".join(q.info["cmdline"] or [])]
    return procs + sorted(p.name for p in tmp.iterdir())


@pytest.mark.parametrize("what", ["run", "tune"])
def test_sigterm_stops_mpiexec_and_its_ranks(files, what):
    """``timeout``, SLURM and Kubernetes send SIGTERM: distir-run / distir-tune pass it on
    to their mpiexec, which ends its ranks, remove the job's folder and exit 143."""
    import os
    import signal

    tmp = files / "tmp"
    tmp.mkdir()
    if what == "run":
        cmd = [RUN, str(ROOT / "examples" / "transformer_decode.mlir"), "--backend", "mpi", "--ranks", "2"]
    else:
        cmd = [str(BIN / "distir-tune"), str(ROOT / "examples" / "adam.mlir"), "--backend", "mpi", "--ranks", "2"]
    proc = subprocess.Popen(cmd, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started(tmp, "distir.runtime.mpi_worker" if what == "run" else "distir.tuning.timing")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    tool = "distir-run" if what == "run" else "distir-tune"
    assert err.strip().endswith(f"{tool}: stopped by SIGTERM: mpiexec and its ranks were stopped, the job's files removed"), err
    assert not left_behind(tmp)


def test_a_rank_killed_is_a_fault_of_the_job(files):
    """A rank of distir-run's own mpiexec killed (SIGKILL, the OOM killer): exit 1 and a
    message that says so, not "internal error ... a bug in distir"."""
    import os
    import signal
    import time

    tmp = files / "tmp"
    tmp.mkdir()
    cmd = [RUN, str(ROOT / "examples" / "transformer_decode.mlir"), "--backend", "mpi", "--ranks", "2"]
    proc = subprocess.Popen(cmd, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ranks = started(tmp)
        deadline = time.monotonic() + 120
        while not (segments := mpich_segments(ranks, removed=True)) and time.monotonic() < deadline:
            time.sleep(0.02)  # killed once the ranks have started MPI (and removed its segment's name)
        ranks[1].send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert err.strip() == "distir-run: a rank of 'mpiexec -n 2' died (Killed (signal 9)); mpiexec ended the other ranks", err
    assert not left_behind(tmp)
    assert segments and not [s for s in segments if os.path.exists(s)]  # MPICH's segment: removed once mapped


def mpich_segments(ranks, removed: bool = False) -> set[str]:
    """The /dev/shm files of MPICH the processes map (only those whose names were
    removed, with ``removed``)."""
    names = set()
    for q in ranks:
        try:
            with open(f"/proc/{q.pid}/maps") as f:
                maps = [line.split(None, 5)[5].strip() for line in f if "/dev/shm/mpich_shm_" in line]
        except OSError:
            continue
        names |= {m.removesuffix(" (deleted)") for m in maps if m.endswith(" (deleted)") or not removed}
    return names


# The verdict itself, without processes: what every rank concludes from what each sent.


def verdict(rank, *info):
    from distir.runtime.mpi import _verdict

    return _verdict(rank, list(info))


def test_verdict_names_each_failing_rank_and_reports_on_rank_0_only():
    ok = (0, "", {"function": "@f"})
    a = verdict(0, ok, (1, "distir-run: cannot read x.npz: no such file", {}), ok, (1, "distir-run: cannot read y.npz: no such file", {}))
    assert (a.ok, a.code, a.report, a.failed_ranks) == (False, 1, True, [1, 3])
    assert a.message.splitlines() == [
        "distir-run: rank 1 rejected the run: cannot read x.npz: no such file",
        "distir-run: rank 3 rejected the run: cannot read y.npz: no such file",
        "distir-run: every rank stops (2 of 4 were ready)",
    ]
    assert not verdict(2, ok, (1, "distir-run: boom", {}), ok).report


def test_verdict_on_an_error_every_rank_shares_is_that_error():
    same = (1, "prog.mlir:3:1\n...\nexpected ')'", {})
    a = verdict(0, same, same)
    assert a.shared and a.message == same[1] and a.code == 1


def test_verdict_on_ranks_that_disagree_lists_every_difference():
    a = verdict(0, (0, "", {"function": "@sum", "seed": "0"}), (0, "", {"function": "@max", "seed": "0"}), (0, "", {"function": "@max", "seed": "1"}))
    assert a.code == 1 and a.report
    assert "  function: rank 0 has @sum, rank 1 has @max" in a.message
    assert "  function: rank 0 has @sum, rank 2 has @max" in a.message
    assert "  seed: rank 0 has 0, rank 2 has 1" in a.message
