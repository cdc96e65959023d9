"""The native datapath obeys every control-plane write, as the Python pipeline does.

Each write goes through the P4Runtime server's write path (serialized updates into an
EntityStore) on both datapaths. First one regression test per symptom of a table index that
kept deleted entries matching (an LPM route, an exact entry whose default must run again, a
DLCP ECMP member, a DLCP ECN threshold), with expected outputs written out here; then the
seeded differential fuzzer (tests/p4runtime_differential.py) over thousands of writes and
packets per program, and a planted skipped delete that it must catch.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import pytest

from gradfabric.paths import P4SRC, ROOT
from p4switch.frontend import load_program, load_program_text
from p4switch.native.build import find_compiler
from p4switch.tables import Table
from tests.p4runtime_differential import DELETE, INSERT, MODIFY, OK, RANDOM_ACTIONS, Side, pair, run, table_update

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

WRITES = int(os.environ.get("GRADFABRIC_CP_FUZZ_WRITES", "5000"))
ROUTER = ROOT / "tests" / "p4programs" / "ipv4_router.p4"
SWITCH_MAC = bytes.fromhex("000000000101")

EXACT_DEFAULT = """
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers { ethernet_t eth; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action forward(bit<9> port) { sm.egress_spec = port; }
    table l2 {
        key = { hdr.eth.dst: exact; }
        actions = { forward; }
        default_action = forward(4);
        size = 64;
    }
    apply { l2.apply(); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def _csum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4_frame(dst: int, *, src_port: int = 1000, tos: int = 0, dlcp_job: int | None = None) -> bytes:
    """Ethernet/IPv4/UDP to `dst`, with a DLCP header of `dlcp_job` when given."""
    if dlcp_job is None:
        payload = bytes(8)
        dport = 5000
    else:  # version 1, not drop-eligible, job, worker 0, tensor 1, iteration, offset, length...
        payload = struct.pack("!BBHHHIIIHBBI", 0x10, 0, dlcp_job, 0, 1, 0, 0, 1000, 4, 1, 0, 0)
        dport = 19600
    udp = struct.pack("!HHHH", src_port, dport, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack("!BBHHHBBHII", 0x45, tos, 20 + len(udp), 1, 0, 64, 17, 0, 0x0A000101, dst))
    ip[10:12] = struct.pack("!H", _csum(bytes(ip)))
    return SWITCH_MAC + bytes.fromhex("00000a000101") + b"\x08\x00" + bytes(ip) + udp


def write_ok(sides: tuple[Side, Side], data: bytes) -> None:
    for side in sides:
        assert side.write(data) == (OK, "")


def ports_of(sides: tuple[Side, Side], frame: bytes) -> list[list[int]]:
    """The ports a frame leaves on, per side (Python first)."""
    out = []
    for side in sides:
        sent = side.send(frame, 1, 0)
        assert isinstance(sent, list)
        out.append([port for port, _ in sent])
    return out


# -- one regression test per symptom ------------------------------------------------------

def test_a_deleted_route_stops_matching_while_another_stays() -> None:
    """The p4runtime-shell report: after deleting 10.0.2.0/24 (10.0.1.0/24 kept), packets to
    10.0.2.2 are dropped by the default action, on both datapaths."""
    python, native, info = pair(load_program(ROUTER))
    sides = (python, native)
    route = lambda kind, prefix, port: table_update(  # noqa: E731
        info, kind, "MyIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (prefix, 24)},
        "MyIngress.ipv4_forward", (0x0A0A0A0A0A0A, port) if kind != DELETE else ())
    write_ok(sides, route(INSERT, 0x0A000200, 3))
    write_ok(sides, route(INSERT, 0x0A000100, 2))
    for _ in range(3):
        assert ports_of(sides, ipv4_frame(0x0A000202)) == [[3], [3]]
    write_ok(sides, table_update(info, DELETE, "MyIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (0x0A000200, 24)}))
    for _ in range(3):
        assert ports_of(sides, ipv4_frame(0x0A000202)) == [[], []]
        assert ports_of(sides, ipv4_frame(0x0A000107)) == [[2], [2]]
    write_ok(sides, table_update(info, DELETE, "MyIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (0x0A000100, 24)}))
    assert ports_of(sides, ipv4_frame(0x0A000107)) == [[], []]


def test_the_first_route_deleted_stops_matching() -> None:
    python, native, info = pair(load_program(ROUTER))
    sides = (python, native)
    match = {"hdr.ipv4.dstAddr": (0x0A000200, 24)}
    write_ok(sides, table_update(info, INSERT, "MyIngress.ipv4_lpm", match, "MyIngress.ipv4_forward", (1, 3)))
    assert ports_of(sides, ipv4_frame(0x0A000202)) == [[3], [3]]
    write_ok(sides, table_update(info, DELETE, "MyIngress.ipv4_lpm", match))
    assert ports_of(sides, ipv4_frame(0x0A000202)) == [[], []]


def test_a_deleted_exact_entry_falls_back_to_the_default_action() -> None:
    """Even the last entry of an exact table: its key must run the default (port 4) again,
    also after the default itself was changed (port 1)."""
    python, native, info = pair(load_program_text(EXACT_DEFAULT, "exact_default.p4"))
    sides = (python, native)
    frame = bytes.fromhex("0000000000aa") + bytes.fromhex("000000000001") + b"\x88\xb5" + bytes(50)
    assert ports_of(sides, frame) == [[4], [4]]
    match = {"hdr.eth.dst": 0xAA}
    write_ok(sides, table_update(info, INSERT, "I.l2", match, "I.forward", (2,)))
    assert ports_of(sides, frame) == [[2], [2]]
    write_ok(sides, table_update(info, DELETE, "I.l2", match))
    assert ports_of(sides, frame) == [[4], [4]]
    write_ok(sides, table_update(info, MODIFY, "I.l2", {}, "I.forward", (1,), default=True))
    write_ok(sides, table_update(info, INSERT, "I.l2", match, "I.forward", (3,)))
    assert ports_of(sides, frame) == [[3], [3]]
    write_ok(sides, table_update(info, DELETE, "I.l2", match))
    assert ports_of(sides, frame) == [[1], [1]]


@pytest.fixture(scope="module")
def dlcp_program() -> Any:
    return load_program(P4SRC / "dlcp.p4")


def _dlcp_route(info: Any, sides: tuple[Side, Side]) -> None:
    """10.0.2.0/24 to ECMP group 1 of two members: member 0 on port 2, member 1 on port 3."""
    write_ok(sides, table_update(info, INSERT, "DlcpIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (0x0A000200, 24)},
                                 "DlcpIngress.set_ecmp_group", (1, 2)))
    for member, port in ((0, 2), (1, 3)):
        write_ok(sides, table_update(info, INSERT, "DlcpIngress.ecmp_member",
                                     {"meta.ecmp_group_id": 1, "meta.ecmp_member": member},
                                     "DlcpIngress.set_nhop", (port, 0x0A, 0x0B)))


def test_a_deleted_ecmp_member_stops_receiving_traffic(dlcp_program: Any) -> None:
    """Flows spread over both members; once member 0 (the table's first entry) is deleted,
    port 2 receives nothing and the flows hashed to it are dropped (a member index without an
    entry), on both datapaths."""
    python, native, info = pair(dlcp_program)
    sides = (python, native)
    _dlcp_route(info, sides)
    flows = [ipv4_frame(0x0A000202, src_port=1000 + i) for i in range(40)]
    before = [ports_of(sides, f) for f in flows]
    assert all(py == nat for py, nat in before)
    assert {p for py, _ in before for p in py} == {2, 3}
    write_ok(sides, table_update(info, DELETE, "DlcpIngress.ecmp_member",
                                 {"meta.ecmp_group_id": 1, "meta.ecmp_member": 0}))
    after = [ports_of(sides, f) for f in flows]
    for (was, _), (now_py, now_nat) in zip(before, after):
        assert now_py == now_nat == (was if was == [3] else [])


def test_a_deleted_ecn_threshold_stops_marking(dlcp_program: Any) -> None:
    """Job 1's ECN threshold 0 marks its ECT(0) packets CE; deleted, they leave unmarked."""
    python, native, info = pair(dlcp_program)
    sides = (python, native)
    _dlcp_route(info, sides)
    threshold = table_update(info, INSERT, "DlcpEgress.ecn_threshold", {"hdr.dlcp.job_id": 1},
                             "DlcpEgress.mark_above", (0,))
    write_ok(sides, threshold)
    frame = ipv4_frame(0x0A000202, tos=0x02, dlcp_job=1)  # ECT(0)
    ecn = lambda side: [data[15] & 3 for _, data in side.send(frame, 1, 0)]  # noqa: E731
    assert ecn(python) == ecn(native) == [3]
    write_ok(sides, table_update(info, DELETE, "DlcpEgress.ecn_threshold", {"hdr.dlcp.job_id": 1}))
    assert ecn(python) == ecn(native) == [2]
    write_ok(sides, threshold)
    assert ecn(python) == ecn(native) == [3]


# -- the differential fuzzer ----------------------------------------------------------------

def test_router_writes_and_packets_agree(capsys: Any) -> None:
    python, native, info = pair(load_program(ROUTER))
    report = run(python, native, info, WRITES, seed=26)
    assert not report.mismatches, "\n".join(report.mismatches[:5])
    assert report.statuses[OK] > WRITES // 3 and len(report.statuses) >= 4  # accepted and refused writes
    assert report.frames_out > report.packets // 10
    with capsys.disabled():
        print(f"\nrouter: {report.writes} writes {dict(report.statuses)}, {report.packets} packets, "
              f"{report.frames_out} out, 0 mismatches")


def test_dlcp_writes_and_packets_agree(dlcp_program: Any, capsys: Any) -> None:
    python, native, info = pair(dlcp_program)
    report = run(python, native, info, WRITES, seed=33, exclude_actions=RANDOM_ACTIONS)
    assert not report.mismatches, "\n".join(report.mismatches[:5])
    assert report.statuses[OK] > WRITES // 3 and len(report.statuses) >= 4
    assert report.frames_out > report.packets // 20
    with capsys.disabled():
        print(f"\nDLCP: {report.writes} writes {dict(report.statuses)}, {report.packets} packets, "
              f"{report.frames_out} out, 0 mismatches")


def test_a_planted_skipped_delete_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native side forgets every third delete of the route table in C (its Python view
    still drops the entry, as the broken index did): the fuzzer must report it."""
    python, native, info = pair(load_program(ROUTER))
    table = native.pipeline.tables["MyIngress.ipv4_lpm"]
    real_delete = type(table).delete
    calls = {"n": 0}

    def planted(entry: Any) -> None:
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            Table.delete(table, entry)  # the Python bookkeeping only: the C entry stays
        else:
            real_delete(table, entry)

    monkeypatch.setattr(table, "delete", planted)
    report = run(python, native, info, 2000, seed=26)
    assert calls["n"] >= 3
    assert any(m.startswith("packet after write") for m in report.mismatches), report.mismatches[:3]


# -- counters keep only what their unit counts ----------------------------------------------

UNIT_COUNTERS = EXACT_DEFAULT.replace(
    "    action forward(bit<9> port) { sm.egress_spec = port; }",
    "    direct_counter(CounterType.packets) hits;\n"
    "    counter(4, CounterType.bytes) seen;\n"
    "    action forward(bit<9> port) { sm.egress_spec = port; }").replace(
    "        size = 64;\n    }\n    apply { l2.apply(); }",
    "        size = 64;\n        counters = hits;\n    }\n    apply { seen.count(1); l2.apply(); }")


def _counter_data(side: Side, entity: Any) -> list[tuple[int, int]]:
    from p4.v1 import p4runtime_pb2

    out = []
    for data in side.read(entity):
        got = p4runtime_pb2.Entity.FromString(data)
        kind = got.WhichOneof("entity")
        msg = getattr(got, kind)
        cd = msg.counter_data if kind == "table_entry" else msg.data
        out.append((cd.packet_count, cd.byte_count))
    return out


def test_counters_store_and_read_only_what_their_unit_counts() -> None:
    """A direct counter of packets keeps no bytes written to it (in a table entry's
    counter_data or a DirectCounterEntry), nor shows the bytes the data plane counted; a
    counter of bytes keeps no packets; as BMv2's PI server. Both datapaths."""
    from p4.v1 import p4runtime_pb2

    python, native, info = pair(load_program_text(UNIT_COUNTERS, "unit_counters.p4"))
    sides = (python, native)
    entry = table_update(info, INSERT, "I.l2", {"hdr.eth.dst": 0xAA}, "I.forward", (2,))
    update = p4runtime_pb2.Update.FromString(entry)
    update.entity.table_entry.counter_data.packet_count = 5
    update.entity.table_entry.counter_data.byte_count = 500
    write_ok(sides, update.SerializeToString())
    query = p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())
    query.table_entry.counter_data.SetInParent()
    assert [_counter_data(side, query) for side in sides] == [[(5, 0)], [(5, 0)]]
    direct = p4runtime_pb2.Update(type=MODIFY)
    direct.entity.direct_counter_entry.table_entry.CopyFrom(update.entity.table_entry)
    direct.entity.direct_counter_entry.table_entry.ClearField("action")
    direct.entity.direct_counter_entry.table_entry.ClearField("counter_data")
    direct.entity.direct_counter_entry.data.packet_count = 7
    direct.entity.direct_counter_entry.data.byte_count = 700
    write_ok(sides, direct.SerializeToString())
    frame = bytes.fromhex("0000000000aa") + bytes.fromhex("000000000001") + b"\x88\xb5" + bytes(50)
    assert ports_of(sides, frame) == [[2], [2]]
    read_direct = p4runtime_pb2.Entity(direct_counter_entry=p4runtime_pb2.DirectCounterEntry())
    assert [_counter_data(side, read_direct) for side in sides] == [[(8, 0)], [(8, 0)]]
    seen = next(c for c in info.counters if c.preamble.name == "I.seen")
    cell = p4runtime_pb2.Update(type=MODIFY)
    cell.entity.counter_entry.counter_id = seen.preamble.id
    cell.entity.counter_entry.index.index = 2
    cell.entity.counter_entry.data.packet_count, cell.entity.counter_entry.data.byte_count = 9, 900
    write_ok(sides, cell.SerializeToString())
    read_seen = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(counter_id=seen.preamble.id))
    # index 1 counted the 64-byte frame (bytes only), index 2 holds the written bytes only
    assert [sorted(_counter_data(side, read_seen)) for side in sides] == [[(0, 0), (0, 0), (0, 64), (0, 900)]] * 2
