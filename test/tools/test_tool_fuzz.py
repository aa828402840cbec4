"""distir-synth on fuzzed arguments and topology files (``support/fuzz.py``; the bigger
run, with distir-tune too, is ``bench/fuzz.py``): exit 0 or 1 with a one-line
diagnostic, never a traceback, and never a non-finite number in what it prints or
writes as JSON."""

import contextlib
import io
import json
import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fuzz import TOPOLOGY, synth_argv, topology

from distir.tools.synth import main as synth

NON_FINITE = re.compile(r"(?i)(?<![a-z_])(nan|inf(inity)?)(?=x\b|\b)")


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32))
def test_fuzzed_synth_requests_end_in_a_diagnostic_or_finite_results(tmp_path_factory, seed):
    rng = random.Random(seed)
    tmp = tmp_path_factory.mktemp("synth")
    files = {"topology": str(tmp / "t.toml"), "json": str(tmp / "out.json"), "dir": str(tmp / "mlir"), "bad": "/dev/null/nope"}
    (tmp / "t.toml").write_bytes(topology(rng) if rng.random() < 0.5 else TOPOLOGY.encode())
    argv = synth_argv(rng, files)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = synth(argv)
    assert rc in (0, 1), f"{argv}: exit {rc}: {err.getvalue()}"
    if rc == 1:
        assert err.getvalue().count("\n") == 1, f"{argv}: {err.getvalue()!r}"
    assert not NON_FINITE.search(out.getvalue()), f"{argv}: {out.getvalue()}"
    if (tmp / "out.json").exists() and rc == 0:
        constants: list[str] = []
        json.loads((tmp / "out.json").read_text(), parse_constant=constants.append)
        assert not constants, f"{argv}: {constants}"
