"""Property tests of the front end: any text ends in a module or a located diagnostic.

Hypothesis draws the seeds (``random.Random(seed)``: a generator makes many random
choices, too many to record one by one) of ``support/fuzz.py``'s generators (mutated examples, deep
nesting, out-of-range numbers, unterminated strings, forward references, huge shapes).
Each input goes through the front end in this process (``parse_source`` then
``verify_module``): the outcome must be a module, or a ``ParseError`` /
``VerifyException`` whose text starts with ``file:line:col``; any other exception is a
bug. A case running longer than ``LIMIT`` seconds of CPU time fails the test as a hang
(a bound, not a timing measurement: ``support/limits.py``). A smaller sample goes
through ``distir-opt`` and ``distir-run``, whose exit codes must be 0, 1 or 2. The fuzz script ``bench/fuzz.py`` runs ten thousand
and more of these inputs outside CI.
"""

from __future__ import annotations

import io
import random
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fuzz import GENERATORS, fuzz_input
from support.limits import bounded
from xdsl.utils.exceptions import ParseError, VerifyException

from distir.dialects.context import make_context
from distir.dialects.frontend import EXPECTED_PARSER_ERRORS, decode_source, parse_source
from distir.dialects.verifier import verify_module
from distir.tools.opt import main as opt_main
from distir.tools.run import main as run_main

LIMIT = 60
LOCATED = re.compile(r"^input\.mlir:\d+:\d+")



def front_end(data: bytes) -> str:
    """'ok' or the diagnostic of the input."""
    try:
        module, spans = parse_source(decode_source(data, "input.mlir"), "input.mlir", make_context())
        verify_module(module, spans)
    except (ParseError, VerifyException) as e:
        cause = getattr(e, "cause", None)
        # A parser exception of a new kind is reported as a diagnostic too, but may be
        # a bug in one of distir's parse methods: look at it.
        assert cause is None or issubclass(cause, EXPECTED_PARSER_ERRORS), f"{cause.__name__} while parsing:\n{e}"
        return str(e)
    return "ok"


def check_front_end(kind: str, data: bytes) -> None:
    with bounded(LIMIT):
        outcome = front_end(data)
    if outcome != "ok":
        assert LOCATED.match(outcome), f"{kind}: unlocated diagnostic:\n{outcome[:2000]}"


# Mostly generated inputs (cheap); mutated examples also run through the tools below
# and in test_opt_mutations.py.
@settings(max_examples=1500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32), st.sampled_from([k for k in GENERATORS if k != "mutation"] * 3 + ["mutation"]))
def test_front_end_gives_a_module_or_a_located_diagnostic(seed, kind):
    check_front_end(*fuzz_input(random.Random(seed), kind))


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_every_kind_of_input_is_generated_and_bounded(kind):
    rng = random.Random(kind)
    for _ in range(5):
        check_front_end(*fuzz_input(rng, kind))


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32))
def test_tools_exit_with_0_1_or_2(tmp_path_factory, seed):
    kind, data = fuzz_input(random.Random(seed))
    path = tmp_path_factory.mktemp("fuzz") / "input.mlir"
    path.write_bytes(data)
    for main, argv in ((opt_main, [str(path)]), (run_main, [str(path), "--ranks", "4", "--backend", "interpret"])):
        out, err = io.StringIO(), io.StringIO()
        with bounded(LIMIT), redirect_stdout(out), redirect_stderr(err):
            rc = main(argv)
        assert rc in (0, 1, 2), f"{kind}: {argv[1:]} exit {rc}\n{err.getvalue()[-2000:]}"
        if rc == 1:
            assert err.getvalue().strip(), "a rejected input must come with a diagnostic"


def test_the_bound_stops_a_loop_by_its_cpu_time():
    with pytest.raises(TimeoutError, match="CPU time"):
        with bounded(0.2):
            while True:
                pass
