"""Per-process CPU figures of the trace runs (experiments/training/cpu.py, trace_sweep.cpu_marks):
fake /proc trees with figures worked out by hand."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from experiments.trace_report import write_trace_report
from experiments.trace_sweep import _waits, cpu_marks, process_figures
from experiments.training.cpu import starvation, thread_stats, tree_thread_stats, wait_share

MS = 1_000_000  # ns


def _proc(root: Path, pid: int, ppid: int, comm: str, threads: dict[int, str | None]) -> None:
    """A fake /proc/<pid>: its stat line and, per thread, a schedstat text (None: no file)."""
    d = root / str(pid)
    (d / "task").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 7 3 0 0 20 0 1 0\n")
    for tid, text in threads.items():
        (d / "task" / str(tid)).mkdir()
        if text is not None:
            (d / "task" / str(tid) / "schedstat").write_text(text)


def test_thread_stats_reads_each_thread(tmp_path: Path) -> None:
    _proc(tmp_path, 100, 1, "python", {100: "5000 2000 7\n", 101: "100 300 2\n", 102: None})
    (tmp_path / "100" / "task" / "junk").mkdir()
    # thread 102 ended between the listing and the read: left out; a non-numeric entry is ignored
    assert thread_stats(100, tmp_path) == {100: (5000, 2000, 7), 101: (100, 300, 2)}
    assert thread_stats(999, tmp_path) == {}  # the process ended


def test_tree_takes_descendants_only(tmp_path: Path) -> None:
    # 10 -> 11 -> 12 is one tree (a wrapper, the switch, a helper); 13 is another child of init.
    # Command names with spaces and parentheses must not shift the ppid field.
    _proc(tmp_path, 10, 1, "sh", {10: "1 1 1"})
    _proc(tmp_path, 11, 10, "p4switch (s1) run", {11: "2 20 1", 14: "3 30 1"})
    _proc(tmp_path, 12, 11, "helper", {12: "4 40 1"})
    _proc(tmp_path, 13, 1, "other", {13: "5 50 1"})
    assert tree_thread_stats([10], tmp_path) == {10: (1, 1, 1), 11: (2, 20, 1), 14: (3, 30, 1), 12: (4, 40, 1)}
    assert tree_thread_stats([11], tmp_path) == {11: (2, 20, 1), 14: (3, 30, 1), 12: (4, 40, 1)}


def test_wait_share_is_the_longest_waiting_thread_over_wall_time() -> None:
    before = {1: (0, 2 * MS), 2: (0, 300)}
    after = {1: (0, 202 * MS), 2: (0, 50 * MS + 300), 3: (0, 80 * MS)}
    # waits in the interval: 200 ms, 50 ms, 80 ms (thread 3 started in between: all of it); 1 s wall
    assert wait_share(before, after, 1.0) == pytest.approx(0.2)
    assert wait_share(before, after, 0.1) == 1.0  # at most the wall time
    assert wait_share({1: (0, 9 * MS)}, {1: (0, 5 * MS)}, 1.0) == 0.0  # a reused thread id: no negative wait
    assert wait_share(before, {}, 1.0) is None and wait_share(before, after, 0.0) is None


def test_many_threads_inflate_the_summed_figure_not_the_wait_share() -> None:
    """54 sender threads, each on a CPU 20 ms and waiting 100 ms over a 10 s run (an idle
    machine, threads waking one another): the earlier figure sums 5.4 s of waits over 6.48 s
    runnable = 0.833; the wait share is one thread's 100 ms over 10 s = 0.01."""
    before = {tid: (0, 0) for tid in range(54)}
    after = {tid: (20 * MS, 100 * MS) for tid in range(54)}
    summed = (sum(r for r, _ in after.values()), sum(w for _, w in after.values()))
    assert starvation((0, 0), summed) == pytest.approx(100 / 120)
    assert wait_share(before, after, 10.0) == pytest.approx(0.01)


def test_waits_per_named_process() -> None:
    before = {"s1": {7: (0, 10 * MS)}, "s2": {8: (0, 0)}}
    after = {"s1": {7: (0, 260 * MS)}, "s2": {8: (0, 0)}, "s3": {}}
    # s1 waited 250 ms of 0.5 s; s2 not at all; s3 has no thread left to read
    assert _waits(before, after, 0.5) == {"s1": 0.5, "s2": 0.0, "s3": None}


def test_process_figures_between_two_samples() -> None:
    hz = os.sysconf("SC_CLK_TCK")
    before = {"t": 10.0, "cpu_ticks": {"s1": 100, "job2 rank0": 0}, "threads": {"s1": {1: (0, 0)}, "job2 rank0": {}}}
    after = {"t": 12.0, "cpu_ticks": {"s1": 100 + hz, "job2 rank0": 3 * hz},
             "threads": {"s1": {1: (0, 400 * MS)}, "job2 rank0": {5: (0, 1500 * MS)}}}
    # s1: 1 s of CPU in 2 s = 0.5 of a core, waited 0.4 s = 0.2; the bulk rank 1.5 cores, waited 0.75
    assert process_figures(before, after) == ({"s1": 0.5, "job2 rank0": 1.5}, {"s1": 0.2, "job2 rank0": 0.75})


def _ranks(cpu: float, wait: float | None, summed: float) -> dict:
    return {"1": {"ranks": {"0": {"role": "worker", "cpu_share": 0.2, "cpu_wait_share": 0.05, "starvation": 0.3},
                            "1": {"role": "worker", "cpu_share": cpu, "cpu_wait_share": wait,
                                  "starvation": summed}}}}


def test_marks_take_every_process_of_the_run() -> None:
    figures = {"switch_cpu": {"s1": 0.86, "l1": 0.3}, "switch_cpu_wait": {"s1": 0.05, "l1": None},
               "other_cpu": {"job2 rank0": 0.2}, "other_cpu_wait": {"job2 rank0": 0.6}}
    marks = cpu_marks(_ranks(0.4, 0.1, 0.89), figures, 0.5)
    # the busiest process is switch s1 (0.86 > 0.85 of a core), the longest wait the bulk rank (0.6)
    assert marks == {"max_cpu_share": 0.86, "cpu_bound": True, "max_cpu_wait_share": 0.6, "cpu_starved": True,
                     "max_starvation": 0.89}
    assert cpu_marks(_ranks(0.4, 0.1, 0.89), figures, 1.0)["cpu_starved"] is False
    # a quiet run: ranks' summed figure high (0.89), yet nothing is bound or starved
    quiet = cpu_marks(_ranks(0.55, 0.12, 0.89), {"switch_cpu": {"s1": 0.3}, "switch_cpu_wait": {"s1": 0.08}}, 0.5)
    assert (quiet["max_cpu_share"], quiet["cpu_bound"], quiet["max_cpu_wait_share"], quiet["cpu_starved"]) == \
        (0.55, False, 0.12, False)


def test_this_process_is_read_live() -> None:
    stats = thread_stats()
    assert threading.get_native_id() in stats
    assert all(run >= 0 and wait >= 0 and slices >= 0 for run, wait, slices in stats.values())


def _record(run_id: str, config: str, rep: int, p50: float, new: bool) -> dict:
    recs = [{"iteration": i, "iteration_s": t, "compute_s": 0.3, "forward_wait_s": 0.0, "first_send_s": 0.1 + i,
             "last_arrival_s": 0.4 + i, "lost_by_tensor": {}} for i, t in enumerate([9.0, p50, p50])]
    cpu = {"max_cpu_share": 0.4, "cpu_bound": False, "cpu_starved": False, "max_starvation": 0.8}
    if new:
        cpu["max_cpu_wait_share"] = 0.07
    return {"run_id": run_id, "scenario": "tcp", "config": config, "repetition": rep, "status": "ok",
            "jobs": {"1": {"ranks": {"0": {"role": "worker", "totals": {"lost": 0, "reduced": 100}, "records": recs}}}},
            "switch": {}, "background": [], **cpu}


@pytest.mark.parametrize("new", [True, False])
def test_report_shows_the_wait_share_or_the_summed_figure_as_such(tmp_path: Path, new: bool) -> None:
    (tmp_path / "runs").mkdir()
    meta = {"command": "test", "repetitions": 1, "job": {"model": "resnet50", "precision": "fp32", "iterations": 3},
            "scale": {"b": 13.0, "k": 8.0, "real_gbps": 25.0, "emulated_mbps": 240.0, "capacity_ratio": 104.2},
            "runs": [{}] * 2}
    (tmp_path / "plan.json").write_text(json.dumps(meta))
    for r in (_record("000", "ddp-tcp", 0, 1.0, new), _record("001", "dlcp", 0, 2.0, new)):
        (tmp_path / "runs" / f"{r['run_id']}.json").write_text(json.dumps(r))
    summary = write_trace_report(tmp_path)
    text = (tmp_path / "results.md").read_text()
    assert summary["tcp"]["dlcp"]["max_cpu_wait_share"] == (0.07 if new else None)
    assert ("| 0.40 / 0.07 |" in text) == new
    assert ("| 0.40 / 0.80 (summed) |" in text) == (not new)
    assert ("(summed): runs recorded before the wait share" in text) == (not new)


def test_a_failed_runs_error_keeps_the_ranks_last_words() -> None:
    from experiments.trace_report import error_line

    error = ("ExperimentError: job 1 rank 1 exited with 2; its log /tmp/x/job1-rank1.log ends with:\n"
             "trace_worker rank 1: layer 46 of iteration 0 did not arrive within 60 s\n")
    assert error_line(error, 400) == ("ExperimentError: job 1 rank 1 exited with 2; its log /tmp/x/job1-rank1.log "
                                      "ends with: ... trace_worker rank 1: layer 46 of iteration 0 did not arrive "
                                      "within 60 s")
    assert error_line("OSError: boom", 400) == "OSError: boom" and len(error_line(error, 20)) == 20


def test_a_failed_rank_leaves_its_endpoint_state_and_stacks(capfd: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    import numpy as np

    from experiments.training.trace_worker import _dump_state

    window = SimpleNamespace(cwnd=30.5, flight_cap=122.2)
    reassembler = SimpleNamespace(_open={"key-49": SimpleNamespace(received=72904, values=np.zeros(80846))},
                                  stats="ReceiverStats(completed=215)")
    _dump_state(SimpleNamespace(window=window, in_flight=0, _room_waiters={}, _waits={}, reassembler=reassembler))
    err = capfd.readouterr().err
    assert "cwnd 30.5, flight cap 122.2, in flight 0, senders waiting for room 0, chunks awaiting answers 0" in err
    assert "incomplete: key-49: 72904 of 80846 values" in err and "ReceiverStats(completed=215)" in err
    assert "test_a_failed_rank_leaves_its_endpoint_state_and_stacks" in err  # this thread's stack
