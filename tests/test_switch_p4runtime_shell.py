"""End to end: ``p4switch run`` on veths, driven by unmodified p4runtime-shell, real packets.

p4runtime-shell runs in a subprocess through its Python API; scapy sends from one namespace
and sniffs in another. Table writes and routing use the IPv4 router of ``tests/p4programs``;
counters, PacketOut and PacketIn use a small L2 program with counters and controller headers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from google.protobuf import text_format

from tests.netns import Host, Lab
from tests.test_switch_process import switch_process

ROUTER = Path(__file__).parent / "p4programs" / "ipv4_router.p4"
SWITCH_MAC = "00:00:00:00:01:01"

SHELL_SESSION = r'''
import json, sys
import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeWriteException

address, p4info, device_config, h1_mac, h2_mac, stage = sys.argv[1:7]
config = sh.FwdPipeConfig(p4info, device_config) if stage == "setup" else None
sh.setup(device_id=1, grpc_addr=address, election_id=(0, 1), config=config, verbose=False)
out = {}

def route(prefix, mac, port):
    entry = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
    entry.match["hdr.ipv4.dstAddr"] = prefix
    entry.action["dstAddr"] = mac
    entry.action["port"] = str(port)
    return entry

def listing():
    rows = []
    for e in sh.TableEntry("MyIngress.ipv4_lpm").read():
        lpm = e.match["hdr.ipv4.dstAddr"].lpm
        rows.append([int.from_bytes(lpm.value, "big"), lpm.prefix_len, int.from_bytes(e.action["dstAddr"].value, "big"),
                     int.from_bytes(e.action["port"].value, "big")])
    return sorted(rows)

try:
    if stage == "setup":
        route("10.0.1.0/24", h1_mac, 1).insert()
        route("10.0.2.0/24", "00:00:00:00:00:99", 1).insert()   # wrong, fixed by the modify below
        route("10.7.0.0/16", h2_mac, 2).insert()
        out["after_insert"] = len(listing())
        route("10.0.2.0/24", h2_mac, 2).modify()
        route("10.7.0.0/16", h2_mac, 2).delete()
        try:
            route("10.0.1.0/24", h1_mac, 1).insert()
        except P4RuntimeWriteException as exc:
            out["duplicate"] = str(exc)
    out["entries"] = listing()
    print(json.dumps(out))
finally:
    sh.teardown()
'''

SNIFF = r'''
import sys
from scapy.all import IP, raw, sniff
iface, dst, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
got = sniff(iface=iface, count=count, timeout=15, lfilter=lambda p: IP in p and p[IP].dst == dst,
            started_callback=lambda: print("ready", flush=True))
for p in got:
    print(raw(p).hex(), flush=True)
'''

SEND = r'''
import sys
from scapy.all import sendp
iface, frame, count = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3])
sendp(frame, iface=iface, count=count, inter=0.01, verbose=False)
'''


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def compile_program(source: Path, out: Path) -> tuple[Path, Path]:
    """P4Info text and device config files, as p4runtime-shell's FwdPipeConfig wants them."""
    from p4switch.device_config import write_device_config
    from p4switch.frontend import load_program
    from p4switch.p4info import build_p4info

    program = load_program(source)
    p4info_path, config_path = out / "program.p4info.txtpb", out / "program.json"
    p4info_path.write_text(text_format.MessageToString(build_p4info(program)))
    write_device_config(program, config_path)
    return p4info_path, config_path


def shell(address: str, p4info: Path, config: Path, h1: Host, h2: Host, stage: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", SHELL_SESSION, address, str(p4info), str(config), h1.mac, h2.mac, stage],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"p4runtime-shell failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextmanager
def sniffing(receiver: Host, count: int) -> Iterator[Callable[[], list[bytes]]]:
    """Sniff IPv4 frames for ``receiver`` in its namespace; the yielded function waits for them."""
    sniffer = subprocess.Popen(
        ["ip", "netns", "exec", receiver.ns, sys.executable, "-c", SNIFF, receiver.iface, receiver.ip, str(count)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def collect() -> list[bytes]:
        out, _ = sniffer.communicate(timeout=30)
        return [bytes.fromhex(line) for line in out.split()]

    try:
        assert sniffer.stdout is not None and sniffer.stdout.readline().strip() == "ready"
        yield collect
    finally:
        if sniffer.poll() is None:
            sniffer.kill()
            sniffer.communicate()


def send(sender: Host, frame: bytes, count: int) -> None:
    subprocess.run(["ip", "netns", "exec", sender.ns, sys.executable, "-c", SEND, sender.iface, frame.hex(), str(count)],
                   check=True, timeout=60, capture_output=True)


def send_and_sniff(sender: Host, receiver: Host, count: int, dst_mac: str = SWITCH_MAC) -> list[bytes]:
    with sniffing(receiver, count) as collect:
        send(sender, udp_frame(sender, receiver, dst_mac), count)
        return collect()


@pytest.mark.netns
def test_p4runtime_shell_programs_the_switch_and_packets_are_routed(lab: Lab, tmp_path: Path) -> None:
    from scapy.all import IP, UDP, Ether

    h1, port1 = lab.add_host(1, "10.0.1.1")
    h2, port2 = lab.add_host(2, "10.0.2.1")
    p4info, config = compile_program(ROUTER, tmp_path)
    log = tmp_path / "s1.log"
    args = ["--no-p4", "-i", f"1@{port1}", "-i", f"2@{port2}", "--device-id", "1", "--pcap", str(tmp_path)]
    with switch_process(args, log) as (_, address):
        first = shell(address, p4info, config, h1, h2, "setup")
        assert first["after_insert"] == 3
        assert "ALREADY_EXISTS" in first["duplicate"]
        assert len(first["entries"]) == 2
        routes = {(prefix, plen): (mac, port) for prefix, plen, mac, port in first["entries"]}
        assert routes == {(0x0A000100, 24): (mac_int(h1.mac), 1), (0x0A000200, 24): (mac_int(h2.mac), 2)}

        frames = send_and_sniff(h1, h2, 3)
        assert len(frames) == 3
        for frame in frames:
            packet = Ether(frame)
            assert packet.dst == h2.mac and packet.src == SWITCH_MAC
            assert packet[IP].ttl == 63 and packet[UDP].dport == 5000
            assert bytes(packet[UDP].payload) == b"gradfabric" * 3
            checksum = packet[IP].chksum
            del packet[IP].chksum
            assert IP(bytes(packet[IP]))[IP].chksum == checksum

        # A new client session sees the state the first one left.
        again = shell(address, p4info, config, h1, h2, "read")
        assert again["entries"] == first["entries"]
    assert " ERROR " not in log.read_text()


COUNTING_P4 = r"""
#include <core.p4>
#include <v1model.p4>

@controller_header("packet_out")
header packet_out_t { bit<9> egress_port; bit<7> _pad; }
@controller_header("packet_in")
header packet_in_t { bit<9> ingress_port; bit<7> _pad; }
header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
struct headers { packet_out_t packet_out; packet_in_t packet_in; ethernet_t ethernet; }
struct metadata { }

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { transition select(sm.ingress_port) { 510: parse_packet_out; default: parse_ethernet; } }
    state parse_packet_out { pkt.extract(hdr.packet_out); transition parse_ethernet; }
    state parse_ethernet { pkt.extract(hdr.ethernet); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control Ing(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(8, CounterType.packets_and_bytes) port_rx;
    direct_counter(CounterType.packets_and_bytes) mac_hits;
    action to_port(bit<9> port) { sm.egress_spec = port; mac_hits.count(); }
    action to_cpu() {
        sm.egress_spec = 510;
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = sm.ingress_port;
        hdr.packet_in._pad = 0;
        mac_hits.count();
    }
    action drop() { mark_to_drop(sm); mac_hits.count(); }
    table dmac {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { to_port; to_cpu; drop; }
        default_action = drop();
        counters = mac_hits;
    }
    apply {
        if (hdr.packet_out.isValid()) {
            sm.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else {
            port_rx.count((bit<32>) sm.ingress_port);
            dmac.apply();
        }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.packet_in); pkt.emit(hdr.ethernet); } }
V1Switch(P(), VC(), Ing(), E(), CC(), D()) main;
"""
CPU_MAC = "00:00:00:00:0c:0c"

COUNTER_SESSION = r"""
import json, sys
import p4runtime_sh.shell as sh

address, p4info, device_config, h2_mac, stage, frame_hex = sys.argv[1:7]
config = sh.FwdPipeConfig(p4info, device_config) if stage == "setup" else None
sh.setup(device_id=1, grpc_addr=address, election_id=(0, 1), config=config, verbose=False)
out = {}
try:
    if stage == "setup":
        entry = sh.TableEntry("Ing.dmac")(action="Ing.to_port")
        entry.match["hdr.ethernet.dstAddr"] = h2_mac
        entry.action["port"] = "2"
        entry.insert()
        entry = sh.TableEntry("Ing.dmac")(action="Ing.to_cpu")
        entry.match["hdr.ethernet.dstAddr"] = "00:00:00:00:0c:0c"
        entry.insert()
    elif stage == "packets":
        packet_in = sh.PacketIn()
        packet_out = sh.PacketOut(payload=bytes.fromhex(frame_hex))
        packet_out.metadata["egress_port"] = "2"
        packet_out.send()
        print("ready", flush=True)
        message = packet_in.packet_in_queue.get(timeout=20)
        out["packet_in"] = {
            "payload": message.packet.payload.hex(),
            "metadata": {str(m.metadata_id): int.from_bytes(m.value, "big") for m in message.packet.metadata},
        }
    else:
        rx = sh.CounterEntry("Ing.port_rx")
        out["port_rx"] = {str(e.index): [e.packet_count, e.byte_count] for e in rx.read()}
        hits = sh.DirectCounterEntry("Ing.mac_hits")
        out["mac_hits"] = sorted([e.packet_count, e.byte_count] for e in hits.read())
    print(json.dumps(out), flush=True)
finally:
    sh.teardown()
"""


def udp_frame(src: Host, dst: Host, dst_mac: str) -> bytes:
    from scapy.all import IP, UDP, Ether, Raw, raw

    return raw(Ether(src=src.mac, dst=dst_mac) / IP(src=src.ip, dst=dst.ip, ttl=64) / UDP(sport=4000, dport=5000)
               / Raw(b"gradfabric" * 3))


@pytest.mark.netns
def test_p4runtime_shell_counters_packet_out_and_packet_in(lab: Lab, tmp_path: Path) -> None:
    h1, port1 = lab.add_host(1, "10.0.1.1")
    h2, port2 = lab.add_host(2, "10.0.1.2")
    source = tmp_path / "counting.p4"
    source.write_text(COUNTING_P4)
    p4info, config = compile_program(source, tmp_path)
    out_frame = udp_frame(h1, h2, "02:00:00:00:0a:0a")  # through PacketOut only: no entry matches it

    def session(stage: str) -> list[str]:
        return [sys.executable, "-c", COUNTER_SESSION, address, str(p4info), str(config), h2.mac, stage,
                out_frame.hex()]

    def finished(returncode: int | None, stdout: str, stderr: str) -> dict:
        assert returncode == 0, f"p4runtime-shell failed:\n{stdout}\n{stderr}"
        return json.loads(stdout.strip().splitlines()[-1])

    args = ["--no-p4", "-i", f"1@{port1}", "-i", f"2@{port2}", "--device-id", "1", "--cpu-port", "510"]
    with switch_process(args, tmp_path / "s1.log") as (_, address):
        setup = subprocess.run(session("setup"), capture_output=True, text=True, timeout=60)
        finished(setup.returncode, setup.stdout, setup.stderr)
        frames = send_and_sniff(h1, h2, 4, dst_mac=h2.mac)
        assert len(frames) == 4

        # PacketOut from the shell reaches h2; a frame from h1 to the CPU MAC reaches the shell.
        with sniffing(h2, 1) as collect:
            packets = subprocess.Popen(session("packets"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                assert packets.stdout is not None and packets.stdout.readline().strip() == "ready"
                send(h1, udp_frame(h1, h2, CPU_MAC), 1)
                stdout, stderr = packets.communicate(timeout=60)
            finally:
                if packets.poll() is None:
                    packets.kill()
                    packets.communicate()
            assert collect() == [out_frame]
        packet_in = finished(packets.returncode, stdout, stderr)["packet_in"]
        assert bytes.fromhex(packet_in["payload"]) == udp_frame(h1, h2, CPU_MAC)
        assert packet_in["metadata"]["1"] == 1  # ingress_port

        read = subprocess.run(session("read"), capture_output=True, text=True, timeout=60)
        counts = finished(read.returncode, read.stdout, read.stderr)
    packets_rx, bytes_rx = counts["port_rx"]["1"]
    assert packets_rx >= 5 and bytes_rx >= 5 * len(frames[0])  # hosts may add IPv6 neighbour discovery
    assert sorted(counts["port_rx"]) == [str(i) for i in range(8)]
    assert counts["mac_hits"] == [[1, len(frames[0])], [4, 4 * len(frames[0])]]
