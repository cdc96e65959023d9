"""`p4switch run` on the native datapath between two namespaces: forwarding with the
program's rewrites, P4Runtime writes reaching the C tables, queue rates in the native
traffic manager, the fallback to Python with its reason."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p4switch.native.build import find_compiler
from p4switch.server import control
from tests import netns
from tests.benchmarks.bench_switch import SWITCH_MAC, _Client, _mac, _rx_packets, _udp_frame
from tests.netns import Lab
from tests.test_switch_process import switch_process

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")]

ROUTER = Path(__file__).parent / "p4programs" / "ipv4_router.p4"

SEND = r"""
import socket, sys
iface, frame, count = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((iface, 0))
for _ in range(count):
    sock.send(frame)
"""

CAPTURE = r"""
import socket, sys
iface, want = sys.argv[1], bytes.fromhex(sys.argv[2])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sock.bind((iface, 0))
sock.settimeout(10)
while True:
    frame = sock.recv(2048)
    if frame[:6] == want:
        print(frame.hex())
        break
"""


def _send(host: netns.Host, frame: bytes, count: int) -> None:
    netns.in_ns(host.ns, sys.executable, "-c", SEND, host.iface, frame.hex(), str(count), timeout=60)


def _wait_rx(host: netns.Host, at_least: int, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = _rx_packets(host)
        if n >= at_least:
            return n
        time.sleep(0.05)
    return _rx_packets(host)


def _two_hosts(lab: Lab) -> tuple[netns.Host, str, netns.Host, str]:
    h1, out1 = lab.add_host(1, "10.0.1.1")
    h2, out2 = lab.add_host(2, "10.0.2.1")
    for host in (h1, h2):  # no IPv6 chatter in the counts
        netns.in_ns(host.ns, "sysctl", "-qw", f"net.ipv6.conf.{host.iface}.disable_ipv6=1", check=False)
    return h1, out1, h2, out2


def _settled_stats(address: str) -> dict[str, int]:
    """The switch's packet counts once the hosts' start-up frames (sent as their links came
    up, before IPv6 was turned off) have gone through: the datapath is native, and the counts
    stayed the same for half a second (or 5 s passed)."""
    shown = control.call(address, "Stats", {})
    assert shown["datapath"] == "native"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = control.call(address, "Stats", {})
        if again["packets"] == shown["packets"]:
            break
        shown = again
    return shown["packets"]


def _delta(stats: dict[str, int], base: dict[str, int], key: str) -> int:
    return stats.get(key, 0) - base.get(key, 0)


def test_router_forwards_natively_with_rewrites_and_rates(lab: Lab, tmp_path: Path) -> None:
    h1, out1, h2, out2 = _two_hosts(lab)
    log = tmp_path / "s.log"
    args = [str(ROUTER), "--device-id", "1", "-i", f"1@{out1}", "-i", f"2@{out2}", "--datapath", "native"]
    with switch_process(args, log, ready_timeout=60) as (_, address):
        client = _Client(address, 1)
        try:
            client.write([client.lpm_update("MyIngress.ipv4_lpm", 0x0A000200, 24, "MyIngress.ipv4_forward",
                                            {"dstAddr": _mac(h2.mac), "port": 2})])
            frame = _udp_frame(h1, h2, SWITCH_MAC, 5000, bytes(18))
            import subprocess
            capture = subprocess.Popen(["ip", "netns", "exec", h2.ns, sys.executable, "-c", CAPTURE, h2.iface,
                                        h2.mac.replace(":", "")], stdout=subprocess.PIPE, text=True)
            time.sleep(0.5)
            before = _rx_packets(h2)
            _send(h1, frame, 1)
            out = bytes.fromhex(capture.communicate(timeout=15)[0].strip())
            # MACs rewritten (dst = next hop, src = the frame's old dst), TTL 64 -> 63, checksum +1.
            assert out[:6] == bytes.fromhex(h2.mac.replace(":", ""))
            assert out[6:12] == bytes.fromhex(SWITCH_MAC.replace(":", ""))
            assert out[22] == 63 and frame[22] == 64
            assert int.from_bytes(out[24:26], "big") == int.from_bytes(frame[24:26], "big") + 0x100
            assert out[26:] == frame[26:]
            _send(h1, frame, 2000)
            assert _wait_rx(h2, before + 2001) - before >= 1900
            stats = control.call(address, "Stats", {})
            assert stats["datapath"] == "native"
            assert stats["packets"]["received"] >= 2001
            # A queue rate in the native traffic manager: 200 pps out of a burst of 600, counted over
            # a window that starts once the burst is in (sending takes longer on a loaded machine)
            # and while the queue stays backlogged; the window's ends bracket the counter reads.
            control.call(address, "SetQueueRate", {"port": 2, "priority": None, "rate": "200pps"})
            control.call(address, "SetQueueDepth", {"port": 2, "priority": None, "depth": 1000})
            _send(h1, frame, 600)
            opened = time.monotonic()
            before = _rx_packets(h2)
            read_at = time.monotonic()
            time.sleep(1.0)
            paced = _rx_packets(h2) - before
            closed = time.monotonic()
            shown = control.call(address, "ShowQueues", {"port": 2})["2"]
            assert shown["queues"][0]["queued"] > 0, "the queue stayed backlogged through the window"
            assert 0.5 * 200 * (closed - read_at) <= paced <= 1.25 * 200 * (closed - opened) + 5, \
                (paced, closed - opened)
        finally:
            client.close()
    assert "native datapath" in log.read_text()


def test_pcaps_fall_back_to_python_with_the_reason(lab: Lab, tmp_path: Path) -> None:
    h1, out1, h2, out2 = _two_hosts(lab)
    log = tmp_path / "s.log"
    args = [str(ROUTER), "-i", f"1@{out1}", "-i", f"2@{out2}", "--pcap", str(tmp_path / "pcaps")]
    with switch_process(args, log, ready_timeout=60) as (_, address):
        assert control.call(address, "Stats", {})["datapath"] == "python"
    text = log.read_text()
    assert "pipeline runs on the Python datapath: --pcap" in text


def test_digests_reach_the_p4runtime_client_from_the_native_loops(lab: Lab, tmp_path: Path) -> None:
    """mac_learning.p4 on the native datapath: an LLDP frame from an unknown MAC gives two
    DigestLists on the primary's stream: digest_0 (a tuple: MAC, EtherType) and learn_t (a
    struct: MAC, ingress port)."""
    import queue
    import threading

    import grpc
    from p4.v1 import p4runtime_pb2

    h1, out1, h2, out2 = _two_hosts(lab)
    log = tmp_path / "s.log"
    program = Path(__file__).parent / "p4programs" / "mac_learning.p4"
    args = [str(program), "--device-id", "1", "-i", f"1@{out1}", "-i", f"2@{out2}", "--datapath", "native"]
    with switch_process(args, log, ready_timeout=60) as (_, address):
        client = _Client(address, 1)
        try:
            assert control.call(address, "Stats", {})["datapath"] == "native"
            ids = {d.preamble.name: d.preamble.id for d in client.p4info.digests}
            updates = []
            for digest_id in ids.values():
                entry = p4runtime_pb2.DigestEntry(digest_id=digest_id)
                entry.config.max_list_size = 1
                updates.append(p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT,
                                                    entity=p4runtime_pb2.Entity(digest_entry=entry)))
            client.write(updates)
            messages: queue.Queue = queue.Queue()

            def read_stream() -> None:
                try:
                    for message in client._stream:
                        messages.put(message)
                except grpc.RpcError:
                    pass  # the channel closed at the end of the test
            threading.Thread(target=read_stream, daemon=True).start()
            mac = bytes.fromhex(h1.mac.replace(":", ""))
            _send(h1, bytes.fromhex("0180c200000e") + mac + b"\x88\xcc" + bytes(46), 1)
            digests: dict[int, p4runtime_pb2.DigestList] = {}
            deadline = time.monotonic() + 10
            while len(digests) < 2 and time.monotonic() < deadline:
                try:
                    message = messages.get(timeout=1)
                except queue.Empty:
                    continue
                if message.HasField("digest"):
                    digests[message.digest.digest_id] = message.digest
            assert set(digests) == {ids["learn_t"], ids["digest_0"]}, digests
            learn = [m.bitstring for m in digests[ids["learn_t"]].data[0].struct.members]
            assert learn[0] == mac and int.from_bytes(learn[1], "big") == 1
            lldp = [m.bitstring for m in digests[ids["digest_0"]].data[0].tuple.members]
            assert lldp[0] == mac and int.from_bytes(lldp[1], "big") == 0x88CC
            assert control.call(address, "Stats", {})["packets"]["digests"] >= 1
        finally:
            client.close()


def _native_args(program: str, *interfaces: str) -> list[str]:
    """`p4switch run` arguments: tests/p4programs/`program` natively, interface i on port i + 1."""
    ports = [arg for i, name in enumerate(interfaces) for arg in ("-i", f"{i + 1}@{name}")]
    return [str(Path(__file__).parent / "p4programs" / program), "--device-id", "1", *ports, "--datapath", "native"]


def test_packets_calling_an_extern_without_a_body_are_counted_and_dropped(lab: Lab, tmp_path: Path) -> None:
    """lang_extern_fn.p4 natively: a frame that reaches `scramble` is dropped and counted as
    failed; the others are forwarded."""
    h1, out1, h2, out2 = _two_hosts(lab)
    with switch_process(_native_args("lang_extern_fn.p4", out1, out2), tmp_path / "s.log",
                        ready_timeout=60) as (_, address):
        base = _settled_stats(address)
        before = _rx_packets(h2)
        _send(h1, bytes([0xEE, 0x10]) + bytes(58), 5)  # calls scramble
        _send(h1, bytes([0x01, 0x10]) + bytes(58), 3)  # does not
        _wait_rx(h2, before + 3)
        time.sleep(0.3)
        stats = control.call(address, "Stats", {})["packets"]
        assert (_delta(stats, base, "transmitted"), _delta(stats, base, "failed")) == (3, 5), (base, stats)
        assert _rx_packets(h2) - before >= 3


def test_assume_and_log_msg_in_the_native_loops(lab: Lab, tmp_path: Path) -> None:
    """lang_truncate_assert_log.p4 natively: packets that fail its assume are counted as failed
    and not sent; every log_msg line (also those logged before the failure) reaches the
    switch's log on the pipeline's logger, from ingress and from egress."""
    h1, out1, h2, out2 = _two_hosts(lab)
    log = tmp_path / "s.log"
    with switch_process(_native_args("lang_truncate_assert_log.p4", out1, out2), log, ready_timeout=60) as (_, address):
        base = _settled_stats(address)
        before = _rx_packets(h2)
        _send(h1, bytes([0x01, 0x20, 0x10]) + bytes(57), 3)  # forwarded, cut to 32 bytes
        _send(h1, bytes([0xFF, 0x04, 0x10]) + bytes(57), 2)  # assume(kind != 0xFF) fails
        _wait_rx(h2, before + 3)
        time.sleep(0.5)
        stats = control.call(address, "Stats", {})["packets"]
        assert (_delta(stats, base, "transmitted"), _delta(stats, base, "failed")) == (3, 2), (base, stats)
    text = log.read_text()
    assert text.count("p4switch.pipeline: in kind=1 len=32") == 3, text[-2000:]
    assert text.count("p4switch.pipeline: out port=2 v=17 rid=0") == 3
    assert text.count("p4switch.pipeline: in kind=255 len=4") == 2


def _heads(host: netns.Host, seconds: float) -> "subprocess.Popen[str]":
    """A capture on `host` counting received frames by their first 4 bytes for `seconds`
    (its first output line says it listens; its last is the counts)."""
    proc = subprocess.Popen(["ip", "netns", "exec", host.ns, sys.executable, "-c", HEADS, host.iface,
                             str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _counts(proc: "subprocess.Popen[str]") -> dict[str, int]:
    out, _ = proc.communicate(timeout=30)
    return ast.literal_eval(out.strip().splitlines()[-1])


def test_clones_leave_the_native_loops_on_their_sessions_ports(lab: Lab, tmp_path: Path) -> None:
    """lang_clone.p4 natively, clone sessions 5 and 6 written over P4Runtime (both to port 3):
    kind 1 leaves on port 2 (v + 1) and its I2E clone on port 3 (v as sent, instance type 1);
    kind 4 is dropped in egress and only its E2E clone leaves, on port 3 (instance type 2)."""
    from p4.v1 import p4runtime_pb2

    h1, out1, h2, out2 = _two_hosts(lab)
    h3, out3 = lab.add_host(3, "10.0.3.1")
    args = _native_args("lang_clone.p4", out1, out2, out3)
    with switch_process(args, tmp_path / "s.log", ready_timeout=60) as (_, address):
        client = _Client(address, 1)
        try:
            assert control.call(address, "Stats", {})["datapath"] == "native"
            updates = []
            for session in (5, 6):
                entry = p4runtime_pb2.CloneSessionEntry(session_id=session)
                entry.replicas.add(egress_port=3, instance=0)
                pre = p4runtime_pb2.PacketReplicationEngineEntry(clone_session_entry=entry)
                updates.append(p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=p4runtime_pb2.Entity(
                    packet_replication_engine_entry=pre)))
            client.write(updates)
            on2, on3 = _heads(h2, 8.0), _heads(h3, 8.0)  # long enough for two sends on a loaded machine
            _send(h1, bytes([0x01, 0x10, 0x00, 0x00]) + bytes(56), 4)
            _send(h1, bytes([0x04, 0x10, 0x00, 0x00]) + bytes(56), 3)
            got2, got3 = _counts(on2), _counts(on3)
        finally:
            client.close()
    assert got2.get("01110000") == 4 and "04210000" not in got2, got2
    assert (got3.get("01100001"), got3.get("04210002")) == (4, 3), got3


HEADS = r"""
import socket, sys, time
iface, seconds = sys.argv[1], float(sys.argv[2])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sock.bind((iface, 0))
sock.settimeout(0.1)
print("ready", flush=True)
heads = {}
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        frame, addr = sock.recvfrom(2048)
    except socket.timeout:
        continue
    if addr[2] != socket.PACKET_OUTGOING:
        heads[frame[:4].hex()] = heads.get(frame[:4].hex(), 0) + 1
print(heads)
"""
