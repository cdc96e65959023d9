"""Scheduler timing on small hand-checked traces, driven by the simulator engine.

Common setup: layers of 250 float32 elements (1000 bytes), forward time 0, no forward
overlap, so one iteration's time equals the end of its communication measured from the
start of backward. Times in the comments are worked out by hand.
"""

from __future__ import annotations

import pytest

from hosts.schedulers import (
    AlphaBeta,
    Layer,
    LossPolicy,
    SchedulerError,
    Transfer,
    Wait,
    available,
    create,
    layer_priority,
)
from hosts.schedulers.mgwfbp import plan_merge
from hosts.schedulers.prophet import profile_stages
from simulator.cluster import AlphaBetaLink
from simulator.engine import IterationTrace, simulate


def layers_with(backward: list[float], numel: int = 250, forward: float = 0.0) -> list[Layer]:
    return [Layer(i, f"l{i}", numel, forward, b) for i, b in enumerate(backward)]


def run(name: str, layers: list[Layer], cost: AlphaBeta, iterations: int = 3, **options: object):
    return simulate(layers, create(name, cost=cost, **options), AlphaBetaLink(cost),
                    iterations=iterations, overlap_forward=False)


def timeline(trace: IterationTrace) -> list[tuple[tuple[int, ...], float, float]]:
    return [(r.transfer.layer_indices, round(r.start, 9), round(r.end, 9)) for r in trace.transfers]


# Three layers, 1 s of backward each: gradients ready at 1 (layer 2), 2 (layer 1), 3 (layer 0).
THREE = layers_with([1.0, 1.0, 1.0])
COST = AlphaBeta(alpha=0.6, beta=0.0009)  # one layer: 0.6 + 0.9 = 1.5 s


def test_registry_names_and_errors() -> None:
    assert available() == ["dlcp", "fusion", "mgwfbp", "p3", "prophet", "synceasgd", "wfbp"]
    with pytest.raises(SchedulerError, match="unknown scheduler 'bytescheduler'"):
        create("bytescheduler")
    with pytest.raises(SchedulerError, match="bad options"):
        create("wfbp", bucket_bytes=3)
    with pytest.raises(SchedulerError, match="needs a cost model"):
        create("mgwfbp")


def test_wfbp_sends_each_layer_fifo() -> None:
    result = run("wfbp", THREE, COST)
    # layer 2: 1 -> 2.5; layer 1 waits for the link: 2.5 -> 4; layer 0: 4 -> 5.5
    assert timeline(result.steady) == [((2,), 1.0, 2.5), ((1,), 2.5, 4.0), ((0,), 4.0, 5.5)]
    assert result.iteration_s == pytest.approx(5.5)


def test_synceasgd_sends_one_message_after_backward() -> None:
    result = run("synceasgd", THREE, COST)
    # all 3000 bytes at 3: 0.6 + 2.7 = 3.3 -> ends 6.3
    assert timeline(result.steady) == [((0, 1, 2), 3.0, 6.3)]


def test_mgwfbp_merge_plan_by_hand() -> None:
    plan = plan_merge(THREE, COST)
    # l=2: layer 1 ready at 2, layer 2's comm starts at 1: wait 1 >= alpha -> no merge.
    # l=1: layer 0 ready at 3, layer 1's comm starts at 2.5: wait 0.5 < alpha -> merge into 0.
    assert plan.groups == ((2,), (1, 0))
    assert plan.tc == pytest.approx((0.6 + 1.8, 0.0, 1.5))
    assert plan.comm_end == pytest.approx(3.0 + 2.4)
    result = run("mgwfbp", THREE, COST)
    assert timeline(result.steady) == [((2,), 1.0, 2.5), ((0, 1), 3.0, 5.4)]
    assert result.iteration_s == pytest.approx(plan.comm_end)


def test_mgwfbp_prediction_includes_forward() -> None:
    layers = layers_with([1.0, 1.0, 1.0], forward=0.25)
    result = run("mgwfbp", layers, COST)
    assert result.iteration_s == pytest.approx(0.75 + plan_merge(layers, COST).comm_end)


def test_mgwfbp_merges_everything_when_startup_dominates() -> None:
    plan = plan_merge(THREE, AlphaBeta(alpha=5.0, beta=0.0009))
    assert plan.groups == ((2, 1, 0),)


def test_fusion_buckets_like_ddp() -> None:
    # first bucket closes once it holds >= 1500 bytes: layers 2 and 1; then layer 0.
    result = run("fusion", THREE, COST, bucket_bytes=1500, first_bucket_bytes=1500)
    # (2, 1) ready at 2: 0.6 + 1.8 -> 4.4; layer 0 ready at 3, waits: 4.4 -> 5.9
    assert timeline(result.steady) == [((1, 2), 2.0, 4.4), ((0,), 4.4, 5.9)]


def test_fusion_default_is_ddp_25_mib() -> None:
    sched = create("fusion")
    assert sched.bucket_bytes == 25 * 1024 * 1024
    big = [Layer(i, f"l{i}", 3 * 1024 * 1024, 0.0, 0.1) for i in range(12)]  # 12 MiB each
    assert sched.plan(big) == [(11,), (10, 9, 8), (7, 6, 5), (4, 3, 2), (1, 0)]


def test_p3_sends_front_layers_first() -> None:
    cost = AlphaBeta(alpha=0.6, beta=0.0009)  # one 500-byte partition: 1.05 s
    result = run("p3", THREE, cost, partition_bytes=500)
    # 1: (2,a) 1 -> 2.05. At 2.05 layer 1 is ready and overtakes the rest of layer 2;
    # at 3.10 layer 0 is ready and overtakes both.
    assert timeline(result.steady) == [
        ((2,), 1.0, 2.05), ((1,), 2.05, 3.1), ((0,), 3.1, 4.15), ((0,), 4.15, 5.2),
        ((1,), 5.2, 6.25), ((2,), 6.25, 7.3),
    ]
    assert result.steady.first_layer_update == pytest.approx(5.2)
    assert [r.transfer.priority for r in result.steady.transfers] == [2, 5, 7, 7, 5, 2]


def test_p3_credit_limits_bytes_in_flight() -> None:
    sched = create("p3", partition_bytes=1000, credit_bytes=2000)
    sched.start_iteration(layers_with([1.0] * 4), 0.0)
    for i in (3, 2, 1):
        sched.on_gradient_ready(i, 1.0)
    first, second = sched.next_transfer(1.0, True), sched.next_transfer(1.0, False)
    assert isinstance(first, Transfer) and isinstance(second, Transfer)
    assert [first.layer_indices, second.layer_indices] == [(1,), (2,)]
    assert isinstance(sched.next_transfer(1.0, False), Wait)
    sched.on_transfer_done(first, 2.0, 1000.0)
    third = sched.next_transfer(2.0, False)
    assert isinstance(third, Transfer) and third.layer_indices == (3,)


# Four layers; arrivals: layer 3 at 1.0, layer 2 at 1.1, layer 1 at 3.1, layer 0 at 3.2.
STEP = layers_with([0.1, 2.0, 0.1, 1.0])
STEP_COST = AlphaBeta(alpha=0.3, beta=0.001)  # one layer: 1.3 s; nominal rate 1000 B/s


def test_prophet_profiles_stages() -> None:
    profile = profile_stages([(3, 1.0), (2, 1.1), (1, 3.1), (0, 3.2)])
    assert profile.stages == ((3, 2), (1, 0))
    assert profile.gaps == pytest.approx((2.0,))


def test_prophet_sends_blocks_in_the_gaps_and_beats_p3() -> None:
    p3 = run("p3", STEP, STEP_COST, partition_bytes=1000)
    # p3: 3: 1 -> 2.3; 2: 2.3 -> 3.6; 0 overtakes 1: 3.6 -> 4.9; 1: 4.9 -> 6.2
    assert timeline(p3.steady) == [((3,), 1.0, 2.3), ((2,), 2.3, 3.6), ((0,), 3.6, 4.9), ((1,), 4.9, 6.2)]
    prophet = run("prophet", STEP, STEP_COST, partition_bytes=1000)
    # first iteration profiles and sends like p3
    assert timeline(prophet.iterations[0]) == timeline(p3.iterations[0])
    # then: stage (3, 2) ends at 1.1; gap 2.0 s x 1000 B/s = one 2000-byte block, front layer
    # first: 1.1 -> 3.4; layer 0 (3.2) switches to credit sending: 3.4 -> 4.7, then layer 1.
    assert timeline(prophet.steady) == [((2, 3), 1.1, 3.4), ((0,), 3.4, 4.7), ((1,), 4.7, 6.0)]
    segments = prophet.steady.transfers[0].transfer.segments
    assert [s.layer_index for s in segments] == [2, 3]
    assert prophet.steady.first_layer_update < p3.steady.first_layer_update
    assert prophet.iteration_s < p3.iteration_s


def test_prophet_bandwidth_rises_to_best_observed() -> None:
    sched = create("prophet", initial_bandwidth=100.0)
    sched.start_iteration(STEP, 0.0)
    sched.on_gradient_ready(3, 1.0)
    transfer = sched.next_transfer(1.0, True)
    assert isinstance(transfer, Transfer)
    sched.on_transfer_done(transfer, 2.0, 750.0)
    sched.on_transfer_done(transfer, 3.0, 500.0)
    assert sched.bandwidth == 750.0


def test_dlcp_tags_hands_out_everything_and_prioritises() -> None:
    result = run("dlcp", STEP, STEP_COST, partition_bytes=1000)
    steady = result.steady
    # handed out on arrival; the link serves the highest priority queued first
    assert timeline(steady) == [((3,), 1.0, 2.3), ((2,), 2.3, 3.6), ((0,), 3.6, 4.9), ((1,), 4.9, 6.2)]
    assert [round(r.handed_out, 9) for r in steady.transfers] == [1.0, 1.1, 3.2, 3.1]
    losses = {r.transfer.layer_indices[0]: r.transfer.loss for r in steady.transfers}
    assert losses[0] == LossPolicy(0.011, 0.011) and losses[1] == LossPolicy(0.011, 0.011)
    assert losses[2] == LossPolicy(0.004, 0.004) and losses[3] == LossPolicy(0.004, 0.004)
    with pytest.raises(SchedulerError, match="front_loss_bound"):
        create("dlcp", front_loss_bound=1.5)


def test_layer_priority_bands() -> None:
    assert [layer_priority(i, 16) for i in range(16)] == [7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0]
    assert layer_priority(0, 1) == 7


@pytest.mark.parametrize("name", ["wfbp", "synceasgd", "fusion", "mgwfbp", "p3", "prophet", "dlcp"])
def test_every_scheduler_sends_every_element_once(name: str) -> None:
    layers = [Layer(i, f"l{i}", 1000 + 337 * i, 0.001, 0.002 * (i % 3 + 1)) for i in range(9)]
    result = simulate(layers, create(name, cost=AlphaBeta(1e-4, 1e-9), partition_bytes=1500)
                      if name in ("p3", "prophet", "dlcp") else create(name, cost=AlphaBeta(1e-4, 1e-9)),
                      AlphaBetaLink(AlphaBeta(1e-4, 1e-9)), iterations=3)
    for trace in result.iterations:
        sent: dict[int, list[tuple[int, int]]] = {}
        for r in trace.transfers:
            for s in r.transfer.segments:
                sent.setdefault(s.layer_index, []).append((s.start, s.stop))
        for layer in layers:
            spans = sorted(sent[layer.index])
            assert spans[0][0] == 0 and spans[-1][1] == layer.numel
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
