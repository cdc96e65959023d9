"""Embedded switch benchmarks.

- Forwarding: packets/s that reach a namespace through one switch (IPv4 router; DLCP
  program), counted by the receiving interface, while a C sender (``blaster.c``, sendmmsg)
  offers 64-byte UDP frames flat out: the embedded ``p4switch run`` with its native datapath
  and with its Python datapath, and BMv2's ``simple_switch_grpc`` (p4c's build of the same
  program, when p4c and BMv2 are found), each against a Linux bridge between the same two
  namespaces, and the embedded target against BMv2 and native against Python (same sender,
  same run). The reference BMv2 is built with logging compiled in (not enabled here); a
  build without it forwards about twice as fast.
- P4Runtime writes: table entries/s written in batched Write requests, against one update
  per request.
- P4Runtime reads: entries/s of one wildcard Read of 10,000 entries, against writing the
  same entries in Write requests of 1,000 updates. Both figures are the switch's: the
  requests are serialized before the clock starts and the responses parsed after it stops.
"""

from __future__ import annotations

import queue
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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

BLASTER_SOURCE = Path(__file__).with_name("blaster.c")


def _build_blaster(workdir: Path) -> Path:
    """The C sender (sendmmsg, batches of 64), so the sender is not what limits a figure."""
    from p4switch.native.build import find_compiler

    compiler = find_compiler()
    if compiler is None:
        raise RuntimeError("no C compiler found: the forwarding benchmark needs one for its sender")
    binary = workdir / "blaster"
    subprocess.run([compiler, "-O2", "-o", str(binary), str(BLASTER_SOURCE)], check=True)
    return binary


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


@dataclass(frozen=True)
class Rate:
    received_pps: float  # counted by the receiving interface
    offered_pps: float  # what the sender's socket accepted


def _forwarded_pps(blaster: Path, sender: netns.Host, receiver: netns.Host, frame: bytes,
                   rate_pps: float = 0.0) -> Rate:
    """Packets/s arriving at ``receiver`` while ``sender`` sends ``frame`` flat out (or at
    ``rate_pps``)."""
    before = _rx_packets(receiver)
    rate = [str(rate_pps)] if rate_pps > 0 else []
    out = netns.in_ns(sender.ns, str(blaster), sender.iface, frame.hex(), str(SEND_SECONDS), *rate,
                      timeout=SEND_SECONDS + 30).stdout
    time.sleep(0.3)  # let the queues drain
    return Rate((_rx_packets(receiver) - before) / SEND_SECONDS, int(out.strip()) / SEND_SECONDS)


def _bridge_pps(blaster: Path, lab: netns.Lab, h1: netns.Host, h2: netns.Host, outers: list[str]) -> Rate:
    bridge = lab.add_bridge(outers)
    try:
        return _forwarded_pps(blaster, h1, h2, _udp_frame(h1, h2, h2.mac, 5000, bytes(18)))
    finally:
        for outer in outers:
            netns.sh("ip", "link", "set", outer, "nomaster", check=False)
        netns.sh("ip", "link", "del", bridge, check=False)
        lab.links.remove(bridge)


class _Client:
    """A primary P4Runtime client that names things as the P4Info does; it installs
    ``pipeline`` (P4Info, device config) when given, else reads the switch's."""

    def __init__(self, address: str, device_id: int,
                 pipeline: tuple[p4info_pb2.P4Info, bytes] | None = None) -> None:
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
        if pipeline is not None:
            config = p4runtime_pb2.ForwardingPipelineConfig(p4info=pipeline[0], p4_device_config=pipeline[1])
            set_request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=device_id, config=config,
                action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
            set_request.election_id.low = 1
            self.stub.SetForwardingPipelineConfig(set_request, timeout=60)
            self.p4info = pipeline[0]
            return
        get = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=device_id)
        self.p4info = self.stub.GetForwardingPipelineConfig(get).config.p4info

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
def _switch(program: Path, interfaces: list[str], workdir: Path, datapath: str = "native") -> Iterator[_Client]:
    args = [str(program), "--device-id", "1", "--log-level", "warn", "--datapath", datapath]
    for i, iface in enumerate(interfaces, start=1):
        args += ["-i", f"{i}@{iface}"]
    with switch_process(args, workdir / f"{program.stem}-{datapath}.log", ready_timeout=60) as (_, address):
        client = _Client(address, 1)
        try:
            yield client
        finally:
            client.close()


@contextmanager
def _bmv2_switch(program: Path, interfaces: list[str], workdir: Path) -> Iterator[_Client]:
    """``simple_switch_grpc`` (no logging enabled) with p4c's build of ``program`` pushed over P4Runtime."""
    from google.protobuf import text_format

    from gradfabric.p4build import compile_p4c
    from gradfabric.p4ref import require_tool

    build = compile_p4c(program, workdir / "bmv2", str(require_tool("p4c")))
    p4info = text_format.Parse(build.p4info.read_text(), p4info_pb2.P4Info())
    address = f"127.0.0.1:{netns.free_port()}"
    cmd = [str(require_tool("simple_switch_grpc")), "--device-id", "1", "--thrift-port", str(netns.free_port()),
           "--notifications-addr", f"ipc://{workdir}/n.ipc"]
    for i, iface in enumerate(interfaces, start=1):
        cmd += ["-i", f"{i}@{iface}"]
    cmd += ["--no-p4", "--", "--grpc-server-addr", address]
    out = workdir / f"{program.stem}-bmv2.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not netns.accepts_connections("127.0.0.1", int(address.rsplit(":", 1)[1])):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"simple_switch_grpc did not start: {out.read_text()[-2000:]}")
            time.sleep(0.1)
        client = _Client(address, 1, (p4info, build.device_config.read_bytes()))
        try:
            yield client
        finally:
            client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _bmv2_available() -> bool:
    from gradfabric.p4ref import missing_tools

    return not missing_tools(("p4c", "simple_switch_grpc"))


def _mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


BMV2_NAME = "BMv2 simple_switch_grpc 1.15.5 (logging compiled in, off)"


TARGETS = {
    "native": ("embedded, native datapath", lambda p, i, w: _switch(p, i, w, "native")),
    "python": ("embedded, Python datapath", lambda p, i, w: _switch(p, i, w, "python")),
    "bmv2": (BMV2_NAME, _bmv2_switch),
}


def _forwarding_figures(workdir: Path) -> list[Figure]:
    """Bridge, then each program on each target, one after the other, same sender and frames."""
    figures = []
    targets = ["native", "python"]
    if _bmv2_available():
        targets.append("bmv2")
    else:
        print("bench: p4c or simple_switch_grpc not found: BMv2 figures skipped", flush=True)
    blaster = _build_blaster(workdir)
    programs = [("IPv4 router", ROUTER, "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward", 5000, bytes(18))]
    if DLCP.exists():
        programs.append(("DLCP program (gradient packets)", DLCP, "DlcpIngress.ipv4_lpm",
                         "DlcpIngress.set_nhop", 19600, _dlcp_payload()))
    with netns.lab() as lab:
        h1, out1 = lab.add_host(1, "10.0.1.1")
        h2, out2 = lab.add_host(2, "10.0.2.1")
        # On-link route: the switch (or bridge) gets frames addressed to h2 or to the switch.
        netns.in_ns(h1.ns, "ip", "route", "add", "10.0.2.0/24", "dev", h1.iface)
        bridge = _bridge_pps(blaster, lab, h1, h2, [out1, out2])
        print(f"bench: Linux bridge {bridge.received_pps:,.0f} pkt/s (offered {bridge.offered_pps:,.0f})", flush=True)
        for label, program, table, action, dport, payload in programs:
            params = ({"dstAddr": _mac(h2.mac), "port": 2} if program == ROUTER
                      else {"port": 2, "smac": _mac(SWITCH_MAC), "dmac": _mac(h2.mac)})
            rates: dict[str, Rate] = {}
            for target in targets:
                name, start = TARGETS[target]
                with start(program, [out1, out2], workdir) as client:
                    client.write([client.lpm_update(table, 0x0A000200, 24, action, params)])
                    rates[target] = _forwarded_pps(blaster, h1, h2, _udp_frame(h1, h2, SWITCH_MAC, dport, payload))
                print(f"bench: {label}, {name}: {rates[target].received_pps:,.0f} pkt/s "
                      f"(offered {rates[target].offered_pps:,.0f})", flush=True)
            for target in targets:
                figures.append(Figure(f"switch forwarding, {label}, {TARGETS[target][0]}",
                                      rates[target].received_pps, "Linux bridge", bridge.received_pps, "pkt/s"))
            for target in ("native", "python"):
                if "bmv2" in rates:
                    figures.append(Figure(f"switch forwarding, {label}, {TARGETS[target][0]}",
                                          rates[target].received_pps, BMV2_NAME, rates["bmv2"].received_pps, "pkt/s"))
            figures.append(Figure(f"switch forwarding, {label}, {TARGETS['native'][0]}", rates["native"].received_pps,
                                  TARGETS["python"][0], rates["python"].received_pps, "pkt/s"))
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
