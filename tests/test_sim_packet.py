"""Packet simulation on ns-3: topologies as data (always), and hand-computed runs on ns-3
(skipped, with the reason, where the optional ``ns3`` extra is not installed; `make test`
installs it).

The hand-computed runs use h1 -- s1 -- h2: h1's link at 1 Gbit/s, s1's port to h2 at
100 Mbit/s, 1 us of propagation on each. A UDP payload of 970 bytes is a 1,000-byte frame
(20 IPv4 + 8 UDP + 2 PPP bytes): 8 us on h1's link, 80 us on the port. Eight datagrams
leave h1 back to back at t = 0 and reach s1 every 8 us (the first at 9 us); the port sends
one every 80 us, so none leaves before the eighth arrives (65 us). The port holds one
packet on the wire, one in the device's one-packet queue and 4 per priority queue.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import SimulatorError
from simulator.packet.runtime import missing_reason
from simulator.packet.topology import Port, fattree, from_yaml, leafspine, tiny

ROOT = Path(__file__).resolve().parent.parent
PORT = 9000
PAYLOAD = 970


def test_fattree_k4_shape_and_equal_cost_next_hops() -> None:
    topo = fattree(4, Port())
    assert (len(topo.hosts), len(topo.switches), len(topo.links)) == (16, 20, 48)
    hops = topo.next_hops()
    # h1 sits under edge e0_0; h16 under e3_1 in another pod.
    assert hops["e0_0"]["h16"] == ["a0_0", "a0_1"]  # up: both aggregation switches
    assert hops["a0_0"]["h16"] == ["c1", "c2"]  # up: the aggregation switch's two cores
    assert hops["c1"]["h16"] == ["a3_0"]  # down: one way
    assert hops["e0_0"]["h2"] == ["h2"]  # same edge: straight down
    assert hops["h1"]["h16"] == ["e0_0"]


def test_fattree_k_out_of_range_is_refused() -> None:
    for k in (2, 5, 18):
        with pytest.raises(SimulatorError, match="even and 4..16"):
            fattree(k, Port())


def test_experiment_yaml_is_read_with_the_fabric_port() -> None:
    topo = from_yaml(ROOT / "experiments" / "topologies" / "leafspine_training.yaml")
    assert topo.hosts == ["h1", "h2", "h3", "h4", "h5", "h6"]
    assert topo.port.rate_bps == 20_000 * 1500 * 8  # 20,000 full frames/s
    assert (topo.port.priorities, topo.port.queue_packets) == (8, 32)
    assert topo.next_hops()["l1"]["h4"] == ["s1", "s2"]


def test_generated_leafspine_matches_the_experiment_shape() -> None:
    topo = leafspine(2, 2, 3, Port())
    assert len(topo.links) == 10
    assert topo.next_hops()["l2"]["h1"] == ["s1", "s2"]


needs_ns3 = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


@pytest.fixture(scope="module")
def ns3():  # type: ignore[no-untyped-def]
    from simulator.packet.runtime import load

    return load()


def _tiny_run(ns3, bursts: list[tuple[int, int]], port: Port, costs=None):  # type: ignore[no-untyped-def]
    """Send ``bursts`` (count, TOS) from h1 at t = 0, in order; returns (sink, network)."""
    from simulator.packet.network import HostCosts, build

    ns, gf = ns3
    net = build(tiny(1e9, 1e8, 1e-6, port), costs=costs or HostCosts())
    sink = gf.RecordingSink(net.nodes["h2"], PORT)
    first = 0
    for count, tos in bursts:
        gf.SendBurst(net.nodes["h1"], net.address("h2"), PORT, count, PAYLOAD, tos, 0.0, first)
        first += count
    ns.Simulator.Stop(ns.Seconds(1))
    ns.Simulator.Run()
    result = (list(sink.sequences), [round(t * 1e9) for t in sink.times], [int(t) for t in sink.tos])
    totals = net.queue_totals()
    ns.Simulator.Destroy()
    return result, totals


@needs_ns3
def test_delays_and_the_packet_where_the_queue_overflows(ns3) -> None:  # type: ignore[no-untyped-def]
    (seqs, times_ns, _), totals = _tiny_run(ns3, [(8, 0)], Port(rate_bps=1e8, queue_packets=4))
    # Packet 0: 8 us + 1 us to s1, 80 us + 1 us to h2 = 90 us; then one every 80 us.
    # On arrival of packet 6 the port holds 0 (wire), 1 (device queue), 2..5 (queue full).
    assert seqs == [0, 1, 2, 3, 4, 5]
    assert times_ns == [90_000 + 80_000 * i for i in range(6)]
    assert (totals["overflow_drops"], totals["early_drops"], totals["max_depth"]) == (2, 0, 4)


@needs_ns3
def test_drop_eligible_packets_go_first_and_the_others_are_marked(ns3) -> None:  # type: ignore[no-untyped-def]
    # Odd packets drop-eligible, all ECN-capable; both thresholds at a depth of 2 packets.
    port = Port(rate_bps=1e8, queue_packets=4, drop_threshold=2, ecn_threshold=2)
    bursts = [(1, 0x06 if i % 2 else 0x02) for i in range(8)]
    (seqs, _, tos), totals = _tiny_run(ns3, bursts, port)
    # Queue depth on arrival: 2 -> 0 (then 1), 3 -> 1 (then 2), 4 -> 2: kept, marked (3),
    # 5 -> 3: eligible, dropped early; 6 -> 3: kept, marked (4); 7 -> 4: the queue is full.
    assert seqs == [0, 1, 2, 3, 4, 6]
    ce = [s for s, t in zip(seqs, tos) if t & 0x03 == 0x03]
    assert ce == [4, 6]
    assert (totals["early_drops"], totals["overflow_drops"], totals["ecn_marks"]) == (1, 1, 2)


@needs_ns3
def test_strict_priority_serves_the_higher_queue_first(ns3) -> None:  # type: ignore[no-untyped-def]
    # Four packets of priority 0, then two of priority 7, all at t = 0.
    (seqs, times_ns, _), _ = _tiny_run(ns3, [(4, 0x00), (2, 0xE0)], Port(rate_bps=1e8, queue_packets=4))
    # 0 on the wire and 1 in the device queue before the others arrive; then 4, 5 jump 2, 3.
    assert seqs == [0, 1, 4, 5, 2, 3]
    assert times_ns == [90_000 + 80_000 * i for i in range(6)]


@needs_ns3
def test_per_flow_ecmp_keeps_a_path_and_spraying_uses_both(ns3) -> None:  # type: ignore[no-untyped-def]
    from simulator.packet.network import build

    ns, gf = ns3
    used = {}
    for spray in (False, True):
        net = build(leafspine(2, 2, 1, Port()), seed=7, spray=spray, spray_port=PORT)
        sink = gf.RecordingSink(net.nodes["h2"], PORT)  # kept alive: it owns the socket's callback
        gf.SendBurst(net.nodes["h1"], net.address("h2"), PORT, 40, PAYLOAD, 0, 0.0, 0)
        ns.Simulator.Stop(ns.Seconds(1))
        ns.Simulator.Run()
        used[spray] = sorted(int(net.queues[("l1", s)].enqueued) for s in ("s1", "s2"))
        assert len(sink.sequences) == 40
        ns.Simulator.Destroy()
    assert used[False] == [0, 40]
    assert sum(used[True]) == 40 and min(used[True]) > 0


@needs_ns3
def test_a_software_switch_forwards_one_packet_per_cost_and_drops_past_its_backlog(ns3) -> None:  # type: ignore[no-untyped-def]
    from simulator.packet.network import HostCosts

    costs = HostCosts(switch_forward_s=100e-6, switch_backlog=2)
    (seqs, times_ns, _), totals = _tiny_run(ns3, [(4, 0)], Port(rate_bps=1e8, queue_packets=4), costs)
    # Arrivals at s1: 9, 17, 25, 33 us. Packet 0 is forwarded at 109 us (then 80 us on the
    # port, 1 us on the wire: 190 us); 1 and 2 wait (the backlog of 2) and leave s1 at 209
    # and 309 us (the port is idle by then); 3 finds 2 waiting and is dropped.
    assert seqs == [0, 1, 2]
    assert times_ns == [190_000, 290_000, 390_000]
    assert (totals["cpu_drops"], totals["cpu_max_backlog"], totals["overflow_drops"]) == (1, 2, 0)


@needs_ns3
def test_a_switch_whose_cpu_is_off_holds_its_arrivals_and_its_ports(ns3) -> None:  # type: ignore[no-untyped-def]
    from simulator.packet.network import HostCosts

    # s1 is on 100 us, off 200 us, 100 us into its cycle at t = 0: off until 200 us, on until
    # 300, off until 500. Arrivals at 9, 17, 25, 33 us wait; 10 us of forwarding each: out at
    # 210, 220, 230, 240 us. Packet 0 reaches h2 at 210 + 80 + 1 = 291 us; 1 waits in the
    # device's queue (371 us); 2 is taken from the port's queue at 290 (on): 451 us; 3 is due
    # at 370, when s1 is off: its port sends it at 500 us (+1 ns): 581.001 us.
    costs = HostCosts(switch_forward_s=10e-6, switch_on_s=100e-6, switch_off_s=200e-6, switch_phase_s=100e-6)
    (seqs, times_ns, _), totals = _tiny_run(ns3, [(4, 0)], Port(rate_bps=1e8, queue_packets=4), costs)
    assert seqs == [0, 1, 2, 3]
    assert times_ns == [291_000, 371_000, 451_000, 581_001]
    assert (totals["cpu_drops"], totals["cpu_max_backlog"], totals["max_depth"]) == (0, 3, 2)


@needs_ns3
def test_a_switch_given_its_own_schedule_holds_as_the_shared_one_does(ns3) -> None:  # type: ignore[no-untyped-def]
    from simulator.packet.network import HostCosts

    # As above, the schedule s1's own (``switch_each``) and none shared: the same hand-computed
    # times. A schedule for a switch that is not there changes nothing.
    costs = HostCosts(switch_forward_s=10e-6, switch_phase_s=100e-6,
                      switch_each=(("s1", 100e-6, 200e-6), ("s9", 1e-3, 1e-3)))
    assert costs.schedule_of("s1") == (100e-6, 200e-6) and costs.schedule_of("s2") == (0.0, 0.0)
    (seqs, times_ns, _), totals = _tiny_run(ns3, [(4, 0)], Port(rate_bps=1e8, queue_packets=4), costs)
    assert seqs == [0, 1, 2, 3]
    assert times_ns == [291_000, 371_000, 451_000, 581_001]
    assert totals["cpu_max_backlog"] == 3
    with pytest.raises(SimulatorError, match="both its on and off"):
        HostCosts(switch_each=(("s1", 1e-3, 0.0),))


@needs_ns3
def test_a_clocked_port_sends_each_packet_at_its_time_and_no_later(ns3) -> None:  # type: ignore[no-untyped-def]
    from simulator.packet.network import HostCosts

    # p4switch's port clock, the switch always on: arrivals at s1 at 9, 17, 25, 33 us; each
    # leaves at max(arrival, the port's free time), 80 us apart, onto a device at 1,000 x
    # 1e8 bit/s (80 ns for 1,000 bytes) and 1 us of wire: 10.08 us; the others wait for their
    # time and leave 1 ns after it (the wait is rounded up): 90.081, 170.081, 250.081 us.
    costs = HostCosts(switch_port_clock=True)
    (seqs, times_ns, _), totals = _tiny_run(ns3, [(4, 0)], Port(rate_bps=1e8, queue_packets=4), costs)
    assert seqs == [0, 1, 2, 3]
    assert times_ns == [10_080, 90_081, 170_081, 250_081]
    assert totals["overflow_drops"] == 0


@needs_ns3
def test_a_clocked_port_sends_what_fell_due_while_its_switch_was_off_in_a_burst(ns3) -> None:  # type: ignore[no-untyped-def]
    from simulator.packet.network import HostCosts

    # The schedule of the test above it (on 100 us, off 200, 100 us in: off until 200 us, on
    # until 300, off until 500) with the port clock. s1 forwards at 210, 220, 230, 240 us.
    # 0 leaves at 210 (211.08 us at h2); 1 is due at 290 (the port free 80 us after 0), leaves
    # when its wait ends 1 ns later: 291.081; 2 is due at 370 and 3 at 450, both while s1 is
    # off: both leave at 500 us + 1 ns, back to back on the fast device (80 ns each): 501.081
    # and 501.161 us, where the port that sends at its rate after the off period gave 451 and
    # 581.001 (the test above): the clock loses none of the port's time to the off period.
    costs = HostCosts(switch_forward_s=10e-6, switch_on_s=100e-6, switch_off_s=200e-6, switch_phase_s=100e-6,
                      switch_port_clock=True)
    (seqs, times_ns, _), totals = _tiny_run(ns3, [(4, 0)], Port(rate_bps=1e8, queue_packets=4), costs)
    assert seqs == [0, 1, 2, 3]
    assert times_ns == [211_080, 291_081, 501_081, 501_161]
    assert totals["cpu_drops"] == 0


@needs_ns3
def test_packets_delivered_to_a_host_arrive_later_by_the_delivery_latency(ns3) -> None:  # type: ignore[no-untyped-def]
    from simulator.packet.network import HostCosts

    costs = HostCosts(deliver_latency_s=500e-6)
    (seqs, times_ns, _), totals = _tiny_run(ns3, [(2, 0)], Port(rate_bps=1e8, queue_packets=4), costs)
    assert seqs == [0, 1]
    assert times_ns == [590_000, 670_000]  # 90 and 170 us on the wire, then 500 us
    assert totals["cpu_drops"] == 0


def _paced_pair(ns3, burst_s: float, whole: bool) -> list[float]:  # type: ignore[no-untyped-def]
    """Two 2-packet DLCP messages h1 -> h2 queued at t = 0 under a 1,000 packets/s pacer with
    ``burst_s`` bursts; returns their completion times at h2 (seconds)."""
    from simulator.packet.network import build
    from tests.sim_packet_helpers import dlcp_completions

    net = build(tiny(1e9, 1e8, 1e-6, Port(rate_bps=1e8, queue_packets=32)))
    return dlcp_completions(ns3, net, 2, 0.005,
                            lambda sender: sender.SetPacing(burst_s, 1000.0, whole) if burst_s > 0 else None)


@needs_ns3
def test_pacing_spaces_chunks_by_what_they_are_charged(ns3) -> None:  # type: ignore[no-untyped-def]
    # 1,000 packets/s in 4 ms bursts: 4 packets per burst. A 2-packet message is charged 2 ms
    # (its packets) or, as the hosts' pacer did until 2026-11-26, a whole 4 ms burst; the
    # second message leaves then. Each arrives well within 1 ms of leaving (two 1,500-byte
    # packets at 100 Mbit/s: 0.25 ms).
    unpaced = _paced_pair(ns3, 0.0, False)
    partial = _paced_pair(ns3, 0.004, False)
    whole = _paced_pair(ns3, 0.004, True)
    assert len(unpaced) == len(partial) == len(whole) == 2
    assert max(unpaced) < 0.001
    assert partial[0] < 0.001 and 0.002 <= partial[1] < 0.003
    assert whole[0] < 0.001 and 0.004 <= whole[1] < 0.005
