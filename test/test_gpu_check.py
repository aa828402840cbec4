"""bench/gpu_check.py, the one command a GPU machine runs (docs/runtime.md), in its
simulator subset: it runs in CI's time, exits 0, and its report says what ran where and
that nothing ran on a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_simulated_gpu_check_reports_what_ran_where(tmp_path):
    report = tmp_path / "out" / "gpu_check.md"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--simulate", "-o", str(report)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"report written to {report}" in p.stdout
    text = report.read_text()
    assert "**Nothing ran on a GPU.**" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ") and " | passed | " in line}
    assert set(rows) == {"gpu-marked tests", "examples and schedules vs interpret", "generated kernels vs copy bandwidth", "AdamW step vs torch fused AdamW"}
    assert "they skip without a GPU" in rows["gpu-marked tests"]
    assert "numba's CUDA simulator (CPU)" in rows["examples and schedules vs interpret"]
    assert "not a GPU measurement" in rows["generated kernels vs copy bandwidth"]
    assert "torch on this CPU; the program in numba's CUDA simulator (no GPU)" in rows["AdamW step vs torch fused AdamW"]
    assert "skipped" in text.split("## gpu-marked tests")[1]
    assert text.count("equal to interpret") >= 8  # examples x schedules of the subset
    assert "**" not in text.split("## examples and schedules vs interpret")[1].split("## ")[0]  # no failure
