"""Action profiles and action selectors: members, groups and the selector hash."""

from __future__ import annotations

import struct

import pytest
from p4.config.v1 import p4info_pb2

from p4switch.frontend import load_program_text
from p4switch.p4info import build_p4info
from p4switch.pipeline import Pipeline
from p4switch.tables import EntryNotFound, Exact, InvalidEntry, TableEntry, TableError

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header d_t { bit<8> kind; bit<16> dst; bit<32> src; bit<16> flow; bit<8> port_out; }
struct hs { d_t d; }
struct ms { }
parser P(packet_in p, out hs hdr, inout ms m, inout standard_metadata_t sm) {
    state start { p.extract(hdr.d); transition accept; }
}
control V(inout hs hdr, inout ms m) { apply { } }
control I(inout hs hdr, inout ms m, inout standard_metadata_t sm) {
    action_selector(HashAlgorithm.crc16, 32w64, 32w14) sel;
    action_profile(32w4) prof;
    action fwd(bit<9> port) { sm.egress_spec = port; hdr.d.port_out = (bit<8>)port; }
    action drop() { mark_to_drop(sm); }
    table ecmp {
        key = { hdr.d.dst: exact; hdr.d.src: selector; hdr.d.flow: selector; }
        actions = { fwd; drop; }
        implementation = sel;
        default_action = drop();
    }
    table by_kind {
        key = { hdr.d.kind: exact; }
        actions = { fwd; drop; }
        implementation = prof;
        default_action = drop();
    }
    apply {
        if (hdr.d.kind == 0) { ecmp.apply(); } else { by_kind.apply(); }
    }
}
control E(inout hs hdr, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs hdr, inout ms m) { apply { } }
control D(packet_out p, in hs hdr) { apply { p.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
FRAME = struct.Struct(">BHIHB")


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC, bit by bit (independent of p4switch.hashes)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


@pytest.fixture(scope="module")
def program():
    return load_program_text(PROGRAM, "selector.p4")


@pytest.fixture
def pipe(program):
    return Pipeline(program)


def send(pipe: Pipeline, kind: int, dst: int, src: int, flow: int) -> int | None:
    out = pipe.process(FRAME.pack(kind, dst, src, flow, 0), 1)
    return out[0][0] if out else None


def test_members_of_an_action_profile(pipe):
    prof = pipe.action_profiles["I.prof"]
    table = pipe.tables["I.by_kind"]
    prof.insert_member(1, "I.fwd", (7,))
    table.insert(TableEntry((Exact(5),), 0, "", (), member_id=1))
    assert send(pipe, 5, 0, 0, 0) == 7
    prof.modify_member(1, "I.fwd", (8,))
    assert send(pipe, 5, 0, 0, 0) == 8
    assert send(pipe, 6, 0, 0, 0) is None  # miss: default drop
    with pytest.raises(InvalidEntry, match="exactly one member or group"):
        table.insert(TableEntry((Exact(6),), 0, "I.fwd", (1,)))
    with pytest.raises(InvalidEntry, match="no member 9"):
        table.insert(TableEntry((Exact(6),), 0, "", (), member_id=9))
    with pytest.raises(InvalidEntry, match="no selector"):
        prof.insert_group(1, [1])
    with pytest.raises(InvalidEntry, match="does not fit in 9 bits"):
        prof.insert_member(2, "I.fwd", (600,))


def test_selector_picks_the_member_by_hash(pipe):
    sel = pipe.action_profiles["I.sel"]
    for member, port in ((10, 2), (11, 3), (12, 4)):
        sel.insert_member(member, "I.fwd", (port,))
    sel.insert_group(1, [10, 11, 12])
    pipe.tables["I.ecmp"].insert(TableEntry((Exact(0x0102),), 0, "", (), group_id=1))
    seen = set()
    for flow in range(40):
        src = 0x0A000001 + flow * 7
        expected = [2, 3, 4][(crc16_arc(struct.pack(">IH", src, flow)) & 0x3FFF) % 3]
        port = send(pipe, 0, 0x0102, src, flow)
        assert port == expected
        seen.add(port)
    assert seen == {2, 3, 4}
    sel.modify_group(1, [11])
    assert send(pipe, 0, 0x0102, 1, 1) == 3
    with pytest.raises(TableError, match="in group"):
        sel.delete_member(11)
    sel.delete_group(1)
    assert send(pipe, 0, 0x0102, 1, 1) is None  # the entry's group is gone: default action
    with pytest.raises(EntryNotFound):
        sel.delete_group(1)


def test_p4info_lists_profiles_and_table_implementations(program):
    p4info = build_p4info(program)
    profiles = {a.preamble.name: a for a in p4info.action_profiles}
    tables = {t.preamble.name: t for t in p4info.tables}
    sel, prof = profiles["I.sel"], profiles["I.prof"]
    assert sel.preamble.id >> 24 == p4info_pb2.P4Ids.ACTION_PROFILE
    assert sel.with_selector and not prof.with_selector
    assert (sel.size, prof.size) == (64, 4)
    assert list(sel.table_ids) == [tables["I.ecmp"].preamble.id]
    assert tables["I.ecmp"].implementation_id == sel.preamble.id
    assert [m.name for m in tables["I.ecmp"].match_fields] == ["hdr.d.dst"]  # selector keys excluded


def test_selector_keys_need_a_selector():
    bad = PROGRAM.replace("implementation = sel;", "implementation = prof;")
    with pytest.raises(Exception, match=r"selector\.p4:\d+:\d+: type error: table ecmp has selector keys"):
        load_program_text(bad, "selector.p4")
