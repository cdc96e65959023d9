"""tests/benchmarks/suite_durations.py: per-file sums and the slowest tests from a JUnit XML."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.suite_durations import DurationsError, per_file, read_cases, report

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_one" time="2.5"/>
<testcase classname="tests.test_a.TestGroup" name="test_two" time="1.0"><failure message="x"/></testcase>
<testcase classname="tests.test_b" name="test_three[c]" time="7.25"/>
<testcase classname="tests.test_b" name="test_four" time="0.0"><skipped message="y"/></testcase>
</testsuite></testsuites>"""


def test_files_are_summed_and_ranked_with_classes_folded_into_their_module(tmp_path: Path) -> None:
    path = tmp_path / "suite.xml"
    path.write_text(XML)
    cases = read_cases(path)
    assert [(c.file, c.outcome) for c in cases] == [
        ("tests/test_a.py", "passed"), ("tests/test_a.py", "failed"),
        ("tests/test_b.py", "passed"), ("tests/test_b.py", "skipped")]
    assert per_file(cases) == [("tests/test_b.py", 7.25, 2), ("tests/test_a.py", 3.5, 2)]
    text = report(cases, files=5, tests=1)
    assert text.splitlines()[0] == "4 tests, 11 s summed (1 failed, 2 passed, 1 skipped)"
    assert "    7.2  tests/test_b.py::test_three[c]" in text and "test_one" not in text.split("slowest")[1]


def test_a_file_that_is_no_report_is_named(tmp_path: Path) -> None:
    path = tmp_path / "empty.xml"
    path.write_text("<testsuites/>")
    with pytest.raises(DurationsError, match="no test cases"):
        read_cases(path)
    with pytest.raises(DurationsError, match="not a readable"):
        read_cases(tmp_path / "missing.xml")
