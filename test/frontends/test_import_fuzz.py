"""500 mutated inputs of each front end (StableHLO + Shardy, MLIR shard/mesh), from a
fixed seed: each ends in a partitioned, verified module or in a located diagnostic
(``file:line:col``), never in another exception (what ``distir-import`` would report as
an internal error, exit 3) or a hang.

The mutations are those a user's file suffers: truncation, deleted / duplicated /
reversed spans, unknown ops, bad shardings (axes not in the mesh, an axis used twice in
one sharding or one dim, sub-axes that do not divide their axis, open dims, unreduced
axes), sizes that the shardings do not divide, shapes that disagree, out-of-range and
malformed numbers, stray bytes. They mutate the checked-in samples of this folder (real
``jax.jit(f).lower(...).as_text()`` output and hand-written sdy and shard programs).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from support.limits import bounded
from xdsl.utils.exceptions import ParseError, VerifyException

from distir.dialects.diagnostics import InputRejected
from distir.frontends.program import detect, import_program

HERE = Path(__file__).parent
MUTATIONS = 500
LIMIT = 30
LOCATED = re.compile(r"^input\.mlir:\d+:\d+")

SDY_SAMPLES = sorted(p for p in HERE.glob("*.mlir") if p.name.startswith(("jax-", "sdy-")))
SHARD_SAMPLES = sorted(p for p in HERE.glob("*.mlir") if p.name.startswith(("shard-", "mesh-")))

COMMON = [
    "%0", "%99", "%arg0", "@mesh", "@nope", "tensor<4xf32>", "tensor<?x4xf32>", "tensor<4xui32>", "tensor<4xcomplex<f32>>",
    "tensor<8x8xf32>", "f32", "i1", "(", ")", "[", "]", "{", "}", "<", ">", ",", ":", "=", "->", "?", "0", "-1", "7",
    "99999999999999999999999999999999999999999999", "1.0e39", "0x7FC00000", "dense<[1.0, 2.0]>", "dense<>", '"', "//", "\n",
    " ", "\x00", "\xff", "\u00e9", "return", "func.func", "call @nope(%0) : (tensor<4xf32>) -> tensor<4xf32>",
    "stablehlo.add", "stablehlo.frobnicate", '"stablehlo.gather"(%0) : (tensor<4xf32>) -> tensor<4xf32>', "^bb1:",
]
SDY_TOKENS = COMMON + [
    '{"x"}', '{"z"}', '{"x", "x"}', '{"x"}, {"x"}', '{"x":(1)2}', '{"x":(3)5}', '{"y":(2)2}', "{?}", '{"x", ?}', "{}",
    ', unreduced={"x"}', ', replicated={"x"}', '#sdy.sharding<@mesh, [{"x"}]>', '#sdy.sharding<@nope, []>', '<@mesh, [{}]>',
    'sdy.mesh @mesh = <["x"=3]>', 'sdy.mesh @m2 = <["x"=0]>', 'device_ids=[3, 2, 1, 0]', "sdy.all_gather", "sdy.reshard",
    "out_sharding=<@mesh, [{}]>", "manual_axes={}", '"stablehlo.all_reduce"', "replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>",
    "dims = [0, 0]", "dims = [7]", "contracting_dims = [5] x [0]", "across dimensions = [9]", "applies stablehlo.divide",
    "dense<[[0, 1], [0, 2]]> : tensor<2x2xi64>", "dense<[[0, 9]]> : tensor<1x2xi64>", "dense<[[1, 1]]> : tensor<1x2xi64>", "dense<> : tensor<0x2xi64>",
    "handle = 0", "handle = -1", "sdy.collective_permute", '"stablehlo.collective_permute"',
]
SHARD_TOKENS = COMMON + [
    "[[0]]", "[[0], [0]]", "[[5]]", "[[], [1]]", "[[0, 1]]", "partial = sum[0]", "partial = max[1]", "<@g, [[0]]>", "<@nope, [[0]]>",
    "shard.grid @g(shape = 3)", "shard.grid @g(shape = 0)", "annotate_for_users", "shard.shard", "shard.all_gather",
    "grid_axes = [0, 0]", "grid_axes = [7]", "gather_axis = 9", "root = [5]", "reduction = <bogus>", "halo_sizes = [1, 1]",
    "mesh_axes = [1]", "split_axis = 0 concat_axis = 7", "arith.addf", "math.exp", "arith.cmpf olt,",
    "shift_axis = 1", "shift_axis = 9", "offset = -7", "offset = 0", "rotate", "destination = [5]", "source = [0, 0]", "source = []",
    "shard.send", "shard.recv", "shard.shift", "grid_axes = []",
]


def mutate(rng: random.Random, text: str, tokens: list[str]) -> str:
    data = text
    for _ in range(rng.randint(1, 3)):
        n = len(data)
        i = rng.randint(0, max(n - 1, 0))
        j = rng.randint(i, min(n, i + 60))
        kind = rng.choice(["truncate", "delete", "duplicate", "insert", "replace", "swap", "number", "axis"])
        if kind == "truncate":
            data = data[:i]
        elif kind == "delete":
            data = data[:i] + data[j:]
        elif kind == "duplicate":
            data = data[:i] + data[i:j] + data[i:]
        elif kind == "insert":
            data = data[:i] + rng.choice(tokens) + data[i:]
        elif kind == "replace":
            data = data[:i] + rng.choice(tokens) + data[j:]
        elif kind == "swap":
            data = data[:i] + data[i:j][::-1] + data[j:]
        elif kind == "number":  # change one number: sizes, dims, axes
            nums = list(re.finditer(r"\d+", data))
            if nums:
                m = rng.choice(nums)
                data = data[: m.start()] + str(rng.choice([0, 1, 2, 3, 5, 6, 7, 9, 17, 64, 2**40])) + data[m.end() :]
        else:  # change one axis name of a sharding
            names = list(re.finditer(r'"[a-z]+"(?=[,}:])', data))
            if names:
                m = rng.choice(names)
                data = data[: m.start()] + rng.choice(['"z"', '"x"', '"y"', '"tp"', '""']) + data[m.end() :]
    return data



def outcome(text: str, source: str) -> str:
    """'ok', or the located diagnostic; anything else raises (a bug)."""
    try:
        with bounded(LIMIT):
            import_program(text, "input.mlir", source)
    except (ParseError, VerifyException, InputRejected) as e:
        msg = str(e)
        assert LOCATED.match(msg), f"diagnostic without a location: {msg!r}\n--- input:\n{text}"
        return msg
    return "ok"


@pytest.mark.parametrize("source, samples, tokens", [("sdy", SDY_SAMPLES, SDY_TOKENS), ("shard", SHARD_SAMPLES, SHARD_TOKENS)], ids=["sdy", "shard"])
def test_mutated_inputs_give_a_module_or_a_located_diagnostic(source, samples, tokens):
    assert samples
    rng = random.Random(20251124)
    texts = [p.read_text() for p in samples]
    outcomes: dict[str, int] = {}
    for k in range(MUTATIONS):
        text = mutate(rng, rng.choice(texts), tokens)
        try:
            result = outcome(text, source)
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - any other exception is the bug this test looks for
            raise AssertionError(f"mutation {k}: {type(e).__name__}: {e}\n--- input:\n{text}") from e
        key = "ok" if result == "ok" else result.splitlines()[-1].strip().split(" ")[0]
        outcomes[key] = outcomes.get(key, 0) + 1
    # the mutations reach past the reader: some import, many are rejected
    assert outcomes.get("ok", 0) > 10, outcomes
    assert sum(v for k, v in outcomes.items() if k != "ok") > MUTATIONS // 4, outcomes


def test_the_samples_themselves_import():
    for p in SDY_SAMPLES + SHARD_SAMPLES:
        assert outcome(p.read_text(), "auto") == "ok", p.name
        assert detect(p.read_text()) == ("sdy" if p in SDY_SAMPLES else "shard"), p.name
