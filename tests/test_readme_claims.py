"""Every figure README.md quotes in its Results section comes from a file a listed command makes.

Each row of the Results table names, in its last column, the command (in backticks) and the
file it writes (a Markdown link). Every number of the row's figures column must appear in that
file as a number, and the file must say which command made it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?!\d)")


def results_rows(readme: str) -> list[list[str]]:
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) >= 3, "the Results section has a table with a header, a rule and rows"
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def test_results_table_rows_name_a_command_and_a_file() -> None:
    for row in results_rows((ROOT / "README.md").read_text()):
        assert len(row) == 3, row
        assert re.search(r"`[^`]+`", row[2]), f"no command in {row[2]!r}"
        assert re.search(r"\]\(([^)]+)\)", row[2]), f"no file in {row[2]!r}"


@pytest.mark.parametrize("row", results_rows((ROOT / "README.md").read_text()), ids=lambda r: r[0][:40])
def test_every_quoted_figure_is_in_its_source_file(row: list[str]) -> None:
    command = re.search(r"`([^`]+)`", row[2]).group(1)  # type: ignore[union-attr]
    source = ROOT / re.search(r"\]\(([^)]+)\)", row[2]).group(1)  # type: ignore[union-attr]
    text = source.read_text()
    assert f"`{command}`" in text, f"{source.relative_to(ROOT)} does not say it was made by `{command}`"
    missing = sorted(numbers(row[1]) - numbers(text))
    assert not missing, f"figures quoted in README but not in {source.relative_to(ROOT)}: {missing}"


def test_the_check_catches_a_drifted_figure() -> None:
    """A figure changed in README (1.186 -> 1.187) is no longer found in the source."""
    source = (ROOT / "experiments/results/simulation/README.md").read_text()
    assert "1.186" in numbers(source) and "1.187" not in numbers(source)
    assert numbers("1.187x (OSU fit)") - numbers(source) == {"1.187"}
