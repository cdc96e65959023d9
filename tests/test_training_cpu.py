"""How long one wait for a CPU lasts (experiments/training/cpu.py wait_per_slice, and what a
trace run records of it, experiments/trace_sweep.wait_slices): fake /proc trees and samples
with figures worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.trace_sweep import wait_slices
from experiments.training.cpu import thread_stats, wait_per_slice

MS = 1_000_000  # ns
US = 1_000


def test_schedstat_third_field_is_read_per_thread(tmp_path: Path) -> None:
    task = tmp_path / "40" / "task"
    for tid, text in {40: "900000 1200000 8\n", 41: "5 6\n"}.items():
        (task / str(tid)).mkdir(parents=True)
        (task / str(tid) / "schedstat").write_text(text)
    # thread 41's file lacks the count (not a kernel's schedstat): left out rather than read as 0
    assert thread_stats(40, tmp_path) == {40: (900000, 1200000, 8)}


def test_mean_wait_per_timeslice_of_the_busiest_thread() -> None:
    before = {1: (100 * MS, 10 * MS, 1000), 2: (5 * MS, 1 * MS, 10)}
    after = {1: (400 * MS, 70 * MS, 1100), 2: (6 * MS, 91 * MS, 20), 3: (50 * MS, 30 * MS, 40)}
    # ran between the samples: thread 1 300 ms, thread 2 1 ms, thread 3 (new) 50 ms: thread 1 is
    # the busiest; it waited 60 ms over 100 timeslices = 600 us each. Thread 2 waited longer
    # (90 ms over 10 = 9 ms each) but is not the busiest.
    assert wait_per_slice(before, after) == pytest.approx(600 * US)
    # without thread 1 the new thread 3 is the busiest: all of its figures, 30 ms over 40 = 750 us
    del after[1]
    assert wait_per_slice(before, after) == pytest.approx(750 * US)


def test_no_threads_or_no_timeslice_gives_none() -> None:
    assert wait_per_slice({1: (1, 2, 3)}, {}) is None
    # the only thread did not run between the samples
    assert wait_per_slice({1: (7 * MS, 2 * MS, 9)}, {1: (7 * MS, 2 * MS, 9)}) is None


def test_a_reused_thread_id_counts_as_a_new_thread() -> None:
    # thread id 5 ended and a new thread took the id: its figures are below the old ones
    before = {5: (900 * MS, 400 * MS, 5000)}
    after = {5: (20 * MS, 8 * MS, 16)}
    assert wait_per_slice(before, after) == pytest.approx(500 * US)  # 8 ms / 16


def test_a_run_records_each_processs_mean_wait_per_timeslice() -> None:
    before = {"t": 0.0, "cpu_ticks": {}, "threads": {"s1": {11: (0, 0, 0), 12: (0, 0, 0)}, "s2": {21: (3, 4, 5)}}}
    after = {"t": 1.0, "cpu_ticks": {},
             "threads": {"s1": {11: (800 * MS, 150 * MS, 300), 12: (10 * MS, 50 * MS, 10)},
                         "s2": {21: (3, 4, 5)}, "s3": {31: (2 * MS, 1234567, 3)}}}
    # s1's busiest thread (11) waited 150 ms over 300 timeslices = 500 us; s2's did not run; s3
    # appeared between the samples: 1,234,567 ns over 3 = 411,522.33 ns, recorded in whole ns
    assert wait_slices(before, after) == {"s1": 500 * US, "s2": None, "s3": 411522}
