"""Mutants of the project's own JAX lowerings (``jax-*.mlir``): each is either rejected with
a located one-line diagnostic or imports to a program that computes what the unmutated
program computes (on the same inputs). The mutations that break one of StableHLO's rules
(an op after the return, a misspelled ``sdy.sharding``, a call's result type that is not
its callee's, a value used with another type than its definition's) must be rejected;
renaming a value and dropping JAX's ``jax.result_info`` must change nothing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from xdsl.utils.exceptions import ParseError

from distir.dialects.diagnostics import InputRejected
from distir.frontends.program import import_program
from distir.runtime import npz
from distir.runtime.interpreter import run_function

HERE = Path(__file__).parent
FILES = sorted(p.name for p in HERE.glob("jax-*.mlir"))
PER_KIND = 2
"""Mutants of each kind per file (the first positions where the kind applies)."""

TYPE = re.compile(r"tensor<((?:\d+x)*)f32>")


def _lines(text: str) -> list[str]:
    return text.split("\n")


def op_after_return(text: str) -> list[str]:
    out = []
    lines = _lines(text)
    for k, line in enumerate(lines):
        m = re.match(r"(\s*)return (%[\w#]+).*: (tensor<[^>]*>)", line)
        if m:
            extra = f"{m.group(1)}%mutant = stablehlo.negate {m.group(2)} : {m.group(3)}"
            out.append("\n".join(lines[: k + 1] + [extra] + lines[k + 1 :]))
    return out


def misspelled_sharding(text: str) -> list[str]:
    return [text[: m.start()] + "sdy.shardng =" + text[m.end() :] for m in re.finditer(r"sdy\.sharding =", text)]


def call_result_type(text: str) -> list[str]:
    out = []
    for m in re.finditer(r"call @\w+\([^)]*\)[^\n]*-> (\(?)tensor<((?:\d+x)*)f32>", text):
        s = m.start(2) + len(m.group(2))
        out.append(text[:s] + "f16" + text[s + 3 :])
    return out


def use_type(text: str) -> list[str]:
    """The first operand type of an op written ``(T, U) -> V``: another element type."""
    out = []
    for m in re.finditer(r"= stablehlo\.\w+ %[^\n]*: \(tensor<((?:\d+x)*)f32>", text):
        s = m.start(1) + len(m.group(1))
        out.append(text[:s] + "f16" + text[s + 3 :])
    return out


def renamed(text: str) -> list[str]:
    names = sorted(set(re.findall(r"%(\d+)\b", text)), key=int)
    return [re.sub(rf"%{n}\b", f"%renamed{n}", text) for n in names[-1:]]


def without_result_info(text: str) -> list[str]:
    stripped = re.sub(r'jax\.result_info = "[^"]*"(, )?', "", text)
    stripped = re.sub(r"(tensor<[^>]*>) \{\}", r"\1", stripped)
    return [stripped] if stripped != text else []


INVALID = {"op_after_return": op_after_return, "misspelled_sharding": misspelled_sharding, "call_result_type": call_result_type, "use_type": use_type}
SAME_MEANING = {"renamed": renamed, "without_result_info": without_result_info}


def outputs(text: str, name: str) -> list[np.ndarray]:
    module = import_program(text, name).module
    ranks = npz.static_ranks(module) or 4
    return run_function(module, None, None, ranks, 5).outputs


def rejected(text: str, name: str) -> str | None:
    """The diagnostic of importing ``text``, or None when it imports."""
    try:
        import_program(text, name)
    except (ParseError, InputRejected) as e:
        return str(e)
    return None


@pytest.mark.parametrize("file", FILES)
def test_mutants_are_rejected_or_mean_the_same(file):
    text = (HERE / file).read_text()
    base = None
    count = 0
    for kind, mutate in {**INVALID, **SAME_MEANING}.items():
        for i, mutant in enumerate(mutate(text)[:PER_KIND]):
            count += 1
            name = f"{file}.{kind}{i}.mlir"
            why = rejected(mutant, name)
            if kind in INVALID:
                assert why is not None, f"{name}: a {kind} mutant was accepted"
                assert re.search(rf"{re.escape(name)}:\d+:\d+", why), f"{name}: not located: {why}"
                assert "Traceback" not in why and "a bug in distir" not in why, why
                continue
            assert why is None, f"{name}: a {kind} mutant (same meaning) was rejected: {why}"
            base = base if base is not None else outputs(text, file)
            got = outputs(mutant, name)
            for k, (g, w) in enumerate(zip(got, base)):
                np.testing.assert_array_equal(g, w, err_msg=f"{name}: result{k}")
    assert count >= 3, f"{file}: only {count} mutants"
