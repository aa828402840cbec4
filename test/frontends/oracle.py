"""Helpers of the front-end tests: a program JAX lowered and ran, the comparison with
JAX's results (rtol 1e-5 for f32), and the check of a located diagnostic."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from xdsl.utils.exceptions import ParseError

from distir.dialects.diagnostics import InputRejected
from distir.frontends.program import import_program

RTOL = 1e-5


def load(jax_dir: Path, name: str):
    """(StableHLO text, inputs keyed arg0.., JAX's results) of one program."""
    text = (jax_dir / f"{name}.mlir").read_text()
    with np.load(jax_dir / f"{name}.in.npz") as f:
        inputs = {k: f[k] for k in f.files}
    with np.load(jax_dir / f"{name}.out.npz") as f:
        outputs = [f[f"result{i}"] for i in range(len(f.files))]
    return text, inputs, outputs


def assert_matches(got, want, what: str, exact: bool = False) -> None:
    """``got`` equals JAX's ``want``: within RTOL for floats, exactly for integers and
    booleans (and for floats too with ``exact``: the same bits)."""
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{what}: result{i} has shape {g.shape}, JAX {w.shape}"
        if exact and w.dtype.kind == "f":
            np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"), err_msg=f"{what}: result{i} (bits)")
            continue
        if w.dtype.kind in "biu":  # integers and booleans: JAX's values exactly
            if w.dtype.kind == "u" and g.dtype.kind == "i" and g.dtype.itemsize == w.dtype.itemsize:
                g = g.view(w.dtype)  # distir holds unsigned values as signless integers (the same bits)
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: result{i}")
            continue
        finite = np.abs(w[np.isfinite(w)])
        scale = float(np.max(finite)) if finite.size else 0.0
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * scale, err_msg=f"{what}: result{i}")


def assert_rejected(text: str, pattern: str) -> None:
    """Importing ``text`` (as bad.mlir) is a diagnostic located at ``pattern``
    (``line:col.*message``, a regular expression)."""
    with pytest.raises((ParseError, InputRejected)) as e:
        import_program(text, "bad.mlir")
    assert re.search(r"(?s)bad\.mlir:" + pattern, str(e.value)), str(e.value)
