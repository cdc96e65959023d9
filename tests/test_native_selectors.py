"""Action profiles and selectors on the native datapath: members and groups written through
the Python API land in the C state, and every packet leaves as on the Python pipeline (same
port, same bytes), also after members and groups change."""

from __future__ import annotations

import random
import struct

import pytest

from p4switch.frontend import load_program_text
from p4switch.native.build import find_compiler
from p4switch.native.pipeline import NativePipeline
from p4switch.pipeline import Pipeline
from p4switch.tables import Exact, Lpm, TableEntry
from tests.test_p4runtime_server_profiles import crc16_arc

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

PROGRAM = r"""
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header ipv4_t { bit<4> version; bit<4> ihl; bit<8> tos; bit<16> len; bit<16> id; bit<3> flags;
                bit<13> frag; bit<8> ttl; bit<8> protocol; bit<16> csum; bit<32> src; bit<32> dst; }
struct headers_t { ethernet_t eth; ipv4_t ip; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition select(hdr.eth.type) { 0x0800: ip; default: accept; } }
    state ip { pkt.extract(hdr.ip); transition accept; }
}
control V(inout headers_t hdr, inout meta_t meta) { apply { } }
control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action_selector(HashAlgorithm.crc16, 32w64, 32w14) paths;
    action_profile(32w8) ports_by_vlan;
    action set_nhop(bit<48> dmac, bit<9> port) { hdr.eth.dst = dmac; sm.egress_spec = port; hdr.ip.ttl = hdr.ip.ttl - 1; }
    action drop() { mark_to_drop(sm); }
    action to_port(bit<9> port) { sm.egress_spec = port; }
    table ecmp {
        key = { hdr.ip.dst: lpm; hdr.ip.src: selector; hdr.ip.protocol: selector; }
        actions = { set_nhop; drop; }
        implementation = paths;
        size = 64;
    }
    table l2 {
        key = { hdr.eth.type: exact; }
        actions = { to_port; drop; }
        implementation = ports_by_vlan;
        size = 8;
    }
    apply {
        mark_to_drop(sm);
        if (hdr.ip.isValid()) { ecmp.apply(); } else { l2.apply(); }
    }
}
control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.ip); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def _frame(src: int, dst: int, protocol: int = 17) -> bytes:
    ip = bytes([0x45, 0, 0, 20, 0, 1, 0, 0, 64, protocol, 0, 0]) + src.to_bytes(4, "big") + dst.to_bytes(4, "big")
    return bytes(6) + bytes.fromhex("020000000001") + b"\x08\x00" + ip + b"payload"


def _both(configure) -> tuple[Pipeline, NativePipeline]:
    program = load_program_text(PROGRAM, "selectors.p4")
    pipes = (Pipeline(program), NativePipeline(program))
    for pipe in pipes:
        configure(pipe)
    return pipes


def _configure(pipe) -> None:
    paths = pipe.action_profiles["I.paths"]
    for member, port in ((1, 2), (2, 3), (3, 4)):
        paths.insert_member(member, "I.set_nhop", (0x0A0000000000 + port, port))
    paths.insert_group(10, [1, 2, 3])
    paths.insert_group(11, [])
    ecmp = pipe.tables["I.ecmp"]
    ecmp.insert(TableEntry((Lpm(0x0A000100, 24),), 0, "", (), member_id=1))
    ecmp.insert(TableEntry((Lpm(0x0A000200, 24),), 0, "", (), group_id=10))
    ecmp.insert(TableEntry((Lpm(0x0A000300, 24),), 0, "", (), group_id=11))
    pipe.action_profiles["I.ports_by_vlan"].insert_member(7, "I.to_port", (9,))
    pipe.tables["I.l2"].insert(TableEntry((Exact(0x88B5),), 0, "", (), member_id=7))


def _ports(pipe, frames: list[bytes]) -> list[list[tuple[int, bytes]]]:
    return [pipe.process(f, 1) for f in frames]


def test_members_and_groups_forward_as_on_python() -> None:
    python, native = _both(_configure)
    member = _frame(0x0B000001, 0x0A000105)
    out = native.process(member, 1)
    assert [p for p, _ in out] == [2]  # the member's port
    assert out[0][1][:6] == bytes.fromhex("0a0000000002") and out[0][1][22] == 63  # its data, TTL - 1
    assert native.process(_frame(0x0B000001, 0x0A000305), 1) == []  # an empty group: the default (drop)
    assert native.process(_frame(0x0B000001, 0x0A000905), 1) == []  # a miss
    l2 = bytes(6) + bytes(6) + b"\x88\xb5" + b"x" * 20
    assert [p for p, _ in native.process(l2, 1)] == [9]  # a profile without selector
    rng = random.Random(7)
    keys = [(rng.getrandbits(32), rng.choice((6, 17))) for _ in range(300)]
    flows = [_frame(src, 0x0A000200 | rng.randrange(256), proto) for src, proto in keys]
    got = _ports(native, flows)
    assert got == _ports(python, flows)
    # BMv2's rule, computed apart: crc16 (ARC) of the selector keys, 14 bits, mod the group size
    assert [out[0][0] for out in got] == [
        (2, 3, 4)[(crc16_arc(struct.pack(">IB", src, proto)) & 0x3FFF) % 3] for src, proto in keys]
    spread = {out[0][0] for out in got}
    assert spread == {2, 3, 4}, spread  # 300 flows over a group of three use every member


def test_changes_to_members_and_groups_reach_the_native_datapath() -> None:
    python, native = _both(_configure)
    rng = random.Random(11)
    flows = [_frame(rng.getrandbits(32), 0x0A000200 | rng.randrange(256)) for _ in range(200)]
    for pipe in (python, native):
        pipe.action_profiles["I.paths"].modify_group(10, [1, 3])
        pipe.action_profiles["I.paths"].modify_member(1, "I.set_nhop", (0x0A0000000005, 5))
    got = _ports(native, flows)
    assert got == _ports(python, flows)
    assert {out[0][0] for out in got} == {4, 5}
    assert [p for p, _ in native.process(_frame(1, 0x0A000101), 1)] == [5]
    for pipe in (python, native):
        pipe.action_profiles["I.paths"].delete_group(10)  # entries naming it fall to the default
        pipe.action_profiles["I.paths"].insert_group(12, [3])
        pipe.tables["I.ecmp"].modify(TableEntry((Lpm(0x0A000300, 24),), 0, "", (), group_id=12))
    assert all(native.process(f, 1) == [] for f in flows)
    assert [p for p, _ in native.process(_frame(1, 0x0A000301), 1)] == [4]
    assert _ports(native, flows[:20]) == _ports(python, flows[:20])
