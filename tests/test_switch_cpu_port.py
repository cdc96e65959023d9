"""PacketOut, PacketIn and digests through a real program, on in-memory ports.

The P4Runtime service is driven directly (no gRPC): its arbiter gets a primary whose
stream messages are collected in a list.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from p4.v1 import p4runtime_pb2

from p4switch.ports import MemoryPort, VirtualClock
from p4switch.server.servicer import P4RuntimeServicer
from p4switch.switch import Datapath
from p4switch.traffic_manager import TrafficManager

CPU_PORT = 510

CPU_P4 = r"""
#include <core.p4>
#include <v1model.p4>

@controller_header("packet_out")
header packet_out_t { bit<9> egress_port; bit<7> _pad; }
@controller_header("packet_in")
header packet_in_t { bit<9> ingress_port; bit<7> _pad; }
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers { packet_out_t packet_out; packet_in_t packet_in; ethernet_t ethernet; }
struct learn_t { bit<48> src; bit<9> port; }
struct metadata { learn_t learn; }

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        transition select(sm.ingress_port) { 510: parse_packet_out; default: parse_ethernet; }
    }
    state parse_packet_out { pkt.extract(hdr.packet_out); transition parse_ethernet; }
    state parse_ethernet { pkt.extract(hdr.ethernet); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.packet_out.isValid()) {
            sm.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else {
            meta.learn.src = hdr.ethernet.src;
            meta.learn.port = sm.ingress_port;
            digest<learn_t>(1, meta.learn);
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = sm.ingress_port;
            hdr.packet_in._pad = 0;
            sm.egress_spec = 510;
        }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr.packet_in); pkt.emit(hdr.ethernet); }
}
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""

FRAME = bytes.fromhex("ffffffffffff" "0200000000aa" "88b5") + b"hello"


@pytest.fixture
def switch(tmp_path: Path) -> tuple[Datapath, P4RuntimeServicer, list[p4runtime_pb2.StreamMessageResponse]]:
    from p4switch.device_config import pipeline_from_device_config, write_device_config
    from p4switch.frontend import load_program
    from p4switch.p4info import build_p4info

    source = tmp_path / "cpu.p4"
    source.write_text(CPU_P4)
    program = load_program(source)
    config = tmp_path / "cpu.json"
    write_device_config(program, config)
    clock = VirtualClock()
    datapath = Datapath(TrafficManager(), clock, cpu_port=CPU_PORT)
    for number in (1, 2):
        datapath.add_port(MemoryPort(number, clock))
    servicer = P4RuntimeServicer(datapath, device_id=1)
    data = config.read_bytes()
    servicer.load(build_p4info(program), data, pipeline_from_device_config(data))
    datapath.packet_in = servicer.packet_in
    received: list[p4runtime_pb2.StreamMessageResponse] = []
    update = p4runtime_pb2.MasterArbitrationUpdate(device_id=1)
    update.election_id.low = 1
    servicer.arbiter.arbitrate(1, update, received.append)
    assert received.pop().arbitration.status.code == 0
    return datapath, servicer, received


def test_packet_out_leaves_on_the_port_its_header_names(switch) -> None:
    datapath, servicer, _ = switch
    packet = p4runtime_pb2.PacketOut(payload=FRAME)
    port_field = servicer.store.schema.packet_out.fields[0]
    packet.metadata.add(metadata_id=port_field.id, value=b"\x02")
    servicer.packet_out(packet)
    datapath.transmit_due()
    assert datapath.ports[2].take() == [FRAME]
    assert datapath.ports[1].take() == []


def test_packet_in_carries_ingress_port_and_digest_is_sent_once_enabled(switch) -> None:
    datapath, servicer, received = switch
    datapath.receive(FRAME, 1)
    datapath.transmit_due()
    (message,) = received
    assert message.packet.payload == FRAME
    names = {f.id: f.name for f in servicer.store.schema.packet_in.fields}
    metadata = {names[m.metadata_id]: int.from_bytes(m.value, "big") for m in message.packet.metadata}
    assert metadata["ingress_port"] == 1
    received.clear()

    (digest,) = servicer.store.schema.digests.values()
    servicer.store.write(p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=p4runtime_pb2.Entity(
        digest_entry=p4runtime_pb2.DigestEntry(digest_id=digest.id))))
    datapath.receive(FRAME, 2)
    datapath.transmit_due()
    digests = [m.digest for m in received if m.HasField("digest")]
    assert len(digests) == 1
    members = [int.from_bytes(m.bitstring, "big") for m in digests[0].data[0].struct.members]
    assert members == [0x0200000000AA, 2]
