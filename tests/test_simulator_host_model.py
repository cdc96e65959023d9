"""The validation model's host and loss terms, figures by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hosts.schedulers import Segment, Transfer
from simulator.errors import SimulatorError
from simulator.fabric_model import CollectiveLink, port_model
from simulator.fabric_runs import Run
from simulator.host_model import available, best_cost, cross_validated, host_pps, starvation_from_load
from simulator.traces import Layer, ModelTrace
from simulator.run_model import predict_run, recovery_rounds
from tests.sim_validate_helpers import ONE_LAYER, TRACE_PLAN, iterations, one_run


def test_cpu_available_from_starvation_or_load() -> None:
    assert starvation_from_load(8.0) == pytest.approx(0.75)  # 8 runnable tasks on 2 CPUs: each waits 3/4
    assert starvation_from_load(1.5) == 0.0  # fewer tasks than CPUs: nobody waits
    assert available(0.9, 8.0) == pytest.approx(0.1)  # a recorded starvation wins over the load
    assert available(None, 4.0) == pytest.approx(0.5)
    assert available(None, None) == 1.0
    assert host_pps(100e-6, 0.5) == pytest.approx(5000.0)  # 100 us a packet at half a CPU
    assert host_pps(0.0, 0.5) == float("inf")
    with pytest.raises(SimulatorError, match="starvation must lie"):
        available(1.5, None)


def test_host_time_adds_to_the_port_time() -> None:
    port = port_model(port_pps=1000, queue_packets=32, background="none", job_above_background=True)
    transfer = Transfer(segments=(Segment(0, 0, 3610),), nbytes=14440)  # ten 1,444-byte packets
    # Ring of two: 14,440 bytes through the busiest port at 1,444,000 B/s = 10 ms; two steps
    # of five packets = 10 packets sent and 10 received, at 1,000 a second = 20 ms more.
    assert CollectiveLink(port, 2).seconds(transfer) == pytest.approx(0.010)
    assert CollectiveLink(port, 2, host_pps=1000.0).seconds(transfer) == pytest.approx(0.030)
    assert CollectiveLink(port, 2, host_pps=4000.0).seconds(transfer) == pytest.approx(0.015)
    # A star of a server and 2 workers: the server's port carries 2 pushes and 2 pulls of 10
    # packets (40 ms at the port), which are also all the server handles: 40 at 500/s = 80 ms more.
    star = CollectiveLink(port, 3, "star", host_pps=500.0)
    assert star.host_packets(14440) == 40
    assert star.seconds(transfer) == pytest.approx(0.120)


def test_best_cost_has_the_smallest_median_error() -> None:
    grid = [0.0, 1.0, 2.0]
    # Three runs measured 10 s; predictions per cost: median errors 50%, 10%, 20%.
    curves = [[5.0, 11.0, 12.0], [5.0, 9.0, 12.0], [5.0, 12.0, 8.0]]
    assert best_cost(grid, curves, [10.0, 10.0, 10.0]) == 1.0
    assert best_cost(grid, [[10.0, 10.0, 10.0]], [10.0]) == 0.0  # ties: the smaller cost
    with pytest.raises(SimulatorError, match="2 prediction curves for 1 runs"):
        best_cost(grid, curves[:2], [10.0])


def test_best_cost_by_groups_counts_each_group_once() -> None:
    grid = [0.0, 1.0, 2.0]
    # Group a: three runs (measured 10 s) that need cost 1; groups b and c one run each that
    # need cost 0. Per run the median error is 50% at cost 0 and 0% at cost 1 (a's three
    # outvote); per group 0% at cost 0 (b and c) and 100% at cost 1.
    curves = [[5.0, 10.0, 15.0]] * 3 + [[10.0, 20.0, 30.0]] * 2
    measured = [10.0] * 5
    assert best_cost(grid, curves, measured) == 1.0
    assert best_cost(grid, curves, measured, ["a", "a", "a", "b", "c"]) == 0.0
    runs = [("s1", "f", 10.0)] * 3 + [("s2", "f", 10.0), ("s3", "f", 10.0)]
    # Leaving s3 out: a's three runs against b's one, per group the median of 50% and 0% at
    # cost 0 (25%) and of 0% and 100% at cost 1 (50%).
    assert cross_validated(runs, curves, grid, groups=["a", "a", "a", "b", "c"])[("s3", "f")] == (0.0, 4)
    assert cross_validated(runs, curves, grid)[("s3", "f")] == (1.0, 4)


def test_cross_validation_leaves_the_predicted_sweep_out() -> None:
    grid = [0.0, 1.0, 2.0]
    runs = [("a", "f", 10.0), ("a", "f", 10.0), ("b", "f", 10.0), ("c", "g", 10.0)]
    curves = [[10.0, 20.0, 30.0], [10.0, 20.0, 30.0], [5.0, 7.0, 10.0], [10.0, 10.0, 10.0]]
    costs = cross_validated(runs, curves, grid)
    assert costs[("a", "f")] == (2.0, 1)  # fitted on sweep b's run alone, which needs cost 2
    assert costs[("b", "f")] == (0.0, 2)  # fitted on sweep a's two runs, which need none
    assert ("c", "g") not in costs  # no other sweep ran family g


def test_recovery_rounds_count_lost_retransmissions() -> None:
    rng = np.random.default_rng(1)
    assert not recovery_rounds(1000, 0.0, "dlcp", rng, 100).any()
    # One packet lost with p = 1/2 per try: sum over r of 2^-r (8 rounds at most) = 0.996.
    assert recovery_rounds(1, 0.5, "dlcp", rng, 40_000).mean() == pytest.approx(0.996, abs=0.02)
    # TCP exposes only its last 3 segments: sum over r of 1 - (1 - 2^-r)^3 = 2.131.
    assert recovery_rounds(1000, 0.5, "tcp", rng, 40_000).mean() == pytest.approx(2.131, abs=0.03)


def test_a_run_record_gives_the_busiest_host_its_loss_and_job(tmp_path: Path) -> None:
    records = iterations([9.0, 2.0, 4.0])
    ranks = {"0": {"role": "server", "starvation": 0.8, "totals": {"packets": 900, "retransmitted": 9},
                   "records": records},
             "1": {"role": "worker", "starvation": 0.9, "totals": {"packets": 100, "retransmitted": 1},
                   "records": records}}
    run = one_run(tmp_path, {"scenario": "incast", "config": "priority", "load_before": [4.0], "load_after": [6.0],
                             "jobs": {"1": {"ranks": ranks}}},
                  meta={**TRACE_PLAN, "job": {**TRACE_PLAN["job"], "scheduler": "fusion"}})
    assert run.starvation == 0.8  # a star's server is its busiest host
    assert run.loss_rate == pytest.approx(10 / 1000)
    assert run.load == 5.0 and run.ranks == 2 and run.port_pps == 20000.0
    assert run.iterations == [2.0, 4.0, 2.0, 4.0] and run.p50_s == 3.0  # both ranks, iteration 0 left out
    assert run.job is not None and run.job["scheduler"] == "dlcp" and run.job["b"] == 13.0  # the config's scheduler
    assert run.family == "trace/dlcp"


def test_multitenant_jobs_collide_on_an_uplink_half_the_time() -> None:

    job = ONE_LAYER
    # No background at the host ports: 3 hops of 1 ms per step. 2,888 bytes at 1,444,000 B/s
    # hold the port 2 ms, or 4 ms at half of it; + two steps of 3 ms + 2 ms of compute:
    # 10 ms apart, 12 ms when the two rings hash onto the same uplink.
    hashed = predict_run(Run("s", "r", "multitenant", "qos", 1000.0, 32, [0.01]), job, 0.0, draws=4000)
    assert set(np.round(hashed.draws, 6)) == {0.010, 0.012}
    assert (hashed.draws > 0.011).mean() == pytest.approx(0.5, abs=0.05)
    sprayed = predict_run(Run("s", "r", "multitenant", "spraying", 1000.0, 32, [0.01]), job, 0.0, draws=100)
    assert set(np.round(sprayed.draws, 6)) == {0.010}  # spraying pools both uplinks


def test_a_trace_is_merged_per_layer_as_the_worker_does() -> None:
    from experiments.training import trace_worker
    from gradfabric.traces import merge_layers
    from simulator import validate

    assert validate.merge_layers is merge_layers and trace_worker.merge_layers is merge_layers  # one merge

    # Index 0 is the input side; gradients are ready from the last index down.
    tensors = (Layer(0, "conv1.weight", 100, 0.1, 0.2), Layer(1, "bn1.weight", 10, 0.0, 0.01),
               Layer(2, "bn1.bias", 10, 0.0, 0.01), Layer(3, "fc.weight", 50, 0.3, 0.4), Layer(4, "fc.bias", 5, 0.0, 0.1))
    merged = merge_layers(ModelTrace("m", tensors, forward_order=(0, 1, 2, 3, 4)))
    assert [(l.index, l.name, l.numel) for l in merged.layers] == [(0, "conv1", 120), (1, "fc", 55)]
    assert merged.layers[0].backward_s == pytest.approx(0.22) and merged.layers[1].forward_s == pytest.approx(0.3)
    assert merged.forward_order == (0, 1)


def test_bootstrap_resamples_whole_runs() -> None:
    from simulator.ranking import bootstrap_p50

    # Two runs of two iterations: both picks the same run (p50 1 or 3, a quarter each) or one
    # of each (p50 2, half the time).
    boot = bootstrap_p50([[1.0, 1.0], [3.0, 3.0]], resamples=4000)
    assert set(boot) == {1.0, 2.0, 3.0}
    assert (boot == 2.0).mean() == pytest.approx(0.5, abs=0.03)
    assert set(bootstrap_p50([[1.0, 5.0, 2.0]], resamples=10)) == {2.0}


def test_transport_versions_split_dlcp_families_by_start_time() -> None:
    from simulator.fabric_runs import transport_epoch

    assert transport_epoch("2026-11-26 11:55:21 UTC") == ""  # a second before the port-rate change
    assert transport_epoch("2026-11-26 11:55:22") == transport_epoch("2026-11-26 14:05:07 UTC") == "port-rate"
    assert transport_epoch("2026-11-26 14:05:08 UTC") == transport_epoch("2026-11-27 00:00:00 UTC") == "gso"
    job = {"model": "resnet50", "precision": "fp32", "k": 8.0, "b": 13.0}
    new = Run("s", "r", "tcp", "dlcp", 20000.0, 51, [1.0], job=job, started="2026-11-26 12:00:00 UTC")
    old = Run("s", "r", "tcp", "dlcp", 20000.0, 51, [1.0], job=job, started="2026-11-26 09:00:00 UTC")
    tcp = Run("s", "r", "tcp", "ddp-tcp", 20000.0, 51, [1.0], job=job, started="2026-11-26 12:00:00 UTC")
    assert (new.family, old.family, tcp.family) == ("trace/dlcp+ecn (port-rate)", "trace/dlcp+ecn", "trace/tcp")
    assert (new.scenario_label, old.scenario_label) == ("tcp (port-rate)", "tcp")
    cnn = Run("s", "r", "tcp", "dlcp", 20000.0, 32, [1.0], started="2026-11-27 00:00:00 UTC")
    assert cnn.family == "cnn/dlcp+ecn" and cnn.scenario_label == "tcp"  # the CNN's hook is not versioned


def test_a_lossy_link_run_records_its_loss_per_data_packet(tmp_path: Path) -> None:
    ranks = {str(r): {"role": "worker", "starvation": 0.5, "totals": {"bytes": 1448 * 1000, "packets": 0},
                      "records": iterations(3, 1.0)} for r in range(2)}
    run = one_run(tmp_path, {"scenario": "lossy-1", "config": "ddp-tcp-rto", "started": "2026-11-26 12:15:00 UTC",
                             "rto_min_s": 0.008, "jobs": {"1": {"ranks": ranks}}, "switch": {"link_loss_drops": 30},
                             "link_loss": {"links": [["s1", "l2"]], "probability": 0.01},
                             "background": [{"protocol": "rr", "fct_s": [0.004, 0.001, 0.002]}]}, plan=TRACE_PLAN)
    # TCP counts no packets: 2 ranks x 1,448,000 bytes = 2,000 segments of 1,448 B; 30 lost.
    assert run.link_loss_rate == pytest.approx(30 / 2000)
    assert run.rto_min_s == 0.008 and run.rr_s == 0.002 and run.loss_rate is None
    assert run.epoch == "port-rate"


def test_tcp_tail_loss_costs_a_probe_then_timeouts() -> None:
    from simulator.run_model import tail_repair_s

    assert tail_repair_s(0.010, 0.200) == pytest.approx(0.020 + 0.002 + 0.010)  # probe at 2 SRTT + 2 ms, repair
    assert tail_repair_s(0.100, 0.200) == pytest.approx(0.200 + 0.100)  # never later than the timeout
    job = ONE_LAYER

    def run(loss: float) -> Run:
        return Run("s", "r", "lossy-1", "gloo", 1000.0, 32, [0.01], link_loss_rate=loss, rto_min_s=0.05, rr_s=0.01)

    # Every segment lost: the message's one tail round costs the probe (32 ms), each of the
    # 7 further rounds drawn (8 at most) a 50 ms timeout, not scaled by anything: 382 ms.
    lossless, lost = predict_run(run(0.0), job, 0.0, draws=10), predict_run(run(1.0), job, 0.0, draws=10)
    assert lost.draws - lossless.draws == pytest.approx(np.full(10, 0.032 + 7 * 0.050))


def test_the_packet_path_moves_at_its_slower_process() -> None:
    from simulator.host_model import path_available

    # The rank waited 60% of its runnable time (0.4 left); 5 tasks on 2 cores leave 0.4 each.
    assert path_available(0.6, 5.0) == pytest.approx(0.4)
    assert path_available(0.5, 8.0) == pytest.approx(0.25)  # the switches' 2/8 is less than the rank's 0.5
    assert path_available(0.9, 2.5) == pytest.approx(0.1)  # the rank's 0.1 is less than 2/2.5
    assert path_available(0.3, None) == pytest.approx(0.7)  # no load recorded: the rank's
    assert path_available(None, 1.0) == 1.0  # fewer tasks than cores


def test_the_background_takes_its_packets_off_the_switches_budget() -> None:
    # 50 us a packet at 0.5 of a CPU: 10,000 packets/s; 3,000 of the background's leave 7,000.
    assert host_pps(50e-6, 0.5, 3000.0) == pytest.approx(7000.0)
    assert host_pps(50e-6, 0.5, 9000.0) == pytest.approx(5000.0)  # max-min: the job keeps half
    assert host_pps(0.0, 0.5, 9000.0) == float("inf")
    with pytest.raises(SimulatorError, match="background"):
        host_pps(50e-6, 0.5, -1.0)


def test_two_tenants_share_the_switches_budget() -> None:

    job = ONE_LAYER
    # 2,888 bytes: a ring of two sends 2 packets and receives 2 at the busiest host; at 1 ms
    # a packet with the whole CPU that is 4 ms on top of the wire, 8 ms when another job of
    # the same kind takes half the budget (sprayed: no uplink collision is drawn).
    one = predict_run(Run("s", "r", "multitenant", "spraying", 1000.0, 32, [0.01]), job, 1e-3, draws=10)
    two = predict_run(Run("s", "r", "multitenant", "spraying", 1000.0, 32, [0.01], tenants=2), job, 1e-3, draws=10)
    assert two.draws - one.draws == pytest.approx(np.full(10, 0.004))


def test_timers_are_not_stretched_by_the_scaling_rule() -> None:

    job = ONE_LAYER  # one DDP bucket, one message
    spec = {"model": "m", "precision": "fp32", "k": 8.0, "b": 1.0}

    def run(loss: float) -> Run:
        return Run("s", "r", "lossy-1", "ddp-tcp", 1000.0, 51, [0.01], job=spec, link_loss_rate=loss,
                   rto_min_s=0.05, rr_s=0.01)

    # k = 8 stretches compute, not the kernel's clocks: the probe (2 x 10 + 2 + 10 ms) and 7
    # timeouts of 50 ms, as at k = 1 (8 x that if the timers were scaled).
    lost = predict_run(run(1.0), job, 0.0, draws=10).draws - predict_run(run(0.0), job, 0.0, draws=10).draws
    assert lost == pytest.approx(np.full(10, 0.032 + 7 * 0.050))
