"""End to end: ``p4switch run`` on veths, driven by unmodified p4runtime-shell, real packets.

p4runtime-shell runs in a subprocess through its Python API; scapy sends from one namespace
and sniffs in another. The program is the IPv4 router of ``tests/p4programs``.
"""

from __future__ import annotations

import json
import subprocess
import sys
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
from scapy.all import IP, UDP, Ether, Raw, sendp
iface, src_mac, dst_mac, src, dst, count = sys.argv[1:7]
frame = Ether(src=src_mac, dst=dst_mac) / IP(src=src, dst=dst, ttl=64) / UDP(sport=4000, dport=5000) / Raw(b"gradfabric" * 3)
sendp(frame, iface=iface, count=int(count), inter=0.01, verbose=False)
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


def send_and_sniff(sender: Host, receiver: Host, count: int, dst_mac: str = SWITCH_MAC) -> list[bytes]:
    sniffer = subprocess.Popen(
        ["ip", "netns", "exec", receiver.ns, sys.executable, "-c", SNIFF, receiver.iface, receiver.ip, str(count)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sniffer.stdout is not None
        assert sniffer.stdout.readline().strip() == "ready"
        subprocess.run(
            ["ip", "netns", "exec", sender.ns, sys.executable, "-c", SEND, sender.iface, sender.mac, dst_mac,
             sender.ip, receiver.ip, str(count)], check=True, timeout=60, capture_output=True)
        out, err = sniffer.communicate(timeout=30)
    finally:
        if sniffer.poll() is None:
            sniffer.kill()
            sniffer.communicate()
    return [bytes.fromhex(line) for line in out.split()]


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

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
struct headers { ethernet_t ethernet; }
struct metadata { }

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control Ing(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(8, CounterType.packets_and_bytes) port_rx;
    direct_counter(CounterType.packets_and_bytes) mac_hits;
    action to_port(bit<9> port) { sm.egress_spec = port; mac_hits.count(); }
    action drop() { mark_to_drop(sm); mac_hits.count(); }
    table dmac {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { to_port; drop; }
        default_action = drop();
        counters = mac_hits;
    }
    apply {
        port_rx.count((bit<32>) sm.ingress_port);
        dmac.apply();
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); } }
V1Switch(P(), VC(), Ing(), E(), CC(), D()) main;
"""

COUNTER_SESSION = r'''
import json, sys
import p4runtime_sh.shell as sh

address, p4info, device_config, h2_mac, stage = sys.argv[1:6]
config = sh.FwdPipeConfig(p4info, device_config) if stage == "setup" else None
sh.setup(device_id=1, grpc_addr=address, election_id=(0, 1), config=config, verbose=False)
out = {}
if stage == "setup":
    entry = sh.TableEntry("Ing.dmac")(action="Ing.to_port")
    entry.match["hdr.ethernet.dstAddr"] = h2_mac
    entry.action["port"] = "2"
    entry.insert()
else:
    rx = sh.CounterEntry("Ing.port_rx")
    out["port_rx"] = {str(e.index.index): [e.data.packet_count, e.data.byte_count] for e in rx.read()}
    hits = sh.DirectCounterEntry("Ing.mac_hits")
    out["mac_hits"] = [[e.data.packet_count, e.data.byte_count] for e in hits.read()]
print(json.dumps(out))
sh.teardown()
'''


@pytest.mark.netns
def test_p4runtime_shell_reads_counters_after_traffic(lab: Lab, tmp_path: Path) -> None:
    h1, port1 = lab.add_host(1, "10.0.1.1")
    h2, port2 = lab.add_host(2, "10.0.1.2")
    source = tmp_path / "counting.p4"
    source.write_text(COUNTING_P4)
    p4info, config = compile_program(source, tmp_path)

    def session(stage: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", COUNTER_SESSION, address, str(p4info), str(config), h2.mac, stage],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"p4runtime-shell failed:\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    args = ["--no-p4", "-i", f"1@{port1}", "-i", f"2@{port2}", "--device-id", "1"]
    with switch_process(args, tmp_path / "s1.log") as (_, address):
        session("setup")
        frames = send_and_sniff(h1, h2, 4, dst_mac=h2.mac)
        assert len(frames) == 4
        counts = session("read")
    packets, nbytes = counts["port_rx"]["1"]
    assert packets >= 4 and nbytes >= 4 * len(frames[0])  # hosts may add IPv6 neighbour discovery
    assert sorted(counts["port_rx"]) == [str(i) for i in range(8)]
    assert counts["mac_hits"] == [[4, 4 * len(frames[0])]]
