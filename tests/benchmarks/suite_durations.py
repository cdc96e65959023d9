"""Where the test suite's time goes: per-file and per-test durations from a pytest JUnit XML.

    nice -n 19 .venv/bin/python -m pytest -q -p no:cacheprovider --junitxml=/tmp/suite.xml
    .venv/bin/python -m tests.benchmarks.suite_durations /tmp/suite.xml [--files 40] [--tests 40]

prints the files by their summed test time (setup and teardown included, as pytest records
them), the share of the total each takes, and the slowest single tests. Module fixtures are
charged to the first test that uses them, so a file's sum is what running it costs.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


class DurationsError(ValueError):
    """The file is not a pytest JUnit XML report."""


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    seconds: float
    outcome: str  # "passed", "failed", "error" or "skipped"


def read_cases(path: Path) -> list[Case]:
    """Every test case of a JUnit XML report written by pytest."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise DurationsError(f"{path}: not a readable JUnit XML report ({exc})") from exc
    cases: list[Case] = []
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        # pytest writes "tests.test_x" or "tests.test_x.TestClass": the file is the module path.
        parts = classname.split(".")
        module = [p for p in parts if not p[:1].isupper()]
        file = "/".join(module) + ".py" if module else classname
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        cases.append(Case(file, case.get("name", ""), float(case.get("time", "0") or 0), outcome))
    if not cases:
        raise DurationsError(f"{path}: no test cases in it")
    return cases


def per_file(cases: list[Case]) -> list[tuple[str, float, int]]:
    """(file, summed seconds, tests), slowest first."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for c in cases:
        total[c.file] += c.seconds
        count[c.file] += 1
    return sorted(((f, total[f], count[f]) for f in total), key=lambda row: -row[1])


def report(cases: list[Case], files: int, tests: int) -> str:
    whole = sum(c.seconds for c in cases)
    outcomes: dict[str, int] = defaultdict(int)
    for c in cases:
        outcomes[c.outcome] += 1
    lines = [f"{len(cases)} tests, {whole:.0f} s summed ("
             + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())) + ")", "",
             f"{'seconds':>8} {'share':>6} {'tests':>5}  file"]
    for file, seconds, n in per_file(cases)[:files]:
        lines.append(f"{seconds:8.1f} {seconds / whole:6.1%} {n:5d}  {file}")
    lines += ["", f"{'seconds':>8}  slowest tests"]
    for c in sorted(cases, key=lambda c: -c.seconds)[:tests]:
        lines.append(f"{c.seconds:8.1f}  {c.file}::{c.name}{'' if c.outcome == 'passed' else f' ({c.outcome})'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="per-file and slowest-test durations from a pytest JUnit XML")
    parser.add_argument("xml", type=Path)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--tests", type=int, default=40)
    args = parser.parse_args(argv)
    print(report(read_cases(args.xml), args.files, args.tests))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
