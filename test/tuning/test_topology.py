"""tuning/topology.py: built-in machines, coordinates, TOML files and their diagnostics."""

import pytest

from distir.dialects.diagnostics import InputRejected
from distir.tuning.topology import (
    BUILTIN_TOPOLOGIES,
    Level,
    get_topology,
    load_topology,
    parse_topology,
    register_topology,
)

GOOD = """\
name = "two-level"

[[levels]]
name = "node"
cardinality = 4
bandwidth_GBps = 8
latency_us = 5.0

[[levels]]
name = "gpu"
cardinality = 16
bandwidth_GBps = 270.0
latency_us = 1.0
in_network_reduction = true

[device]
memory_bandwidth_GBps = 1555.0
peak_tflops = { f32 = 19.5, f16 = 312.0, bf16 = 312.0 }
"""


def test_builtins_have_design_numbers():
    dgx = get_topology("dgx2", nodes=2)
    assert dgx.cardinalities == (2, 16) and dgx.ranks == 32
    assert [lv.bandwidth_GBps for lv in dgx.levels] == [100.0, 150.0]  # 8 x 100 Gb/s; 6 x 25 GB/s
    a100 = get_topology("p2-a100", nodes=4)
    assert a100.cardinalities == (4, 16) and a100.ranks == 64
    assert [lv.bandwidth_GBps for lv in a100.levels] == [8.0, 270.0]
    assert a100.device.peak_tflops["bf16"] == 312.0 and a100.device.memory_bandwidth_GBps == 1555.0
    v100 = get_topology("p2-v100", nodes=4)
    assert v100.level_names == ("node", "domain", "gpu") and v100.cardinalities == (4, 2, 4)
    assert v100.levels[0].bandwidth_GBps == 8.0 and v100.levels[1].uplink_GBps == 32.0
    assert v100.levels[2].bandwidth_GBps == 135.0 and v100.device.peak_tflops.f16 == 125.0


def test_coordinates_are_row_major_outermost_first():
    t = get_topology("p2-v100", nodes=3)
    assert t.coords(0) == (0, 0, 0) and t.coords(13) == (1, 1, 1) and t.coords(23) == (2, 1, 3)
    assert all(t.rank_of(t.coords(r)) == r for r in range(t.ranks))
    assert t.unit(13, 0) == 1 and t.unit(13, 1) == 3 and t.unit(13, 2) == 13
    with pytest.raises(IndexError):
        t.coords(24)


def test_levels_where_devices_differ():
    t = get_topology("p2-a100", nodes=4)
    assert t.first_difference(3, 5) == 1 and t.first_difference(3, 19) == 0 and t.first_difference(7, 7) is None
    assert t.outermost_difference([0, 1, 2]) == 1 and t.outermost_difference([0, 16]) == 0
    assert t.outermost_difference([9]) is None
    assert t.spanned_levels([0, 16, 32]) == (0,)  # one GPU per node: only the NIC level
    assert t.spanned_levels([0, 1, 16, 17]) == (0, 1)


def test_nodes_option_and_defaults():
    assert get_topology("p2-a100").cardinalities == (2, 16)
    assert get_topology("dgx2", nodes=8).ranks == 128
    with pytest.raises(InputRejected, match="positive integer"):
        get_topology("p2-v100", nodes=0)


def test_unknown_topology_names_the_choices():
    with pytest.raises(InputRejected, match=r"unknown topology 'dgx9'.*dgx2, local, local-mpi, p2-a100, p2-v100"):
        get_topology("dgx9")


def test_registry_is_the_hook_for_local():
    register_topology("test-only", lambda nodes: get_topology("p2-a100", nodes))
    try:
        assert get_topology("test-only", nodes=3).ranks == 48
    finally:
        del BUILTIN_TOPOLOGIES["test-only"]


def test_toml_file_loads_and_nodes_overrides(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text(GOOD)
    t = load_topology(f)
    assert t.name == "two-level" and t.cardinalities == (4, 16)
    assert t.levels[0] == Level("node", 4, 8.0, 5.0)
    assert t.levels[1].in_network_reduction and t.device.peak_tflops.f32 == 19.5
    assert get_topology(str(f), nodes=2).cardinalities == (2, 16)


@pytest.mark.parametrize(
    "edit, message",
    [
        (("cardinality = 16\n", ""), r"t\.toml:9: error: \[\[levels\]\] entry 1: missing field 'cardinality'"),
        (("cardinality = 16", 'cardinality = "16"'), r"t\.toml:11: error: \[\[levels\]\] entry 1: field 'cardinality' must be an integer, got string '16'"),
        (("latency_us = 5.0", "latency_us = true"), r"t\.toml:7: error: \[\[levels\]\] entry 0: field 'latency_us' must be a number, got boolean true"),
        (("bandwidth_GBps = 8\n", "bandwidth_GBps = 8\nspeed = 3\n"), r"t\.toml:3: error: \[\[levels\]\] entry 0: unknown field 'speed'"),
        (("f16 = 312.0, ", ""), r"t\.toml:16: error: \[device\]: peak_tflops: missing dtype 'f16'"),
        (("memory_bandwidth_GBps = 1555.0\n", ""), r"t\.toml:16: error: \[device\]: missing field 'memory_bandwidth_GBps'"),
        (("cardinality = 4", "cardinality = 0"), r"t\.toml:5: error: \[\[levels\]\] entry 0: field 'cardinality' must be >= 1"),
        (('name = "two-level"', 'name = "two-level'), r"t\.toml:1:\d+: error: invalid TOML"),
    ],
)
def test_toml_errors_are_located(tmp_path, edit, message):
    f = tmp_path / "t.toml"
    f.write_text(GOOD.replace(*edit, 1))
    with pytest.raises(InputRejected, match=message):
        load_topology(f)


def test_toml_without_levels_or_device():
    with pytest.raises(InputRejected, match="missing \\[\\[levels\\]\\]"):
        parse_topology('name = "x"\n')
    with pytest.raises(InputRejected, match="missing \\[device\\]"):
        parse_topology(GOOD.split("[device]")[0])


def test_missing_file_is_a_diagnostic(tmp_path):
    with pytest.raises(InputRejected, match="cannot read topology file"):
        get_topology(str(tmp_path / "nope.toml"))
