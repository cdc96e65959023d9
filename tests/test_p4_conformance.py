"""Standard P4-16 constructs that p4c's BMv2 back end accepts, each in a small program of our
own: bound action arguments, legacy table syntax, generic package instances, values of
calls, legacy entry priorities, direct invocation, control-typed constructor parameters,
parser value sets, inline action profiles and digests of list expressions."""

from __future__ import annotations

import pytest

from p4switch.frontend import P4UnsupportedError, load_program_text
from p4switch.p4info import build_p4info
from p4switch.pipeline import Pipeline
from p4switch.tables import Exact, TableEntry

TAIL = """
control V(inout hs h, inout ms m) { apply { } }
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out p, in hs h) { apply { p.emit(h); } }
"""
HEAD = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header tag_t { bit<8> v; }
"""


def pipeline(body: str, main: str = "V1Switch(P(), V(), I(), E(), C(), D()) main;") -> Pipeline:
    return Pipeline(load_program_text(HEAD + body + TAIL + main, "conf.p4"))


def frame(eth_type: int, rest: bytes = b"") -> bytes:
    return bytes(range(1, 13)) + eth_type.to_bytes(2, "big") + rest


SIMPLE_PARSER = """
parser P(packet_in p, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { p.extract(h.eth); transition accept; }
}
"""


def test_directional_arguments_bound_in_the_actions_list_and_default():
    pl = pipeline("""
struct hs { eth_t eth; }
struct ms { bit<8> seen; }
action drop_it(inout standard_metadata_t smeta) { mark_to_drop(smeta); }
""" + SIMPLE_PARSER + """
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action set_byte(out bit<16> field, bit<16> value) { field = value; }
    table t() {
        key = { h.eth.dst: exact; }
        actions = { set_byte(h.eth.type); drop_it(sm); }
        default_action = drop_it(sm);
    }
    apply { sm.egress_spec = 3; t.apply(); }
}
""")
    assert pl.info.actions["I.set_byte"].params[0].name == "value"  # only action data in P4Info
    assert pl.process(frame(0x0800), 0) == []  # the default drops through the bound parameter
    pl.tables["I.t"].insert(TableEntry((Exact(0x0102030405_06),), 0, "I.set_byte", (0xBEEF,)))
    assert pl.process(frame(0x0800), 0) == [(3, frame(0xBEEF))]


def test_generic_package_instance_and_member_of_a_lookahead():
    pl = pipeline("""
struct hs { eth_t eth; tag_t tag; }
struct ms { }
header nibbles_t { bit<4> hi; bit<4> lo; }
parser P(packet_in p, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start {
        p.extract(h.eth);
        transition select(p.lookahead<nibbles_t>().lo) { 5: with_tag; default: accept; }
    }
    state with_tag { p.extract(h.tag); transition accept; }
}
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply { sm.egress_spec = h.tag.isValid() ? 9w2 : 9w1; }
}
""", "V1Switch<hs, ms>(P(), V(), I(), E(), C(), D()) main;")
    assert pl.process(frame(1, b"\x35"), 0)[0][0] == 2
    assert pl.process(frame(1, b"\x53"), 0)[0][0] == 1


def test_legacy_priority_annotation_smallest_number_wins():
    pl = pipeline("""
struct hs { eth_t eth; }
struct ms { }
""" + SIMPLE_PARSER + """
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action send(bit<9> port) { sm.egress_spec = port; }
    table t {
        key = { h.eth.type: ternary; }
        actions = { send; }
        default_action = send(0);
        const entries = {
            0x1111 &&& 0x000F : send(1) @priority(3);
            0x1181            : send(2);
            0x1181 &&& 0xF00F : send(3) @priority(1);
        }
    }
    apply { t.apply(); }
}
""")
    # the unannotated entry ranks by position (2): between @priority(1) and @priority(3)
    assert pl.process(frame(0x0001), 0)[0][0] == 1
    assert pl.process(frame(0x1001), 0)[0][0] == 3
    assert pl.process(frame(0x1181), 0)[0][0] == 3
    assert pl.process(frame(0x2222), 0)[0][0] == 0


def test_direct_invocation_and_control_constructor_parameters():
    pl = pipeline("""
struct hs { eth_t eth; }
struct ms { }
control Step(inout bit<16> x);
control AddOne(inout bit<16> x) {
    counter(32w65536, CounterType.packets) seen;
    apply { x = x + 1; seen.count((bit<32>)x); }
}
control ShiftThen(inout bit<16> x)(Step next) { apply { x = x << 1; next.apply(x); } }
control Twice(inout bit<16> x) {
    AddOne() add;
    ShiftThen(add) first;
    ShiftThen(add) second;
    apply { first.apply(x); second.apply(x); }
}
""" + SIMPLE_PARSER + """
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply { Twice.apply(h.eth.type); sm.egress_spec = 1; }
}
""")
    # ((0x0100 << 1) + 1) << 1 + 1, with one shared counter counting both steps
    assert pl.process(frame(0x0100), 0) == [(1, frame(0x0403))]
    counter = next(iter(pl.counters.values()))
    assert counter.packets[0x0201] == 1 and counter.packets[0x0403] == 1


def test_older_standard_metadata_fields_are_accepted_and_ignored():
    pl = pipeline("""
struct hs { eth_t eth; }
struct ms { }
""" + SIMPLE_PARSER + """
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply { sm.drop = 1; clone(CloneType.I2E, sm.clone_spec); sm.egress_spec = 4; }
}
""")
    assert pl.process(frame(7), 0) == [(4, frame(7))]  # no session 0: no clone; `drop` is inert


VALUE_SET_PROGRAM = """
struct hs { eth_t eth; tag_t tag; }
struct pair_t { @match(ternary) bit<16> type; bit<8> first; }
struct ms { }
parser P(packet_in p, out hs h, inout ms m, inout standard_metadata_t sm) {
    value_set<bit<16>>(4) tagged;
    value_set<pair_t>(2) pairs;
    state start {
        p.extract(h.eth);
        transition select(h.eth.type) { tagged: parse_tag; 0x0800: accept; default: other; }
    }
    state other {
        transition select(h.eth.type, p.lookahead<bit<8>>()) { pairs: parse_tag; default: accept; }
    }
    state parse_tag { p.extract(h.tag); transition accept; }
}
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply { sm.egress_spec = h.tag.isValid() ? 9w2 : 9w1; }
}
"""


def test_value_sets_match_what_the_control_plane_adds():
    pl = pipeline(VALUE_SET_PROGRAM)
    tagged, pairs = pl.value_sets["P.tagged"], pl.value_sets["P.pairs"]
    assert pl.process(frame(0x1234, b"\x07"), 0)[0][0] == 1
    tagged.add((0x1234,))
    assert pl.process(frame(0x1234, b"\x07"), 0)[0][0] == 2
    assert pl.process(frame(0x88AA, b"\x07"), 0)[0][0] == 1
    pairs.add(((0x8800, 0xFF00), 7))
    assert pl.process(frame(0x88AA, b"\x07"), 0)[0][0] == 2
    assert pl.process(frame(0x88AA, b"\x08"), 0)[0][0] == 1
    tagged.clear()
    assert pl.process(frame(0x1234, b"\x07"), 0)[0][0] == 1


def test_value_sets_in_p4info_and_their_limits():
    prog = load_program_text(HEAD + VALUE_SET_PROGRAM + TAIL +
                             "V1Switch(P(), V(), I(), E(), C(), D()) main;", "conf.p4")
    sets = {v.preamble.name: v for v in build_p4info(prog).value_sets}
    assert sets["P.pairs"].size == 2 and sets["P.pairs"].preamble.id >> 24 == 0x03
    assert [(m.name, m.bitwidth, m.match_type) for m in sets["P.pairs"].match] == [
        ("type", 16, 4), ("first", 8, 2)]  # TERNARY, EXACT
    vs = Pipeline(prog).value_sets["P.pairs"]
    vs.add(((1, 1), 1))
    vs.add(((2, 2), 2))
    with pytest.raises(Exception, match="full"):
        vs.add(((3, 3), 3))
    with pytest.raises(Exception, match="does not fit"):
        Pipeline(prog).value_sets["P.tagged"].add((1 << 16,))


def test_inline_action_profile_is_named_after_its_table():
    body = """
struct hs { eth_t eth; }
struct ms { }
""" + SIMPLE_PARSER + """
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table t {
        key = { h.eth.type: exact; }
        actions = { fwd; NoAction; }
        implementation = action_profile(32w16);
    }
    apply { t.apply(); }
}
"""
    pl = pipeline(body)
    profile = pl.action_profiles["I.t"]
    assert profile.size == 16
    profile.insert_member(1, "I.fwd", (5,))
    pl.tables["I.t"].insert(TableEntry((Exact(0x0800),), 0, "", (), member_id=1))
    assert pl.process(frame(0x0800), 0) == [(5, frame(0x0800))]
    p4info = build_p4info(pl.program)
    (ap,) = p4info.action_profiles
    (table,) = p4info.tables
    assert ap.preamble.name == "I.t" and list(ap.table_ids) == [table.preamble.id]
    assert table.implementation_id == ap.preamble.id


def test_digest_of_a_list_expression():
    body = """
struct hs { eth_t eth; }
struct learn_t { bit<48> src; bit<9> port; }
struct ms { }
""" + SIMPLE_PARSER + """
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply { DIGEST; sm.egress_spec = 1; }
}
"""
    pl = pipeline(body.replace("DIGEST", "digest<learn_t>(1, {h.eth.src, sm.ingress_port})"))
    got: list = []
    pl.digest_sink = lambda name, values: got.append((name, values))
    pl.process(frame(0x0800), 9)
    assert got == [("learn_t", (0x0708090A0B0C, 9))]
    # without a type, a tuple digest named as p4c names it
    untyped = pipeline(body.replace("DIGEST", "digest(1, {h.eth.src, sm.ingress_port})"))
    got.clear()
    untyped.digest_sink = lambda name, values: got.append((name, values))
    untyped.process(frame(0x0800), 9)
    assert got == [("digest_0", (0x0708090A0B0C, 9))]
    with pytest.raises(P4UnsupportedError, match=r"conf\.p4:\d+:\d+: unsupported: digest data must "
                                                 r"be a struct or a list"):
        pipeline(body.replace("DIGEST", "digest(1, h.eth.src)"))


def test_select_without_a_matching_case_is_error_no_match():
    pl = pipeline("""
struct hs { eth_t eth; tag_t tag; }
struct ms { }
parser P(packet_in p, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start {
        p.extract(h.eth);
        transition select(h.eth.type) { 0x0800: accept; 0x8100: pair; }
    }
    state pair {
        transition select(h.eth.src[7:0], p.lookahead<bit<8>>()) { (12, 1): tagged; (12, 2): accept; }
    }
    state tagged { p.extract(h.tag); transition accept; }
}
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        if (sm.parser_error == error.NoMatch) { sm.egress_spec = 3; }
        else if (h.tag.isValid()) { sm.egress_spec = 2; }
        else { sm.egress_spec = 1; }
    }
}
""")
    assert pl.process(frame(0x0800), 0)[0][0] == 1
    assert pl.process(frame(0x0806), 0)[0][0] == 3  # one key, no case: NoMatch, not a bare reject
    assert pl.process(frame(0x8100, b"\x01"), 0)[0][0] == 2
    assert pl.process(frame(0x8100, b"\x02"), 0)[0][0] == 1
    assert pl.process(frame(0x8100, b"\x05"), 0)[0][0] == 3


def test_return_in_actions_and_controls_ends_only_that_body():
    # also: `h.eth.type = value;` once made the lexer take `value` for a type name
    pl = pipeline("""
struct hs { eth_t eth; }
struct ms { bit<8> steps; }
""" + SIMPLE_PARSER + """
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action early(bit<16> value) {
        h.eth.type = value;
        if (value == 1) { return; }
        h.eth.type = value + 0x100;
    }
    action bound_early(inout bit<48> field) {
        field = 0xAA;
        if (h.eth.type == 0x101) { return; }
        field = 0xBB;
    }
    table t {
        key = { h.eth.dst: exact; }
        actions = { early; bound_early(h.eth.src); }
        default_action = early(1);
    }
    apply {
        sm.egress_spec = 1;
        t.apply();
        if (h.eth.type == 0x0001) { return; }
        sm.egress_spec = 2;
    }
}
""")
    out = pl.process(frame(0x0800), 0)
    assert out == [(1, frame(0x0001))]  # the action's return skipped its tail, the control's too
    pl.tables["I.t"].set_default("I.early", (5,))
    assert pl.process(frame(0x0800), 0) == [(2, frame(0x0105))]
    pl.tables["I.t"].set_default("I.bound_early", ())
    port, data = pl.process(frame(0x0101), 0)[0]
    assert port == 2 and data[6:12] == (0xAA).to_bytes(6, "big")  # copied out after `return`
    port, data = pl.process(frame(0x0800), 0)[0]
    assert data[6:12] == (0xBB).to_bytes(6, "big")
