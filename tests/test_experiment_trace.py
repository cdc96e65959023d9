"""The trace-driven experiment's plan, policies and statistics (no fabric)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.policy import parse_policy
from experiments.errors import ExperimentError
from experiments.trace_configs import FULL, QUICK, TRACE_CONFIGS, TRACE_SCENARIOS, trace_config, trace_scenario
from experiments.trace_report import paired_ratio, run_figures, write_trace_report
from experiments.trace_sweep import SEED_BASE, plan_runs
from experiments.training.trace_worker import TraceJob


def test_plan_is_paired_and_interleaved() -> None:
    runs = plan_runs({"tcp": ("a", "b", "c"), "incast": ("a", "b")}, 3)
    assert len(runs) == 3 * (3 + 2)
    # round r: every configuration of each scenario once, rotated by r, all with seed 2000 + r
    round1 = [(r.scenario, r.config) for r in runs if r.repetition == 1]
    assert round1 == [("tcp", "b"), ("tcp", "c"), ("tcp", "a"), ("incast", "b"), ("incast", "a")]
    assert {r.seed for r in runs if r.repetition == 2} == {SEED_BASE + 2}
    assert len({r.run_id for r in runs}) == len(runs)


def test_sweeps_name_known_scenarios_and_configurations() -> None:
    for sweep in (QUICK, FULL):
        for name, configs in sweep.items():
            trace_scenario(name)
            for c in configs:
                trace_config(c)
    with pytest.raises(ExperimentError, match="unknown configuration"):
        trace_config("nope")
    assert len(trace_scenario("incast").jobs[0].hosts) >= 5  # a server and at least 4 workers


@pytest.mark.parametrize("config", [c.name for c in TRACE_CONFIGS])
def test_every_configuration_is_a_valid_policy(config: str) -> None:
    cfg = trace_config(config)
    policy = parse_policy(cfg.policy(TRACE_SCENARIOS["multitenant"].job_ids), "<test>")
    assert [j.id for j in policy.jobs] == [1, 2]
    job = cfg.job(TraceJob(), TRACE_SCENARIOS["incast"].jobs[0], seed=7)
    assert job.collective == "ps" and job.seed == 7 and job.comm == cfg.comm
    assert (job.dscp != 0) == (cfg.queues == "tcp-class")
    assert (job.grad_bound > 0) == cfg.dropping


def test_paired_ratio_pairs_by_round() -> None:
    # pairs (2, 1), (4, 2), (3, 1): ratios 2, 2, 3 -> median 2; the CI brackets it
    s = paired_ratio([2.0, 4.0, 3.0], [1.0, 2.0, 1.0])
    assert s["median"] == 2.0 and s["pairs"] == 3
    assert s["low"] is not None and s["low"] <= 2.0 <= s["high"]
    assert paired_ratio([2.0], [1.0])["low"] is None  # one pair: no interval


def _record(run_id: str, scenario: str, config: str, rep: int, times: list[float], starved: bool = False) -> dict:
    recs = [{"iteration": i, "iteration_s": t, "compute_s": 0.3, "forward_wait_s": 0.0, "first_send_s": 0.1 + i,
             "last_arrival_s": 0.4 + i, "lost_by_tensor": {}} for i, t in enumerate(times)]
    return {"run_id": run_id, "scenario": scenario, "config": config, "repetition": rep, "status": "ok",
            "jobs": {"1": {"ranks": {"0": {"role": "worker", "cpu_share": 0.2, "starvation": 0.1,
                                           "totals": {"lost": 0, "reduced": 100}, "records": recs}}}},
            "switch": {"magnitude_drops": 0}, "background": [], "max_cpu_share": 0.2, "cpu_bound": False,
            "cpu_starved": starved, "max_starvation": 0.9 if starved else 0.1}


def test_report_excludes_starved_runs_from_the_headline(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    meta = {"command": "test", "repetitions": 2, "job": {"model": "resnet50", "precision": "fp32", "iterations": 3},
            "scale": {"b": 13.0, "k": 8.0, "real_gbps": 25.0, "emulated_mbps": 240.0, "capacity_ratio": 104.2},
            "runs": [{}] * 4}
    (tmp_path / "plan.json").write_text(json.dumps(meta))
    records = [_record("000", "tcp", "ddp-tcp", 0, [9.0, 1.0, 1.0]), _record("001", "tcp", "dlcp", 0, [9.0, 0.5, 0.5]),
               _record("002", "tcp", "ddp-tcp", 1, [9.0, 1.0, 1.0]),
               _record("003", "tcp", "dlcp", 1, [9.0, 5.0, 5.0], starved=True)]
    for r in records:
        (tmp_path / "runs" / f"{r['run_id']}.json").write_text(json.dumps(r))
    assert run_figures(records[0])["p50_s"] == 1.0  # the first iteration is left out
    summary = write_trace_report(tmp_path)
    row = summary["tcp"]["dlcp"]
    assert row["cpu_bound"] == 1 and row["p50_s"] == 0.5
    assert row["speedup_p50"]["median"] == 2.0 and row["speedup_p50"]["pairs"] == 1
    text = (tmp_path / "results.md").read_text()
    assert "quick subset" in text and "| dlcp | 2 (1) |" in text
    assert (tmp_path / "trace_tcp.png").exists()


def test_commodity_configuration_marks_what_the_switches_class_by() -> None:
    """The commodity profile: the switches class DLCP packets by the DSCP the hosts mark, so
    each layer class's DSCP in the policy is the one the hosts' marking gives that priority."""
    from experiments.training.trace_job import _marking

    cfg = trace_config("commodity")
    policy = parse_policy(cfg.policy([1]), "<test>")
    assert policy.profile == "commodity"
    job = cfg.job(TraceJob(), TRACE_SCENARIOS["tcp"].jobs[0], seed=3)
    assert job.marking == "commodity" and job.grad_bound == 0.10
    marking = _marking(job)
    rules = policy.jobs[0].layers
    assert {r.priority: r.dscp for r in rules} == {7: 46, 6: 34, 5: 26}  # EF, AF41, AF31
    for rule in rules:
        assert marking.dscp[rule.priority] == rule.dscp
    # drop-eligible packets leave Not-ECT (ECN 00), the others ECT(0) (10), DSCP in the upper six bits
    import numpy as np

    tos = marking.data_tos(7, np.array([True, False]))
    assert list(tos) == [46 << 2, (46 << 2) | 0b10]
    assert trace_config("dlcp").job(TraceJob(), TRACE_SCENARIOS["tcp"].jobs[0], seed=3).marking == "p4"


def test_switch_figures_count_the_queue_steps() -> None:
    """Early drops and CE marks of the per-queue steps (commodity profile) reach the run record."""
    from controller.counters import SwitchCounters
    from experiments.switch_counters import difference

    before = {"s1": SwitchCounters(queue_red={(2, 5): (3, 300)}, queue_marks={(2, 5): (1, 100)})}
    after = {"s1": SwitchCounters(queue_red={(2, 5): (10, 1000), (3, 6): (4, 400)},
                                  queue_marks={(2, 5): (6, 600)}),
             "s2": SwitchCounters(queue_marks={(1, 7): (2, 200)})}
    figures = difference(before, after, job_id=1)
    assert figures.queue_red_drops == (10 - 3) + 4
    assert figures.queue_ecn_marks == (6 - 1) + 2
    assert figures.magnitude_drops == 0 and figures.ecn_marks == 0


def test_switch_figures_count_sprayed_packets_and_queues_used() -> None:
    """Spraying and the layer queues acted: sprayed packets per member and packets per priority."""
    from controller.counters import SwitchCounters
    from experiments.switch_counters import difference

    before = {"s1": SwitchCounters(sprayed={(0, 0): (5, 0)}, port_prio={(1, 7): (10, 0), (1, 0): (4, 0)})}
    after = {"s1": SwitchCounters(sprayed={(0, 0): (5, 0), (0, 1): (8, 0)},
                                  port_prio={(1, 7): (30, 0), (2, 7): (5, 0), (1, 0): (4, 0)}),
             "s2": SwitchCounters(sprayed={(1, 0): (2, 0)}, port_prio={(3, 5): (6, 0)})}
    figures = difference(before, after, job_id=1)
    assert figures.sprayed_packets == 8 + 2 and figures.sprayed_members == 2
    assert figures.tx_by_priority == {5: 6, 7: 20 + 5}


def test_leave_one_out_configurations_differ_from_full_dlcp_in_one_mechanism() -> None:
    full = trace_config("dlcp").policy([1])["jobs"][0]
    no_drop = trace_config("dlcp-no-dropping").policy([1])["jobs"][0]
    assert "dropping" not in no_drop and no_drop["ecn"] == full["ecn"] and no_drop["layers"] == full["layers"]
    assert trace_config("dlcp-no-dropping").job(TraceJob(), TRACE_SCENARIOS["tcp"].jobs[0], 1).grad_bound == 0
    no_spray = trace_config("dlcp-no-spraying").policy([1])["jobs"][0]
    assert no_spray["spraying"] == "off" and full["spraying"] == "random"
    assert {k: v for k, v in no_spray.items() if k not in ("spraying", "name")} == \
        {k: v for k, v in full.items() if k not in ("spraying", "name")}
    no_prio = trace_config("dlcp-no-priority")
    assert {r["priority"] for r in no_prio.policy([1])["jobs"][0]["layers"]} == {5}
    assert (no_prio.scheduler, no_prio.overlap) == ("fusion", "ddp")
    assert no_prio.dropping and no_prio.spraying and no_prio.ecn
