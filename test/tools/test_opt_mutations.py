"""Malformed input of any kind gives a diagnostic and exit 1, never a traceback.

Hypothesis mutates the example files (truncation, deleted/duplicated/swapped spans,
inserted IR tokens, wrong types, garbage bytes) and runs distir-opt on the result: the
exit code must be 0 (still a valid program, whose output must parse again) or 1 (a
diagnostic), never 3 (internal error) and never an escaping exception.
"""

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distir.tools.opt import main

ROOT = Path(__file__).parents[2]
SOURCES = [p.read_bytes() for p in sorted((ROOT / "examples").glob("*.mlir"))]

TOKENS = [
    b"%x", b"%", b"@world", b"@nope", b"sliced<", b"sliced<9>", b"at<7>", b"local", b"unplaced", b"replicated",
    b">", b"<", b"]", b"[", b"(", b")", b"{", b"}", b":", b",", b"->", b"=", b"?", b"0", b"-1", b"99999999999999999999",
    b"1.5", b"x", b"f16", b"bf16", b"i1", b"index", b"tensor<4xf32>", b"!dist.tensor<", b"!dist.tensor<4xf32, @world, [local]>",
    b"dist.map", b"dist.yield", b"coll.yield", b"coll.all_reduce", b"coll.fused_all_reduce sum", b"func.return", b"^bb0",
    b"dims [", b"axes [0, 0]", b"axis 3", b"dim 5", b"root 9", b"to -1", b"gather [true]", b"chunks 0", b"order",
    b"view @world [[0]]", b"shape = [0]", b"\"", b"//", b"// -----\n", b"\n", b" ", b"\xff\xfe", b"\x00", b"\xc3\x28", b"\t",
]


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(SOURCES)))
    for _ in range(draw(st.integers(1, 4))):
        n = len(data)
        i = draw(st.integers(0, max(n - 1, 0)))
        j = draw(st.integers(i, min(n, i + 80)))
        kind = draw(st.sampled_from(["truncate", "delete", "duplicate", "insert", "replace", "byte", "swap"]))
        if kind == "truncate":
            data = data[:i]
        elif kind == "delete":
            del data[i:j]
        elif kind == "duplicate":
            data[i:i] = data[i:j]
        elif kind == "insert":
            data[i:i] = draw(st.sampled_from(TOKENS))
        elif kind == "replace":
            data[i:j] = draw(st.sampled_from(TOKENS))
        elif kind == "byte" and n:
            data[i] = draw(st.integers(0, 255))
        elif kind == "swap" and n:
            k = draw(st.integers(0, n - 1))
            a, b = sorted((i, k))
            data[a:b] = data[a:b][::-1] if b - a < 40 else data[a:b]
    return bytes(data)


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
