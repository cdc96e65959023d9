"""The confidence interval the transport and DDP hook benchmarks print for a median
(tests/benchmarks/bench_transport.py, ``median_ci``): the distribution-free interval of order
statistics, checked against the ranks tabulated for the sign test (95%: ranks 2 and 9 of 10,
10 and 21 of 30, 6 and 15 of 20), not against a computation of its own."""

from __future__ import annotations

import random

import pytest

from tests.benchmarks.bench_transport import median_ci


@pytest.mark.parametrize(("n", "low_rank", "high_rank"), [(10, 2, 9), (20, 6, 15), (30, 10, 21)])
def test_interval_is_the_tabulated_order_statistics(n: int, low_rank: int, high_rank: int) -> None:
    values = [float(v) for v in range(1, n + 1)]
    random.Random(n).shuffle(values)  # the order given must not matter
    mid, low, high = median_ci(values)
    assert (low, high) == (low_rank, high_rank)
    assert mid == (n + 1) / 2


def test_too_few_values_give_their_whole_range() -> None:
    assert median_ci([0.4, 0.9, 0.2, 0.7, 0.5]) == (0.5, 0.2, 0.9)  # 5 values: no 95% interval inside
    assert median_ci([1.5]) == (1.5, 1.5, 1.5)


def test_no_values_is_an_error() -> None:
    with pytest.raises(ValueError):
        median_ci([])
