"""Pieces of the training experiment that need no fabric: configurations as policies and
transport options, the bounded-loss tagging of any scheduler, the figures and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from controller.policy import load_policy
from experiments.configs import CONFIGURATIONS, select
from experiments.errors import ExperimentError
from experiments.metrics import WARM_UP, summarize
from experiments.report import markdown_table, plot, speedups
from experiments.training.options import TransportOptions
from experiments.training.processes import JobOutcome
from experiments.training.transport import BoundedLoss, make_scheduler
from hosts.model import model_from_sizes
from hosts.schedulers import Transfer, covered_numel


def test_each_configuration_is_a_valid_policy_with_its_mechanisms(tmp_path: Path) -> None:
    for config in CONFIGURATIONS:
        policy = load_policy(config.write_policy(tmp_path, [1, 2]))
        assert [job.id for job in policy.jobs] == [1, 2]
        for job in policy.jobs:
            priorities = {rule.priority for rule in job.layers}
            expected = {"fifo": {0}, "job": {5}, "layer": {7, 6, 5}}[config.queues]
            assert priorities == expected
            if config.queues == "layer":  # front layers (low tensor ids) most urgent
                first = next(r for r in job.layers if r.tensors[0] == 0)
                assert first.priority == max(priorities)
            assert job.dropping == config.dropping and job.ecn == config.ecn
            if config.dropping:   # the job's own queue, half of the fabric's 32 packets
                (rule,) = job.drop_classes
                assert rule.queue_threshold == 16 and rule.mag_class[1] < 128
            assert (job.spraying == "random") == config.spraying
        assert (config.grad_bound > 0) == config.dropping
        assert (config.comm == "gloo") == (config.name == "gloo")
    reference = select("gloo")[0]
    assert reference.queues == "fifo" and not (reference.dropping or reference.spraying)
    assert [c.name for c in select("dlcp, gloo")] == ["dlcp", "gloo"]
    assert [c.name for c in select(["qos"])] == ["qos"]
    with pytest.raises(ExperimentError, match="unknown configuration"):
        select("fastest")


def _drain(scheduler, layers) -> list[Transfer]:  # noqa: ANN001
    scheduler.start_iteration(layers, 0.0)
    for i in reversed(range(len(layers))):
        scheduler.on_gradient_ready(i, 0.0)
    out = []
    while isinstance(decision := scheduler.next_transfer(0.0, True), Transfer):
        out.append(decision)
        scheduler.on_transfer_done(decision, 0.0, 1e6)
    assert decision is None
    return out


def test_bounded_loss_tags_keep_the_wfbp_order() -> None:
    layers = model_from_sizes([4096, 64, 640, 10], backward_s=0.0)
    reliable = make_scheduler(TransportOptions(scheduler="wfbp", grad_bound=0.0))
    assert not isinstance(reliable, BoundedLoss)
    plain = _drain(reliable, layers)
    bounded_scheduler = make_scheduler(TransportOptions(scheduler="wfbp", grad_bound=0.1, front_loss_bound=0.1,
                                                        back_loss_bound=0.05))
    tagged = _drain(bounded_scheduler, layers)
    assert [t.segments for t in tagged] == [t.segments for t in plain]  # back layer first, as WFBP
    assert all(t.loss is None for t in plain)
    bounds = {t.layer_indices[0]: t.loss.loss_bound for t in tagged}
    assert bounds == {0: 0.1, 1: 0.1, 2: 0.05, 3: 0.05}
    assert covered_numel(tagged) == {i: layer.numel for i, layer in enumerate(layers)}


def _outcome(iteration_s: list[float], accuracies: dict[int, float]) -> JobOutcome:
    wall = np.cumsum(iteration_s)
    records = [{"iteration": i, "iteration_s": t, "wall_s": float(wall[i]), "accuracy": accuracies.get(i),
                "packets": 10, "retransmitted": 1 if i % 2 else 0} for i, t in enumerate(iteration_s)]
    return JobOutcome(
        records={0: records, 1: [dict(r, retransmitted=0) for r in records]},
        server={"server": {"pull_packets": 20 * len(records), "pull_retransmitted": 3, "gradient_loss": 0.02},
                "receive": {"data_packets": 15 * len(records), "drops": {"late": 4}}},
        worker_receive={0: {"data_packets": 10 * len(records)}, 1: {"data_packets": 10 * len(records)}},
    )


def test_run_figures_come_from_the_roles_lines() -> None:
    times = [5.0] + [0.1] * 50 + [0.4] * 49
    accuracies = {9: 0.5, 49: 0.94, 59: 0.92, 99: 0.96}
    run = summarize("x", _outcome(times, accuracies), target=0.93)
    assert WARM_UP == 1  # the figures below leave out the first (5 s) iteration only
    # By hand: 99 measured iterations, 50 of 0.1 s then 49 of 0.4 s. The median is the 50th
    # smallest (0.1 s); the 99th percentile lies between the 98th and 99th smallest (both 0.4 s).
    assert run.iteration_p50_s == pytest.approx(0.1)
    assert run.iteration_p99_s == pytest.approx(0.4)
    assert run.time_to_target_s == pytest.approx(sum(times[:50]))
    assert run.final_accuracy == 0.96
    n = len(times)
    assert run.packets_sent == 2 * 10 * n + 20 * n
    assert run.retransmitted == n // 2 + 3
    # Sent plus resent, minus what the server (with late arrivals) and the workers received.
    assert run.dropped == run.packets_sent + run.retransmitted - (15 * n + 4 + 20 * n)
    assert summarize("y", _outcome(times, {99: 0.9}), target=0.93).time_to_target_s is None


def test_report_tables_speedups_and_plots(tmp_path: Path) -> None:
    slow = summarize("baseline", _outcome([0.4] * 100, {49: 0.94, 99: 0.95}), target=0.93)
    fast = summarize("dlcp", _outcome([0.1] * 100, {49: 0.94, 99: 0.95}), target=0.93)
    never = summarize("dropping", _outcome([0.1] * 100, {99: 0.5}), target=0.93)
    ratios = speedups([slow, fast, never], "baseline")
    assert ratios["dlcp"] == pytest.approx(4.0) and ratios["baseline"] == pytest.approx(1.0)
    assert ratios["dropping"] is None
    table = markdown_table([slow, fast, never]).splitlines()
    assert len(table) == 5 and table[3].startswith("| dlcp |") and "not reached" in table[4]
    for path in plot([slow, fast, never], tmp_path):
        assert path.stat().st_size > 5000 and path.read_bytes()[:4] == b"\x89PNG"
    json.dumps(slow.to_dict())  # the figures are JSON as they are
