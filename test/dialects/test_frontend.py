"""The front end's guards (dialects/frontend.py), checked by counting work rather than
timing it, and with a bound that turns a hang into a failure."""

from __future__ import annotations

import signal

import pytest
from support.calls import count_calls
from xdsl.utils.exceptions import ParseError

from distir.dialects import frontend
from distir.dialects.context import make_context, parse_module
from distir.dialects.frontend import MAX_NESTING, SafeLexer, parse_source

MESH = "dist.mesh @world shape = [1]\n"


def arg_type(dims: str) -> str:
    return MESH + f"func.func @f(%x: !dist.tensor<{dims}xf32, @world, [replicated]>) {{\n  func.return\n}}\n"


@pytest.fixture
def lex_count(monkeypatch):
    return count_calls(monkeypatch, SafeLexer, "lex")


def test_a_shape_of_many_dims_is_lexed_in_a_few_tokens(lex_count):
    small, big = arg_type("x".join(["2"] * 10)), arg_type("x".join(["2"] * 20_000))
    parse_source(small, "s", make_context())
    n_small = lex_count[0]
    lex_count[0] = 0
    module, _ = parse_source(big, "b", make_context())
    # xDSL's own dimension parser lexes the rest of '2x2x...' after every dim (quadratic).
    assert lex_count[0] == n_small
    arg = module.body.block.ops.last.body.block.args[0]
    assert arg.type.get_shape() == (2,) * 20_000


def test_dims_keep_xdsls_meaning():
    for dims, shape in (("4x8", (4, 8)), ("0x10", (0, 10)), ("4 x 8", (4, 8))):
        module = parse_module(arg_type(dims))
        assert module.body.block.ops.last.body.block.args[0].type.get_shape() == shape


@pytest.fixture
def bounded():
    def alarm(signum, frame):
        raise TimeoutError("a hang")

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 30)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)


def test_unterminated_string_followed_by_a_long_line_is_rejected(bounded):
    # xDSL's string regex takes time doubling per character here (40 letters: hours).
    with pytest.raises(ParseError, match="End of file reached before closing string literal"):
        parse_source('dist.mesh @m shape = [2] axes = ["' + "a" * 100_000 + "\n", "s", make_context())


@pytest.mark.parametrize("depth, ok", [(MAX_NESTING, True), (MAX_NESTING + 1, False)])
def test_nesting_is_bounded(depth, ok):
    text = "dist.mesh @m shape = [4] {a = " + "[" * (depth - 1) + "0" + "]" * (depth - 1) + "}\n"
    if ok:
        parse_module(text)
    else:
        with pytest.raises(ParseError, match=f"nesting deeper than {MAX_NESTING} levels") as e:
            parse_module(text)
        assert str(e.value).startswith(f"<string>:1:{31 + MAX_NESTING - 1}")


def test_scan_skips_strings_comments_and_names():
    frontend.check_text('// ((((( [[[[\n%x123456789 = "(((((" : ' + "9" * 300 + "\n", "s")
    with pytest.raises(ParseError, match="integer literal of 401 digits"):
        frontend.check_text("x = " + "9" * 401, "s")
