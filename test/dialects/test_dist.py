"""``!dist.tensor``'s syntax: a program names the same few types at every operand and
result, and each distinct text is parsed once per process; what a text means does not
depend on where it is, and a bad type is reported where it is, seen types or not."""

import pytest
from support.calls import count_calls
from xdsl.utils.exceptions import ParseError

from distir.dialects import dist
from distir.dialects.context import parse_module

MESH = "dist.mesh @g shape = [2, 2]\n"
T = "!dist.tensor<8x4xf32, @g, [sliced<0>, sliced<1>]>"


def chain(n: int, t: str = T) -> str:
    """A function of ``n`` element-wise ops on ``%x`` of type ``t``."""
    body = "".join(
        f"  %v{i} = dist.map(%{'x' if i == 0 else f'v{i - 1}'}) : ({t}) -> {t} {{\n"
        "  ^bb0(%a: f32):\n    %n = arith.negf %a : f32\n    dist.yield %n : f32\n  }\n"
        for i in range(n)
    )
    return MESH + f"func.func @f(%x: {t}) -> {t} {{\n{body}  func.return %v{n - 1} : {t}\n}}\n"


@pytest.fixture
def placements_parsed(monkeypatch):
    """How many placement words the parser read in full (the cache cleared first)."""
    monkeypatch.setattr(dist, "_PARSED", {})
    return count_calls(monkeypatch, dist, "parse_placement")


def test_each_distinct_type_text_is_parsed_once(placements_parsed):
    parse_module(chain(200))
    # 402 uses of one type (argument, 200 operands, 200 results, the return): its two
    # placements read once
    assert placements_parsed[0] == 2
    parse_module(chain(3, "!dist.tensor<8x4xf32, @g, [sliced<0>, replicated]>"))
    assert placements_parsed[0] == 4


def test_a_type_means_the_same_wherever_it_is_written(placements_parsed):
    cached = parse_module(chain(20))
    dist._PARSED.clear()
    fresh = parse_module(chain(20))
    assert str(cached) == str(fresh)
    funcs = [next(op for op in m.body.block.ops if op.name == "func.func") for m in (cached, fresh)]
    types = [f.body.block.args[0].type for f in funcs]
    assert types[0] == types[1] and types[0].get_shape() == (8, 4)


@pytest.mark.parametrize(
    "bad, why",
    [
        ("!dist.tensor<8x4xf32, @g, [sliced<2>, replicated]>", "cannot be sliced on dim 2"),
        ("!dist.tensor<8x-4xf32, @g, [sliced<0>, sliced<1>]>", ""),
        ("!dist.tensor<8x4xf32, g, [sliced<0>, sliced<1>]>", "expected a mesh symbol"),
    ],
)
def test_a_bad_type_after_seen_ones_is_reported_where_it_is(bad, why):
    parse_module(chain(2))  # T is known now
    text = MESH + f"func.func @f(%x: {T}, %y: {bad}) -> {T} {{\n  func.return %x : {T}\n}}\n"
    with pytest.raises(ParseError) as err:
        parse_module(text)
    message = str(err.value)
    assert why in message
    line = message.splitlines()
    assert any(bad[:20] in ln for ln in line), message  # the diagnostic shows the bad type's line
