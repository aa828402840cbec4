"""Inputs that try to break distir's front end: mutations of the example programs and
generators of pathological texts, each a function of a ``random.Random``.

    rng = random.Random(7)
    text = fuzz_input(rng)          # bytes: one of the kinds below, chosen at random

Used by the property tests of the front end (``test/tools/test_frontend_fuzz.py``) and of
distir-synth (``test/tools/test_tool_fuzz.py``), with hypothesis choosing the seeds, and
by the fuzz script outside CI (``bench/fuzz.py``). Besides IR, ``topology(rng)`` makes
topology TOML files and ``synth_argv`` / ``tune_argv`` argument lists of distir-synth
and distir-tune (see their section below). The kinds of IR input, in ``GENERATORS``:

* ``mutation``: an example (sizes shrunk so that it runs fast) with 1-4 edits:
  truncation, deleted / duplicated / reversed spans, inserted IR tokens, random bytes;
* ``nesting``: brackets, regions, types or arrays nested up to 5,000 deep;
* ``number``: integers and floats out of range of their types (2^63, 2^64, 5,000
  digits, 1.0e39 as f32, long hex floats) in every place distir reads a number;
* ``string``: unterminated or escaped strings followed by long lines;
* ``forward``: values used before their definition, in a sibling region, inside their
  own op's region, or outside an isolated ``dist.map`` body;
* ``shape``: tensor types with thousands of dims.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Example sizes -> small ones, so that mutated programs that still verify run fast.
_SHRINK = {"1048576": "64", "12288": "96", "4096": "32", "3072": "24", "2048": "16", "1024": "16", "512": "8", "256": "8"}


def _shrink(text: str) -> str:
    # a size stands after '<', 'x', '[', ' ' or ',' (not inside a name) and before 'x' or a delimiter
    return re.sub(r"(?<![0-9A-Za-wyz_.%@#^])(" + "|".join(_SHRINK) + r")(?![0-9.A-Za-wyz_])", lambda m: _SHRINK[m.group(1)], text)


EXAMPLES: list[bytes] = [
    _shrink(p.read_text()).encode()
    for p in sorted((ROOT / "examples").glob("*.mlir")) + sorted((ROOT / "examples" / "schedules").glob("*.mlir"))
]

TOKENS = [
    b"%x", b"%", b"@world", b"@nope", b"sliced<", b"sliced<9>", b"at<7>", b"local", b"unplaced", b"replicated",
    b">", b"<", b"]", b"[", b"(", b")", b"{", b"}", b":", b",", b"->", b"=", b"?", b"0", b"-1", b"99999999999999999999",
    b"1.5", b"x", b"f16", b"bf16", b"i1", b"index", b"tensor<4xf32>", b"!dist.tensor<", b"!dist.tensor<4xf32, @world, [local]>",
    b"dist.map", b"dist.yield", b"coll.yield", b"coll.all_reduce", b"coll.fused_all_reduce sum", b"func.return", b"^bb0",
    b"dims [", b"axes [0, 0]", b"axis 3", b"dim 5", b"root 9", b"to -1", b"gather [true]", b"chunks 0", b"order",
    b"view @world [[0]]", b"shape = [0]", b"\"", b"//", b"// -----\n", b"\n", b" ", b"\xff\xfe", b"\x00", b"\xc3\x28", b"\t",
    b"9223372036854775808", b"18446744073709551616", b"1.0e39", b"0x7FC00000", b"%z", b"%0", b"^bb1:", b"\"builtin.module\"() ({",
]


def mutation(rng: random.Random) -> bytes:
    data = bytearray(rng.choice(EXAMPLES))
    for _ in range(rng.randint(1, 4)):
        n = len(data)
        i = rng.randint(0, max(n - 1, 0))
        j = rng.randint(i, min(n, i + 80))
        kind = rng.choice(["truncate", "delete", "duplicate", "insert", "replace", "byte", "swap"])
        if kind == "truncate":
            data = data[:i]
        elif kind == "delete":
            del data[i:j]
        elif kind == "duplicate":
            data[i:i] = data[i:j]
        elif kind == "insert":
            data[i:i] = rng.choice(TOKENS)
        elif kind == "replace":
            data[i:j] = rng.choice(TOKENS)
        elif kind == "byte" and n:
            data[i] = rng.randint(0, 255)
        elif kind == "swap" and n:
            data[i:j] = data[i:j][::-1]
    return bytes(data)


MESH = "dist.mesh @world shape = [4]\n"
T = "!dist.tensor<64xf32, @world, [local]>"
R = "!dist.tensor<64xf32, @world, [replicated]>"


def nesting(rng: random.Random) -> bytes:
    d = rng.choice([50, 99, 100, 101, 150, 1000, 3000, 5000]) if rng.random() < 0.7 else rng.randint(1, 300)
    kind = rng.choice(["module", "array", "type", "paren", "dict", "map", "mixed"])
    if kind == "module":
        text = '"builtin.module"() ({\n' * d + "}) : () -> ()\n" * d
    elif kind == "array":
        text = MESH + "dist.mesh @m shape = [4] {a = " + "[" * d + "0" + "]" * d + "}\n"
    elif kind == "type":
        text = "func.func @f(%x: " + "memref<4x" * d + "f32" + ">" * d + ") {\n  func.return\n}\n"
    elif kind == "paren":
        text = "func.func @f(%x: " + "(" * d + "f32" + ")" * d + ") {\n  func.return\n}\n"
    elif kind == "dict":
        text = "dist.mesh @m shape = [4] " + "{a = " * d + "0" + "}" * d + "\n"
    elif kind == "map":
        inner = "dist.yield %a : f32"
        for _ in range(min(d, 400)):
            inner = f"dist.map(%x) : ({R}) -> {R} {{\n^bb0(%a: f32):\n{inner}\n}}"
        text = MESH + f"func.func @f(%x: {R}) {{\n  %y = {inner}\n  func.return\n}}\n"
    else:
        opens = "".join(rng.choice("([{<") for _ in range(d))
        text = "func.func @f(%x: " + opens + "f32" + ")" * d + ") {}\n"
    if rng.random() < 0.3:  # unbalanced
        text = text[: rng.randint(0, len(text))]
    return text.encode()


_BIG_INTS = ["9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616", "-9223372036854775809"]


def _big_int(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_BIG_INTS)
    return str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(rng.choice([19, 40, 400, 401, 4300, 5000, 20000]) - 1))


def _big_float(rng: random.Random) -> str:
    return rng.choice(["1.0e39", "-3.5e38", "1.0e309", "1e-50", "0.0e0", "1." + "0" * 5000 + "1", "1e99999", "2.0e+400"])


def _hex(rng: random.Random) -> str:
    return "0x" + "".join(rng.choice("0123456789ABCDEF") for _ in range(rng.choice([4, 8, 16, 17, 32, 40, 80, 5000])))


def number(rng: random.Random) -> bytes:
    n = rng.choice([_big_int, _big_int, _big_float, _hex])(rng)
    ty = rng.choice(["f16", "bf16", "f32", "f64", "i1", "i8", "i32", "i64", "index", "ui64", "i128"])
    where = rng.choice(["mesh", "view", "axes", "dim", "tensor", "sliced", "at", "constant", "attr", "p"])
    if where == "mesh":
        text = f"dist.mesh @world shape = [{n}]\n"
    elif where == "view":
        text = f"dist.mesh @hw shape = [2, 2]\ndist.mesh @world shape = [4] view @hw [[{n}, 1]]\n"
    elif where == "axes":
        text = MESH + f"func.func @f(%x: {T}) -> {R} {{\n  %y = coll.all_reduce sum %x axes [{n}] : {T} -> {R}\n  func.return %y : {R}\n}}\n"
    elif where == "dim":
        text = MESH + f"func.func @f(%x: {T}) {{\n  %y = coll.reduce_scatter sum %x dim {n} : {T} -> {T}\n  func.return\n}}\n"
    elif where == "tensor":
        text = MESH + f"func.func @f(%x: !dist.tensor<{n}x4xf32, @world, [local]>) {{\n  func.return\n}}\n"
    elif where == "sliced":
        text = MESH + f"func.func @f(%x: !dist.tensor<64xf32, @world, [sliced<{n}>]>) {{\n  func.return\n}}\n"
    elif where == "at":
        text = MESH + f"func.func @f(%x: !dist.tensor<64xf32, @world, [at<{n}>]>) {{\n  func.return\n}}\n"
    elif where == "constant":
        text = f"func.func @f() -> {ty} {{\n  %c = arith.constant {n} : {ty}\n  func.return %c : {ty}\n}}\n"
    elif where == "attr":
        text = f"dist.mesh @world shape = [4] {{a = {n} : {ty}, b = dense<{n}> : tensor<2x{ty}>}}\n"
    else:
        text = MESH + f"func.func @f(%x: {R}) {{\n  %y = dist.dropout %x p {n} seed 1 : {R} -> {R}\n  func.return\n}}\n"
    return text.encode()


def string(rng: random.Random) -> bytes:
    body = "".join(rng.choice(["a", "b", " ", "\\n", "\\\\", "\\\"", "\\4", "é", "\\"]) for _ in range(rng.randint(0, 60)))
    tail = rng.choice(["", "a" * rng.choice([40, 1000, 100_000]), " " * 5000, "\\" * 3000])
    close = rng.choice(['"', "", "", "\n"])
    text = f'dist.mesh @m shape = [2] axes = ["{body}{tail}{close}\n'
    if rng.random() < 0.5:
        text = MESH + f'func.func @"{body}{tail}{close}() {{\n  func.return\n}}\n'
    return text.encode()


_FORWARD = [
    # a map operand defined in its own body
    f"func.func @f(%x: {R}) -> {R} {{\n  %y = dist.map(%x, %z) : ({R}, f32) -> {R} {{\n  ^bb0(%a: f32, %b: f32):\n"
    f"    %z = arith.addf %a, %b : f32\n    dist.yield %z : f32\n  }}\n  func.return %y : {R}\n}}\n",
    # a map body yielding a value of a sibling map's body
    f"func.func @f(%x: {R}) -> ({R}, {R}) {{\n  %w = dist.map(%x) : ({R}) -> {R} {{\n  ^bb0(%a: f32):\n    dist.yield %z : f32\n  }}\n"
    f"  %y = dist.map(%x) : ({R}) -> {R} {{\n  ^bb0(%a: f32):\n    %z = arith.addf %a, %a : f32\n    dist.yield %z : f32\n  }}\n"
    f"  func.return %y, %w : {R}, {R}\n}}\n",
    # a map body using a function argument
    f"func.func @f(%x: {R}, %s: f32) -> {R} {{\n  %y = dist.map(%x) : ({R}) -> {R} {{\n  ^bb0(%a: f32):\n"
    f"    %z = arith.addf %a, %s : f32\n    dist.yield %z : f32\n  }}\n  func.return %y : {R}\n}}\n",
    # used before its definition in the same block
    f"func.func @f(%x: {T}) -> {R} {{\n  func.return %y : {R}\n  %y = coll.all_reduce sum %x : {T} -> {R}\n}}\n",
    # a value of a fused collective's body used after it
    f"func.func @f(%x: {T}) -> {R} {{\n  %y = coll.fused_all_reduce sum %x dim 0 : {T} -> {R} {{\n"
    f"  ^bb0(%s: !dist.tensor<64xf32, @world, [sliced<0>]>):\n    coll.yield %s : !dist.tensor<64xf32, @world, [sliced<0>]>\n  }}\n"
    f"  %q = dist.map(%s) : (!dist.tensor<64xf32, @world, [sliced<0>]>) -> {R} {{\n  ^bb0(%a: f32):\n    dist.yield %a : f32\n  }}\n"
    f"  func.return %y : {R}\n}}\n",
    # an op using its own result
    f"func.func @f(%x: {T}) -> {R} {{\n  %y = coll.all_reduce sum %y : {R} -> {R}\n  func.return %y : {R}\n}}\n",
    # a value of one function used in another
    f"func.func @f(%x: {T}) -> {R} {{\n  %y = coll.all_reduce sum %x : {T} -> {R}\n  func.return %y : {R}\n}}\n"
    f"func.func @g(%x: {T}) -> {R} {{\n  func.return %y : {R}\n}}\n",
]


def forward(rng: random.Random) -> bytes:
    text = MESH + rng.choice(_FORWARD)
    if rng.random() < 0.3:
        text = text.replace("%z", rng.choice(["%y", "%x", "%a", "%w"]))
    return text.encode()


def shape(rng: random.Random) -> bytes:
    n = rng.choice([1000, 20_000, 50_000])
    dims = "x".join(rng.choice(["1", "1", "2", "?", "0x1"]) for _ in range(n))
    return (MESH + f"func.func @f(%x: !dist.tensor<{dims}xf32, @world, [local]>) {{\n  func.return\n}}\n").encode()


GENERATORS = {"mutation": mutation, "nesting": nesting, "number": number, "string": string, "forward": forward, "shape": shape}
WEIGHTS = {"mutation": 10, "nesting": 2, "number": 3, "string": 2, "forward": 2, "shape": 1}


def fuzz_input(rng: random.Random, kind: str | None = None) -> tuple[str, bytes]:
    """(kind, text) of one fuzz input (``kind`` chosen at random by ``WEIGHTS``)."""
    if kind is None:
        kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    return kind, GENERATORS[kind](rng)


# -- the tuner's and synthesizer's flags, topology files ---------------------------------
#
# ``topology(rng)`` is a topology TOML file: a valid two- or three-level one with 1-3
# edits (numbers replaced by NaN, infinities, zero, negatives, 1e-300, 1e308, huge
# integers, strings, booleans, arrays; fields deleted, duplicated or unknown; many
# levels), or text that is no TOML (empty, binary, not UTF-8, nested 10^4 deep,
# truncated). ``synth_argv(rng, files)`` and ``tune_argv(rng, files)`` are argument
# lists of distir-synth and distir-tune, near-valid half of the time (so that the deep
# paths run) and anything otherwise; ``files`` names the inputs they may point at.

TOPOLOGY = """name = "fuzz"
[[levels]]
name = "node"
cardinality = 2
bandwidth_GBps = 8.0
latency_us = 5.0
[[levels]]
name = "gpu"
cardinality = 4
bandwidth_GBps = 270.0
latency_us = 1.0
in_network_reduction = false
[device]
memory_bandwidth_GBps = 1555.0
peak_tflops = { f32 = 19.5, f16 = 312.0, bf16 = 312.0 }
"""

_NUMBERS = [
    "nan", "+nan", "-nan", "inf", "+inf", "-inf", "0", "0.0", "-0.0", "-1", "-8.0", "1e-300", "1e-7", "1e308", "1.7e308",
    "5e-324", "9223372036854775807", "99999999999999999999", "1e6", "16777217", "2", "3", "0.5", '"8"', "true", "[1, 2]", "{a = 1}",
]
_FIELDS = ["cardinality", "bandwidth_GBps", "latency_us", "memory_bandwidth_GBps", "f32", "f16", "bf16", "uplink_GBps"]


def topology(rng: random.Random) -> bytes:
    kind = rng.choice(["edit"] * 6 + ["levels", "empty", "binary", "utf8", "nested", "truncate"])
    text = TOPOLOGY
    if kind == "edit":
        for _ in range(rng.randint(1, 3)):
            edit = rng.choice(["number", "number", "delete", "unknown", "duplicate", "uplink", "in_network"])
            if edit == "number":
                field = rng.choice(_FIELDS)
                value = rng.choice(_NUMBERS)
                if field == "uplink_GBps":
                    text = text.replace("latency_us = 1.0\n", f"latency_us = 1.0\nuplink_GBps = {value}\n", 1)
                else:
                    text = re.sub(rf"\b{field} = [^,\n}}]+", f"{field} = {value}", text, count=rng.choice([0, 1]))
            elif edit == "delete":
                lines = text.splitlines(keepends=True)
                del lines[rng.randrange(len(lines))]
                text = "".join(lines)
            elif edit == "unknown":
                text = text.replace("[device]\n", f"[device]\n{rng.choice(['speed', 'name', 'flops'])} = {rng.choice(_NUMBERS)}\n")
            elif edit == "duplicate" and "[[levels]]" in text[10:] and "[device]" in text:
                i = text.index("[[levels]]", 10)
                text = text[:i] + text[i : max(i, text.index("[device]"))] + text[i:]
            elif edit == "uplink":
                text = text.replace("latency_us = 5.0\n", f"latency_us = 5.0\nuplink_GBps = {rng.choice(['32.0', '1e-9', 'nan'])}\n")
            else:
                text = text.replace("in_network_reduction = false", "in_network_reduction = true")
        return text.encode()
    if kind == "levels":
        n = rng.choice([1, 3, 6, 20, 60])
        levels = "".join(
            f'[[levels]]\nname = "l{i}"\ncardinality = {rng.choice([1, 2, 3, 4, 16])}\nbandwidth_GBps = {rng.choice([1.0, 100.0, 1e-5])}\nlatency_us = {rng.choice([0.0, 1.0])}\n'
            for i in range(n)
        )
        return (f'name = "many"\n{levels}' + TOPOLOGY[TOPOLOGY.index("[device]") :]).encode()
    if kind == "empty":
        return rng.choice([b"", b"\n", b"   \n\t\n", b"# only a comment\n"])
    if kind == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.choice([16, 600, 5000])))
    if kind == "utf8":
        return TOPOLOGY.encode().replace(b'"gpu"', rng.choice([b'"g\xfcpu"', b'"\xff\xfe"', b'"\xc3\x28"']))
    if kind == "nested":
        d = rng.choice([100, 1000, 10_000, 100_000])
        o, c = rng.choice([("[", "]"), ("{a = ", "}")])
        return (TOPOLOGY + "x = " + o * d + "1" + c * d + "\n").encode()
    return TOPOLOGY.encode()[: rng.randrange(len(TOPOLOGY))]


_INTS = ["0", "1", "2", "3", "4", "8", "16", "64", "65", "-1", "-16", "100000", "16777216", "99999999999999999999", "x", "", "2^4", "1e3", "0x10", "²", "4.0"]
# hierarchy, axes: the device counts agree (near-valid requests)
_SYNTH_CASES = [("4,16", "4,16"), ("2,16", "8,4"), ("2,16", "32"), ("2,2,4", "4,4"), ("4,4", "2,2,2,2"), ("2,8", "16"), ("1,4", "4"), ("2,4", "2,4")]


def _ints(rng: random.Random) -> str:
    return ",".join(rng.choice(_INTS) for _ in range(rng.randint(1, 4)))


def synth_argv(rng: random.Random, files: dict[str, str]) -> list[str]:
    """Arguments of distir-synth (``files``: ``topology``, ``json``, ``dir``, ``bad``)."""
    near = rng.random() < 0.6
    h, a = rng.choice(_SYNTH_CASES) if near else (_ints(rng), _ints(rng))
    if near:
        n = a.count(",") + 1
        reduce = ",".join(map(str, sorted(rng.sample(range(n), rng.randint(1, min(2, n))))))
    else:
        reduce = rng.choice(["0", "0", "1", "0,1", "0,2", "2", "-1", "", "a", "0,0"])
    argv = ["--hierarchy", h, "--axes", a, "--reduce-axes", reduce]
    if near:  # a topology the hierarchy fits (the fuzzed file's nodes hold 4 devices)
        argv += ["--topology", rng.choice([files["topology"], files["topology"], "p2-a100", "dgx2"])]
    elif rng.random() < 0.15:  # drop a required flag
        i = rng.choice([0, 2, 4])
        del argv[i : i + 2]
    options = {
        "--topology": lambda: rng.choice(["p2-a100", "p2-v100", "dgx2", files["topology"], files["topology"], "nope", files["bad"] + "/t.toml"]),
        "--nodes": lambda: rng.choice(_INTS),
        "--algorithm": lambda: rng.choice(["ring", "tree", "auto", "in_network", "butterfly", ""]),
        "--elements": lambda: rng.choice(["64", "1", "7", "1024", "1099511627776", "0", "-4", "99999999999999999999", "x"]),
        "--size-limit": lambda: rng.choice(["1", "2", "3", "4", "5", "6", "0", "-1", "100", "x"]),
        "--json": lambda: rng.choice([files["json"], "-", files["bad"] + "/out.json"]),
        "--emit-mlir": lambda: rng.choice([files["dir"], files["bad"] + "/dir"]),
    }
    valid = {
        "--algorithm": lambda: rng.choice(["ring", "tree", "auto"]),
        "--elements": lambda: rng.choice(["64", "1024", "4096", "1099511627776"]),
        "--size-limit": lambda: rng.choice(["1", "2", "3", "4", "5"]),
        "--json": lambda: rng.choice([files["json"], "-"]),
        "--emit-mlir": lambda: files["dir"],
    }
    for flag in rng.sample(list(options), rng.randint(0, 4)):
        draw = valid[flag] if near and flag in valid and rng.random() < 0.8 else options[flag]
        argv += [flag, draw()]
    if rng.random() < 0.1:
        argv.append(rng.choice(["--hierachy", "--nodez", "--version", "--help", "--json"]))
    return argv


def tune_argv(rng: random.Random, files: dict[str, str]) -> list[str]:
    """Arguments of distir-tune (``files``: ``program``, ``ir`` (a fuzzed one),
    ``topology``, ``json``, ``plot``, ``out``, ``bad``)."""
    argv = [rng.choice([files["program"], files["program"], files["program"], files["ir"], files["bad"] + "/p.mlir"])]
    ranks = ["2", "2", "2", "4", "4", "1", "3", "8", "0", "-1", "x", "65"]
    argv += ["--ranks", rng.choice(ranks) if rng.random() < 0.98 else rng.choice(["100000", "16777216"])]
    how = rng.random()
    if how < 0.8:
        argv += ["--model", rng.choice(["dgx2", "p2-a100", "p2-v100", files["topology"], files["topology"], "nope", "local"])]
    elif how < 0.83:
        argv += ["--backend", "local", "--rounds", "1", "--sizes", rng.choice(["64", "2^6"])]
    elif how < 0.9:
        argv += ["--backend", rng.choice(["mpi", "nccl", "interpret", "bogus"])]
    options = {
        "--sizes": lambda: rng.choice(["2^4..2^8", "16,32", "64", "3", "", "2^40", "2^4..2^2", "-4", "0", "2^¹⁰", "1" * 500, "2^4..2^10:3", "x", "2^64"]),
        "--dim": lambda: rng.choice(["0", "1", "64", "-1", "99", "x"]),
        "--nodes": lambda: rng.choice(["1", "2", "0", "-1", "100000", "x"]),
        "--json": lambda: rng.choice([files["json"], files["bad"] + "/t.json"]),
        "--plot": lambda: rng.choice([files["plot"], files["bad"] + "/t.png", files["plot"][:-4] + ".xyz"]),
        "-o": lambda: rng.choice([files["out"], files["bad"] + "/best.mlir"]),
        "--func": lambda: rng.choice(["f", "g", "@f", ""]),
        "--as-slice": lambda: rng.choice(["none", "x", "q", "", ","]),
        "--rounds": lambda: rng.choice(["1", "0", "-3", "x"]),
    }
    valid = {
        "--sizes": lambda: rng.choice(["2^4..2^8", "16,32", "64", "2^6..2^12:3"]),
        "--json": lambda: files["json"],
        "--plot": lambda: files["plot"],
        "-o": lambda: files["out"],
        "--func": lambda: "f",
        "--as-slice": lambda: "none",
        "--rounds": lambda: "1",
    }
    near = rng.random() < 0.5
    for flag in rng.sample(list(options), rng.randint(0, 3)):
        draw = valid[flag] if near and flag in valid and rng.random() < 0.8 else options[flag]
        argv += [flag, draw()]
    if rng.random() < 0.03:
        argv = ["--calibrate", "--ranks", rng.choice(["0", "-1", "x"])]
    if rng.random() < 0.05:
        argv.append(rng.choice(["--rank", "--modle", "--version", "--help", "--sizes"]))
    return argv
