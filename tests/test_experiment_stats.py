"""The sweep's statistics on synthetic runs, against values computed by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from experiments.runner import plan
from experiments.stats import difference, median_ci, run_metrics, speedup, summarize

TARGET = 0.9


def _run(config: str, curve: list[tuple[float, float]], *, rep: int = 0, status: str = "ok",
         totals: list[dict[str, int]] | None = None, background: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A run whose rank 0 evaluated `curve` ((wall s, accuracy) at iterations 5, 10, ...)."""
    if status != "ok":
        return {"scenario": "s", "config": config, "repetition": rep, "status": status, "error": "boom"}
    records = []
    for i, (wall, acc) in enumerate(curve):
        records.append({"iteration": 5 * i + 3, "wall_s": wall - 0.1, "iteration_s": 0.1, "accuracy": None})
        records.append({"iteration": 5 * i + 4, "wall_s": wall, "iteration_s": 0.2 + i, "accuracy": acc})
    totals = totals or [{"packets": 100, "retransmitted": 10, "lost": 5, "reduced": 100},
                        {"packets": 100, "retransmitted": 0, "lost": 15, "reduced": 100}]
    ranks = {str(r): {"records": records if r == 0 else [], "totals": t, "receive": {"data_packets": 100}}
             for r, t in enumerate(totals)}
    return {"scenario": "s", "config": config, "repetition": rep, "status": "ok", "jobs": {"1": {"ranks": ranks}},
            "background": background or [], "switch": {"magnitude_drops": 7}}


def test_run_metrics_by_hand() -> None:
    flows = [{"protocol": "tcp", "goodput_mbps": 4.0}, {"protocol": "udp", "goodput_mbps": 2.0, "loss": 0.25},
             {"protocol": "rr", "goodput_mbps": 0.1, "fct_s": [0.001, 0.002, 0.003], "failed": 2}]
    m = run_metrics(_run("dlcp", [(1.0, 0.5), (2.0, 0.91), (3.0, 0.95)], background=flows), TARGET)
    assert m["time_to_target_s"] == 2.0  # first evaluation at or above 0.9
    assert m["iterations_to_target"] == 10  # it happened after iteration index 9
    assert m["final_accuracy"] == 0.95 and m["train_s"] == 3.0
    # Iteration times after the first record: 0.2, 0.1, 1.2, 0.1, 2.2 -> median 0.2
    assert m["iteration_p50_s"] == pytest.approx(0.2)
    assert m["gradient_loss"] == pytest.approx(20 / 200)
    assert (m["packets"], m["retransmitted"]) == (200, 10)
    assert m["dropped"] == 200 + 10 - 2 * 100  # sent and resent, less what the ranks received
    assert m["magnitude_drops"] == 7
    assert m["bg_goodput_mbps"] == 6.0 and m["bg_udp_loss"] == 0.25  # rr is not a long flow
    assert m["rr_fct_p50_ms"] == pytest.approx(2.0) and m["rr_failed"] == 2


def test_a_run_that_misses_the_target_is_censored_at_its_training_time() -> None:
    m = run_metrics(_run("gloo", [(1.0, 0.5), (4.0, 0.8)]), TARGET)
    assert m["time_to_target_s"] is None and m["iterations_to_target"] is None
    summary = summarize([_run("gloo", [(1.0, 0.5), (4.0, 0.8)]), _run("gloo", [(1.0, 0.95)], rep=1),
                         _run("gloo", [(2.0, 0.95)], rep=2), _run("gloo", [], rep=3, status="failed")], TARGET)
    row = summary["s"]["gloo"]
    assert (row["ok"], row["failed"], row["not_reached"]) == (3, 1, 1)
    assert row["time_to_target_s"]["median"] == 2.0  # median of 4.0 (censored), 1.0, 2.0


def test_median_and_its_interval() -> None:
    est = median_ci([3.0, 1.0, 2.0, None, float("nan")])
    assert est is not None and est.median == 2.0 and est.n == 3
    assert est.low is not None and est.high is not None
    assert 1.0 <= est.low <= 2.0 <= est.high <= 3.0  # a percentile interval of medians stays in range
    constant = median_ci([5.0] * 5)
    assert constant is not None and (constant.low, constant.high) == (5.0, 5.0)
    single = median_ci([4.0])
    assert single is not None and single.low is None
    assert median_ci([]) is None


def test_speedup_and_accuracy_difference() -> None:
    est = speedup([10.0] * 5, [5.0] * 5)
    assert est is not None and (est.median, est.low, est.high) == (2.0, 2.0, 2.0)
    spread = speedup([8.0, 10.0, 12.0, 9.0, 11.0], [4.0, 5.0, 6.0, 5.5, 4.5])
    assert spread is not None and spread.median == pytest.approx(10.0 / 5.0)
    # Resampled medians lie within the samples' range: ratio between 8/6 and 12/4.
    assert 8 / 6 <= spread.low <= 2.0 <= spread.high <= 12 / 4
    diff = difference([0.90, 0.92, 0.94], [0.95, 0.95, 0.95])
    assert diff is not None and diff.median == pytest.approx(0.03)
    assert diff.low == pytest.approx(0.01) and diff.high == pytest.approx(0.05)  # 0.95 - {0.94 .. 0.90}


def test_summary_speedups_against_each_reference() -> None:
    runs = [_run(c, [(t, 0.95)], rep=r) for r in range(3) for c, t in (("gloo", 6.0), ("qos", 4.0), ("dlcp", 2.0))]
    row = summarize(runs, TARGET)["s"]["dlcp"]
    assert row["speedup_vs_gloo"]["median"] == 3.0 and row["speedup_vs_qos"]["median"] == 2.0
    assert row["accuracy_vs_gloo"]["median"] == 0.0


def test_plan_interleaves_configurations_and_seeds_each_repetition() -> None:
    runs = plan({"a": ("x", "y", "z"), "b": ("x", "y")}, 3)
    assert [(r.config, r.repetition) for r in runs if r.scenario == "a"] == [
        ("x", 0), ("y", 0), ("z", 0), ("y", 1), ("z", 1), ("x", 1), ("z", 2), ("x", 2), ("y", 2)]
    assert [r.config for r in runs if r.scenario == "b"] == ["x", "y", "y", "x", "x", "y"]
    assert {r.seed for r in runs if r.repetition == 1} == {runs[3].seed} and len({r.seed for r in runs}) == 3
    assert [r.index for r in runs] == list(range(len(runs)))
    assert np.unique([r.run_id for r in runs]).size == len(runs)


def test_accuracy_against_the_reference_of_the_same_round() -> None:
    runs = [_run("gloo", [(1.0, 0.90)], rep=0), _run("dlcp", [(1.0, 0.88)], rep=0),
            _run("gloo", [(1.0, 0.80)], rep=1), _run("dlcp", [(1.0, 0.81)], rep=1),
            _run("gloo", [(1.0, 0.95)], rep=2), _run("dlcp", [(1.0, 0.95)], rep=2),
            _run("dlcp", [(1.0, 0.50)], rep=3)]  # no gloo run in round 3: left out
    for r, seed in zip(runs, (0, 0, 1, 1, 2, 2, 3)):
        r["seed"] = seed
    row = summarize(runs, 0.0)["s"]["dlcp"]
    assert row["accuracy_vs_gloo_paired"]["median"] == pytest.approx(0.0)  # of -0.02, +0.01, 0.0
    assert row["accuracy_vs_gloo_paired"]["n"] == 3
