"""The suite's order (test/conftest.py, support/suite_order.py): the longest files it
names exist, and a run hands them out first."""

from __future__ import annotations

from pathlib import Path

from support.suite_order import LONGEST

HERE = Path(__file__).parent


def test_each_file_named_longest_exists():
    missing = [name for name in LONGEST if not (HERE / name).is_file()]
    assert not missing, f"support/suite_order.py's LONGEST names files that are gone: {missing}"


def test_the_longest_files_are_collected_first(pytester):
    pytester.makeconftest(
        f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(HERE)!r})
from support.suite_order import longest_first

def pytest_collection_modifyitems(session, config, items):
    longest_first(items, {{"test_b.py": 9, "test_c.py": 5}}, Path(__file__).parent)
"""
    )
    for name in ("test_a.py", "test_b.py", "test_c.py"):
        pytester.makepyfile(**{name[:-3]: "def test_one():\n    pass\n\ndef test_two():\n    pass\n"})
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:xdist")
    order = [line.split("::")[0] for line in result.outlines if "::" in line]
    assert order == ["test_b.py", "test_b.py", "test_c.py", "test_c.py", "test_a.py", "test_a.py"], result.outlines
