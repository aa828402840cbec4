"""Calibrated machines with round numbers, for tests of the cost model's arithmetic."""

from __future__ import annotations


def calibrated_local(ranks: int = 2):
    """A calibrated ``local`` backend: 1 byte per ns of memory bandwidth (1.5 for a rank
    streaming alone), every collective at 1 ns per byte and no fixed costs."""
    from distir.tuning.calibrate import topology_from

    fit = {
        "memory_bandwidth_GBps": 1.0,  # 1 byte per ns
        "peak_tflops": {"f32": 1.0, "f16": 1.0, "bf16": 1.0},
        "matmul_tflops": {"f32": 1.0, "f16": 1.0, "bf16": 1.0},
        "runtime": {"launch_s": 0.0, "dispatch_s": 0.0, "synchronous": True, "concurrent_streams": False, "step_s": 0.0},
        "collectives": {k: [0.0, 1e-9] for k in ("all_reduce", "reduce_scatter", "all_gather", "reduce", "broadcast", "send")},
        "fused_in_memory": True,
        "backend": "local",
        "memory_bandwidth_alone_GBps": 1.5,
    }
    return topology_from(fit, "local", ranks)
