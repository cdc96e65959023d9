"""Jobs of the packet simulation: the scenario table against the experiment's, tiling, the
workloads, and (with the ns3 extra; skipped with the reason otherwise) a ring whose
iteration time is computed by hand, a bounded-loss star under congestion and gloo's TCP.
"""

from __future__ import annotations

import pytest

from experiments import configs as exp_configs
from experiments import scenarios as exp_scenarios
from simulator.packet import scenarios as sim
from simulator.packet.runtime import PacketSimulationError, missing_reason
from simulator.packet.topology import Port, fattree, tiny
from simulator.packet.workload import CNN_TENSORS, Bucket, Workload, cnn_workload, layer_priority


def test_scenarios_and_configurations_match_the_experiment() -> None:
    assert set(sim.SCENARIOS) == set(exp_scenarios.SCENARIOS)
    for name, ours in sim.SCENARIOS.items():
        theirs = exp_scenarios.SCENARIOS[name]
        assert [(j.job_id, j.hosts, j.collective) for j in ours.jobs] == \
            [(j.job_id, j.hosts, j.collective) for j in theirs.jobs]
        assert [(f.src, f.dst, f.kind) for f in ours.background] == \
            [(f.src, f.dst, f.protocol) for f in theirs.background]
    assert sim.PORT_PPS == exp_scenarios.PORT_PPS and sim.QUEUE_THRESHOLD == exp_configs.QUEUE_THRESHOLD
    for c in exp_configs.CONFIGURATIONS:
        ours = sim.configuration(c.name)
        assert (ours.comm, ours.queues, ours.dropping, ours.spraying, ours.ecn, ours.grad_bound) == \
            (c.comm, c.queues, c.dropping, c.spraying, c.ecn, c.grad_bound)


def test_tiling_repeats_the_scenario_over_groups_of_six() -> None:
    topo = fattree(4, Port())  # 16 hosts: two copies, four hosts left over
    tiled = sim.tiled(sim.scenario("incast"), topo.hosts)
    assert tiled.name == "incastx2"
    assert [j.hosts for j in tiled.jobs] == [("h1", "h4", "h5", "h6"), ("h7", "h10", "h11", "h12")]
    assert [j.job_id for j in tiled.jobs] == [1, 2]
    assert [(f.src, f.dst) for f in tiled.background] == [("h2", "h1"), ("h3", "h1"), ("h8", "h7"), ("h9", "h7")]
    with pytest.raises(PacketSimulationError, match="needs 6 hosts"):
        sim.tiled(sim.scenario("tcp"), ["h1", "h2"])


def test_cnn_workload_has_the_experiment_buckets() -> None:
    wl = cnn_workload(0.003)
    # Nine buckets in backward order: the last bias shares its weight's bucket.
    assert [b.numel for b in wl.buckets] == [330, 32, 3072, 24, 3456, 16, 1152, 8, 72]
    assert [b.front for b in wl.buckets] == [8, 7, 6, 5, 4, 3, 2, 1, 0]
    assert wl.numel == sum(CNN_TENSORS) == 8162
    assert [b.priority for b in wl.buckets] == [5, 5, 5, 6, 6, 6, 6, 7, 7]  # the experiment's 0-1: 7, 2-5: 6
    assert wl.buckets[-1].ready_s == pytest.approx(wl.backward_s)
    assert [layer_priority(i, 10) for i in range(10)] == [7, 7, 6, 6, 6, 6, 5, 5, 5, 5]


needs_ns3 = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


def _one_bucket(numel: int) -> Workload:
    return Workload("one", (Bucket(0, numel, 0.002, 7),), forward_s=0.001, backward_s=0.002)


@needs_ns3
@pytest.mark.slow
def test_ring_of_two_iterates_in_compute_plus_two_hand_computed_steps() -> None:
    from simulator.packet.run import RunSettings, run

    # h1 -- s1 -- h2 at 100 Mbit/s, 1 us each way. One bucket of 360 values: each rank sends
    # 180 values per step, a 782-byte frame (32 DLCP + 720 + 8 UDP + 20 IPv4 + 2 PPP; 62.56 us
    # per link) followed by its 62-byte probe (4.96 us). The data packet completes the step on
    # arrival (every packet in), at 2 * 62.56 + 2 * 1 = 127.12 us; the next step leaves at
    # once. Iteration: 1 ms forward + 2 ms backward + 2 steps.
    topo = tiny(1e8, 1e8, 1e-6, Port(rate_bps=1e8))
    scenario = sim.Scenario("pair", "ring h1-h2", (sim.Job(1, ("h1", "h2")),))
    record = run(topo, scenario, sim.configuration("qos"), RunSettings(_one_bucket(360), iterations=3))
    for rank in ("0", "1"):
        records = record["jobs"]["1"]["ranks"][rank]["records"]
        assert [r["iteration"] for r in records] == [0, 1, 2]
        assert [round(r["iteration_s"] * 1e9) for r in records] == [3_000_000 + 2 * 127_120] * 3
        assert record["jobs"]["1"]["ranks"][rank]["totals"]["packets"] == 2 * 3  # one data packet per step sent
    assert record["simulation"]["ports"]["overflow_drops"] == 0


@needs_ns3
@pytest.mark.slow
def test_whole_burst_pacing_holds_the_second_step_to_the_next_burst() -> None:
    from simulator.packet.run import RunSettings, run

    # The ring of two above, its hosts pacing in 1 ms bursts at 10,000 packets/s (10 packets a
    # burst; 2 x cwnd / SRTT, over 10^5 packets/s at these round trips, is above that ceiling),
    # each chunk charged a whole burst: step 0 leaves at 3 ms and is charged until 4 ms, so
    # step 1, received at 3.12712 ms, leaves at 4 ms and arrives 127.12 us later. The next
    # iteration's step 0 comes over 1 ms after that burst: idle time earns no credit.
    topo = tiny(1e8, 1e8, 1e-6, Port(rate_bps=1e8))
    scenario = sim.Scenario("pair", "ring h1-h2", (sim.Job(1, ("h1", "h2")),))
    settings = RunSettings(_one_bucket(360), iterations=3, pacing_burst_s=0.001, pacing_max_pps=10_000,
                           pacing_whole_burst=True)
    record = run(topo, scenario, sim.configuration("qos"), settings)
    for rank in ("0", "1"):
        records = record["jobs"]["1"]["ranks"][rank]["records"]
        assert [round(r["iteration_s"] * 1e9) for r in records] == [4_000_000 + 127_120] * 3
    assert record["simulation"]["pacing"] == {"burst_s": 0.001, "max_pps": 10_000, "whole_burst": True}


@needs_ns3
@pytest.mark.slow
def test_a_long_tcp_flow_offered_at_a_rate_carries_that_rate() -> None:
    from simulator.packet.run import RunSettings, run

    # 20 Mbit/s offered over a 100 Mbit/s port (BulkSend would take what the job leaves).
    topo = tiny(1e8, 1e8, 1e-6, Port(rate_bps=1e8))
    scenario = sim.Scenario("pair", "ring h1-h2, TCP h2->h1", (sim.Job(1, ("h1", "h2")),),
                            (sim.Flow("h2", "h1", "tcp"),))
    settings = RunSettings(_one_bucket(360), iterations=100, job_start_s=0.2, background_tcp_mbps=20.0)
    record = run(topo, scenario, sim.configuration("qos"), settings)
    (flow,) = record["background"]
    assert 18.0 <= flow["goodput_mbps"] <= 22.0
    assert record["simulation"]["background_tcp_mbps"] == 20.0


@needs_ns3
@pytest.mark.slow
def test_bounded_loss_star_under_incast_keeps_within_the_bound() -> None:
    from simulator.packet.run import RunSettings, run
    from simulator.packet.topology import leafspine

    # Three workers push 40 packets each into the server's 100 Mbit/s port at once (queues of
    # 8, eligible packets dropped from a depth of 4): some are lost, none beyond the 10% bound.
    topo = leafspine(2, 1, 2, Port(rate_bps=1e8, queue_packets=8))
    scenario = sim.Scenario("star", "PS h1, workers h2..h4", (sim.Job(1, ("h1", "h2", "h3", "h4"), "star"),))
    record = run(topo, scenario, sim.configuration("dropping"),
                 RunSettings(_one_bucket(40 * 360), iterations=2, seed=3))
    ranks = record["jobs"]["1"]["ranks"]
    assert all(len(r["records"]) == 2 for r in ranks.values())
    server = ranks["0"]["totals"]
    assert server["reduced"] == 2 * 3 * 40 * 360  # two iterations of three pushes
    assert 0 < server["lost"] <= 0.10 * server["reduced"]
    assert record["simulation"]["ports"]["overflow_drops"] + record["switch"]["magnitude_drops"] > 0


@needs_ns3
@pytest.mark.slow
def test_gloo_ring_over_ns3_tcp_completes_every_iteration() -> None:
    from simulator.packet.run import RunSettings, run

    topo = tiny(1e8, 1e8, 1e-6, Port(rate_bps=1e8))
    scenario = sim.Scenario("pair", "ring h1-h2", (sim.Job(1, ("h1", "h2")),))
    record = run(topo, scenario, sim.configuration("gloo"), RunSettings(_one_bucket(3600), iterations=3))
    times = [r["iteration_s"] for r in record["jobs"]["1"]["ranks"]["0"]["records"]]
    # Compute (3 ms) plus two steps of 1,800 values (7,200 bytes: five segments) each way.
    assert len(times) == 3 and all(0.003 + 2 * 7200 * 8 / 1e8 < t < 0.05 for t in times)


@needs_ns3
@pytest.mark.slow
def test_sprayed_data_overtaken_by_its_probe_is_late_not_lost() -> None:
    from simulator.packet.run import RunSettings, run
    from simulator.packet.topology import leafspine

    # Two spines, per-packet spraying: a 62-byte probe overtakes 1,500-byte data on the other
    # spine. Nothing is dropped, so nothing may be zero-filled: the last probe waits.
    topo = leafspine(2, 2, 1, Port(rate_bps=1e8))
    scenario = sim.Scenario("pair", "ring h1-h2 across the spines", (sim.Job(1, ("h1", "h2")),))
    record = run(topo, scenario, sim.configuration("dlcp"), RunSettings(_one_bucket(40 * 360), iterations=2))
    ports = record["simulation"]["ports"]
    assert ports["overflow_drops"] == ports["early_drops"] == 0
    assert {int(record["jobs"]["1"]["ranks"][r]["totals"]["lost"]) for r in ("0", "1")} == {0}
    assert record["jobs"]["1"]["ranks"]["0"]["totals"]["reduced"] == 2 * 20 * 360  # half the bucket per iteration


class _FixedDelay:
    """A transport that delivers every message ``delay_s`` after it is sent (no ns-3)."""

    def __init__(self, delay_s: float) -> None:
        import heapq

        self.heapq = heapq
        self.delay_s = delay_s
        self.now_s = 0.0
        self.events: list[tuple[float, int, object]] = []
        self.sent: list[tuple[str, str, int, int, int, float]] = []
        self.messages: dict = {}
        self.seq = 0

    def schedule(self, delay_s: float, fn) -> None:  # type: ignore[no-untyped-def]
        self.seq += 1
        self.heapq.heappush(self.events, (self.now_s + delay_s, self.seq, fn))

    def send(self, src: str, dst: str, msg: int, values: int, priority: int, urgency: int, bound: float) -> None:
        self.sent.append((src, dst, values, priority, urgency, bound))

        def deliver() -> None:
            job, iteration, b, step, s, d = self.messages.pop(msg)
            job.delivered(iteration, b, step, s, d, values, 0, 1)

        self.schedule(self.delay_s, deliver)

    def run(self) -> None:
        while self.events:
            self.now_s, _, fn = self.heapq.heappop(self.events)
            fn()  # type: ignore[operator]


def _job(collective: str, ranks: int, ordering: str = "wfbp", priorities: str = "fifo"):  # type: ignore[no-untyped-def]
    from simulator.packet.jobs import JobRun, JobSpec

    t = _FixedDelay(0.001)
    wl = Workload("two", (Bucket(1, 900, 0.001, 5), Bucket(0, 300, 0.002, 7)), forward_s=0.001, backward_s=0.002)
    spec = JobSpec(1, tuple(f"h{i + 1}" for i in range(ranks)), collective, wl, iterations=2, grad_bound=0.1,
                   priorities=priorities, ordering=ordering)
    job = JobRun(spec, t, t.schedule, lambda: t.now_s, t.messages)
    job.start()
    t.run()
    return job, t


def test_ring_of_three_takes_four_steps_per_bucket_after_its_last_gradient() -> None:
    job, t = _job("ring", 3)
    # Bucket 0 (ready at 2 ms) runs 4 steps of 1 ms: the iteration ends at 1 + 2 + 4 = 7 ms.
    for rank in job.ranks:
        assert [round(r["iteration_s"] * 1e3, 9) for r in rank.records] == [7.0, 7.0]
    # Per iteration 3 ranks x 2 buckets x 4 steps; reduce steps (first two) bounded, chunks of a third.
    assert len(t.sent) == 2 * 3 * 2 * 4
    big = [s for s in t.sent if s[0] == "h1" and s[2] == 300][:4]  # bucket of 900 values, first iteration
    small = [s for s in t.sent if s[0] == "h1" and s[2] == 100][:4]  # bucket of 300
    assert [s[5] for s in big] == [s[5] for s in small] == [0.1, 0.1, 0.0, 0.0]
    assert len(big) == len(small) == 4


def test_star_pushes_bounded_and_returns_reliable_results() -> None:
    job, t = _job("star", 3)
    # Workers push (1 ms), rank 0 sends the mean back (1 ms): 1 + 2 + 2 = 5 ms per iteration.
    assert [round(r["iteration_s"] * 1e3, 9) for r in job.ranks[1].records] == [5.0, 5.0]
    pushes = [s for s in t.sent if s[1] == "h1"]
    results = [s for s in t.sent if s[0] == "h1"]
    assert len(pushes) == len(results) == 2 * 2 * 2  # 2 workers x 2 buckets x 2 iterations
    assert {s[5] for s in pushes} == {0.1} and {s[5] for s in results} == {0.0}


def test_layer_priorities_and_host_order_reach_the_transport() -> None:
    _, t = _job("ring", 2, ordering="p3", priorities="layer")
    assert {(s[2], s[3], s[4]) for s in t.sent} == {(450, 5, 5), (150, 7, 7)}
    _, t = _job("ring", 2, ordering="wfbp", priorities="job")
    assert {(s[3], s[4]) for s in t.sent} == {(5, 0)}
