"""BMv2 queue settings through the real ``simple_switch_CLI``, and BMv2 1.15's queue model as
the embedded traffic manager copies it (``p4switch/traffic_manager.py``).

The real-BMv2 test runs p4c's build of a queue probe (egress writes the queue metadata it
sees into the packet) on ``simple_switch`` between two namespaces, sets rates and depths
with ``apply_queue_settings`` and checks what BMv2 did: each priority queue paced on its
own (the priority argument names the priority), depths of the packet's own queue. Stand-in CLIs remain only for the error paths.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.bmv2_queues import QueueSetting, apply_queue_settings
from controller.errors import ControllerError
from gradfabric.p4build import compile_p4c
from gradfabric.p4ref import ENV_PREFIX, require_tool
from tests import netns

PROBE_P4 = r"""
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header probe_t {
    bit<8> prio; bit<8> seq; bit<32> enq_qdepth; bit<32> deq_timedelta; bit<32> deq_qdepth;
}
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
        if (hdr.probe.isValid() && sm.ingress_port == 1) {
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

RECEIVER = r"""
import json, socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88b5))
s.bind((sys.argv[1], 0))
s.settimeout(0.2)
want, end, got = int(sys.argv[2]), time.monotonic() + float(sys.argv[3]), []
print("ready", flush=True)
while len(got) < want and time.monotonic() < end:
    try:
        frame = s.recv(2048)
    except TimeoutError:
        continue
    if frame[12:14] == b"\x88\xb5":
        got.append(frame[14:28].hex())
print(json.dumps(got), flush=True)
"""

SENDER = r"""
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for item in sys.argv[2:]:
    prio, seq = (int(x) for x in item.split(":"))
    s.send(b"\xff" * 6 + bytes.fromhex("020000000001") + b"\x88\xb5" + bytes([prio, seq]) + bytes(12) + b"x" * 40)
"""


def test_commands_follow_simple_switch_cli_syntax() -> None:
    assert QueueSetting(port=2, rate_pps=1000, depth_packets=64).commands() == [
        "set_queue_rate 1000 2",
        "set_queue_depth 64 2",
    ]
    assert QueueSetting(port=3, rate_pps=500, priority=7).commands() == ["set_queue_rate 500 3 7"]


def test_missing_cli_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_PREFIX, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ControllerError, match="simple_switch_CLI is neither under"):
        apply_queue_settings(9090, [QueueSetting(port=1, rate_pps=1)])


def test_a_command_the_cli_rejects_is_an_error_with_its_words(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The Thrift CLI exits 0 after a rejected command; its words still make it an error."""
    cli = tmp_path / "simple_switch_CLI"
    cli.write_text('#!/bin/sh\ncat >/dev/null\necho "RuntimeCmd: Invalid queue priority 9"\n')
    cli.chmod(0o755)
    monkeypatch.delenv(ENV_PREFIX, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ControllerError, match="Invalid queue priority 9") as exc:
        apply_queue_settings(9091, [QueueSetting(port=1, rate_pps=5, priority=9)])
    assert "set_queue_rate 5 1 9" in str(exc.value)


def _wait_thrift(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while not netns.accepts_connections("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"simple_switch did not open Thrift port {port}: {log.read_text()[-2000:]}")
        time.sleep(0.1)


def _decode(hexes: list[str]) -> list[dict[str, int]]:
    out = []
    for text in hexes:
        b = bytes.fromhex(text)
        out.append({"prio": b[0], "seq": b[1], "enq_qdepth": int.from_bytes(b[2:6], "big"),
                    "deq_timedelta": int.from_bytes(b[6:10], "big"),
                    "deq_qdepth": int.from_bytes(b[10:14], "big")})
    return out


@pytest.mark.bmv2
@pytest.mark.netns
def test_bmv2_paces_each_priority_queue_and_reports_its_own_queue(tmp_path: Path) -> None:
    source = tmp_path / "queue_probe.p4"
    source.write_text(PROBE_P4)
    build = compile_p4c(source, tmp_path / "bmv2", str(require_tool("p4c")))
    thrift = netns.free_port()
    with netns.lab() as lab:
        sender, outer1 = lab.add_host(1, "10.9.0.1")
        receiver, outer2 = lab.add_host(2, "10.9.0.2")
        log = tmp_path / "ss.out"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(require_tool("simple_switch")), "-i", f"1@{outer1}", "-i", f"2@{outer2}",
                 "--thrift-port", str(thrift), "--notifications-addr", f"ipc://{tmp_path}/n.ipc",
                 str(build.device_config), "--", "--priority-queues", "8"],
                stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_thrift(thrift, proc, log)
            # Every queue of port 2: 20 packets/s (50 ms apart), 3 deep; then priority 5 only:
            # 10 packets/s. Had the priority argument been a reversed index, queue 2 would change.
            apply_queue_settings(thrift, [QueueSetting(port=2, rate_pps=20, depth_packets=3),
                                          QueueSetting(port=2, rate_pps=10, priority=5)])
            listen = subprocess.Popen(
                ["ip", "netns", "exec", receiver.ns, sys.executable, "-c", RECEIVER, receiver.iface, "8", "6"],
                stdout=subprocess.PIPE, text=True)
            assert listen.stdout is not None and listen.stdout.readline().strip() == "ready"
            # BMv2 starts a queue's pacing clock when the queue is created (at set_queue_rate):
            # let one interval of each queue pass so the first packets are not held.
            time.sleep(0.3)
            # Six low (priority 0) then six high (priority 5) packets, back to back.
            burst = [f"0:{i}" for i in range(6)] + [f"5:{10 + i}" for i in range(6)]
            netns.in_ns(sender.ns, sys.executable, "-c", SENDER, sender.iface, *burst)
            seen = _decode(json.loads(listen.stdout.readline()))
            listen.wait(timeout=10)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    low = [p for p in seen if p["prio"] == 0]
    high = [p for p in seen if p["prio"] == 5]
    # Depth 3 per queue: the first packet of each queue normally leaves at once and three
    # wait (the first may still be queued when the fourth arrives on a busy machine); the rest
    # are tail-dropped.
    for packets, first in ((low, 0), (high, 10)):
        assert 3 <= len(packets) <= 4, seen
        # The first three always fit; a fourth is whichever arrived after the first had left
        # (a test run saw 10, 11, 12, 14: 13 found the queue full).
        seqs = [p["seq"] for p in packets]
        assert seqs[:3] == [first, first + 1, first + 2] and seqs == sorted(set(seqs)), seen
        assert seqs[-1] < first + 6, seen
    # Depths count the packet's own queue only, never the lows queued beside it. (``qid``,
    # BMv2's queueing_metadata.qid = the priority, is not in p4c's v1model standard_metadata_t.)
    # The k-th high finds at most k (and at most 2, its queue's depth less one) queued ahead;
    # the burst fills the queue; once the burst is in, the last three drain it. (The first high
    # may leave before the second arrives, between the third and the fourth, or later: depths
    # [0, 0, 1, 2], [0, 1, 2, 2] (seen in CI) or [0, 1, 2].)
    enq = [p["enq_qdepth"] for p in high]
    assert max(enq) == 2 and all(d <= min(k, 2) for k, d in enumerate(enq)), seen
    assert [p["deq_qdepth"] for p in high][-3:] == [2, 1, 0], seen
    # Each queue paces itself from enqueue: the k-th waits about k intervals (50 ms low,
    # 100 ms high), whatever the other queue does; a rate shared by the port would make the
    # lows wait behind all the highs.
    for packets, interval_us in ((low, 50_000), (high, 100_000)):
        for k, p in enumerate(packets):
            assert k * interval_us - 15_000 <= p["deq_timedelta"] <= k * interval_us + 25_000, (k, packets)
