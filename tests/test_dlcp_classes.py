"""Traffic classes for any traffic, the per-class drop/mark step, the commodity profile and the
sprayed-member counter of p4src/dlcp.p4, on the embedded pipeline (helpers of test_dlcp_pipeline).

Congestion is emulated as there: the depth estimate ingress reads and the depth egress sees.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from p4switch.tables import Exact, Ternary
from tests.test_dlcp_pipeline import (
    DST_IP, EARLY, GW_MAC, HOST_MAC, IN_PORT, SRC_IP, DlcpSwitch, dlcp_frame, forwarded, no_queue,
    priority_of, program, switch, udp_frame,
)

__all__ = ["program", "switch"]  # fixtures used below

RED = 7  # ingress_drops index: Not-ECT packet of a traffic class over its threshold
ECT0, ECT1, CE = 2, 1, 3


def tcp_frame(dport: int = 4660, *, dscp: int = 0, ecn: int = 0, sport: int = 43000) -> bytes:
    return bytes(Ether(src=HOST_MAC, dst=GW_MAC)
                 / IP(src=SRC_IP, dst=DST_IP, tos=(dscp << 2) | ecn)
                 / TCP(sport=sport, dport=dport, flags="A") / Raw(b"gloo"))


def traffic_class(switch: DlcpSwitch, prio: int, *, dscp: int | None = None, proto: int | None = None,
                  dport: int | None = None, priority: int = 10) -> None:
    """A traffic_class entry; fields left out are wildcards."""
    def t(value: int | None, width: int) -> Ternary | None:
        return None if value is None else Ternary(value, (1 << width) - 1)
    switch.insert("DlcpIngress.traffic_class",
                  [t(dscp, 6), t(proto, 8), None, None, None, t(dport, 16)],
                  "DlcpIngress.set_traffic_class", (prio,), priority=priority)


def red(switch: DlcpSwitch, prio: int, threshold: int) -> None:
    switch.insert("DlcpIngress.queue_red", [Exact(prio)], "DlcpIngress.red_drop_above", (threshold,))


def queue_ecn(switch: DlcpSwitch, prio: int, threshold: int) -> None:
    switch.insert("DlcpEgress.queue_ecn", [Exact(prio)], "DlcpEgress.mark_above", (threshold,))


def commodity(switch: DlcpSwitch) -> None:
    switch.pipeline.tables["DlcpIngress.profile"].set_default("DlcpIngress.profile_commodity", ())


def test_any_traffic_gets_a_class_by_dscp_or_5_tuple(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    traffic_class(switch, 5, dscp=10, priority=20)
    traffic_class(switch, 3, proto=6, dport=4660)
    assert priority_of(switch, udp_frame(tos=10 << 2)) == 5
    assert priority_of(switch, udp_frame(tos=12 << 2)) == 0
    assert priority_of(switch, tcp_frame(4660)) == 3
    assert priority_of(switch, tcp_frame(4661)) == 0
    assert priority_of(switch, tcp_frame(4660, dscp=10)) == 5       # the higher entry wins
    # The packet leaves in its class's queue, DSCP unchanged (the class does not rewrite it).
    frame = tcp_frame(4660)
    assert switch.send(frame) == [(2, forwarded(frame, 2))]
    assert switch.counter("DlcpEgress.port_tx", 2 * 8 + 3) == (1, len(frame))
    # DLCP packets stay with the DLCP tables in the DLCP profile.
    assert priority_of(switch, dlcp_frame(dscp=10)) == 0


@pytest.mark.parametrize("ecn", [0, ECT0])
@pytest.mark.parametrize("depth", [3, 4])
def test_a_class_drops_not_ect_packets_early_over_its_threshold(switch: DlcpSwitch, ecn: int, depth: int) -> None:
    switch.route("10.0.2.0", 24, 2)
    traffic_class(switch, 4, proto=6)
    red(switch, 4, 4)
    switch.queued(2, 4, depth)
    frame = tcp_frame(ecn=ecn)
    should_drop = ecn == 0 and depth >= 4
    assert len(switch.pipeline.ingress(frame, IN_PORT, 0)) == (0 if should_drop else 1)
    dropped = (1, len(frame)) if should_drop else (0, 0)
    assert switch.counter("DlcpIngress.ingress_drops", RED) == dropped
    assert switch.counter("DlcpIngress.queue_red_drops", 2 * 8 + 4) == dropped
    assert switch.counter("DlcpIngress.ingress_drops", EARLY) == (0, 0)   # not a DLCP drop class
    assert switch.estimate(2, 4) == depth + (0 if should_drop else 1)


@pytest.mark.parametrize("ecn", [0, ECT0, ECT1])
@pytest.mark.parametrize("depth", [5, 6])
def test_a_class_marks_ect_packets_over_its_threshold(switch: DlcpSwitch, ecn: int, depth: int) -> None:
    switch.route("10.0.2.0", 24, 2)
    traffic_class(switch, 6, dscp=26)
    queue_ecn(switch, 6, 6)
    frame = udp_frame(tos=(26 << 2) | ecn)
    marked = ecn != 0 and depth >= 6
    assert switch.send(frame, depth) == [(2, forwarded(frame, 2, ecn=CE if marked else None))]
    assert switch.counter("DlcpEgress.queue_ecn_marks", 2 * 8 + 6) == ((1, len(frame)) if marked else (0, 0))


def test_the_dlcp_profile_keeps_dlcp_packets_out_of_the_class_steps(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    red(switch, 0, 0)
    queue_ecn(switch, 0, 0)
    frame = dlcp_frame(ecn=ECT0, eligible=True)
    assert switch.send(frame) == [(2, forwarded(frame, 2))]          # neither dropped nor marked
    plain = udp_frame(tos=ECT0)
    assert switch.send(plain) == [(2, forwarded(plain, 2, ecn=CE))]  # other traffic: marked at 0


def test_the_commodity_profile_treats_dlcp_as_any_traffic(switch: DlcpSwitch) -> None:
    """Class from DSCP only, DSCP kept; the job's priority, drop class, ECN and spraying unused."""
    switch.route("10.0.2.0", 24, 2)
    ports = [2, 3, 4, 5]
    switch.group("10.0.9.0", 24, 7, ports)
    switch.layer_priority(1, (0, 0xFFFF), prio=1, dscp=8)
    switch.drop_class(1, 0)
    switch.ecn(1, 0)
    switch.spray(1, "spray_round_robin")
    traffic_class(switch, 6, dscp=46)
    traffic_class(switch, 2, dscp=10)
    red(switch, 2, 5)
    queue_ecn(switch, 6, 8)
    commodity(switch)

    front = dlcp_frame(dscp=46, ecn=ECT0, eligible=True)
    assert priority_of(switch, front) == 6
    assert switch.send(front, depth=7) == [(2, forwarded(front, 2))]          # kept, not marked at 7
    assert switch.send(front, depth=8) == [(2, forwarded(front, 2, ecn=CE))]  # marked at 8
    back = dlcp_frame(dscp=10, ecn=0, eligible=False)
    switch.queued(2, 2, 5)
    assert switch.pipeline.ingress(back, IN_PORT, 0) == []   # Not-ECT over its class's threshold
    assert switch.counter("DlcpIngress.ingress_drops", RED)[0] == 1
    assert switch.counter("DlcpIngress.early_drops", 1) == (0, 0)
    assert switch.counter("DlcpEgress.ecn_marks", 1) == (0, 0)
    assert switch.counter("DlcpIngress.job_rx", 1)[0] == 4    # still counted per job
    # No spraying: one flow keeps one member; nothing counted as sprayed.
    seen = {port for s in range(12) for port, _ in switch.send(dlcp_frame(dscp=46, dst="10.0.9.9", seq=s))}
    assert len(seen) == 1
    assert all(switch.counter("DlcpIngress.sprayed_member", 7 * 16 + m) == (0, 0) for m in range(4))


def test_sprayed_member_counts_sprayed_dlcp_apart_from_flows(switch: DlcpSwitch) -> None:
    """Round-robin over 2 members: 10 and 10 sprayed, whatever TCP adds to the members' counters."""
    entries = switch.group("10.0.2.0", 24, 3, [2, 3])
    switch.spray(1, "spray_round_robin")
    for s in range(20):
        assert len(switch.send(dlcp_frame(seq=s))) == 1
    tcp = tcp_frame()
    for _ in range(30):
        switch.send(tcp)
    size = len(dlcp_frame())
    assert switch.counter("DlcpIngress.sprayed_member", 3 * 16 + 0) == (10, 10 * size)
    assert switch.counter("DlcpIngress.sprayed_member", 3 * 16 + 1) == (10, 10 * size)
    # The members' direct counters hold the TCP flow too (all 30 packets on one member).
    table = switch.pipeline.tables["DlcpIngress.ecmp_member"]
    assert sorted(table.direct_counter(e)[0] for e in entries) == [10, 40]
