"""Front end: preprocessing, parsing, type checking and the messages of their errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.packet import raw

from p4switch.frontend import (
    P4PreprocessError, P4SyntaxError, P4TypeError, P4UnsupportedError, load_program,
    load_program_text,
)
from p4switch.pipeline import Pipeline
from p4switch.tables import Lpm, TableEntry

PROGRAMS = Path(__file__).parent / "p4programs"
ROUTER = (PROGRAMS / "ipv4_router.p4").read_text()
FORWARD = "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;"  # line 73 of ipv4_router.p4


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def load_modified(old: str, new: str):
    assert old in ROUTER
    return load_program_text(ROUTER.replace(old, new, 1), "router.p4")


@pytest.mark.parametrize("old,new,error,message", [
    (FORWARD, FORWARD[:-1], P4SyntaxError, r"router\.p4:74:5: syntax error: unexpected '}'; expected ';'"),
    (FORWARD, "hdr.ipv4.ttl = hdr.ipv4.srcAddr;", P4TypeError,
     r"router\.p4:73:9: type error: expected bit<8>, got bit<32>"),
    (FORWARD, "hdr.ipv4.ttl = hdr.ipv4.ttl + hdr.ipv4.totalLen;", P4TypeError,
     r"router\.p4:73:24: type error: cannot apply \+ to bit<8> and bit<16>"),
    (FORWARD, "hdr.ipv4.tll = 1;", P4TypeError, r"router\.p4:73:18: type error: ipv4_t has no field tll"),
    (FORWARD, "foo = 1;", P4TypeError, r"router\.p4:73:9: type error: unknown name foo"),
    ("macAddr_t dstAddr;", "macAdr_t dstAddr;", P4SyntaxError,
     r"router\.p4:12:5: syntax error: unexpected 'macAdr_t' \(not a declared type\)"),
    ("TYPE_IPV4: parse_ipv4;", "TYPE_IPV4: parse_ip;", P4TypeError,
     r"router\.p4:44:24: type error: unknown parser state parse_ip"),
    ("actions = { ipv4_forward; drop; NoAction; }", "actions = { ipv4_fwd; drop; }", P4TypeError,
     r"router\.p4:77:21: type error: unknown action ipv4_fwd"),
    ("if (hdr.ipv4.isValid()) {", "if (hdr.ipv4.ttl) {", P4TypeError,
     r"router\.p4:82:13: type error: expected bool, got bit<8>"),
    ("drop();\n            } else", "drop(1);\n            } else", P4TypeError,
     r"router\.p4:84:17: type error: action MyIngress.drop takes 0 argument\(s\), got 1"),
    ("hdr.ipv4.dstAddr: lpm;", "hdr.ipv4.dstAddr: fuzzy;", P4TypeError,
     r"router\.p4:76:35: type error: unknown match kind fuzzy"),
    ("apply { }", "apply { ` }", P4SyntaxError, r"router\.p4:96:13: syntax error: unexpected character '`'"),
    ("size = 1024;", "implementation = foo;", P4TypeError,
     r"router\.p4:78:26: type error: implementation must name an action_profile or action_selector"),
    ("size = 1024;", "implementation = direct_counter(CounterType.packets);", P4TypeError,
     r"router\.p4:78:26: type error: implementation must be an action_profile or action_selector"),
    ("standard_metadata.egress_spec = port;", "port = 1;", P4TypeError,
     r"router\.p4:70:9: type error: port is read-only \(an `in` or action data parameter\)"),
    ("packet.emit(hdr.ipv4);", "hdr.ipv4.setInvalid();", P4TypeError,
     r"router\.p4:112:9: type error: setInvalid on a read-only header"),
    ("state start {", "value_set<bool>(4) vs;\n    state start {", P4UnsupportedError,
     r"router\.p4:41:5: unsupported: value_set of bool: use bit<W> or a struct of bit<W>"),
    (FORWARD, "break;", P4TypeError, r"router\.p4:73:9: type error: break outside a for loop"),
    (FORWARD, "for (bit<8> i in 1 .. 3) { continue; } hdr.ipv4.ttl -= true;", P4TypeError,
     r"router\.p4:73:48: type error: "),
    (FORWARD, "for (bool b in 1 .. 3) { }", P4TypeError,
     r"router\.p4:73:9: type error: for \.\.\. in a \.\. b needs a bit<W> or int<W> variable, not bool"),
])
def test_error_messages_name_file_line_column(old, new, error, message):
    with pytest.raises(error, match=message):
        load_modified(old, new)


def test_line_numbers_in_messages_are_right():
    assert line_of(ROUTER, FORWARD) == 73
    assert line_of(ROUTER, "apply { }") == 96


def test_unexpected_end_of_input():
    with pytest.raises(P4SyntaxError, match=r"router\.p4:\d+:\d+: syntax error: unexpected end of input"):
        load_program_text(ROUTER[:2000], "router.p4")


def test_missing_include_and_preprocessor_errors():
    with pytest.raises(P4PreprocessError, match=r"x\.p4:2:11: .*include file not found: nosuch\.p4"):
        load_program_text("#include <core.p4>\n#include <nosuch.p4>\n", "x.p4")
    with pytest.raises(P4PreprocessError, match=r"x\.p4:1:1: preprocessor error: #error stop here"):
        load_program_text("#error stop here\n", "x.p4")


def test_errors_in_included_files_point_into_them(tmp_path):
    (tmp_path / "headers.p4").write_text("header h_t {\n    bit<8> a;\n    bit<8> a;\n}\n")
    main = tmp_path / "main.p4"
    main.write_text('#include <core.p4>\n#include <v1model.p4>\n#include "headers.p4"\n')
    with pytest.raises(P4TypeError, match=r"headers\.p4:3:5: type error: duplicate field a"):
        load_program(main)


def test_defines_includes_and_conditionals(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "ports.p4").write_text("#define OUT_PORT 5\n")
    src = ROUTER.replace("#include <v1model.p4>", '#include <v1model.p4>\n#include "ports.p4"').replace(
        "standard_metadata.egress_spec = port;",
        "#if defined(FIXED)\n        standard_metadata.egress_spec = OUT_PORT;\n#else\n"
        "        standard_metadata.egress_spec = port;\n#endif")
    prog_file = tmp_path / "router.p4"
    prog_file.write_text(src)
    for defines, expected_port in (({}, 2), ({"FIXED": "1"}, 5)):
        pipe = Pipeline(load_program(prog_file, [inc], defines))
        pipe.tables["MyIngress.ipv4_lpm"].insert(
            TableEntry((Lpm(0x0A000000, 8),), 0, "MyIngress.ipv4_forward", (1, 2)))
        pkt = raw(Ether(dst="00:00:00:00:00:01", src="00:00:00:00:00:02")
                  / IP(src="10.0.0.1", dst="10.0.1.7"))
        out = pipe.process(pkt, 1)
        assert [p for p, _ in out] == [expected_port]


GENERICS = """
#include <core.p4>
#include <v1model.p4>
const bit<32> LIMIT = 1024;
header h_t { bit<32> x; bit<16> y; }
struct hs { h_t h; }
struct m_t { bit<32> shifted; bit<1> less; }
parser P(packet_in p, out hs hdr, inout m_t m, inout standard_metadata_t sm) {
    state start { p.extract(hdr.h); transition accept; }
}
control V(inout hs hdr, inout m_t m) { apply { } }
control I(inout hs hdr, inout m_t m, inout standard_metadata_t sm) {
    register<bit<32>>(LIMIT) r;
    apply {
        m.shifted = hdr.h.x >> 4;
        m.less = (bit<1>)((bit<32>)hdr.h.y < LIMIT);
        hdr.h.x = m.shifted;
        hdr.h.y = (bit<16>)m.less;
        sm.egress_spec = 1;
    }
}
control E(inout hs hdr, inout m_t m, inout standard_metadata_t sm) { apply { } }
control C(inout hs hdr, inout m_t m) { apply { } }
control D(packet_out p, in hs hdr) { apply { p.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_angle_brackets_shift_versus_generics_versus_less_than():
    pipe = Pipeline(load_program_text(GENERICS, "g.p4"))
    out = pipe.process(bytes.fromhex("00001230" "0005"), 0)
    assert out == [(1, bytes.fromhex("00000123" "0001"))]
    assert pipe.registers["I.r"].size == 1024


def test_block_parameter_types_are_checked():
    bad = GENERICS.replace("control E(inout hs hdr", "control E(inout m_t hdr")
    with pytest.raises(P4TypeError, match=r"g\.p4:\d+:\d+: type error: E: parameter hdr has type m_t, expected hs"):
        load_program_text(bad, "g.p4")


def test_program_without_main_is_rejected():
    with pytest.raises(P4TypeError, match="no `main`"):
        load_program_text(GENERICS.replace("V1Switch(P(), V(), I(), E(), C(), D()) main;", ""), "g.p4")


def test_constructor_parameters_of_controls():
    egress = ("control MyEgress(inout headers hdr, inout metadata meta,\n"
              "                 inout standard_metadata_t standard_metadata) {\n    apply { }")
    assert egress in ROUTER
    src = ROUTER.replace(egress, (
        "control Mark(inout bit<8> v)(bit<8> by) { apply { v = v + by; } }\n"
        "control MyEgress(inout headers hdr, inout metadata meta,\n"
        "                 inout standard_metadata_t standard_metadata)(bit<8> base) {\n"
        "    Mark(8w3) m;\n"
        "    apply { hdr.ipv4.diffserv = base; m.apply(hdr.ipv4.diffserv); }"))
    pipe = Pipeline(load_program_text(src.replace("MyEgress(), ", "MyEgress(8w40), "), "c.p4"))
    pipe.tables["MyIngress.ipv4_lpm"].insert(TableEntry((Lpm(0, 0),), 0, "MyIngress.ipv4_forward", (1, 2)))
    out = pipe.process(raw(Ether(dst="00:00:00:00:00:01", src="00:00:00:00:00:02") / IP()), 1)
    assert out[0][1][15] == 43
    with pytest.raises(P4TypeError, match=r"c\.p4:\d+:\d+: type error: MyEgress takes 1 constructor argument"):
        load_program_text(src, "c.p4")


def test_generic_function_type_arguments_are_inferred_or_asked_for():
    source = (PROGRAMS / "lang_generics.p4").read_text()
    bad = source.replace("swap<bit<16>>(hdr.g.c, hdr.g.d);", "hdr.g.c = choose(true, 1, 2);")
    with pytest.raises(P4TypeError, match=r"cannot infer type T of choose from an integer literal"):
        load_program_text(bad, "g.p4")
    bad = source.replace("swap<bit<16>>(hdr.g.c, hdr.g.d);", "swap<bit<16>, bit<8>>(hdr.g.c, hdr.g.d);")
    with pytest.raises(P4TypeError, match=r"function swap takes 1 type argument\(s\), got 2"):
        load_program_text(bad, "g.p4")
    bad = source.replace("swap<bit<16>>(hdr.g.c, hdr.g.d);", "swap<bit<8>>(hdr.g.c, hdr.g.d);")
    with pytest.raises(P4TypeError, match=r"has type bit<16>, expected bit<8>"):
        load_program_text(bad, "g.p4")
