"""P4Info name resolution and entities that encode and decode against the schema."""

from __future__ import annotations

import pytest

from controller.entities import CounterEntry, MulticastGroupEntry, TableEntry
from controller.errors import EncodingError, SchemaError
from controller.schema import NameIndex
from controller.values import Lpm, Range
from tests.controller_helpers import schema

S = schema()


def test_names_resolve_by_full_name_alias_and_unique_suffix() -> None:
    assert S.tables["DlcpIngress.ipv4_lpm"].id == S.tables["ipv4_lpm"].id
    assert S.actions["set_nhop"].name == "DlcpIngress.set_nhop"
    assert S.tables["layer_priority"].field("tensor_id").name == "hdr.dlcp.tensor_id"
    assert S.counters["port_tx"].size == 4096


def test_ambiguous_and_unknown_names_are_errors() -> None:
    index = NameIndex("table", [(1, "Ingress.t", "", "a"), (2, "Egress.t", "", "b")])
    with pytest.raises(SchemaError, match="ambiguous"):
        index["t"]
    assert index["Egress.t"] == "b"
    with pytest.raises(SchemaError, match="no table named 'nope'"):
        S.tables["nope"]
    with pytest.raises(SchemaError, match="has no match field 'dstAdr'"):
        TableEntry.build(S, "ipv4_lpm", {"dstAdr": "10.0.0.1"}, "drop_no_route")


def test_table_entry_round_trips_with_canonical_values() -> None:
    entry = TableEntry.build(
        S, "ipv4_lpm", {"dstAddr": "10.0.1.9/24"}, "set_nhop",
        {"port": 3, "smac": "00:00:00:00:01:03", "dmac": "00:00:0a:00:01:01"},
    )
    assert entry.match == (("hdr.ipv4.dstAddr", Lpm(0x0A000100, 24)),)
    pb = entry.encode(S)
    assert pb.table_entry.match[0].lpm.value == b"\x0a\x00\x01\x00"
    assert pb.table_entry.action.action.params[0].value == b"\x03"
    assert TableEntry.decode(S, pb) == entry


def test_wildcard_fields_are_left_out() -> None:
    entry = TableEntry.build(
        S, "drop_class", {"job_id": 1, "tensor_id": "0..65535", "mag_class": "0..255"}, "drop_above",
        {"queue_threshold": 2}, priority=1,
    )
    assert [name for name, _ in entry.match] == ["hdr.dlcp.job_id"]
    assert len(entry.encode(S).table_entry.match) == 1
    ranged = TableEntry.build(
        S, "layer_priority", {"job_id": 1, "tensor_id": "2..4", "mag_class": "0..255"}, "set_priority",
        {"prio": 7, "dscp": 0}, priority=5,
    )
    assert dict(ranged.match)["hdr.dlcp.tensor_id"] == Range(2, 4)
    assert "hdr.dlcp.mag_class" not in dict(ranged.match)
    assert TableEntry.decode(S, ranged.encode(S)) == ranged


def test_entry_errors_name_table_and_field() -> None:
    with pytest.raises(EncodingError, match=r"set_nhop param port: '600' does not fit in 9 bits"):
        TableEntry.build(S, "ipv4_lpm", {"dstAddr": "10.0.0.1"}, "set_nhop", {"port": "600", "smac": 0, "dmac": 0})
    with pytest.raises(EncodingError, match="parameter dmac is missing"):
        TableEntry.build(S, "ipv4_lpm", {"dstAddr": "10.0.0.1"}, "set_nhop", {"port": 1, "smac": 0})
    with pytest.raises(EncodingError, match="need a priority"):
        TableEntry.build(S, "layer_priority", {"job_id": 1}, "set_priority", {"prio": 1, "dscp": 0})
    with pytest.raises(SchemaError, match="not an action of table DlcpIngress.spray_mode"):
        TableEntry.build(S, "spray_mode", {"job_id": 1}, "set_nhop", {"port": 1, "smac": 0, "dmac": 0})
    with pytest.raises(SchemaError, match="default-only"):
        TableEntry.build(S, "ecmp_member", {"ecmp_group_id": 1, "ecmp_member": 0}, "NoAction")
    with pytest.raises(EncodingError, match="exact match field meta.ecmp_member needs a value"):
        TableEntry.build(S, "ecmp_member", {"ecmp_group_id": 1}, "set_nhop", {"port": 1, "smac": 0, "dmac": 0})


def test_entries_print_in_shell_syntax() -> None:
    entry = TableEntry.build(
        S, "drop_class", {"job_id": 4, "mag_class": "0..117"}, "drop_above",
        {"queue_threshold": 48}, priority=2,
    )
    assert entry.text(S) == (
        "DlcpIngress.drop_class hdr.dlcp.job_id=4 hdr.dlcp.mag_class=0..117 priority=2 "
        "-> DlcpIngress.drop_above(queue_threshold=48)"
    )
    assert dict(entry.match)["hdr.dlcp.mag_class"] == Range(0, 117)


def test_default_entry_counter_and_multicast_encode() -> None:
    default = TableEntry.build(S, "layer_priority", action="set_priority", params={"prio": 2, "dscp": 0}, is_default=True)
    pb = default.encode(S).table_entry
    assert pb.is_default_action and not pb.match
    assert TableEntry.decode(S, default.encode(S)) == default
    assert CounterEntry("port_tx", 17).encode(S).counter_entry.index.index == 17
    with pytest.raises(EncodingError, match="index 9 is not in 0..7"):
        CounterEntry("ingress_drops", 9).encode(S)
    group = MulticastGroupEntry(5, ((1, 0), (2, 0)))
    assert MulticastGroupEntry.decode(None, group.encode()) == group


def test_packet_out_needs_the_programs_controller_header() -> None:
    from controller.entities import PacketOut

    assert PacketOut(b"\x01\x02").encode(S).payload == b"\x01\x02"
    with pytest.raises(SchemaError, match="no packet_out controller header"):
        PacketOut(b"x", (("egress_port", 1),)).encode(S)
