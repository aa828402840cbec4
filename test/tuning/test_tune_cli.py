"""``distir-tune``: its output and JSON, and located diagnostics with exit 1 for bad
options and files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import tools

from distir.tools.tune import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TUNE = Path(sys.executable).parent / "distir-tune"

ALL_REDUCE = """dist.mesh @world shape = [?]
func.func @f(%x: !dist.tensor<256xf32, @world, [local]>) -> !dist.tensor<256xf32, @world, [replicated]> {
  %y = coll.all_reduce sum %x : !dist.tensor<256xf32, @world, [local]> -> !dist.tensor<256xf32, @world, [replicated]>
  func.return %y : !dist.tensor<256xf32, @world, [replicated]>
}
"""


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([tools.path("distir-tune"), *args], capture_output=True, text=True, input=stdin, timeout=600, cwd=ROOT)


def test_model_prediction_table_json_plot_and_best(tmp_path):
    out_json, out_png, best = tmp_path / "r.json", tmp_path / "s.png", tmp_path / "best.mlir"
    p = run(str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "32", "--sizes", "2^10,2^28", "--json", str(out_json), "--plot", str(out_png))
    assert p.returncode == 0, p.stderr
    assert "size 2^10 (1024):" in p.stdout and "size 2^28 (268435456):" in p.stdout
    assert "AR-SGD" in p.stdout and "fuse(RS-SGD-AG)" in p.stdout and "speedup" in p.stdout
    data = json.loads(out_json.read_text())
    assert set(data) == {"sizes", "schedules", "best"}
    assert data["sizes"] == [1024, 1 << 28]
    assert all(set(s) == {"name", "pipeline", "times", "measured"} for s in data["schedules"])
    assert all(s["measured"] is False for s in data["schedules"])
    assert data["best"]["1024"].startswith("AR-SGD")
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    # each file written is named on stderr
    assert f"distir-tune: wrote the results as JSON to {out_json}" in p.stderr
    assert f"distir-tune: wrote the plot to {out_png}" in p.stderr
    p = run(str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "32", "--sizes", "2^28", "-o", str(best))
    assert p.returncode == 0, p.stderr
    assert f"to {best}" in p.stderr and "distir-tune: wrote the best schedule (" in p.stderr
    text = best.read_text()
    assert "coll.fused_all_reduce" in text and "268435456xf32" in text


def test_backend_local_times_every_schedule(tmp_path):
    out = tmp_path / "r.json"
    p = run("-", "--ranks", "2", "--json", str(out), stdin=ALL_REDUCE)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["sizes"] == [256]
    timed = [s for s in data["schedules"] if s["times"]["256"] is not None]
    assert timed and all(s["measured"] for s in data["schedules"])
    assert data["best"]["256"] in {s["name"] for s in timed}
    assert "timed on the local backend" in p.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--sizes", "2^10..x"], "distir-tune: --sizes '2^10..x'"),
        (["--model", "nope"], "unknown topology 'nope'"),
        (["--model", "dgx2", "--nodes", "0"], "number of nodes must be a positive integer"),
        (["--dim", "7"], "--dim 7: no tensor of the program has a dimension of size 7"),
        (["--sizes", "2^10,2^12", "-o", "x.mlir"], "-o writes the best schedule for one size"),
        (["--nodes", "2"], "--nodes goes with --model"),
        (["--backend", "nccl"], "the tuner times on local or mpi"),
        (["--model", "dgx2", "--backend", "local"], "not allowed with argument"),
        (["--model", "dgx2", "--nodes", "1", "--ranks", "64"], "more than the 16 devices"),
        (["--func", "other"], "--func other: no function @other"),
    ],
)
def test_bad_options_are_diagnostics(args, message, capsys):
    code = main([str(EXAMPLES / "sgd.mlir"), *(["--ranks", "2"] if "--ranks" not in args else []), *args])
    err = capsys.readouterr().err
    assert code == 1
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--backend", "mpi"], ["--calibrate"]])
def test_mpi_timing_refuses_to_oversubscribe_this_machine(argv, monkeypatch, capsys):
    """65 MPI processes on a few cores take minutes to start and measure the waiting: with
    no host list, mpi timing (and the calibration, which fits mpi too) starts at most
    4 ranks per core; a Hydra host list lifts the bound."""
    import os

    from distir.tuning import timing

    monkeypatch.delenv("HYDRA_HOST_FILE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert main([str(EXAMPLES / "sgd.mlir"), "--ranks", "9", *argv]) == 1
    err = capsys.readouterr().err
    assert "--ranks 9 on --backend mpi would start 9 processes on the 2 cores" in err and "--model TOPOLOGY" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    timing.check_mpi_ranks(8)
    monkeypatch.setenv("HYDRA_HOST_FILE", "hosts")
    timing.check_mpi_ranks(65)


def test_bad_files_are_located_diagnostics(tmp_path, capsys):
    assert main([str(tmp_path / "missing.mlir"), "--ranks", "2"]) == 1
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.mlir"
    bad.write_text(ALL_REDUCE.replace("[local]> ->", "[replicated]> ->", 1).replace("(%x: !dist.tensor<256xf32, @world, [local]>", "(%x: !dist.tensor<256xf32, @world, [replicated]>"))
    assert main([str(bad), "--ranks", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "coll.all_reduce" in err
    topo = tmp_path / "t.toml"
    topo.write_text('name = "t"\n[[levels]]\nname = "gpu"\ncardinality = "four"\nbandwidth_GBps = 1.0\nlatency_us = 1.0\n')
    assert main([str(EXAMPLES / "sgd.mlir"), "--ranks", "2", "--model", str(topo)]) == 1
    err = capsys.readouterr().err
    assert f"{topo}:" in err and "cardinality" in err
    assert main(["--ranks", "2"]) == 1
    assert "give a program FILE" in capsys.readouterr().err


def test_local_topology_needs_calibration(tmp_path):
    import os

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    p = subprocess.run([str(TUNE), str(EXAMPLES / "sgd.mlir"), "--ranks", "2", "--model", "local"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1
    assert "is not calibrated on this machine: run 'distir-tune --calibrate" in p.stderr


# --------------------------------------------------------------------------------------
# Issue 20 (hardening) and issue 23 (scale): each reproduces what went wrong
# --------------------------------------------------------------------------------------


def test_local_backend_times_a_size_the_ranks_do_not_divide(tmp_path):
    # 3 elements over 2 ranks: blocks of 2 and 1; every schedule runs there (padded
    # buffers), and the table names the collectives that move the padding
    out = tmp_path / "r.json"
    p = run("-", "--ranks", "2", "--sizes", "3,2^8", "--rounds", "1", "--json", str(out), stdin=ALL_REDUCE)
    assert p.returncode == 0, p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    data = json.loads(out.read_text())
    assert data["best"]["256"] is not None and data["best"]["3"] is not None
    assert all(s["times"]["3"] is not None for s in data["schedules"])
    assert "do not run at this size" not in p.stdout
    assert "padding moved per rank" in p.stdout and "RS %x 4 B" in p.stdout


@pytest.mark.parametrize("ranks", ["65", "100000"])
def test_local_backend_more_ranks_than_it_runs_is_rejected(ranks, capsys):
    assert main([str(EXAMPLES / "sgd.mlir"), "--ranks", ranks]) == 1
    err = capsys.readouterr().err
    assert "the local backend runs at most 64 ranks" in err and "internal error" not in err


def test_model_predicts_a_size_the_ranks_do_not_divide(tmp_path):
    out = tmp_path / "r.json"
    assert main([str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "16", "--sizes", "3,2^16", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["best"]["3"] is not None and data["best"]["65536"] is not None


@pytest.mark.parametrize(
    "args,message",
    [
        (["--json", "{missing}/r.json"], "--json {missing}/r.json: no such directory"),
        (["--plot", "{missing}/p.png"], "--plot {missing}/p.png: no such directory"),
        (["--plot", "{tmp}/p.xyz"], "matplotlib cannot write '.xyz' files"),
        (["-o", "{tmp}"], "is a directory"),
    ],
)
def test_output_paths_are_checked_before_the_run(args, message, tmp_path, capsys):
    fill = {"missing": str(tmp_path / "missing"), "tmp": str(tmp_path)}
    args = [a.format(**fill) for a in args]
    code = main([str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "16", *args])
    out = capsys.readouterr()
    assert code == 1 and message.format(**fill) in out.err
    assert "schedules on" not in out.out  # rejected before any tuning


def test_absurd_topology_numbers_are_an_error_and_the_json_stays_strict(tmp_path, capsys):
    topo = tmp_path / "t.toml"
    topo.write_text(
        'name = "slow"\n[[levels]]\nname = "gpu"\ncardinality = 4\nbandwidth_GBps = 100.0\nlatency_us = 1.0\n'
        "[device]\nmemory_bandwidth_GBps = 1e-300\npeak_tflops = { f32 = 10.0, f16 = 20.0, bf16 = 20.0 }\n"
    )
    out = tmp_path / "r.json"
    code = main([str(EXAMPLES / "sgd.mlir"), "--model", str(topo), "--ranks", "4", "--sizes", "2^10,2^30", "--json", str(out)])
    err = capsys.readouterr().err
    # rejected at the field, before any prediction could overflow
    assert code == 1 and "t.toml:8: error: [device]: field 'memory_bandwidth_GBps' must be >= 1e-06" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "sizes,message",
    [
        ("2^¹⁰", "ASCII digits"),
        ("1" * 500, "too large"),
        ("", "empty"),
        ("2^10..2^99", "too large"),
    ],
)
def test_bad_sizes_are_diagnostics(sizes, message, capsys):
    assert main([str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "16", "--sizes", sizes]) == 1
    err = capsys.readouterr().err
    assert message in err and "internal error" not in err and len(err) < 400


def test_sizes_no_device_holds_are_predicted_with_a_warning(capsys):
    assert main([str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "16", "--sizes", "2^40"]) == 0
    err = capsys.readouterr().err
    assert "warning: --sizes 2^40" in err and "ignores memory capacity" in err


def test_too_many_ranks_for_the_model_are_refused(capsys):
    assert main([str(EXAMPLES / "sgd.mlir"), "--model", "dgx2", "--ranks", "131072"]) == 1
    assert "at most 65536 ranks" in capsys.readouterr().err


def test_calibrate_with_zero_ranks_is_rejected(capsys):
    assert main(["--calibrate", "--ranks", "0"]) == 1
    assert "--ranks must be at least 1, got 0" in capsys.readouterr().err


def test_the_default_table_is_short_and_all_lists_everything(tmp_path):
    from distir.dialects.context import parse_module
    from distir.tuning.explore import explore

    args = [str(EXAMPLES / "megatron_mlp.mlir"), "--model", "dgx2", "--nodes", "1", "--ranks", "4", "--sizes", "2^10,2^16"]
    p = run(*args)
    assert p.returncode == 0, p.stderr
    blocks = p.stdout.split("\nsize ")[1:]
    assert len(blocks) == 2 and all(len(b.splitlines()) <= 80 for b in blocks)
    # one row per family: the orders that are predicted alike are one row
    assert "natural|ring|remote_first" in p.stdout
    best = [line for line in p.stdout.splitlines() if line.startswith("best: ")]
    assert len(best) == 2 and all(len(line) < 200 for line in best)
    out = tmp_path / "all.json"
    p = run(*args, "--all", "--json", str(out))
    assert p.returncode == 0, p.stderr
    found = explore(parse_module((EXAMPLES / "megatron_mlp.mlir").read_text()))
    assert len(json.loads(out.read_text())["schedules"]) == len(found.candidates)
    assert sum(1 for line in p.stdout.splitlines() if line.startswith("   ") or line.startswith("*  ")) >= 2 * len(found.candidates)


def test_a_whole_models_pipeline_is_abridged_in_the_table_only():
    """A program of many parts: its composed pipeline names every tensor; the default
    table counts the names (one row stays readable), ``--all`` (top None) prints it
    whole, and the JSON keeps it whole (it is built from the same result)."""
    from distir.tools.tune import LONG_PIPELINE, abridged, render_table, result_json
    from distir.tuning.tuner import Tuned, TuneResult

    names = ",".join(f"avg16_layers_{i}_gate_proj" for i in range(40))
    whole = f"fuse-maps,split-allreduce{{dim=0 targets={names}}},reorder-allgather{{targets={names}}},slice-state{{targets=m}}"
    assert len(whole) > LONG_PIPELINE
    short = "fuse-maps,split-allreduce{dim=0 targets=<40 names>},reorder-allgather{targets=<40 names>},slice-state{targets=m}"
    assert abridged(whole) == short
    result = TuneResult(
        [1024], 0,
        [Tuned("(as written)", "", {1024: 2.0}, False, "ok", None, original=True),  # type: ignore[arg-type]
         Tuned("each part's best", whole, {1024: 1.0}, False, "ok", None, parts=("AR-C", "RS-C-AG"))],  # type: ignore[arg-type]
        {1024: "each part's best"}, 16, "model dgx2",
    )
    table = render_table(result)
    assert short in table and names not in table
    assert max(len(line) for line in table.splitlines()) < 200
    assert "--all or --json" in table
    everything = render_table(result, None)
    assert whole in everything and "targets=<" not in everything
    assert result_json(result)["schedules"][1]["pipeline"] == whole
    # a short pipeline is never abridged
    result.schedules[1].pipeline = "split-allreduce{targets=a,b}"
    assert "targets=a,b" in render_table(result) and "abridged" not in render_table(result)


def test_bounds_cut_the_search_short_with_the_best_so_far(tmp_path):
    from distir.examples.optimizer_step import llama_parameters, optimizer_step

    llama = tmp_path / "llama.mlir"
    llama.write_text(optimizer_step("adam", llama_parameters("llama-7b", hidden=64, vocab=256, layers=1), mixed=True))
    for bound in (["--time-budget", "0.01"], ["--max-schedules", "3"]):
        out = tmp_path / "r.json"
        p = run(str(llama), "--model", "dgx2", "--ranks", "16", "--json", str(out), *bound)
        assert p.returncode == 0, p.stderr
        assert "the search was cut short" in p.stdout
        data = json.loads(out.read_text())
        assert all(data["best"].values())
    p = run(str(EXAMPLES / "megatron_mlp.mlir"), "--model", "dgx2", "--ranks", "16", "--max-schedules", "5", "--json", str(out))
    assert p.returncode == 0 and "5 schedules evaluated" in p.stdout
    assert len(json.loads(out.read_text())["schedules"]) <= 5


def test_ctrl_c_prints_the_best_so_far_and_exits_130():
    """Ctrl-C while the schedules are timed (the default ``--backend local``: 195 programs,
    a minute on 2 idle cores) stops before the next program is built: the ones timed by
    then are the table, the sizes not reached say so. Event-driven: the signal goes once
    the tool says it is timing (off a terminal, a line every 5 s), whatever the
    machine's speed."""
    import signal

    proc = subprocess.Popen(
        [str(TUNE), str(EXAMPLES / "adam.mlir"), "--ranks", "4", "--all", "--sizes", "2^10..2^24"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    assert proc.stderr is not None
    seen = []
    while not (seen and seen[-1].startswith("distir-tune: timing: ")):
        line = proc.stderr.readline()
        assert line, f"the tool ended before it said it was timing: {seen}"
        seen.append(line)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert "the search was cut short (interrupted)" in out
    timed = re.search(r"the best of the (\d+) schedules evaluated so far", err)
    assert timed and int(timed.group(1)) >= 1, err
    best = re.findall(r"^best: (2\^\d+): (.*)$", out, re.M)
    assert best and best[0][1].split()[0] != "none", out[-2000:]  # the first size was timed
    assert best[-1][1] == "none (none evaluated here before the search was cut short: interrupted)", best[-1]


def test_a_calibration_on_a_busy_machine_is_flagged(monkeypatch):
    from distir.tools import tune

    monkeypatch.setattr(tune.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(tune.os, "sched_getaffinity", lambda pid: {0, 1})
    warning = tune._busy("calibrating")
    assert warning.startswith("distir-tune: warning: calibrating at load 9.0 on 2 cores: other jobs share this machine")
    assert "calibrate again when the machine is idle" in warning
    monkeypatch.setattr(tune.os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert tune._busy("calibrating") is None


def test_the_table_fits_a_100_column_terminal_and_explains_itself(monkeypatch, capsys):
    """examples/jax/tp_mlp.py's program (test/frontends/jax-tp-mlp.mlir), as the issue
    saw it on a 100-column terminal: every line fits, no pipeline is cut inside a name,
    the rows and schedules are counted apart, the topology says how many of its devices
    run, the replaced dimension is named and the marks are explained."""
    from distir.tools import tune

    monkeypatch.setattr(tune, "_width", lambda: 100)  # a 100-column terminal
    assert main([str(ROOT / "test" / "frontends" / "jax-tp-mlp.mlir"), "--ranks", "4", "--model", "dgx2"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert "4 of its 16 devices" in out and "dimension 256" in out
    assert re.search(r"size 2\^8 \(256\): 21 schedules evaluated; 19 shown in 11 rows", out)
    assert any(line.startswith("*: best; =: a tie (within the timing noise of the best)") for line in lines)
    # a cut pipeline line ends after a pass (a comma) or between a pass's options
    cont = [ln for ln in lines if ln.startswith(" " * 40) and ln.strip()]
    assert cont and all(re.match(r"^[a-z-]+\{?|^[a-z-]+=", ln.strip()) for ln in cont), cont


def test_many_sizes_give_one_row_per_size():
    p = run(str(EXAMPLES / "adam.mlir"), "--model", "dgx2", "--ranks", "16", "--sizes", "2^10..2^30")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) < 60  # (was 317)
    assert "21 sizes, 13 schedules evaluated; the best (*) per size" in p.stdout
    assert len(re.findall(r"^ *2\^\d+ +\* ", p.stdout, re.M)) == 21
    p = run(str(EXAMPLES / "adam.mlir"), "--model", "dgx2", "--ranks", "16", "--sizes", "2^10..2^12", "--top", "2")
    assert p.stdout.count("schedules evaluated;") == 3


def test_winners_within_the_timing_noise_are_ties():
    from distir.tools.tune import render_table
    from distir.tuning.tuner import TuneResult, Tuned

    def sched(name, t, spread, original=False):
        return Tuned(name, "" if original else f"fuse-maps{{targets={name.lower()}}}", {1024: t}, True, "ok", None, original, spread={1024: spread})

    a, b, c = sched("A", 1.00e-3, 0.10), sched("B", 1.05e-3, 0.02), sched("C", 2.0e-3, 0.01, original=True)
    r = TuneResult([1024], 1024, [c, a, b], {1024: "A"}, 2, "backend local")
    assert [s.name for s in r.ties(1024)] == ["B"]  # 5% apart, A's rounds scatter 10%
    text = render_table(r, 10, 100)
    assert re.search(r"^\*\s+A\s+1\.000 ms ±10%", text, re.M) and re.search(r"^=\s+B\s+1\.050 ms ±2%", text, re.M)
    assert "best: 2^10: A  1.000 ms  2.00x over the program as written  (a tie with B: within the timing noise)" in text
    b.spread[1024] = 0.01
    a.spread[1024] = 0.01
    assert not r.ties(1024) and "(a tie with" not in render_table(r, 10, 100)
