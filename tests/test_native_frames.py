"""Frames of every size and the switch's one set of statistics, between namespaces.

Frames up to the ports' MTU (here 65,535, the largest a veth takes) leave whole, also past
the native datapath's former 10,240-byte buffer; a frame over the egress port's MTU is
counted (`send_errors`) and dropped, never cut. `p4switch ctl stats` and the shutdown line
sum both datapaths: what arrived before a pipeline was loaded (counted `no_pipeline`), and
what the native switch counted since.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p4switch.device_config import device_config_bytes
from p4switch.frontend import load_program
from p4switch.native.build import find_compiler
from p4switch.p4info import build_p4info
from p4switch.server import control
from tests import netns
from tests.benchmarks.bench_switch import SWITCH_MAC, _Client, _mac, _udp_frame
from tests.netns import Lab
from tests.test_switch_process import switch_process

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")]

ROUTER = Path(__file__).parent / "p4programs" / "ipv4_router.p4"
BIG_MTU = 65535

SEND = r"""
import socket, sys, time
iface = sys.argv[1]
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((iface, 0))
for hexed in sys.stdin.read().split():
    sock.send(bytes.fromhex(hexed))
    time.sleep(0.02)
"""

#: Frames to one MAC until `count` arrived or 10 s passed: one line of hex per frame.
CAPTURE = r"""
import socket, sys, time
iface, want, count = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sock.bind((iface, 0))
sock.settimeout(0.5)
print("ready", flush=True)
deadline, got = time.monotonic() + 10, 0
while got < count and time.monotonic() < deadline:
    try:
        frame = sock.recv(1 << 17)
    except socket.timeout:
        continue
    if frame[:6] == want:
        print(frame.hex(), flush=True)
        got += 1
"""


def _mtu(host: netns.Host, outer: str, mtu: int) -> None:
    netns.in_ns(host.ns, "ip", "link", "set", "dev", host.iface, "mtu", str(mtu))
    netns.sh("ip", "link", "set", "dev", outer, "mtu", str(mtu))
    for flag in ("gro", "gso", "tso"):  # frames as sent, not coalesced or split
        netns.in_ns(host.ns, "ethtool", "-K", host.iface, flag, "off", check=False)
        netns.sh("ethtool", "-K", outer, flag, "off", check=False)


def _hosts(lab: Lab) -> tuple[list[netns.Host], list[str]]:
    hosts, outers = [], []
    for i, mtu in ((1, BIG_MTU), (2, BIG_MTU), (3, 1500)):
        host, outer = lab.add_host(i, f"10.0.{i}.1")
        netns.in_ns(host.ns, "sysctl", "-qw", f"net.ipv6.conf.{host.iface}.disable_ipv6=1", check=False)
        netns.sh("sysctl", "-qw", f"net.ipv6.conf.{outer}.disable_ipv6=1", check=False)
        _mtu(host, outer, mtu)
        hosts.append(host)
        outers.append(outer)
    return hosts, outers


def _frame(src: netns.Host, dst: netns.Host, size: int) -> bytes:
    frame = _udp_frame(src, dst, SWITCH_MAC, 5000, bytes((i * 7) & 0xFF for i in range(size - 42)))
    assert len(frame) == size
    return frame


def _send_and_capture(src: netns.Host, dst: netns.Host, frames: list[bytes], expect: int) -> list[bytes]:
    capture = subprocess.Popen(["ip", "netns", "exec", dst.ns, sys.executable, "-c", CAPTURE, dst.iface,
                                dst.mac.replace(":", ""), str(expect)], stdout=subprocess.PIPE, text=True)
    try:
        assert capture.stdout is not None and capture.stdout.readline().strip() == "ready"
        subprocess.run(["ip", "netns", "exec", src.ns, sys.executable, "-c", SEND, src.iface],
                       input="\n".join(f.hex() for f in frames), text=True, check=True, timeout=60,
                       capture_output=True)
        out, _ = capture.communicate(timeout=30)
    finally:
        if capture.poll() is None:
            capture.kill()
            capture.wait()
    return [bytes.fromhex(line) for line in out.split() if line]


def _routed(frame: bytes, dst: netns.Host) -> bytes:
    """The router's rewrite of `frame`: MACs, TTL - 1, the checksum's high byte + 1."""
    out = bytearray(frame)
    out[0:6] = bytes.fromhex(dst.mac.replace(":", ""))
    out[6:12] = bytes.fromhex(SWITCH_MAC.replace(":", ""))
    out[22] -= 1
    checksum = int.from_bytes(frame[24:26], "big") + 0x100
    out[24:26] = ((checksum & 0xFFFF) + (checksum >> 16)).to_bytes(2, "big")
    return bytes(out)


def _stopped_line(log: Path) -> str:
    lines = log.read_text().splitlines()
    found = [t for t in lines if "switch stopped" in t]
    assert found, "no shutdown line; the log ends:\n" + "\n".join(lines[-15:])
    return found[-1]


@pytest.mark.parametrize("datapath", ["native", "python"])
def test_frames_up_to_the_mtu_leave_whole_and_larger_ones_are_counted(lab: Lab, tmp_path: Path,
                                                                        datapath: str) -> None:
    (h1, h2, h3), outers = _hosts(lab)
    log = tmp_path / "s.log"
    args = [str(ROUTER), "--device-id", "1", "--datapath", datapath]
    for number, outer in enumerate(outers, start=1):
        args += ["-i", f"{number}@{outer}"]
    with switch_process(args, log, ready_timeout=60) as (_, address):
        client = _Client(address, 1)
        try:
            client.write([client.lpm_update("MyIngress.ipv4_lpm", 0x0A000000 | i << 8, 24, "MyIngress.ipv4_forward",
                                            {"dstAddr": _mac(h.mac), "port": i}) for i, h in ((2, h2), (3, h3))])
        finally:
            client.close()
        assert control.call(address, "Stats", {})["datapath"] == datapath
        sizes = [64, 1514, 10240, 10241, 12000, BIG_MTU + 14]
        frames = [_frame(h1, h2, size) for size in sizes]
        got = _send_and_capture(h1, h2, frames, len(frames))
        assert [len(f) for f in got] == sizes
        assert got == [_routed(f, h2) for f in frames]
        # Over port 3's MTU (1500): counted and dropped; a frame that fits still leaves.
        small, big = _frame(h1, h3, 1400), _frame(h1, h3, 12000)
        got = _send_and_capture(h1, h3, [big, small], 2)
        assert got == [_routed(small, h3)]
        stats = control.call(address, "Stats", {})["packets"]
        assert stats.get("send_errors", 0) == 1, stats
        assert stats["received"] >= len(sizes) + 2 and stats["transmitted"] >= len(sizes) + 1, stats
    line = _stopped_line(log)
    assert "send_errors 1" in line, line
    assert int(re.search(r"received (\d+)", line).group(1)) == stats["received"]


def _settled(address: str) -> dict[str, int]:
    """Packet counts once the hosts' start-up frames (sent as their links came up) are in:
    unchanged for half a second, or 5 s passed."""
    shown = control.call(address, "Stats", {})["packets"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = control.call(address, "Stats", {})["packets"]
        if again == shown:
            break
        shown = again
    return shown


def test_frames_before_the_pipeline_and_after_are_one_count(lab: Lab, tmp_path: Path) -> None:
    """No pipeline: 5 frames counted received and no_pipeline (by the Python threads); then
    the pipeline comes over P4Runtime and runs natively: 7 more, all sent; the stats, and the
    shutdown line after the native switch stopped, count all 12."""
    (h1, h2, _), outers = _hosts(lab)
    log = tmp_path / "s.log"
    args = ["--no-p4", "--device-id", "1", "--datapath", "native", "-i", f"1@{outers[0]}", "-i", f"2@{outers[1]}"]
    program = load_program(ROUTER)
    frame = _frame(h1, h2, 100)
    with switch_process(args, log, ready_timeout=60) as (_, address):
        base = _settled(address)
        count = lambda stats, key: stats.get(key, 0) - base.get(key, 0)  # noqa: E731
        _send_and_capture(h1, h2, [frame] * 5, 0)
        deadline = time.monotonic() + 20
        while count(control.call(address, "Stats", {})["packets"], "received") < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = control.call(address, "Stats", {})
        assert before["datapath"] == "python"
        assert (count(before["packets"], "received"), count(before["packets"], "no_pipeline")) == (5, 5), before
        client = _Client(address, 1, (build_p4info(program), device_config_bytes(program)))
        try:
            client.write([client.lpm_update("MyIngress.ipv4_lpm", 0x0A000200, 24, "MyIngress.ipv4_forward",
                                            {"dstAddr": _mac(h2.mac), "port": 2})])
        finally:
            client.close()
        got = _send_and_capture(h1, h2, [frame] * 7, 7)
        assert got == [_routed(frame, h2)] * 7
        after = control.call(address, "Stats", {})
        assert after["datapath"] == "native"
        assert [count(after["packets"], k) for k in ("received", "no_pipeline", "transmitted")] == [12, 5, 7], after
    line = _stopped_line(log)
    for key, n in (("received", 12), ("no_pipeline", 5), ("transmitted", 7)):
        assert f"{key} {base.get(key, 0) + n}" in line, (base, line)
