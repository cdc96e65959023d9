"""`sim validate`'s sentence on the predicted p99, on hand-made table rows."""

from __future__ import annotations

from simulator.validate_report import HEADER, tails


def _row(kind: str, p99_error: str) -> list[str]:
    row = ["-"] * len(HEADER)
    row[0], row[HEADER.index("p99 error")] = kind, p99_error
    return row


def test_the_p99_sentence_counts_under_predicted_groups_by_their_printed_sign() -> None:
    rows = [_row("trace", "-12%"), _row("trace", "-0%"), _row("trace", "+20%"), _row("trace", "+4%"),
            _row("cnn", "+35%"), _row("cnn", "-")]  # out of reach: no p99 error
    # trace: -12, -0 (under by less than half a percent) and +20, +4: 2 of 4 under; |errors|
    # 0, 4, 12, 20: median 8%. cnn: one group, +35%.
    assert tails(rows) == ("The p99: cnn job under-predicted in 0 of 1 groups, median |p99 error| 35%; "
                           "trace job under-predicted in 2 of 4 groups, median |p99 error| 8%.")
    assert tails([_row("trace", "-")]) == ""
