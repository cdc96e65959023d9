"""The DLCP program (p4src/dlcp.p4) on the embedded pipeline, one mechanism per test.

Packets go through ``Pipeline.ingress``/``egress`` directly; congestion is emulated by
choosing the queue depth the egress pipeline sees (``QueueMeta.enq_qdepth``), so every
case is deterministic. Expected frames are built independently with Scapy.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from gradfabric.paths import P4SRC
from hosts.wire import DLCP, DLCP_PORT
from p4switch.frontend import load_program
from p4switch.pipeline import Pipeline, QueueMeta
from p4switch.tables import Exact, FieldMatch, Lpm, Range, TableEntry, Ternary

PROGRAM = P4SRC / "dlcp.p4"

IN_PORT = 1
HOST_MAC = "00:00:0a:00:01:01"
GW_MAC = "00:00:00:00:01:01"
SRC_IP = "10.0.1.1"
DST_IP = "10.0.2.2"

# ingress_drops / egress_drops indices (p4src/README.md)
NO_ROUTE, TTL_EXPIRED, PARSER_ERROR, NOT_IPV4, IPV4_CHECKSUM = 1, 2, 3, 4, 5
MAGNITUDE = 1
ECN_CE = 3


def ip_int(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def mac_int(text: str) -> int:
    return int(text.replace(":", ""), 16)


def port_mac(port: int) -> str:
    """The switch-side MAC of a port of switch 1 (fabric convention)."""
    return f"00:00:00:00:01:{port:02x}"


def peer_mac(port: int) -> str:
    return f"00:00:0a:00:{port:02x}:02"


def no_queue(depth: int = 0) -> QueueMeta:
    return QueueMeta(enq_timestamp=0, enq_qdepth=depth, deq_timedelta=0, deq_qdepth=0, qid=0)


def dlcp_frame(
    job: int = 1,
    tensor: int = 0,
    mag: int = 130,
    eligible: bool = False,
    *,
    ecn: int = 0,
    dscp: int = 0,
    sport: int = 40000,
    dst: str = DST_IP,
    ttl: int = 64,
    seq: int = 0,
    count: int = 4,
    version: int = 1,
) -> bytes:
    """A DLCP gradient packet as a host sends it."""
    values = bytes(range(4 * count))
    return bytes(
        Ether(src=HOST_MAC, dst=GW_MAC)
        / IP(src=SRC_IP, dst=dst, ttl=ttl, tos=(dscp << 2) | ecn, id=seq & 0xFFFF)
        / UDP(sport=sport, dport=DLCP_PORT)
        / DLCP(version=version, msg_type=0, flags=0x01 if eligible else 0, job_id=job,
               worker_id=3, tensor_id=tensor, iteration=7, offset=seq * count,
               tensor_len=1000, count=count, mag_class=mag, prio_hint=5, seq=seq)
        / Raw(values)
    )


def udp_frame(sport: int = 5000, dport: int = 6000, dst: str = DST_IP, ttl: int = 64,
              ident: int = 1, tos: int = 0) -> bytes:
    return bytes(
        Ether(src=HOST_MAC, dst=GW_MAC)
        / IP(src=SRC_IP, dst=dst, ttl=ttl, id=ident, tos=tos)
        / UDP(sport=sport, dport=dport)
        / Raw(b"payload-" + ident.to_bytes(2, "big"))
    )


def forwarded(frame: bytes, port: int, *, dscp: int | None = None, ecn: int | None = None) -> bytes:
    """What `frame` should look like after one routed hop out of `port` (Scapy's own math)."""
    pkt = Ether(frame)
    pkt[Ether].src = port_mac(port)
    pkt[Ether].dst = peer_mac(port)
    ip = pkt[IP]
    ip.ttl -= 1
    if dscp is not None:
        ip.tos = (dscp << 2) | (ip.tos & 0x3)
    if ecn is not None:
        ip.tos = (ip.tos & 0xFC) | ecn
    del ip.chksum
    return bytes(pkt)


@dataclass
class DlcpSwitch:
    """One switch running the DLCP program, with the controller's writes as helpers."""

    pipeline: Pipeline

    def insert(self, table: str, match: list[FieldMatch | None], action: str,
               args: tuple[int, ...] = (), priority: int = 0) -> TableEntry:
        entry = TableEntry(match=tuple(match), priority=priority, action=action, args=args)
        self.pipeline.tables[table].insert(entry)
        return entry

    def route(self, prefix: str, prefix_len: int, port: int) -> TableEntry:
        return self.insert("DlcpIngress.ipv4_lpm", [Lpm(ip_int(prefix), prefix_len)],
                           "DlcpIngress.set_nhop",
                           (port, mac_int(port_mac(port)), mac_int(peer_mac(port))))

    def group(self, prefix: str, prefix_len: int, group_id: int, ports: list[int]) -> list[TableEntry]:
        self.insert("DlcpIngress.ipv4_lpm", [Lpm(ip_int(prefix), prefix_len)],
                    "DlcpIngress.set_ecmp_group", (group_id, len(ports)))
        return [
            self.insert("DlcpIngress.ecmp_member", [Exact(group_id), Exact(member)],
                        "DlcpIngress.set_nhop",
                        (port, mac_int(port_mac(port)), mac_int(peer_mac(port))))
            for member, port in enumerate(ports)
        ]

    def spray(self, job: int, mode: str) -> None:
        self.insert("DlcpIngress.spray_mode", [Exact(job)], f"DlcpIngress.{mode}")

    def layer_priority(self, job: int, tensors: tuple[int, int], prio: int, dscp: int,
                       mags: tuple[int, int] | None = None, priority: int = 10) -> None:
        self.insert("DlcpIngress.layer_priority",
                    [Exact(job), Range(*tensors), Range(*mags) if mags else None],
                    "DlcpIngress.set_priority", (prio, dscp), priority=priority)

    def thresholds(self, job: int, mag_threshold: int, queue_threshold: int,
                   prio: int | None = None) -> None:
        self.insert("DlcpEgress.drop_threshold",
                    [Exact(job), Ternary(prio, 0x7) if prio is not None else None],
                    "DlcpEgress.set_thresholds", (mag_threshold, queue_threshold), priority=10)

    def send(self, frame: bytes, depth: int = 0) -> list[tuple[int, bytes]]:
        """Ingress, then egress with `depth` packets already queued on the port."""
        out: list[tuple[int, bytes]] = []
        for job in self.pipeline.ingress(frame, IN_PORT, 0):
            out.extend(self.pipeline.egress(job, no_queue(depth)))
        return out

    def counter(self, name: str, index: int) -> tuple[int, int]:
        return self.pipeline.counters[name].read(index)


@pytest.fixture(scope="module")
def program():
    return load_program(PROGRAM)


@pytest.fixture
def switch(program) -> DlcpSwitch:
    return DlcpSwitch(Pipeline(program))


# -- forwarding ---------------------------------------------------------------------------


def test_routed_udp_gets_new_macs_ttl_and_checksum(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    frame = udp_frame(ttl=17)
    assert switch.send(frame) == [(2, forwarded(frame, 2))]
    out = Ether(switch.send(frame)[0][1])
    assert out[IP].ttl == 16
    assert out[IP].chksum != Ether(frame)[IP].chksum


def test_routed_tcp_and_dlcp_are_forwarded_unchanged_above_ip(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    tcp = bytes(Ether(src=HOST_MAC, dst=GW_MAC) / IP(src=SRC_IP, dst=DST_IP)
                / TCP(sport=1234, dport=80, flags="S") / Raw(b"x" * 20))
    dlcp = dlcp_frame()
    assert switch.send(tcp) == [(2, forwarded(tcp, 2))]
    assert switch.send(dlcp) == [(2, forwarded(dlcp, 2))]


def test_longest_prefix_wins(switch: DlcpSwitch) -> None:
    switch.route("10.0.0.0", 8, 3)
    switch.route("10.0.2.0", 24, 2)
    assert [p for p, _ in switch.send(udp_frame(dst="10.0.2.9"))] == [2]
    assert [p for p, _ in switch.send(udp_frame(dst="10.9.9.9"))] == [3]


def test_no_route_is_dropped_and_counted(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    frame = udp_frame(dst="10.0.9.9")
    assert switch.send(frame) == []
    assert switch.counter("DlcpIngress.ingress_drops", NO_ROUTE) == (1, len(frame))


def test_ttl_expiry_is_dropped_and_counted(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    assert switch.send(udp_frame(ttl=1)) == []
    assert switch.send(udp_frame(ttl=0)) == []
    assert switch.counter("DlcpIngress.ingress_drops", TTL_EXPIRED)[0] == 2
    assert [p for p, _ in switch.send(udp_frame(ttl=2))] == [2]


@pytest.mark.parametrize(
    "frame",
    [
        dlcp_frame(version=2),                                        # unknown DLCP version
        dlcp_frame()[: 14 + 20 + 8 + 10],                             # truncated DLCP header
        bytes(Ether(src=HOST_MAC, dst=GW_MAC) / IP(dst=DST_IP, options=b"\x01\x01\x01\x00")
              / UDP()),                                               # IPv4 options
        bytes(Ether(src=HOST_MAC, dst=GW_MAC, type=0x0800) / IP(dst=DST_IP, version=6)),
    ],
    ids=["dlcp-version", "truncated-dlcp", "ipv4-options", "ip-version"],
)
def test_parser_errors_are_dropped_and_counted(switch: DlcpSwitch, frame: bytes) -> None:
    switch.route("10.0.2.0", 24, 2)
    assert switch.send(frame) == []
    assert switch.counter("DlcpIngress.ingress_drops", PARSER_ERROR) == (1, len(frame))


def test_non_ipv4_and_bad_checksum_are_dropped_by_reason(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    arp = bytes(Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(pdst=DST_IP))
    bad = Ether(udp_frame())
    bad[IP].chksum ^= 0x0101
    assert switch.send(arp) == []
    assert switch.send(bytes(bad)) == []
    assert switch.counter("DlcpIngress.ingress_drops", NOT_IPV4)[0] == 1
    assert switch.counter("DlcpIngress.ingress_drops", IPV4_CHECKSUM)[0] == 1
    assert switch.counter("DlcpIngress.ingress_drops", PARSER_ERROR)[0] == 0


# -- ECMP and spraying --------------------------------------------------------------------

MEMBERS = [2, 3, 4, 5]


def test_flow_hash_keeps_each_flow_on_one_member(switch: DlcpSwitch) -> None:
    switch.group("10.0.2.0", 24, 7, MEMBERS)
    ports_of_flow: dict[int, set[int]] = {}
    # Ephemeral source ports as Linux picks them (random); CRC-16 is linear, so consecutive
    # ports alone would only exercise a subspace of its low bits.
    sports = random.Random(5).sample(range(32768, 61000), 32)
    for sport in sports:
        for ident in range(8):
            out = switch.send(udp_frame(sport=sport, ident=ident))
            assert len(out) == 1
            ports_of_flow.setdefault(sport, set()).add(out[0][0])
    assert all(len(ports) == 1 for ports in ports_of_flow.values()), ports_of_flow
    used = set().union(*ports_of_flow.values())
    assert used <= set(MEMBERS) and len(used) >= 3  # 32 flows do not all share one path


def test_dlcp_of_a_job_without_spray_mode_is_flow_hashed(switch: DlcpSwitch) -> None:
    switch.group("10.0.2.0", 24, 7, MEMBERS)
    switch.spray(9, "spray_random")  # another job
    ports = {switch.send(dlcp_frame(job=1, seq=s))[0][0] for s in range(64)}
    assert len(ports) == 1


RANDOM_PACKETS = 400
#: Each member's share of randomly sprayed packets stays within +-40% of an even split
#: (for 400 packets over 4 members that is more than 4.6 standard deviations).
RANDOM_TOLERANCE = 0.4


def test_random_spraying_spreads_one_flow_over_all_members(switch: DlcpSwitch) -> None:
    entries = switch.group("10.0.2.0", 24, 7, MEMBERS)
    switch.spray(1, "spray_random")
    sent = Counter()
    frames = [dlcp_frame(job=1, seq=s) for s in range(RANDOM_PACKETS)]  # one 5-tuple
    for frame in frames:
        out = switch.send(frame)
        assert len(out) == 1
        sent[out[0][0]] += 1
    even = RANDOM_PACKETS / len(MEMBERS)
    assert set(sent) == set(MEMBERS)
    for port in MEMBERS:
        assert abs(sent[port] - even) <= RANDOM_TOLERANCE * even, sent
    table = switch.pipeline.tables["DlcpIngress.ecmp_member"]
    counted = {port: table.direct_counter(entry) for port, entry in zip(MEMBERS, entries)}
    for port in MEMBERS:
        assert counted[port] == (sent[port], sent[port] * len(frames[0]))


def test_round_robin_spraying_visits_members_in_turn(switch: DlcpSwitch) -> None:
    switch.group("10.0.2.0", 24, 7, MEMBERS)
    switch.spray(1, "spray_round_robin")
    ports = [switch.send(dlcp_frame(job=1, seq=s))[0][0] for s in range(3 * len(MEMBERS))]
    start = MEMBERS.index(ports[0])
    assert ports == [MEMBERS[(start + i) % len(MEMBERS)] for i in range(len(ports))]


def test_spraying_leaves_ordinary_traffic_on_its_flow(switch: DlcpSwitch) -> None:
    switch.group("10.0.2.0", 24, 7, MEMBERS)
    switch.spray(1, "spray_round_robin")
    # Same hosts, same job's ports, but not DLCP: flow-hashed.
    ports = {switch.send(udp_frame(sport=40000, dport=19601, ident=i))[0][0] for i in range(16)}
    assert len(ports) == 1


def test_group_member_without_entry_is_dropped_as_no_route(switch: DlcpSwitch) -> None:
    switch.insert("DlcpIngress.ipv4_lpm", [Lpm(ip_int("10.0.2.0"), 24)],
                  "DlcpIngress.set_ecmp_group", (7, 2))
    switch.spray(1, "spray_round_robin")
    results = [switch.send(dlcp_frame(job=1, seq=s)) for s in range(2)]
    assert results == [[], []]
    assert switch.counter("DlcpIngress.ingress_drops", NO_ROUTE)[0] == 2


def test_an_empty_group_routes_nowhere(switch: DlcpSwitch) -> None:
    switch.insert("DlcpIngress.ipv4_lpm", [Lpm(ip_int("10.0.2.0"), 24)],
                  "DlcpIngress.set_ecmp_group", (7, 0))
    assert switch.send(udp_frame()) == []
    assert switch.counter("DlcpIngress.ingress_drops", NO_ROUTE)[0] == 1


# -- layer priority ------------------------------------------------------------------------


def priority_of(switch: DlcpSwitch, frame: bytes) -> int:
    jobs = switch.pipeline.ingress(frame, IN_PORT, 0)
    assert len(jobs) == 1
    return jobs[0].priority


def test_layer_priority_sets_queue_and_dscp(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.layer_priority(1, (0, 9), prio=7, dscp=46)
    switch.layer_priority(1, (10, 0xFFFF), prio=2, dscp=10)
    front, back = dlcp_frame(tensor=3), dlcp_frame(tensor=40)
    assert priority_of(switch, front) == 7
    assert priority_of(switch, back) == 2
    assert switch.send(front) == [(2, forwarded(front, 2, dscp=46))]
    assert switch.send(back) == [(2, forwarded(back, 2, dscp=10))]
    assert switch.counter("DlcpEgress.port_tx", 2 * 8 + 7) == (1, len(front))
    assert switch.counter("DlcpEgress.port_tx", 2 * 8 + 2) == (1, len(back))


def test_magnitude_range_and_entry_priority_decide_between_overlapping_entries(
    switch: DlcpSwitch,
) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.layer_priority(1, (0, 0xFFFF), prio=3, dscp=8, priority=10)
    switch.layer_priority(1, (0, 0xFFFF), prio=6, dscp=40, mags=(140, 255), priority=20)
    assert priority_of(switch, dlcp_frame(tensor=5, mag=150)) == 6
    assert priority_of(switch, dlcp_frame(tensor=5, mag=139)) == 3


def test_unknown_job_gets_the_default_and_ordinary_traffic_keeps_its_dscp(
    switch: DlcpSwitch,
) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.layer_priority(1, (0, 0xFFFF), prio=7, dscp=46)
    unknown = dlcp_frame(job=2, dscp=12)
    plain = udp_frame(tos=12 << 2)
    assert priority_of(switch, unknown) == 0
    assert switch.send(unknown) == [(2, forwarded(unknown, 2, dscp=0))]
    assert priority_of(switch, plain) == 0
    assert switch.send(plain) == [(2, forwarded(plain, 2))]
    switch.pipeline.tables["DlcpIngress.layer_priority"].set_default(
        "DlcpIngress.set_priority", (1, 8))
    assert priority_of(switch, unknown) == 1


# -- magnitude-threshold dropping and ECN --------------------------------------------------

MAG_THRESHOLD = 120
QUEUE_THRESHOLD = 10


@pytest.mark.parametrize("eligible", [False, True])
@pytest.mark.parametrize("mag", [MAG_THRESHOLD - 1, MAG_THRESHOLD])
@pytest.mark.parametrize("depth", [QUEUE_THRESHOLD, QUEUE_THRESHOLD + 1])
def test_drop_only_when_eligible_small_and_congested(
    switch: DlcpSwitch, eligible: bool, mag: int, depth: int
) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.thresholds(1, MAG_THRESHOLD, QUEUE_THRESHOLD)
    frame = dlcp_frame(mag=mag, eligible=eligible)
    should_drop = eligible and mag < MAG_THRESHOLD and depth > QUEUE_THRESHOLD
    out = switch.send(frame, depth=depth)
    assert out == ([] if should_drop else [(2, forwarded(frame, 2))])
    assert switch.counter("DlcpEgress.egress_drops", MAGNITUDE) == (
        (1, len(frame)) if should_drop else (0, 0))
    assert switch.counter("DlcpEgress.port_tx", 2 * 8)[0] == (0 if should_drop else 1)


def test_no_threshold_entry_means_no_dropping(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.thresholds(2, 255, 0)  # another job
    frame = dlcp_frame(job=1, mag=1, eligible=True, ecn=1)
    assert switch.send(frame, depth=1000) == [(2, forwarded(frame, 2))]
    assert switch.counter("DlcpEgress.egress_drops", MAGNITUDE)[0] == 0


def test_threshold_entries_match_the_priority_chosen_in_ingress(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.layer_priority(1, (0, 9), prio=7, dscp=46)
    switch.layer_priority(1, (10, 0xFFFF), prio=1, dscp=10)
    switch.thresholds(1, MAG_THRESHOLD, QUEUE_THRESHOLD, prio=1)  # only back layers shed
    front = dlcp_frame(tensor=0, mag=100, eligible=True)
    back = dlcp_frame(tensor=50, mag=100, eligible=True)
    assert len(switch.send(front, depth=50)) == 1
    assert switch.send(back, depth=50) == []


@pytest.mark.parametrize("ecn", [1, 2])
def test_congested_important_ect_packets_are_marked_ce(switch: DlcpSwitch, ecn: int) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.thresholds(1, MAG_THRESHOLD, QUEUE_THRESHOLD)
    frame = dlcp_frame(job=1, mag=200, eligible=True, ecn=ecn)
    assert switch.send(frame, depth=QUEUE_THRESHOLD + 5) == [(2, forwarded(frame, 2, ecn=ECN_CE))]
    assert switch.counter("DlcpEgress.ecn_marks", 1) == (1, len(frame))


def test_ecn_marking_needs_congestion_and_ect(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.thresholds(1, MAG_THRESHOLD, QUEUE_THRESHOLD)
    not_ect = dlcp_frame(mag=200, ecn=0)
    calm = dlcp_frame(mag=200, ecn=1)
    assert switch.send(not_ect, depth=QUEUE_THRESHOLD + 5) == [(2, forwarded(not_ect, 2))]
    assert switch.send(calm, depth=QUEUE_THRESHOLD) == [(2, forwarded(calm, 2))]
    assert switch.counter("DlcpEgress.ecn_marks", 1) == (0, 0)


# -- per-job counters ------------------------------------------------------------------------


def test_job_rx_counts_dlcp_packets_per_job(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    frames = [dlcp_frame(job=1), dlcp_frame(job=1, seq=1), dlcp_frame(job=5)]
    for frame in frames:
        switch.send(frame)
    switch.send(udp_frame())
    assert switch.counter("DlcpIngress.job_rx", 1) == (2, 2 * len(frames[0]))
    assert switch.counter("DlcpIngress.job_rx", 5) == (1, len(frames[2]))
    assert switch.counter("DlcpIngress.job_rx", 0) == (0, 0)
    # A job id beyond the counter is still forwarded.
    assert [p for p, _ in switch.send(dlcp_frame(job=4000))] == [2]
