"""A topology file a tool cannot use is a located diagnostic at the field, never a run
that prints ``nan us`` or a traceback (tuning/topology.py; docs/robustness.md):
non-finite, non-positive and out-of-range numbers, files that are empty, binary or not
UTF-8, values nested too deeply."""

from pathlib import Path

import pytest

from distir.dialects.context import parse_module
from distir.dialects.diagnostics import InputRejected
from distir.passes.pipeline import apply_pipeline
from distir.tools.synth import main as synth
from distir.tuning.topology import load_topology

GOOD = """\
name = "t"
[[levels]]
name = "node"
cardinality = 2
bandwidth_GBps = 8.0
latency_us = 5.0
uplink_GBps = 16.0
[[levels]]
name = "gpu"
cardinality = 2
bandwidth_GBps = 270.0
latency_us = 1.0
[device]
memory_bandwidth_GBps = 1555.0
peak_tflops = { f32 = 19.5, f16 = 312.0, bf16 = 312.0 }
"""


def write(tmp_path: Path, text: str | bytes) -> Path:
    f = tmp_path / "t.toml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    return f


def rejected(f: Path) -> str:
    with pytest.raises(InputRejected) as e:
        load_topology(f)
    return str(e.value)


@pytest.mark.parametrize("value", ["nan", "+nan", "inf", "-inf"])
@pytest.mark.parametrize(
    "field, line, where",
    [
        ("bandwidth_GBps = 8.0", 5, "[[levels]] entry 0: field 'bandwidth_GBps'"),
        ("latency_us = 1.0", 12, "[[levels]] entry 1: field 'latency_us'"),
        ("uplink_GBps = 16.0", 7, "[[levels]] entry 0: field 'uplink_GBps'"),
        ("memory_bandwidth_GBps = 1555.0", 14, "[device]: field 'memory_bandwidth_GBps'"),
    ],
)
def test_non_finite_numbers_are_rejected_at_the_field(tmp_path, value, field, line, where):
    key = field.split(" = ")[0]
    msg = rejected(write(tmp_path, GOOD.replace(field, f"{key} = {value}")))
    assert msg.startswith(f"{tmp_path / 't.toml'}:{line}: error: {where} must be a finite number, got ")


def test_non_finite_peak_is_rejected_at_its_line(tmp_path):
    msg = rejected(write(tmp_path, GOOD.replace("f16 = 312.0", "f16 = nan")))
    assert msg == f"{tmp_path / 't.toml'}:15: error: [device]: peak_tflops.f16 must be a finite number, got nan"


@pytest.mark.parametrize(
    "edit, message",
    [
        (("bandwidth_GBps = 8.0", "bandwidth_GBps = 0"), "5: error: [[levels]] entry 0: field 'bandwidth_GBps' must be > 0 (range 1e-06 to 1e+06), got 0"),
        (("bandwidth_GBps = 8.0", "bandwidth_GBps = -8"), "5: error: [[levels]] entry 0: field 'bandwidth_GBps' must be > 0 (range 1e-06 to 1e+06), got -8"),
        (("latency_us = 5.0", "latency_us = -1"), "6: error: [[levels]] entry 0: field 'latency_us' must be >= 0 (range 0 to 1e+09), got -1"),
        (("memory_bandwidth_GBps = 1555.0", "memory_bandwidth_GBps = 1e-300"), "14: error: [device]: field 'memory_bandwidth_GBps' must be >= 1e-06 (range 1e-06 to 1e+06), got 1e-300"),
        (("f32 = 19.5", "f32 = 0.0"), "15: error: [device]: peak_tflops.f32 must be > 0 (range 1e-09 to 1e+09), got 0"),
        (("cardinality = 2", "cardinality = 100000000000"), "4: error: [[levels]] entry 0: field 'cardinality' must be <= 1.67772e+07"),
    ],
)
def test_non_positive_and_absurd_numbers_are_rejected(tmp_path, edit, message):
    assert rejected(write(tmp_path, GOOD.replace(*edit, 1))).startswith(f"{tmp_path / 't.toml'}:{message}")


def test_zero_latency_is_an_ideal_link(tmp_path):
    t = load_topology(write(tmp_path, GOOD.replace("latency_us = 5.0", "latency_us = 0")))
    assert t.levels[0].latency_us == 0.0


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "error: the file is empty"),
        (b"  \n\n", "error: the file is empty"),
        (b"name = \"t\"\x00\n", "error: the file is binary, not text (byte 0x00 at offset 10)"),
        (b"\x1b[2J" + GOOD.encode(), "error: the file is binary, not text (byte 0x1b at offset 0)"),
        (GOOD.encode().replace(b'name = "gpu"', b'name = "g\xfcpu"'), ":9: error: the file is not UTF-8 text (byte 0xfc)"),
    ],
)
def test_unreadable_files_are_named_and_not_echoed(tmp_path, data, message):
    f = write(tmp_path, data)
    msg = rejected(f)
    assert msg.startswith(str(f)) and msg.endswith(message.split("error:")[1]) and message in msg
    assert "\x00" not in msg and "\x1b" not in msg


@pytest.mark.parametrize("opener, closer", [("[", "]"), ("{a = ", "}")])
def test_deeply_nested_values_are_a_diagnostic(tmp_path, opener, closer):
    msg = rejected(write(tmp_path, GOOD + "x = " + opener * 50_000 + "1" + closer * 50_000 + "\n"))
    assert msg == f"{tmp_path / 't.toml'}: error: invalid topology: values nested too deeply"


def test_distir_synth_refuses_a_nan_topology_instead_of_printing_nan(tmp_path, capsys):
    f = write(tmp_path, GOOD.replace("bandwidth_GBps = 270.0", "bandwidth_GBps = nan"))
    assert synth(["--hierarchy", "2,2", "--axes", "2,2", "--reduce-axes", "0", "--topology", str(f)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"{f}:11: error: [[levels]] entry 1: field 'bandwidth_GBps' must be a finite number, got nan\n"


def test_synthesize_reductions_refuses_a_nan_topology(tmp_path):
    f = write(tmp_path, GOOD.replace("latency_us = 1.0", "latency_us = inf"))
    module = parse_module(
        """dist.mesh @hw shape = [2, 2] axes = ["node", "gpu"]
dist.mesh @world shape = [4] view @hw [[0, 1]]
func.func @f(%x: !dist.tensor<64xf32, @world, [local]>) -> !dist.tensor<64xf32, @world, [replicated]> {
  %g = coll.all_reduce sum %x : !dist.tensor<64xf32, @world, [local]> -> !dist.tensor<64xf32, @world, [replicated]>
  func.return %g : !dist.tensor<64xf32, @world, [replicated]>
}"""
    )
    with pytest.raises(Exception, match="field 'latency_us' must be a finite number, got inf") as e:
        apply_pipeline(module, f'synthesize-reductions{{topology="{f}"}}')
    assert type(e.value).__name__ in ("PassDiagnostic", "PassFailedException", "InputRejected")
