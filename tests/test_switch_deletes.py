"""Deleted entries stop matching on a running switch: native and Python datapaths of
`p4switch run`, and BMv2's simple_switch_grpc with p4c's build, between namespaces, all
programmed over P4Runtime. An IPv4 route deleted while another stays (the p4runtime-shell
report), and on the DLCP program (native and BMv2; the Python pipeline's side is checked in
process by tests/test_native_control_plane.py) a deleted ECMP member and a deleted ECN
threshold."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from p4.v1 import p4runtime_pb2

from gradfabric.paths import P4SRC
from p4switch.native.build import find_compiler
from tests import netns
from tests.benchmarks.bench_switch import SWITCH_MAC, TARGETS, _Client, _udp_frame
from tests.netns import Lab
from tests.p4runtime_differential import DELETE, INSERT, table_update

ROUTER = Path(__file__).parent / "p4programs" / "ipv4_router.p4"
TARGET_PARAMS = [
    pytest.param("native", marks=pytest.mark.skipif(find_compiler() is None, reason="no C compiler")),
    pytest.param("python"),
    pytest.param("bmv2", marks=pytest.mark.bmv2),
]
pytestmark = pytest.mark.netns

SEND = r"""
import socket, sys, time
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((sys.argv[1], 0))
for hexed in sys.stdin.read().split():
    sock.send(bytes.fromhex(hexed))
    time.sleep(0.01)
"""

#: UDP frames to one MAC for `seconds`: one line per frame, its hex.
CAPTURE = r"""
import socket, sys, time
iface, want, seconds = sys.argv[1], bytes.fromhex(sys.argv[2]), float(sys.argv[3])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sock.bind((iface, 0))
sock.settimeout(0.2)
print("ready", flush=True)
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        frame = sock.recv(4096)
    except socket.timeout:
        continue
    if frame[:6] == want and frame[12:14] == b"\x08\x00":
        print(frame.hex(), flush=True)
"""


@contextmanager
def _capturing(hosts: list[netns.Host], seconds: float) -> Iterator[dict[str, list[bytes]]]:
    """Captures on `hosts` while the body sends; afterwards the frames each host got."""
    procs = {h.iface: subprocess.Popen(["ip", "netns", "exec", h.ns, sys.executable, "-c", CAPTURE, h.iface,
                                        h.mac.replace(":", ""), str(seconds)], stdout=subprocess.PIPE, text=True)
             for h in hosts}
    got: dict[str, list[bytes]] = {}
    try:
        for proc in procs.values():
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield got
        for iface, proc in procs.items():
            out, _ = proc.communicate(timeout=seconds + 30)
            got[iface] = [bytes.fromhex(line) for line in out.split()]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _send(host: netns.Host, frames: list[bytes]) -> None:
    subprocess.run(["ip", "netns", "exec", host.ns, sys.executable, "-c", SEND, host.iface],
                   input="\n".join(f.hex() for f in frames), text=True, check=True, timeout=60, capture_output=True)


def _hosts(lab: Lab, n: int) -> tuple[list[netns.Host], list[str]]:
    hosts, outers = [], []
    for i in range(1, n + 1):
        host, outer = lab.add_host(i, f"10.0.{i}.1")
        netns.in_ns(host.ns, "sysctl", "-qw", f"net.ipv6.conf.{host.iface}.disable_ipv6=1", check=False)
        netns.sh("sysctl", "-qw", f"net.ipv6.conf.{outer}.disable_ipv6=1", check=False)
        hosts.append(host)
        outers.append(outer)
    return hosts, outers


def _write(client: _Client, *serialized: bytes) -> None:
    client.write([p4runtime_pb2.Update.FromString(data) for data in serialized])


@contextmanager
def _switch(target: str, program: Path, outers: list[str], tmp_path: Path) -> Iterator[_Client]:
    with TARGETS[target][1](program, outers, tmp_path) as client:
        yield client


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_a_deleted_route_stops_matching_while_another_stays(lab: Lab, tmp_path: Path, target: str) -> None:
    (h1, h2, h3), outers = _hosts(lab, 3)
    with _switch(target, ROUTER, outers, tmp_path) as client:
        info = client.p4info
        route = lambda kind, net, host, port: table_update(  # noqa: E731
            info, kind, "MyIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (net, 24)},
            *(("MyIngress.ipv4_forward", (int(host.mac.replace(":", ""), 16), port)) if kind == INSERT else ()))
        _write(client, route(INSERT, 0x0A000200, h2, 2), route(INSERT, 0x0A000300, h3, 3))
        to_h2 = [_udp_frame(h1, h2, SWITCH_MAC, 5000, bytes([i]) * 18) for i in range(3)]
        to_h3 = [_udp_frame(h1, h3, SWITCH_MAC, 5000, bytes([i]) * 18) for i in range(3)]
        with _capturing([h2, h3], 3.0) as got:
            _send(h1, to_h2 + to_h3)
        assert (len(got[h2.iface]), len(got[h3.iface])) == (3, 3), got
        _write(client, route(DELETE, 0x0A000200, h2, 2))
        with _capturing([h2, h3], 3.0) as got:
            _send(h1, to_h2 + to_h3)
        assert (len(got[h2.iface]), len(got[h3.iface])) == (0, 3), got


def _dlcp_frame(src: netns.Host, dst: netns.Host, sport: int, job: int, tos: int = 0) -> bytes:
    """UDP to the DLCP port with a DLCP header of `job` (version 1, not drop-eligible)."""
    from scapy.all import IP, UDP, Ether, raw

    header = bytes([0x10, 0x00]) + job.to_bytes(2, "big") + bytes(2) + (1).to_bytes(2, "big") + bytes(8)
    header += (1000).to_bytes(4, "big") + (4).to_bytes(2, "big") + bytes([1, 0]) + bytes(4)
    return raw(Ether(src=src.mac, dst=SWITCH_MAC) / IP(src=src.ip, dst=dst.ip, ttl=64, tos=tos)
               / UDP(sport=sport, dport=19600) / (header + bytes(16)))


def _dlcp_group(client: _Client, hosts: list[netns.Host]) -> None:
    """10.0.9.0/24 to ECMP group 1 of two members: member 0 to port 2, member 1 to port 3."""
    info = client.p4info
    updates = [table_update(info, INSERT, "DlcpIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (0x0A000900, 24)},
                            "DlcpIngress.set_ecmp_group", (1, 2))]
    for member, port in ((0, 2), (1, 3)):
        updates.append(table_update(info, INSERT, "DlcpIngress.ecmp_member",
                                    {"meta.ecmp_group_id": 1, "meta.ecmp_member": member}, "DlcpIngress.set_nhop",
                                    (port, 0x0A, int(hosts[port - 1].mac.replace(":", ""), 16))))
    _write(client, *updates)


def _sports(frames: list[bytes]) -> set[int]:
    return {int.from_bytes(f[34:36], "big") for f in frames}


@pytest.mark.parametrize("target", [TARGET_PARAMS[0], TARGET_PARAMS[2]])  # the Python side: in process
def test_dlcp_deleted_ecmp_member_and_ecn_threshold(lab: Lab, tmp_path: Path, target: str) -> None:
    """Flows spread over both members; member 0 (the table's first entry) deleted, its port
    gets nothing and the other keeps its flows. Job 1's ECN threshold 0 marks its ECT(0)
    packets CE; deleted, they leave unmarked."""
    hosts, outers = _hosts(lab, 3)
    h1, h2, h3 = hosts
    far = netns.Host(ns="", iface="", ip="10.0.9.9", mac="00:00:00:00:00:00")
    with _switch(target, P4SRC / "dlcp.p4", outers, tmp_path) as client:
        _dlcp_group(client, hosts)
        flows = [_dlcp_frame(h1, far, 1000 + i, job=2) for i in range(24)]
        with _capturing([h2, h3], 3.0) as got:
            _send(h1, flows)
        on2, on3 = _sports(got[h2.iface]), _sports(got[h3.iface])
        assert on2 and on3 and len(on2 | on3) == 24 and not on2 & on3, (on2, on3)
        _write(client, table_update(client.p4info, DELETE, "DlcpIngress.ecmp_member",
                                    {"meta.ecmp_group_id": 1, "meta.ecmp_member": 0}))
        threshold = table_update(client.p4info, INSERT, "DlcpEgress.ecn_threshold", {"hdr.dlcp.job_id": 1},
                                 "DlcpEgress.mark_above", (0,))
        _write(client, threshold)
        marked = [_dlcp_frame(h1, far, sport, job=1, tos=0x02) for sport in sorted(on3)[:3]]
        with _capturing([h2, h3], 3.0) as got:
            _send(h1, flows + marked)
        assert got[h2.iface] == [], "the deleted member's port still receives"
        assert _sports(got[h3.iface][:len(on3)]) == on3
        assert [f[15] & 3 for f in got[h3.iface][len(on3):]] == [3, 3, 3]
        _write(client, table_update(client.p4info, DELETE, "DlcpEgress.ecn_threshold", {"hdr.dlcp.job_id": 1}))
        with _capturing([h3], 3.0) as got:
            _send(h1, marked)
        assert [f[15] & 3 for f in got[h3.iface]] == [2, 2, 2]
