"""A gradient burst through the DLCP program and the traffic manager, on a virtual clock.

Driven two ways: step by step (ingress, traffic manager, egress, so every queue depth the
egress pipeline saw is known) and through the switch's own packet path (``Datapath`` with
in-memory ports).

The egress port is rate-limited with the embedded target's port rate (one rate shared by the
strict-priority queues: on BMv2 each priority queue would get its own rate), so the port is
the bottleneck and priority decides who uses it; ``enq_qdepth`` is the depth of the packet's
own priority queue, as on BMv2. Back-layer gradients arrive first, front-layer gradients right after
(backpropagation's order). With the controller's policy installed the front layers leave
first, drop-eligible small-magnitude packets are the only ones lost (dropped in ingress,
before they take a queue slot), the ones that met a deep queue are ECN-marked, and the
counters tell the same story. Without the policy the same burst leaves
in arrival order and the front layers wait behind everything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from hosts.wire import DLCP
from p4switch.pipeline import QueueMeta
from p4switch.ports import MemoryPort, VirtualClock
from p4switch.switch import Datapath
from p4switch.traffic_manager import Rate, TrafficManager
from tests.test_dlcp_pipeline import (  # noqa: F401  (program, switch: fixtures)
    IN_PORT,
    DlcpSwitch,
    dlcp_frame,
    program,
    switch,
)

OUT_PORT = 2
RATE_PPS = 1000            # one packet per millisecond on the egress link
ARRIVAL_GAP_US = 10        # the burst arrives 100 times faster than the link drains it
FRONT_TENSOR, BACK_TENSOR = 1, 20
BACK_PACKETS, FRONT_PACKETS = 24, 12
SMALL_MAG, LARGE_MAG, MAG_THRESHOLD = 100, 140, 120
QUEUE_THRESHOLD = 8
FRONT_PRIO, BACK_PRIO = 7, 1
ECT0 = 2


@dataclass(frozen=True)
class Sent:
    seq: int
    tensor: int
    mag: int
    frame: bytes


@dataclass(frozen=True)
class Outcome:
    """One packet that left its queue: what the egress pipeline saw and what it emitted."""

    seq: int
    time_us: int
    enq_qdepth: int
    frames: tuple[bytes, ...]


def burst() -> list[Sent]:
    """Back-layer packets (alternating small and large magnitude, all drop-eligible), then
    front-layer packets (not drop-eligible); every packet ECN-capable."""
    packets = []
    for seq in range(BACK_PACKETS):
        mag = SMALL_MAG if seq % 2 == 0 else LARGE_MAG
        packets.append(Sent(seq, BACK_TENSOR, mag,
                            dlcp_frame(job=1, tensor=BACK_TENSOR, mag=mag, eligible=True,
                                       ecn=ECT0, seq=seq)))
    for seq in range(100, 100 + FRONT_PACKETS):
        packets.append(Sent(seq, FRONT_TENSOR, LARGE_MAG,
                            dlcp_frame(job=1, tensor=FRONT_TENSOR, mag=LARGE_MAG, eligible=False,
                                       ecn=ECT0, seq=seq)))
    return packets


#: Depth of the queue each packet would join, just before it arrived (filled by run()).
queued_before: dict[int, int] = {}


def run(switch: DlcpSwitch, packets: list[Sent]) -> tuple[list[Outcome], TrafficManager]:
    """Feed the burst through ingress, the traffic manager and egress, on a virtual clock."""
    tm = TrafficManager(priority_queues=8, default_depth=64)
    tm.set_port_rate(OUT_PORT, Rate(RATE_PPS))
    seq_of: dict[int, int] = {}
    outcomes: list[Outcome] = []
    queued_before.clear()

    def drain(now_us: int) -> None:
        for departure in tm.dequeue(now_us):
            q = departure.queue
            meta = QueueMeta(enq_timestamp=q.enq_timestamp, enq_qdepth=q.enq_qdepth,
                             deq_timedelta=q.deq_timedelta, deq_qdepth=q.deq_qdepth, qid=q.qid)
            frames = tuple(f for _, f in switch.pipeline.egress(departure.item, meta))
            outcomes.append(Outcome(seq_of[id(departure.item)], departure.time_us,
                                    q.enq_qdepth, frames))

    for i, packet in enumerate(packets):
        now = i * ARRIVAL_GAP_US
        drain(now)
        queued_before[packet.seq] = tm.depth(OUT_PORT, BACK_PRIO if packet.tensor == BACK_TENSOR else FRONT_PRIO)
        for job in switch.pipeline.ingress(packet.frame, IN_PORT, now):
            assert job.egress_port == OUT_PORT
            seq_of[id(job)] = packet.seq
            assert tm.enqueue(job, job.egress_port, job.priority, len(packet.frame), now)
    while (next_us := tm.next_departure_us()) is not None:
        drain(math.ceil(next_us))
    return outcomes, tm


def install_policy(switch: DlcpSwitch) -> None:
    switch.layer_priority(1, (0, 9), prio=FRONT_PRIO, dscp=46)
    switch.layer_priority(1, (10, 0xFFFF), prio=BACK_PRIO, dscp=10)
    switch.drop_class(1, QUEUE_THRESHOLD, mags=(0, MAG_THRESHOLD - 1))
    switch.ecn(1, QUEUE_THRESHOLD)


def test_front_layers_leave_first_and_small_eligible_packets_are_dropped(
    switch: DlcpSwitch,
) -> None:
    switch.route("10.0.2.0", 24, OUT_PORT)
    install_policy(switch)
    packets = burst()
    by_seq = {p.seq: p for p in packets}
    outcomes, tm = run(switch, packets)

    assert not tm.drops  # the queue never overflowed: every loss below is the program's
    dropped = set(by_seq) - {o.seq for o in outcomes}

    # Priority: once the front layers are queued, they all leave before the back layers
    # still waiting (only back-layer packets already on the wire precede them).
    order = [by_seq[o.seq].tensor for o in outcomes]
    first_front = order.index(FRONT_TENSOR)
    assert order[first_front:first_front + FRONT_PACKETS] == [FRONT_TENSOR] * FRONT_PACKETS
    assert first_front <= 1
    front_done = max(o.time_us for o in outcomes if by_seq[o.seq].tensor == FRONT_TENSOR)
    back_waiting = [o for o in outcomes
                    if by_seq[o.seq].tensor == BACK_TENSOR and o.time_us > front_done]
    assert len(back_waiting) >= BACK_PACKETS - 2 - len(dropped)

    # Dropping, in ingress: exactly the drop-eligible small-magnitude packets that found their
    # queue holding the threshold or more; they never reached the traffic manager.
    should_drop = {s for s, p in by_seq.items()
                   if p.mag < MAG_THRESHOLD and queued_before[s] >= QUEUE_THRESHOLD}
    assert dropped == should_drop
    assert dropped
    assert sum(tm.departed.values()) == len(packets) - len(dropped)

    # ECN: delivered packets are CE exactly when their queue held the threshold on arrival.
    delivered = [o for o in outcomes if o.frames]
    assert len(delivered) == len(outcomes)
    marked = 0
    for o in delivered:
        (frame,) = o.frames
        ip = Ether(frame)[IP]
        congested = o.enq_qdepth >= QUEUE_THRESHOLD
        assert (ip.tos & 3) == (3 if congested else ECT0), o
        assert Ether(frame)[DLCP].seq == o.seq
        marked += congested
    assert marked > 0

    # The counters tell the same story.
    c = switch.counter
    assert c("DlcpIngress.ingress_drops", 6)[0] == len(dropped)
    assert c("DlcpEgress.ecn_marks", 1)[0] == marked
    assert c("DlcpEgress.port_tx", OUT_PORT * 8 + FRONT_PRIO)[0] == FRONT_PACKETS
    assert c("DlcpEgress.port_tx", OUT_PORT * 8 + BACK_PRIO)[0] == BACK_PACKETS - len(dropped)
    assert c("DlcpIngress.job_rx", 1)[0] == len(packets)
    assert tm.departed[(OUT_PORT, FRONT_PRIO)] == FRONT_PACKETS


def test_without_the_policy_the_burst_leaves_in_arrival_order(switch: DlcpSwitch) -> None:
    switch.route("10.0.2.0", 24, OUT_PORT)
    packets = burst()
    outcomes, tm = run(switch, packets)
    assert [o.seq for o in outcomes] == [p.seq for p in packets]
    assert all(len(o.frames) == 1 for o in outcomes)
    assert switch.counter("DlcpIngress.ingress_drops", 6)[0] == 0
    assert switch.counter("DlcpEgress.port_tx", OUT_PORT * 8)[0] == len(packets)


def test_the_switch_datapath_gives_the_same_result(switch: DlcpSwitch) -> None:
    """The same burst through the switch's own packet path (in-memory ports, virtual clock)."""
    switch.route("10.0.2.0", 24, OUT_PORT)
    install_policy(switch)
    clock = VirtualClock()
    tm = TrafficManager(priority_queues=8, default_depth=64)
    tm.set_port_rate(OUT_PORT, Rate(RATE_PPS))
    datapath = Datapath(tm, clock)
    wire = MemoryPort(OUT_PORT, clock)
    datapath.add_port(MemoryPort(IN_PORT, clock))
    datapath.add_port(wire)
    datapath.install(switch.pipeline)

    packets = burst()
    by_seq = {p.seq: p for p in packets}
    for i, packet in enumerate(packets):
        clock.time_us = i * ARRIVAL_GAP_US
        datapath.transmit_due()
        queued = datapath.receive(packet.frame, IN_PORT)
        assert queued == 1 or packet.mag < MAG_THRESHOLD   # only small ones are dropped in ingress
    while (due := tm.next_departure_us()) is not None:
        clock.time_us = max(clock.time_us, math.ceil(due))
        datapath.transmit_due()

    left = [(t, Ether(frame)) for t, frame in wire.sent]
    seqs = [pkt[DLCP].seq for _, pkt in left]
    tensors = [by_seq[s].tensor for s in seqs]
    assert tensors[1:1 + FRONT_PACKETS] == [FRONT_TENSOR] * FRONT_PACKETS
    assert set(tensors[1 + FRONT_PACKETS:]) == {BACK_TENSOR}
    lost = set(by_seq) - set(seqs)
    assert lost and all(by_seq[s].mag < MAG_THRESHOLD for s in lost)
    assert all(pkt[IP].tos >> 2 == 46 for _, pkt in left if pkt[DLCP].tensor_id == FRONT_TENSOR)
    # One packet per millisecond on the wire, the front layers within the first 13 ms.
    times = [t for t, _ in left]
    assert times == sorted(times)
    assert max(t for (t, pkt) in left if pkt[DLCP].tensor_id == FRONT_TENSOR) <= 13 * 1000
    assert not tm.drops
    assert switch.counter("DlcpIngress.ingress_drops", 6)[0] == len(lost)
    assert switch.counter("DlcpEgress.port_tx", OUT_PORT * 8 + BACK_PRIO)[0] == (
        BACK_PACKETS - len(lost))
