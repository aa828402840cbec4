"""The suite's order (test/conftest.py): the longest files it names first exist, and a
run of the suite hands them out first."""

from __future__ import annotations

from pathlib import Path

from conftest import LONGEST

HERE = Path(__file__).parent


def test_each_file_named_longest_exists():
    missing = [name for name in LONGEST if not (HERE / name).is_file()]
    assert not missing, f"test/conftest.py's LONGEST names files that are gone: {missing}"


def test_the_longest_files_are_collected_first(pytester):
    pytester.makeconftest((HERE / "conftest.py").read_text().replace("LONGEST = {", 'LONGEST = {\n    "test_b.py": 9,\n    "test_c.py": 5,', 1))
    for name in ("test_a.py", "test_b.py", "test_c.py"):
        pytester.makepyfile(**{name[:-3]: "def test_one():\n    pass\n\ndef test_two():\n    pass\n"})
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:xdist")
    order = [line.split("::")[0] for line in result.outlines if "::" in line]
    assert order == ["test_b.py", "test_b.py", "test_c.py", "test_c.py", "test_a.py", "test_a.py"], result.outlines
