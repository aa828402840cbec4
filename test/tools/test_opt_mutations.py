"""Malformed input of any kind gives a diagnostic and exit 1, never a traceback.

Mutations of the example files (``support/fuzz.py``: truncation, deleted / duplicated /
reversed spans, inserted IR tokens, wrong types, garbage bytes; hypothesis draws the
seeds) go through distir-opt: the exit code must be 0 (still a valid program, whose
output must parse again) or 1 (a diagnostic), never 3 (internal error) and never an
escaping exception.
"""

import io
import random
from contextlib import redirect_stderr, redirect_stdout

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fuzz import mutation

from distir.tools.opt import main


def mutated():
    return st.integers(0, 2**32).map(lambda seed: mutation(random.Random(seed)))


def run_opt(path, *args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(path), *args])
    return rc, out.getvalue(), err.getvalue()


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples_never_crash(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("mut") / "input.mlir"
    path.write_bytes(data)
    rc, out, err = run_opt(path)
    assert rc in (0, 1), f"exit {rc}\n{err}"
    assert "Traceback" not in err
    if rc == 1:
        assert err.strip(), "a rejected input must come with a diagnostic"
    else:
        again = tmp_path_factory.mktemp("out") / "printed.mlir"
        again.write_text(out)
        rc2, out2, err2 = run_opt(again)
        assert rc2 == 0, f"printed output does not parse back:\n{err2}"
        assert out2 == out


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples_under_verify_diagnostics(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("mut") / "input.mlir"
    path.write_bytes(data)
    rc, _out, err = run_opt(path, "--split-input-file", "--verify-diagnostics")
    assert rc == 0, f"exit {rc}\n{err}"
