"""Embedded switch benchmarks.

- Forwarding: packets/s that reach a namespace through one ``p4switch run`` (IPv4 router;
  DLCP program), against a Linux bridge between the same two namespaces (same sender, same run).
- P4Runtime writes: table entries/s written in batched Write requests, against one update
  per request.
- P4Runtime reads: entries/s of one wildcard Read of 10,000 entries, against writing the
  same entries in Write requests of 1,000 updates. Both figures are the switch's: the
  requests are serialized before the clock starts and the responses parsed after it stops.
"""

from __future__ import annotations

import queue
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from tests import netns
from tests.benchmarks.figure import Figure
from tests.test_switch_process import switch_process

ROOT = Path(__file__).resolve().parents[2]
ROUTER = ROOT / "tests" / "p4programs" / "ipv4_router.p4"
DLCP = ROOT / "p4src" / "dlcp.p4"
SWITCH_MAC = "00:00:00:00:01:01"
SEND_SECONDS = 3.0
WRITE_ENTRIES = 1000  # the router's table holds 1024
WRITE_BATCH = 100
READ_ENTRIES = 10_000
READ_WRITE_BATCH = 1000

BLASTER = r"""
import socket, sys, time
iface, frame_hex, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
frame = bytes.fromhex(frame_hex)
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((iface, 0))
end = time.monotonic() + seconds
sent = 0
while time.monotonic() < end:
    for _ in range(200):
        try:
            sock.send(frame)
            sent += 1
        except OSError:
            pass
print(sent)
"""


def _rx_packets(host: netns.Host) -> int:
    out = netns.in_ns(host.ns, "cat", f"/sys/class/net/{host.iface}/statistics/rx_packets").stdout
    return int(out.strip())


def _udp_frame(src: netns.Host, dst: netns.Host, dst_mac: str, dport: int, payload: bytes) -> bytes:
    from scapy.all import IP, UDP, Ether, raw

    return raw(Ether(src=src.mac, dst=dst_mac) / IP(src=src.ip, dst=dst.ip, ttl=64)
               / UDP(sport=40000, dport=dport) / payload)


def _dlcp_payload() -> bytes:
    header = bytes([0x10, 0x01]) + (1).to_bytes(2, "big") + (2).to_bytes(2, "big") + (3).to_bytes(2, "big")
    header += (7).to_bytes(4, "big") + (0).to_bytes(4, "big") + (4).to_bytes(4, "big")
    header += (4).to_bytes(2, "big") + bytes([130, 3]) + (0).to_bytes(4, "big")
    return header + bytes(16)


def _forwarded_pps(sender: netns.Host, receiver: netns.Host, frame: bytes) -> float:
    """Packets/s arriving at ``receiver`` while ``sender`` sends ``frame`` flat out."""
    before = _rx_packets(receiver)
    netns.in_ns(sender.ns, sys.executable, "-c", BLASTER, sender.iface, frame.hex(), str(SEND_SECONDS),
                timeout=SEND_SECONDS + 30)
    time.sleep(0.3)  # let the queues drain
    return (_rx_packets(receiver) - before) / SEND_SECONDS


def _bridge_pps(lab: netns.Lab, h1: netns.Host, h2: netns.Host, outers: list[str]) -> float:
    bridge = lab.add_bridge(outers)
    try:
        return _forwarded_pps(h1, h2, _udp_frame(h1, h2, h2.mac, 5000, bytes(18)))
    finally:
        for outer in outers:
            netns.sh("ip", "link", "set", outer, "nomaster", check=False)
        netns.sh("ip", "link", "del", bridge, check=False)
        lab.links.remove(bridge)


class _Client:
    """A primary P4Runtime client that names things as the P4Info does."""

    def __init__(self, address: str, device_id: int) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.device_id = device_id
        self._out: queue.Queue[p4runtime_pb2.StreamMessageRequest | None] = queue.Queue()
        self._stream = self.stub.StreamChannel(iter(self._out.get, None))
        request = p4runtime_pb2.StreamMessageRequest()
        request.arbitration.device_id = device_id
        request.arbitration.election_id.low = 1
        self._out.put(request)
        next(self._stream)
        get = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=device_id)
        self.p4info: p4info_pb2.P4Info = self.stub.GetForwardingPipelineConfig(get).config.p4info

    def close(self) -> None:
        self._out.put(None)
        self.channel.close()

    def lpm_update(self, table: str, prefix: int, plen: int, action: str, params: dict[str, int]) -> p4runtime_pb2.Update:
        info = next(t for t in self.p4info.tables if t.preamble.name == table)
        act = next(a for a in self.p4info.actions if a.preamble.name == action)
        entry = p4runtime_pb2.TableEntry(table_id=info.preamble.id)
        fm = entry.match.add(field_id=info.match_fields[0].id)
        fm.lpm.value, fm.lpm.prefix_len = prefix.to_bytes(4, "big"), plen
        entry.action.action.action_id = act.preamble.id
        for param in act.params:
            value = params[param.name]
            entry.action.action.params.add(param_id=param.id, value=value.to_bytes((param.bitwidth + 7) // 8, "big"))
        return p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=p4runtime_pb2.Entity(table_entry=entry))

    def write(self, updates: list[p4runtime_pb2.Update]) -> None:
        request = p4runtime_pb2.WriteRequest(device_id=self.device_id, updates=updates)
        request.election_id.low = 1
        self.stub.Write(request)


@contextmanager
def _switch(program: Path, interfaces: list[str], workdir: Path) -> Iterator[_Client]:
    args = [str(program), "--device-id", "1", "--log-level", "warn"]
    for i, iface in enumerate(interfaces, start=1):
        args += ["-i", f"{i}@{iface}"]
    with switch_process(args, workdir / f"{program.stem}.log", ready_timeout=60) as (_, address):
        client = _Client(address, 1)
        try:
            yield client
        finally:
            client.close()


def _mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


def _forwarding_figures(workdir: Path) -> list[Figure]:
    figures = []
    with netns.lab() as lab:
        h1, out1 = lab.add_host(1, "10.0.1.1")
        h2, out2 = lab.add_host(2, "10.0.2.1")
        # On-link route: the switch (or bridge) gets frames addressed to h2 or to the switch.
        netns.in_ns(h1.ns, "ip", "route", "add", "10.0.2.0/24", "dev", h1.iface)
        bridge = _bridge_pps(lab, h1, h2, [out1, out2])
        with _switch(ROUTER, [out1, out2], workdir) as client:
            client.write([client.lpm_update("MyIngress.ipv4_lpm", 0x0A000200, 24, "MyIngress.ipv4_forward",
                                            {"dstAddr": _mac(h2.mac), "port": 2})])
            router = _forwarded_pps(h1, h2, _udp_frame(h1, h2, SWITCH_MAC, 5000, bytes(18)))
        figures.append(Figure("switch forwarding, IPv4 router", router, "Linux bridge", bridge, "pkt/s"))
        if DLCP.exists():
            with _switch(DLCP, [out1, out2], workdir) as client:
                client.write([client.lpm_update("DlcpIngress.ipv4_lpm", 0x0A000200, 24, "DlcpIngress.set_nhop",
                                                {"port": 2, "smac": _mac(SWITCH_MAC), "dmac": _mac(h2.mac)})])
                dlcp = _forwarded_pps(h1, h2, _udp_frame(h1, h2, SWITCH_MAC, 19600, _dlcp_payload()))
            figures.append(Figure("switch forwarding, DLCP program (gradient packets)", dlcp,
                                  "Linux bridge", bridge, "pkt/s"))
    return figures


def _write_figure(workdir: Path) -> Figure:
    """The same entries written one per request, deleted, then written in batches."""
    with _switch(ROUTER, [], workdir) as client:
        inserts = [client.lpm_update("MyIngress.ipv4_lpm", (0x0A0000 + i) << 8, 24, "MyIngress.ipv4_forward",
                                     {"dstAddr": i, "port": 1}) for i in range(WRITE_ENTRIES)]
        start = time.perf_counter()
        for update in inserts:
            client.write([update])
        single_rate = WRITE_ENTRIES / (time.perf_counter() - start)
        deletes = []
        for update in inserts:
            delete = p4runtime_pb2.Update()
            delete.CopyFrom(update)
            delete.type = p4runtime_pb2.Update.DELETE
            deletes.append(delete)
        client.write(deletes)
        start = time.perf_counter()
        for i in range(0, WRITE_ENTRIES, WRITE_BATCH):
            client.write(inserts[i:i + WRITE_BATCH])
        batched_rate = WRITE_ENTRIES / (time.perf_counter() - start)
    return Figure(f"P4Runtime table writes, {WRITE_BATCH} updates per Write", batched_rate,
                  "one update per Write", single_rate, "entries/s")


def _read_figure(workdir: Path) -> Figure:
    """The router with a 10,000-entry table: batched writes, then one wildcard Read."""
    source = workdir / "ipv4_router_big.p4"
    source.write_text(re.sub(r"size\s*=\s*\d+\s*;", f"size = {READ_ENTRIES};", ROUTER.read_text()))
    with _switch(source, [], workdir) as client:
        inserts = [client.lpm_update("MyIngress.ipv4_lpm", (0x0A << 24) | (i << 8), 24, "MyIngress.ipv4_forward",
                                     {"dstAddr": i, "port": 1}) for i in range(READ_ENTRIES)]
        batches = []
        for i in range(0, READ_ENTRIES, READ_WRITE_BATCH):  # built and serialized before timing
            batch = p4runtime_pb2.WriteRequest(device_id=client.device_id, updates=inserts[i:i + READ_WRITE_BATCH])
            batch.election_id.low = 1
            batches.append(batch.SerializeToString())
        write = client.channel.unary_unary("/p4.v1.P4Runtime/Write")
        start = time.perf_counter()
        for batch_bytes in batches:
            write(batch_bytes)
        write_rate = READ_ENTRIES / (time.perf_counter() - start)
        request = p4runtime_pb2.ReadRequest(device_id=client.device_id)
        request.entities.add().table_entry.table_id = inserts[0].entity.table_entry.table_id
        read = client.channel.unary_stream("/p4.v1.P4Runtime/Read",
                                           request_serializer=p4runtime_pb2.ReadRequest.SerializeToString)
        start = time.perf_counter()
        responses = list(read(request))
        read_rate = READ_ENTRIES / (time.perf_counter() - start)
        count = sum(len(p4runtime_pb2.ReadResponse.FromString(r).entities) for r in responses)
        if count != READ_ENTRIES:
            raise RuntimeError(f"Read returned {count} entries, {READ_ENTRIES} were written")
    return Figure(f"P4Runtime Read, {READ_ENTRIES:,} entries in one wildcard request", read_rate,
                  f"batched Write of the same entries ({READ_WRITE_BATCH:,} per request)", write_rate, "entries/s")


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-switch-") as tmp:
        workdir = Path(tmp)
        figures = _forwarding_figures(workdir) if netns.is_root() else []
        figures.append(_write_figure(workdir))
        figures.append(_read_figure(workdir))
    return figures
