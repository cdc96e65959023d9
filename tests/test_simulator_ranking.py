"""`sim validate`'s ranking of configurations (clearly ordered pairs) and the merged DLCP
configuration, on hand-worked values."""

from __future__ import annotations

import pytest

from simulator.fabric_model import CollectiveLink, port_model
from simulator.fabric_runs import TRACE_CONFIGS, Run
from simulator.run_model import _scheduler
from simulator.ranking import clear_verdict, rank_row


def test_clear_verdict() -> None:
    assert clear_verdict(True, 3, 3) == "yes"
    assert clear_verdict(False, 3, 3) == "yes (differs only in ties)"
    assert clear_verdict(False, 2, 3) == "no"
    assert clear_verdict(True, 0, 0) == "yes"


def test_a_ranking_that_differs_only_in_a_tie() -> None:
    # a's runs all take 1 s; b's two runs 2 and 3 s, c's 2.5 and 2.6 s. Pooled p50: a 1, b 2.5, c 2.55.
    # Whole runs are resampled with the same draws for every configuration (the sweeps' rounds are
    # paired): b's p50 is 2, 2.5 or 3 (1/4, 1/2, 1/4) with c's 2.5, 2.55 or 2.6 alongside, so the
    # gap c - b is +0.5, +0.05 or -0.4: b < c in 3/4 of resamples, and the paired 95% interval of
    # the gap (-0.4 to +0.5) includes 0: a tie. a < b and a < c always (gap at least 1): clear.
    times = {"a": [[1.0], [1.0], [1.0]], "b": [[2.0], [3.0]], "c": [[2.5], [2.6]]}
    measured = {"a": 1.0, "b": 2.5, "c": 2.55}
    row = rank_row(measured, {"a": 1.0, "b": 2.7, "c": 2.6}, times)
    assert row[:4] == ["a < b < c", "a < c < b", "no", "yes (differs only in ties)"]
    assert row[4:7] == ["2 of 3", "2 of 2", "1 of 1"]  # the one tie, predicted the other way
    share = float(row[7].removeprefix("b < c (").removesuffix("%, tie)")) / 100
    assert row[7].startswith("b < c (") and row[7].endswith(", tie)") and abs(share - 3 / 4) < 0.05
    wrong = rank_row(measured, {"a": 3.0, "b": 2.0, "c": 2.6}, times)  # a after both: two clear pairs lost
    assert wrong[2:7] == ["no", "no", "1 of 3", "0 of 2", "0 of 1"]
    assert "a < b (100%, clear)" in wrong[7] and "a < c (100%, clear)" in wrong[7]
    assert rank_row(measured, measured, times)[2:8] == ["yes", "yes", "3 of 3", "2 of 2", "0 of 1", "-"]


def test_a_tie_is_a_gap_whose_paired_interval_includes_zero() -> None:
    import numpy as np

    from simulator.ranking import measured_tie

    first = np.zeros(100)
    # 100 resampled gaps: 2 at -1, 98 at +1. The 2.5th percentile interpolates between the 3rd
    # and 4th smallest (+1 and +1): +1, so the 95% interval excludes 0; with 3 at -1 it lies
    # between -1 (3rd) and +1 (4th) at 0.475 of the way: -0.05, and the interval includes 0.
    two = np.array([-1.0] * 2 + [1.0] * 98)
    three = np.array([-1.0] * 3 + [1.0] * 97)
    assert not measured_tie(first, two)
    assert measured_tie(first, three)
    assert not measured_tie(first, -two)  # clearly the other way round (-1 to -1): not a tie either


def _run(config: str, b: float) -> Run:
    return Run("s", "r", "lossy-0.1", config, 20_000.0, 51, [1.0], job={"model": "resnet50", "b": b, "k": 8})


@pytest.mark.parametrize(("b", "numel"), [(1.0, 524_288), (1_000 / 76.8, 40_265)])
def test_dlcp_merged_merges_as_the_trace_worker(b: float, numel: int) -> None:
    # 2 MiB / b bytes of float32: b = 1 gives 2,097,152 / 4; b = 13.02 (25 Gbit/s at 20,000 frames
    # a second and k = 8) gives floor(161,061.27) // 4 = 40,265 values.
    link = CollectiveLink(port_model(port_pps=20_000, queue_packets=51, background="none",
                                     job_above_background=True), 2)
    assert _scheduler(_run("dlcp-merged", b), link).merge_numel == numel
    assert _scheduler(_run("dlcp", b), link).merge_numel == 0
    merged, plain = _run("dlcp-merged", b), _run("dlcp", b)
    assert merged.family == plain.family == "trace/dlcp+ecn"  # the same transport: one host cost
    assert TRACE_CONFIGS["dlcp-merged"].bound == TRACE_CONFIGS["dlcp"].bound == 0.10


def test_the_spread_of_iterations_comes_from_the_other_sweeps() -> None:
    from simulator.validate import iteration_spread

    def run(sweep: str, config: str, times: list[float], job: bool = True) -> Run:
        return Run(sweep, "r", "tcp", config, 20_000.0, 51, times, job={"model": "resnet50"} if job else None)

    runs = [run("a", "ddp-tcp", [1.0, 2.0, 3.0]),  # p50 2: 0.5, 1, 1.5
            run("b", "p3-tcp", [2.0, 2.0, 4.0]),  # the same family (kernel TCP), p50 2: 1, 1, 2
            run("b", "dlcp", [5.0, 10.0]),  # another family, alone: no other sweep
            run("c", "gloo", [1.0, 9.0], job=False)]  # the CNN job: not a kind the term applies to
    spread = iteration_spread(runs)
    # By configuration: ddp-tcp ran only in sweep a, p3-tcp only in b, so each takes the family's.
    assert sorted(spread) == [("a", "trace/tcp", "ddp-tcp"), ("b", "trace/tcp", "p3-tcp")]
    assert spread[("a", "trace/tcp", "ddp-tcp")].tolist() == [1.0, 1.0, 2.0]
    assert spread[("b", "trace/tcp", "p3-tcp")].tolist() == [0.5, 1.0, 1.5]
    runs.append(run("c", "ddp-tcp", [4.0, 6.0, 8.0]))  # p50 6: 2/3, 1, 4/3
    spread = iteration_spread(runs)
    assert spread[("a", "trace/tcp", "ddp-tcp")].tolist() == pytest.approx([2 / 3, 1.0, 4 / 3])  # c's ddp-tcp only
    assert spread[("c", "trace/tcp", "ddp-tcp")].tolist() == [0.5, 1.0, 1.5]
    pooled = iteration_spread(runs, by_config=False)[("c", "trace/tcp", "ddp-tcp")]
    assert pooled.tolist() == [0.5, 1.0, 1.5, 1.0, 1.0, 2.0]  # a's and b's kernel TCP runs


def test_jobs_share_the_switches_by_their_ranks_cpu_use() -> None:
    from simulator.fabric_runs import tenant_share

    job = {"ranks": {"0": {"cpu_share": 0.3}, "1": {"cpu_share": 0.1}}}  # mean 0.2 of a core
    # A bulk job whose ranks use 0.05 and 0.15 (mean 0.1): the measured job moves 0.2 / 0.3 of the packets.
    assert tenant_share([job], {"job2 rank0": 0.05, "job2 rank1": 0.15, "gtl1": 0.5}) == pytest.approx(2 / 3)
    assert tenant_share([job], {}) == pytest.approx(1.0)  # alone
    other = {"ranks": {"0": {"cpu_share": 0.6}}}  # two measured jobs, both pooled: 0.4 / 0.8
    assert tenant_share([job, other], {}) == pytest.approx(0.5)
    assert tenant_share([{"ranks": {"0": {"cpu_share": None}}}], {}) is None


def test_a_star_splits_the_fifo_between_its_pushes_and_the_background() -> None:
    from simulator.fabric_model import split_fifo

    fifo = port_model(port_pps=1000, queue_packets=32, background="tcp", job_above_background=False)
    # CUBIC's standing queue 27.2 packets + 3 hops = 30.2, held by 4 pushes and the background's
    # flow: 6.04 packets each, Mathis (1.22 / 6.04)^2 = 4.08%; max-min gives the pushes 4/5.
    star = split_fifo(fifo, 4)
    assert star.share == pytest.approx(0.8) and star.loss_rate == pytest.approx((1.22 / 6.04) ** 2)
    assert star.queued_packets == fifo.queued_packets
    above = port_model(port_pps=1000, queue_packets=32, background="tcp", job_above_background=True)
    assert split_fifo(above, 4) == above  # one class up: no shared queue, no loss


def test_the_clean_sweeps_are_summarised_alone() -> None:
    import numpy as np

    from simulator.validate import clean_set

    def run(sweep: str, config: str, times: list[float]) -> Run:
        return Run(sweep, "r", "tcp", config, 20_000.0, 51, times, job={"model": "resnet50"})

    runs = [run("trace10-x", "ddp-tcp", [1.0, 1.0, 1.0]),  # predicted 1.1 s: +10%
            run("trace10-x", "dlcp", [2.0, 2.0]),  # predicted 1.0 s: -50%, and before ddp-tcp
            run("old", "ddp-tcp", [5.0]),  # another sweep: not in the clean set
            run("trace10-x", "p3-tcp", [1.5])]  # out of reach (no draws): left out
    draws = {0: np.array([1.1, 1.1]), 1: np.array([1.0, 1.0]), 2: np.array([5.0])}
    section, errors, ranks = clean_set(runs, draws, "trace10-")
    assert errors == {"trace": pytest.approx([0.1, 0.5])}
    assert ranks == [["trace", "tcp", "20,000", "ddp-tcp < dlcp", "dlcp < ddp-tcp", "no", "no", "0 of 1", "0 of 1",
                      "0 of 0", "ddp-tcp < dlcp (100%, clear)", "yes", "0 of 0", "1 of 1",
                      "ddp-tcp < dlcp (not paired)"]]  # one run each: too few rounds for the paired rule
    assert "| trace | tcp | 20,000 | ddp-tcp | 1 | 1,000.0 | 1,100.0 | +10% |" in section
    assert "| trace | tcp | 20,000 | dlcp | 1 | 2,000.0 | 1,000.0 | -50% |" in section
    assert "The runs of trace10-x alone" in section and "old" not in section and "p3-tcp" not in section
    assert "**30%** over 2 job x scenario" in section  # the median of 10% and 50%
    assert clean_set(runs, draws, "none-") == ("", {}, [])


def test_the_paired_rule_judges_a_pair_only_on_rounds_run_side_by_side() -> None:
    from simulator.ranking import paired_verdict

    a = [[1.0, 1.0], [1.1, 1.1], [1.2, 1.2]]
    b = [[2.0, 2.0], [2.1, 2.1], [2.2, 2.2]]
    rounds = [("s", "0"), ("s", "1"), ("s", "2")]
    assert paired_verdict(a, rounds, b, rounds) == "clear"  # b is 0.9-1.1 s slower in every resample
    # The same times from another sweep: never side by side, not judged (the first rule calls it clear).
    assert paired_verdict(a, rounds, b, [("t", "0"), ("t", "1"), ("t", "2")]) == "not paired"
    assert paired_verdict(a, rounds, b[:2], rounds[:2]) == "not paired"  # 2 rounds, fewer than 3
    # Round 0 has b a second slower, round 1 a second faster, round 2 equal: resamples of only
    # round 0 give +1 s, of only round 1 -1 s, so the 95% interval holds 0.
    assert paired_verdict([[1.0], [2.0], [1.5]], rounds, [[2.0], [1.0], [1.5]], rounds) == "tie"


def test_rank_row_prints_the_paired_rule_beside_the_first() -> None:
    times = {"a": [[1.0, 1.0], [1.1, 1.1], [1.2, 1.2]], "b": [[2.0, 2.0], [2.1, 2.1], [2.2, 2.2]],
             "c": [[3.0, 3.0], [3.1, 3.1], [3.2, 3.2]]}
    keys = {"a": [("s", "0"), ("s", "1"), ("s", "2")], "b": [("s", "0"), ("s", "1"), ("s", "2")],
            "c": [("t", "0"), ("t", "1"), ("t", "2")]}  # c ran in another sweep
    measured = {"a": 1.1, "b": 2.1, "c": 3.1}
    row = rank_row(measured, {"a": 1.0, "b": 3.5, "c": 3.0}, times, keys)  # b and c swapped
    assert row[5] == "2 of 3" and row[7] == "b < c (100%, clear)"  # the first rule: all three clear
    # The paired rule judges a < b alone (clear, kept); b < c and a < c never ran side by side.
    assert row[8:] == ["yes", "1 of 1", "2 of 3", "b < c (not paired)"]
