"""The packet path on in-memory ports with a virtual clock: a P4 program sets the priority in
ingress and records the queue metadata it sees in egress, so departure order, tail drops and
``enq_qdepth`` are checked as the program sees them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from p4switch.ports import MemoryPort, VirtualClock
from p4switch.switch import Datapath
from p4switch.traffic_manager import Rate, TrafficManager

QUEUE_PROBE_P4 = r"""
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header probe_t { bit<8> prio; bit<8> seq; bit<32> enq_qdepth; bit<32> deq_timedelta; bit<32> deq_qdepth; }
struct headers { ethernet_t ethernet; probe_t probe; }
struct metadata { }

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.type) { 0x88b5: parse_probe; default: accept; }
    }
    state parse_probe { pkt.extract(hdr.probe); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.probe.isValid()) {
            sm.egress_spec = 2;
            sm.priority = (bit<3>) hdr.probe.prio;
        } else {
            mark_to_drop(sm);
        }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        hdr.probe.enq_qdepth = (bit<32>) sm.enq_qdepth;
        hdr.probe.deq_timedelta = sm.deq_timedelta;
        hdr.probe.deq_qdepth = (bit<32>) sm.deq_qdepth;
    }
}
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.probe); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def probe(prio: int, seq: int) -> bytes:
    return bytes(6) + bytes.fromhex("020000000001") + b"\x88\xb5" + bytes([prio, seq]) + bytes(12) + b"payload"


def decode(frame: bytes) -> tuple[int, int, int, int, int]:
    """(prio, seq, enq_qdepth, deq_timedelta, deq_qdepth) as egress wrote them."""
    body = frame[14:]
    return (body[0], body[1], int.from_bytes(body[2:6], "big"), int.from_bytes(body[6:10], "big"),
            int.from_bytes(body[10:14], "big"))


@pytest.fixture
def datapath(tmp_path: Path) -> tuple[Datapath, VirtualClock, MemoryPort]:
    from p4switch.frontend import load_program
    from p4switch.pipeline import Pipeline

    source = tmp_path / "queue_probe.p4"
    source.write_text(QUEUE_PROBE_P4)
    clock = VirtualClock()
    tm = TrafficManager(priority_queues=8)
    path = Datapath(tm, clock)
    for number in (1, 2):
        path.add_port(MemoryPort(number, clock))
    path.install(Pipeline(load_program(source)))
    return path, clock, path.ports[2]  # type: ignore[return-value]


def run_until(path: Datapath, clock: VirtualClock, end_us: int, step_us: int = 100) -> None:
    while clock.now_us() < end_us:
        clock.advance(step_us)
        path.transmit_due()


@pytest.mark.parametrize("shared", [False, True], ids=["bmv2-queue-rates", "port-rate"])
def test_burst_into_rate_limited_port(datapath: tuple[Datapath, VirtualClock, MemoryPort], shared: bool) -> None:
    path, clock, out = datapath
    if shared:
        path.tm.set_port_rate(2, Rate(1000))  # the port: 1 ms per packet, shared
    else:
        path.tm.set_queue_rate(2, Rate(1000))  # each priority queue: 1 ms per packet (BMv2)
    path.tm.set_queue_depth(2, 4)
    # Five low-priority (0) then five high-priority (5) packets at t=0: one of each is tail-dropped.
    queued = [path.receive(probe(0, i), 1) for i in range(5)] + [path.receive(probe(5, 10 + i), 1) for i in range(5)]
    assert queued == [1, 1, 1, 1, 0, 1, 1, 1, 1, 0]
    assert path.tm.drops[(2, 0, "queue_full")] == 1 and path.tm.drops[(2, 5, "queue_full")] == 1
    path.transmit_due()
    run_until(path, clock, 10_000)
    seen = [decode(frame) for frame in out.take()]
    if shared:
        # Strict priority takes the shared port: all high packets first.
        assert [s[1] for s in seen] == [10, 11, 12, 13, 0, 1, 2, 3]
        assert [s[3] for s in seen] == [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000]
        assert [s[4] for s in seen] == [3, 2, 1, 0, 3, 2, 1, 0]
    else:
        # Each queue paces itself: one high and one low packet every millisecond.
        assert [s[1] for s in seen] == [10, 0, 11, 1, 12, 2, 13, 3]
        assert [s[3] for s in seen] == [0, 0, 1000, 1000, 2000, 2000, 3000, 3000]
        assert [s[4] for s in seen] == [3, 3, 2, 2, 1, 1, 0, 0]
    # enq_qdepth is the depth of the packet's own priority queue when it arrived.
    assert sorted(s[2] for s in seen if s[0] == 5) == [0, 1, 2, 3]
    assert sorted(s[2] for s in seen if s[0] == 0) == [0, 1, 2, 3]


def test_unlimited_port_forwards_at_once_and_bad_frames_are_counted(
        datapath: tuple[Datapath, VirtualClock, MemoryPort]) -> None:
    path, _, out = datapath
    assert path.receive(probe(1, 7), 1) == 1
    assert path.transmit_due() == 1
    (frame,) = out.take()
    assert decode(frame)[:3] == (1, 7, 0) and frame.endswith(b"payload")
    # Truncated, empty and non-probe frames never reach a port and never stop the switch.
    for bad in (b"", b"\x01\x02", probe(1, 8)[:20], bytes(14)):
        assert path.receive(bad, 1) == 0
    assert path.transmit_due() == 0 and out.take() == []
    assert path.receive(probe(0, 9), 1) == 1
    path.transmit_due()
    assert [decode(f)[1] for f in out.take()] == [9]


def test_priority_beyond_queue_count_is_dropped(datapath: tuple[Datapath, VirtualClock, MemoryPort]) -> None:
    path, _, out = datapath
    path.tm = TrafficManager(priority_queues=2)
    assert path.receive(probe(6, 1), 1) == 0
    assert path.tm.drops[(2, 6, "bad_priority")] == 1
    assert path.transmit_due() == 0 and out.take() == []


def test_immediate_mode_sends_what_the_queued_path_sends(tmp_path: Path) -> None:
    """Real ports send a packet that finds its port idle from receive() itself; with the
    ingress thread's habit (transmit_due after every frame) the frames, their times and the
    queue metadata egress sees are those of the queue-everything path."""
    from p4switch.frontend import load_program
    from p4switch.pipeline import Pipeline

    source = tmp_path / "queue_probe.p4"
    source.write_text(QUEUE_PROBE_P4)
    program = load_program(source)
    runs = {}
    for immediate in (False, True):
        clock = VirtualClock()
        tm = TrafficManager(priority_queues=8)
        tm.set_queue_rate(2, Rate(2000))  # 500 us per packet and queue: some packets wait, some do not
        tm.set_port_rate(2, Rate(3000))
        path = Datapath(tm, clock, immediate=immediate)
        for number in (1, 2):
            path.add_port(MemoryPort(number, clock))
        path.install(Pipeline(load_program(source)) if immediate else Pipeline(program))
        passed_at_once = 0
        for i, gap in enumerate([0, 100, 100, 900, 2000, 50, 50, 50, 3000, 600] * 3):
            clock.advance(gap)
            before = len(path.ports[2].sent)  # type: ignore[attr-defined]
            path.receive(probe(i % 3 * 2, i), 1)
            passed_at_once += len(path.ports[2].sent) - before  # type: ignore[attr-defined]
            path.transmit_due()
        run_until(path, clock, clock.now_us() + 20_000)
        sent = path.ports[2].sent  # type: ignore[attr-defined]
        runs[immediate] = ([(t, decode(f)) for t, f in sent], dict(tm.departed), passed_at_once)
    assert runs[True][:2] == runs[False][:2]
    assert len(runs[True][0]) == 30
    assert runs[False][2] == 0 and runs[True][2] > 0  # only immediate mode sent from receive()
