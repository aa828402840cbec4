"""Counting a function's calls in a test (work counted, never timed).

    count = count_calls(monkeypatch, SafeLexer, "lex")   # a method: patched on its class
    parse(text)
    assert count[0] <= 50
"""

from __future__ import annotations


def count_calls(monkeypatch, owner, name: str) -> list[int]:
    """Replace ``owner.name`` (a module's function or a class's method) for the test by
    one that counts its calls in ``count[0]`` and calls the original."""
    count = [0]
    real = getattr(owner, name)

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return count
