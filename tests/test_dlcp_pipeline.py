"""The DLCP program (p4src/dlcp.p4) on the embedded pipeline, one mechanism per test.

Packets go through ``Pipeline.ingress``/``egress`` directly; congestion is emulated by
choosing the queue depth each stage sees: the ``queue_depth`` register ingress reads (the
estimate egress keeps), and the depth the egress pipeline sees (``QueueMeta.enq_qdepth``),
so every case is deterministic. Expected frames are built independently with Scapy.
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
from p4switch.tables import Exact, FieldMatch, Lpm, Range, TableEntry

PROGRAM = P4SRC / "dlcp.p4"

IN_PORT = 1
HOST_MAC = "00:00:0a:00:01:01"
GW_MAC = "00:00:00:00:01:01"
SRC_IP = "10.0.1.1"
DST_IP = "10.0.2.2"

# ingress_drops indices (p4src/README.md)
NO_ROUTE, TTL_EXPIRED, PARSER_ERROR, NOT_IPV4, IPV4_CHECKSUM, EARLY = 1, 2, 3, 4, 5, 6
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

    def drop_class(self, job: int, queue_threshold: int, tensors: tuple[int, int] = (0, 0xFFFF),
                   mags: tuple[int, int] = (0, 255), priority: int = 10) -> None:
        self.insert("DlcpIngress.drop_class", [Exact(job), Range(*tensors), Range(*mags)],
                    "DlcpIngress.drop_above", (queue_threshold,), priority=priority)

    def ecn(self, job: int, queue_threshold: int) -> None:
        self.insert("DlcpEgress.ecn_threshold", [Exact(job)], "DlcpEgress.mark_above",
                    (queue_threshold,))

    def seed(self, seed: int) -> None:
        self.pipeline.tables["DlcpIngress.switch_seed"].set_default("DlcpIngress.set_seed", (seed,))

    def queued(self, port: int, prio: int, depth: int) -> None:
        """Make the depth estimate of queue (port, prio) read ``depth`` in ingress."""
        self.pipeline.registers["queue_depth"].write(port * 8 + prio, depth)

    def estimate(self, port: int, prio: int) -> int:
        return self.pipeline.registers["queue_depth"].read(port * 8 + prio)

    def send(self, frame: bytes, depth: int = 0) -> list[tuple[int, bytes]]:
        """Ingress, then egress with `depth` packets ahead of it in its queue (and none left
        behind it, so egress writes 0 into the depth estimate)."""
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


def test_the_seed_shifts_round_robin_and_random_choices(program) -> None:
    """Per-switch seeds: the same packets take other members on a switch with another seed
    (the table the controller writes), and the embedded ``random`` is seeded per device."""

    def members(seed: int, mode: str, device: int = 0) -> list[int]:
        sw = DlcpSwitch(Pipeline(program, seed=device))
        sw.group("10.0.2.0", 24, 7, MEMBERS)
        sw.spray(1, mode)
        sw.seed(seed)
        return [sw.send(dlcp_frame(job=1, seq=s))[0][0] for s in range(32)]

    # identity(position + seed) % 4: the first packet takes member seed % 4 (BMv2 identity).
    assert members(0, "spray_round_robin")[0] == MEMBERS[0]
    assert members(6, "spray_round_robin")[0] == MEMBERS[6 % 4]
    assert members(0, "spray_random") != members(12345, "spray_random")
    assert members(0, "spray_random", device=1) != members(0, "spray_random", device=2)
    assert members(0, "spray_random", device=3) == members(0, "spray_random", device=3)


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


# -- early dropping (ingress) and ECN (egress) ---------------------------------------------

SMALL = (0, 119)           # magnitude classes of the drop-eligible class
QUEUE_THRESHOLD = 10
ECN_THRESHOLD = 6


@pytest.mark.parametrize("eligible", [False, True])
@pytest.mark.parametrize("mag", [SMALL[1], SMALL[1] + 1])
@pytest.mark.parametrize("depth", [QUEUE_THRESHOLD - 1, QUEUE_THRESHOLD])
def test_ingress_drops_only_eligible_packets_of_a_listed_class_over_the_threshold(
    switch: DlcpSwitch, eligible: bool, mag: int, depth: int
) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.drop_class(1, QUEUE_THRESHOLD, mags=SMALL)
    switch.queued(2, 0, depth)
    frame = dlcp_frame(mag=mag, eligible=eligible)
    should_drop = eligible and mag <= SMALL[1] and depth >= QUEUE_THRESHOLD
    # The decision is made before the queue: a dropped packet never reaches the traffic manager.
    jobs = switch.pipeline.ingress(frame, IN_PORT, 0)
    assert len(jobs) == (0 if should_drop else 1)
    assert switch.counter("DlcpIngress.ingress_drops", EARLY) == ((1, len(frame)) if should_drop else (0, 0))
    assert switch.counter("DlcpIngress.early_drops", 1) == ((1, len(frame)) if should_drop else (0, 0))
    # A packet that goes on is counted into its queue's estimate; a dropped one is not.
    assert switch.estimate(2, 0) == depth + (0 if should_drop else 1)
    if jobs:
        assert switch.pipeline.egress(jobs[0], no_queue(depth)) == [(2, forwarded(frame, 2))]


def test_the_depth_is_that_of_the_queue_the_packet_joins(switch: DlcpSwitch) -> None:
    """Only the (port, priority) queue the packet is about to join counts."""
    switch.route("10.0.2.0", 24, 2)
    switch.route("10.0.3.0", 24, 3)
    switch.layer_priority(1, (0, 9), prio=7, dscp=0)
    switch.layer_priority(1, (10, 0xFFFF), prio=1, dscp=0)
    switch.drop_class(1, QUEUE_THRESHOLD)
    switch.queued(2, 1, QUEUE_THRESHOLD)          # port 2's priority-1 queue is deep
    back, front = dlcp_frame(tensor=40, eligible=True), dlcp_frame(tensor=3, eligible=True)
    elsewhere = dlcp_frame(tensor=40, eligible=True, dst="10.0.3.3")
    assert switch.pipeline.ingress(back, IN_PORT, 0) == []
    assert len(switch.pipeline.ingress(front, IN_PORT, 0)) == 1       # priority 7 queue is empty
    assert len(switch.pipeline.ingress(elsewhere, IN_PORT, 0)) == 1   # port 3 is empty
    assert switch.counter("DlcpIngress.ingress_drops", EARLY)[0] == 1


def test_ingress_counts_packets_into_the_estimate_and_egress_resets_it(switch: DlcpSwitch) -> None:
    """A burst faster than one departure still raises the estimate; each departure writes the
    real depth left behind (deq_qdepth)."""
    switch.route("10.0.2.0", 24, 2)
    switch.drop_class(1, 3)
    frames = [dlcp_frame(eligible=True, seq=s) for s in range(6)]
    passed = [job for f in frames for job in switch.pipeline.ingress(f, IN_PORT, 0)]
    assert len(passed) == 3 and switch.estimate(2, 0) == 3   # the 4th found 3 queued: dropped
    left = QueueMeta(enq_timestamp=0, enq_qdepth=0, deq_timedelta=0, deq_qdepth=1, qid=0)
    switch.pipeline.egress(passed[0], left)
    assert switch.estimate(2, 0) == 1
    assert len(switch.pipeline.ingress(frames[0], IN_PORT, 0)) == 1


def test_front_layers_and_small_magnitudes_are_separate_classes(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.drop_class(1, 20, tensors=(0, 9), priority=20)                 # front layers, any magnitude
    switch.drop_class(1, 5, tensors=(10, 0xFFFF), mags=SMALL, priority=10)  # small gradients elsewhere
    switch.queued(2, 0, 12)
    assert len(switch.pipeline.ingress(dlcp_frame(tensor=2, mag=200, eligible=True), IN_PORT, 0)) == 1
    switch.queued(2, 0, 20)
    assert switch.pipeline.ingress(dlcp_frame(tensor=2, mag=200, eligible=True), IN_PORT, 0) == []
    switch.queued(2, 0, 12)
    assert switch.pipeline.ingress(dlcp_frame(tensor=50, mag=100, eligible=True), IN_PORT, 0) == []
    assert len(switch.pipeline.ingress(dlcp_frame(tensor=50, mag=150, eligible=True), IN_PORT, 0)) == 1


def test_no_drop_class_means_no_dropping(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.drop_class(2, 0)  # another job
    switch.queued(2, 0, 1000)
    frame = dlcp_frame(job=1, mag=1, eligible=True, ecn=1)
    assert switch.send(frame, depth=1000) == [(2, forwarded(frame, 2))]
    assert switch.counter("DlcpIngress.ingress_drops", EARLY)[0] == 0


@pytest.mark.parametrize("ecn", [1, 2])
@pytest.mark.parametrize("depth", [ECN_THRESHOLD - 1, ECN_THRESHOLD])
def test_ecn_marks_ect_packets_on_the_depth_they_met(switch: DlcpSwitch, ecn: int, depth: int) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.ecn(1, ECN_THRESHOLD)
    frame = dlcp_frame(job=1, mag=200, ecn=ecn)
    marked = depth >= ECN_THRESHOLD
    assert switch.send(frame, depth=depth) == [(2, forwarded(frame, 2, ecn=ECN_CE if marked else None))]
    assert switch.counter("DlcpEgress.ecn_marks", 1) == ((1, len(frame)) if marked else (0, 0))


def test_ecn_needs_ect_and_an_entry_for_the_job(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, 2)
    switch.ecn(2, 0)
    not_ect, other_job = dlcp_frame(job=2, ecn=0), dlcp_frame(job=1, ecn=2)
    assert switch.send(not_ect, depth=50) == [(2, forwarded(not_ect, 2))]
    assert switch.send(other_job, depth=50) == [(2, forwarded(other_job, 2))]
    assert switch.counter("DlcpEgress.ecn_marks", 2) == (0, 0)


def test_dropping_does_not_mark_and_ecn_does_not_drop(switch: DlcpSwitch) -> None:
    """The two knobs are separate: neither table implies the other's action."""
    switch.route("10.0.2.0", 24, 2)
    switch.drop_class(1, QUEUE_THRESHOLD, mags=SMALL)
    important = dlcp_frame(job=1, mag=200, eligible=False, ecn=2)
    switch.queued(2, 0, 50)
    assert switch.send(important, depth=50) == [(2, forwarded(important, 2))]   # not marked
    assert switch.counter("DlcpEgress.ecn_marks", 1) == (0, 0)

    switch.pipeline.tables["DlcpIngress.drop_class"].clear()
    switch.ecn(1, ECN_THRESHOLD)
    small = dlcp_frame(job=1, mag=5, eligible=True, ecn=2)
    switch.queued(2, 0, 50)
    assert switch.send(small, depth=50) == [(2, forwarded(small, 2, ecn=ECN_CE))]  # not dropped
    assert switch.counter("DlcpIngress.ingress_drops", EARLY)[0] == 0


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
