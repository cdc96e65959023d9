"""P4Info as p4c emits it for v1model, and the device config round trip."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4runtime_sh.context import Context, P4Type

from p4switch.device_config import (
    DeviceConfigError, device_config_bytes, pipeline_from_device_config, program_from_device_config,
)
from p4switch.frontend import load_program
from p4switch.p4info import build_p4info, jenkins_one_at_a_time, p4info_text
from p4switch.tables import Lpm, TableEntry

PROGRAMS = Path(__file__).parent / "p4programs"


@pytest.fixture(scope="module")
def router():
    return load_program(PROGRAMS / "ipv4_router.p4")


@pytest.fixture(scope="module")
def ecmp():
    return load_program(PROGRAMS / "ecmp.p4")


def by_name(items):
    return {i.preamble.name: i for i in items}


def test_jenkins_hash_reference_vectors():
    # Bob Jenkins' one-at-a-time hash, published test vector.
    assert jenkins_one_at_a_time("a") == 0xCA2E9442
    assert jenkins_one_at_a_time("The quick brown fox jumps over the lazy dog") == 0x519E91F5


def test_router_names_and_ids_match_p4c(router):
    p4info = build_p4info(router)
    tables, actions = by_name(p4info.tables), by_name(p4info.actions)
    # The ids p4c gives the P4 tutorials' basic.p4, which this router mirrors.
    assert tables["MyIngress.ipv4_lpm"].preamble.id == 37375156
    assert actions["MyIngress.ipv4_forward"].preamble.id == 28792405
    assert actions["MyIngress.drop"].preamble.id == 25652968
    assert actions["NoAction"].preamble.id == 21257015
    table = tables["MyIngress.ipv4_lpm"]
    assert table.preamble.alias == "ipv4_lpm" and table.size == 1024
    mf = table.match_fields[0]
    assert (mf.id, mf.name, mf.bitwidth, mf.match_type) == (1, "hdr.ipv4.dstAddr", 32, p4info_pb2.MatchField.LPM)
    assert [r.id for r in table.action_refs] == [28792405, 25652968, 21257015]
    params = actions["MyIngress.ipv4_forward"].params
    assert [(p.id, p.name, p.bitwidth) for p in params] == [(1, "dstAddr", 48), (2, "port", 9)]
    assert p4info.pkg_info.arch == "v1model"


def test_ids_carry_the_resource_type_prefix(ecmp):
    p4info = build_p4info(ecmp)
    prefix = {"tables": 0x02, "actions": 0x01, "counters": 0x12, "direct_counters": 0x13,
              "registers": 0x16}
    for field, want in prefix.items():
        items = getattr(p4info, field)
        assert items, field
        assert all(i.preamble.id >> 24 == want for i in items), field
    all_ids = [i.preamble.id for f in prefix for i in getattr(p4info, f)]
    assert len(all_ids) == len(set(all_ids))


def test_ecmp_p4info_resources(ecmp):
    p4info = build_p4info(ecmp)
    tables = by_name(p4info.tables)
    member = tables["EcmpIngress.ecmp_member"]
    assert [m.name for m in member.match_fields] == ["meta.ecmp_group_id", "meta.ecmp_member"]
    direct = by_name(p4info.direct_counters)["EcmpIngress.member_counter"]
    assert direct.direct_table_id == member.preamble.id
    assert list(member.direct_resource_ids) == [direct.preamble.id]
    assert direct.spec.unit == p4info_pb2.CounterSpec.BOTH
    assert member.const_default_action_id == by_name(p4info.actions)["NoAction"].preamble.id
    noaction_ref = [r for r in member.action_refs if r.id == member.const_default_action_id][0]
    assert noaction_ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY
    prio = tables["EcmpIngress.priority_class"]
    assert [(m.name, m.match_type) for m in prio.match_fields] == [
        ("hdr.ipv4.dstAddr[7:0]", p4info_pb2.MatchField.RANGE),
        ("hdr.ipv4.dscp", p4info_pb2.MatchField.TERNARY)]
    counters = by_name(p4info.counters)
    assert counters["EcmpIngress.ingress_drops"].size == 8
    assert counters["EcmpEgress.port_tx"].spec.unit == p4info_pb2.CounterSpec.PACKETS
    reg = by_name(p4info.registers)["EcmpIngress.rr_next"]
    assert reg.size == 256 and reg.type_spec.bitstring.bit.bitwidth == 16
    assert {"EcmpIngress.flow_hash", "EcmpIngress.drop_no_route"} <= set(by_name(p4info.actions))


def test_controller_header_and_digest_metadata():
    source = (PROGRAMS / "ipv4_router.p4").read_text().replace(
        "struct metadata { }",
        '@controller_header("packet_in")\nheader packet_in_t { bit<9> ingress_port; bit<7> pad; }\n'
        "struct metadata { }")
    from p4switch.frontend import load_program_text
    p4info = build_p4info(load_program_text(source, "r.p4"))
    cpm = p4info.controller_packet_metadata[0]
    assert cpm.preamble.name == "packet_in" and cpm.preamble.id >> 24 == 0x04
    assert [(m.id, m.name, m.bitwidth) for m in cpm.metadata] == [(1, "ingress_port", 9), (2, "pad", 7)]
    features = build_p4info(load_program(PROGRAMS / "features.p4"))
    # actions a control's apply block calls directly are listed, as p4c lists them
    assert "FIngress.reply" in by_name(features.actions)
    assert "FIngress.set_r8" in by_name(features.actions)
    digest = by_name(features.digests)["learn_t"]
    assert digest.preamble.id >> 24 == 0x17
    members = features.type_info.structs["learn_t"].members
    assert [(m.name, m.type_spec.bitstring.bit.bitwidth) for m in members] == [("a", 8), ("b", 8), ("port", 9)]


def test_p4runtime_shell_accepts_the_p4info_text(ecmp):
    text = p4info_text(build_p4info(ecmp))
    parsed = p4info_pb2.P4Info()
    text_format.Merge(text, parsed)
    ctx = Context()
    ctx.set_p4info(parsed)
    assert ctx.get_obj_id(P4Type.table, "ecmp_member") == ctx.get_obj_id(P4Type.table, "EcmpIngress.ecmp_member")
    assert ctx.get_param_id("EcmpIngress.set_nhop", "dmac") == 3
    assert ctx.get_mf_id("EcmpIngress.ipv4_lpm", "hdr.ipv4.dstAddr") == 1


def test_device_config_round_trip(router):
    data = device_config_bytes(router)
    program = program_from_device_config(data)
    assert program.info.tables.keys() == router.info.tables.keys()
    pipe = pipeline_from_device_config(data)
    pipe.tables["MyIngress.ipv4_lpm"].insert(TableEntry((Lpm(0x0A000000, 8),), 0, "MyIngress.ipv4_forward", (5, 3)))
    frame = bytes.fromhex("000000000101000000000001080045000014000100004000"
                          "65e20a0000010a000107")
    assert [p for p, _ in pipe.process(frame, 1)] == [3]


def test_device_config_errors_keep_source_locations(router):
    data = device_config_bytes(router).replace(b"hdr.ipv4.ttl - 1", b"hdr.ipv4.ttl - hdr.ipv4.srcAddr")
    with pytest.raises(Exception, match=r"ipv4_router\.p4:73:\d+: type error"):
        program_from_device_config(data)
    with pytest.raises(DeviceConfigError, match="not JSON"):
        program_from_device_config(b"\x00\x01")
    with pytest.raises(DeviceConfigError, match="format"):
        program_from_device_config(b'{"format": "bmv2"}')


def test_id_annotations_fix_ids(router):
    from p4switch.frontend import load_program_text
    source = (PROGRAMS / "ipv4_router.p4").read_text()
    source = source.replace("    table ipv4_lpm {", "    @id(0x02000077) table ipv4_lpm {").replace(
        "    action drop() {", "    @id(5) action drop() {")
    p4info = build_p4info(load_program_text(source, "r.p4"))
    assert by_name(p4info.tables)["MyIngress.ipv4_lpm"].preamble.id == 0x02000077
    assert by_name(p4info.actions)["MyIngress.drop"].preamble.id == 0x01000005
    assert by_name(p4info.actions)["MyIngress.ipv4_forward"].preamble.id == 28792405


def test_idle_timeout_and_initial_entries_are_declared():
    from p4switch.frontend import load_program_text
    source = (PROGRAMS / "ipv4_router.p4").read_text().replace(
        "        size = 1024;",
        "        size = 1024;\n        support_timeout = true;\n"
        "        entries = { 0x0a000000 &&& 0xff000000: drop(); }")
    table = build_p4info(load_program_text(source, "r.p4")).tables[0]
    assert table.idle_timeout_behavior == p4info_pb2.Table.NOTIFY_CONTROL
    assert table.has_initial_entries and not table.is_const_table
