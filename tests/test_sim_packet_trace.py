"""Trace-driven jobs of the packet simulation: the tables against the experiment's, the job
against the trace worker's, the rank loop on a fixed-delay transport (iteration times by
hand, no ns-3), and (with the ns3 extra; skipped with the reason otherwise) a trace job over
ns-3's TCP through a lossy link.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from experiments import trace_configs as exp
from gradfabric.traces import Layer, ModelTrace
from simulator.packet import trace_scenarios as sim
from simulator.packet.runtime import PacketSimulationError, missing_reason
from simulator.packet.trace_jobs import TraceJobRun, TraceJobSpec, switch_priority

needs_ns3 = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


def test_trace_tables_match_the_experiment() -> None:
    for name, ours in sim.TRACE_SCENARIOS.items():
        theirs = exp.trace_scenario(name)
        assert [(j.job_id, j.hosts, j.collective) for j in ours.scenario.jobs] == \
            [(j.job_id, j.hosts, j.collective) for j in theirs.jobs + theirs.bulk]
        assert ours.bulk_jobs == tuple(j.job_id for j in theirs.bulk)
        assert [(f.src, f.dst, f.kind) for f in ours.scenario.background] == \
            [(f.src, f.dst, f.protocol) for f in theirs.background]
        assert (ours.lossy_links, ours.link_loss) == (theirs.lossy_links, theirs.link_loss)
    assert sim.trace_scenario("hotspot").bulk_jobs == (2,)
    for name, ours in sim.TRACE_CONFIGURATIONS.items():
        c = exp.trace_config(name)
        assert (ours.comm, ours.scheduler, ours.overlap, ours.queues, ours.dropping, ours.spraying, ours.ecn,
                ours.grad_bound, ours.rto_min_real_s, ours.merge) == \
            (c.comm, c.scheduler, c.overlap, c.queues, c.dropping, c.spraying, c.ecn, c.grad_bound, c.rto_min_real_s,
             c.merge)
    assert "dlcp-merged" in sim.TRACE_CONFIGURATIONS
    assert sim.GRAD_BOUND == exp.GRAD_BOUND
    from experiments.training.trace_worker import MERGE_BYTES

    assert sim.MERGE_BYTES == MERGE_BYTES
    # The policy's layer rules: thirds of 54 layers at 7, 6, 5; the job class 5; else 0.
    rules = exp.trace_config("dlcp").policy([1])["jobs"][0]["layers"]
    assert [r["priority"] for r in rules] == [switch_priority("layer", int(r["tensors"].split("..")[0]))
                                              for r in rules]
    assert [switch_priority("layer", t) for t in (0, 17, 18, 35, 36, 53)] == [7, 7, 6, 6, 5, 5]
    assert switch_priority("job", 0) == 5 and switch_priority("fifo", 0) == switch_priority("tcp-class", 0) == 0
    with pytest.raises(PacketSimulationError, match="unknown trace scenario"):
        sim.trace_scenario("nonesuch")


def test_scaled_job_is_the_trace_workers() -> None:
    from experiments.training.trace_worker import TraceJob, make_scheduler, scaled_model

    job = TraceJob(iterations=3)
    if not sim.SHARED_TRACES.exists():
        pytest.skip(f"the H100 traces are not at {sim.SHARED_TRACES}")
    theirs = scaled_model(job)
    record = {"model": job.model, "precision": job.precision, "trace": job.trace, "k": job.k,
              "real_gbps": job.real_gbps, "port_pps": job.port_pps}
    ours = sim.scaled_job(record)
    assert [(l.index, l.name, l.numel) for l in ours.layers] == [(l.index, l.name, l.numel) for l in theirs.layers]
    assert [l.backward_s for l in ours.layers] == pytest.approx([l.backward_s for l in theirs.layers])
    assert ours.forward_order == theirs.forward_order
    assert ours.optimizer_s == pytest.approx(theirs.optimizer_s)
    assert sim.scale_b(record) == pytest.approx(job.rule.b)
    # The same transfers, in the same order, from both schedulers when every gradient is ready.
    for config in ("ddp-tcp", "p3-tcp", "dlcp", "dlcp-merged"):
        c = sim.trace_configuration(config)
        worker = make_scheduler(replace(job, scheduler=c.scheduler, grad_bound=c.grad_bound,
                                        merge_bytes=exp.trace_config(config).job(job, exp.trace_scenario("tcp").jobs[0],
                                                                                 1).merge_bytes))
        mine = sim.make_scheduler(c, sim.scale_b(record))()
        planned = []
        for scheduler in (worker, mine):
            scheduler.start_iteration(ours.layers, 0.0)
            for i in reversed(range(len(ours.layers))):
                scheduler.on_gradient_ready(i, 0.0)
            out = []
            while (t := scheduler.next_transfer(0.0, True)) is not None and hasattr(t, "segments"):
                out.append((t.segments, t.priority, t.loss))
            planned.append(out)
        assert planned[0] == planned[1] and len(planned[0]) > 1, config


# Six layers for dlcp-merged at b = 512: groups of at least 2 MiB / 512 / 4 = 1,024 values,
# partitions of 4 MiB / 512 / 4 = 2,048 values.
SIX = ModelTrace("six", tuple(Layer(i, f"l{i}", n, 0.001, 0.001)
                              for i, n in enumerate((3000, 400, 700, 1500, 300, 500))), optimizer_s=0.0)


def test_dlcp_merged_groups_small_layers_into_messages() -> None:
    # Backward order: 5 (500) and 4 (300) are both below 1,024 and together 800 when layer 3
    # (1,500, alone) closes them; 2 (700) and 1 (400) reach 1,100; layer 0 (3,000) goes in two
    # partitions (2,048 + 952). Every gradient ready: front-most first.
    planned = {}
    for config in ("dlcp", "dlcp-merged"):
        scheduler = sim.make_scheduler(sim.trace_configuration(config), 512.0)()
        scheduler.start_iteration(SIX.layers, 0.0)
        for i in reversed(range(len(SIX.layers))):
            scheduler.on_gradient_ready(i, 0.0)
        out = []
        while (t := scheduler.next_transfer(0.0, True)) is not None and hasattr(t, "segments"):
            out.append([(s.layer_index, s.start, s.stop) for s in t.segments])
        planned[config] = out
    assert planned["dlcp-merged"] == [[(0, 0, 2048)], [(0, 2048, 3000)], [(2, 0, 700), (1, 0, 400)],
                                      [(3, 0, 1500)], [(5, 0, 500), (4, 0, 300)]]
    assert len(planned["dlcp"]) == 7  # every layer alone, layer 0 in two
    # Over a ring of two: each message's halves go once reduced and once gathered by each rank.
    c = sim.trace_configuration("dlcp-merged")
    net = _FixedDelay(0.001)
    spec = TraceJobSpec(1, ("h1", "h2"), SIX, sim.make_scheduler(c, 512.0), c.overlap, 2, grad_bound=c.grad_bound,
                        queues=c.queues)
    job = TraceJobRun(spec, net, net.schedule, lambda: net.now_s, net.messages)  # type: ignore[arg-type]
    job.start()
    net.run()
    assert job.done
    assert sorted(s[0] for s in net.sent) == sorted([1024, 476, 550, 750, 400] * 8)


class _FixedDelay:
    """Every message arrives ``delay_s`` after it is sent (no ns-3)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.now_s, self.seq = delay_s, 0.0, 0
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.messages: dict[int, Any] = {}
        self.sent: list[tuple[int, int, int, float, float]] = []  # values, priority, urgency, bound, eligible

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (self.now_s + delay_s, self.seq, fn))

    def send(self, src: str, dst: str, msg: int, values: int, priority: int, urgency: int, bound: float,
             eligible: float | None = None) -> None:
        self.sent.append((values, priority, urgency, bound, bound if eligible is None else eligible))

        def deliver() -> None:
            job, iteration, key, step, s, d = self.messages.pop(msg)
            job.delivered(iteration, key, step, s, d, values, 0, 1)

        self.schedule(self.delay_s, deliver)

    def run(self) -> None:
        while self.events:
            self.now_s, _, fn = heapq.heappop(self.events)
            fn()


# Two layers of 100 values: forward 1 ms each, backward 2 ms each, optimizer 0.5 ms.
TWO = ModelTrace("two", (Layer(0, "a", 100, 0.001, 0.002), Layer(1, "b", 100, 0.001, 0.002)), optimizer_s=0.0005)


def _run(config: str, iterations: int, delay_s: float = 0.001) -> tuple[TraceJobRun, _FixedDelay]:
    c = sim.trace_configuration(config)
    net = _FixedDelay(delay_s)
    spec = TraceJobSpec(1, ("h1", "h2"), TWO, sim.make_scheduler(c, 1.0), c.overlap, iterations,
                        grad_bound=c.grad_bound, queues=c.queues)
    job = TraceJobRun(spec, net, net.schedule, lambda: net.now_s, net.messages)  # type: ignore[arg-type]
    job.start()
    net.run()
    assert job.done
    return job, net


def test_ddp_buckets_wait_for_the_ring_then_the_optimizer() -> None:
    # One DDP bucket holds both layers (800 bytes, under the 1 MiB first bucket): it leaves when
    # backward ends (2 + 4 ms) and takes two 1 ms steps; then the 0.5 ms optimizer step.
    job, net = _run("ddp-tcp", 3)
    for rank in job.ranks:
        assert [round(r["iteration_s"] * 1e6) for r in rank.records] == [8_500] * 3
        assert [r["forward_wait_s"] for r in rank.records] == [0.0] * 3
    assert [s[0] for s in net.sent] == [100] * 12  # 3 iterations x 2 ranks x 2 steps of half the bucket
    assert {s[1] for s in net.sent} == {0}


def test_a_parameter_server_sums_every_push_then_pulls_back() -> None:
    # Server h0, workers h1 and h2. The one DDP bucket (both layers, 200 values) leaves when
    # backward ends (6 ms): each worker's push takes 1 ms, the server's pulls 1 ms more once it
    # holds both; then the 0.5 ms optimizer: 8.5 ms, however many workers (a ring of three: 10.5).
    c = sim.trace_configuration("dlcp")
    net = _FixedDelay(0.001)
    spec = TraceJobSpec(1, ("h0", "h1", "h2"), TWO, sim.make_scheduler(sim.trace_configuration("ddp-tcp"), 1.0),
                        "ddp", 3, grad_bound=0.1, collective="star")
    job = TraceJobRun(spec, net, net.schedule, lambda: net.now_s, net.messages)  # type: ignore[arg-type]
    job.start()
    net.run()
    assert job.done and job.ranks[0].records == []
    for rank in job.ranks[1:]:
        assert [round(r["iteration_s"] * 1e6) for r in rank.records] == [8_500] * 3
        assert rank.reduced_values == 3 * 200
    # Per iteration two pushes (the job's 10% bound, eligible) and two pulls (none), 200 values each.
    assert [s[0] for s in net.sent] == [200] * 12
    assert sorted((s[3], s[4]) for s in net.sent) == [(0.0, 0.0)] * 6 + [(0.1, 0.1)] * 6
    bulk = TraceJobSpec(2, ("h3", "h4"), TWO, sim.make_scheduler(c, 1.0), c.overlap, 10**6, bulk=True)
    assert TraceJobRun(bulk, net, net.schedule, lambda: net.now_s, {}).done  # type: ignore[arg-type]


def test_layerwise_forward_waits_for_the_front_layer() -> None:
    # DLCP scheduler, one partition per layer: layer b (ready 2 ms into backward) arrives 2 ms
    # later, layer a (ready at 4 ms) at 6 ms. An iteration ends with backward; the next forward
    # waits for layer a (2 ms). The last iteration waits for every result and the optimizer.
    job, net = _run("dlcp", 3)
    for rank in job.ranks:
        assert [round(r["iteration_s"] * 1e6) for r in rank.records] == [6_000, 8_000, 10_500]
        assert [round(r["forward_wait_s"] * 1e6) for r in rank.records] == [0, 2_000, 2_000]
    # Layer b (index 1) is in the front third of 54 layers too: class 7; reduce steps carry the
    # DLCP scheduler's bounds (front half of the layers 10%, back half 5%), gathers none.
    assert {s[1] for s in net.sent} == {7}
    assert sorted({(s[3], s[4]) for s in net.sent}) == [(0.0, 0.0), (0.05, 0.05), (0.10, 0.10)]


@needs_ns3
@pytest.mark.slow
def test_trace_job_over_ns3_tcp_through_a_lossy_link() -> None:
    from simulator.packet.run import RunSettings, run
    from simulator.packet.scenarios import Job, Scenario
    from simulator.packet.topology import Port, leafspine
    from simulator.packet.workload import cnn_workload

    # Ring of two across one spine at 100 Mbit/s whose link to the second leaf loses 1% each
    # way; 100,000 values per layer: 800 kB a rank and iteration, about 1,100 segments: a few
    # are lost and repaired (an ACK per segment: ns-3's delayed ACKs stall under this loss).
    trace = replace(TWO, layers=tuple(replace(l, numel=100_000) for l in TWO.layers))
    topo = leafspine(2, 1, 1, Port(rate_bps=1e8))
    c = sim.trace_configuration("ddp-tcp")
    settings = RunSettings(cnn_workload(), iterations=3, job_start_s=0.01, tcp_delack_count=1,
                           lossy_links=(("l2", "s1"),), link_loss=0.01, seed=5)

    def make_job(j: Any, transport: Any, schedule: Any, now: Any, messages: Any) -> TraceJobRun:
        spec = TraceJobSpec(j.job_id, j.hosts, trace, sim.make_scheduler(c, 1.0), c.overlap, 3, start_s=0.01)
        return TraceJobRun(spec, transport, schedule, now, messages)

    record = run(topo, Scenario("pair", "ring h1-h2", (Job(1, ("h1", "h2")),)), c, settings,  # type: ignore[arg-type]
                 make_job=make_job)
    times = [r["iteration_s"] for r in record["jobs"]["1"]["ranks"]["0"]["records"]]
    # Compute 6.5 ms, and at least 800 kB each way at 100 Mbit/s; under 2 s (no stall: with
    # tcp_delack_count=2, ns-3's default, an iteration of this run takes longer).
    assert len(times) == 3 and all(0.0065 + 0.8e6 * 8 / 1e8 < t < 2.0 for t in times)
    assert record["simulation"]["tcp_delack_count"] == 1


@pytest.mark.parametrize(("hosts", "iterations", "message"), [
    (("h1",), 3, r"job 1: needs two or more distinct hosts \(got \('h1',\)\)"),
    (("h1", "h1"), 3, "job 1: needs two or more distinct hosts"),
    (("h1", "h2"), 0, r"job 1: iterations must be positive \(got 0\)"),
])
def test_a_bad_trace_job_is_refused_with_what_is_wrong(hosts: tuple[str, ...], iterations: int, message: str) -> None:
    c = sim.trace_configuration("ddp-tcp")
    with pytest.raises(PacketSimulationError, match=message):
        TraceJobSpec(1, hosts, TWO, sim.make_scheduler(c, 1.0), c.overlap, iterations)


def test_a_slower_port_keeps_b_and_stretches_k_and_the_timers() -> None:
    from simulator.packet.topology import at_port_pps as topology_at
    from simulator.packet.topology import from_yaml
    from simulator.packet.trace_cli import at_port_pps

    # 25 Gbit/s over 5,000 frames/s of 1,500 bytes (60 Mbit/s) is 416.67x; b stays 13.02 (from
    # 20,000 packets/s and k = 8: 104.17 / 8), so k = 32 and the k-scaled timers grow 4x.
    job, scale = at_port_pps({"real_gbps": 25.0, "port_pps": 20_000.0, "k": 8.0, "model": "m"}, 5_000)
    assert (job["port_pps"], job["k"], scale, job["model"]) == (5_000.0, 32.0, 4.0, "m")
    assert job["b"] == pytest.approx(25e9 / 240e6 / 8)
    assert sim.scale_b(job) == pytest.approx(13.0208, abs=1e-4)
    topo = topology_at(from_yaml(sim.TOPOLOGY8), 5_000)
    assert topo.port.rate_bps == 60e6 and {l.rate_bps for l in topo.links} == {60e6}
    assert topo.port.queue_packets == 51 and len(topo.links) == 12
    with pytest.raises(PacketSimulationError, match="must be positive"):
        at_port_pps(job, 0)


@needs_ns3
def test_an_unknown_tcp_variant_is_refused_before_the_run() -> None:
    from simulator.packet.run import RunSettings, run
    from simulator.packet.scenarios import Job, Scenario
    from simulator.packet.topology import Port, leafspine
    from simulator.packet.workload import cnn_workload

    settings = RunSettings(cnn_workload(), iterations=1, tcp_variant="Vegas")
    with pytest.raises(PacketSimulationError, match="TCP variant 'Vegas': one of NewReno, Cubic, Bbr"):
        run(leafspine(2, 1, 1, Port(rate_bps=1e8)), Scenario("pair", "ring h1-h2", (Job(1, ("h1", "h2")),)),
            sim.trace_configuration("ddp-tcp"), settings)  # type: ignore[arg-type]


def test_lossy_0_is_the_lossy_fabric_with_its_link_loss_at_zero() -> None:
    from simulator.packet.trace_scenarios import trace_scenario

    control, lossy = trace_scenario("lossy-0"), trace_scenario("lossy-0.1")
    assert control.link_loss == 0.0 and lossy.link_loss == 0.001
    assert control.lossy_links == lossy.lossy_links == (("s1", "l2"),)
    assert control.scenario.jobs == lossy.scenario.jobs and control.scenario.background == lossy.scenario.background
